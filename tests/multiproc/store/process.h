// A child process for multi-process tests: fork/exec with its stdin and
// stdout on pipes and its stderr in a temporary file; every wait has a
// deadline, and a child still running at destruction is SIGKILLed (by PID).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace slurmddp::testing {

class Process {
 public:
  // Runs `argv` with the current environment plus `env` (an empty value
  // removes the variable).
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    // A child that died must fail the test, not kill it through its stdin pipe.
    signal(SIGPIPE, SIG_IGN);
    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) std::abort();
    const char* tmp = std::getenv("TMPDIR");
    std::string path =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/store-mp-stderr-XXXXXX";
    int err = mkstemp(path.data());
    if (err < 0) std::abort();
    err_path_ = path;
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      std::string key = kv.substr(0, kv.find('='));
      if (env.count(key) == 0) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) {
      if (!v.empty()) envs.push_back(k + "=" + v);
    }
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    std::vector<char*> cenv;
    for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err, 2);
      execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err);
    stdin_ = in[1];
    stdout_ = out[0];
    started_ = std::chrono::steady_clock::now();
  }

  ~Process() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdin_ >= 0) close(stdin_);
    close(stdout_);
    unlink(err_path_.c_str());
  }

  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

  void write_line(const std::string& line) {
    std::string l = line + "\n";
    ssize_t n = ::write(stdin_, l.data(), l.size());
    (void)n;
  }
  void close_stdin() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
  }

  // The next line of stdout, or nullopt at EOF or after `within`.
  std::optional<std::string> read_line(std::chrono::milliseconds within) {
    auto deadline = std::chrono::steady_clock::now() + within;
    while (true) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      ssize_t n = ::read(stdout_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  // Waits for the exit; returns the exit code (128+signal when killed), or
  // nullopt if it was still running after `within` (then it is SIGKILLed).
  std::optional<int> wait(std::chrono::milliseconds within) {
    if (exited_) return code_;
    auto deadline = std::chrono::steady_clock::now() + within;
    while (true) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        ended_ = std::chrono::steady_clock::now();
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
      poll(&none, 0, 5);  // a short pause between checks, not a synchronization
    }
  }

  void kill_now() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    exited_ = true;
  }

  // How long it ran (valid after wait() saw it exit).
  std::chrono::milliseconds ran() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(ended_ - started_);
  }

  std::string stderr_text() const {
    std::ifstream f(err_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string err_path_;
  std::string buf_;
  bool exited_ = false;
  int code_ = -1;
  std::chrono::steady_clock::time_point started_, ended_;
};

// Resident set size of a process in KiB, from /proc/<pid>/status (0 if unknown).
inline long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

}  // namespace slurmddp::testing
