// init()'s part of Note [Device choice] (launch/gpu_binding.h): after the
// join, the ranks of a node read each other's GPUs from their join records and
// each takes a distinct one; ranks that cannot get one of their own are named.
//
// Note [Node GPUs]
//   Each rank with GPUs adds to its join record the GPUs it sees, as physical
//   ids where the CUDA runtime can tell (PCI bus ids: two tasks whose
//   CUDA_VISIBLE_DEVICES both say "0" under a per-task device cgroup see two
//   different GPUs), else the entries of its GPU variable; the index it already
//   has (SLURMDDP_LOCAL_DEVICE or a certain rule), or -1; and the variable as
//   text for messages. After the join each rank reads the records of the ranks
//   of its node (Locality::node_ranks: O(ranks per node) reads, whatever the
//   world size), and every rank of the node computes the same assignment
//   (launch::assign_node_gpus). Ranks left on one GPU:
//   - NCCL: init() fails on those ranks, naming both ranks, the node, what
//     each sees and the binding (NCCL refuses two ranks on one GPU later, with
//     "Duplicate GPU detected"; the other ranks then fail within the timeout);
//   - Gloo with physical ids: a warning naming them (it works, but two ranks
//     share one GPU's memory and compute);
//   - otherwise nothing: without a usable GPU the entries are only names.
//   Except where sharing is asked for: NCCL lets two ranks use one GPU when
//   they claim hosts of their own (distinct NCCL_HOSTID: each takes the other
//   for a remote rank and talks over the network transport) or when both set
//   NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL >= 2.30). The record carries both
//   ("nccl_hostid", "nccl_multi_rank_gpu"); such a pair is not a conflict but
//   a note (NodeGpuOutcome::shared), logged at info level. Without this, a
//   CUDA_VISIBLE_DEVICES set on a one-GPU machine made init() refuse NCCL for
//   the very ranks that the gpu tests and scripts/gpu-check put on one GPU on
//   purpose (Note [Sharing one GPU] in tests/gpu/nccl_ranks.cpp), although
//   NCCL accepts them; with the variable unset nothing was checked at all.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "membership/membership.h"
#include "slurmddp/identity.h"

namespace slurmddp {

// What this rank set that lets NCCL put it on a GPU beside another rank
// (Note [Node GPUs]).
struct GpuSharing {
  std::string nccl_hostid;      // NCCL_HOSTID, or empty
  bool multi_rank_gpu = false;  // NCCL_MULTI_RANK_GPU_ENABLE=1
};
// From the environment.
GpuSharing gpu_sharing_from_environment();

// The join fields of this rank's GPUs ("gpus", "gpu_index", "gpu_list", and
// the sharing fields where set); none without GPUs. `physical`: the ids from
// the CUDA runtime, or the entries.
std::vector<std::pair<std::string, std::string>> node_gpu_fields(
    const ProcessIdentity& id, const std::vector<std::string>& physical,
    const GpuSharing& sharing = {});

struct NodeGpuOutcome {
  std::optional<int> device;  // this rank's index within its GPU list
  std::string why;            // how it was chosen
  std::string conflict;       // non-empty: ranks of this node share a GPU (the message)
  std::string shared;         // non-empty: they share one as asked (NCCL_HOSTID, ...; the note)
};
// Reads the records of `node_ranks` (this rank among them) and settles this
// rank's device. `node` names the node in messages; `bind` is SLURMD_TRES_BIND.
NodeGpuOutcome settle_node_gpus(const ProcessIdentity& id, const membership::Membership& group,
                                const std::vector<int>& node_ranks, const std::string& node,
                                const std::optional<std::string>& bind);

}  // namespace slurmddp
