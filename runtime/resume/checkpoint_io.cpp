#include "resume/checkpoint_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "slurmddp/error.h"

namespace slurmddp::resume {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  int err = errno;
  throw Error("checkpoint: failed to " + what + " " + path + ": " + std::strerror(err));
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_errno("open the directory", dir);
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    fail_errno("fsync the directory", dir);
  }
  ::close(fd);
}

}  // namespace

// Note [Checkpoint layout]: temporary name, fsync, rename, fsync the directory.
void write_atomic(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::string path = dir + "/" + name;
  std::string tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno("create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = err;
      fail_errno("write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = err;
    fail_errno("fsync", tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    fail_errno("rename into place", path);
  }
  fsync_dir(dir);
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string step_dir_name(int64_t step) {
  return "step-" + std::to_string(step);
}

int64_t step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (int64_t{1} << 56)) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

void prune(const std::string& dir, int64_t current, int keep) {
  std::vector<int64_t> complete;
  std::vector<int64_t> remove;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    int64_t s = step_of(e.path().filename().string());
    if (s < 0 || s > current) continue;
    if (fs::exists(e.path() / "COMPLETE")) {
      complete.push_back(s);
    } else if (s < current) {
      remove.push_back(s);
    }
  }
  std::sort(complete.rbegin(), complete.rend());
  for (size_t i = static_cast<size_t>(keep); i < complete.size(); ++i) {
    remove.push_back(complete[i]);
  }
  for (int64_t s : remove) fs::remove_all(dir + "/" + step_dir_name(s), ec);
}

}  // namespace slurmddp::resume
