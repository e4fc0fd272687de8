#include "slurmddp/checkpoint.h"

#include <cstdlib>
#include <filesystem>

#include "comm/scalar_channel.h"
#include "common/log.h"
#include "resume/checkpoint_file.h"
#include "resume/checkpoint_io.h"
#include "resume/checkpoint_reader.h"
#include "resume/refusal.h"
#include "resume/run_record.h"
#include "slurmddp/error.h"

namespace slurmddp {

namespace fs = std::filesystem;

namespace {

const char* const kComponent = "checkpoint";

// This job's own directory name under a base: "job-<id>" (Note [Run identity]).
std::string job_dir_name() {
  const std::string job = resume::job_id();
  return job.empty() ? "local" : "job-" + job;
}

// Whether `dir` is this job's own directory, <base>/job_dir_name().
bool is_job_dir(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename() == job_dir_name();
}

}  // namespace

class __attribute__((visibility("hidden"))) Checkpointer::Impl {
 public:
  Impl(std::shared_ptr<Communicator> comm, std::string dir, CheckpointOptions options)
      : comm_(std::move(comm)), dir_(std::move(dir)), options_(options) {
    if (!comm_) throw InvalidArgument("Checkpointer: the communicator is null");
    if (dir_.empty()) throw InvalidArgument("Checkpointer: the directory is empty");
    if (options_.keep < 1) {
      throw InvalidArgument("Checkpointer: keep=" + std::to_string(options_.keep) +
                            "; expected at least 1");
    }
    resume::make_private_dirs(dir_);  // Note [Planted files]
    channel_ = comm::make_scalar_channel(*comm_);
    claimed_ = !is_job_dir(dir_);
  }

  void save(int64_t step, const SamplerState& sampler, ByteView payload) {
    if (step < 0) {
      throw InvalidArgument("Checkpointer::save: step=" + std::to_string(step) + "; expected >= 0");
    }
    claim();
    const int rank = comm_->rank();
    std::string sdir = dir_ + "/" + resume::step_dir_name(step);
    resume::make_private_dirs(sdir);
    resume::RankFile f;
    f.step = step;
    f.rank = rank;
    f.world = comm_->size();
    f.sampler = sampler.to_string();
    if ((options_.scope == CheckpointScope::kEveryRank || rank == 0) && !payload.empty()) {
      if (payload.data() == nullptr) {
        throw InvalidArgument("Checkpointer::save: payload is null with " +
                              std::to_string(payload.size()) + " bytes");
      }
      f.payload.assign(payload.data(), payload.data() + payload.size());
    }
    resume::write_atomic(sdir, "rank-" + std::to_string(rank) + ".ckpt", resume::encode(f));
    comm_->barrier()->wait();  // every rank's file is durable
    if (rank == 0) {
      resume::write_atomic(sdir, "COMPLETE",
                           "complete step=" + std::to_string(step) +
                               " world=" + std::to_string(comm_->size()) +
                               (nonce_.empty() ? "" : " nonce=" + nonce_) + "\n");
      resume::write_atomic(dir_, "LATEST", resume::step_dir_name(step) + "\n");
      resume::prune(dir_, step, options_.keep);
      SLURMDDP_LOG_INFO(kComponent, "saved step " << step << " in " << sdir);
    }
    comm_->barrier()->wait();  // nobody leaves before LATEST names it
  }

  std::optional<Checkpoint> load() {
    claim();
    const int rank = comm_->rank();
    int64_t mine = latest_complete();
    int64_t newest = channel_->max(mine);
    int64_t oldest = -channel_->max(-mine);
    if (newest != oldest) {
      throw Error("checkpoint: ranks disagree on the latest checkpoint in " + dir_ +
                  ": some see step " + std::to_string(oldest) + ", others step " +
                  std::to_string(newest) + " (-1: none); rank " + std::to_string(rank) + " sees " +
                  std::to_string(mine) +
                  ". The directory must be the same shared directory on every node");
    }
    if (mine < 0) return std::nullopt;
    std::string sdir = dir_ + "/" + resume::step_dir_name(mine);
    std::optional<Checkpoint> out;
    // any exception is this rank's reason, so that the agreement below runs
    const std::string error = resume::refusal_of(
        [&] {
          if (rank == 0) check_run(sdir);
          out = read_step(sdir, mine, rank);
        },
        rank, sdir);
    // A damaged file on one rank stops every rank, naming the first such rank.
    int64_t failed = channel_->max(error.empty() ? 0 : rank + 1);
    if (!error.empty()) throw Error(error);
    if (failed != 0) {
      throw Error("checkpoint: rank " + std::to_string(failed - 1) + " could not load " + sdir +
                  " (see its error); not resuming");
    }
    if (rank == 0) SLURMDDP_LOG_INFO(kComponent, "resuming from " << sdir);
    return out;
  }

  const std::string& dir() const { return dir_; }

 private:
  // Note [Run identity]: rank 0 claims the job's own directory once, before
  // the first save or load, and every rank hears when it is another job's.
  void claim() {
    if (claimed_) return;
    claimed_ = true;
    std::string error;
    if (comm_->rank() == 0) {
      error = resume::refusal_of([&] { nonce_ = resume::claim_run(dir_, resume::run_identity()); },
                                 0, dir_);
    }
    int64_t failed = channel_->max(error.empty() ? 0 : 1);
    if (!error.empty()) throw Error(error);
    if (failed != 0) {
      throw Error("checkpoint: rank 0 refused " + dir_ +
                  " (see its error): it is not this job's; not saving or resuming");
    }
  }

  // Throws when the checkpoint in `sdir` was completed by another run.
  void check_run(const std::string& sdir) const {
    if (nonce_.empty()) return;
    auto marker = resume::read_file(sdir + "/COMPLETE");
    std::string theirs = marker ? resume::record_value(" " + *marker, "nonce") : "";
    if (!theirs.empty() && theirs != nonce_) {
      throw Error("checkpoint " + sdir + " was completed by another run (nonce " + theirs +
                  ") than the one " + dir_ + "/RUN records (nonce " + nonce_ +
                  "): it is not this job's");
    }
  }

  // The step LATEST names when its COMPLETE marker exists; -1 otherwise.
  int64_t latest_complete() const {
    auto latest = resume::read_file(dir_ + "/LATEST");
    if (!latest) return -1;
    std::string name = *latest;
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    int64_t step = resume::step_of(name);
    if (step < 0) {
      throw Error("checkpoint " + dir_ + "/LATEST is damaged: it holds '" + name +
                  "', expected step-<N>");
    }
    if (!fs::exists(dir_ + "/" + name + "/COMPLETE")) {
      throw Error("checkpoint " + dir_ + "/LATEST names " + name +
                  ", which has no COMPLETE marker; the checkpoint is incomplete");
    }
    return step;
  }

  // Opens a rank file and checks that it is `who`'s of `step` in this world;
  // `verify`: its checksum too (Note [Streaming checkpoints]: rank 0's file,
  // read by every rank with rank-0 scope, is verified by rank 0 alone).
  resume::RankFileReader open_rank_file(const std::string& sdir, int64_t step, int who,
                                        bool verify) const {
    std::string path = sdir + "/rank-" + std::to_string(who) + ".ckpt";
    resume::RankFileReader f(path, verify);
    const resume::Layout& l = f.layout();
    if (l.step != step || l.rank != who || l.world != comm_->size()) {
      throw Error("checkpoint " + path + " holds step " + std::to_string(l.step) + " of rank " +
                  std::to_string(l.rank) + " in a world of " + std::to_string(l.world) +
                  "; expected step " + std::to_string(step) + " of rank " + std::to_string(who) +
                  " in a world of " + std::to_string(comm_->size()) +
                  " (resuming needs the same number of ranks)");
    }
    return f;
  }

  static std::vector<uint8_t> payload_of(const resume::RankFileReader& f) {
    std::vector<uint8_t> payload(f.layout().payload_bytes);
    f.read_at(f.layout().payload_offset, payload.data(), payload.size());
    return payload;
  }

  Checkpoint read_step(const std::string& sdir, int64_t step, int rank) const {
    resume::RankFileReader own = open_rank_file(sdir, step, rank, true);
    Checkpoint c;
    c.step = step;
    try {
      c.sampler = SamplerState::parse(own.sampler());
    } catch (const InvalidArgument& e) {
      throw Error("checkpoint " + sdir + "/rank-" + std::to_string(rank) +
                  ".ckpt holds no valid sampler state: " + e.what());
    }
    if (options_.scope == CheckpointScope::kEveryRank || rank == 0) {
      c.payload = payload_of(own);
    } else {
      c.payload = payload_of(open_rank_file(sdir, step, 0, false));
    }
    return c;
  }

  std::shared_ptr<Communicator> comm_;
  std::string dir_;
  CheckpointOptions options_;
  std::unique_ptr<comm::ScalarChannel> channel_;
  bool claimed_ = true;  // false until a job directory is claimed (Note [Run identity])
  std::string nonce_;    // rank 0's, once claimed
};

Checkpointer::Checkpointer(std::shared_ptr<Communicator> comm, std::string dir,
                           CheckpointOptions options)
    : impl_(std::make_unique<Impl>(std::move(comm), std::move(dir), options)) {}
Checkpointer::~Checkpointer() = default;

void Checkpointer::save(int64_t step, const SamplerState& sampler, ByteView payload) {
  impl_->save(step, sampler, payload);
}

std::optional<Checkpoint> Checkpointer::load() {
  return impl_->load();
}

const std::string& Checkpointer::dir() const {
  return impl_->dir();
}

std::string job_checkpoint_dir(const std::string& base) {
  return base + "/" + job_dir_name();
}

}  // namespace slurmddp
