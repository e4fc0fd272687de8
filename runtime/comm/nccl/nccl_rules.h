// Pure rules of the NCCL communicator, kept free of CUDA and NCCL so that the
// unit suite checks them on any machine: which GPU a rank takes, and how a
// rank is named in messages. (Who joined a rendezvous: membership/.)
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "slurmddp/identity.h"

namespace slurmddp::comm {

// The GPU a rank uses and where that choice came from (for messages), e.g.
// {1, "SLURMDDP_LOCAL_DEVICE=1"} or {3, "LOCAL_RANK=7 modulo 4 visible devices"}.
struct DeviceChoice {
  int ordinal = 0;
  std::string source;
};

// Note [Device choice]: `requested` wins when set; else SLURMDDP_LOCAL_DEVICE
// (the plugin's decision, taken as is); else LOCAL_RANK, then SLURM_LOCALID,
// modulo `visible` (the identity rule of identity.h); else 0. Throws CudaError
// when no device is visible and InvalidArgument when a variable is garbled or
// the ordinal is not below `visible`; messages name the ordinal, its source,
// CUDA_VISIBLE_DEVICES, SLURMDDP_LOCAL_DEVICE and `where` (rank, host, pid).
DeviceChoice choose_device(std::optional<int> requested, int visible, const EnvReader& env,
                           const std::string& where);

// "NAME=value" or "NAME unset".
std::string env_assignment(const EnvReader& env, const char* name);

// "rank=1, size=4, device=0, host=node1, pid=1234" (device omitted when < 0).
std::string where_text(int rank, int size, int device);

// How long destruction waits for ncclCommFinalize: `finalize_timeout`, never
// more than the operation `timeout`, never negative (Note [Finalize bound] in
// nccl_communicator.cpp).
std::chrono::milliseconds finalize_limit(std::chrono::milliseconds timeout,
                                         std::chrono::milliseconds finalize_timeout);

}  // namespace slurmddp::comm
