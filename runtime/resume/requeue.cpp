#include "slurmddp/requeue.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "slurmddp/error.h"

extern char** environ;

namespace slurmddp {

namespace {

const char* const kComponent = "requeue";

// scontrol's output kept for the error message; the rest is read and dropped.
constexpr size_t kMaxOutput = size_t{16} << 10;

std::chrono::seconds requeue_deadline() {
  const char* v = std::getenv(kRequeueTimeoutVariable);
  if (v == nullptr || *v == '\0') return kRequeueTimeout;
  const std::string text = v;
  const std::string digits =
      !text.empty() && text.back() == 's' ? text.substr(0, text.size() - 1) : text;
  long long n = 0;
  bool ok = !digits.empty() && digits.size() <= 6;
  for (char c : digits) ok = ok && c >= '0' && c <= '9';
  if (ok) n = std::stoll(digits);
  if (!ok || n < 1 || n > 86400) {
    throw InvalidArgument(std::string("requeue: invalid ") + kRequeueTimeoutVariable + "='" + text +
                          "'; expected seconds in [1, 86400] (default " +
                          std::to_string(kRequeueTimeout.count()) + ")");
  }
  return std::chrono::seconds(n);
}

}  // namespace

std::string requeue_target(const EnvReader& env) {
  auto array = env("SLURM_ARRAY_JOB_ID");
  auto task = env("SLURM_ARRAY_TASK_ID");
  if (array && task && !array->empty() && !task->empty()) return *array + "_" + *task;
  auto job = env("SLURM_JOB_ID");
  if (job && !job->empty()) return *job;
  throw InvalidArgument(
      "requeue: SLURM_JOB_ID is not set: this process is not part of a Slurm job, so there is "
      "nothing to requeue");
}

std::string requeue_target() {
  return requeue_target([](const char* n) -> std::optional<std::string> {
    const char* v = std::getenv(n);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  });
}

// Note [Requeue deadline]
//   requeue_job() runs while the other ranks wait for it (a barrier in the
//   preemption grace period), and scontrol waits for slurmctld, which may not
//   answer (down, overloaded, a network partition). So scontrol gets a
//   deadline, SLURMDDP_REQUEUE_TIMEOUT (default 30 s, well inside the usual
//   grace periods): past it scontrol (its process group: it runs in its own)
//   is killed and the error says so, and the ranks still exit 75, so a batch
//   script that requeues on that status still can. Its output is read with
//   poll() against the same deadline, and at most kMaxOutput bytes are kept.
void requeue_job(const std::string& scontrol) {
  const std::string target = requeue_target();
  const std::chrono::seconds limit = requeue_deadline();
  const std::string command = scontrol + " requeue " + target;
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw Error(std::string("requeue: failed to create a pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDOUT_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: killed as one
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args{scontrol, "requeue", target};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, scontrol.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(err_pipe[0]);
    throw Error("requeue: failed to run '" + command + "': " + std::strerror(rc) +
                (rc == ENOENT ? " (scontrol is not installed here, e.g. inside a container image; "
                                "exit with 75 and let the batch script requeue on that status, "
                                "or RequeueExit=75 in slurm.conf; see docs/user-guide.md)"
                              : ""));
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + limit;
  const auto left_ms = [&deadline] {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::max<long long>(0, std::min<long long>(left, 60'000)));
  };
  std::string output;
  char buf[512];
  bool timed_out = false;
  for (;;) {  // until EOF (scontrol and whatever it started closed the pipe)
    pollfd pfd{err_pipe[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, left_ms());
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0 && Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    if (ready <= 0) continue;
    const ssize_t n = ::read(err_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (output.size() < kMaxOutput) {
      output.append(buf, std::min(static_cast<size_t>(n), kMaxOutput - output.size()));
    }
  }
  ::close(err_pipe[0]);
  int status = 0;
  while (!timed_out) {
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno != EINTR)) break;
    if (Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    ::usleep(10'000);
  }
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw Error("requeue: '" + command + "' did not finish within " +
                std::to_string(limit.count()) + " s (" + kRequeueTimeoutVariable +
                "); it was killed and the job is not requeued. Check that slurmctld answers "
                "(scontrol ping), raise " +
                kRequeueTimeoutVariable +
                ", or exit with 75 and let the batch script requeue on that status");
  }
  while (!output.empty() && output.back() == '\n') output.pop_back();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error("requeue: '" + command + "' failed (status " +
                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                "): " + (output.empty() ? "no message" : output) +
                "; the job must be requeueable (#SBATCH --requeue or JobRequeue=1), and the user "
                "allowed to requeue it");
  }
  SLURMDDP_LOG_INFO(kComponent, "asked Slurm to requeue job " << target);
}

}  // namespace slurmddp
