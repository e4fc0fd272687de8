#include "group/node_gpus.h"

#include <algorithm>
#include <cstdlib>

#include "launch/gpu_binding.h"
#include "launch/parse.h"

namespace slurmddp {

GpuSharing gpu_sharing_from_environment() {
  GpuSharing s;
  if (const char* v = std::getenv("NCCL_HOSTID")) s.nccl_hostid = v;
  const char* multi = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  s.multi_rank_gpu = multi != nullptr && std::string(multi) == "1";
  return s;
}

std::vector<std::pair<std::string, std::string>> node_gpu_fields(
    const ProcessIdentity& id, const std::vector<std::string>& physical,
    const GpuSharing& sharing) {
  if (id.gpus.empty()) return {};
  std::vector<std::pair<std::string, std::string>> fields = {
      {"gpus", launch::join(physical, ',')},
      {"gpu_index", std::to_string(id.local_device.value_or(-1))},
      {"gpu_list", launch::GpuList{id.gpu_variable, id.gpus}.text()}};
  if (!sharing.nccl_hostid.empty()) fields.emplace_back("nccl_hostid", sharing.nccl_hostid);
  if (sharing.multi_rank_gpu) fields.emplace_back("nccl_multi_rank_gpu", "1");
  return fields;
}

namespace {

// Why NCCL lets ranks `x` and `y` share a GPU (Note [Node GPUs]), or "".
std::string sharing_asked(const membership::Record& x, const membership::Record& y) {
  const std::string hx = x.field("nccl_hostid"), hy = y.field("nccl_hostid");
  if (hx != hy) {
    return "NCCL_HOSTID=" + (hx.empty() ? std::string("(unset)") : hx) + " and " +
           (hy.empty() ? std::string("(unset)") : hy) + ": NCCL takes them for ranks of two hosts";
  }
  if (x.field("nccl_multi_rank_gpu") == "1" && y.field("nccl_multi_rank_gpu") == "1") {
    return "NCCL_MULTI_RANK_GPU_ENABLE=1 on both";
  }
  return "";
}

// The note for ranks x and y that share `gpu` as asked.
std::string shared_note(const launch::NodeRankGpus& x, const launch::NodeRankGpus& y,
                        const std::string& node, const std::string& gpu, const std::string& asked) {
  return "ranks " + std::to_string(x.rank) + " and " + std::to_string(y.rank) + " on node " + node +
         " share one GPU (" + gpu + ") as asked (" + asked + "): rank " + std::to_string(x.rank) +
         " sees " + x.list_text + ", rank " + std::to_string(y.rank) + " sees " + y.list_text;
}

}  // namespace

NodeGpuOutcome settle_node_gpus(const ProcessIdentity& id, const membership::Membership& group,
                                const std::vector<int>& node_ranks, const std::string& node,
                                const std::optional<std::string>& bind) {
  NodeGpuOutcome out;
  out.device = id.local_device;
  out.why = id.device_why;
  if (id.gpus.empty()) return out;
  std::vector<int> ranks = node_ranks;
  if (std::find(ranks.begin(), ranks.end(), id.rank) == ranks.end()) ranks = {id.rank};
  const membership::Record mine = group.record(id.rank);
  std::vector<launch::NodeRankGpus> view;
  std::vector<membership::Record> records;  // beside view
  size_t me = 0;
  for (int r : ranks) {
    const membership::Record rec = r == id.rank ? mine : group.record(r);
    // Only ranks that really run here (the same host) and have GPUs.
    if (r != id.rank && (rec.field("host") != mine.field("host") || rec.field("gpus").empty())) {
      continue;
    }
    launch::NodeRankGpus g;
    g.rank = r;
    g.gpus = launch::split(rec.field("gpus"), ',');
    const std::string index = rec.field("gpu_index");
    if (!index.empty() && index != "-1") g.device = std::stoi(index);
    g.list_text = rec.field("gpu_list");
    if (r == id.rank) me = view.size();
    view.push_back(std::move(g));
    records.push_back(rec);
  }
  const launch::NodeAssignment a = launch::assign_node_gpus(view);
  if (!out.device && a.device[me]) {
    out.device = a.device[me];
    out.why = "GPU " + view[me].gpus[static_cast<size_t>(*out.device)] +
              " of the node's ranks' GPUs, exchanged at init (" + id.device_why + ")";
  }
  for (const auto& s : a.shared) {
    if (s.a != me && s.b != me) continue;
    const auto& x = view[s.a];
    const auto& y = view[s.b];
    const std::string asked = sharing_asked(records[s.a], records[s.b]);
    if (!asked.empty()) {
      if (out.shared.empty()) out.shared = shared_note(x, y, node, s.gpu, asked);
      continue;
    }
    out.conflict = "ranks " + std::to_string(x.rank) + " and " + std::to_string(y.rank) +
                   " on node " + node + " are left on one GPU (" + s.gpu + "): rank " +
                   std::to_string(x.rank) + " sees " + x.list_text + ", rank " +
                   std::to_string(y.rank) + " sees " + y.list_text +
                   (bind ? " (SLURMD_TRES_BIND=" + *bind + ")" : " (no GPU binding)") +
                   "; each rank needs a GPU of its own: give each task one (--gpus-per-task=1, "
                   "--ntasks-per-gpu=1 or a --gpu-bind=map_gpu list with distinct GPUs) or "
                   "start at most as many tasks per node as it has GPUs";
    break;
  }
  return out;
}

}  // namespace slurmddp
