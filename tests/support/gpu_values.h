// The gpu suite's collective values: collective_values.h with positive inputs
// (Signs::kPositive) and NCCL's rounded floating averages, as device_*() for the
// suite and the NCCL benchmark; device buffers (device_buffer.h); and the
// conformance suite's device memory.
#pragma once

#include <memory>
#include <vector>

#include "collective_values.h"
#include "conformance.h"
#include "device_buffer.h"

namespace slurmddp::support {

inline double device_input_value(DataType t, int rank, size_t i) {
  return input_value(t, rank, i, Signs::kPositive);
}

inline double device_expected_reduction(DataType t, ReduceOp op, int n, size_t i) {
  return expected_reduction(t, op, n, i, Signs::kPositive);
}

inline double device_tolerance(DataType t, ReduceOp op, double expected) {
  return rounded_average_tolerance(t, op, expected);
}

// The conformance suite's buffers in the current device's memory.
class DeviceMemory final : public Memory {
 public:
  class Block final : public Memory::Block {
   public:
    explicit Block(size_t bytes) : buffer_(bytes) {}
    uint8_t* data() override { return buffer_.bytes(); }

   private:
    DeviceBuffer buffer_;
  };

  const char* name() const override { return "device"; }
  std::unique_ptr<Memory::Block> allocate(size_t bytes) override {
    return std::make_unique<Block>(bytes);
  }
  void upload(uint8_t* dst, const std::vector<uint8_t>& host) override {
    upload_landed(dst, host.data(), host.size());
  }
  std::vector<uint8_t> download(const uint8_t* src, size_t bytes) override {
    std::vector<uint8_t> host(bytes);
    download_to(host.data(), src, bytes);
    return host;
  }
};

inline DeviceMemory device_memory;

}  // namespace slurmddp::support
