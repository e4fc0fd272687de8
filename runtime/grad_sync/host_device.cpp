// The host implementation of Device: aligned heap memory, copies and casts on
// the calling thread (Note [Step hooks] in device.h).
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grad_sync/bucket_plan.h"
#include "grad_sync/cast.h"
#include "grad_sync/device.h"
#include "slurmddp/error.h"
#include "slurmddp_config.h"

namespace slurmddp::grad_sync {

namespace {

class HostDevice final : public Device {
 public:
  HostDevice() = default;
  ~HostDevice() override {
    for (auto& [p, bytes] : owned_) {
      std::free(p);
    }
  }
  HostDevice(const HostDevice&) = delete;
  HostDevice& operator=(const HostDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::kHost; }

  void* allocate(size_t bytes) override {
    if (bytes == 0) {
      return nullptr;
    }
    const size_t rounded = (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
    void* p = std::aligned_alloc(kAlignBytes, rounded);
    if (p == nullptr) {
      throw Error("grad_sync: failed to allocate bucket memory: out of host memory; bytes=" +
                  std::to_string(bytes));
    }
    std::memset(p, 0, rounded);
    std::lock_guard<std::mutex> lock(mutex_);
    owned_.emplace(p, rounded);
    return p;
  }

  void release(void* p) override {
    if (p == nullptr) {
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (owned_.erase(p) > 0) {
      std::free(p);
    }
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) {
      std::memcpy(dst, src, bytes);
    }
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) {
      std::memcpy(dst, src, bytes);
    }
  }

  void check_pointer(const void*, size_t, const std::string&) override {}

  size_t add_transfer(Transfer t) override {
    transfers_.push_back(std::move(t));
    return transfers_.size() - 1;
  }

  void run_blocking(size_t transfer) override { run(transfer); }

  void bucket_ready(size_t, size_t) override {}
  void before_collective(size_t, size_t in) override { run(in); }
  void after_collective(size_t, size_t out) override { run(out); }
  void end_step() override {}
  void* collective_event(size_t, size_t) const override { return nullptr; }
  void bind_thread() override {}
  void* stream() const override { return nullptr; }

 private:
  void run(size_t id) const {
    if (id == kNoTransfer) {
      return;
    }
    const Transfer& t = transfers_.at(id);
    for (const Segment& s : t.segments) {
      convert(s.src, t.src_type, s.dst, t.dst_type, s.count);
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> owned_;
  std::vector<Transfer> transfers_;  // written during construction only
};

}  // namespace

std::unique_ptr<Device> make_host_device() {
  return std::make_unique<HostDevice>();
}

#if !SLURMDDP_HAVE_CUDA
std::unique_ptr<Device> make_cuda_device(int, size_t, void*, int) {
  throw Error(
      "grad_sync: failed to use the communicator's CUDA buffers: slurm-ddp was built "
      "without CUDA");
}
#endif

}  // namespace slurmddp::grad_sync
