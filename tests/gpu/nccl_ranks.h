// The harness of the NCCL gpu tests (nccl_*_test.cpp): rank processes of this
// program ("--worker <scenario>", nccl_workers.cpp) around a TCP store hosted
// by the test, the probe that decides whether two ranks can share a GPU here,
// and the bounds of the fault tests.
//
// With as many GPUs as ranks each rank takes its own; with fewer, the ranks
// share device 0 the way NCCL allows it: each rank claims another host
// (NCCL_HOSTID) and they talk over loopback sockets (Note [Sharing one GPU] in
// nccl_ranks.cpp). A first two-rank probe decides whether that works here:
// where NCCL refuses it ("Duplicate GPU detected", ncclInvalidUsage) the
// multi-process tests skip and say why; any other failure of the probe fails
// them (probe_verdict.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "probe_verdict.h"
#include "slurmddp/nccl_communicator.h"
#include "slurmddp/store.h"

namespace slurmddp::support {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The number of CUDA devices (set by main before the tests run).
extern int g_device_count;

double seconds_since(Clock::time_point t);
bool contains(const std::string& text, const std::string& part);

// Note [Fault test timeouts]
// A communicator's timeout bounds its creation (CUDA context, NCCL init over
// loopback: seconds on a loaded machine, more on a node with many GPUs) as
// well as every operation. Where a test's timeout also bounds a creation that
// must succeed, it is kCreationTimeout (30 s), never a few seconds; the bound
// a fault must be detected within is then stated next to each check (for the
// watchdog: that same timeout plus its period and the abort, at most 5 s).
// Only tests whose subject is a creation that cannot succeed use a short
// timeout (Errors.InitTimesOutWhenARankNeverArrives).
inline constexpr milliseconds kCreationTimeout{30000};
// Slack on top of a detection bound: the watchdog's period (<= 100 ms), the
// abort, a loaded machine.
inline constexpr double kDetectionSlackS = 5.0;

// One rank of a single-process test: rank 0 of 1 on `device`.
NcclOptions single_rank(int device = 0);

struct Launch {
  std::vector<std::optional<int>> exit_codes;  // nullopt: killed at the hard limit
};

// Runs `size` rank processes of `scenario` around a TCP store hosted here;
// `during` (optional) runs meanwhile with the store and the pids.
Launch run_ranks(const std::string& scenario, int size, milliseconds comm_timeout,
                 std::chrono::seconds hard_limit,
                 const std::function<void(Store&, const std::vector<pid_t>&)>& during = nullptr);

// "rank 0: exit 0; rank 1: killed at the limit; " for messages.
std::string describe(const Launch& l);

struct Probe {
  ProbeVerdict verdict = ProbeVerdict::kFailed;
  std::string text;
};

// Whether two rank processes can form a communicator here, run once per
// test program.
const Probe& multi_rank_probe();

// Skips only for NCCL's refusal to share the one GPU; fails for any other
// failure of the probe.
#define REQUIRE_MULTI_RANK()                                                   \
  do {                                                                         \
    const Probe& probe_ = multi_rank_probe();                                  \
    if (probe_.verdict == ProbeVerdict::kRefused) GTEST_SKIP() << probe_.text; \
    if (probe_.verdict == ProbeVerdict::kFailed) FAIL() << probe_.text;        \
  } while (0)

// A rank process's main ("--worker SCENARIO RANK SIZE PORT TIMEOUT_MS").
int worker_main(int argc, char** argv);

}  // namespace slurmddp::support
