// Whether a GPU test may skip: only when this machine has no CUDA device, never
// because CUDA failed to start on a machine that has one.
//
// Note [No device vs broken CUDA]
// cudaGetDeviceCount answers cudaErrorNoDevice when no device is visible (none
// installed, or CUDA_VISIBLE_DEVICES hides them all): a skip (exit 77). On a
// machine without the NVIDIA driver (no /dev/nvidia<N> node, no libcuda) the
// CUDA 13 runtime answers cudaErrorInsufficientDriver: also a skip. Everything
// else is a failure: the same cudaErrorInsufficientDriver where a device node
// exists (a driver too old for the runtime), cudaErrorInitializationError,
// cudaErrorNotPermitted, a system error... A GPU machine whose CUDA is broken
// must not pass its gpu suite as "skipped".
#pragma once

#include <cuda_runtime_api.h>
#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace slurmddp::support {

enum class GpuPresence { kPresent, kAbsent, kBroken };

// The Note's rule, on cudaGetDeviceCount's answer.
inline GpuPresence classify_gpu_presence(cudaError_t status, int count, bool device_node_exists) {
  if (status == cudaSuccess) return count > 0 ? GpuPresence::kPresent : GpuPresence::kAbsent;
  if (status == cudaErrorNoDevice) return GpuPresence::kAbsent;
  if (status == cudaErrorInsufficientDriver && !device_node_exists) return GpuPresence::kAbsent;
  return GpuPresence::kBroken;
}

// Whether `dev_dir` holds an NVIDIA GPU node: nvidia0, nvidia1, ... (not
// nvidiactl or nvidia-uvm, which exist without a GPU in some containers).
inline bool nvidia_device_node_exists(const char* dev_dir = "/dev") {
  DIR* d = opendir(dev_dir);
  if (d == nullptr) return false;
  bool found = false;
  while (const dirent* e = readdir(d)) {
    const char* n = e->d_name;
    if (std::strncmp(n, "nvidia", 6) != 0 || n[6] == '\0') continue;
    bool digits = true;
    for (const char* p = n + 6; *p != '\0'; ++p) digits = digits && *p >= '0' && *p <= '9';
    if (digits) {
      found = true;
      break;
    }
  }
  closedir(d);
  return found;
}

struct GpuCheck {
  GpuPresence presence = GpuPresence::kBroken;
  int count = 0;
  std::string detail;  // "cudaGetDeviceCount: cudaErrorNoDevice (...)", for messages
};

// Asks CUDA (creates no context).
inline GpuCheck check_gpus() {
  GpuCheck c;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  const bool node = nvidia_device_node_exists();
  c.count = e == cudaSuccess ? count : 0;
  c.presence = classify_gpu_presence(e, c.count, node);
  c.detail = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
             cudaGetErrorString(e) + "), " + std::to_string(c.count) + " device(s), " +
             (node ? "a /dev/nvidia<N> node exists" : "no /dev/nvidia<N> node");
  if (e != cudaSuccess) (void)cudaGetLastError();
  return c;
}

// For main(): 0 when the program may run its tests (`*count` devices), else
// the exit status to return at once: 77 (skip) without a device, 1 when CUDA
// is broken; says which on stdout / stderr.
inline int gpu_gate(const char* program, int* count) {
  const GpuCheck c = check_gpus();
  *count = c.count;
  switch (c.presence) {
    case GpuPresence::kPresent:
      return 0;
    case GpuPresence::kAbsent:
      std::printf("SKIP: %s: no CUDA device here (%s); it needs one\n", program, c.detail.c_str());
      return 77;
    case GpuPresence::kBroken:
      break;
  }
  std::fprintf(stderr,
               "%s: failed to initialize CUDA: %s; not a missing device, so this fails instead "
               "of skipping (Note [No device vs broken CUDA] in tests/support/device_presence.h)\n",
               program, c.detail.c_str());
  return 1;
}

}  // namespace slurmddp::support
