#include "slurmddp/identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "env/identity.h"
#include "slurmddp/error.h"

namespace slurmddp {
namespace {

using ::testing::HasSubstr;

struct Env {
  std::map<std::string, std::string> vars;
  EnvReader reader() const {
    return [this](const char* n) -> std::optional<std::string> {
      auto it = vars.find(n);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
  ProcessIdentity identity() const { return identity_from_environment(reader()); }
  std::string error() const {
    try {
      identity();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(no error)";
  }
};

Env plugin_env() {
  Env e;
  e.vars = {{"RANK", "5"},
            {"LOCAL_RANK", "1"},
            {"WORLD_SIZE", "8"},
            {"LOCAL_WORLD_SIZE", "4"},
            {"NODE_RANK", "1"},
            {"GROUP_RANK", "1"},
            {"MASTER_ADDR", "10.0.0.1"},
            {"MASTER_PORT", "20001"},
            {"SLURMDDP_STEP", "12.0"},
            {"SLURMDDP_NUM_NODES", "2"},
            {"SLURMDDP_TOKEN", "00ff"},
            {"SLURMDDP_LOCAL_DEVICE", "1"},
            {"SLURM_JOB_ID", "12"},
            {"SLURM_STEP_ID", "0"},
            {"GLOO_SOCKET_IFNAME", "eth0"}};
  return e;
}

// Note [A master changed after the plugin]
TEST(Identity, AMasterChangedAfterThePluginGivesWayToThePlugins) {
  Env e = plugin_env();
  e.vars["SLURMDDP_MASTER"] = "10.0.0.1:20001";
  EXPECT_EQ(e.identity().master_port, 20001);  // unchanged: nothing to say
  e.vars["MASTER_ADDR"] = "n1";                // enroot's PyTorch hook
  e.vars["MASTER_PORT"] = "61012";
  auto id = e.identity();
  EXPECT_EQ(id.master_addr, "10.0.0.1");
  EXPECT_EQ(id.master_port, 20001);
  e.vars["SLURMDDP_MASTER"] = "[fd00::1]";
  EXPECT_THAT(e.error(), HasSubstr("SLURMDDP_MASTER"));
  e.vars["SLURMDDP_MASTER"] = "fd00::1:20001";  // the plugin writes IPv6 unbracketed
  EXPECT_EQ(e.identity().master_addr, "fd00::1");
  e.vars.erase("SLURMDDP_MASTER");  // a user's own choice
  EXPECT_EQ(e.identity().master_port, 61012);
}

TEST(Identity, FromThePlugin) {
  auto id = plugin_env().identity();
  EXPECT_EQ(id.source, IdentitySource::kPlugin);
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_world_size, 4);
  EXPECT_EQ(id.node_rank, 1);
  EXPECT_EQ(id.num_nodes, 2);
  EXPECT_EQ(id.master_addr, "10.0.0.1");
  EXPECT_EQ(id.master_port, 20001);
  EXPECT_EQ(id.token, "00ff");
  EXPECT_EQ(id.local_device, 1);
  EXPECT_EQ(id.ifname, "eth0");
  EXPECT_EQ(id.step, "12.0");
  EXPECT_THAT(id.describe(), HasSubstr("rank 5/8 (local 1/4, node 1/2) master 10.0.0.1:20001"));
  EXPECT_THAT(id.describe(), ::testing::Not(HasSubstr("00ff")));
}

TEST(Identity, AnnouncedTokenThatDidNotArriveIsRefused) {
  Env e = plugin_env();
  e.vars["SLURMDDP_AUTH"] = "hmac";
  EXPECT_EQ(e.identity().token, "00ff");
  e.vars.erase("SLURMDDP_TOKEN");
  std::string err = e.error();
  EXPECT_THAT(err, HasSubstr("SLURMDDP_TOKEN is not set"));
  EXPECT_THAT(err, HasSubstr("announced an authenticated rendezvous for step 12.0"));
  EXPECT_THAT(err, HasSubstr("SLURMDDP_AUTH=hmac"));
  EXPECT_THAT(err, HasSubstr("SLURMDDP_ALLOW_OPEN=1"));
  e.vars["SLURMDDP_TOKEN"] = "";  // emptied counts as lost
  EXPECT_THAT(e.error(), HasSubstr("SLURMDDP_TOKEN is not set"));
  e.vars["SLURMDDP_ALLOW_OPEN"] = "1";
  EXPECT_EQ(e.identity().token, "");
  e.vars["SLURMDDP_ALLOW_OPEN"] = "perhaps";
  EXPECT_THAT(e.error(), HasSubstr("SLURMDDP_ALLOW_OPEN='perhaps'"));
  // Without the announcement (srun did not load the plugin), open as before.
  e.vars.erase("SLURMDDP_AUTH");
  e.vars.erase("SLURMDDP_ALLOW_OPEN");
  EXPECT_EQ(e.identity().token, "");
}

TEST(Identity, TorchrunsAgentStoreIsRefusedClearly) {
  Env e = plugin_env();
  e.vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // c10d: the workers host their own store
  EXPECT_EQ(e.identity().rank, 5);
  e.vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  std::string err = e.error();
  EXPECT_THAT(err, HasSubstr("TORCHELASTIC_USE_AGENT_STORE=True"));
  EXPECT_THAT(err, HasSubstr("MASTER_ADDR:MASTER_PORT=10.0.0.1:20001 is torchrun's own store"));
  EXPECT_THAT(err, HasSubstr("--ddp-launcher=direct"));
}

TEST(Identity, TorchrunStyle) {
  Env e;
  e.vars = {{"RANK", "2"},
            {"WORLD_SIZE", "3"},
            {"MASTER_ADDR", "n1"},
            {"MASTER_PORT", "29500"},
            {"CUDA_VISIBLE_DEVICES", "0,1"},
            {"LOCAL_RANK", "2"},
            {"LOCAL_WORLD_SIZE", "3"}};
  auto id = e.identity();
  EXPECT_EQ(id.source, IdentitySource::kTorchrun);
  EXPECT_EQ(id.rank, 2);
  EXPECT_EQ(id.local_device, 0);  // 2 mod 2 visible
  EXPECT_TRUE(id.token.empty());
}

TEST(Identity, MissingAndGarbledValuesNameTheVariable) {
  Env e = plugin_env();
  e.vars["RANK"] = "five";
  EXPECT_THAT(e.error(), HasSubstr("invalid RANK='five': expected an integer"));
  e = plugin_env();
  e.vars.erase("MASTER_PORT");
  EXPECT_THAT(e.error(), HasSubstr("MASTER_PORT is not set"));
  e = plugin_env();
  e.vars["MASTER_PORT"] = "70000";
  EXPECT_THAT(e.error(), HasSubstr("invalid MASTER_PORT='70000'"));
  e = plugin_env();
  e.vars["WORLD_SIZE"] = "0";
  EXPECT_THAT(e.error(), HasSubstr("invalid WORLD_SIZE='0'"));
}

TEST(Identity, Contradictions) {
  Env e = plugin_env();
  e.vars["RANK"] = "8";
  EXPECT_THAT(e.error(), HasSubstr("RANK=8 >= WORLD_SIZE=8"));
  e = plugin_env();
  e.vars["LOCAL_RANK"] = "4";
  EXPECT_THAT(e.error(), HasSubstr("LOCAL_RANK=4 >= LOCAL_WORLD_SIZE=4"));
  e = plugin_env();
  e.vars["LOCAL_WORLD_SIZE"] = "9";
  e.vars["LOCAL_RANK"] = "1";
  EXPECT_THAT(e.error(), HasSubstr("LOCAL_WORLD_SIZE=9 > WORLD_SIZE=8"));
}

Env bare_slurm() {
  Env e;
  e.vars = {{"SLURM_JOB_ID", "12"},
            {"SLURM_STEP_ID", "3"},
            {"SLURM_PROCID", "1"},
            {"SLURM_LOCALID", "1"},
            {"SLURM_NODEID", "0"},
            {"SLURM_STEP_TASKS_PER_NODE", "2"},
            {"SLURM_STEP_NUM_TASKS", "2"},
            {"SLURM_STEP_NODELIST", "localhost"},
            {"SLURM_STEP_RESV_PORTS", "20010-20012"}};
  return e;
}

TEST(Identity, BareSlurmUsesThePluginRules) {
  auto id = bare_slurm().identity();
  EXPECT_EQ(id.source, IdentitySource::kSlurm);
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.world_size, 2);
  EXPECT_EQ(id.local_world_size, 2);
  EXPECT_EQ(id.master_port, 20010);                // first reserved port, as the plugin decides
  EXPECT_EQ(id.master_addr.rfind("127.", 0), 0u);  // single node: loopback allowed
  EXPECT_EQ(id.step, "12.3");
}

TEST(Identity, BareSlurmUnevenLayout) {
  Env e = bare_slurm();
  e.vars["SLURM_STEP_TASKS_PER_NODE"] = "4(x2),3";
  e.vars["SLURM_STEP_NUM_TASKS"] = "11";
  e.vars["SLURM_NODEID"] = "2";
  e.vars["SLURM_PROCID"] = "10";
  e.vars["SLURM_LOCALID"] = "2";
  e.vars["SLURM_STEP_NODELIST"] = "127.0.0.1,n2,n3";
  // three nodes and the first resolves only to loopback: refused, clearly
  EXPECT_THAT(e.error(), HasSubstr("resolves only to loopback"));
  e.vars["SLURM_STEP_NUM_TASKS"] = "12";
  EXPECT_THAT(
      e.error(),
      HasSubstr("the task count 12 differs from the sum of SLURM_STEP_TASKS_PER_NODE (11)"));
}

// A task of component 1 (on n1, 1 task) of a heterogeneous step whose
// component 0 runs 2 tasks on n2, without the plugin: Slurm lists the nodes
// sorted but numbers them in component order.
TEST(Identity, BareSlurmHeterogeneousStep) {
  Env e;
  e.vars = {{"SLURM_JOB_ID", "100"},
            {"SLURM_STEP_ID", "0"},
            {"SLURM_PROCID", "2"},
            {"SLURM_LOCALID", "0"},
            {"SLURM_NODEID", "1"},
            {"SLURM_GTIDS", "2"},
            {"SLURM_STEP_NODELIST", "n[1-2]"},
            {"SLURM_STEP_TASKS_PER_NODE", "1,2"},  // n1, n2: sorted, not by node id
            {"SLURM_STEP_NUM_TASKS", "3"},
            {"SLURM_STEP_NUM_NODES", "2"},
            {"SLURM_STEP_RESV_PORTS", "20012-20013"},
            {"SLURM_HET_SIZE", "2"},
            {"SLURM_JOB_NODELIST_HET_GROUP_0", "n2"},
            {"SLURM_JOB_NODELIST_HET_GROUP_1", "n1"}};
  launch::NetworkView net;
  net.resolve = [](const std::string& h) -> std::vector<launch::IpAddress> {
    return {*launch::IpAddress::parse(h == "n1" ? "10.77.0.11" : "10.77.0.12")};
  };
  net.interfaces = [] { return std::vector<launch::InterfaceAddress>{}; };
  net.route_source = [](const launch::IpAddress&) { return std::nullopt; };
  auto id = identity_from_environment(e.reader(), net);
  EXPECT_EQ(id.rank, 2);
  EXPECT_EQ(id.world_size, 3);
  EXPECT_EQ(id.node_rank, 1);
  EXPECT_EQ(id.local_world_size, 1);        // SLURM_GTIDS, not the sorted list's entry for node 1
  EXPECT_EQ(id.master_addr, "10.77.0.12");  // n2, where component 0 runs rank 0
  EXPECT_NE(id.master_port, 20012);         // reserved ports differ between components
  EXPECT_EQ(id.step, "100.0");
}

TEST(Identity, InheritedPluginVariablesFallBackToSlurm) {
  Env e = bare_slurm();
  for (const auto& [k, v] : plugin_env().vars) {
    if (k.rfind("SLURM_", 0) != 0) e.vars[k] = v;
  }
  e.vars["SLURMDDP_STEP"] = "12.0";  // this is step 12.3
  auto id = e.identity();
  EXPECT_EQ(id.source, IdentitySource::kSlurm);
  EXPECT_EQ(id.world_size, 2);
  EXPECT_EQ(id.master_port, 20010);
}

TEST(Identity, NothingSetSaysHowToLaunch) {
  Env e;
  EXPECT_THAT(e.error(), HasSubstr("launch the program with srun, torchrun or mpirun"));
}

TEST(Identity, BatchStepIsRefused) {
  Env e = bare_slurm();
  e.vars["SLURM_STEP_ID"] = "4294967291";
  EXPECT_THAT(e.error(), HasSubstr("not a task step"));
}

}  // namespace
}  // namespace slurmddp
