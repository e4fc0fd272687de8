// The admin's and the packager's path, tested: `meson install --destdir` of this
// build into a staging tree, then
//  - the staged tree holds the plugin, the plugstack snippet, every public
//    header, the library and slurmddp.pc where the configuration says;
//  - the test cluster loads the plugin through the staged snippet, included
//    from a plugstack.conf made from slurm-conf-samples/plugstack.conf, and a
//    step `srun -n 8 --gres=gpu:4 --ntasks-per-node=4` gets the contract;
//  - a C++ program including every public header, compiled and linked with
//    `pkg-config --cflags --libs slurmddp` against the staged tree alone, runs
//    in that step: it reads its identity and creates a sampler.
// The staging tree stands for the target root: paths inside the installed files
// (the snippet's plugin path, the .pc prefix) name the target, so the test
// reads them relative to the stage (pkg-config's PKG_CONFIG_SYSROOT_DIR, and
// the stage prefixed to the snippet's plugin path).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cluster.h"
#include "consumer.h"

namespace slurmddp::systest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// One staging tree for the whole program (installing takes a few seconds).
class Staged : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    stage_ = fresh_dir("stage");
    Result r = run("meson install -C '" + env_or_empty("SLURMDDP_BUILD_DIR") +
                       "' --no-rebuild --quiet --destdir '" + stage_ + "'",
                   std::chrono::seconds(300), "/");
    install_ = r;
  }
  // The staging tree is kept for inspection only when something failed.
  static void TearDownTestSuite() {
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0) fs::remove_all(stage_);
  }
  static std::string staged(const std::string& target_path) { return stage_ + target_path; }
  static std::string stage_;
  static Result install_;
};
std::string Staged::stage_;
Result Staged::install_;

TEST_F(Staged, InstallPutsEachFileWhereTheConfigurationSays) {
  ASSERT_EQ(install_.rc, 0) << install_.out << install_.err;
  const std::string libdir = env_or_empty("SLURMDDP_INSTALL_LIBDIR");
  const std::string plugin = env_or_empty("SLURMDDP_INSTALL_PLUGIN");
  const std::string snippet = env_or_empty("SLURMDDP_INSTALL_PLUGSTACK_DIR") + "/slurm-ddp.conf";
  const std::string incdir = env_or_empty("SLURMDDP_INSTALL_INCLUDEDIR") + "/slurmddp";
  Result list =
      run("cd '" + stage_ + "' && find . -type f -o -type l | sort", std::chrono::seconds(30));
  std::printf("staged files:\n%s", list.out.c_str());
  for (const std::string& p :
       {plugin, snippet, libdir + "/libslurmddp.so", libdir + "/pkgconfig/slurmddp.pc"}) {
    EXPECT_TRUE(fs::exists(staged(p))) << p << " is not in the staged tree:\n" << list.out;
  }
  // every public header of the source tree is installed, and nothing else
  std::set<std::string> source_headers, installed_headers;
  for (const auto& e : fs::directory_iterator(source_dir() + "/include/slurmddp")) {
    if (e.path().extension() == ".h") source_headers.insert(e.path().filename());
  }
  if (fs::is_directory(staged(incdir))) {
    for (const auto& e : fs::directory_iterator(staged(incdir))) {
      installed_headers.insert(e.path().filename());
    }
  }
  EXPECT_FALSE(source_headers.empty());
  EXPECT_EQ(installed_headers, source_headers);
  // the snippet names the installed plugin, as the admin guide says
  EXPECT_THAT(read_file(staged(snippet)), HasSubstr("\nrequired " + plugin + "\n"));
  // the plugin exports only Slurm's entry points
  Result syms = run("nm -D --defined-only '" + staged(plugin) +
                        "' | awk '{print $3}' | "
                        "grep -v -E '^(plugin_|slurm_spank_|spank_plugin_version$)' || true",
                    std::chrono::seconds(30));
  EXPECT_EQ(syms.out, "") << "unexpected exported symbols";
}

// The Python package lands in the interpreter's package directory under the
// prefix, imports from there alone (its extension carries the runtime: no
// libslurmddp needed at run time) and registers slurmddp:// with torch.
TEST_F(Staged, ThePythonPackageImportsFromTheStagedTree) {
  ASSERT_EQ(install_.rc, 0) << install_.out << install_.err;
  std::string pydir = env_or_empty("SLURMDDP_INSTALL_PYTHONDIR");
  while (pydir.size() > 1 && pydir.back() == '/') pydir.pop_back();
  if (pydir.empty()) GTEST_SKIP() << "SKIP: this build has no Python package (-Dpython)";
  const std::string package = staged(pydir) + "/slurmddp";
  for (const char* f : {"__init__.py", "lightning.py", "resume.py", "sharded.py", "torch.py",
                        "_checkpoint.py", "_stop.py", "_sampler.py", "_core.pyi", "py.typed"}) {
    EXPECT_TRUE(fs::exists(package + "/" + f)) << package << "/" << f;
  }
  const char* const script =
      R"(import sys, slurmddp, slurmddp.torch
print(slurmddp.__file__)
print(len(slurmddp.Sampler(10, 3, 1)))
print("slurmddp" in sys.modules["torch.distributed.rendezvous"]._rendezvous_handlers)
print(slurmddp.EXIT_REQUEUE, slurmddp.Checkpointer.__module__))";
  Result r = run("PYTHONPATH='" + staged(pydir) + "' '" + env_or_empty("SLURMDDP_PYTHON") +
                     "' -c '" + script + "'",
                 std::chrono::seconds(120), "/");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, package + "/__init__.py\n4\nTrue\n75 slurmddp.resume\n");
  Result deps = run("ldd " + package + "/_core*.so", std::chrono::seconds(30));
  EXPECT_THAT(deps.out, Not(HasSubstr("libslurmddp"))) << deps.out;
}

// A plugstack.conf made from the sample, including the staged snippet; the
// snippet's plugin path prefixed with the stage. Restores the cluster's own on
// destruction.
class StagedPlugstack {
 public:
  explicit StagedPlugstack(const std::string& stage) {
    const std::string dir = env_or_empty("SLURMDDP_INSTALL_PLUGSTACK_DIR");
    const std::string plugin = env_or_empty("SLURMDDP_INSTALL_PLUGIN");
    // the staged snippet, pointed at the staged plugin (the path it names must exist there)
    std::string snippet = read_file(stage + dir + "/slurm-ddp.conf");
    const std::string line = "required " + plugin;
    auto at = snippet.find("\n" + line);
    EXPECT_NE(at, std::string::npos) << snippet;
    if (at != std::string::npos) snippet.replace(at + 1, line.size(), "required " + stage + plugin);
    std::ofstream(stage + dir + "/slurm-ddp.conf") << snippet;
    // plugstack.conf: the sample's include line, rooted at the stage
    std::string sample = read_file(source_dir() + "/slurm-conf-samples/plugstack.conf");
    std::string conf;
    std::istringstream in(sample);
    for (std::string l; std::getline(in, l);) {
      if (l.rfind("include ", 0) == 0) {
        EXPECT_EQ(l, "include " + dir + "/*.conf") << "the sample includes another directory";
        l = "include " + stage + dir + "/*.conf";
      }
      conf += l + "\n";
    }
    cluster_conf_ = env_or_empty("SLURM_CONF");
    plugstack_ = fs::path(cluster_conf_).parent_path() / "plugstack.conf";
    saved_ = read_file(plugstack_);
    std::ofstream(plugstack_ + ".new") << conf;
    fs::rename(plugstack_ + ".new", plugstack_);
  }
  ~StagedPlugstack() {
    std::ofstream(plugstack_ + ".new") << saved_;
    fs::rename(plugstack_ + ".new", plugstack_);
  }

 private:
  std::string cluster_conf_, plugstack_, saved_;
};

TEST_F(Staged, PluginThroughStagedSnippetAndPkgConfigConsumerRunInAStep) {
  REQUIRE_CLUSTER();
  ASSERT_EQ(install_.rc, 0) << install_.out << install_.err;
  const std::string libdir = env_or_empty("SLURMDDP_INSTALL_LIBDIR");
  const std::string incdir = env_or_empty("SLURMDDP_INSTALL_INCLUDEDIR") + "/slurmddp";

  // the consumer: every installed public header, then main()
  std::string dir = fresh_dir("consumer");
  std::vector<std::string> headers;
  for (const auto& e : fs::directory_iterator(staged(incdir)))
    headers.push_back(e.path().filename());
  std::sort(headers.begin(), headers.end());
  ASSERT_GE(headers.size(), 5u);
  std::ofstream(dir + "/consumer.cpp") << consumer_source(headers);
  const std::string pc = "PKG_CONFIG_SYSROOT_DIR='" + stage_ + "' PKG_CONFIG_LIBDIR='" +
                         staged(libdir) + "/pkgconfig' pkg-config";
  Result flags = run(pc + " --cflags --libs slurmddp", std::chrono::seconds(30), dir);
  ASSERT_EQ(flags.rc, 0) << flags.err;
  std::printf("pkg-config --cflags --libs slurmddp: %s", flags.out.c_str());
  EXPECT_THAT(flags.out, HasSubstr(stage_));
  Result cc = run("c++ -std=c++17 -Wall -Wextra -Werror consumer.cpp -o consumer $(" + pc +
                      " --cflags --libs slurmddp)",
                  std::chrono::seconds(300), dir);
  ASSERT_EQ(cc.rc, 0) << cc.out << cc.err;
  // it resolves the library from the stage
  Result ldd = run("LD_LIBRARY_PATH='" + staged(libdir) + "' ldd ./consumer | grep slurmddp",
                   std::chrono::seconds(30), dir);
  EXPECT_THAT(ldd.out, HasSubstr(staged(libdir) + "/libslurmddp.so")) << ldd.out << ldd.err;

  // the cluster loads only the staged plugin, through the staged snippet
  StagedPlugstack plugstack(stage_);
  Result r = run("srun -n 8 --gres=gpu:4 --ntasks-per-node=4 --ddp-verbose env LD_LIBRARY_PATH='" +
                     staged(libdir) + "' sh -c '" + probe_path() + " && ./consumer'",
                 std::chrono::seconds(120), dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto tasks = parse_lines(r.out, "host=");
  ASSERT_EQ(tasks.size(), 8u) << r.out << r.err;
  std::set<std::string> ranks, addrs, ports;
  for (const auto& t : tasks) {
    ranks.insert(t.at("RANK"));
    EXPECT_EQ(t.at("WORLD_SIZE"), "8");
    EXPECT_EQ(t.at("LOCAL_WORLD_SIZE"), "4");
    EXPECT_EQ(t.at("NODE_RANK"), t.at("host") == "n1" ? "0" : "1");
    addrs.insert(t.at("MASTER_ADDR"));
    ports.insert(t.at("MASTER_PORT"));
  }
  EXPECT_EQ(ranks.size(), 8u);
  EXPECT_EQ(addrs, (std::set<std::string>{node_address("n1")}));
  EXPECT_EQ(ports.size(), 1u);
  // the consumer: identity from the plugin's variables, and the sampler's shard
  expect_consumer_lines(r, 8, 4);
  EXPECT_THAT(r.err, HasSubstr("slurm-ddp"))
      << "--ddp-verbose printed nothing: was the plugin loaded?";
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
