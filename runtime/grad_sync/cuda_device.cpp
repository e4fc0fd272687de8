// The CUDA implementation of Device (Note [Step hooks] in device.h).
//
// Note [Ordering with the communicator]
// Communicator carries no stream: a CUDA communicator (NCCL) runs each
// collective on a stream of its own, and Work::wait returns once it completed.
// So the engine orders by the host: the launcher thread waits for the bucket's
// copy-in (an event on our communication stream) before issuing the
// allreduce, and the finisher enqueues the copy-out only after Work::wait
// returned. Only the two background threads block; the thread running
// backward never does (it records an event and enqueues a kernel). The events
// use blocking sync so that a waiting thread sleeps instead of spinning on a
// core that backward may need. The price is one host round trip per bucket,
// which pipelining hides: the copy-in of bucket k+1 runs on the GPU while the
// allreduce of bucket k is in flight, and the allreduce of k+1 is issued as
// soon as its copy-in is done. With NCCL the allreduce also waits for the
// bucket's event on the GPU (collective_event, NcclOrder::after_event): the
// order is stated where NCCL runs, not only implied by the host wait, and it
// is that bucket's event alone, never a stream holding later buckets' copies.
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "common/cuda_device_guard.h"
#include "grad_sync/cast.h"
#include "grad_sync/cuda_kernels.h"
#include "grad_sync/device.h"
#include "slurmddp/error.h"

namespace slurmddp::grad_sync {

namespace {

void check(cudaError_t status, const char* what, int device, int rank) {
  if (status == cudaSuccess) {
    return;
  }
  throw CudaError(std::string("grad_sync: failed to ") + what + ": " + cudaGetErrorString(status) +
                  " (" + cudaGetErrorName(status) + "); " + cuda_util::device_text(device, rank));
}

// Makes the engine's device current for a scope (Note [Device guard without
// stray contexts] in common/cuda_device_guard.h): the calling thread may run
// backward on another device, or may never have selected one.
class DeviceScope {
 public:
  DeviceScope(int device, int rank)
      : guard_(device, "grad_sync", cuda_util::device_text(device, rank)) {}

 private:
  cuda_util::ScopedDevice guard_;
};

struct DeviceTransfer {
  DataType src_type;
  DataType dst_type;
  cuda::KernelSegment* table = nullptr;  // device memory
  uint32_t segments = 0;
  uint64_t blocks = 0;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int device, size_t num_buckets, void* compute_stream, int rank)
      : rank_(rank),
        device_(cuda_util::resolve_device(device, rank, "grad_sync")),
        compute_(static_cast<cudaStream_t>(compute_stream)) {
    // Everything the engine owns lives on device_, whatever the calling
    // thread's current device is.
    DeviceScope scope(device_, rank_);
    check(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking),
          "create the communication stream", device_, rank_);
    const unsigned flags = cudaEventDisableTiming | cudaEventBlockingSync;
    ready_.resize(num_buckets);
    prepared_.resize(num_buckets);
    for (size_t b = 0; b < num_buckets; ++b) {
      check(cudaEventCreateWithFlags(&ready_[b], flags), "create an event", device_, rank_);
      check(cudaEventCreateWithFlags(&prepared_[b], flags), "create an event", device_, rank_);
    }
    check(cudaEventCreateWithFlags(&step_done_, flags), "create an event", device_, rank_);
    check(cudaEventCreateWithFlags(&compute_mark_, flags), "create an event", device_, rank_);
  }

  ~CudaDevice() override {
    std::unique_ptr<DeviceScope> scope;
    try {
      scope = std::make_unique<DeviceScope>(device_, rank_);
    } catch (const std::exception&) {
      // Not fatal here: the frees below work from any current device.
    }
    cudaStreamSynchronize(comm_);
    for (auto& t : transfers_) {
      cudaFree(t.table);
    }
    for (void* p : owned_) {
      cudaFree(p);
    }
    for (auto e : ready_) {
      cudaEventDestroy(e);
    }
    for (auto e : prepared_) {
      cudaEventDestroy(e);
    }
    cudaEventDestroy(step_done_);
    cudaEventDestroy(compute_mark_);
    cudaStreamDestroy(comm_);
  }
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  DeviceKind kind() const override { return DeviceKind::kCuda; }

  void* allocate(size_t bytes) override {
    if (bytes == 0) {
      return nullptr;
    }
    DeviceScope scope(device_, rank_);
    void* p = nullptr;
    check(cudaMalloc(&p, bytes),
          ("allocate " + std::to_string(bytes) + " bytes of bucket memory").c_str(), device_,
          rank_);
    // Note [Zeroed before any stream sees it]: cudaMemset runs on the legacy
    // default stream, which orders with neither our non-blocking communication
    // stream (an upload there could land before the zeros) nor a caller's
    // non-blocking compute stream (backward could accumulate into a view
    // bucket before it is cleared). The zeros go on our stream and are waited
    // for: allocation is set-up work.
    cudaError_t zeroed = cudaMemsetAsync(p, 0, bytes, comm_);
    if (zeroed == cudaSuccess) zeroed = cudaStreamSynchronize(comm_);
    if (zeroed != cudaSuccess) {
      cudaFree(p);
      check(zeroed, "clear bucket memory", device_, rank_);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    owned_.insert(p);
    return p;
  }

  void release(void* p) override {
    if (p == nullptr) {
      return;
    }
    DeviceScope scope(device_, rank_);
    std::lock_guard<std::mutex> lock(mutex_);
    if (owned_.erase(p) > 0) {
      cudaFree(p);
    }
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) {
      return;
    }
    DeviceScope scope(device_, rank_);
    upload_landed(dst, src, bytes, "copy to the device");
  }

  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) {
      return;
    }
    DeviceScope scope(device_, rank_);
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy from the device", device_,
          rank_);
  }

  void check_pointer(const void* p, size_t bytes, const std::string& what) override {
    if (bytes == 0) {
      return;
    }
    // Under the guard: on a thread with no current context the query would
    // otherwise make one on device 0 (Note [Device guard without stray contexts]).
    DeviceScope scope(device_, rank_);
    cudaPointerAttributes a{};
    const cudaError_t status = cudaPointerGetAttributes(&a, p);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error state of this call
      throw InvalidArgument("grad_sync: failed to register parameters: " + what +
                            " is not CUDA memory: " + cudaGetErrorString(status) + "; " +
                            cuda_util::device_text(device_, rank_));
    }
    const bool on_device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    if (!on_device || a.device != device_) {
      throw InvalidArgument("grad_sync: failed to register parameters: " + what +
                            " is not memory of the communicator's CUDA device; memory_type=" +
                            std::to_string(static_cast<int>(a.type)) +
                            ", memory_device=" + std::to_string(a.device) + ", " +
                            cuda_util::device_text(device_, rank_));
    }
  }

  size_t add_transfer(Transfer t) override {
    if (!cuda::kernel_supports(t.src_type, t.dst_type)) {
      throw InvalidArgument(
          "grad_sync: failed to plan a bucket copy: unsupported conversion; "
          "src=" +
          std::to_string(static_cast<int>(t.src_type)) +
          ", dst=" + std::to_string(static_cast<int>(t.dst_type)));
    }
    std::vector<cuda::KernelSegment> table;
    uint64_t blocks = 0;
    for (const Segment& s : t.segments) {
      if (s.count == 0) {
        continue;
      }
      table.push_back(cuda::KernelSegment{s.src, s.dst, s.count, blocks});
      blocks += cuda::blocks_for(s.count);
    }
    DeviceTransfer d{t.src_type, t.dst_type, nullptr, static_cast<uint32_t>(table.size()), blocks};
    if (!table.empty()) {
      DeviceScope scope(device_, rank_);
      const size_t bytes = table.size() * sizeof(cuda::KernelSegment);
      check(cudaMalloc(reinterpret_cast<void**>(&d.table), bytes), "allocate a copy table", device_,
            rank_);
      try {
        upload_landed(d.table, table.data(), bytes, "upload a copy table");
      } catch (...) {
        cudaFree(d.table);
        throw;
      }
    }
    transfers_.push_back(d);
    return transfers_.size() - 1;
  }

  void run_blocking(size_t transfer) override {
    DeviceScope scope(device_, rank_);
    check(cudaEventRecord(compute_mark_, compute_), "record an event on the compute stream",
          device_, rank_);
    check(cudaStreamWaitEvent(comm_, compute_mark_, 0), "order the communication stream", device_,
          rank_);
    launch(transfer);
    check(cudaStreamSynchronize(comm_), "wait for a bucket copy", device_, rank_);
  }

  void bucket_ready(size_t bucket, size_t in) override {
    DeviceScope scope(device_, rank_);
    check(cudaEventRecord(ready_[bucket], compute_), "record a gradient-ready event", device_,
          rank_);
    if (in == kNoTransfer) {
      return;
    }
    check(cudaStreamWaitEvent(comm_, ready_[bucket], 0), "order the communication stream", device_,
          rank_);
    launch(in);
    check(cudaEventRecord(prepared_[bucket], comm_), "record a bucket-copied event", device_,
          rank_);
  }

  void before_collective(size_t bucket, size_t in) override {
    // An event wait needs no current device.
    check(cudaEventSynchronize(in == kNoTransfer ? ready_[bucket] : prepared_[bucket]),
          "wait for a bucket's gradients", device_, rank_);
  }

  void after_collective(size_t, size_t out) override {
    if (out != kNoTransfer) {
      DeviceScope scope(device_, rank_);  // the finisher is bound already: a no-op
      launch(out);
    }
  }

  void end_step() override {
    DeviceScope scope(device_, rank_);
    check(cudaEventRecord(step_done_, comm_), "record the step's end", device_, rank_);
    check(cudaStreamWaitEvent(compute_, step_done_, 0), "order the compute stream", device_, rank_);
  }

  void* collective_event(size_t bucket, size_t in) const override {
    return in == kNoTransfer ? ready_[bucket] : prepared_[bucket];
  }

  void bind_thread() override {
    check(cudaSetDevice(device_), "select the CUDA device", device_, rank_);
  }
  void* stream() const override { return comm_; }

 private:
  // Note [Uploads that land]: a pageable cudaMemcpy to the device may return
  // before its DMA reached device memory (small transfers are staged), and its
  // legacy-stream order does not reach our non-blocking stream or a caller's
  // non-blocking compute stream: a copy kernel on comm_ could read a copy
  // table, or a collective ordered after another stream the layout words,
  // before they arrived. Uploads therefore run on comm_ and are waited for.
  void upload_landed(void* dst, const void* src, size_t bytes, const char* what) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, comm_), what, device_, rank_);
    check(cudaStreamSynchronize(comm_), what, device_, rank_);
  }

  void launch(size_t id) {
    const DeviceTransfer& t = transfers_.at(id);
    const int status =
        cuda::launch_transfer(t.table, t.segments, t.blocks, t.src_type, t.dst_type, comm_);
    check(static_cast<cudaError_t>(status), "launch a bucket copy kernel", device_, rank_);
  }

  int rank_ = -1;
  int device_ = 0;
  cudaStream_t compute_ = nullptr;
  cudaStream_t comm_ = nullptr;
  std::vector<cudaEvent_t> ready_;
  std::vector<cudaEvent_t> prepared_;
  cudaEvent_t step_done_ = nullptr;
  cudaEvent_t compute_mark_ = nullptr;
  std::mutex mutex_;
  std::unordered_set<void*> owned_;
  std::vector<DeviceTransfer> transfers_;  // written during construction only
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int device, size_t num_buckets, void* compute_stream,
                                         int rank) {
  return std::make_unique<CudaDevice>(device, num_buckets, compute_stream, rank);
}

}  // namespace slurmddp::grad_sync
