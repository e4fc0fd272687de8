// Note [MPI communicator] in slurmddp/mpi_communicator.h.
#include "slurmddp/mpi_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/host/host_work.h"
#include "comm/host/reduce.h"
#include "slurmddp/error.h"

namespace slurmddp {

namespace comm {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len)) + " (MPI error " + std::to_string(code) + ")";
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      break;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      break;
  }
  return MPI_SUM;
}

// Elements per MPI call: MPI counts are int.
constexpr size_t kMaxPiece = size_t{1} << 30;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const MpiOptions& o) : timeout_(o.timeout) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) {
      throw InvalidArgument(
          "mpi: failed to create a communicator: MPI is not initialized (call MPI_Init_thread "
          "first, or use SLURMDDP_BACKEND=mpi with init())");
    }
    if (comm == MPI_COMM_NULL) {
      throw InvalidArgument(
          "mpi: failed to create a communicator: the communicator is MPI_COMM_NULL");
    }
    if (o.timeout.count() <= 0) {
      throw InvalidArgument(
          "mpi: failed to create a communicator: timeout must be positive; "
          "timeout_ms=" +
          std::to_string(o.timeout.count()));
    }
    check(MPI_Comm_dup(comm, &comm_), "duplicate the communicator");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    threaded_ = provided == MPI_THREAD_MULTIPLE;
    if (threaded_) worker_ = std::thread([this] { worker_main(); });
  }

  ~MpiCommunicator() override {
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(m_);
        stopping_ = true;
      }
      cv_.notify_all();
      worker_.join();
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A broken communicator may still have a collective in flight: freeing it
    // could block. It is left to MPI_Finalize (or the process's end).
    if (!finalized && !state_->error()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kMpi; }
  DeviceKind device() const override { return DeviceKind::kHost; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  WorkHandle allreduce(void* data, size_t count, DataType type, ReduceOp op) override {
    const std::string what =
        "allreduce " + std::to_string(count) + " " + to_string(type) + " (" + to_string(op) + ")";
    return submit(what, [=] { do_allreduce(data, count, type, op); });
  }

  WorkHandle broadcast(void* data, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size_) {
      throw InvalidArgument("mpi: failed to broadcast: root " + std::to_string(root) +
                            " is outside [0, " + std::to_string(size_) +
                            "); rank=" + std::to_string(rank_));
    }
    const size_t bytes = count * element_size(type);
    return submit("broadcast " + std::to_string(count) + " " + to_string(type), [=] {
      auto* p = static_cast<uint8_t*>(data);
      for (size_t first = 0; first < bytes; first += kMaxPiece) {
        const int n = static_cast<int>(std::min(kMaxPiece, bytes - first));
        run("broadcast",
            [&](MPI_Request* r) { return MPI_Ibcast(p + first, n, MPI_BYTE, root, comm_, r); });
      }
    });
  }

  WorkHandle allgather(const void* send, void* recv, size_t count, DataType type) override {
    const size_t bytes = count * element_size(type);
    check_int("allgather", bytes);
    return submit("allgather " + std::to_string(count) + " " + to_string(type) + " per rank", [=] {
      if (bytes == 0) return;
      run("allgather", [&](MPI_Request* r) {
        return MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv,
                              static_cast<int>(bytes), MPI_BYTE, comm_, r);
      });
    });
  }

  WorkHandle reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                            ReduceOp op) override {
    check_int("reduce-scatter", count * static_cast<size_t>(size_));
    const std::string what = "reduce-scatter " + std::to_string(count) + " " + to_string(type) +
                             " (" + to_string(op) + ") per rank";
    return submit(what, [=] {
      if (count == 0) return;
      const size_t total = count * static_cast<size_t>(size_);
      if (is_16bit_float(type)) {
        std::vector<float> wide(total), mine(count);
        widen_to_float(type, send, wide.data(), total);
        run("reduce-scatter", [&](MPI_Request* r) {
          return MPI_Ireduce_scatter_block(wide.data(), mine.data(), static_cast<int>(count),
                                           MPI_FLOAT, mpi_op(op), comm_, r);
        });
        if (op == ReduceOp::kAvg) divide(DataType::kFloat32, mine.data(), count, size_);
        narrow_from_float(type, mine.data(), recv, count);
        return;
      }
      run("reduce-scatter", [&](MPI_Request* r) {
        return MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count), mpi_type(type),
                                         mpi_op(op), comm_, r);
      });
      if (op == ReduceOp::kAvg) divide(type, recv, count, size_);
    });
  }

  WorkHandle barrier() override {
    return submit("barrier",
                  [=] { run("barrier", [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); }); });
  }

 private:
  void check(int code, const char* what) const {
    if (code != MPI_SUCCESS) {
      throw PeerError(std::string("mpi: failed to ") + what + ": " + mpi_error_text(code) +
                      "; rank=" + std::to_string(rank_) + ", host=" + host_name());
    }
  }

  void check_int(const char* what, size_t n) const {
    if (n > static_cast<size_t>(INT_MAX)) {
      throw InvalidArgument(std::string("mpi: failed to ") + what + ": " + std::to_string(n) +
                            " elements exceed MPI's int count; rank=" + std::to_string(rank_));
    }
  }

  // Starts one non-blocking operation and polls it until done or the deadline.
  void run(const char* what, const std::function<int(MPI_Request*)>& start) {
    MPI_Request request = MPI_REQUEST_NULL;
    check(start(&request), what);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    auto pause = std::chrono::microseconds(0);
    for (int done = 0;;) {
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        throw TimeoutError(std::string("mpi: ") + what + " did not complete within " +
                           std::to_string(timeout_.count()) +
                           " ms (MPI cannot say which rank is missing, nor cancel the "
                           "operation: the communicator is broken; end the process); rank=" +
                           std::to_string(rank_) + ", size=" + std::to_string(size_) +
                           ", host=" + host_name());
      }
      // Spin briefly, then back off to at most 1 ms: ranks may outnumber cores.
      if (pause.count() == 0) {
        std::this_thread::yield();
        pause = std::chrono::microseconds(1);
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
  }

  void do_allreduce(void* data, size_t count, DataType type, ReduceOp op) {
    if (count == 0) return;
    const bool wide = is_16bit_float(type);
    const DataType t = wide ? DataType::kFloat32 : type;
    const size_t esize = element_size(type);
    std::vector<float> buffer;
    for (size_t first = 0; first < count; first += kMaxPiece) {
      const size_t n = std::min(kMaxPiece, count - first);
      void* piece = static_cast<uint8_t*>(data) + first * esize;
      void* target = piece;
      if (wide) {
        buffer.resize(n);
        widen_to_float(type, piece, buffer.data(), n);
        target = buffer.data();
      }
      run("allreduce", [&](MPI_Request* r) {
        return MPI_Iallreduce(MPI_IN_PLACE, target, static_cast<int>(n), mpi_type(t), mpi_op(op),
                              comm_, r);
      });
      if (op == ReduceOp::kAvg) divide(t, target, n, size_);
      if (wide) narrow_from_float(type, buffer.data(), piece, n);
    }
  }

  WorkHandle submit(const std::string& what, std::function<void()> body) {
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(m_);
      id = issued_++;
    }
    // wait() without a timeout leaves the operation's own deadline room to
    // report first, with the more precise message.
    const auto wait_default = timeout_ + std::max(timeout_ / 4, std::chrono::milliseconds(1000));
    auto work = std::make_shared<HostWork>(what + ", op #" + std::to_string(id), rank_, state_,
                                           wait_default, "mpi");
    if (!threaded_) {
      execute(*work, body);
      return work;
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.push_back({work, std::move(body)});
    }
    cv_.notify_all();
    return work;
  }

  void execute(HostWork& work, const std::function<void()>& body) {
    std::exception_ptr error = state_->error();
    if (!error) {
      try {
        body();
      } catch (const Error& e) {
        error = state_->break_with(rethrown_as(e, "mpi: failed to " + work.what() + ": "));
      } catch (const std::exception& e) {
        error = state_->break_with(
            std::make_exception_ptr(Error("mpi: failed to " + work.what() + ": " + e.what())));
      }
    }
    work.finish(error);
  }

  // The same error type, with the operation in front.
  static std::exception_ptr rethrown_as(const Error& e, const std::string& head) {
    std::string m = e.what();
    if (m.rfind("mpi: ", 0) == 0) m.erase(0, 5);
    if (dynamic_cast<const TimeoutError*>(&e)) {
      return std::make_exception_ptr(TimeoutError(head + m));
    }
    if (dynamic_cast<const PeerError*>(&e)) return std::make_exception_ptr(PeerError(head + m));
    if (dynamic_cast<const InvalidArgument*>(&e)) {
      return std::make_exception_ptr(InvalidArgument(head + m));
    }
    return std::make_exception_ptr(Error(head + m));
  }

  void worker_main() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      execute(*task.work, task.body);
    }
  }

  struct Task {
    std::shared_ptr<HostWork> work;
    std::function<void()> body;
  };

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  const std::chrono::milliseconds timeout_;
  bool threaded_ = false;
  uint64_t issued_ = 0;
  const std::shared_ptr<BreakState> state_ = std::make_shared<BreakState>();
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace
}  // namespace comm

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const MpiOptions& options) {
  return std::make_unique<comm::MpiCommunicator>(comm, options);
}

}  // namespace slurmddp
