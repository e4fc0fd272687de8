#include "cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include "subprocess.h"

namespace slurmddp::systest {

namespace fs = std::filesystem;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

bool g_available = false;
bool g_started_here = false;
std::string g_why;

}  // namespace

std::string env_or_empty(const char* name) {
  return env_or(name, "");
}
std::string plugin_path() {
  return env_or("SLURMDDP_PLUGIN", "");
}
std::string harness_path() {
  return env_or("SLURMDDP_CLUSTER_SCRIPT", "");
}
std::string probe_path() {
  return env_or("SLURMDDP_PROBE", "");
}
std::string source_dir() {
  return env_or("SLURMDDP_SOURCE_DIR", "");
}

std::string cluster_dir() {
  return env_or("SLURMDDP_CLUSTER_DIR", source_dir() + "/.cluster");
}

std::string jobs_dir() {
  std::string dir = cluster_dir() + "/jobs";
  fs::create_directories(dir);
  return dir;
}

std::string node_address(const std::string& name) {
  // Every node's hosts file lists every node (tests/cluster/slurm-cluster).
  std::ifstream hosts(cluster_dir() + "/etc/hosts.n1");
  std::string line;
  while (std::getline(hosts, line)) {
    std::istringstream words(line);
    std::string addr, host;
    if (words >> addr >> host && host == name && addr.rfind("127.", 0) != 0) return addr;
  }
  ADD_FAILURE() << "no address of " << name << " in " << cluster_dir() << "/etc/hosts.n1";
  return "<no address of " + name + ">";
}

std::string network_prefix() {
  const std::string k = env_or("SLURMDDP_CLUSTER_INSTANCE", "0");
  return k == "0" ? "sddp" : "sddp" + k;
}

std::string network_of(const std::string& name) {
  const std::string addr = node_address(name);
  return addr.substr(0, addr.rfind('.')) + ".0/24";
}

std::string fresh_dir(const std::string& name) {
  fs::path p = fs::path(jobs_dir()) / (name + "-" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

Result run(const std::string& command, std::chrono::seconds timeout, const std::string& cwd) {
  Result r;
  support::SpawnOptions o;
  o.out = support::Stdio::kPipe;
  o.err = support::Stdio::kPipe;
  o.cwd = cwd.empty() ? jobs_dir() : cwd;
  o.own_group = true;
  std::optional<support::Child> child;
  try {
    child.emplace(std::vector<std::string>{"/bin/bash", "-c", command}, o);
  } catch (const std::exception&) {
    return r;
  }
  const pid_t pid = child->pid();
  if (!child->read_all(support::Clock::now() + timeout, &r.out, &r.err)) {
    // srun cancels its step on SIGTERM; a SIGKILL would leave the job allocated.
    r.timed_out = true;
    kill(-pid, SIGTERM);
    child->wait(std::chrono::seconds(10));
    kill(-pid, SIGKILL);
  }
  const std::optional<int> code = child->wait(support::Clock::time_point::max());
  if (r.timed_out) {
    r.rc = 124;
  } else if (code && *code >= 0) {
    r.rc = *code;
  }
  return r;
}

bool ClusterEnvironment::available() {
  return g_available;
}
const std::string& ClusterEnvironment::why_unavailable() {
  return g_why;
}

bool system_tests_required() {
  return env_or_empty("CI") == "true" || env_or_empty("SLURMDDP_SYSTEM_TESTS") == "required";
}

std::string why_system_tests_cannot_run() {
  if (geteuid() != 0) {
    return "system tests need root (network namespaces, slurmd); run them as root";
  }
  if (run("command -v slurmctld && command -v slurmd && command -v srun && command -v scontrol",
          std::chrono::seconds(30), "/")
          .rc != 0) {
    return "Slurm is not installed (slurmctld, slurmd, srun, scontrol); run scripts/install-deps";
  }
  return "";
}

int cannot_run(const char* program, const std::string& why) {
  if (system_tests_required()) {
    std::fprintf(stderr,
                 "FAILED: system tests are required here (CI=true or "
                 "SLURMDDP_SYSTEM_TESTS=required) but cannot run: %s\n",
                 why.c_str());
    return 1;
  }
  std::fprintf(stderr, "SKIPPING ALL SYSTEM TESTS OF %s: %s\n", program, why.c_str());
  return 77;
}

int system_test_main(int argc, char** argv, bool with_cluster) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string why = why_system_tests_cannot_run();
  if (!why.empty()) return cannot_run(argv[0], why);
  if (with_cluster) ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);
  const int rc = RUN_ALL_TESTS();
  // A program whose every test skipped itself (no Lightning in this lane, ...)
  // is a skip for meson (77), not a pass: the lane's report names it.
  const ::testing::UnitTest& all = *::testing::UnitTest::GetInstance();
  if (rc == 0 && all.successful_test_count() == 0 && all.skipped_test_count() > 0) {
    std::cout << "SKIP: all " << all.skipped_test_count() << " tests of " << argv[0]
              << " skipped themselves (their reasons above)" << std::endl;
    return 77;
  }
  return rc;
}

// Note [The Python under test]
//   The PyTorch tests run in two environments: Debian's python3-torch with the
//   package from the build tree (PYTHONPATH, the Debian lanes), and a venv with
//   the newest torch from PyPI into which the checkout was pip-installed
//   (SLURMDDP_TEST_PYTHON, the PyPI lane: scripts/pypi-venv). There the build's
//   package must not be on PYTHONPATH, or the pip install would go untested.
std::string python() {
  std::string p = env_or_empty("SLURMDDP_TEST_PYTHON");
  return p.empty() ? "/usr/bin/python3" : p;
}

std::string with_package() {
  if (!env_or_empty("SLURMDDP_TEST_PYTHON").empty()) return "";
  return "PYTHONPATH='" + env_or_empty("SLURMDDP_PYTHONPATH") + "' ";
}

std::string export_package() {
  if (!env_or_empty("SLURMDDP_TEST_PYTHON").empty()) return "";
  return "PYTHONPATH=" + env_or_empty("SLURMDDP_PYTHONPATH") + ",";
}

std::string with_python_on_path() {
  const std::string p = env_or_empty("SLURMDDP_TEST_PYTHON");
  if (p.empty()) return "";
  return "PATH='" + p.substr(0, p.rfind('/')) + "':\"$PATH\" ";
}

bool python_package_available() {
  return !env_or_empty("SLURMDDP_TEST_PYTHON").empty() ||
         !env_or_empty("SLURMDDP_PYTHONPATH").empty();
}

bool torch_lacks_libuv() {
  static const bool lacks = [] {
    Result r = run(
        python() +
            " -c 'import datetime, torch.distributed as d\n"
            "try:\n    d.TCPStore(\"127.0.0.1\", 0, 1, True, "
            "timeout=datetime.timedelta(seconds=30))\n"
            "except RuntimeError as e:\n    print(\"lacks-libuv\" if \"libuv\" in str(e) else e)'",
        std::chrono::seconds(60), "/");
    return r.out.find("lacks-libuv") != std::string::npos;
  }();
  return lacks;
}

void ClusterEnvironment::SetUp() {
  std::string script = harness_path();
  g_started_here = run("'" + script + "' status").rc != 0;
  Result up = run("'" + script + "' up --plugin '" + plugin_path() + "'", std::chrono::seconds(90));
  if (up.rc != 0) {
    g_why = "the test cluster did not start: " + up.err;
    FAIL() << g_why;
  }
  setenv("SLURM_CONF", (cluster_dir() + "/etc/slurm.conf").c_str(), 1);
  // What a user of a torch without libuv must do for env:// (docs/python.md).
  if (torch_lacks_libuv()) setenv("USE_LIBUV", "0", 1);
  // Jobs left over from an interrupted run would hold the nodes.
  run("scancel --full --user=root; for i in $(seq 200); do [ -z \"$(squeue -h)\" ] && exit 0; "
      "sleep 0.1; done; exit 1");
  g_available = true;
}

void ClusterEnvironment::TearDown() {
  if (!g_available) return;
  run("'" + harness_path() + "' plugstack --plugin '" + plugin_path() + "'");
  if (g_started_here && std::getenv("SLURMDDP_KEEP_CLUSTER") == nullptr) {
    run("'" + harness_path() + "' down", std::chrono::seconds(60));
  }
}

PlugstackArgs::PlugstackArgs(const std::string& args) {
  Result r = run("'" + harness_path() + "' plugstack --plugin '" + plugin_path() + "' --args '" +
                 args + "'");
  EXPECT_EQ(r.rc, 0) << r.err;
}

PlugstackArgs::~PlugstackArgs() {
  run("'" + harness_path() + "' plugstack --plugin '" + plugin_path() + "'");
}

std::vector<Fields> parse_lines(const std::string& text, const std::string& prefix) {
  std::vector<Fields> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    Fields f;
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      auto eq = w.find('=');
      if (eq != std::string::npos) f[w.substr(0, eq)] = w.substr(eq + 1);
    }
    out.push_back(f);
  }
  return out;
}

std::map<std::string, std::string> node_states() {
  std::map<std::string, std::string> states;
  Result r = run("sinfo -h -N -o '%N %T'");
  std::istringstream in(r.out);
  std::string node, state;
  while (in >> node >> state) states[node] = state;
  return states;
}

std::set<std::string> captures(const std::string& text, const std::string& pattern) {
  std::set<std::string> found;
  std::regex re(pattern);
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    found.insert((*it)[1]);
  }
  return found;
}

}  // namespace slurmddp::systest
