// Rendezvous benchmark: N clients join + barrier, for slurm-ddp's TCP store
// and, in the same run, torch's TCPStore (torch_store_bench.py under a Python
// that has torch). Machine-readable rows on stdout, '#' lines are comments:
//
//   impl clients reps median(ms) min(ms) max(ms) ok
//
// How it is measured (the same for both): N clients are threads of one
// process, each with its own store client (its own TCP connection), the
// server a background thread of that process, started before the clock.
// The threads are created first and wait at a gate; the clock runs from
// opening the gate until the last client returns from the barrier. Each
// client connects (with a token: the HMAC handshake), then joins a barrier:
// set its rank key, add to a counter, the last one sets "done", wait "done".
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "slurmddp/error.h"
#include "slurmddp/store.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_server.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<int> clients = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  int reps = 5;
  bool ours = true;
  bool open = false;  // also measure slurm-ddp without a token
  std::string python = "/usr/bin/python3";
  std::string torch_script = SLURMDDP_TORCH_STORE_BENCH;
  bool torch = true;
  int torch_budget_s = 30;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "store_bench: %s\n"
               "usage: store_bench [--clients 16,32,...] [--reps R] [--open] [--no-torch]\n"
               "                   [--torch-only] [--python PATH] [--torch-script PATH]\n"
               "                   [--torch-budget-s S]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--clients") {
      o.clients.clear();
      std::string v = value();
      for (size_t p = 0; p <= v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        o.clients.push_back(std::atoi(v.substr(p, q - p).c_str()));
        if (o.clients.back() < 1) usage("client counts must be >= 1");
        p = q + 1;
      }
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--open") {
      o.open = true;
    } else if (a == "--no-torch") {
      o.torch = false;
    } else if (a == "--torch-only") {
      o.ours = false;
    } else if (a == "--python") {
      o.python = value();
    } else if (a == "--torch-script") {
      o.torch_script = value();
    } else if (a == "--torch-budget-s") {
      o.torch_budget_s = std::max(1, std::atoi(value().c_str()));
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  return o;
}

// Raises the soft limit on open files to the hard limit; returns it.
rlim_t raise_nofile() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
  getrlimit(RLIMIT_NOFILE, &r);
  return r.rlim_cur;
}

// Counts the clients that are done (or failed); wakes the main thread at the last.
struct Finish {
  std::atomic<int> count{0};
  int expected = 0;
  std::mutex mu;
  std::condition_variable cv;
  void one_more() {
    if (count.fetch_add(1) + 1 == expected) {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_one();
    }
  }
};

struct Client {
  int rank = 0;
  int world = 0;
  uint16_t port = 0;
  const std::string* token = nullptr;
  std::shared_mutex* gate = nullptr;
  std::shared_mutex* exit_gate = nullptr;
  Finish* finish = nullptr;
  Clock::time_point done;
  std::string error;
};

void* run_client(void* arg) {
  auto* c = static_cast<Client*>(arg);
  // Thread start-up, untimed: touch the stack and this thread's malloc arena
  // now rather than inside the measured window.
  {
    volatile char stack[32 * 1024];
    std::memset(const_cast<char*>(stack), 0, sizeof stack);
    std::free(std::malloc(4096));
  }
  { std::shared_lock<std::shared_mutex> wait_for_the_gate(*c->gate); }
  try {
    slurmddp::TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = c->port;
    o.token = *c->token;
    o.timeout = std::chrono::seconds(120);
    auto store = slurmddp::make_tcp_store(o);
    slurmddp::store_barrier(*store, "bench", c->rank, c->world, std::chrono::seconds(120));
    c->done = Clock::now();
    c->finish->one_more();
    // Hold the connection until every client is done, so that no teardown
    // runs inside the timed window.
    std::shared_lock<std::shared_mutex> wait_for_the_exit_gate(*c->exit_gate);
  } catch (const std::exception& e) {
    c->error = e.what();
    c->finish->one_more();
  }
  return nullptr;
}

// One repetition: milliseconds from the gate to the last client, or a
// negative number when a client failed (its error printed as a comment).
double one_run(int n, const std::string& token) {
  slurmddp::TcpStoreServerOptions so;
  so.bind_host = "127.0.0.1";
  so.token = token;
  auto server = slurmddp::TcpStoreServer::start(so);
  std::shared_mutex gate;
  std::shared_mutex exit_gate;
  Finish finish;
  finish.expected = n;
  gate.lock();
  exit_gate.lock();
  std::vector<Client> clients(n);
  std::vector<pthread_t> threads(n);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int started = 0;
  for (int r = 0; r < n; ++r) {
    clients[r] = Client{r, n, server->port(), &token, &gate, &exit_gate, &finish, {}, {}};
    if (pthread_create(&threads[r], &attr, run_client, &clients[r]) != 0) {
      std::printf("# could not start thread %d of %d: %s\n", r, n, std::strerror(errno));
      break;
    }
    ++started;
  }
  pthread_attr_destroy(&attr);
  finish.expected = started;  // (equal to n unless a thread failed to start)
  const auto start = Clock::now();
  gate.unlock();
  {
    std::unique_lock<std::mutex> lock(finish.mu);
    finish.cv.wait(lock, [&] { return finish.count.load() == started; });
  }
  exit_gate.unlock();
  for (int r = 0; r < started; ++r) pthread_join(threads[r], nullptr);
  if (started < n) return -1;
  Clock::time_point last = start;
  for (const auto& c : clients) {
    if (!c.error.empty()) {
      std::printf("# %d clients: rank %d failed: %s\n", n, c.rank, c.error.c_str());
      return -1;
    }
    last = std::max(last, c.done);
  }
  return std::chrono::duration<double, std::milli>(last - start).count();
}

void measure_ours(const std::string& impl, int n, int reps, const std::string& token) {
  std::vector<double> times;
  bool ok = one_run(n, token) >= 0;  // warm-up, untimed (grows the fd table, warms caches)
  for (int i = 0; i < reps && ok; ++i) {
    double ms = one_run(n, token);
    if (ms < 0) {
      ok = false;
    } else {
      times.push_back(ms);
    }
  }
  if (times.empty()) {
    std::printf("%s %d 0 - - - no\n", impl.c_str(), n);
  } else {
    std::sort(times.begin(), times.end());
    size_t m = times.size();
    double median = m % 2 ? times[m / 2] : (times[m / 2 - 1] + times[m / 2]) / 2;
    std::printf("%s %d %zu %.2f %.2f %.2f %s\n", impl.c_str(), n, m, median, times.front(),
                times.back(), ok ? "yes" : "no");
  }
  std::fflush(stdout);
}

// Runs torch_store_bench.py for one size and copies its rows and comments
// through; anything else it prints (torch's own logging) is dropped, but the
// last such line is kept as the reason when no row came back.
bool measure_torch(const Options& o, int n) {
  std::string cmd = "'" + o.python + "' '" + o.torch_script + "' --clients " + std::to_string(n) +
                    " --reps " + std::to_string(o.reps) + " --budget-seconds " +
                    std::to_string(o.torch_budget_s) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char line[4096];
  bool row = false;
  bool slow = false;
  std::string last_other;
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (std::strncmp(line, "# torch ", 8) == 0 && std::strstr(line, "python") != nullptr) {
      continue;  // its version line: printed once in the preamble
    }
    if (line[0] == '#') {
      std::fputs(line, stdout);
    } else if (std::strncmp(line, "torch ", 6) == 0) {
      std::fputs(line, stdout);
      row = true;
      double median = 0;
      if (std::sscanf(line, "torch %*d %*d %lf", &median) == 1 &&
          median > o.torch_budget_s * 1000.0) {
        slow = true;
      }
    } else {
      last_other = line;
    }
    std::fflush(stdout);
  }
  int rc = pclose(p);
  if (!row) {
    while (!last_other.empty() && (last_other.back() == '\n' || last_other.back() == '\r')) {
      last_other.pop_back();
    }
    std::printf("# torch %d failed (exit status %d): %s\n", n, rc, last_other.c_str());
    std::printf("torch %d 0 - - - no\n", n);
    std::fflush(stdout);
  }
  return rc == 0 && !slow;
}

std::string torch_version(const Options& o) {
  std::string cmd = "'" + o.python + "' -c 'import torch; print(torch.__version__)' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  char buf[256] = {};
  if (std::fgets(buf, sizeof buf, p) == nullptr) buf[0] = '\0';
  pclose(p);
  std::string v = buf;
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  const rlim_t nofile = raise_nofile();
  std::string torch = o.torch ? torch_version(o) : "";
  if (o.torch && torch.empty()) o.torch = false;
  std::printf("# slurm-ddp store rendezvous benchmark: N clients join + barrier\n");
  std::printf(
      "# clients: threads of one process (256 KiB stacks), one store client and TCP "
      "connection each; server: a thread of the same process; loopback\n");
  std::printf(
      "# per client: connect (+ HMAC handshake with a token), then a barrier: set rank "
      "key, add counter, last sets done, wait done\n");
  std::printf(
      "# time: from opening the gate to the last client leaving the barrier (thread and "
      "server start not timed); one untimed warm-up, then median, min, max over reps\n");
  std::printf("# cpus online: %ld; RLIMIT_NOFILE: %llu\n", sysconf(_SC_NPROCESSORS_ONLN),
              static_cast<unsigned long long>(nofile));
  std::printf("# torch: %s\n", o.torch ? (torch + " via " + o.python).c_str()
                                       : "not measured (--no-torch, or no torch in --python)");
  std::printf("# impl clients reps median(ms) min(ms) max(ms) ok\n");
  std::fflush(stdout);
  const std::string token = "store-bench-token-0123456789abcdef";
  bool torch_on = o.torch;
  for (int n : o.clients) {
    // Each client needs a socket on both ends, both in this process.
    if (static_cast<rlim_t>(2 * n + 64) > nofile) {
      std::printf("# %d clients need %d file descriptors; RLIMIT_NOFILE is %llu: skipped\n", n,
                  2 * n + 64, static_cast<unsigned long long>(nofile));
      continue;
    }
    if (o.ours) {
      measure_ours("slurmddp-token", n, o.reps, token);
      if (o.open) measure_ours("slurmddp-open", n, o.reps, "");
    }
    if (torch_on) {
      torch_on = measure_torch(o, n);
    } else if (o.torch) {
      std::printf("torch %d 0 - - - skipped\n", n);
    }
  }
  return 0;
}
