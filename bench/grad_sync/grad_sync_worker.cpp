// One rank of the GradSync benchmark (grad_sync_worker.h).
#include "grad_sync_worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "models.h"
#include "rank_launcher.h"  // tests/support
#include "simulated_backward.h"
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp_config.h"

namespace slurmddp::bench {
namespace {

using namespace std::chrono_literals;

class Worker {
 public:
  explicit Worker(const support::RankArgs& self) : rank_(self.rank), size_(self.world) {
    store_ = support::connect_store(self, 120s);
    GlooOptions go;
    go.rank = rank_;
    go.size = size_;
    go.store = store_;
    go.hostname = "127.0.0.1";
    go.timeout = 300s;
    comm_ = make_gloo_communicator(go);
  }

  void serve() {
    std::string line;
    while (std::getline(std::cin, line)) {
      std::istringstream is(line);
      std::string cmd;
      is >> cmd;
      try {
        if (cmd == "quit") break;
        if (cmd == "setup") {
          std::string model;
          double compute = 0;
          is >> model >> compute;
          setup(model, compute);
        } else if (cmd == "run") {
          std::string what;
          is >> what;
          const double cpu = cpu_seconds();
          const double t = run(what);
          std::cout << "ok " << t << " " << cpu_seconds() - cpu << std::endl;
        } else {
          std::cout << "error unknown command " << cmd << std::endl;
        }
      } catch (const std::exception& e) {
        std::string m = e.what();
        std::replace(m.begin(), m.end(), '\n', ' ');
        std::cout << "error " << m << std::endl;
      }
    }
    comm_->barrier()->wait(300s);
  }

 private:
  void barrier() { comm_->barrier()->wait(300s); }

  void setup(const std::string& model, double compute_seconds) {
    views_.reset();
    copies_.reset();
    specs_ = model_by_name(model);
    if (specs_.empty()) throw InvalidArgument("bench: unknown model " + model);
    const size_t total = total_count(specs_);
    // Note [Simulated backward]: the same work on every rank.
    double rate = calibrate();
    comm_->allreduce(&rate, 1, DataType::kFloat64, ReduceOp::kAvg)->wait(300s);
    seconds_.clear();
    blocks_.clear();
    for (const auto& s : specs_) {
      const double sec =
          compute_seconds * static_cast<double>(s.count) / static_cast<double>(total);
      seconds_.push_back(sec);
      blocks_.push_back(sec * rate);
    }
    flat_.assign(total, 1.0f);
    params_.assign(specs_.size(), {});
    grads_.assign(specs_.size(), {});
    for (size_t i = 0; i < specs_.size(); ++i) {
      params_[i].assign(specs_[i].count, 0.0f);
      grads_[i].assign(specs_[i].count, 0.0f);
    }
    std::vector<GradParameter> v;
    std::vector<GradParameter> c;
    for (size_t i = 0; i < specs_.size(); ++i) {
      GradParameter p;
      p.name = specs_[i].name;
      p.data = params_[i].data();
      p.count = specs_[i].count;
      v.push_back(p);
      p.grad = grads_[i].data();
      c.push_back(p);
    }
    GradSyncOptions vo;
    vo.gradient_as_bucket_view = true;
    views_ = std::make_unique<GradSync>(comm_, v, vo);
    copies_ = std::make_unique<GradSync>(comm_, c, GradSyncOptions{});
    // Correctness once: integer-valued gradients average exactly.
    size_t wrong = check(*views_, true) + check(*copies_, false);
    comm_->allreduce(flat_.data(), flat_.size(), DataType::kFloat32, ReduceOp::kAvg)->wait(300s);
    for (float x : flat_) wrong += x != 1.0f;
    std::cout << "ok " << wrong << " " << views_->buckets().size();
    for (const auto& b : views_->buckets()) std::cout << " " << b.wire_bytes;
    std::cout << std::endl;
  }

  float* grad(GradSync& s, bool views, size_t i) {
    return views ? static_cast<float*>(s.gradient(i)) : grads_[i].data();
  }

  size_t check(GradSync& s, bool views) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      float* g = grad(s, views, i);
      for (size_t k = 0; k < specs_[i].count; ++k) {
        g[k] = static_cast<float>((rank_ * 3 + static_cast<int>(k % 7)) % 11);
      }
    }
    for (size_t i = specs_.size(); i-- > 0;) s.mark_ready(i);
    s.wait();
    size_t wrong = 0;
    for (size_t i = 0; i < specs_.size(); ++i) {
      const float* g = grad(s, views, i);
      for (size_t k = 0; k < specs_[i].count; ++k) {
        float sum = 0;
        for (int r = 0; r < size_; ++r)
          sum += static_cast<float>((r * 3 + static_cast<int>(k % 7)) % 11);
        wrong += g[k] != sum / static_cast<float>(size_);
      }
    }
    return wrong;
  }

  // One simulated backward (Note [Simulated backward]); with `sync`,
  // mark_ready after each gradient, then wait().
  void backward(GradSync* sync, bool views, const std::string& mode) {
    const auto t0 = Clock::now();
    double done_at = 0;
    float acc[16];
    for (int j = 0; j < 16; ++j) acc[j] = static_cast<float>(j);
    for (size_t i = specs_.size(); i-- > 0;) {
      done_at += seconds_[i];
      const auto until =
          t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(done_at));
      if (mode == "work") {
        burn_work(blocks_[i]);
      } else if (mode == "idle") {
        std::this_thread::sleep_until(until);
      } else {
        while (Clock::now() < until) work_block(acc);
      }
      float* g = views ? static_cast<float*>(views_->gradient(i)) : grads_[i].data();
      std::fill(g, g + specs_[i].count, 0.5f);
      if (sync != nullptr) sync->mark_ready(i);
    }
    for (int j = 0; j < 16; ++j) g_sink += acc[j];
    if (sync != nullptr) {
      sync->wait();
      if (rank_ == 0 && std::getenv("GRAD_SYNC_BENCH_TRACE") != nullptr) {
        const auto st = sync->last_step_stats();
        std::fprintf(stderr,
                     "trace %s: step %.1f ms, wait %.1f ms; per bucket ready/issued/done ms:",
                     mode.c_str(), st.step_seconds * 1e3, st.wait_seconds * 1e3);
        for (const auto& b : st.buckets) {
          std::fprintf(stderr, " [%.1f %.1f %.1f]", b.ready * 1e3, b.issued * 1e3, b.done * 1e3);
        }
        std::fprintf(stderr, "\n");
      }
    }
  }

  // flat | views | copies | <mode> | <mode>_views | <mode>_copies
  double run(const std::string& what) {
    barrier();
    const auto start = Clock::now();
    if (what == "flat") {
      comm_->allreduce(flat_.data(), flat_.size(), DataType::kFloat32, ReduceOp::kAvg)->wait(300s);
    } else if (what == "views" || what == "copies") {
      GradSync& s = what == "views" ? *views_ : *copies_;
      for (size_t i = specs_.size(); i-- > 0;) s.mark_ready(i);
      s.wait();
    } else {
      const auto us = what.find('_');
      const std::string mode = what.substr(0, us);
      const std::string sync = us == std::string::npos ? "" : what.substr(us + 1);
      if (mode != "busy" && mode != "work" && mode != "idle") {
        throw InvalidArgument("bench: unknown experiment " + what);
      }
      if (sync.empty()) {
        backward(nullptr, true, mode);
      } else if (sync == "views") {
        backward(views_.get(), true, mode);
      } else if (sync == "copies") {
        backward(copies_.get(), false, mode);
      } else {
        throw InvalidArgument("bench: unknown experiment " + what);
      }
    }
    return seconds_since(start);
  }

  const int rank_;
  const int size_;
  std::shared_ptr<TcpStore> store_;
  std::shared_ptr<Communicator> comm_;
  std::vector<ParamSpec> specs_;
  std::vector<double> seconds_;
  std::vector<double> blocks_;
  std::vector<float> flat_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> grads_;
  std::unique_ptr<GradSync> views_;
  std::unique_ptr<GradSync> copies_;
};

}  // namespace

void serve_worker(const support::RankArgs& self) {
  Worker w(self);
  w.serve();
}

}  // namespace slurmddp::bench
