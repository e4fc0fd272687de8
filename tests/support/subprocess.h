// Child processes for the tests and the benchmarks: start a program (often
// this one again) with extra environment, talk to it over pipes, keep its
// stderr in a temporary file, and wait for it with a deadline. Nothing here
// waits without a limit unless asked to (Clock::time_point::max()), and a
// child still running when its owner dies is SIGKILLed by its PID and reaped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace slurmddp::support {

using Clock = std::chrono::steady_clock;

// Variables for a child: the current environment plus these (overriding);
// an empty value removes the variable.
using Env = std::map<std::string, std::string>;

// This program's path (/proc/self/exe).
std::string self_path();

// The exit code of a waitpid() status; 128 + signal when it was killed.
int exit_code(int wait_status);

// CLOCK_MONOTONIC in milliseconds: one clock for a test and the processes it
// starts (and for every node of the test cluster, one kernel), so times that
// children print can be compared with the parent's.
long long monotonic_ms();

// Starts `argv` (argv[0] a path) with `env`; -1 when it could not start.
pid_t spawn(const std::vector<std::string>& argv, const Env& env = {});

// Starts this program again with `args` after argv[0]; -1 when it could not.
pid_t spawn_self(const std::vector<std::string>& args, const Env& env = {});

// The exit code of `pid` (see exit_code; -1 when it cannot be waited for), or
// nullopt when it still ran at `deadline`: it is then SIGKILLed and reaped.
std::optional<int> wait_for(pid_t pid, Clock::time_point deadline);

// SIGKILLs and reaps each of `pids` (-1 entries are skipped).
void kill_all(const std::vector<pid_t>& pids);

// Waits for every one of `pids` (rank r = pids[r]; only these, by PID); once
// one ends with a non-zero code the others are SIGKILLed. Returns the largest
// exit code. With a `name`, each failure is reported on stderr as
// "<name>: rank <r> ended with status <code>".
int wait_all(const std::vector<pid_t>& pids, const char* name = nullptr);

enum class Stdio {
  kInherit,  // this process's
  kPipe,     // a pipe to this process (stdin: write_line; stdout, stderr: read_*)
  kFile,     // stderr only: a temporary file, read with stderr_text()
};

struct SpawnOptions {
  Env env;
  Stdio in = Stdio::kInherit;
  Stdio out = Stdio::kInherit;
  Stdio err = Stdio::kInherit;
  bool search_path = false;  // look argv[0] up in PATH
  std::string cwd;           // "" = this process's
  bool own_group = false;    // the child leads a new process group (pgid = its pid)
  // On destruction: how long a child still running may take to exit after its
  // stdin is closed before it is SIGKILLed.
  std::chrono::milliseconds grace{0};
};

class Child {
 public:
  // Throws std::runtime_error (naming the program and the cause) when the
  // child cannot be started. A piped stdin makes this process ignore SIGPIPE:
  // writing to a child that died fails instead of killing the writer.
  explicit Child(const std::vector<std::string>& argv, const SpawnOptions& options = {});
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // Writes `line` and a newline to stdin; false when the child's stdin is closed.
  bool write_line(const std::string& line);
  void close_stdin();

  // The next stdout line (without its newline), or nullopt at EOF or when
  // `deadline` passes.
  std::optional<std::string> read_line(Clock::time_point deadline);
  std::optional<std::string> read_line(std::chrono::milliseconds within) {
    return read_line(Clock::now() + within);
  }

  // Appends stdout (and stderr when piped) to `out` and `err` until both reach
  // EOF; false when `deadline` passed first.
  bool read_all(Clock::time_point deadline, std::string* out, std::string* err = nullptr);

  // The exit code (see exit_code) once the child ended (it is then reaped),
  // or nullopt while it runs; never waits.
  std::optional<int> try_wait();

  // The exit code (see exit_code), or nullopt when it still ran at `deadline`
  // (it is then SIGKILLed and reaped).
  std::optional<int> wait(Clock::time_point deadline);
  std::optional<int> wait(std::chrono::milliseconds within) { return wait(Clock::now() + within); }

  // Sends `sig` while the child has not been reaped.
  void signal(int sig);
  // SIGKILL and reap.
  void kill_now();

  // How long it ran (once wait() saw it exit).
  std::chrono::milliseconds ran() const;

  // What it wrote to stderr so far (Stdio::kFile).
  std::string stderr_text() const;

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  int stderr_ = -1;
  std::string err_path_;
  std::string buffer_;
  bool reaped_ = false;
  int code_ = -1;
  std::chrono::milliseconds grace_{0};
  Clock::time_point started_, ended_;
};

}  // namespace slurmddp::support
