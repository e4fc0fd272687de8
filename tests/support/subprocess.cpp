#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace slurmddp::support {

namespace {

// Milliseconds until `deadline` for poll(): -1 for no deadline, 0 once passed.
int poll_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

bool passed(Clock::time_point deadline) {
  return deadline != Clock::time_point::max() && Clock::now() >= deadline;
}

std::vector<std::string> merged_environment(const Env& env) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (env.count(kv.substr(0, kv.find('='))) == 0) out.push_back(kv);
  }
  for (const auto& [k, v] : env) {
    if (!v.empty()) out.push_back(k + "=" + v);
  }
  return out;
}

std::vector<char*> pointers(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// posix_spawn with file actions and attributes; returns 0 or an errno value.
struct Launch {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  Launch() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~Launch() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  int run(pid_t* pid, const std::vector<std::string>& argv, const Env& env, bool search_path) {
    if (argv.empty()) return EINVAL;
    const std::vector<std::string> envs = merged_environment(env);
    std::vector<char*> cargv = pointers(argv);
    std::vector<char*> cenv = pointers(envs);
    return search_path
               ? posix_spawnp(pid, cargv[0], &actions, &attributes, cargv.data(), cenv.data())
               : posix_spawn(pid, cargv[0], &actions, &attributes, cargv.data(), cenv.data());
  }
};

}  // namespace

std::string self_path() {
  char buf[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

long long monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int exit_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

pid_t spawn(const std::vector<std::string>& argv, const Env& env) {
  Launch launch;
  pid_t pid = -1;
  return launch.run(&pid, argv, env, false) == 0 ? pid : -1;
}

pid_t spawn_self(const std::vector<std::string>& args, const Env& env) {
  std::vector<std::string> argv{self_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn(argv, env);
}

std::optional<int> wait_for(pid_t pid, Clock::time_point deadline) {
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return exit_code(status);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (passed(deadline)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    pollfd none{-1, 0, 0};
    poll(&none, 0, 20);  // a pause between checks of the exit status
  }
}

void kill_all(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    if (p > 0) kill(p, SIGKILL);
  }
  for (pid_t p : pids) {
    if (p > 0) waitpid(p, nullptr, 0);
  }
}

int wait_all(const std::vector<pid_t>& pids, const char* name) {
  int worst = 0;
  std::vector<bool> reaped(pids.size(), false);
  size_t left = pids.size();
  // Each pid by itself (never waitpid(-1), which would reap other children).
  while (left > 0) {
    bool any = false;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (reaped[r]) continue;
      int status = 0;
      const pid_t got = waitpid(pids[r], &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      reaped[r] = true;
      --left;
      any = true;
      const int code = got < 0 ? -1 : exit_code(status);
      if (code == 0) continue;
      if (name != nullptr) {
        std::fprintf(stderr, "%s: rank %zu ended with status %d\n", name, r, code);
      }
      for (size_t q = 0; q < pids.size(); ++q) {
        if (!reaped[q]) kill(pids[q], SIGKILL);
      }
      worst = std::max(worst, code);
    }
    if (!any && left > 0) {
      pollfd none{-1, 0, 0};
      poll(&none, 0, 20);  // a pause between checks of the exit statuses
    }
  }
  return worst;
}

Child::Child(const std::vector<std::string>& argv, const SpawnOptions& o) : grace_(o.grace) {
  const std::string what = argv.empty() ? std::string("(nothing)") : argv[0];
  Launch launch;
  int child_ends[3] = {-1, -1, -1};  // what the child gets as its fd 0, 1, 2
  auto close_child_ends = [&] {
    for (int& fd : child_ends) close_fd(fd);
  };
  auto fail = [&](const std::string& step, int err) {
    close_child_ends();
    close_fd(stdin_);
    close_fd(stdout_);
    close_fd(stderr_);
    if (!err_path_.empty()) unlink(err_path_.c_str());
    throw std::runtime_error("spawn: failed to " + step + " for " + what + ": " +
                             std::strerror(err));
  };
  // A pipe for the child's descriptor `target`; this process keeps the other end.
  auto pipe_for = [&](int target, const char* name, int* mine) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      const int e = errno;
      fail(std::string("create a ") + name + " pipe", e);
    }
    const bool child_reads = target == 0;
    child_ends[target] = child_reads ? fds[0] : fds[1];
    *mine = child_reads ? fds[1] : fds[0];
    posix_spawn_file_actions_adddup2(&launch.actions, child_ends[target], target);
  };
  if (o.in == Stdio::kPipe) {
    // A child that died must fail its writer, not kill it through the pipe.
    ::signal(SIGPIPE, SIG_IGN);
    pipe_for(0, "stdin", &stdin_);
  }
  if (o.out == Stdio::kPipe) pipe_for(1, "stdout", &stdout_);
  if (o.err == Stdio::kPipe) {
    pipe_for(2, "stderr", &stderr_);
  } else if (o.err == Stdio::kFile) {
    const char* tmp = std::getenv("TMPDIR");
    std::string path =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/slurmddp-stderr-XXXXXX";
    child_ends[2] = mkostemp(path.data(), O_CLOEXEC);
    if (child_ends[2] < 0) {
      const int e = errno;
      fail("create a stderr file", e);
    }
    err_path_ = path;
    posix_spawn_file_actions_adddup2(&launch.actions, child_ends[2], 2);
  }
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&launch.actions, o.cwd.c_str());
  if (o.own_group) {
    posix_spawnattr_setpgroup(&launch.attributes, 0);
    posix_spawnattr_setflags(&launch.attributes, POSIX_SPAWN_SETPGROUP);
  }
  const int rc = launch.run(&pid_, argv, o.env, o.search_path);
  close_child_ends();
  if (rc != 0) {
    pid_ = -1;
    fail("start a process", rc);
  }
  started_ = Clock::now();
}

Child::~Child() {
  close_stdin();
  if (!reaped_ && pid_ > 0) {
    if (grace_.count() > 0) {
      wait(Clock::now() + grace_);
    } else {
      kill_now();
    }
  }
  close_fd(stdout_);
  close_fd(stderr_);
  if (!err_path_.empty()) unlink(err_path_.c_str());
}

bool Child::write_line(const std::string& line) {
  const std::string l = line + "\n";
  size_t done = 0;
  while (done < l.size()) {
    if (stdin_ < 0) return false;
    const ssize_t n = ::write(stdin_, l.data() + done, l.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void Child::close_stdin() {
  close_fd(stdin_);
}

std::optional<std::string> Child::read_line(Clock::time_point deadline) {
  for (;;) {
    const auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (stdout_ < 0 || passed(deadline)) return std::nullopt;
    pollfd p{stdout_, POLLIN, 0};
    const int ready = poll(&p, 1, poll_ms(deadline));
    if (ready <= 0) continue;
    char chunk[4096];
    const ssize_t n = ::read(stdout_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

bool Child::read_all(Clock::time_point deadline, std::string* out, std::string* err) {
  if (!buffer_.empty() && out != nullptr) out->append(buffer_);
  buffer_.clear();
  pollfd fds[2] = {{stdout_, POLLIN, 0}, {stderr_, POLLIN, 0}};
  std::string* sinks[2] = {out, err};
  char chunk[65536];
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (passed(deadline)) return false;
    if (poll(fds, 2, poll_ms(deadline)) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(fds[i].fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;
      } else if (sinks[i] != nullptr) {
        sinks[i]->append(chunk, static_cast<size_t>(n));
      }
    }
  }
  close_fd(stdout_);
  close_fd(stderr_);
  return true;
}

std::optional<int> Child::try_wait() {
  while (!reaped_) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      ended_ = Clock::now();
      code_ = exit_code(status);
    } else if (r < 0 && errno != EINTR) {
      reaped_ = true;
    } else if (r == 0) {
      return std::nullopt;
    }
  }
  return code_;
}

std::optional<int> Child::wait(Clock::time_point deadline) {
  for (;;) {
    if (auto code = try_wait()) return code;
    if (passed(deadline)) {
      kill_now();
      return std::nullopt;
    }
    pollfd none{-1, 0, 0};
    poll(&none, 0, 5);  // a short pause between checks, not a synchronization
  }
}

void Child::signal(int sig) {
  if (!reaped_ && pid_ > 0) ::kill(pid_, sig);
}

void Child::kill_now() {
  if (reaped_ || pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  reaped_ = true;
}

std::chrono::milliseconds Child::ran() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(ended_ - started_);
}

std::string Child::stderr_text() const {
  std::ifstream f(err_path_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace slurmddp::support
