#include "resume/run_record.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "resume/checkpoint_io.h"
#include "slurmddp/error.h"

namespace slurmddp::resume {

namespace {

const char* const kRecord = "RUN";

std::string env_value(const Getenv& getenv, const char* name) {
  const char* v = getenv ? getenv(name) : std::getenv(name);
  return v != nullptr ? v : "";
}

// A value as the record holds it: one word (Slurm's names have no blanks;
// anything else is kept apart from the record's syntax).
std::string word(const std::string& v) {
  std::string out = v;
  for (char& c : out) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0 || c == '=') c = '_';
  }
  return out;
}

bool all_digits(const std::string& v) {
  if (v.empty()) return false;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "2026-12-06 21:40:17 UTC (1796593217)", or the value as it is when it is no time.
std::string when(const std::string& started) {
  if (!all_digits(started) || started.size() > 18) {
    return started.empty() ? "an unknown time" : started;
  }
  std::time_t t = static_cast<std::time_t>(std::strtoll(started.c_str(), nullptr, 10));
  std::tm tm{};
  char buf[32];
  if (::gmtime_r(&t, &tm) == nullptr || std::strftime(buf, sizeof buf, "%F %T UTC", &tm) == 0) {
    return started;
  }
  return std::string(buf) + " (" + started + ")";
}

std::string job_name(const std::string& job, const std::string& cluster) {
  std::string s = "job " + (job.empty() ? std::string("<none>") : job);
  if (!cluster.empty()) s += " of cluster " + cluster;
  return s;
}

bool has_complete_step(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (step_of(e.path().filename().string()) >= 0 &&
        std::filesystem::exists(e.path() / "COMPLETE", ec)) {
      return true;
    }
  }
  return false;
}

// The way out of a refused directory, said by every refusal.
std::string what_to_do(const std::string& dir) {
  return "Move " + dir +
         " away to start this job afresh, or, to continue that run on purpose, pass the "
         "directory itself (Python: Checkpointer(dir, per_job=False))";
}

// Why `dir`, holding the record `line`, is not `self`'s; "" when it is.
std::string foreign(const std::string& dir, const std::string& line, const RunIdentity& self) {
  const std::string cluster = record_value(line, "cluster");
  const std::string job = record_value(line, "job");
  const std::string started = record_value(line, "started");
  const std::string theirs = job_name(job, cluster);
  const std::string ours = job_name(word(self.job), word(self.cluster));
  const std::string advice = ". " + what_to_do(dir);
  if (record_value(line, "nonce").empty() || line.rfind("run ", 0) != 0) {
    return "checkpoint: " + dir + "/" + kRecord + " is damaged: it holds '" + line +
           "', expected 'run cluster=... job=... started=... nonce=...'" + advice;
  }
  if (cluster != word(self.cluster) || job != word(self.job)) {
    return "checkpoint: " + dir + " belongs to " + theirs + ", not to this " + ours +
           " (clusters that share a file system need their own checkpoint directories, "
           "e.g. <base>/$SLURM_CLUSTER_NAME)" +
           advice;
  }
  if (self.restarts == 0 && !self.started.empty() && !started.empty() &&
      started != word(self.started)) {
    return "checkpoint: " + dir + " belongs to another " + theirs + ", which started at " +
           when(started) + "; this job started at " + when(self.started) +
           " and was never requeued (SLURM_RESTART_COUNT unset), so it cannot have "
           "checkpoints yet: the cluster handed out its job id again (a reset job counter)" +
           advice;
  }
  return "";
}

}  // namespace

std::string record_value(const std::string& line, const std::string& key) {
  const std::string needle = " " + key + "=";
  size_t at = line.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  size_t end = line.find_first_of(" \n", at);
  return line.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

std::string job_id(const Getenv& getenv) {
  const std::string array = env_value(getenv, "SLURM_ARRAY_JOB_ID");
  const std::string task = env_value(getenv, "SLURM_ARRAY_TASK_ID");
  return !array.empty() && !task.empty() ? array + "_" + task : env_value(getenv, "SLURM_JOB_ID");
}

RunIdentity run_identity(const Getenv& getenv) {
  auto get = [&](const char* name) { return env_value(getenv, name); };
  RunIdentity id;
  id.cluster = get("SLURM_CLUSTER_NAME");
  id.job = job_id(getenv);
  id.started = get("SLURM_JOB_START_TIME");
  if (!id.started.empty() && !all_digits(id.started)) {
    throw InvalidArgument("checkpoint: SLURM_JOB_START_TIME='" + id.started +
                          "' is not a time (expected seconds since the epoch)");
  }
  const std::string restarts = get("SLURM_RESTART_COUNT");
  if (!restarts.empty()) {
    if (!all_digits(restarts) || restarts.size() > 9) {
      throw InvalidArgument("checkpoint: SLURM_RESTART_COUNT='" + restarts +
                            "' is not a count of restarts (expected an integer >= 0)");
    }
    id.restarts = std::strtoll(restarts.c_str(), nullptr, 10);
  }
  return id;
}

std::string claim_run(const std::string& dir, const RunIdentity& self) {
  const std::string path = dir + "/" + kRecord;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (auto line = read_file(path)) {
      while (!line->empty() && line->back() == '\n') line->pop_back();
      std::string why = foreign(dir, *line, self);
      if (!why.empty()) throw Error(why);
      return record_value(*line, "nonce");
    }
    if (errno != ENOENT) {
      throw Error("checkpoint: failed to read " + path + ": " + std::strerror(errno));
    }
    if (self.restarts == 0 && has_complete_step(dir)) {
      std::string why = "checkpoint: " + dir;
      why += " holds checkpoints but no record of their run (";
      why += kRecord;
      why += "), and this " + job_name(self.job, self.cluster);
      why +=
          " was never requeued (SLURM_RESTART_COUNT unset), so they are not its own: another "
          "job with the same id left them. ";
      why += what_to_do(dir);
      throw Error(why);
    }
    std::string nonce = random_hex16();
    const std::string record = "run cluster=" + word(self.cluster) + " job=" + word(self.job) +
                               " started=" + word(self.started) + " nonce=" + nonce + "\n";
    if (publish_new(write_temp(dir, kRecord, record), dir, kRecord)) return nonce;
    // another process made it first: read its record
  }
  throw Error("checkpoint: " + path +
              " appeared and vanished while this job read it; is another "
              "job removing " +
              dir + "?");
}

}  // namespace slurmddp::resume
