// Collective communication between the ranks of a process group.
//
// Every rank must issue the same collectives in the same order with matching
// counts and types (as with MPI, NCCL and c10d). Operations are asynchronous:
// each returns a Work handle; operations of one communicator run in issue order.
// After any failure (peer lost, timeout, protocol error) the communicator is
// broken: the failing Work and every later operation throw the same error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace slurmddp {

enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };
enum class ReduceOp { kSum, kAvg, kMin, kMax };
enum class DeviceKind { kHost, kCuda };

size_t element_size(DataType t);
const char* to_string(DataType t);
const char* to_string(ReduceOp op);

// A handle on one asynchronous operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completes; rethrows its error. Throws
  // TimeoutError naming the operation, the rank and the timeout when `timeout`
  // passes first (the operation is then aborted and the communicator broken).
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // Non-blocking: true once the operation finished (successfully or not).
  virtual bool is_completed() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;       // "gloo", "nccl"
  virtual DeviceKind device() const = 0;         // where buffers must live
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
};

}  // namespace slurmddp
