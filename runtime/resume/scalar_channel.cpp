#include "resume/scalar_channel.h"

#include "grad_sync/device.h"
#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp::resume {

namespace {

class HostChannel : public ScalarChannel {
 public:
  explicit HostChannel(Communicator& comm) : comm_(comm) {}
  int64_t max(int64_t mine) override {
    int64_t v = mine;
    comm_.allreduce(&v, 1, ReduceOp::kMax)->wait();
    return v;
  }

 private:
  Communicator& comm_;
};

// The device buffer lives on the communicator's GPU (grad_sync's CUDA device:
// allocation and blocking copies under a device guard).
class DeviceChannel : public ScalarChannel {
 public:
  DeviceChannel(Communicator& comm, int device)
      : comm_(comm), device_(grad_sync::make_cuda_device(device, 0, nullptr, comm.rank())) {
    data_ = device_->allocate(sizeof(int64_t));
  }
  int64_t max(int64_t mine) override {
    device_->upload(data_, &mine, sizeof mine);
    comm_.allreduce(data_, 1, DataType::kInt64, ReduceOp::kMax)->wait();
    int64_t v = 0;
    device_->download(&v, data_, sizeof v);
    return v;
  }

 private:
  Communicator& comm_;
  std::unique_ptr<grad_sync::Device> device_;
  void* data_ = nullptr;
};

}  // namespace

std::unique_ptr<ScalarChannel> make_scalar_channel(Communicator& comm) {
  if (comm.device() == DeviceKind::kHost) return std::make_unique<HostChannel>(comm);
  auto* nccl = dynamic_cast<NcclCommunicator*>(&comm);
  return std::make_unique<DeviceChannel>(comm, nccl != nullptr ? nccl->cuda_device() : -1);
}

}  // namespace slurmddp::resume
