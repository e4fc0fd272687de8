// How the gpu suite reads its two-rank probe (Note [Sharing one GPU] in
// nccl_ranks.cpp). Pure logic: the unit suite checks it on any machine.
//
// Only NCCL's documented refusal of two ranks on one device may turn the
// multi-rank tests into skips: ncclInvalidUsage with "Duplicate GPU detected",
// reported by every rank (NCCL checks the same peer table on each), and only
// where the ranks really share a GPU. Anything else — a crash, a timeout,
// another NCCL error, a refusal by some ranks only, a refusal although every
// rank has a GPU of its own — fails the tests.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace slurmddp::support {

// The exit status of a probe rank that NCCL refused as a second rank on its GPU.
inline constexpr int kExitSharedGpuRefused = 3;

// Whether an NCCL error message is that refusal.
inline bool is_shared_gpu_refusal(const std::string& message) {
  return message.find("ncclInvalidUsage") != std::string::npos &&
         message.find("Duplicate GPU detected") != std::string::npos;
}

enum class ProbeVerdict { kWorks, kRefused, kFailed };

// `exit_codes`: per rank, nullopt when it was killed at the time limit.
inline ProbeVerdict probe_verdict(const std::vector<std::optional<int>>& exit_codes,
                                  bool ranks_share_a_gpu) {
  if (exit_codes.empty()) return ProbeVerdict::kFailed;
  bool all_ok = true;
  bool all_refused = true;
  for (const auto& c : exit_codes) {
    all_ok = all_ok && c && *c == 0;
    all_refused = all_refused && c && *c == kExitSharedGpuRefused;
  }
  if (all_ok) return ProbeVerdict::kWorks;
  if (all_refused && ranks_share_a_gpu) return ProbeVerdict::kRefused;
  return ProbeVerdict::kFailed;
}

// The skip message; scripts/gpu-check looks for its first words.
inline const char* kSharedGpuRefusedText =
    "NCCL refused two ranks on one GPU (Duplicate GPU detected, ncclInvalidUsage) although "
    "each rank claims a host of its own (NCCL_HOSTID) and NCCL_MULTI_RANK_GPU_ENABLE=1; "
    "multi-rank tests need 2 GPUs here";

}  // namespace slurmddp::support
