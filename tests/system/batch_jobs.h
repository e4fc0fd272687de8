// Batch jobs on the test cluster: Slurm's state of a job, polling it,
// `sbatch --wait` without its sleeps, and for the preemption tests (C++ and
// PyTorch) letting a requeued job start at once and several steps in one
// allocation.
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

// The job id `sbatch --parsable` printed (before ";cluster", if any).
inline std::string parsable_job_id(const std::string& out) {
  return out.substr(0, out.find_first_of(";\n"));
}

// Submits `script` from `dir` with output to out.txt; returns the job id.
inline std::string submit(const std::string& dir, const std::string& script,
                          const std::string& sbatch_args, const std::string& script_args) {
  Result r = run("sbatch --parsable -o out.txt " + sbatch_args + " " + script + script_args,
                 std::chrono::seconds(30), dir);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  return parsable_job_id(r.out);
}

// `sbatch --wait`, without its sleeps: sbatch asks for the job's state 2 s
// and then 8 s after submitting it, so that a job of 3 s took 10; this asks
// every 200 ms. Runs `env` `sbatch --parsable` `args` (options, script and its
// arguments) from `dir` and waits up to `limit` for the job to end. rc is what
// `sbatch --wait` exits with: the job's exit code (128 + the signal that ended
// it), sbatch's own where it did not submit, 124 where the job did not end in
// time (it is cancelled then); out and err are sbatch's.
inline Result sbatch_wait(const std::string& args, std::chrono::seconds limit,
                          const std::string& dir, const std::string& env = "") {
  Result r = run(env + "sbatch --parsable " + args, std::chrono::seconds(30), dir);
  if (r.rc != 0) return r;
  const std::string id = parsable_job_id(r.out);
  if (!poll_until(limit, [&] { return finished(id); })) {
    run("scancel " + id);
    r.rc = 124;
    r.timed_out = true;
    r.err += "job " + id + " did not end within " + std::to_string(limit.count()) + " s\n";
    return r;
  }
  Result show = run("scontrol -o show job " + id, std::chrono::seconds(30));
  std::smatch m;
  if (!std::regex_search(show.out, m, std::regex(R"((^| )ExitCode=([0-9]+):([0-9]+))"))) {
    r.rc = -1;
    r.err += "no ExitCode in scontrol's view of job " + id + ": " + show.out + show.err;
    return r;
  }
  const int code = std::stoi(m[2].str()), signal = std::stoi(m[3].str());
  r.rc = signal != 0 ? 128 + signal : code;
  return r;
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

// The pids of job `id`'s processes that run `program`, named so by their
// argv[0] (srun passes the path it found) or, where argv[0] is a python, by
// their script (argv[1]): the ranks, not the srun that started them, on any of
// the clusters running side by side. They are found by SLURM_JOB_ID in their
// environment: their working directory, as /proc shows it, names another path
// where a node's mounts are not the test's (inside a lane's root).
inline std::vector<int> job_processes(const std::string& id, const std::string& program) {
  std::vector<int> pids;
  const std::string tag = std::string("SLURM_JOB_ID=") + id + '\0';
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::vector<std::string> argv;
    std::istringstream cmdline(slurp(e.path() / "cmdline"));
    for (std::string arg; argv.size() < 2 && std::getline(cmdline, arg, '\0');) {
      argv.push_back(std::filesystem::path(arg).filename().string());
    }
    const bool runs = (!argv.empty() && argv[0] == program) ||
                      (argv.size() == 2 && argv[0].rfind("python", 0) == 0 && argv[1] == program);
    if (!runs) continue;
    const std::string environ = '\0' + slurp(e.path() / "environ");
    if (environ.find('\0' + tag) != std::string::npos) pids.push_back(std::stoi(name));
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
//   Slurm sends a time-limit warning at one of its periodic checks, up to a
//   minute here after the limit was brought close; a fast torch (2.15 from
//   PyPI) ends the PyTorch example's 2 epochs in about 10 s, the C++ example
//   its 2 in 10, before the warning. So the ranks are stopped (SIGSTOP, which
//   changes nothing they compute), then `cause` runs (e.g.
//   bring_time_limit_close), and they are continued once `signal` reached
//   every one of them (slurmstepd sends SIGCONT with it): they take the
//   warning at the step they were in, whatever the speed. The ranks are the
//   job's processes of `program` (job_processes); `ranks` is how many there
//   are: all are held, or none. False when the ranks found were not
//   `ranks` (saying which), `cause` failed or the signal did not come within
//   `limit`.
template <typename F>
bool hold_until_pending(const std::string& id, const std::string& program, size_t ranks, int signal,
                        std::chrono::seconds limit, F cause) {
  const std::vector<int> pids = job_processes(id, program);
  if (pids.size() != ranks) {
    std::string found;
    for (int pid : pids) found += " " + std::to_string(pid);
    ADD_FAILURE() << "hold_until_pending: job " << id << " has " << pids.size() << " processes of "
                  << program << " (" << (found.empty() ? " none" : found) << " ), not " << ranks;
    return false;
  }
  for (int pid : pids) ::kill(pid, SIGSTOP);
  const bool all = cause() && poll_until(limit, [&] {
                     return std::all_of(pids.begin(), pids.end(),
                                        [&](int pid) { return signal_reached(pid, signal); });
                   });
  for (int pid : pids) ::kill(pid, SIGCONT);
  return all;
}

// Bash for a job's script (in_one_job) that SIGKILLs one of its own ranks: a
// process whose command line matches `pattern` (pgrep -f) and whose
// environment holds this job's SLURM_JOB_ID and SLURM_SUBMIT_DIR. Not pkill
// alone: the same test runs at the same time on the other lanes' clusters,
// whose job ids repeat these, and the newest match may be theirs.
inline std::string kill_one_rank_of_this_job(const std::string& pattern) {
  return "for p in $(pgrep -f '" + pattern +
         "'); do e=$(tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null); "
         "grep -qx \"SLURM_JOB_ID=$SLURM_JOB_ID\" <<<\"$e\" && "
         "grep -qxF \"SLURM_SUBMIT_DIR=$PWD\" <<<\"$e\" && { kill -KILL $p; break; }; done";
}

// Runs `body` (bash) in one allocation of 2 nodes x 2 tasks, so that its steps
// share one job id and so one checkpoint directory.
inline Result in_one_job(const std::string& dir, const std::string& body) {
  std::ofstream(dir + "/steps.sh") << "#!/bin/bash\n" << body;
  return run("salloc -N 2 --ntasks-per-node=2 bash steps.sh", std::chrono::seconds(600), dir);
}

}  // namespace slurmddp::systest
