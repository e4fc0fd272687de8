// Who this process is in the job and where the rendezvous is, read from the
// environment.
//
// Sources, in this order (the first that applies wins):
//  1. slurm-ddp's SPANK plugin: SLURMDDP_STEP plus the torchrun variables it
//     exported (ignored, with a warning, when SLURMDDP_STEP names another step
//     than SLURM_JOB_ID.SLURM_STEP_ID: they were inherited from an outer step);
//  2. torchrun/mpirun-style variables: RANK, WORLD_SIZE, MASTER_ADDR,
//     MASTER_PORT (LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK/GROUP_RANK optional);
//  3. bare Slurm variables when the plugin is not installed (SLURM_PROCID,
//     SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, ...), decided by the same
//     launch rules the plugin uses;
//  4. PMIx (PMIX_RANK set, e.g. mpirun or srun --mpi=pmix without the above).
// Missing or garbled values throw InvalidArgument naming the variable, its value
// and the expected form; contradictions (RANK >= WORLD_SIZE, ...) too.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

enum class IdentitySource { kPlugin, kTorchrun, kSlurm, kPmix, kMpi };
const char* to_string(IdentitySource s);

struct ProcessIdentity {
  IdentitySource source = IdentitySource::kTorchrun;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::string master_addr;  // empty with the PMIx source (no port needed)
  uint16_t master_port = 0;
  std::string token;  // SLURMDDP_TOKEN; empty: open rendezvous
  // The GPUs this task sees: the entries of gpu_variable (CUDA_VISIBLE_DEVICES;
  // on AMD nodes HIP_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES), in order.
  std::vector<std::string> gpus;
  std::string gpu_variable;  // empty: none of them is set
  // GPU index within `gpus`: SLURMDDP_LOCAL_DEVICE (the plugin's choice), else
  // the plugin's rules applied here (LOCAL_RANK modulo the count when every
  // task of the node sees the same GPUs; the binding in SLURMD_TRES_BIND
  // otherwise). Unset with GPUs in `gpus` when no rule is certain (e.g.
  // --gpu-bind=closest): init() then gives each rank of a node a distinct GPU.
  std::optional<int> local_device;
  std::string device_why;  // how local_device was chosen, or why it is unset
  std::string ifname;      // SLURMDDP_IFNAME, else GLOO_SOCKET_IFNAME; may be empty
  std::string step;        // "<jobid>.<stepid>" when known

  // One line for logs, e.g. "rank 3/8 (local 3/4, node 0/2) master 10.0.0.1:20001
  // source plugin step 12.0". Never contains the token.
  std::string describe() const;
};

// Reads one environment variable; nullopt when unset.
using EnvReader = std::function<std::optional<std::string>(const char* name)>;

// From this process's environment (getenv).
ProcessIdentity identity_from_environment();
// From any environment (tests). The PMIx source is only tried by the overload
// above, which can ask the PMIx server.
ProcessIdentity identity_from_environment(const EnvReader& env);

}  // namespace slurmddp

#pragma GCC visibility pop
