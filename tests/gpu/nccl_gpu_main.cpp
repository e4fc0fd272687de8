// The gpu suite of the NCCL communicator (nccl_single_test.cpp,
// nccl_errors_test.cpp, nccl_multi_test.cpp; the harness in nccl_ranks.h). Exits 77 (meson's skip)
// when no CUDA device exists, and only then (device_presence.h).
//
// Single-process tests use one rank (or two ranks of which one never comes,
// for the init timeout). Multi-process tests start this binary again as rank
// processes ("--worker <scenario>") around a TCP store hosted by the test.
// With as many GPUs as ranks each rank takes its own; with fewer, the ranks
// share device 0 the way NCCL allows it: each rank claims another host
// (NCCL_HOSTID) and they talk over loopback sockets (Note [Sharing one GPU]).
// A first two-rank probe decides whether that works here: where NCCL refuses
// it ("Duplicate GPU detected", ncclInvalidUsage) the multi-process tests skip
// and say why; any other failure of the probe fails them (probe_verdict.h).
#include <cstdio>
#include <cstring>

#include "device_presence.h"
#include "gpu_test_main.h"
#include "nccl_ranks.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) {
    return slurmddp::support::worker_main(argc, argv);
  }
  if (argc > 1 && std::strcmp(argv[1], "--count-devices") == 0) {  // for scripts/gpu-check
    // The count (0: no device), or exit 1 when CUDA is broken (device_presence.h).
    const auto c = slurmddp::support::check_gpus();
    if (c.presence == slurmddp::support::GpuPresence::kBroken) {
      std::fprintf(stderr, "gpu_nccl: failed to initialize CUDA: %s\n", c.detail.c_str());
      return 1;
    }
    std::printf("%d\n", c.count);
    return 0;
  }
  return slurmddp::support::run_gpu_tests("gpu_nccl", argc, argv,
                                          &slurmddp::support::g_device_count);
}
