// train: data-parallel training of an MLP classifier on Fashion-MNIST with the
// slurm-ddp runtime, end to end:
//
//   srun -n 8 --gres=gpu:4 --ntasks-per-node=4 ./train --epochs=3
//
// - slurmddp::init(): identity from the plugin's environment, authenticated
//   rendezvous, a communicator (NCCL on the task's GPU, else Gloo on the CPU);
// - the model (mlp.h) on the CPU, or on that GPU (mlp_cuda.h) when the
//   communicator is there: gradients are averaged where they live
//   (--device=auto|cpu|cuda, device.h);
// - slurmddp::DistributedSampler: each rank trains on its shard of a shuffled
//   epoch (PyTorch's DistributedSampler order) and evaluates on a disjoint
//   shard of the test set;
// - slurmddp::GradSync: bucketed gradient averaging that starts while backward
//   is still computing (the last layer's gradients first).
// Rank 0 reports loss, test accuracy and samples/s per epoch; every rank prints
// a checksum of its final parameters (identical on all ranks).
//
// Preemption (--checkpoint-dir=DIR): on SIGTERM, SIGUSR1, SIGUSR2 or SIGHUP on
// any rank, every rank stops after the same step (slurmddp::StopSignal),
// writes a checkpoint (parameters, momentum, each rank's sampler position) to
// DIR/job-<id>, and with --on-stop=requeue rank 0 asks Slurm to requeue the
// job; the program then exits with 75 (EX_TEMPFAIL: "try again"). A run that
// finds a checkpoint of its job resumes from it and ends bit-identical to a
// run that was never interrupted.
//
// Equivalence: R ranks with --batch-size=b take, at each step, exactly the R*b
// samples one process with --batch-size=R*b takes (the sampler's strided
// shards), and averaged gradients equal the gradient of the mean over the
// union, so parameters match up to floating-point summation order.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "device.h"
#include "idx.h"
#include "mlp.h"
#include "slurmddp/checkpoint.h"
#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/process_group.h"
#include "slurmddp/requeue.h"
#include "slurmddp/sampler.h"
#include "slurmddp/stop.h"
#include "stats.h"
#include "train_config.h"

#if TRAIN_HAVE_CUDA
#include "mlp_cuda.h"
#endif

namespace {

struct Options {
  std::string data = train::kDefaultDataDir;
  int64_t epochs = 3;
  int64_t batch_size = 64;  // per rank
  double lr = 0.05;
  double momentum = 0.9;
  int64_t hidden = 256;
  int64_t seed = 0;
  int64_t steps = -1;  // stop after this many optimizer steps (all epochs); -1: no limit
  std::string dump_params;
  train::DeviceOption device = train::DeviceOption::kAuto;
  std::string checkpoint_dir;    // base directory; empty: no checkpoints, no stop handling
  int64_t checkpoint_every = 0;  // also checkpoint every N steps; 0: only when stopping
  int64_t stop_check_every = 1;  // StopOptions::check_every
  bool requeue = false;          // --on-stop=requeue
  int64_t log_every = 0;         // rank 0 prints "step N" every N steps; 0: never
};

// The exit status of a run that stopped early after writing its checkpoint.
constexpr int kStoppedForRequeue = 75;  // EX_TEMPFAIL

[[noreturn]] void usage_error(const std::string& arg, const std::string& expected) {
  throw slurmddp::InvalidArgument("train: invalid option '" + arg + "': expected " + expected +
                                  "; see --help");
}

int64_t int_value(const std::string& arg, const std::string& v, int64_t lo) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo) usage_error(arg, "an integer >= " + std::to_string(lo));
  return n;
}

double float_value(const std::string& arg, const std::string& v) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= 0.0) || !std::isfinite(d)) {
    usage_error(arg, "a non-negative number");
  }
  return d;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: train [--data=DIR] [--epochs=N] [--batch-size=N (per rank)] [--lr=F]\n"
          "             [--momentum=F] [--hidden=N] [--seed=N] [--steps=N] [--dump-params=FILE]\n"
          "             [--device=auto|cpu|cuda] [--checkpoint-dir=DIR] [--checkpoint-every=N]\n"
          "             [--on-stop=exit|requeue] [--stop-check-every=N] [--log-every=N]\n"
          "--device: where the model trains (default auto). auto: on the GPU of the\n"
          "  communicator when slurmddp::init() made one on a GPU (NCCL), else on the CPU;\n"
          "  cpu: on the CPU, with Gloo (overrides SLURMDDP_BACKEND); cuda: on the GPU,\n"
          "  failing unless the communicator is NCCL on a GPU.\n"
          "--checkpoint-dir: resume from DIR/job-<id> if it holds a checkpoint; on SIGTERM,\n"
          "  SIGUSR1, SIGUSR2 or SIGHUP all ranks stop after the same step, checkpoint and exit\n"
          "  75; --on-stop=requeue also asks Slurm to requeue the job (scontrol requeue).\n");
      std::exit(0);
    }
    auto eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) usage_error(a, "--name=value");
    std::string k = a.substr(0, eq), v = a.substr(eq + 1);
    if (k == "--data") {
      o.data = v;
    } else if (k == "--epochs") {
      o.epochs = int_value(a, v, 1);
    } else if (k == "--batch-size") {
      o.batch_size = int_value(a, v, 1);
    } else if (k == "--lr") {
      o.lr = float_value(a, v);
    } else if (k == "--momentum") {
      o.momentum = float_value(a, v);
    } else if (k == "--hidden") {
      o.hidden = int_value(a, v, 1);
    } else if (k == "--seed") {
      o.seed = int_value(a, v, 0);
    } else if (k == "--steps") {
      o.steps = int_value(a, v, 1);
    } else if (k == "--dump-params") {
      o.dump_params = v;
    } else if (k == "--device") {
      if (!train::parse_device_option(v, &o.device)) usage_error(a, "one of auto, cpu, cuda");
    } else if (k == "--checkpoint-dir") {
      if (v.empty()) usage_error(a, "a directory");
      o.checkpoint_dir = v;
    } else if (k == "--checkpoint-every") {
      o.checkpoint_every = int_value(a, v, 0);
    } else if (k == "--stop-check-every") {
      o.stop_check_every = int_value(a, v, 1);
    } else if (k == "--on-stop") {
      if (v != "exit" && v != "requeue") usage_error(a, "exit or requeue");
      o.requeue = v == "requeue";
    } else if (k == "--log-every") {
      o.log_every = int_value(a, v, 0);
    } else {
      usage_error(a,
                  "one of --data, --epochs, --batch-size, --lr, --momentum, --hidden, --seed, "
                  "--steps, --dump-params, --device, --checkpoint-dir, --checkpoint-every, "
                  "--on-stop, --stop-check-every, --log-every");
    }
  }
  return o;
}

void gather(const train::Dataset& d, const std::vector<int64_t>& idx, std::vector<float>* x,
            std::vector<int32_t>* y) {
  const auto f = static_cast<size_t>(d.features);
  x->resize(idx.size() * f);
  y->resize(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    const auto row = static_cast<size_t>(idx[i]);
    std::memcpy(x->data() + i * f, d.images.data() + row * f, f * sizeof(float));
    (*y)[i] = d.labels[row];
  }
}

// The GradSync registration of a model's tensors (W1, b1, W2, b2): one buffer
// each of parameters and gradients, on the host or on the current GPU.
std::vector<slurmddp::GradParameter> registration(const std::vector<train::ParamTensor>& tensors,
                                                  float* params, float* grads,
                                                  slurmddp::DeviceKind device) {
  std::vector<slurmddp::GradParameter> registered;
  for (const auto& t : tensors) {
    slurmddp::GradParameter p;
    p.name = t.name;
    p.data = params + t.offset;
    p.grad = grads + t.offset;
    p.count = t.count;
    p.device = device;
    registered.push_back(p);
  }
  return registered;
}

// Trains and reports, the same on both devices: Model is train::Mlp (host
// memory) or train::MlpCuda (one GPU), whose interfaces match.
template <typename Model>
int train_and_report(const Options& o, slurmddp::StopSignal* stop, slurmddp::ProcessGroup& pg,
                     const train::Dataset& train_set, const train::Dataset& test_set, Model& model,
                     const std::vector<slurmddp::GradParameter>& registered,
                     const slurmddp::GradSyncOptions& sync_options) {
  const auto& id = pg.identity();
  auto& comm = *pg.comm();
  const auto timeout = pg.timeout();
  // Checks that every rank built the same model, then copies rank 0's parameters.
  slurmddp::GradSync sync(pg.comm(), registered, sync_options);

  slurmddp::SamplerOptions so;
  so.seed = o.seed;
  slurmddp::BatchSampler batches(
      slurmddp::DistributedSampler(train_set.count, id.world_size, id.rank, so), o.batch_size);
  slurmddp::SamplerOptions eval;
  eval.shuffle = false;
  eval.evaluation = true;  // every test sample exactly once across ranks
  slurmddp::DistributedSampler test_shard(test_set.count, id.world_size, id.rank, eval);

  std::vector<float> x;
  std::vector<int32_t> y;
  std::vector<int64_t> idx;
  int64_t step = 0;
  int64_t first_epoch = 0;
  bool resumed = false;
  std::unique_ptr<slurmddp::Checkpointer> ckpt;
  if (!o.checkpoint_dir.empty()) {
    ckpt = std::make_unique<slurmddp::Checkpointer>(pg.comm(),
                                                    slurmddp::job_checkpoint_dir(o.checkpoint_dir));
    if (auto c = ckpt->load()) {
      std::vector<float> state(c->payload.size() / sizeof(float));
      std::memcpy(state.data(), c->payload.data(), state.size() * sizeof(float));
      model.load_state(state);
      batches.load_state(c->sampler);
      step = c->step;
      first_epoch = batches.sampler().epoch();
      resumed = true;
      const char* restarts = std::getenv("SLURMDDP_RESTART_COUNT");
      if (id.rank == 0) {
        std::printf("resumed from %s at step %lld (epoch %lld), restart count %s\n",
                    ckpt->dir().c_str(), static_cast<long long>(step),
                    static_cast<long long>(first_epoch) + 1, restarts != nullptr ? restarts : "?");
        std::fflush(stdout);
      }
    }
    stop->attach(pg.comm());
  }
  auto save = [&] {
    std::vector<float> state = model.state();
    ckpt->save(step, batches.state(), state);
  };
  for (int64_t epoch = first_epoch; epoch < o.epochs && (o.steps < 0 || step < o.steps); ++epoch) {
    if (!resumed || epoch != first_epoch) batches.set_epoch(epoch);  // else: mid-epoch
    auto start = std::chrono::steady_clock::now();
    double stats[2] = {0.0, 0.0};  // summed loss, samples
    while ((o.steps < 0 || step < o.steps) && batches.next(&idx)) {
      gather(train_set, idx, &x, &y);
      model.forward_backward(x.data(), y.data(), static_cast<int64_t>(idx.size()),
                             [&](size_t t) { sync.mark_ready(t); });
      sync.wait();  // gradients averaged over all ranks
      model.sgd_step(static_cast<float>(o.lr), static_cast<float>(o.momentum));
      stats[1] += static_cast<double>(idx.size());
      ++step;
      pg.step_done(step);  // the hang and straggler reports (SLURMDDP_HANG_AFTER)
      if (o.log_every > 0 && step % o.log_every == 0 && id.rank == 0) {
        std::printf("step %lld\n", static_cast<long long>(step));
        std::fflush(stdout);
      }
      if (stop && stop->should_stop(step)) {
        save();
        std::printf("rank %d: stopped after step %lld on %s, checkpoint in %s\n", id.rank,
                    static_cast<long long>(step),
                    slurmddp::signal_name(stop->agreed_signal().value_or(0)).c_str(),
                    ckpt->dir().c_str());
        std::fflush(stdout);
        if (o.requeue && id.rank == 0) slurmddp::requeue_job();
        return kStoppedForRequeue;
      }
      if (ckpt && o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save();
    }
    stats[0] = model.take_loss_sum();  // on the GPU: waits for the epoch's last step
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    train::allreduce_sum(comm, stats, 2, timeout);
    int64_t correct[2] = {0, 0};  // correct, evaluated
    std::vector<int64_t> shard(static_cast<size_t>(test_shard.size()));
    test_shard.get(0, test_shard.size(), shard.data());
    gather(test_set, shard, &x, &y);
    correct[0] = model.count_correct(x.data(), y.data(), static_cast<int64_t>(shard.size()));
    correct[1] = static_cast<int64_t>(shard.size());
    train::allreduce_sum(comm, correct, 2, timeout);
    if (id.rank == 0) {
      std::printf("epoch %lld: loss %.4f test accuracy %.2f%% (%lld/%lld) %.0f samples/s\n",
                  static_cast<long long>(epoch) + 1, stats[0] / std::max(stats[1], 1.0),
                  100.0 * static_cast<double>(correct[0]) / static_cast<double>(correct[1]),
                  static_cast<long long>(correct[0]), static_cast<long long>(correct[1]),
                  stats[1] / secs);
      std::fflush(stdout);
    }
  }
  std::printf("rank %d: %lld steps, parameter checksum %016llx\n", id.rank,
              static_cast<long long>(step), static_cast<unsigned long long>(model.checksum()));
  std::fflush(stdout);
  if (!o.dump_params.empty() && id.rank == 0) {
    const auto& params = model.host_params();
    std::ofstream f(o.dump_params, std::ios::binary);
    f.write(reinterpret_cast<const char*>(params.data()),
            static_cast<std::streamsize>(params.size() * sizeof(float)));
    if (!f) throw slurmddp::Error("train: failed to write --dump-params=" + o.dump_params);
  }
  return 0;
}

int run(const Options& o) {
  // With checkpoints, the stop signals are caught from the start: one that
  // arrives during the rendezvous or while the data loads stops the job after
  // its first step instead of ending the process without a checkpoint.
  std::unique_ptr<slurmddp::StopSignal> stop;
  if (!o.checkpoint_dir.empty()) {
    slurmddp::StopOptions so;
    so.check_every = o.stop_check_every;
    stop = std::make_unique<slurmddp::StopSignal>(so);
  }
  slurmddp::InitOptions init;
  init.backend = train::backend_for(o.device);
  auto pg = slurmddp::init(init);
  const auto& id = pg->identity();
  auto& comm = *pg->comm();
  // Before the per-rank line, which says where this rank trains.
  const train::ComputeDevice device = train::choose_device(o.device, *pg);
  const char* host = std::getenv("SLURMD_NODENAME");
  std::printf(
      "rank %d/%d on %s: MASTER_ADDR=%s MASTER_PORT=%u LOCAL_RANK=%d/%d NODE_RANK=%d "
      "backend=%s device=%s\n",
      id.rank, id.world_size, host != nullptr ? host : "?", id.master_addr.c_str(), id.master_port,
      id.local_rank, id.local_world_size, id.node_rank, to_string(comm.backend()),
      device.describe().c_str());
  std::fflush(stdout);

  train::Dataset train_set = train::load_fashion_mnist(o.data, true);
  train::Dataset test_set = train::load_fashion_mnist(o.data, false);
  const auto seed = static_cast<uint64_t>(o.seed);
#if TRAIN_HAVE_CUDA
  if (device.cuda) {
    train::MlpCuda model(train_set.features, o.hidden, 10, seed, device.ordinal, id.rank);
    slurmddp::GradSyncOptions so;
    so.cuda_stream = model.stream();  // where backward queues the gradients
    int rc = train_and_report(
        o, stop.get(), *pg, train_set, test_set, model,
        registration(model.tensors, model.params(), model.grads(), slurmddp::DeviceKind::kCuda),
        so);
    pg->shutdown();
    return rc;
  }
#endif
  train::Mlp model(train_set.features, o.hidden, 10, seed);
  int rc = train_and_report(o, stop.get(), *pg, train_set, test_set, model,
                            registration(model.tensors, model.params.data(), model.grads.data(),
                                         slurmddp::DeviceKind::kHost),
                            {});
  pg->shutdown();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
