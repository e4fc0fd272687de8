// The file side of Note [Checkpoint layout], shared by the C++ Checkpointer and
// the Python package's: private temporary files and directories, atomic
// writes, step directory names, pruning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace slurmddp::resume {

// Owns a file descriptor; closes it on destruction.
class FileFd {
 public:
  FileFd() = default;
  explicit FileFd(int fd) : fd_(fd) {}
  FileFd(FileFd&& o) noexcept : fd_(o.release()) {}
  FileFd& operator=(FileFd&& o) noexcept;
  FileFd(const FileFd&) = delete;
  FileFd& operator=(const FileFd&) = delete;
  ~FileFd();

  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// A new file of the user's alone (Note [Planted files]): <dir>/.<name>.tmp.<pid>.<random>,
// opened read-write with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode 0600. Throws
// Error naming the path and the errno text.
// The primitive: opens `path` as a new file (O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW|
// O_CLOEXEC, 0600); throws Error naming it when anything, a symlink included, is there.
FileFd create_private_file(const std::string& path);
struct TempFile {
  FileFd fd;
  std::string path;
};
TempFile create_temp(const std::string& dir, const std::string& name);

// The last steps of an atomic write: fsync `temp`, close it, rename it to
// <dir>/<name>, fsync `dir`. Removes the temporary file when a step fails.
void commit_temp(TempFile temp, const std::string& dir, const std::string& name);

// Like commit_temp, but never replaces an existing <dir>/<name>: returns
// false (and removes `temp`) when one is there.
bool publish_new(TempFile temp, const std::string& dir, const std::string& name);

// 16 hex digits nobody can guess in advance (getrandom; the clock and a
// counter where the kernel has no entropy to give yet).
std::string random_hex16();

// Writes all of [data, data + n) to fd; throws Error naming `path`.
void write_all(int fd, const char* data, size_t n, const std::string& path);

// A new temporary file for <dir>/<name> (create_temp) holding `bytes`; removed
// again when the write fails.
TempFile write_temp(const std::string& dir, const std::string& name, const std::string& bytes);

// Writes `bytes` to <dir>/<name> through write_temp and commit_temp.
void write_atomic(const std::string& dir, const std::string& name, const std::string& bytes);

// Creates `path` and its missing parents with mode 0700 (Note [Planted
// files]); directories that exist keep their mode. Throws Error naming the
// path that could not be made or that is not a directory.
void make_private_dirs(const std::string& path);

// The whole file, or nullopt when it cannot be opened (errno says why).
std::optional<std::string> read_file(const std::string& path);

// "step-<N>", and back (-1 for a name that is not one).
std::string step_dir_name(int64_t step);
int64_t step_of(const std::string& name);

// Keeps the `keep` newest complete steps (those with a COMPLETE marker) up to
// `current`; removes older ones and incomplete ones below `current`.
void prune(const std::string& dir, int64_t current, int keep);

}  // namespace slurmddp::resume
