#include "slurmddp/communicator.h"

#include "common/dtype.h"
#include "common/quote.h"
#include "slurmddp_config.h"

#if !SLURMDDP_HAVE_GLOO
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#endif

namespace slurmddp {

size_t element_size(DataType t) {
  return common::dtype_size(t);
}

const char* to_string(DataType t) {
  return common::dtype_name(t);
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";
}

const char* to_string(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "host";
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
    case Backend::kMpi:
      return "mpi";
    case Backend::kAuto:
      break;
  }
  return "auto";
}

#if !SLURMDDP_HAVE_GLOO
std::unique_ptr<Communicator> make_gloo_communicator(const GlooOptions& options) {
  throw Error(
      "gloo: failed to create a communicator: slurm-ddp was built without Gloo "
      "(libgloo-dev); rank=" +
      common::optional_text(options.rank));
}
#endif

}  // namespace slurmddp
