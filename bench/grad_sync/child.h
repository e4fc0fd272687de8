// A worker process driven line by line: stdin and stdout on pipes, stderr
// inherited. Reads have deadlines; a worker still running when the object
// dies gets SIGKILL (by its PID) and is reaped.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace slurmddp::bench {

class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      throw std::runtime_error("bench: failed to create pipes");
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("bench: failed to fork");
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      execv(args[0], args.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }

  ~Child() {
    if (stdin_ >= 0) close(stdin_);
    if (!reaped_) {
      // Give it a moment to leave after closing its stdin, then make sure.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < deadline) {
        if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
          reaped_ = true;
          break;
        }
        pollfd none{-1, 0, 0};
        poll(&none, 0, 20);  // a pause between checks of the exit status
      }
      if (!reaped_) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
    close(stdout_);
  }

  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  void send(const std::string& line) {
    const std::string l = line + "\n";
    size_t done = 0;
    while (done < l.size()) {
      const ssize_t n = ::write(stdin_, l.data() + done, l.size() - done);
      if (n <= 0) throw std::runtime_error("bench: a worker closed its stdin");
      done += static_cast<size_t>(n);
    }
  }

  // The next line, or nullopt at EOF or after `within`.
  std::optional<std::string> read_line(std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
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

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  bool reaped_ = false;
  std::string buffer_;
};

}  // namespace slurmddp::bench
