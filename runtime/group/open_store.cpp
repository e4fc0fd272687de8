// Note [Open store] in open_store.h.
#include "group/open_store.h"

#include "launch/error.h"
#include "launch/parse.h"
#include "slurmddp/error.h"

namespace slurmddp {

std::string check_open_store(const ProcessIdentity& id, const std::optional<std::string>& require,
                             const std::string& host, const std::string& head) {
  const std::string who = "rank=" + std::to_string(id.rank) + ", host=" + host;
  bool required = false;
  if (require && !require->empty()) {
    try {
      required = launch::parse_bool(kEnvRequireToken, *require);
    } catch (const launch::LaunchError& e) {
      throw InvalidArgument(head + "failed to read the environment: " + e.what() + "; " + who);
    }
  }
  if (!id.token.empty()) return "";
  const std::string store =
      "the rendezvous store at " + id.master_addr + ":" + std::to_string(id.master_port);
  const std::string fix =
      "slurm-ddp's SPANK plugin draws a token for every srun step when srun loads it (install it "
      "and its plugstack.conf line on the submit hosts too, docs/admin-guide.md), or set "
      "SLURMDDP_TOKEN to the same secret in every rank's environment";
  if (required) {
    throw InvalidArgument(head + "refusing to run " + store +
                          " without authentication: " + kEnvRequireToken + "=" + *require +
                          " requires a token, but SLURMDDP_TOKEN is not set; " + fix + "; " + who);
  }
  if (id.rank != 0) return "";
  return "no SLURMDDP_TOKEN: " + store +
         " runs without authentication: anyone who can reach the port can read and change the "
         "rendezvous, or take the port first and pose as rank 0's server; " +
         fix + " (" + kEnvRequireToken + "=1 refuses to run without one); " + who;
}

}  // namespace slurmddp
