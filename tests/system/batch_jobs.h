// Batch jobs on the test cluster for the preemption tests (C++ and PyTorch):
// Slurm's state of a job, polling it, letting a requeued job start at once,
// and several steps in one allocation.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster.h"

namespace slurmddp::systest {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Slurm's state of a job ("" once it is gone), from scontrol.
inline std::string job_state(const std::string& id) {
  Result r = run("scontrol -o show job " + id + " 2>/dev/null", std::chrono::seconds(30));
  std::smatch m;
  std::regex re("JobState=([A-Z_]+)");
  return std::regex_search(r.out, m, re) ? m[1].str() : "";
}

// Polls (Slurm's state or a job's output, not a sleep standing in for
// synchronization) until `done` holds or `limit` passes.
template <typename F>
bool poll_until(std::chrono::seconds limit, F done) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return done();
}

inline bool finished(const std::string& id) {
  std::string s = job_state(id);
  return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" ||
         s == "NODE_FAIL" || s == "OUT_OF_MEMORY";
}

// Submits `script` from `dir` with output to out.txt; returns the job id.
inline std::string submit(const std::string& dir, const std::string& script,
                          const std::string& sbatch_args, const std::string& script_args) {
  Result r = run("sbatch --parsable -o out.txt " + sbatch_args + " " + script + script_args,
                 std::chrono::seconds(30), dir);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  return r.out.substr(0, r.out.find_first_of(";\n"));
}

// Slurm holds a requeued batch job back (Reason=BeginTime, about two minutes
// here) before it may start again; once the job is pending and its output
// (`log` in `dir`) shows `stopped` (the ranks' stop line), the test lets it
// start at once. `also` adds more of the job's fields to that update (e.g.
// "TimeLimit=10").
inline void release_after_requeue(const std::string& id, const std::string& dir,
                                  const std::string& stopped, const std::string& also = "",
                                  const std::string& log = "out.txt") {
  ASSERT_TRUE(poll_until(std::chrono::seconds(120),
                         [&] {
                           return job_state(id) == "PENDING" &&
                                  slurp(dir + "/" + log).find(stopped) != std::string::npos;
                         }))
      << job_state(id) << "\n"
      << slurp(dir + "/out.txt") << (log == "out.txt" ? "" : slurp(dir + "/" + log));
  Result r = run("scontrol update JobId=" + id + " StartTime=now " + also);
  EXPECT_EQ(r.rc, 0) << r.err;
}

// The preemption of a batch job the tests run: once its output shows
// "step <at_step>" (within `first`), `scancel --signal=<sig>`; the requeued job
// is let start at once (release_after_requeue) and its second run ("run 1 of
// job") ends within 400 s. Call with ASSERT_NO_FATAL_FAILURE.
inline void stop_requeue_and_rerun(const std::string& id, const std::string& dir, int at_step,
                                   const std::string& sig, std::chrono::seconds first) {
  const std::string step = "\nstep " + std::to_string(at_step) + "\n";
  ASSERT_TRUE(poll_until(first, [&] {
    return slurp(dir + "/out.txt").find(step) != std::string::npos;
  })) << slurp(dir + "/out.txt");
  Result sent = run("scancel --signal=" + sig + " " + id);
  ASSERT_EQ(sent.rc, 0) << sent.err;
  release_after_requeue(id, dir, "stopped after step");
  ASSERT_TRUE(poll_until(std::chrono::seconds(400), [&] {
    return finished(id) && slurp(dir + "/out.txt").find("run 1 of job") != std::string::npos;
  })) << slurp(dir + "/out.txt");
}

// The Python under test and its package, for a batch job's steps (PYTHON).
inline std::string python_exports() {
  return "--export=ALL," + export_package() + "PYTHON=" + python();
}

// How long the job has run, in seconds (scontrol's RunTime; -1 when unknown).
inline long run_seconds(const std::string& id) {
  Result r = run("scontrol -o show job " + id + " 2>/dev/null", std::chrono::seconds(30));
  std::smatch m;
  if (!std::regex_search(r.out, m, std::regex(R"(RunTime=(?:(\d+)-)?(\d+):(\d+):(\d+))"))) {
    return -1;
  }
  const long days = m[1].matched ? std::stol(m[1].str()) : 0;
  return ((days * 24 + std::stol(m[2].str())) * 60 + std::stol(m[3].str())) * 60 +
         std::stol(m[4].str());
}

// Makes the job's time-limit warning (--signal=SIG@N with N >= 120) due now:
// its limit becomes the next whole minute but one, so 60-120 s are left, and
// Slurm sends the warning at its next time-limit check (every 30 s here),
// well before the limit. The job must be running; false when Slurm refused.
inline bool bring_time_limit_close(const std::string& id) {
  const long ran = run_seconds(id);
  if (ran < 0) return false;
  // Slurm keeps time limits in whole minutes.
  return run("scontrol update JobId=" + id + " TimeLimit=" + std::to_string(ran / 60 + 2)).rc == 0;
}

// The pids of the processes whose working directory is `dir` and whose
// command line starts with `what` (a job's ranks, not the srun that started
// them: every test job has its own directory, on any of the clusters running
// side by side).
inline std::vector<int> pids_in(const std::string& dir, const std::string& what) {
  std::vector<int> pids;
  std::error_code ec;
  const auto want = std::filesystem::canonical(dir, ec);
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ignored;
    if (std::filesystem::read_symlink(e.path() / "cwd", ignored) != want) continue;
    std::string cmdline = slurp(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.rfind(what, 0) == 0) pids.push_back(std::stoi(name));
  }
  return pids;
}

// Whether `signal` reached process `pid` since it was stopped: pending on it,
// or the process is running again (slurmstepd continues a stopped task when
// it signals it) or gone (its /proc status).
inline bool signal_reached(int pid, int signal) {
  const std::string status = slurp("/proc/" + std::to_string(pid) + "/status");
  if (status.find("\nState:\tT") == std::string::npos) return true;
  for (const char* field : {"\nSigPnd:\t", "\nShdPnd:\t"}) {
    const auto at = status.find(field);
    if (at == std::string::npos) continue;
    const unsigned long long mask = std::stoull(status.substr(at + 9, 16), nullptr, 16);
    if ((mask >> (signal - 1) & 1ULL) != 0) return true;
  }
  return false;
}

// Note [Holding ranks for a signal]
//   Slurm sends a time-limit warning at one of its periodic checks, up to 30 s
//   after the limit was brought close; a fast torch (2.15 from PyPI) ends the
//   example's 4 epochs in about 20 s, before the warning. So the ranks are
//   stopped (SIGSTOP, which changes nothing they compute), then `cause` runs
//   (e.g. bring_time_limit_close), and they are continued once `signal` reached
//   every one of them (slurmstepd sends SIGCONT with it): they take the warning
//   at the step they were in, whatever the speed. False when there were no
//   ranks, `cause` failed or the signal did not come within `limit`.
template <typename F>
bool hold_until_pending(const std::string& dir, const std::string& what, int signal,
                        std::chrono::seconds limit, F cause) {
  const std::vector<int> ranks = pids_in(dir, what);
  if (ranks.empty()) {
    // The ranks are not visible from here (their /proc entries name another
    // working directory, as inside a lane's root): cause it without holding
    // them; the warning then comes at Slurm's next time-limit check.
    std::fprintf(stderr, "hold_until_pending: no process '%s' in %s to hold\n", what.c_str(),
                 dir.c_str());
    return cause();
  }
  for (int pid : ranks) ::kill(pid, SIGSTOP);
  const bool all = cause() && poll_until(limit, [&] {
                     return std::all_of(ranks.begin(), ranks.end(),
                                        [&](int pid) { return signal_reached(pid, signal); });
                   });
  for (int pid : ranks) ::kill(pid, SIGCONT);
  return all;
}

// Runs `body` (bash) in one allocation of 2 nodes x 2 tasks, so that its steps
// share one job id and so one checkpoint directory.
inline Result in_one_job(const std::string& dir, const std::string& body) {
  std::ofstream(dir + "/steps.sh") << "#!/bin/bash\n" << body;
  return run("salloc -N 2 --ntasks-per-node=2 bash steps.sh", std::chrono::seconds(600), dir);
}

}  // namespace slurmddp::systest
