// What init() does when the TCP rendezvous has no token.
//
// Note [Open store]
//   Without a token (SLURMDDP_TOKEN unset: srun did not load slurm-ddp's
//   plugin, or the program was started some other way) rank 0's store is
//   open: anyone who can reach MASTER_PORT can read and change the
//   rendezvous. Worse, the port is known in advance (reserved ports, or a hash
//   of the public job id, the same for everyone), so a neighbour can take it
//   first and pose as rank 0's server. That used to be said at debug level
//   only. Now:
//   - rank 0 says so once, at warn, naming what it means and the two ways
//     out. Global rank 0 only, not every node's local rank 0: the cause is
//     the job's launch, the same on every node, so one line per job says it
//     (a thousand lines on a thousand nodes would bury it), and rank 0 is the
//     one whose store is open;
//   - SLURMDDP_REQUIRE_TOKEN=1 makes every rank refuse to run an open TCP
//     rendezvous instead. The plugin exports it into every task of every step
//     when the admin sets require_token=yes (plugstack.conf), overwriting a
//     value the user set; a user may also set it. It wins over
//     SLURMDDP_ALLOW_OPEN.
//   The PMIx bootstrap is never open (it draws a token and hands it out
//   through PMIx), so neither applies there.
#pragma once

#include <optional>
#include <string>

#include "launch/settings.h"
#include "slurmddp/identity.h"

namespace slurmddp {

using launch::kEnvRequireToken;

// For a TCP rendezvous by `id`, given SLURMDDP_REQUIRE_TOKEN's value
// (`require`, nullopt when unset): "" when the store has a token or this is
// not rank 0, else the warning rank 0 logs. Throws InvalidArgument, starting
// with `head`, naming SLURMDDP_REQUIRE_TOKEN and SLURMDDP_TOKEN, the rank and
// `host`, when a token is required and there is none, or when `require` is
// not a yes/no value.
std::string check_open_store(const ProcessIdentity& id, const std::optional<std::string>& require,
                             const std::string& host, const std::string& head);

}  // namespace slurmddp
