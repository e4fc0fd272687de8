#include "slurmddp/communicator.h"

#include "slurmddp_config.h"

#if !SLURMDDP_HAVE_GLOO
#include "slurmddp/error.h"
#include "slurmddp/gloo_communicator.h"
#endif

namespace slurmddp {

size_t element_size(DataType t) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
  }
  return 0;
}

const char* to_string(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
  }
  return "unknown";
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

#if !SLURMDDP_HAVE_GLOO
std::unique_ptr<Communicator> make_gloo_communicator(const GlooOptions& options) {
  throw Error("gloo: failed to create a communicator: slurm-ddp was built without Gloo "
              "(libgloo-dev); rank=" + std::to_string(options.rank));
}
#endif

}  // namespace slurmddp
