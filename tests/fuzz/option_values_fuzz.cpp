// Fuzz target: the values of the plugin's srun/sbatch options and of the
// variables that mirror them, through the plugin's own path: option_table +
// record_option (what the SPANK callbacks do), then launch::resolve_settings
// against an environment and plugstack arguments.
//
// Input: lines. "--NAME" or "--NAME=VALUE" records an option of the table;
// "plugstack:ARG" adds a plugstack argument; "step:J.S" sets the step being
// launched; any other line is NAME=VALUE in the step's environment.
//
// Invariants: recording is idempotent (slurmstepd runs the callbacks twice);
// accepted settings hold valid values, and command-line options win over the
// environment, which wins over plugstack.conf.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "launch/error.h"
#include "launch/settings.h"
#include "plugin/options.h"

namespace {

namespace launch = slurmddp::launch;
namespace plugin = slurmddp::plugin;

bool same(const launch::UserOptions& a, const launch::UserOptions& b) {
  return a.enable == b.enable && a.port == b.port && a.addr == b.addr && a.ifname == b.ifname &&
         a.bind_gpu == b.bind_gpu && a.verbose == b.verbose;
}

// Records "--NAME[=VALUE]" the way the plugin's option callback does; false
// for a name that is not in the table.
bool record(launch::UserOptions& opts, std::string_view line) {
  std::string_view body = line.substr(2);
  size_t eq = body.find('=');
  std::string name(body.substr(0, eq));
  std::string value(eq == std::string_view::npos ? std::string_view() : body.substr(eq + 1));
  for (const auto& o : plugin::option_table()) {
    if (name != o.name) continue;
    const char* optarg = o.has_arg != 0 ? value.c_str() : nullptr;
    FUZZ_CHECK(plugin::record_option(opts, o.id, optarg), name);
    return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  launch::UserOptions opts;
  std::vector<std::string_view> option_lines;
  std::vector<std::string> plugstack;
  std::string step;
  std::string env_lines;
  for (std::string_view line : slurmddp::fuzz::split(slurmddp::fuzz::text(data, size), '\n')) {
    if (line.substr(0, 2) == "--") {
      if (record(opts, line)) option_lines.push_back(line);
    } else if (line.substr(0, 10) == "plugstack:") {
      plugstack.emplace_back(line.substr(10));
    } else if (line.substr(0, 5) == "step:") {
      step = std::string(line.substr(5));
    } else {
      env_lines.append(line).push_back('\n');
    }
  }
  // The callbacks run twice in slurmstepd: the second round changes nothing.
  launch::UserOptions twice = opts;
  for (std::string_view line : option_lines) record(twice, line);
  FUZZ_CHECK(same(opts, twice), "recording the options again changed them");
  FUZZ_CHECK(!plugin::record_option(twice, 0, "x"), "id 0 is not an option");

  const slurmddp::fuzz::EnvMap env(env_lines);
  launch::EnvLookup lookup = [&env](const char* name) { return env.get(name); };
  launch::PlugstackConfig conf;
  try {
    conf = launch::parse_plugstack_args(plugstack);
  } catch (const launch::LaunchError&) {
    conf = launch::PlugstackConfig{};
  }
  launch::Settings s;
  try {
    s = launch::resolve_settings(opts, lookup, conf, step);
  } catch (const launch::LaunchError&) {
    return 0;
  }
  if (s.port) {
    FUZZ_CHECK(s.port->value >= 1, s.port->source);
    FUZZ_CHECK(s.port->source == "--ddp-port" || s.port->source == launch::kEnvPort ||
                   s.port->source == "MASTER_PORT",
               s.port->source);
    FUZZ_CHECK(!opts.port || s.port->source == "--ddp-port", s.port->source);
  } else {
    FUZZ_CHECK(!opts.port && !env.get(launch::kEnvPort), "an explicit port was dropped");
  }
  if (s.addr) {
    launch::check_host_syntax("addr", s.addr->value);  // accepted once, accepted again
    FUZZ_CHECK(!opts.addr || s.addr->value == *opts.addr, s.addr->value);
  } else {
    FUZZ_CHECK(!opts.addr && !env.get(launch::kEnvAddr), "an explicit address was dropped");
  }
  FUZZ_CHECK(s.ifname.size() < 16, s.ifname);
  FUZZ_CHECK(!opts.ifname || s.ifname == *opts.ifname, s.ifname);
  FUZZ_CHECK(!opts.enable || s.enabled == *opts.enable, "--ddp/--no-ddp lost to a lower source");
  FUZZ_CHECK(!opts.bind_gpu || s.bind_gpu, "--ddp-bind-gpu lost to a lower source");
  FUZZ_CHECK(!opts.verbose || s.verbose, "--ddp-verbose lost to a lower source");
  FUZZ_CHECK(s.port_range == conf.port_range, "the port range comes from plugstack.conf only");
  return 0;
}
