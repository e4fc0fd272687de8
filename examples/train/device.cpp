#include "device.h"

#include <unistd.h>

#include <cstdlib>

#include "slurmddp/error.h"
#include "slurmddp/nccl_communicator.h"
#include "train_config.h"

#if TRAIN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif

namespace train {

namespace {

// As init()'s messages show these variables: NAME='value' or NAME=<unset>.
std::string env_assignment(const char* name) {
  const char* v = std::getenv(name);
  return std::string(name) + "=" + (v != nullptr ? "'" + std::string(v) + "'" : "<unset>");
}

std::string host_name() {
  if (const char* n = std::getenv("SLURMD_NODENAME")) return n;
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The communicator in words, e.g. "gloo on the host" or "nccl on cuda:1".
std::string describe_comm(slurmddp::Communicator& comm) {
  std::string s = std::string(to_string(comm.backend())) + " on ";
  if (comm.device() == slurmddp::DeviceKind::kHost) return s + "the host";
  auto* nccl = slurmddp::as_nccl_communicator(&comm);
  return s + (nccl != nullptr ? "cuda:" + std::to_string(nccl->cuda_device()) : "a CUDA device");
}

[[noreturn]] void refuse(DeviceOption option, slurmddp::ProcessGroup& pg,
                         const std::string& cause) {
  throw slurmddp::Error("train: failed to use --device=" + std::string(to_string(option)) + ": " +
                        cause + "; backend=" + std::string(to_string(pg.comm()->backend())) + ", " +
                        env_assignment("CUDA_VISIBLE_DEVICES") + ", " +
                        env_assignment("SLURMDDP_BACKEND") +
                        ", rank=" + std::to_string(pg.identity().rank) + ", host=" + host_name() +
                        ", pid=" + std::to_string(getpid()));
}

}  // namespace

const char* to_string(DeviceOption d) {
  switch (d) {
    case DeviceOption::kAuto:
      return "auto";
    case DeviceOption::kCpu:
      return "cpu";
    case DeviceOption::kCuda:
      return "cuda";
  }
  return "?";
}

bool parse_device_option(const std::string& value, DeviceOption* out) {
  for (DeviceOption d : {DeviceOption::kAuto, DeviceOption::kCpu, DeviceOption::kCuda}) {
    if (value == to_string(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

slurmddp::Backend backend_for(DeviceOption d) {
  return d == DeviceOption::kCpu ? slurmddp::Backend::kGloo : slurmddp::Backend::kAuto;
}

std::string ComputeDevice::describe() const {
  return cuda ? "cuda:" + std::to_string(ordinal) + " (" + name + ")" : "cpu";
}

ComputeDevice choose_device(DeviceOption option, slurmddp::ProcessGroup& pg) {
  slurmddp::Communicator& comm = *pg.comm();
  const bool comm_on_cuda = comm.device() == slurmddp::DeviceKind::kCuda;
#if TRAIN_HAVE_CUDA
  if (option == DeviceOption::kCuda && !comm_on_cuda) {
    refuse(option, pg,
           "the process group's communicator is " + describe_comm(comm) +
               ", and the GPU path needs NCCL on a GPU (a GPU this process can see, a runtime "
               "built with NCCL, SLURMDDP_BACKEND unset, auto or nccl): use --device=auto or "
               "--device=cpu to train on the CPU");
  }
  if (!comm_on_cuda) return ComputeDevice{};
  // The communicator's device: NCCL reads the gradients there. (identity.h's
  // local_device follows the same rule, but the communicator is what was used.)
  auto* nccl = slurmddp::as_nccl_communicator(&comm);
  if (nccl == nullptr) {
    refuse(option, pg,
           "the process group's communicator is " + describe_comm(comm) +
               ", which is not NCCL, so its device is unknown");
  }
  ComputeDevice d;
  d.cuda = true;
  d.ordinal = nccl->cuda_device();
  const CudaWhere where{d.ordinal, pg.identity().rank};
  check_cuda(cudaSetDevice(d.ordinal), "select the communicator's CUDA device", where);
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, d.ordinal), "read the CUDA device's properties", where);
  d.name = prop.name;
  return d;
#else
  const std::string cause =
      "this build of train has no CUDA (meson found no CUDA toolkit with cuBLAS)";
  if (option == DeviceOption::kCuda) {
    refuse(option, pg,
           cause + ", so it cannot train on the GPU (rebuild it with CUDA, or use --device=cpu)");
  }
  if (comm_on_cuda) {
    refuse(option, pg,
           cause + ", but the process group's communicator is " + describe_comm(comm) +
               ", which reduces GPU memory only: use --device=cpu to train on the CPU with Gloo");
  }
  return ComputeDevice{};
#endif
}

}  // namespace train
