// Which GPU each task of a node uses: the task's visible GPUs as Slurm bound
// them, the step's binding, and the rules that give every task of a node a GPU
// of its own, or say that they cannot be sure.
//
// Note [Device choice]
//   Slurm tells each task its GPUs in a variable (CUDA_VISIBLE_DEVICES on
//   NVIDIA nodes; ROCR_VISIBLE_DEVICES on AMD nodes, where users may narrow
//   further with HIP_VISIBLE_DEVICES) and the step's binding in SLURMD_TRES_BIND
//   ("gres/gpu:closest", "gpu:map_gpu:0,0,1,1" before 23.02, ...). The task uses
//   one GPU of its list; the device index counts within the list. The rules,
//   from the facts one task has:
//   - no binding, or --gpu-bind=none: every task of the node sees the same
//     list, so the local rank modulo its length is distinct while there are
//     no more tasks than GPUs (more: they share, `oversubscribed`);
//   - a list of one GPU: index 0, the only choice;
//   - map_gpu/mask_gpu (map:/mask:): the spec gives every local task's set, so
//     when any two sets are equal or disjoint, a task takes its position among
//     the tasks with its set (modulo the set's size); overlapping sets that
//     differ are left to init();
//   - per_task:N (and --gpus-per-task): Slurm gives each task N GPUs of its
//     own while the node has enough: index 0;
//   - closest, single:N and anything else with several GPUs in the list: the
//     other tasks' sets depend on their CPUs, which one task cannot see; the
//     index is left to init(), which exchanges the GPUs that the ranks of a
//     node see and gives each a distinct one (assign_node_gpus).
//   Without certainty nothing is exported: a wrong index would put two ranks
//   on one GPU, NCCL's "Duplicate GPU detected" or, in PyTorch, silently.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace slurmddp::launch {

// The variables that list a task's GPUs, in the order they are looked at: the
// first one set wins. HIP_VISIBLE_DEVICES narrows ROCR_VISIBLE_DEVICES (its
// entries index that list), so it is the list the program sees when both are.
inline constexpr const char* kGpuListVariables[] = {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                                    "ROCR_VISIBLE_DEVICES"};

// A task's GPUs: the variable and its entries (indices, UUIDs or PCI bus ids,
// as Slurm or the user wrote them).
struct GpuList {
  std::string variable;  // empty: no GPU variable set, or it lists none
  std::vector<std::string> ids;
  bool empty() const { return ids.empty(); }
  std::string text() const;  // "CUDA_VISIBLE_DEVICES=0,1", or "no GPU variable"
};
// Reads the first variable of kGpuListVariables that is set. Slurm's
// "NoDevFiles" and empty entries mean no GPU; a negative entry ("-1") ends the
// list, as it does for the CUDA runtime.
GpuList read_gpu_list(const std::function<std::optional<std::string>(const char*)>& env);
// The same list from a known variable's value.
GpuList gpu_list(const std::string& variable, const std::optional<std::string>& value);

// The GPU part of SLURMD_TRES_BIND.
struct GpuBind {
  enum class Kind { kNone, kClosest, kMap, kMask, kSingle, kPerTask, kOther };
  Kind kind = Kind::kNone;
  std::string text;  // as given, e.g. "map_gpu:0,0,1,1" (without "gres/gpu:" and "verbose,")
  // map/mask: one GPU bit set per entry, entries repeated as "*N" says;
  // nullopt when an entry names a GPU above 63 or cannot be read.
  std::optional<std::vector<uint64_t>> sets;
  uint32_t count = 0;  // single:N, per_task:N
};
// nullopt when the value has no GPU binding ("gres/nic:closest", empty).
std::optional<GpuBind> parse_gpu_bind(const std::string& tres_bind);

struct DeviceFacts {
  uint32_t local_rank = 0;
  uint32_t local_task_count = 1;
  GpuList task;                 // this task's list
  std::optional<GpuList> node;  // the step's list on this node before per-task binding
  std::optional<GpuBind> bind;  // SLURMD_TRES_BIND's GPU part
};

struct DeviceChoice {
  std::optional<uint32_t> local_device;        // index within the task's list
  std::optional<std::string> visible_devices;  // narrowed list (bind): the one GPU
  bool oversubscribed = false;                 // tasks of the node share GPUs
  // Empty when there is no GPU; else how the index was chosen, or why it is
  // left to init() (local_device unset with GPUs in the list).
  std::string why;
};
// Note [Device choice]. With `bind`, the task's list is narrowed to the chosen
// GPU (index 0 then); with no choice, nothing is narrowed.
DeviceChoice choose_device(const DeviceFacts& f, bool bind);

// One rank of a node, as init() sees it after the join: the physical GPUs it
// sees (PCI bus ids where a GPU is usable, else the list's entries) in list
// order, and the index it already has, if any.
struct NodeRankGpus {
  int rank = 0;
  std::vector<std::string> gpus;
  std::optional<int> device;
  std::string list_text;  // e.g. "CUDA_VISIBLE_DEVICES=0,1", for messages
};
struct NodeAssignment {
  std::vector<std::optional<int>> device;  // per input rank: index into its own list
  // Pairs of ranks (by input position) left on one physical GPU, each with it.
  struct Shared {
    size_t a = 0, b = 0;
    std::string gpu;
  };
  std::vector<Shared> shared;
};
// Every rank of one node, in local rank order. Ranks with a device keep it;
// the others get distinct GPUs where a distinct assignment exists (a maximum
// matching, each rank trying its GPUs from its position among the ranks with
// the same list, so that a shared list gives local rank modulo its length, as
// the plugin does); where none exists, they share, and `shared` names who.
// Deterministic: every rank of the node computes the same answer.
NodeAssignment assign_node_gpus(const std::vector<NodeRankGpus>& ranks);

}  // namespace slurmddp::launch
