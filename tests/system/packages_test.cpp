// The admin's packages, as admins use them (docs/admin-guide.md, "Packages"):
// the .debs that scripts/packages built from this tree (SLURMDDP_PACKAGES_DIR)
// are installed on the test cluster's image with apt, the plugstack line is
// enabled as README.Debian says, and then
//  - the plugin is where this Slurm loads plugins, the line is installed but not
//    enabled by the package, and the plugin is tied to this Slurm's libslurm;
//  - a step gets the contract through the installed plugin and line, and a C++
//    program built with pkg-config against the installed library runs in it;
//  - the distribution's python3 trains the PyTorch example with the installed
//    package (slurmddp://, no PYTHONPATH), and the README's main job runs;
//  - removing the packages removes the enabled line with the plugin: Slurm
//    keeps working, and tasks get no variables.
// The cases run in order: the last removes what the first installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

const char* const kPackages[] = {"slurm-ddp-plugin", "libslurmddp0", "libslurmddp-dev",
                                 "python3-slurmddp"};
const char* const kShared = "/usr/share/slurm-ddp/plugstack.conf.d/slurm-ddp.conf";
const char* const kEnabled = "/etc/slurm/plugstack.conf.d/slurm-ddp.conf";

std::string packages_dir() {
  return env_or_empty("SLURMDDP_PACKAGES_DIR");
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Where the installed plugin is (dpkg -L), or "".
std::string installed_plugin() {
  Result r = run("dpkg -L slurm-ddp-plugin | grep '/spank_ddp.so$'", std::chrono::seconds(30));
  std::string p = r.out;
  while (!p.empty() && p.back() == '\n') p.pop_back();
  return p;
}

// The cluster's plugstack.conf replaced by the sample an admin installs
// (including /etc/slurm/plugstack.conf.d/*.conf); restored on destruction.
class AdminsPlugstack {
 public:
  AdminsPlugstack() {
    plugstack_ = (fs::path(env_or_empty("SLURM_CONF")).parent_path() / "plugstack.conf").string();
    saved_ = read_file(plugstack_);
    fs::copy_file(source_dir() + "/slurm-conf-samples/plugstack.conf", plugstack_ + ".new",
                  fs::copy_options::overwrite_existing);
    fs::rename(plugstack_ + ".new", plugstack_);
  }
  ~AdminsPlugstack() {
    std::ofstream(plugstack_ + ".new") << saved_;
    fs::rename(plugstack_ + ".new", plugstack_);
  }

 private:
  std::string plugstack_, saved_;
};

class Packages : public ::testing::Test {
 protected:
  void SetUp() override {
    if (packages_dir().empty()) {
      GTEST_SKIP() << "SKIP: no packages to test (SLURMDDP_PACKAGES_DIR: scripts/run-tests sets "
                      "it after scripts/packages deb)";
    }
  }
};

TEST_F(Packages, InstallWithAptPutsThePluginWhereSlurmLoadsPlugins) {
  REQUIRE_CLUSTER();
  ASSERT_FALSE(fs::exists(kEnabled)) << kEnabled << " exists before the install: not a clean node";
  std::string debs;
  for (const char* p : kPackages) debs += " ./" + std::string(p) + "_*.deb";
  Result r =
      run("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends" + debs,
          std::chrono::seconds(300), packages_dir());
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  for (const char* p : kPackages) {
    Result s = run(std::string("dpkg-query -W -f '${Status}' ") + p, std::chrono::seconds(30));
    EXPECT_EQ(s.out, "install ok installed") << p;
  }
  // where this Slurm's own plugins are (the directory of one it ships)
  Result slurm_dir =
      run("dirname \"$(find /usr/lib -name auth_munge.so -path '*slurm*' | head -n 1)\"",
          std::chrono::seconds(30));
  const std::string plugin = installed_plugin();
  ASSERT_FALSE(plugin.empty());
  EXPECT_EQ(fs::path(plugin).parent_path().string() + "\n", slurm_dir.out)
      << "the plugin is not beside Slurm's own plugins";
  // the line names the installed plugin and is not enabled by the package
  EXPECT_THAT(read_file(kShared), HasSubstr("\nrequired " + plugin + "\n"));
  EXPECT_FALSE(fs::exists(kEnabled)) << "the package enabled the plugin itself";
  // tied to the libslurm of the Slurm it was built for
  Result dep = run("dpkg-query -W -f '${Depends}' slurm-ddp-plugin", std::chrono::seconds(30));
  Result lib = run("dpkg -S \"$(readlink -f /usr/lib/*/libslurm.so)\" | cut -d: -f1",
                   std::chrono::seconds(30));
  ASSERT_FALSE(lib.out.empty());
  lib.out.pop_back();
  EXPECT_THAT(dep.out, HasSubstr(lib.out + " (>= ")) << dep.out;
  EXPECT_THAT(dep.out, HasSubstr(lib.out + " (<< ")) << dep.out;
  // the library and the Python package, where the distribution's tools look
  Result pc = run("pkg-config --modversion slurmddp", std::chrono::seconds(30));
  EXPECT_EQ(pc.rc, 0) << pc.err;
  Result py = run("cd / && /usr/bin/python3 -c 'import slurmddp; print(slurmddp.__file__)'",
                  std::chrono::seconds(60));
  EXPECT_EQ(py.out, "/usr/lib/python3/dist-packages/slurmddp/__init__.py\n") << py.err;
}

TEST_F(Packages, TheEnabledLineGivesEveryTaskTheContractAndAPkgConfigProgramRuns) {
  REQUIRE_CLUSTER();
  ASSERT_FALSE(installed_plugin().empty()) << "not installed";
  // What README.Debian tells the admin to do.
  fs::create_directories(fs::path(kEnabled).parent_path());
  fs::create_symlink(kShared, kEnabled);
  AdminsPlugstack plugstack;
  std::string dir = fresh_dir("packages-consumer");
  std::vector<std::string> headers;
  for (const auto& e : fs::directory_iterator("/usr/include/slurmddp")) {
    headers.push_back(e.path().filename());
  }
  std::sort(headers.begin(), headers.end());
  ASSERT_GE(headers.size(), 5u);
  std::ofstream(dir + "/consumer.cpp") << consumer_source(headers);
  Result cc =
      run("c++ -std=c++17 -Wall -Wextra -Werror consumer.cpp -o consumer "
          "$(pkg-config --cflags --libs slurmddp)",
          std::chrono::seconds(300), dir);
  ASSERT_EQ(cc.rc, 0) << cc.out << cc.err;
  // the library it loads is the package's
  Result owner =
      run("dpkg -S \"$(readlink -f \"$(ldd ./consumer | awk '/libslurmddp/ {print $3}')\")\"",
          std::chrono::seconds(30), dir);
  EXPECT_THAT(owner.out, ::testing::StartsWith("libslurmddp0:")) << owner.out << owner.err;
  Result r = run(
      "srun -N 2 -n 4 --ntasks-per-node=2 --ddp-verbose sh -c '" + probe_path() + " && ./consumer'",
      std::chrono::seconds(120), dir);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("slurm-ddp: step ")) << "--ddp-verbose: was the plugin loaded?";
  auto tasks = parse_lines(r.out, "host=");
  ASSERT_EQ(tasks.size(), 4u) << r.out;
  std::set<std::string> ranks;
  for (const auto& t : tasks) {
    ranks.insert(t.at("RANK"));
    EXPECT_EQ(t.at("WORLD_SIZE"), "4");
    EXPECT_EQ(t.at("MASTER_ADDR"), node_address("n1"));
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"}));
  expect_consumer_lines(r, 4, 2);
  if (!HasFailure()) fs::remove_all(dir);
}

TEST_F(Packages, TheDistributionsPythonTrainsWithTheInstalledPackage) {
  REQUIRE_CLUSTER();
  ASSERT_TRUE(fs::is_symlink(kEnabled)) << "the previous case enables the line";
  AdminsPlugstack plugstack;
  Result r = run("env -u PYTHONPATH srun -N 2 -n 4 /usr/bin/python3 '" + source_dir() +
                     "/examples/pytorch/train.py' --epochs 1 --steps 60",
                 std::chrono::seconds(300));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("init_method=slurmddp://, slurmddp.torch.DistributedSampler"));
  EXPECT_EQ(captures(r.out, R"(rank \d: parameter sha256 ([0-9a-f]{16}))").size(), 1u)
      << "ranks disagree:\n"
      << r.out;
}

// The README's main job (scripts/demo's srun line), through the installed
// plugin and the enabled line.
TEST_F(Packages, TheReadmesTrainingRunsThroughTheInstalledPlugin) {
  REQUIRE_CLUSTER();
  ASSERT_TRUE(fs::is_symlink(kEnabled)) << "the earlier case enables the line";
  const std::string train = env_or_empty("SLURMDDP_TRAIN");
  if (train.empty()) GTEST_SKIP() << "SKIP: the example was not built (-Dexamples)";
  AdminsPlugstack plugstack;
  Result r =
      run("srun -n 8 --gres=gpu:4 --ntasks-per-node=4 --ddp-verbose '" + train + "' --epochs=1",
          std::chrono::seconds(300));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("slurm-ddp: step "));
  EXPECT_EQ(captures(r.out, R"(rank ([0-9]+): [0-9]+ steps, parameter checksum)").size(), 8u)
      << r.out;
  EXPECT_EQ(
      captures(r.out, R"(rank [0-9]+: [0-9]+ steps, parameter checksum ([0-9a-f]{16}))").size(), 1u)
      << "ranks ended with different parameters:\n"
      << r.out;
}

TEST_F(Packages, RemovingThePackagesLeavesSlurmWorking) {
  REQUIRE_CLUSTER();
  AdminsPlugstack plugstack;
  std::string names;
  for (const char* p : kPackages) names += std::string(" ") + p;
  Result r =
      run("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q" + names, std::chrono::seconds(300));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("removed " + std::string(kEnabled)));
  EXPECT_FALSE(fs::exists(kEnabled) || fs::is_symlink(kEnabled)) << "the enabled line is left";
  EXPECT_FALSE(fs::exists(kShared));
  // Slurm, with the admin's plugstack.conf still in place, runs steps
  Result step = run("srun -N 2 -n 2 " + probe_path(), std::chrono::seconds(60));
  ASSERT_EQ(step.rc, 0) << step.out << step.err;
  auto tasks = parse_lines(step.out, "host=");
  ASSERT_EQ(tasks.size(), 2u) << step.out;
  for (const auto& t : tasks) EXPECT_EQ(t.at("RANK"), "<unset>");
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
