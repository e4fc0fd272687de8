// Fuzz target: the number, flag and duration parsers that read environment
// variables (RANK, WORLD_SIZE, MASTER_PORT, SLURMDDP_ENABLE, SLURMDDP_TIMEOUT,
// SLURMDDP_LOG_LEVEL, CUDA_VISIBLE_DEVICES, ...), and the quoting every error
// message applies to such values.
//
// Input: one byte picks the parser (and its bounds), the rest is the value.
//
// Invariants: accepted numbers lie in their bounds and print back to a value
// that parses to the same number; flags and durations round-trip; a device
// chosen from CUDA_VISIBLE_DEVICES is one of the visible ones; quoting leaves no
// control character in a log line.
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "common/log.h"
#include "common/quote.h"
#include "fuzz_util.h"
#include "group/duration.h"
#include "launch/error.h"
#include "launch/gpu_binding.h"
#include "launch/parse.h"
#include "launch/rendezvous.h"
#include "slurmddp/error.h"

namespace {

namespace launch = slurmddp::launch;

struct Bounds {
  uint64_t lo, hi;
};
// The bounds the runtime and the plugin use.
constexpr Bounds kBounds[] = {
    {0, uint64_t{1} << 24},  // RANK, LOCAL_RANK, NODE_RANK
    {1, uint64_t{1} << 24},  // WORLD_SIZE, LOCAL_WORLD_SIZE, SLURMDDP_NUM_NODES
    {0, 0xffffffffu},        // SLURM_JOB_ID, SLURM_STEP_ID, SLURM_NODEID, ...
    {0, uint64_t{1} << 16},  // SLURMDDP_LOCAL_DEVICE
    {0, std::numeric_limits<uint64_t>::max()},
    {7, 7},
};

void check_uint(std::string_view value, Bounds b) {
  uint64_t v = 0;
  try {
    v = launch::parse_uint("RANK", value, b.lo, b.hi);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(v >= b.lo && v <= b.hi, std::to_string(v));
  FUZZ_CHECK(launch::parse_uint("RANK", std::to_string(v), b.lo, b.hi) == v, std::to_string(v));
  if (value.size() == 1 || value[0] != '0')
    FUZZ_CHECK(std::to_string(v) == value, std::string(value));
}

void check_port(std::string_view value) {
  uint16_t p = 0;
  try {
    p = launch::parse_port("MASTER_PORT", value);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(p >= 1, std::string(value));
  FUZZ_CHECK(launch::parse_port("MASTER_PORT", std::to_string(p)) == p, std::to_string(p));
}

void check_bool(std::string_view value) {
  bool b = false;
  try {
    b = launch::parse_bool("SLURMDDP_ENABLE", value);
  } catch (const launch::LaunchError&) {
    return;
  }
  FUZZ_CHECK(launch::parse_bool("SLURMDDP_ENABLE", b ? "yes" : "no") == b, std::string(value));
}

void check_duration(std::string_view value) {
  std::chrono::milliseconds d{};
  try {
    d = slurmddp::parse_duration("SLURMDDP_TIMEOUT", std::string(value));
  } catch (const slurmddp::InvalidArgument&) {
    return;
  }
  FUZZ_CHECK(d.count() >= 0, std::to_string(d.count()));
  if (d.count() <= 999999999) {
    auto again = slurmddp::parse_duration("SLURMDDP_TIMEOUT", std::to_string(d.count()) + "ms");
    FUZZ_CHECK(again == d, std::to_string(d.count()));
  }
}

void check_level(std::string_view value) {
  slurmddp::log::Level level{};
  if (slurmddp::log::parse_level(std::string(value), &level)) {
    FUZZ_CHECK(static_cast<int>(level) >= 0 && static_cast<int>(level) <= 4, std::string(value));
  }
}

// A task's GPU list, the step's on the node and SLURMD_TRES_BIND, split at newlines.
void check_device(slurmddp::fuzz::Input& in) {
  launch::DeviceFacts f;
  f.local_rank = in.u8();
  f.local_task_count = in.u8();
  const bool bind = in.flag();
  const bool with_node = in.flag();
  auto parts = launch::split(std::string(in.rest()), '\n');
  f.task = launch::gpu_list("CUDA_VISIBLE_DEVICES", parts[0]);
  if (with_node && parts.size() > 1) f.node = launch::gpu_list("CUDA_VISIBLE_DEVICES", parts[1]);
  if (parts.size() > 2) f.bind = launch::parse_gpu_bind(parts[2]);
  launch::DeviceChoice d = launch::choose_device(f, bind);
  const size_t count = f.task.ids.size();
  if (!d.local_device) {
    FUZZ_CHECK(count == 0 || !d.why.empty(), parts[0]);
    return;
  }
  FUZZ_CHECK(*d.local_device < count, parts[0]);
  if (bind) {
    FUZZ_CHECK(*d.local_device == 0 && d.visible_devices && !d.visible_devices->empty(), parts[0]);
    bool listed = false;
    for (const auto& item : f.task.ids) listed |= item == *d.visible_devices;
    FUZZ_CHECK(listed, *d.visible_devices);
  }
}

void check_quote(std::string_view value) {
  std::string q = slurmddp::common::quote(value);
  FUZZ_CHECK(q.size() >= 2 && q.front() == '\'' && q.back() == '\'', q);
  for (size_t i = 1; i + 1 < q.size(); ++i) {
    auto u = static_cast<unsigned char>(q[i]);
    FUZZ_CHECK(u >= 0x20 && u != 0x7f && q[i] != '\'', q);
  }
  FUZZ_CHECK(q.size() <= 2 + 4 * 80 + 3, std::to_string(q.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  slurmddp::fuzz::Input in(data, size);
  const uint8_t which = in.u8();
  switch (which % 8) {
    case 0:
      check_uint(in.rest(), kBounds[(which / 8) % (sizeof kBounds / sizeof kBounds[0])]);
      break;
    case 1:
      check_port(in.rest());
      break;
    case 2:
      check_bool(in.rest());
      break;
    case 3:
      check_duration(in.rest());
      break;
    case 4:
      check_level(in.rest());
      break;
    case 5:
      check_device(in);
      break;
    case 6:
      check_quote(in.rest());
      break;
    default: {
      std::string_view v = in.rest();
      const auto items = launch::split(v, ',');
      std::string joined;
      for (size_t i = 0; i < items.size(); ++i) joined += (i == 0 ? "" : ",") + items[i];
      // split keeps empty items, so joining them back restores the value
      FUZZ_CHECK(joined == v, std::string(v));
      break;
    }
  }
  return 0;
}
