// Where train computes: --device=auto|cpu|cuda, checked against the
// communicator slurmddp::init() made. Gradients are averaged where they live,
// so the GPU path needs a communicator on a CUDA device (NCCL) and the CPU path
// one on the host (Gloo).
#pragma once

#include <string>

#include "slurmddp/process_group.h"

namespace train {

enum class DeviceOption { kAuto, kCpu, kCuda };

// "auto", "cpu" or "cuda"; parse_device_option returns false for anything else.
const char* to_string(DeviceOption d);
bool parse_device_option(const std::string& value, DeviceOption* out);

// The backend to ask slurmddp::init() for: Gloo for --device=cpu (the command
// line beats SLURMDDP_BACKEND, and a CPU model cannot use NCCL), otherwise
// whatever the environment and the machine give.
slurmddp::Backend backend_for(DeviceOption d);

struct ComputeDevice {
  bool cuda = false;
  int ordinal = -1;  // CUDA device ordinal within CUDA_VISIBLE_DEVICES
  std::string name;  // the GPU's name
  // "cpu" or "cuda:<ordinal> (<name>)", as the per-rank line prints it.
  std::string describe() const;
};

// Decides where this rank trains: auto means CUDA exactly when the
// communicator is on a CUDA device. For CUDA it makes the communicator's
// device current (cudaSetDevice), so the model's memory lands where NCCL
// reads it. Throws slurmddp::Error naming the option, the communicator's
// backend, CUDA_VISIBLE_DEVICES, SLURMDDP_BACKEND, rank, host and pid when
// the choice cannot work (e.g. --device=cuda with Gloo, or a build of train
// without CUDA).
ComputeDevice choose_device(DeviceOption option, slurmddp::ProcessGroup& pg);

}  // namespace train
