// The NCCL gpu tests' harness (nccl_ranks.h).
#include "nccl_ranks.h"

#include <chrono>
#include <map>
#include <string>

#include "rank_launcher.h"
#include "slurmddp/tcp_store.h"
#include "subprocess.h"

namespace slurmddp::support {

int g_device_count = 0;

namespace {

// Note [Sharing one GPU]: NCCL refuses two ranks on one device of one host
// ("Duplicate GPU detected", ncclInvalidUsage). Up to 2.28 ranks that claim
// different hosts (NCCL_HOSTID) pass that check and use the network
// transport, here TCP over loopback: slow, but every collective runs the same
// NCCL code paths. NCCL 2.30 adds NCCL_MULTI_RANK_GPU_ENABLE=1 to allow it
// outright; both are set. Where NCCL still refuses, the multi-rank tests skip
// (probe_verdict.h says exactly when).
std::map<std::string, std::string> rank_env(int rank, int size) {
  std::map<std::string, std::string> env;
  if (g_device_count >= size) {
    env["SLURMDDP_TEST_DEVICE"] = std::to_string(rank);
    return env;
  }
  env["SLURMDDP_TEST_DEVICE"] = "0";
  env["NCCL_HOSTID"] = "slurmddp-gpu-test-rank-" + std::to_string(rank);
  env["NCCL_SOCKET_IFNAME"] = "lo";
  env["NCCL_P2P_DISABLE"] = "1";
  env["NCCL_SHM_DISABLE"] = "1";
  env["NCCL_IB_DISABLE"] = "1";
  env["NCCL_NVLS_ENABLE"] = "0";
  env["NCCL_MULTI_RANK_GPU_ENABLE"] = "1";
  return env;
}

}  // namespace

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

NcclOptions single_rank(int device) {
  NcclOptions o;
  o.rank = 0;
  o.size = 1;
  o.device = device;
  o.timeout = std::chrono::seconds(60);
  return o;
}

Launch run_ranks(const std::string& scenario, int size, milliseconds comm_timeout,
                 std::chrono::seconds hard_limit,
                 const std::function<void(Store&, const std::vector<pid_t>&)>& during) {
  auto store = support::host_store(std::chrono::seconds(30));
  support::RankGroup ranks(
      size,
      support::self_with_rank({"--worker", scenario, std::to_string(comm_timeout.count())},
                              store->port(), [size](int r) { return rank_env(r, size); }),
      support::Output::kInherited);
  if (during) during(*store, ranks.pids());
  Launch l;
  l.exit_codes = ranks.wait_all(hard_limit);
  return l;
}

std::string describe(const Launch& l) {
  std::string s;
  for (size_t r = 0; r < l.exit_codes.size(); ++r) {
    s += "rank " + std::to_string(r) + ": " +
         (l.exit_codes[r] ? "exit " + std::to_string(*l.exit_codes[r]) : "killed at the limit") +
         "; ";
  }
  return s;
}

const Probe& multi_rank_probe() {
  static const Probe probe = [] {
    const Launch l = run_ranks("probe", 2, milliseconds(60000), std::chrono::seconds(120));
    Probe p;
    p.verdict = probe_verdict(l.exit_codes, /*ranks_share_a_gpu=*/g_device_count < 2);
    switch (p.verdict) {
      case ProbeVerdict::kWorks:
        break;
      case ProbeVerdict::kRefused:
        p.text = kSharedGpuRefusedText;
        break;
      case ProbeVerdict::kFailed:
        p.text = "the two-rank probe failed (" + describe(l) +
                 "see the rank logs above); only "
                 "NCCL's refusal of two ranks on one GPU (every rank exiting " +
                 std::to_string(kExitSharedGpuRefused) + ") would skip";
        break;
    }
    return p;
  }();
  return probe;
}

}  // namespace slurmddp::support
