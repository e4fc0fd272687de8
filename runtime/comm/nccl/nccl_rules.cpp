#include "comm/nccl/nccl_rules.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "slurmddp/error.h"

namespace slurmddp::comm {
namespace {

// Parses a non-negative decimal int; false for anything else.
bool parse_index(const std::string& text, int* out) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::atoi(text.c_str());
  return true;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

std::string env_assignment(const EnvReader& env, const char* name) {
  const auto v = env(name);
  return v ? std::string(name) + "=" + *v : std::string(name) + " unset";
}

DeviceChoice choose_device(std::optional<int> requested, int visible, const EnvReader& env,
                           const std::string& where) {
  const std::string context = env_assignment(env, "CUDA_VISIBLE_DEVICES") + ", " +
                              env_assignment(env, "SLURMDDP_LOCAL_DEVICE") + ", " + where;
  if (visible <= 0) {
    throw CudaError("nccl: failed to select a GPU: no CUDA device is visible; " + context);
  }
  DeviceChoice c;
  if (requested) {
    if (*requested < 0) {
      throw InvalidArgument(
          "nccl: failed to select a GPU: NcclOptions::device=" + std::to_string(*requested) +
          " is not a device ordinal (expected >= 0, or unset to choose from the "
          "environment); " +
          context);
    }
    c = {*requested, "NcclOptions::device=" + std::to_string(*requested)};
  } else if (const auto v = env("SLURMDDP_LOCAL_DEVICE"); v && !v->empty()) {
    if (!parse_index(*v, &c.ordinal)) {
      throw InvalidArgument("nccl: failed to select a GPU: SLURMDDP_LOCAL_DEVICE='" + *v +
                            "' is not a device index (expected a non-negative integer); " +
                            context);
    }
    c.source = "SLURMDDP_LOCAL_DEVICE=" + *v;
  } else {
    bool found = false;
    for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID"}) {
      const auto lr = env(name);
      if (!lr || lr->empty()) continue;
      int local = 0;
      if (!parse_index(*lr, &local)) {
        throw InvalidArgument(std::string("nccl: failed to select a GPU: ") + name + "='" + *lr +
                              "' is not a local rank (expected a non-negative integer); " +
                              context);
      }
      c.ordinal = local % visible;
      c.source = std::string(name) + "=" + *lr + " modulo " + std::to_string(visible) +
                 " visible device" + (visible == 1 ? "" : "s");
      found = true;
      break;
    }
    if (!found) c = {0, "default (no NcclOptions::device, SLURMDDP_LOCAL_DEVICE or LOCAL_RANK)"};
  }
  if (c.ordinal >= visible) {
    throw InvalidArgument(
        "nccl: failed to select a GPU: device ordinal " + std::to_string(c.ordinal) + " (from " +
        c.source + ") is not visible: this process sees " + std::to_string(visible) + " device" +
        (visible == 1 ? "" : "s") + " (ordinals 0.." + std::to_string(visible - 1) +
        ", counted within CUDA_VISIBLE_DEVICES); " + context);
  }
  return c;
}

std::string where_text(int rank, int size, int device) {
  static const std::string host = host_name();
  std::string s = "rank=" + std::to_string(rank) + ", size=" + std::to_string(size);
  if (device >= 0) s += ", device=" + std::to_string(device);
  return s + ", host=" + host + ", pid=" + std::to_string(getpid());
}

std::chrono::milliseconds finalize_limit(std::chrono::milliseconds timeout,
                                         std::chrono::milliseconds finalize_timeout) {
  return std::max(std::chrono::milliseconds(0), std::min(timeout, finalize_timeout));
}

}  // namespace slurmddp::comm
