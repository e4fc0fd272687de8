#include "group/node_gpus.h"

#include <algorithm>

#include "launch/gpu_binding.h"
#include "launch/parse.h"

namespace slurmddp {

std::vector<std::pair<std::string, std::string>> node_gpu_fields(
    const ProcessIdentity& id, const std::vector<std::string>& physical) {
  if (id.gpus.empty()) return {};
  return {{"gpus", launch::join(physical, ',')},
          {"gpu_index", std::to_string(id.local_device.value_or(-1))},
          {"gpu_list", launch::GpuList{id.gpu_variable, id.gpus}.text()}};
}

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
