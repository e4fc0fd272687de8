// Note [Shared-memory segment] and Note [Shared-memory protocol] in shm_node.h.
#include "comm/host/shm_node.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>

#include "comm/host/reduce.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

namespace {

constexpr uint32_t kMagic = 0x5d0d5e9a;
constexpr int kSpin = 256;
// How long a wait keeps spinning before it sleeps when every local rank can
// have a core of its own (Note [Shared-memory protocol]).
constexpr auto kSpinBudget = std::chrono::microseconds(200);
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
constexpr auto kSleepSlice = std::chrono::milliseconds(50);
constexpr size_t kPage = 4096;
// The unit of the reduction of a rank's chunk: small enough to stay in L1.
constexpr size_t kReduceBlockBytes = 16384;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Counters only move forward; comparisons survive wrap-around.
bool reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds slice) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(slice.count() / 1000);
  ts.tv_nsec = static_cast<long>((slice.count() % 1000) * 1000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

}  // namespace

struct alignas(64) ShmNode::Counter {
  std::atomic<uint32_t> value[3];
};

struct ShmNode::Header {
  uint32_t magic;
  uint32_t local_size;
  uint64_t slot_bytes;
  std::atomic<uint32_t> aborted;
  std::atomic<uint32_t> sleepers;
  char reason[512];
  Counter counters[1];  // local_size of them
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be plain words");

ShmNode::ShmNode(const ShmOptions& o)
    : peers_(o.peers),
      host_(o.host),
      slot_bytes_(round_up(std::max<size_t>(o.slot_bytes, 64), 64)) {
  const auto me = std::find_if(peers_.begin(), peers_.end(),
                               [&](const ShmPeer& p) { return p.rank == o.rank; });
  if (me == peers_.end() || peers_.size() < 2) {
    throw InvalidArgument("shm: rank " + std::to_string(o.rank) +
                          " is not among the node's ranks, or the node has one");
  }
  local_ = static_cast<int>(me - peers_.begin());
  const size_t n = peers_.size();
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0 && static_cast<size_t>(CPU_COUNT(&cpus)) >= n) {
    spin_budget_ = kSpinBudget;
  }
  const size_t header = round_up(offsetof(Header, counters) + n * sizeof(Counter), kPage);
  map_bytes_ = header + n * round_up(slot_bytes_, kPage);
  const auto left = [&] {
    return std::max(
        std::chrono::duration_cast<std::chrono::milliseconds>(o.deadline - Clock::now()),
        std::chrono::milliseconds(0));
  };
  const std::string where = "; rank=" + std::to_string(o.rank) + ", host=" + host_;
  if (leader()) {
    const int fd = static_cast<int>(syscall(SYS_memfd_create, "slurmddp-shm", MFD_CLOEXEC));
    if (fd < 0) throw Error("shm: memfd_create failed: " + errno_text(errno) + where);
    void* p = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(map_bytes_)) == 0) {
      p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (p == MAP_FAILED) {
      const int e = errno;
      close(fd);
      // The others wait for the segment: tell them it will not come.
      o.store->set(o.key + "/segment", "none " + errno_text(e));
      throw Error("shm: cannot make a " + std::to_string(map_bytes_) +
                  "-byte segment: " + errno_text(e) + where);
    }
    base_ = static_cast<uint8_t*>(p);
    header_ = reinterpret_cast<Header*>(base_);
    header_->magic = kMagic;
    header_->local_size = static_cast<uint32_t>(n);
    header_->slot_bytes = slot_bytes_;
    o.store->set(o.key + "/segment", std::to_string(getpid()) + " " + std::to_string(fd));
    // Until every peer has mapped it (or given up), the descriptor must stay open.
    try {
      o.store->wait({o.key + "/mapped"}, left());
    } catch (...) {
      close(fd);
      munmap(base_, map_bytes_);
      base_ = nullptr;
      throw;
    }
    close(fd);
  } else {
    const Bytes b = o.store->get(o.key + "/segment", left());
    std::istringstream in(std::string(b.begin(), b.end()));
    std::string pid, fd;
    in >> pid >> fd;
    std::string why;
    if (pid == "none") {
      why = "the node's first rank could not make the segment";
    } else {
      const std::string path = "/proc/" + pid + "/fd/" + fd;
      const int mine = open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (mine < 0) {
        why = "cannot open " + path + ": " + errno_text(errno);
      } else {
        void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
        if (p == MAP_FAILED) {
          why = "cannot map " + path + ": " + errno_text(errno);
        } else {
          base_ = static_cast<uint8_t*>(p);
          header_ = reinterpret_cast<Header*>(base_);
          if (header_->magic != kMagic || header_->local_size != n ||
              header_->slot_bytes != slot_bytes_) {
            why = path + " is not this node's segment";
            munmap(base_, map_bytes_);
            base_ = nullptr;
          }
        }
        close(mine);
      }
    }
    // Counted whether it worked or not: the first rank must not wait for us.
    if (o.store->add(o.key + "/count", 1) == static_cast<int64_t>(n) - 1) {
      o.store->set(o.key + "/mapped", "1");
    }
    if (!why.empty()) throw Error("shm: " + why + where);
  }
}

ShmNode::~ShmNode() {
  if (base_ != nullptr) munmap(base_, map_bytes_);
}

uint8_t* ShmNode::slot(int local) const {
  const size_t n = peers_.size();
  const size_t header = round_up(offsetof(Header, counters) + n * sizeof(Counter), kPage);
  return base_ + header + static_cast<size_t>(local) * round_up(slot_bytes_, kPage);
}

std::atomic<uint32_t>& ShmNode::counter(int local, Phase phase) const {
  return header_->counters[local].value[phase];
}

void ShmNode::publish(Phase phase, uint32_t value) {
  auto& c = counter(local_, phase);
  c.store(value, std::memory_order_seq_cst);
  if (header_->sleepers.load(std::memory_order_seq_cst) > 0) futex_wake(&c);
}

bool ShmNode::alive(int j) const {
  const int pid = peers_[static_cast<size_t>(j)].pid;
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A killed task stays a zombie until slurmstepd reaps it.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return !text.empty() || !stat;
  const char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

void ShmNode::fail_aborted(const char* what) {
  // The reason is written between the two values of `aborted`.
  for (int i = 0; i < 100000 && header_->aborted.load(std::memory_order_acquire) != 2; ++i) {
    cpu_relax();
  }
  throw PeerError(std::string("shm: ") + what + " on " + host_ +
                  " failed: the node's shared-memory group was aborted: " +
                  std::string(header_->reason, strnlen(header_->reason, sizeof header_->reason)) +
                  "; rank=" + std::to_string(peers_[static_cast<size_t>(local_)].rank));
}

void ShmNode::wait_one(int j, Phase phase, uint32_t value, Clock::time_point deadline,
                       const char* what) {
  auto& c = counter(j, phase);
  // kSpin pauses at least, then more until spin_budget_ has passed.
  const auto spin_until = Clock::now() + spin_budget_;
  do {
    for (int i = 0; i < kSpin; ++i) {
      if (reached(c.load(std::memory_order_acquire), value)) return;
      cpu_relax();
    }
  } while (Clock::now() < spin_until && header_->aborted.load(std::memory_order_relaxed) == 0);
  auto next_check = Clock::now() + kLivenessPeriod;
  for (;;) {
    if (reached(c.load(std::memory_order_acquire), value)) return;
    if (header_->aborted.load(std::memory_order_acquire) != 0) fail_aborted(what);
    const auto now = Clock::now();
    const ShmPeer& peer = peers_[static_cast<size_t>(j)];
    // Only for messages: built when something went wrong.
    const auto who = [&] {
      std::string w = "rank " + std::to_string(peer.rank);
      w += " (pid " + std::to_string(peer.pid) + ") on ";
      w += host_;
      return w;
    };
    const auto me = [&] {
      std::string m = "; rank=" + std::to_string(peers_[static_cast<size_t>(local_)].rank);
      m += ", host=" + host_;
      return m;
    };
    if (now >= next_check) {
      if (!alive(j)) {
        abort(who() + " died during " + what);
        std::string m = "shm: " + std::string(what);
        m += " failed: " + who();
        m += " died (lost peer rank " + std::to_string(peer.rank) + ")";
        throw ShmPeerDied(m + me(), peer.rank);
      }
      next_check = now + kLivenessPeriod;
    }
    if (now >= deadline) {
      abort(who() + " did not arrive in time for " + what);
      std::string m = "shm: " + std::string(what);
      m += " timed out waiting for " + who();
      m += " (missing=[" + std::to_string(peer.rank) + "])";
      throw TimeoutError(m + me());
    }
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = c.load(std::memory_order_seq_cst);
    if (!reached(seen, value) && header_->aborted.load(std::memory_order_seq_cst) == 0) {
      const auto slice = std::min<Clock::duration>(
          {kSleepSlice, std::max<Clock::duration>(deadline - now, std::chrono::milliseconds(1)),
           std::max<Clock::duration>(next_check - now, std::chrono::milliseconds(1))});
      futex_wait(&c, seen,
                 std::max(std::chrono::duration_cast<std::chrono::milliseconds>(slice),
                          std::chrono::milliseconds(1)));
    }
    header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void ShmNode::wait_all(Phase phase, uint32_t value, int first, int last, Clock::time_point deadline,
                       const char* what) {
  for (int j = first; j < last; ++j) {
    if (j != local_) wait_one(j, phase, value, deadline, what);
  }
}

void ShmNode::abort(const std::string& reason) {
  if (header_ == nullptr) return;
  uint32_t expected = 0;
  if (header_->aborted.compare_exchange_strong(expected, 1)) {
    const size_t n = std::min(reason.size(), sizeof header_->reason - 1);
    std::memcpy(header_->reason, reason.data(), n);
    header_->reason[n] = '\0';
    // A release store: whoever sees 2 sees the whole reason.
    header_->aborted.store(2, std::memory_order_seq_cst);
  }
  for (int j = 0; j < local_size(); ++j) {
    for (Phase p : {kArrived, kReduced, kCopied}) futex_wake(&counter(j, p));
  }
}

void ShmNode::pieces(void* data, size_t count, DataType type, ReduceOp op, bool everyone,
                     Clock::time_point deadline) {
  const size_t esize = element_size(type);
  const size_t per_piece = slot_bytes_ / esize;
  const InplaceReduceFn reduce = inplace_reducer(type, op);
  const int n_local = local_size();
  auto* bytes = static_cast<uint8_t*>(data);
  const char* what = everyone ? "allreduce" : "reduce to the node's first rank";
  for (size_t first = 0; first < count; first += per_piece) {
    const size_t n = std::min(per_piece, count - first);
    uint8_t* piece = bytes + first * esize;
    const uint32_t s = ++seq_;
    auto lo = [&](int k) { return n * static_cast<size_t>(k) / static_cast<size_t>(n_local); };
    const size_t a = lo(local_), b = lo(local_ + 1);
    // 1. my slot is free once everyone is done with the previous piece; the
    //    others' chunks of my piece go into it (mine stays in my buffer)
    wait_all(kCopied, s - 1, 0, n_local, deadline, what);
    std::memcpy(slot(local_), piece, a * esize);
    std::memcpy(slot(local_) + b * esize, piece + b * esize, (n - b) * esize);
    publish(kArrived, s);
    // 2. my chunk of every slot into my buffer, block by block so that the
    //    block stays in cache across the L - 1 sources; then the result into
    //    my slot for the others (in a reduce to the leader, only the leader
    //    reads it)
    wait_all(kArrived, s, 0, n_local, deadline, what);
    const size_t block = std::max<size_t>(kReduceBlockBytes / esize, 1);
    const bool share = n_local > 1 && (everyone || !leader());
    for (size_t x = a; x < b; x += block) {
      const size_t m = std::min(block, b - x);
      for (int j = 0; j < n_local; ++j) {
        if (j != local_) reduce(piece + x * esize, slot(j) + x * esize, m);
      }
      if (share) std::memcpy(slot(local_) + x * esize, piece + x * esize, m * esize);
    }
    publish(kReduced, s);
    // 3. everyone else's chunk into my buffer
    if (everyone || leader()) {
      for (int j = 0; j < n_local; ++j) {
        if (j == local_) continue;
        wait_one(j, kReduced, s, deadline, what);
        const size_t ja = lo(j), jb = lo(j + 1);
        std::memcpy(piece + ja * esize, slot(j) + ja * esize, (jb - ja) * esize);
      }
    }
    publish(kCopied, s);
  }
}

void ShmNode::allreduce(void* data, size_t count, DataType type, ReduceOp op,
                        Clock::time_point deadline) {
  pieces(data, count, type, op, true, deadline);
}

void ShmNode::reduce_to_leader(void* data, size_t count, DataType type, ReduceOp op,
                               Clock::time_point deadline) {
  pieces(data, count, type, op, false, deadline);
}

void ShmNode::broadcast_from_leader(void* data, size_t bytes, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(data);
  const char* what = "broadcast from the node's first rank";
  for (size_t first = 0; first < bytes; first += slot_bytes_) {
    const size_t n = std::min(slot_bytes_, bytes - first);
    const uint32_t s = ++seq_;
    if (leader()) {
      wait_all(kCopied, s - 1, 0, local_size(), deadline, what);
      std::memcpy(slot(0), p + first, n);
      publish(kArrived, s);
    } else {
      wait_one(0, kArrived, s, deadline, what);
      std::memcpy(p + first, slot(0), n);
    }
    publish(kCopied, s);
  }
}

}  // namespace slurmddp::comm
