#include "conformance.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <sstream>
#include <stdexcept>

namespace slurmddp::support {
namespace {

class HostMemory final : public Memory {
 public:
  class HostBlock final : public Block {
   public:
    explicit HostBlock(size_t bytes) : bytes_(bytes + 1) {}  // +1: never a null data()
    uint8_t* data() override { return bytes_.data(); }

   private:
    std::vector<uint8_t> bytes_;
  };

  const char* name() const override { return "host"; }
  std::unique_ptr<Block> allocate(size_t bytes) override {
    return std::make_unique<HostBlock>(bytes);
  }
  void upload(uint8_t* dst, const std::vector<uint8_t>& host) override {
    if (!host.empty()) std::memcpy(dst, host.data(), host.size());
  }
  std::vector<uint8_t> download(const uint8_t* src, size_t bytes) override {
    return std::vector<uint8_t>(src, src + bytes);
  }
};

class Checker {
 public:
  Checker(Communicator& comm, Memory& memory, const ConformanceOptions& o)
      : comm_(comm), mem_(memory), o_(o), rank_(comm.rank()), n_(comm.size()) {}

  std::vector<std::string> run() {
    try {
      for (DataType t : all_types()) {
        for (size_t count : o_.counts) {
          for (ReduceOp op : all_ops()) {
            if (o_.only_average && op != ReduceOp::kAvg) continue;
            allreduce(t, op, count);
            reduce_scatter(t, op, count, /*in_place=*/false);
            if (o_.in_place && !o_.only_average && op == ReduceOp::kSum) {
              reduce_scatter(t, op, count, /*in_place=*/true);
            }
          }
          if (o_.only_average) continue;
          broadcast(t, count);
          allgather(t, count, /*in_place=*/false);
          if (o_.in_place) allgather(t, count, /*in_place=*/true);
        }
      }
      if (o_.large_count > 0 && !o_.only_average) {
        for (DataType t : all_types()) allreduce(t, ReduceOp::kSum, o_.large_count);
      }
      if (!o_.only_average) {
        for (int i = 0; i < 3; ++i) comm_.barrier()->wait(o_.wait);
      }
    } catch (const std::exception& e) {
      failures_.push_back("rank " + std::to_string(rank_) + "/" + std::to_string(n_) + " (" +
                          mem_.name() + " memory) stopped early: " + e.what());
    }
    return failures_;
  }

 private:
  double input(DataType t, int rank, size_t i) const { return input_value(t, rank, i, o_.signs); }

  // Compares element i of `got` with expected(i); records at most 3 mismatches.
  template <typename Expected>
  void compare(const std::string& label, DataType t, ReduceOp op, const std::vector<uint8_t>& got,
               size_t count, Expected expected) {
    size_t wrong = 0;
    std::ostringstream first;
    for (size_t i = 0; i < count; ++i) {
      const double want = expected(i);
      const double have = decode(t, got.data() + i * element_size(t));
      const double slack = o_.rounded_average ? rounded_average_tolerance(t, op, want) : 0.0;
      if (std::isnan(have) || std::fabs(have - want) > slack) {
        if (wrong < 3) first << " [" << i << "] got " << have << " want " << want << ";";
        ++wrong;
      }
    }
    if (wrong > 0) {
      std::ostringstream os;
      os << "rank " << rank_ << "/" << n_ << " " << label << " " << to_string(t) << " count "
         << count << " (" << mem_.name() << " memory): " << wrong << " wrong:" << first.str();
      failures_.push_back(os.str());
    }
  }

  void allreduce(DataType t, ReduceOp op, size_t count) {
    const size_t bytes = count * element_size(t);
    auto buf = mem_.allocate(bytes);
    mem_.upload(buf->data(), encode(t, count, [&](size_t i) { return input(t, rank_, i); }));
    comm_.allreduce(buf->data(), count, t, op)->wait(o_.wait);
    compare(std::string("allreduce ") + to_string(op), t, op, mem_.download(buf->data(), bytes),
            count, [&](size_t i) { return expected_reduction(t, op, n_, i, o_.signs); });
  }

  void reduce_scatter(DataType t, ReduceOp op, size_t count, bool in_place) {
    const size_t esz = element_size(t);
    const size_t total = count * static_cast<size_t>(n_);
    auto send = mem_.allocate(total * esz);
    mem_.upload(send->data(), encode(t, total, [&](size_t j) { return input(t, rank_, j); }));
    std::unique_ptr<Memory::Block> separate;
    uint8_t* recv = nullptr;
    if (in_place) {
      recv = send->data() + static_cast<size_t>(rank_) * count * esz;
    } else {
      separate = mem_.allocate(count * esz);
      recv = separate->data();
    }
    comm_.reduce_scatter(send->data(), recv, count, t, op)->wait(o_.wait);
    const size_t base = static_cast<size_t>(rank_) * count;
    compare(std::string("reduce_scatter ") + to_string(op) + (in_place ? " (in place)" : ""), t, op,
            mem_.download(recv, count * esz), count,
            [&](size_t i) { return expected_reduction(t, op, n_, base + i, o_.signs); });
  }

  void broadcast(DataType t, size_t count) {
    const int root = n_ - 1;
    const size_t bytes = count * element_size(t);
    auto buf = mem_.allocate(bytes);
    mem_.upload(buf->data(), encode(t, count, [&](size_t i) { return input(t, rank_, i); }));
    comm_.broadcast(buf->data(), count, t, root)->wait(o_.wait);
    compare("broadcast from rank " + std::to_string(root), t, ReduceOp::kSum,
            mem_.download(buf->data(), bytes), count, [&](size_t i) { return input(t, root, i); });
  }

  void allgather(DataType t, size_t count, bool in_place) {
    const size_t esz = element_size(t);
    const size_t total = count * static_cast<size_t>(n_);
    auto recv = mem_.allocate(total * esz);
    // Poison the whole output so that a block left unwritten shows.
    mem_.upload(recv->data(), encode(t, total, [](size_t) { return 99.0; }));
    const auto mine = encode(t, count, [&](size_t i) { return input(t, rank_, i); });
    std::unique_ptr<Memory::Block> separate;
    const uint8_t* send = nullptr;
    if (in_place) {
      uint8_t* own = recv->data() + static_cast<size_t>(rank_) * count * esz;
      mem_.upload(own, mine);
      send = own;
    } else {
      separate = mem_.allocate(count * esz);
      mem_.upload(separate->data(), mine);
      send = separate->data();
    }
    comm_.allgather(send, recv->data(), count, t)->wait(o_.wait);
    const size_t per = count == 0 ? 1 : count;
    compare(std::string("allgather") + (in_place ? " (in place)" : ""), t, ReduceOp::kSum,
            mem_.download(recv->data(), total * esz), total,
            [&](size_t j) { return input(t, static_cast<int>(j / per), j % per); });
  }

  Communicator& comm_;
  Memory& mem_;
  const ConformanceOptions& o_;
  const int rank_;
  const int n_;
  std::vector<std::string> failures_;
};

}  // namespace

Memory& host_memory() {
  static HostMemory memory;
  return memory;
}

ConformanceOptions ConformanceOptions::host() {
  ConformanceOptions o;
  o.counts = {0, 1, 7, 1001, 100003};
  o.large_count = 1048579;
  return o;
}

ConformanceOptions ConformanceOptions::nccl() {
  ConformanceOptions o;
  o.counts = {0, 1, 7, 1001, 262147};
  o.in_place = true;
  o.signs = Signs::kPositive;
  o.rounded_average = true;
  return o;
}

std::vector<std::string> check_collectives(Communicator& comm, Memory& memory,
                                           const ConformanceOptions& options) {
  return Checker(comm, memory, options).run();
}

}  // namespace slurmddp::support
