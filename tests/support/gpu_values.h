// The gpu suite's collective values: collective_values.h with positive inputs
// (Signs::kPositive) and NCCL's rounded floating averages, under the names the
// suite and the NCCL benchmark use; device buffers (device_buffer.h); and the
// conformance suite's device memory.
#pragma once

#include <memory>
#include <vector>

#include "collective_values.h"
#include "conformance.h"
#include "device_buffer.h"

namespace slurmddp::gpu_testing {

using testing::all_ops;
using testing::all_types;
using testing::check_collectives;
using testing::ConformanceOptions;
using testing::decode;
using testing::DeviceBuffer;
using testing::encode;
using testing::is_integer;
using testing::scale_of;

inline double input_value(DataType t, int rank, size_t i) {
  return testing::input_value(t, rank, i, testing::Signs::kPositive);
}

inline double expected_reduction(DataType t, ReduceOp op, int n, size_t i) {
  return testing::expected_reduction(t, op, n, i, testing::Signs::kPositive);
}

inline double tolerance(DataType t, ReduceOp op, double expected) {
  return testing::rounded_average_tolerance(t, op, expected);
}

// The conformance suite's buffers in the current device's memory.
class DeviceMemory final : public testing::Memory {
 public:
  class Block final : public testing::Memory::Block {
   public:
    explicit Block(size_t bytes) : buffer_(bytes) {}
    uint8_t* data() override { return buffer_.bytes(); }

   private:
    DeviceBuffer buffer_;
  };

  const char* name() const override { return "device"; }
  std::unique_ptr<testing::Memory::Block> allocate(size_t bytes) override {
    return std::make_unique<Block>(bytes);
  }
  void upload(uint8_t* dst, const std::vector<uint8_t>& host) override {
    testing::upload_landed(dst, host.data(), host.size());
  }
  std::vector<uint8_t> download(const uint8_t* src, size_t bytes) override {
    std::vector<uint8_t> host(bytes);
    testing::download_to(host.data(), src, bytes);
    return host;
  }
};

inline DeviceMemory device_memory;

}  // namespace slurmddp::gpu_testing
