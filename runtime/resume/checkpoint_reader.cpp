#include "resume/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "slurmddp/error.h"

namespace slurmddp::resume {

namespace {

// Reads up to n bytes at offset; fewer only at the end of the file.
size_t pread_full(int fd, char* buf, size_t n, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, buf + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      throw Error("checkpoint " + path + " is unreadable: " + std::strerror(err) + " at offset " +
                  std::to_string(offset + done));
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

std::string read_string(int fd, uint64_t offset, size_t n, const std::string& path) {
  std::string s(n, '\0');
  s.resize(pread_full(fd, s.data(), n, offset, path));
  return s;
}

}  // namespace

uint64_t checksum_of(int fd, uint64_t n, const std::string& path, size_t chunk) {
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(n, chunk)));
  uint64_t h = kFnvOffset;
  for (uint64_t at = 0; at < n;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n - at, buf.size()));
    const size_t got = pread_full(fd, buf.data(), want, at, path);
    if (got != want) {
      throw Error("checkpoint " + path + " is damaged: it ended at " + std::to_string(at + got) +
                  " bytes while being read; expected " + std::to_string(n));
    }
    h = fnv1a64(buf.data(), got, h);
    at += got;
  }
  return h;
}

RankFileReader::RankFileReader(const std::string& path, bool verify) : path_(path) {
  fd_ = FileFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd_.get() < 0 || ::fstat(fd_.get(), &st) != 0) {
    int err = errno;
    throw Error("checkpoint " + path + " is missing or unreadable (" + std::strerror(err) +
                "); the directory must be shared by every node");
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error("checkpoint " + path + " is not a regular file (mode " +
                std::to_string(st.st_mode & S_IFMT) + ")");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  const std::string head = read_string(fd_.get(), 0, std::min<uint64_t>(size, kHeadBytes), path);
  const size_t tail_bytes = std::min<uint64_t>(size, kTailBytes);
  const std::string tail = read_string(fd_.get(), size - tail_bytes, tail_bytes, path);
  layout_ = read_checksum_line(path, head, tail, size);
  if (verify) check_sum(path, layout_, checksum_of(fd_.get(), layout_.summed_bytes, path));
  read_header(path, head, &layout_);
}

std::string RankFileReader::sampler() const {
  std::string s(layout_.sampler_bytes, '\0');
  read_at(layout_.sampler_offset, s.data(), s.size());
  return s;
}

void RankFileReader::read_at(uint64_t offset, void* buf, size_t n) const {
  const size_t got = pread_full(fd_.get(), static_cast<char*>(buf), n, offset, path_);
  if (got != n) {
    throw Error("checkpoint " + path_ + " is damaged: it ended at " + std::to_string(offset + got) +
                " bytes while being read; expected " + std::to_string(offset + n));
  }
}

}  // namespace slurmddp::resume
