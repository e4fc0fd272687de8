// The NCCL communicator with one rank: every collective, the average's
// divide kernel, and the stream order (Note [Stream order]).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl/nccl_scale.h"
#include "gpu_values.h"
#include "nccl_ranks.h"
#include "signalling_nccl.h"
#include "slurmddp/error.h"
#include "slurmddp/grad_sync.h"
#include "slurmddp/nccl_communicator.h"

namespace slurmddp::support {
namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST(Single, EveryCollectiveTypeOpAndCount) {
  auto comm = make_nccl_communicator(single_rank());
  EXPECT_EQ(comm->backend(), Backend::kNccl);
  EXPECT_EQ(comm->device(), DeviceKind::kCuda);
  const auto failures = check_collectives(*comm, device_memory, ConformanceOptions::nccl());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST(Single, LargeCounts) {
  auto comm = make_nccl_communicator(single_rank());
  auto o = ConformanceOptions::nccl();
  o.counts = {(size_t{1} << 24) + 3};
  o.only_average = true;
  const auto failures = check_collectives(*comm, device_memory, o);
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

// The kernel behind the average without ncclAvg (Note [Average]), on its own:
// with one rank the communicator never needs it.
TEST(Single, DivideKernelOfTheSumDivideAverage) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  for (DataType t : all_types()) {
    for (size_t count : {size_t{1}, size_t{1001}, size_t{1} << 20}) {
      const int n = 3;
      const auto in =
          encode(t, count, [&](size_t i) { return device_input_value(t, n - 1, i) * 2; });
      DeviceBuffer buf(in.size());
      ASSERT_EQ(cudaMemcpy(buf.get(), in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(comm::launch_divide(buf.get(), count, t, n, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint8_t> out(in.size());
      ASSERT_EQ(cudaMemcpy(out.data(), buf.get(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        const double x = decode(t, in.data() + i * element_size(t));
        const double want = is_integer(t) ? std::trunc(x / n) : x / n;
        const double got = decode(t, out.data() + i * element_size(t));
        const double tol =
            common::is_16bit_float(t) ? 1e-2 * std::fabs(want) : 1e-6 * std::fabs(want);
        if (std::fabs(got - want) > tol) ++wrong;
      }
      EXPECT_EQ(wrong, 0u) << to_string(t) << " count " << count;
    }
  }
}

// A launch reports only its own error: one the thread had pending before
// (the user's) is neither reported nor cleared (Note [Launch errors and
// pending errors] in common/cuda_launch.h).
TEST(Single, DivideKernelLeavesAnUnrelatedPendingErrorAlone) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const size_t count = 4096;
  const auto in = encode(DataType::kFloat32, count, [](size_t i) { return 2.0 * (i % 7 + 1); });
  DeviceBuffer buf(in.size());
  ASSERT_EQ(cudaMemcpy(buf.get(), in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int bogus = -1;
  ASSERT_NE(cudaDeviceGetAttribute(&bogus, cudaDevAttrMaxThreadsPerBlock, 1 << 20),
            cudaSuccess);  // the user's mistake, pending now
  ASSERT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(comm::launch_divide(buf.get(), count, DataType::kFloat32, 2, nullptr), cudaSuccess);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice) << "the pending error was cleared";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);  // its owner collects it
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> out(in.size());
  ASSERT_EQ(cudaMemcpy(out.data(), buf.get(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    wrong += decode(DataType::kFloat32, out.data() + i * 4) != static_cast<double>(i % 7 + 1);
  }
  EXPECT_EQ(wrong, 0u);
}

void CUDART_CB sleep_200ms(void* /*unused*/) {
  std::this_thread::sleep_for(milliseconds(200));
}

// The collective must read what the compute stream wrote before it was
// issued, even when that work is still queued (Note [Stream order]).
TEST(Single, WaitsForTheComputeStream) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  NcclOptions o = single_rank();
  o.compute_stream = compute;
  auto comm = make_nccl_communicator(o);
  NcclCommunicator* nccl = comm.get();
  EXPECT_EQ(nccl->compute_stream(), compute);
  const size_t count = size_t{1} << 20;
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  ASSERT_EQ(cudaMemset(send.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Queued on the compute stream: 200 ms of nothing, then the data.
  ASSERT_EQ(cudaLaunchHostFunc(compute, sleep_200ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(send.get(), 0x01, count * 4, compute), cudaSuccess);
  comm->allgather(send.get(), recv.get(), count, DataType::kFloat32)->wait(milliseconds(30000));
  std::vector<uint8_t> host(count * 4);
  ASSERT_EQ(cudaMemcpy(host.data(), recv.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t stale = 0;
  for (uint8_t b : host) stale += b != 0x01;
  EXPECT_EQ(stale, 0u) << "the collective read the buffer before the compute stream wrote it";
  comm.reset();
  cudaStreamDestroy(compute);
}

void CUDART_CB sleep_3s(void* /*unused*/) {
  std::this_thread::sleep_for(milliseconds(3000));
}

// A per-operation order (NcclOrder) replaces the compute stream for that
// operation only: with its inputs ready behind an event, the collective runs
// while the compute stream is still busy, and the communicator's compute
// stream is not changed (Note [Stream order]).
TEST(Single, PerOperationEventOrderLeavesTheComputeStreamAlone) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t compute = nullptr;
  cudaStream_t producer = nullptr;
  cudaEvent_t ready = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  NcclOptions o = single_rank();
  o.compute_stream = compute;
  auto comm = make_nccl_communicator(o);
  NcclCommunicator* nccl = comm.get();
  const size_t count = size_t{1} << 20;
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // The compute stream is busy for 3 s; the input is written on `producer`.
  ASSERT_EQ(cudaLaunchHostFunc(compute, sleep_3s, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(send.get(), 0x01, count * 4, producer), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
  const auto start = Clock::now();
  auto work = nccl->allgather(send.get(), recv.get(), count, DataType::kFloat32,
                              NcclOrder::after_event(ready));
  work->wait(milliseconds(30000));
  const double took = seconds_since(start);
  EXPECT_LT(took, 2.0) << "the operation waited for the compute stream despite its own order";
  EXPECT_EQ(nccl->compute_stream(), compute);
  std::vector<uint8_t> host(count * 4);
  ASSERT_EQ(cudaMemcpy(host.data(), recv.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t stale = 0;
  for (uint8_t b : host) stale += b != 0x01;
  EXPECT_EQ(stale, 0u) << "the collective read its input before the event's work wrote it";
  // The default order still follows the compute stream.
  auto defaulted = comm->barrier();
  defaulted->wait(milliseconds(30000));
  EXPECT_GE(seconds_since(start), 2.5)
      << "the default order no longer waits for the compute stream";
  // An event order needs an event; the communicator stays usable.
  NcclOrder no_event;
  no_event.kind = NcclOrder::Kind::kEvent;
  EXPECT_THROW(nccl->barrier(no_event), InvalidArgument);
  nccl->barrier(NcclOrder::unordered())->wait(milliseconds(30000));
  comm.reset();
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(compute);
}

// GradSync orders each bucket by the bucket's own event and leaves the
// communicator's compute stream alone, so a collective issued by other code
// during a step still waits for the caller's stream (Note [NCCL compute
// stream] in grad_sync/engine_step.cpp; the engine used to swap the compute stream for
// the length of a step).
TEST(Single, GradSyncStepLeavesOtherCollectivesOrderedAfterTheComputeStream) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  NcclOptions o = single_rank();
  o.compute_stream = compute;
  auto signalling = std::make_shared<SignallingNccl>(make_nccl_communicator(o));
  std::shared_ptr<Communicator> comm = signalling;
  NcclCommunicator* nccl = as_nccl_communicator(comm.get());
  ASSERT_EQ(nccl, signalling.get());
  const size_t n = 4096;
  DeviceBuffer data(n * 4);
  DeviceBuffer grad(n * 4);
  DeviceBuffer send(n * 4);
  DeviceBuffer recv(n * 4);
  for (const DeviceBuffer* b : {&data, &grad, &send, &recv}) {
    ASSERT_EQ(cudaMemset(b->get(), 0, n * 4), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  GradParameter p;
  p.data = data.get();
  p.grad = grad.get();
  p.count = n;
  p.device = DeviceKind::kCuda;
  GradSyncOptions go;
  go.cuda_stream = compute;
  GradSync sync(comm, {p}, go);
  ASSERT_EQ(cudaMemsetAsync(grad.get(), 0x02, n * 4, compute), cudaSuccess);
  sync.mark_ready(0);
  ASSERT_TRUE(signalling->await_allreduces(1, milliseconds(30000)))
      << "GradSync never issued the bucket's allreduce";
  EXPECT_EQ(nccl->compute_stream(), compute) << "a step changed the communicator's compute stream";
  // Other code's collective, on data the compute stream writes after a delay.
  ASSERT_EQ(cudaLaunchHostFunc(compute, sleep_200ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(send.get(), 0x01, n * 4, compute), cudaSuccess);
  auto other = comm->allgather(send.get(), recv.get(), n, DataType::kFloat32);
  sync.wait();
  other->wait(milliseconds(30000));
  std::vector<uint8_t> host(n * 4);
  ASSERT_EQ(cudaMemcpy(host.data(), recv.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t stale = 0;
  for (uint8_t b : host) stale += b != 0x01;
  EXPECT_EQ(stale, 0u) << "a collective issued during a step was not ordered after the compute "
                          "stream";
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), grad.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t wrong = 0;
  for (uint8_t b : host) wrong += b != 0x02;
  EXPECT_EQ(wrong, 0u) << "one rank: the averaged gradient is the gradient";
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
}

// A per-operation stream order waits for that stream's queued work.
TEST(Single, PerOperationStreamOrderWaitsForThatStream) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  NcclOptions o = single_rank();
  o.order_after_compute_stream = false;  // only the operation's own order applies
  auto comm = make_nccl_communicator(o);
  NcclCommunicator* nccl = comm.get();
  const size_t count = size_t{1} << 20;
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  ASSERT_EQ(cudaMemset(send.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(producer, sleep_200ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(send.get(), 0x01, count * 4, producer), cudaSuccess);
  nccl->allgather(send.get(), recv.get(), count, DataType::kFloat32,
                  NcclOrder::after_stream(producer))
      ->wait(milliseconds(30000));
  std::vector<uint8_t> host(count * 4);
  ASSERT_EQ(cudaMemcpy(host.data(), recv.get(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t stale = 0;
  for (uint8_t b : host) stale += b != 0x01;
  EXPECT_EQ(stale, 0u) << "the collective read the buffer before the stream wrote it";
  comm.reset();
  cudaStreamDestroy(producer);
}

TEST(Single, WaitOnStreamOrdersAConsumer) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto comm = make_nccl_communicator(single_rank());
  NcclCommunicator* nccl = comm.get();
  EXPECT_EQ(nccl->cuda_device(), 0);
  EXPECT_NE(nccl->stream(), nullptr);
  EXPECT_GE(nccl->nccl_version(), 21400);
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  const size_t count = 4096;
  const auto in = encode(DataType::kFloat32, count,
                         [](size_t i) { return device_input_value(DataType::kFloat32, 0, i); });
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  ASSERT_EQ(cudaMemcpy(send.get(), in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
  auto work = comm->allgather(send.get(), recv.get(), count, DataType::kFloat32);
  nccl->wait_on_stream(work, consumer);
  std::vector<uint8_t> out(count * 4);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), recv.get(), out.size(), cudaMemcpyDeviceToHost, consumer),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(out, in);
  work->wait(milliseconds(10000));
  EXPECT_TRUE(work->is_completed());
  cudaStreamDestroy(consumer);
}

TEST(Single, RejectsHostMemoryAndStaysUsable) {
  auto comm = make_nccl_communicator(single_rank());
  std::vector<float> host(16, 1.0f);
  try {
    comm->allreduce(host.data(), host.size(), DataType::kFloat32, ReduceOp::kSum);
    ADD_FAILURE() << "host memory accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "host memory")) << e.what();
    EXPECT_TRUE(contains(e.what(), "device 0")) << e.what();
  }
  EXPECT_THROW(comm->broadcast(nullptr, 4, DataType::kFloat32, 0), InvalidArgument);
  EXPECT_THROW(comm->broadcast(nullptr, 4, DataType::kFloat32, 1), InvalidArgument);
  // Zero elements: nothing to do, even with null buffers.
  EXPECT_TRUE(comm->allreduce(nullptr, 0, DataType::kFloat32, ReduceOp::kSum)->is_completed());
  comm->barrier()->wait(milliseconds(10000));
}

}  // namespace
}  // namespace slurmddp::support
