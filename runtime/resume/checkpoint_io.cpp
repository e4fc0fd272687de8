#include "resume/checkpoint_io.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "slurmddp/error.h"

namespace slurmddp::resume {

namespace fs = std::filesystem;

namespace {

constexpr int kPrivateFileFlags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  int err = errno;
  throw Error("checkpoint: failed to " + what + " " + path + ": " + std::strerror(err));
}

void fsync_dir(const std::string& dir) {
  FileFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno("open the directory", dir);
  if (::fsync(fd.get()) != 0) fail_errno("fsync the directory", dir);
}

}  // namespace

std::string random_hex16() {
  static std::atomic<uint64_t> counter{0};
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v)) {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    v = (static_cast<uint64_t>(ts.tv_sec) << 32) ^ static_cast<uint64_t>(ts.tv_nsec) ^
        (counter.fetch_add(1) * 0x9e3779b97f4a7c15ULL);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

FileFd& FileFd::operator=(FileFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

FileFd::~FileFd() {
  if (fd_ >= 0) ::close(fd_);
}

// Note [Planted files]
//   A checkpoint directory may sit in a directory others can write (a group's
//   project space), and its files hold the model's weights. So a temporary
//   file is never opened by a name someone could have planted first: each is
//   a new name (pid and 64 random bits) opened with O_CREAT|O_EXCL|O_NOFOLLOW,
//   which fails on anything already there (a symlink to the user's ~/.bashrc
//   included) instead of following it; a name taken is retried with another.
//   rename() then replaces the final name itself, never what a symlink there
//   points to. Files are created 0600 and the directories the package creates
//   (the job's directory, step directories, their missing parents) 0700: the
//   checkpoints are the user's alone, whatever the umask. A requeued job runs
//   as the same user and reads them; to share them, copy them, or create the
//   directory beforehand with the mode wanted: directories that exist keep
//   their mode and owner.
FileFd create_private_file(const std::string& path) {
  FileFd fd(::open(path.c_str(), kPrivateFileFlags, 0600));
  if (fd.get() < 0) fail_errno("create", path);
  return fd;
}

TempFile create_temp(const std::string& dir, const std::string& name) {
  constexpr int kTries = 8;
  const std::string prefix = dir + "/." + name + ".tmp." + std::to_string(::getpid()) + ".";
  for (int i = 0;; ++i) {
    TempFile t;
    t.path = prefix;
    t.path += random_hex16();
    t.fd = FileFd(::open(t.path.c_str(), kPrivateFileFlags, 0600));
    if (t.fd.get() >= 0) return t;
    if (errno != EEXIST || i + 1 == kTries) fail_errno("create", t.path);  // else another name
  }
}

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail_errno("write", path);
    if (w == 0) {
      errno = EIO;
      fail_errno("write", path);
    }
    done += static_cast<size_t>(w);
  }
}

namespace {

// The last steps of every write: fsync and close `temp`, then put it at
// <dir>/<name> (rename(2), or link(2), which never replaces what is there,
// when `replace` is false: then false when something is there), then fsync
// `dir`. The temporary file is removed when a step fails.
bool place(TempFile temp, const std::string& dir, const std::string& name, bool replace) {
  const std::string path = dir + "/" + name;
  bool placed = true;
  try {
    if (::fsync(temp.fd.get()) != 0) fail_errno("fsync", temp.path);
    if (::close(temp.fd.release()) != 0) fail_errno("close", temp.path);
    if (replace) {
      if (::rename(temp.path.c_str(), path.c_str()) != 0) fail_errno("rename into place", path);
    } else {
      placed = ::link(temp.path.c_str(), path.c_str()) == 0;
      if (!placed && errno != EEXIST) fail_errno("create", path);
    }
  } catch (...) {
    ::unlink(temp.path.c_str());
    throw;
  }
  if (!replace) ::unlink(temp.path.c_str());
  fsync_dir(dir);
  return placed;
}

}  // namespace

void commit_temp(TempFile temp, const std::string& dir, const std::string& name) {
  place(std::move(temp), dir, name, true);
}

bool publish_new(TempFile temp, const std::string& dir, const std::string& name) {
  return place(std::move(temp), dir, name, false);
}

TempFile write_temp(const std::string& dir, const std::string& name, const std::string& bytes) {
  TempFile temp = create_temp(dir, name);
  try {
    write_all(temp.fd.get(), bytes.data(), bytes.size(), temp.path);
  } catch (...) {
    ::unlink(temp.path.c_str());
    throw;
  }
  return temp;
}

// Note [Checkpoint layout]: temporary name, fsync, rename, fsync the directory.
void write_atomic(const std::string& dir, const std::string& name, const std::string& bytes) {
  commit_temp(write_temp(dir, name, bytes), dir, name);
}

void make_private_dirs(const std::string& path) {
  if (path.empty()) throw Error("checkpoint: failed to create a directory: the path is empty");
  // each prefix ending before a '/', then the whole path
  for (size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    const std::string part = at == std::string::npos ? path : path.substr(0, at);
    if (!part.empty() && part.back() != '/' && ::mkdir(part.c_str(), 0700) != 0) {
      if (errno != EEXIST) fail_errno("create the directory", part);
      struct stat st {};
      if (::stat(part.c_str(), &st) != 0) fail_errno("look at", part);
      if (!S_ISDIR(st.st_mode)) {
        std::string what = "checkpoint: failed to create the directory " + path;
        what += ": ";
        what += part;
        what += " exists and is not a directory";
        throw Error(what);
      }
    }
    if (at == std::string::npos) break;
  }
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
