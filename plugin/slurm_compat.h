// The only place that knows Slurm versions. spank_glue.cpp includes it after
// <slurm/slurm.h> and <slurm/spank.h>; everything else of the plugin and the
// launch core is version-free.
//
// Note [Slurm versions]
//   Read from Slurm's slurm/slurm.h, slurm/spank.h and slurm/slurm_errno.h of
//   every release from 22.05 to 26.05 (and the development branch), and from
//   the SPANK entries of their change logs. What the plugin uses and what moved:
//   - hostlist (slurm.h): up to 23.02 `hostlist_t` is a pointer to an opaque
//     struct; from 23.11 `hostlist_t` is the opaque struct itself and every
//     function takes and returns `hostlist_t *`. Same functions, same rules
//     (slurm_hostlist_shift's string is freed with free()).
//   - slurm_spank_init_failure_mode (spank.h, from 25.05): a plugin may say
//     that a failing slurm_spank_init is the job's fault, not the node's (the
//     default drains the node). Ours never fails there; it says so anyway.
//   - How a failing hook ends a step: up to 23.02 a failing user_init did not
//     make srun exit non-zero; from 23.11 most hooks do. The glue reports every
//     step failure from task_init, which fails the step on every release.
//   - Unchanged 22.05 -> 26.05: the items the glue reads (S_JOB_ID,
//     S_JOB_STEPID, S_JOB_NNODES, S_JOB_NODEID, S_JOB_LOCAL_TASK_COUNT,
//     S_JOB_TOTAL_TASK_COUNT, S_SLURM_RESTART_COUNT, S_TASK_ID,
//     S_TASK_GLOBAL_ID), struct spank_option, spank_getenv/setenv/unsetenv,
//     spank_context, slurm_error, slurm_read_hostfile (freed with free()).
//   - Every release refuses a plugin built against another release's headers
//     (plugin_version = SLURM_VERSION_NUMBER): admins rebuild on upgrade.
#ifndef SLURMDDP_PLUGIN_SLURM_COMPAT_H
#define SLURMDDP_PLUGIN_SLURM_COMPAT_H

#include <type_traits>

#ifndef SLURM_VERSION_NUMBER
#error "include <slurm/slurm.h> before slurm_compat.h"
#endif

#define SLURMDDP_SLURM_AT_LEAST(major, minor) \
  (SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(major, minor, 0))

#if !SLURMDDP_SLURM_AT_LEAST(22, 5)
#error "slurm-ddp's SPANK plugin needs the headers of Slurm 22.05 or newer"
#endif

namespace slurmddp::plugin::compat {

// What slurm_hostlist_create() returns and the other hostlist functions take.
#if SLURMDDP_SLURM_AT_LEAST(23, 11)
using Hostlist = hostlist_t*;
#else
using Hostlist = hostlist_t;
#endif
static_assert(std::is_same_v<Hostlist, decltype(slurm_hostlist_create(nullptr))>,
              "slurm_compat.h: the hostlist type does not match this Slurm's slurm.h");

// Whether the plugin can tell Slurm how to treat a failing slurm_spank_init.
#if SLURMDDP_SLURM_AT_LEAST(25, 5)
#define SLURMDDP_SLURM_HAS_INIT_FAILURE_MODE 1
#else
#define SLURMDDP_SLURM_HAS_INIT_FAILURE_MODE 0
#endif

}  // namespace slurmddp::plugin::compat

#endif  // SLURMDDP_PLUGIN_SLURM_COMPAT_H
