// Privilege and secret hygiene of the plugin (issue "Hardening", part 5):
//  - it implements no callback that runs with root privileges on user input:
//    no slurm_spank_task_init_privileged, job_prolog/epilog, slurmd hooks; its
//    option callbacks only record strings (plugin/options.cpp);
//  - the per-step token never appears in any log the cluster produced, at any
//    log level of the runtime, nor on srun's output with --ddp-verbose.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "cluster.h"

namespace slurmddp::systest {
namespace {

using ::testing::HasSubstr;

TEST(PluginHygiene, ExportsOnlyUnprivilegedHooks) {
  Result r = run("nm -D --defined-only '" + plugin_path() + "' | awk '{print $3}'",
                 std::chrono::seconds(30), "/");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::set<std::string> symbols;
  std::istringstream in(r.out);
  std::string s;
  while (in >> s) symbols.insert(s);
  EXPECT_EQ(symbols, (std::set<std::string>{"plugin_name", "plugin_type", "plugin_version",
                                            "spank_plugin_version", "slurm_spank_init",
                                            "slurm_spank_init_post_opt", "slurm_spank_user_init",
                                            "slurm_spank_task_init"}));
  Result undefined = run("nm -D --undefined-only '" + plugin_path() + "' | awk '{print $2}'",
                         std::chrono::seconds(30), "/");
  // No process spawning or shell from inside srun/slurmstepd.
  for (const char* bad : {"system", "popen", "execve", "execvp", "fork"}) {
    EXPECT_THAT(undefined.out,
                ::testing::Not(::testing::ContainsRegex(std::string("^") + bad + "(@|$)")))
        << bad;
  }
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every regular file under `dir`, recursively.
void files_under(const std::string& dir, std::vector<std::string>* out) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    if (e->d_type == DT_DIR) {
      files_under(path, out);
    } else if (e->d_type == DT_REG) {
      out->push_back(path);
    }
  }
  closedir(d);
}

TEST(PluginHygiene, TokenNeverAppearsInAnyLog) {
  REQUIRE_CLUSTER();
  std::string dir = fresh_dir("token");
  // One task writes the step's token to a private file; the step also runs the
  // runtime at the most verbose log level with a failing rank, so that every
  // error path of the rendezvous and the communicator logs something.
  std::string probe = env_or_empty("SLURMDDP_RUNTIME_PROBE");
  Result r =
      run("SLURMDDP_LOG_LEVEL=trace SLURMDDP_TIMEOUT=3s srun -K0 --ddp-verbose -N 2 -n 4 "
          "bash -c 'umask 077; [ $RANK = 0 ] && printf %s \"$SLURMDDP_TOKEN\" > " +
              dir + "/token; exec " + probe +
              " --steps 50 --fault kill --fault-rank 3 --fault-step 10'",
          std::chrono::seconds(120));
  EXPECT_NE(r.rc, 0);  // rank 3 died on purpose
  std::string token = slurp(dir + "/token");
  ASSERT_EQ(token.size(), 32u) << "the step had no token: " << r.err;
  EXPECT_THAT(r.err, HasSubstr("slurm-ddp: step "));  // --ddp-verbose printed
  EXPECT_THAT(r.err, HasSubstr("token=set"));
  EXPECT_THAT(r.err, HasSubstr("slurm-ddp[debug"));  // the runtime logged at debug level
  EXPECT_THAT(r.out + r.err, ::testing::Not(HasSubstr(token)));
  std::string cluster = env_or_empty("SLURMDDP_CLUSTER_DIR");
  if (cluster.empty()) cluster = source_dir() + "/.cluster";
  std::vector<std::string> logs;
  files_under(cluster + "/log", &logs);
  files_under(jobs_dir(), &logs);
  int scanned = 0;
  for (const auto& path : logs) {
    if (path == dir + "/token") continue;
    std::string text = slurp(path);
    ++scanned;
    EXPECT_EQ(text.find(token), std::string::npos) << "token found in " << path;
  }
  EXPECT_GT(scanned, 3);
}

}  // namespace
}  // namespace slurmddp::systest

int main(int argc, char** argv) {
  return slurmddp::systest::system_test_main(argc, argv);
}
