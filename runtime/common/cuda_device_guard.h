// Selecting a CUDA device for a scope without creating contexts on devices the
// process does not use, and choosing the device a CUDA helper works on. Shared
// by the NCCL communicator, grad_sync and the scalar channel.
//
// Note [Device guard without stray contexts]
// Since CUDA 12, cudaSetDevice(d) creates device d's primary context (hundreds
// of MiB of device memory, and a process listed on that GPU). A thread that
// never selected a device still reports device 0 from cudaGetDevice, so a guard
// that blindly "restores" the previous device would create a context on GPU 0
// in every rank of a multi-GPU node, and leave the thread on GPU 0, where the
// rank's next allocation would land. ScopedDevice therefore restores the
// previous device only when the process has already used it (its primary
// context is active); otherwise the thread keeps `device` current — the device
// the rank works on. The check goes through the driver API, reached through
// cudart's entry-point query (the library does not link libcuda); where that
// query is unavailable the previous device is restored as before.
#pragma once

#include <string>

namespace slurmddp::cuda_util {

// Whether `device`'s primary context is active (see the Note); true when the
// driver cannot tell.
bool primary_context_active(int device);

// Makes `device` current for the calling thread (nothing when it already is)
// and, on destruction, restores the previous device under the rule of the
// Note. Throws CudaError "<component>: failed to make CUDA device <device>
// current: <error>; <where>".
// "rank=R, device=D" (rank < 0: no rank given) for messages.
std::string device_text(int device, int rank);

// `requested` (a communicator's device) when >= 0, else the calling thread's
// current device. Throws CudaError "<component>: failed to <step>: <error>;
// <device_text>" when CUDA fails or no device is visible, InvalidArgument when
// `requested` is not among the visible devices.
int resolve_device(int requested, int rank, const char* component);

class ScopedDevice {
 public:
  ScopedDevice(int device, const char* component, const std::string& where);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace slurmddp::cuda_util
