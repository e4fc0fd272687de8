#include "env/pmix_identity.h"

#include "slurmddp/error.h"
#include "slurmddp_config.h"

#if SLURMDDP_HAVE_PMIX
#include <pmix.h>

#include <cstdlib>
#include <cstring>
#endif

namespace slurmddp {

#if SLURMDDP_HAVE_PMIX

namespace {

uint32_t get_u32(const pmix_proc_t& proc, const char* key) {
  pmix_value_t* val = nullptr;
  pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &val);
  if (rc != PMIX_SUCCESS || val == nullptr) {
    throw Error(std::string("identity: failed to read ") + key +
                " from PMIx: " + PMIx_Error_string(rc));
  }
  uint32_t out = 0;
  switch (val->type) {
    case PMIX_UINT32:
      out = val->data.uint32;
      break;
    case PMIX_UINT16:
      out = val->data.uint16;
      break;
    case PMIX_INT:
      out = static_cast<uint32_t>(val->data.integer);
      break;
    default:
      PMIX_VALUE_RELEASE(val);
      throw Error(std::string("identity: unexpected PMIx type for ") + key);
  }
  PMIX_VALUE_RELEASE(val);
  return out;
}

}  // namespace

ProcessIdentity pmix_identity() {
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    throw InvalidArgument(std::string("identity: failed to connect to the PMIx server: ") +
                          PMIx_Error_string(rc) + "; PMIX_RANK is set but no server answers");
  }
  pmix_proc_t wild;
  PMIX_PROC_CONSTRUCT(&wild);
  PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
  ProcessIdentity id;
  id.source = IdentitySource::kPmix;
  id.rank = static_cast<int>(me.rank);
  id.world_size = static_cast<int>(get_u32(wild, PMIX_JOB_SIZE));
  id.local_rank = static_cast<int>(get_u32(me, PMIX_LOCAL_RANK));
  id.local_world_size = static_cast<int>(get_u32(wild, PMIX_LOCAL_SIZE));
  id.node_rank = static_cast<int>(get_u32(me, PMIX_NODEID));
  id.num_nodes = static_cast<int>(get_u32(wild, PMIX_NUM_NODES));
  const char* token = std::getenv("SLURMDDP_TOKEN");
  id.token = token != nullptr ? token : "";
  PMIx_Finalize(nullptr, 0);
  return id;
}

#else

ProcessIdentity pmix_identity() {
  throw InvalidArgument(
      "identity: PMIX_RANK is set but slurm-ddp was built without PMIx (meson -Dpmix=enabled)");
}

#endif

}  // namespace slurmddp
