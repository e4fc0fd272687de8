// Helpers for system tests on the real test cluster (tests/cluster/slurm-cluster):
// a GoogleTest environment that brings the cluster up (and down only if it
// started it), a command runner with a hard timeout, and parsers for probe lines.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace slurmddp::systest {

struct Result {
  int rc = -1;  // exit status, 128+signal, or 124 on timeout
  std::string out;
  std::string err;
  bool timed_out = false;
};

// Runs `command` with /bin/bash -c in `cwd` (default: the cluster's shared job
// directory), killing its whole process group after `timeout`.
Result run(const std::string& command, std::chrono::seconds timeout = std::chrono::seconds(60),
           const std::string& cwd = "");

// Paths and settings passed in by meson (environment variables of the test).
std::string plugin_path();   // SLURMDDP_PLUGIN
std::string harness_path();  // SLURMDDP_CLUSTER_SCRIPT
std::string probe_path();    // SLURMDDP_PROBE
std::string source_dir();    // SLURMDDP_SOURCE_DIR
std::string env_or_empty(const char* name);
std::string cluster_dir();                       // SLURMDDP_CLUSTER_DIR, default <source>/.cluster
std::string jobs_dir();                          // a directory every node sees, for job output
std::string fresh_dir(const std::string& name);  // a new empty dir under jobs_dir()
// A node's address in this cluster ("n1": its first network's, "n1-ib": its
// second's), which depends on SLURMDDP_CLUSTER_INSTANCE; and its /24 network.
std::string node_address(const std::string& name);
// The prefix of this instance's bridges and network namespaces ("sddp",
// "sddp<k>"): tests/cluster/slurm-cluster's rule.
std::string network_prefix();
std::string network_of(const std::string& name);

// Whether a system test that cannot run must fail instead of skipping: with
// CI=true in the environment, or SLURMDDP_SYSTEM_TESTS=required (meson
// -Dsystem_tests=required).
bool system_tests_required();

// Why system tests cannot run on this machine (not root, Slurm missing), or ""
// when they can.
std::string why_system_tests_cannot_run();

// The exit status of a system test program that cannot run for `why`: 77
// (meson's SKIP) with the reason in capitals, or 1 with the reason where
// system tests are required.
int cannot_run(const char* program, const std::string& why);

// The main() of every system test program. When the tests cannot run it prints
// the reason in capitals and exits 77 (meson counts a SKIP), or, where they are
// required, fails with the reason. Otherwise it runs the tests, with the test
// cluster brought up (and down again, if it started it) when `with_cluster`.
int system_test_main(int argc, char** argv, bool with_cluster = true);

// Brings the cluster up for the test program (see system_test_main).
class ClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override;
  void TearDown() override;
  static bool available();
  static const std::string& why_unavailable();
};

#define REQUIRE_CLUSTER()                                                         \
  do {                                                                            \
    if (!::slurmddp::systest::ClusterEnvironment::available())                    \
      GTEST_SKIP() << ::slurmddp::systest::ClusterEnvironment::why_unavailable(); \
  } while (0)

// Sets the plugstack line's arguments (and restores the default on destruction).
class PlugstackArgs {
 public:
  explicit PlugstackArgs(const std::string& args);
  ~PlugstackArgs();
};

using Fields = std::map<std::string, std::string>;
// Parses "k=v k=v" lines that start with `prefix` (e.g. "host=").
std::vector<Fields> parse_lines(const std::string& text, const std::string& prefix = "host=");

// The first capture group of every match of `pattern` in `text`, as a set
// (e.g. the parameter checksums every rank printed).
std::set<std::string> captures(const std::string& text, const std::string& pattern);

// How many times `needle` occurs in `text`.
inline size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every node's state letter from sinfo, e.g. {"n1": "idle", "n2": "idle"}.
std::map<std::string, std::string> node_states();

// The Python of the PyTorch tests' tasks (Note [The Python under test] in
// cluster.cpp): SLURMDDP_TEST_PYTHON (the PyPI lane's venv, slurm-ddp installed
// into it with pip), else Debian's /usr/bin/python3 with the build's package.
std::string python();
// A command prefix that gives python() the package: "PYTHONPATH='<build's
// package>' " for Debian's python3, "" for SLURMDDP_TEST_PYTHON (its own).
std::string with_package();
// The package for the tasks of an sbatch job: "PYTHONPATH=...," or "".
std::string export_package();
// A command prefix that puts python()'s directory first on PATH, as an
// activated venv does (torchrun, and python3 in job scripts); "" for Debian's.
std::string with_python_on_path();
// Whether the Python package can be tested: the build made it, or
// SLURMDDP_TEST_PYTHON has it.
bool python_package_available();

// Whether python()'s torch asks for its libuv TCPStore backend by
// default but was built without it (Debian 13's torch 2.6): its env:// then
// needs USE_LIBUV=0 and its torchrun cannot start at all. The cluster environment
// exports USE_LIBUV=0 to every test's jobs where so, as docs/python.md tells users
// of such a torch to do. Asked once per test program.
bool torch_lacks_libuv();

}  // namespace slurmddp::systest
