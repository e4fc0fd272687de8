// Collective communication between the ranks of a process group.
//
// The contract every backend keeps (gloo_communicator.h, nccl_communicator.h
// and mpi_communicator.h add only what is theirs):
//  - Order: every rank must issue the same collectives in the same order with
//    matching counts and types (as with MPI, NCCL and c10d). Operations of one
//    communicator run in issue order.
//  - Blocking: an operation call returns a Work handle without waiting for the
//    operation to finish (a backend may finish it inside the call: MPI below
//    MPI_THREAD_MULTIPLE); issuing blocks at most the communicator's
//    timeout(). Buffers must stay valid and untouched until the Work completed.
//    Only Work::wait blocks for completion, and never longer than its timeout
//    plus the backend's short failure diagnosis.
//  - Thread safety: any thread may issue operations and wait on or test any
//    Work; operations issued concurrently from several threads run in the
//    order the communicator received them, which must then be the same on
//    every rank (serialize such threads yourself when it is not). The one
//    exception: an MPI communicator below MPI_THREAD_MULTIPLE runs each
//    operation inside the issuing call, so only one thread may issue at a
//    time (mpi_communicator.h). The accessors (rank, size, backend, device,
//    timeout) are always safe.
//  - Failure: after any failure (peer lost, timeout, protocol error) the
//    communicator is broken: the failing Work and every later operation throw
//    the same error (PeerError, TimeoutError, ProtocolError from error.h). It
//    cannot be repaired; make a new one.
//  - Destruction waits for the operations in flight (at most timeout()), then
//    fails the queued ones.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "slurmddp/timeout.h"

// The types behind cudaStream_t and cudaEvent_t, declared here so that the
// public headers do not need the CUDA headers: a cudaStream_t converts to
// CudaStream and back, a cudaEvent_t to CudaEvent.
struct CUstream_st;
struct CUevent_st;

// The installed API is what libslurmddp exports; everything else is hidden.
#pragma GCC visibility push(default)

namespace slurmddp {

enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };
enum class ReduceOp { kSum, kAvg, kMin, kMax };
enum class DeviceKind { kHost, kCuda };
// Which library moves the data. kAuto appears only in InitOptions: init()
// resolves it (docs/cpp-api.md, "How the backend is chosen"); a
// communicator's backend() is never kAuto.
enum class Backend { kAuto, kGloo, kNccl, kMpi };

using CudaStream = CUstream_st*;
using CudaEvent = CUevent_st*;

size_t element_size(DataType t);
const char* to_string(DataType t);
const char* to_string(ReduceOp op);
const char* to_string(DeviceKind kind);  // "host", "cuda"
const char* to_string(Backend backend);  // "auto", "gloo", "nccl", "mpi"

// Storage of the 16-bit float types for the typed calls below: the bits as
// IEEE binary16 and bfloat16 (the runtime converts, it never computes on them).
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// The DataType of an element type: data_type_of<float> == DataType::kFloat32.
template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<float> : std::integral_constant<DataType, DataType::kFloat32> {};
template <>
struct DataTypeOf<double> : std::integral_constant<DataType, DataType::kFloat64> {};
template <>
struct DataTypeOf<Float16> : std::integral_constant<DataType, DataType::kFloat16> {};
template <>
struct DataTypeOf<BFloat16> : std::integral_constant<DataType, DataType::kBFloat16> {};
template <>
struct DataTypeOf<int32_t> : std::integral_constant<DataType, DataType::kInt32> {};
template <>
struct DataTypeOf<int64_t> : std::integral_constant<DataType, DataType::kInt64> {};
template <typename T>
inline constexpr DataType data_type_of = DataTypeOf<std::remove_cv_t<T>>::value;

// A handle on one asynchronous operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completes; rethrows its error. Throws
  // TimeoutError naming the operation, the rank and the timeout when `timeout`
  // passes first (the operation is then aborted and the communicator broken).
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // wait() with the communicator's timeout.
  void wait() { wait(default_timeout_); }
  // Non-blocking: true once the operation finished (successfully or not).
  virtual bool is_completed() = 0;
  // Non-blocking and never breaking the communicator (unlike wait(0ms), which
  // gives up on the operation): false while it runs; true once it succeeded;
  // rethrows its error once it failed.
  bool test() {
    if (!is_completed()) return false;
    wait(std::chrono::milliseconds::max());  // finished: returns or rethrows at once
    return true;
  }

 protected:
  explicit Work(std::chrono::milliseconds default_timeout = kDefaultTimeout)
      : default_timeout_(default_timeout) {}

 private:
  std::chrono::milliseconds default_timeout_;
};
using WorkHandle = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;    // to_string(backend()) for messages
  virtual DeviceKind device() const = 0;  // where buffers must live
  // The timeout used by the blocking helpers and by the backend's own I/O.
  virtual std::chrono::milliseconds timeout() const = 0;

  // In place: every rank ends with op(data of all ranks), elementwise.
  virtual WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op) = 0;
  // In place: every rank ends with root's data.
  virtual WorkHandle broadcast(void* data, size_t count, DataType type, int root) = 0;
  // recv (size() * count elements) gets rank r's send (count elements) at r * count.
  virtual WorkHandle allgather(const void* send, void* recv, size_t count, DataType type) = 0;
  // send has size() * count elements; rank r's recv (count elements) gets
  // op over ranks of send[r * count, (r + 1) * count).
  virtual WorkHandle reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                                    ReduceOp op) = 0;
  virtual WorkHandle barrier() = 0;

  // Typed forms of the calls above, for float, double, Float16, BFloat16,
  // int32_t and int64_t elements: the DataType follows from the pointer.
  template <typename T>
  WorkHandle allreduce(T* data, size_t count, ReduceOp op = ReduceOp::kSum) {
    return allreduce(static_cast<void*>(data), count, data_type_of<T>, op);
  }
  template <typename T>
  WorkHandle allreduce(std::vector<T>& data, ReduceOp op = ReduceOp::kSum) {
    return allreduce(data.data(), data.size(), op);
  }
  template <typename T>
  WorkHandle broadcast(T* data, size_t count, int root) {
    return broadcast(static_cast<void*>(data), count, data_type_of<T>, root);
  }
  template <typename T>
  WorkHandle broadcast(std::vector<T>& data, int root) {
    return broadcast(data.data(), data.size(), root);
  }
  // recv holds size() * count elements.
  template <typename T>
  WorkHandle allgather(const T* send, T* recv, size_t count) {
    return allgather(static_cast<const void*>(send), static_cast<void*>(recv), count,
                     data_type_of<T>);
  }
  // send holds size() * count elements.
  template <typename T>
  WorkHandle reduce_scatter(const T* send, T* recv, size_t count, ReduceOp op = ReduceOp::kSum) {
    return reduce_scatter(static_cast<const void*>(send), static_cast<void*>(recv), count,
                          data_type_of<T>, op);
  }
};

}  // namespace slurmddp

#pragma GCC visibility pop
