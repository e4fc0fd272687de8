// One rank as a child process: fork/exec with stdout on a pipe and stderr in
// a temporary file. Every read and wait has a deadline; a child still running
// when the object dies is SIGKILLed by its PID (and reaped).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace slurmddp::testing {

class RankProcess {
 public:
  explicit RankProcess(const std::vector<std::string>& argv) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) std::abort();
    const char* tmp = std::getenv("TMPDIR");
    std::string path =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/grad-sync-mp-XXXXXX";
    const int err = mkstemp(path.data());
    if (err < 0) std::abort();
    err_path_ = path;
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err, 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    close(err);
    stdout_ = out[0];
  }

  ~RankProcess() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(stdout_);
    unlink(err_path_.c_str());
  }

  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  pid_t pid() const { return pid_; }

  // The next stdout line, or nullopt at EOF or when `deadline` passes.
  std::optional<std::string> read_line(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      const auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(stdout_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // The exit code (128 + signal when killed), or nullopt when it still ran at
  // `deadline` (it is then SIGKILLed).
  std::optional<int> wait(std::chrono::steady_clock::time_point deadline) {
    if (exited_) return code_;
    for (;;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return code_;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        exited_ = true;
        return std::nullopt;
      }
      pollfd none{-1, 0, 0};
      poll(&none, 0, 5);  // a pause between checks of the exit status
    }
  }

  std::string stderr_text() const {
    std::ifstream f(err_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  std::string err_path_;
  std::string buffer_;
  bool exited_ = false;
  int code_ = -1;
};

}  // namespace slurmddp::testing
