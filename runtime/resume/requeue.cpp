#include "slurmddp/requeue.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "slurmddp/error.h"

extern char** environ;

namespace slurmddp {

namespace {
const char* const kComponent = "requeue";
}

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

void requeue_job(const std::string& scontrol) {
  const std::string target = requeue_target();
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw Error(std::string("requeue: failed to create a pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDOUT_FILENO);
  std::vector<std::string> args{scontrol, "requeue", target};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, scontrol.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(err_pipe[0]);
    throw Error("requeue: failed to run '" + scontrol + " requeue " + target +
                "': " + std::strerror(rc) +
                (rc == ENOENT ? " (scontrol is not installed here, e.g. inside a container image; "
                                "exit with 75 and let the batch script requeue on that status, "
                                "or RequeueExit=75 in slurm.conf; see docs/user-guide.md)"
                              : ""));
  }
  std::string output;
  char buf[512];
  ssize_t n = 0;
  while ((n = ::read(err_pipe[0], buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  ::close(err_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!output.empty() && output.back() == '\n') output.pop_back();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error("requeue: '" + scontrol + " requeue " + target + "' failed (status " +
                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                "): " + (output.empty() ? "no message" : output) +
                "; the job must be requeueable (#SBATCH --requeue or JobRequeue=1), and the user "
                "allowed to requeue it");
  }
  SLURMDDP_LOG_INFO(kComponent, "asked Slurm to requeue job " << target);
}

}  // namespace slurmddp
