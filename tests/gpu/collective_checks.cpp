#include "collective_checks.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "gpu_values.h"

namespace slurmddp::gpu_testing {
namespace {

class Checker {
 public:
  Checker(Communicator& comm, const CheckOptions& o)
      : comm_(comm), o_(o), rank_(comm.rank()), n_(comm.size()) {}

  std::vector<std::string> run() {
    try {
      for (DataType t : all_types()) {
        for (size_t count : o_.counts) {
          for (ReduceOp op : all_ops()) {
            if (o_.only_average && op != ReduceOp::kAvg) continue;
            allreduce(t, op, count);
            reduce_scatter(t, op, count, /*in_place=*/false);
            if (!o_.only_average && op == ReduceOp::kSum) {
              reduce_scatter(t, op, count, /*in_place=*/true);
            }
          }
          if (o_.only_average) continue;
          broadcast(t, count);
          allgather(t, count, /*in_place=*/false);
          allgather(t, count, /*in_place=*/true);
        }
      }
      if (!o_.only_average) {
        for (int i = 0; i < 3; ++i) comm_.barrier()->wait(o_.wait);
      }
    } catch (const std::exception& e) {
      failures_.push_back(std::string("stopped early: ") + e.what());
    }
    return failures_;
  }

 private:
  void cuda(cudaError_t e, const std::string& what) {
    if (e != cudaSuccess) {
      throw std::runtime_error(what + ": " + cudaGetErrorString(e));
    }
  }

  void upload(const DeviceBuffer& d, size_t offset, const std::vector<uint8_t>& host) {
    if (host.empty()) return;
    cuda(cudaMemcpy(d.bytes() + offset, host.data(), host.size(), cudaMemcpyHostToDevice),
         "cudaMemcpy to the device");
  }

  std::vector<uint8_t> download(const DeviceBuffer& d, size_t offset, size_t bytes) {
    std::vector<uint8_t> host(bytes);
    if (bytes > 0) {
      cuda(cudaMemcpy(host.data(), d.bytes() + offset, bytes, cudaMemcpyDeviceToHost),
           "cudaMemcpy to the host");
    }
    return host;
  }

  DeviceBuffer& alloc(std::unique_ptr<DeviceBuffer>& slot, size_t bytes) {
    slot = std::make_unique<DeviceBuffer>(bytes);
    if (!slot->ok())
      throw std::runtime_error("cudaMalloc(" + std::to_string(bytes) + "): " + slot->error());
    return *slot;
  }

  // Compares element i of `got` with expected(i); records at most 3 mismatches.
  template <typename Expected>
  void compare(const std::string& label, DataType t, ReduceOp op, const std::vector<uint8_t>& got,
               size_t count, Expected expected) {
    size_t wrong = 0;
    std::ostringstream first;
    for (size_t i = 0; i < count; ++i) {
      const double want = expected(i);
      const double have = decode(t, got.data() + i * element_size(t));
      if (std::fabs(have - want) > tolerance(t, op, want) || std::isnan(have)) {
        if (wrong < 3) first << " [" << i << "] got " << have << " want " << want << ";";
        ++wrong;
      }
    }
    if (wrong > 0) {
      std::ostringstream os;
      os << "rank " << rank_ << "/" << n_ << " " << label << " " << to_string(t) << " count "
         << count << ": " << wrong << " wrong:" << first.str();
      failures_.push_back(os.str());
    }
  }

  void allreduce(DataType t, ReduceOp op, size_t count) {
    std::unique_ptr<DeviceBuffer> b;
    auto& buf = alloc(b, count * element_size(t));
    upload(buf, 0, encode(t, count, [&](size_t i) { return input_value(t, rank_, i); }));
    comm_.allreduce(buf.get(), count, t, op)->wait(o_.wait);
    compare(std::string("allreduce ") + to_string(op), t, op,
            download(buf, 0, count * element_size(t)), count,
            [&](size_t i) { return expected_reduction(t, op, n_, i); });
  }

  void reduce_scatter(DataType t, ReduceOp op, size_t count, bool in_place) {
    const size_t esz = element_size(t);
    const size_t total = count * static_cast<size_t>(n_);
    std::unique_ptr<DeviceBuffer> s;
    std::unique_ptr<DeviceBuffer> r;
    auto& send = alloc(s, total * esz);
    upload(send, 0, encode(t, total, [&](size_t j) { return input_value(t, rank_, j); }));
    const size_t own = static_cast<size_t>(rank_) * count * esz;
    void* recv_ptr = nullptr;
    if (in_place) {
      recv_ptr = send.bytes() + own;
    } else {
      recv_ptr = alloc(r, count * esz).get();
    }
    comm_.reduce_scatter(send.get(), recv_ptr, count, t, op)->wait(o_.wait);
    std::vector<uint8_t> got(count * esz);
    if (!got.empty()) {
      cuda(cudaMemcpy(got.data(), recv_ptr, got.size(), cudaMemcpyDeviceToHost),
           "cudaMemcpy to the host");
    }
    const size_t base = static_cast<size_t>(rank_) * count;
    compare(std::string("reduce_scatter ") + to_string(op) + (in_place ? " (in place)" : ""), t, op,
            got, count, [&](size_t i) { return expected_reduction(t, op, n_, base + i); });
  }

  void broadcast(DataType t, size_t count) {
    const int root = n_ - 1;
    std::unique_ptr<DeviceBuffer> b;
    auto& buf = alloc(b, count * element_size(t));
    upload(buf, 0, encode(t, count, [&](size_t i) { return input_value(t, rank_, i); }));
    comm_.broadcast(buf.get(), count, t, root)->wait(o_.wait);
    compare("broadcast from rank " + std::to_string(root), t, ReduceOp::kSum,
            download(buf, 0, count * element_size(t)), count,
            [&](size_t i) { return input_value(t, root, i); });
  }

  void allgather(DataType t, size_t count, bool in_place) {
    const size_t esz = element_size(t);
    const size_t total = count * static_cast<size_t>(n_);
    std::unique_ptr<DeviceBuffer> r;
    std::unique_ptr<DeviceBuffer> s;
    auto& recv = alloc(r, total * esz);
    // Poison the whole output so that a chunk left unwritten shows.
    upload(recv, 0, encode(t, total, [](size_t) { return 99.0; }));
    const size_t own = static_cast<size_t>(rank_) * count * esz;
    const auto mine = encode(t, count, [&](size_t i) { return input_value(t, rank_, i); });
    const void* send_ptr = nullptr;
    if (in_place) {
      upload(recv, own, mine);
      send_ptr = recv.bytes() + own;
    } else {
      auto& send = alloc(s, count * esz);
      upload(send, 0, mine);
      send_ptr = send.get();
    }
    comm_.allgather(send_ptr, recv.get(), count, t)->wait(o_.wait);
    compare(std::string("allgather") + (in_place ? " (in place)" : ""), t, ReduceOp::kSum,
            download(recv, 0, total * esz), total, [&](size_t j) {
              return input_value(t, static_cast<int>(j / (count == 0 ? 1 : count)),
                                 j % (count == 0 ? 1 : count));
            });
  }

  Communicator& comm_;
  const CheckOptions& o_;
  const int rank_;
  const int n_;
  std::vector<std::string> failures_;
};

}  // namespace

std::vector<std::string> check_collectives(Communicator& comm, const CheckOptions& options) {
  return Checker(comm, options).run();
}

}  // namespace slurmddp::gpu_testing
