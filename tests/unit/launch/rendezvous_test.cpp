#include "launch/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <map>
#include <set>

#include "launch/error.h"

namespace slurmddp::launch {
namespace {

using ::testing::HasSubstr;

IpAddress ip(const char* s) {
  return *IpAddress::parse(s);
}

// A fake network: names resolve from a table; this node has given interfaces.
struct FakeNet {
  std::map<std::string, std::vector<IpAddress>> names;
  std::vector<InterfaceAddress> ifaces;
  NetworkView view() const {
    NetworkView v;
    v.resolve = [this](const std::string& h) {
      auto it = names.find(h);
      if (it == names.end()) throw LaunchError("failed to resolve host '" + h + "': not found");
      return it->second;
    };
    v.interfaces = [this] { return ifaces; };
    v.route_source = [this](const IpAddress& dest) -> std::optional<IpAddress> {
      for (const auto& ia : ifaces) {
        if (Cidr{ia.addr, ia.prefix}.contains(dest)) return ia.addr;
      }
      return std::nullopt;
    };
    return v;
  }
};

StepFacts facts(uint32_t node_id = 0) {
  StepFacts f;
  f.job_id = 42;
  f.step_id = 0;
  f.num_nodes = 2;
  f.node_id = node_id;
  f.local_task_count = 4;
  f.total_task_count = 8;
  f.first_node = "n1";
  f.node_name = node_id == 0 ? "n1" : "n2";
  return f;
}

FakeNet net_on(const char* node_ip) {
  FakeNet n;
  n.names["n1"] = {ip("127.0.1.1"), ip("10.77.0.11")};
  n.names["n1-ib"] = {ip("10.88.0.11")};
  n.names["n2"] = {ip("10.77.0.12")};
  n.ifaces = {{"lo", ip("127.0.0.1"), 8}, {"eth0", ip(node_ip), 24}};
  return n;
}

std::map<std::string, std::optional<std::string>> as_map(const std::vector<EnvChange>& v) {
  std::map<std::string, std::optional<std::string>> m;
  for (const auto& c : v) m[c.name] = c.value;
  return m;
}

// Note [Open store]: under require_token=yes every task of a task step gets
// SLURMDDP_REQUIRE_TOKEN=1, overwriting the user's value; otherwise nothing.
TEST(Policy, RequireTokenIsExportedOverTheUsersValue) {
  EXPECT_TRUE(policy_environment(parse_plugstack_args({})).empty());
  EXPECT_TRUE(policy_environment(parse_plugstack_args({"require_token=no"})).empty());
  const auto env = policy_environment(parse_plugstack_args({"require_token=yes", "default=off"}));
  ASSERT_EQ(env.size(), 1u);
  EXPECT_EQ(env[0].name, "SLURMDDP_REQUIRE_TOKEN");
  EXPECT_EQ(env[0].value, std::optional<std::string>("1"));
  EXPECT_TRUE(env[0].overwrite);
}

TEST(SpecialSteps, AreSkipped) {
  EXPECT_TRUE(is_task_step(0));
  EXPECT_TRUE(is_task_step(12345));
  EXPECT_FALSE(is_task_step(0xfffffffbu));  // batch
  EXPECT_FALSE(is_task_step(0xfffffffcu));  // extern
  EXPECT_FALSE(is_task_step(0xfffffffau));  // interactive
}

TEST(Port, Precedence) {
  Settings s;
  StepFacts f = facts();
  auto hashed = choose_port(s, f);
  EXPECT_GE(hashed.port, kDefaultPortRange.lo);
  EXPECT_THAT(hashed.source, HasSubstr("hash of job 42 step 0"));
  f.resv_ports = "20051-20055";
  EXPECT_EQ(choose_port(s, f).port, 20051);
  s.port = Sourced<uint16_t>{29999, "--ddp-port"};
  EXPECT_EQ(choose_port(s, f).port, 29999);
  EXPECT_EQ(choose_port(s, f).source, "--ddp-port");
}

// Note [Bounded parsing]: SLURM_STEP_RESV_PORTS may be the user's. 128 KiB of
// full ranges (two gigabytes of ports once expanded) is refused unread, naming
// the variable, its length and the cap; a list just under the cap gives its
// first port without expanding the rest.
TEST(Port, AnOversizedReservedPortListIsRefusedAndNoneIsExpanded) {
  Settings s;
  StepFacts f = facts();
  std::string huge;
  while (huge.size() < 128 * 1024) huge += "1-65535,";
  huge.back() = '9';
  try {
    choose_port(s, f);
    f.resv_ports = huge;
    choose_port(s, f);
    ADD_FAILURE() << "accepted a 128 KiB SLURM_STEP_RESV_PORTS";
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid SLURM_STEP_RESV_PORTS: 131072 bytes long, over the "
                                    "limit of 65536 bytes; expected a port list"));
  }
  f.resv_ports = huge.substr(0, 65528) + "2";
  const PortChoice c = choose_port(s, f);
  EXPECT_EQ(c.port, 1);
  EXPECT_LT(c.source.size(), 120u);  // the verbose line shows a shortened list
}

TEST(Port, StepsOfOneJobNeverCollide) {
  Settings s;
  s.port_range = PortRange{30000, 30099};
  for (uint32_t job : {1u, 77u, 123456u, 4000000000u}) {
    std::set<uint16_t> seen;
    for (uint32_t step = 0; step < 100; ++step) {
      StepFacts f = facts();
      f.job_id = job;
      f.step_id = step;
      uint16_t p = choose_port(s, f).port;
      EXPECT_GE(p, 30000);
      EXPECT_LE(p, 30099);
      EXPECT_TRUE(seen.insert(p).second) << "job " << job << " step " << step;
    }
  }
}

TEST(Port, SameOnEveryNode) {
  Settings s;
  EXPECT_EQ(choose_port(s, facts(0)).port, choose_port(s, facts(1)).port);
}

TEST(Distribution, Rank0Placement) {
  EXPECT_TRUE(rank0_on_first_node(""));
  EXPECT_TRUE(rank0_on_first_node("block"));
  EXPECT_TRUE(rank0_on_first_node("cyclic"));
  EXPECT_TRUE(rank0_on_first_node("block:cyclic"));
  EXPECT_TRUE(rank0_on_first_node("plane"));
  EXPECT_TRUE(rank0_on_first_node("Cyclic,Pack"));
  EXPECT_FALSE(rank0_on_first_node("arbitrary"));
  EXPECT_FALSE(rank0_on_first_node("something-new"));
}

TEST(Plan, MasterIsFirstNodesRoutableAddressOnEveryNode) {
  Settings s;
  for (uint32_t node : {0u, 1u}) {
    auto net = net_on(node == 0 ? "10.77.0.11" : "10.77.0.12");
    StepPlan p = plan_step(s, facts(node), net.view());
    EXPECT_EQ(p.master_addr, "10.77.0.11");  // not the 127.0.1.1 Debian puts in /etc/hosts
    EXPECT_EQ(p.node_rank, node);
    EXPECT_EQ(p.world_size, 8u);
    EXPECT_EQ(p.local_world_size, 4u);
    EXPECT_EQ(p.step, "42.0");
  }
}

TEST(Plan, HostnameSuffixAndNetworkAndIfname) {
  auto net = net_on("10.77.0.12");
  Settings s;
  s.hostname_suffix = "-ib";
  EXPECT_EQ(plan_step(s, facts(1), net.view()).master_addr, "10.88.0.11");
  s.hostname_suffix.clear();
  s.networks = {parse_cidr("n", "127.0.0.0/8")};
  // the only address in the network is loopback: refused on a multi-node step
  EXPECT_THROW(plan_step(s, facts(1), net.view()), LaunchError);
  s.networks.clear();
  net.names["n1"].push_back(ip("192.168.7.11"));
  net.ifaces.push_back({"ib0", ip("192.168.7.12"), 24});
  s.ifname = "ib0";
  EXPECT_EQ(plan_step(s, facts(1), net.view()).master_addr, "192.168.7.11");
  s.ifname = "ib9";
  try {
    plan_step(s, facts(1), net.view());
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("failed to use ifname on node n2"));
    EXPECT_THAT(e.what(), HasSubstr("interface 'ib9'"));
  }
}

TEST(Plan, ArbitraryDistributionNeedsExplicitAddress) {
  auto net = net_on("10.77.0.11");
  Settings s;
  StepFacts f = facts();
  f.distribution = "arbitrary";
  try {
    plan_step(s, f, net.view());
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("SLURM_DISTRIBUTION='arbitrary'"));
    EXPECT_THAT(e.what(), HasSubstr("--ddp-addr"));
  }
  s.addr = Sourced<std::string>{"n2", "--ddp-addr"};
  StepPlan p = plan_step(s, f, net.view());
  EXPECT_EQ(p.master_addr, "10.77.0.12");
  EXPECT_FALSE(p.master_on_first_node);
}

TEST(Plan, ArbitraryDistributionUsesTheHostfilesFirstHost) {
  auto net = net_on("10.77.0.11");
  StepFacts f = facts();
  f.distribution = "arbitrary";
  f.rank0_node = "n2";
  f.rank0_source = "first line of SLURM_HOSTFILE=/h";
  StepPlan p = plan_step(Settings{}, f, net.view());
  EXPECT_EQ(p.master_host, "n2");
  EXPECT_EQ(p.master_addr, "10.77.0.12");
  EXPECT_EQ(p.addr_source, "first line of SLURM_HOSTFILE=/h");
  EXPECT_FALSE(p.master_on_first_node);
  // rank 0 on the second node (index 1) is then fine, on n2 itself
  auto n2 = net_on("10.77.0.12");
  StepFacts second = f;
  second.node_id = 1;
  second.node_name = "n2";
  p = plan_step(Settings{}, second, n2.view());
  EXPECT_NO_THROW(task_environment(p, TaskFacts{}, n2.view()));
  // and on n1 it is caught: MASTER_ADDR is not n1's
  EXPECT_THROW(task_environment(p, TaskFacts{}, net.view()), LaunchError);
  // An explicit address still wins.
  Settings s;
  s.addr = Sourced<std::string>{"n1", "--ddp-addr"};
  EXPECT_EQ(plan_step(s, f, net.view()).master_addr, "10.77.0.11");
}

TEST(Plan, UnknowableRank0NodeSaysWhy) {
  StepFacts f = facts();
  f.distribution = "arbitrary";
  f.rank0_note = "SLURM_HOSTFILE='/x' cannot be read on node n1";
  try {
    plan_step(Settings{}, f, net_on("10.77.0.11").view());
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("and SLURM_HOSTFILE='/x' cannot be read on node n1"));
    EXPECT_THAT(e.what(), HasSubstr("--ddp-addr=HOST"));
  }
}

// The environment of component 1 (job 101, one node, 1 task) of a step over
// two components: job 100 on n2 with 2 tasks, job 101 on n1 with 1 task.
std::map<std::string, std::string> het_env() {
  return {{"SLURM_HET_SIZE", "2"},
          {"SLURM_STEP_NUM_TASKS", "3"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_JOB_ID", "100"},
          {"SLURM_JOB_ID_HET_GROUP_0", "100"},
          {"SLURM_JOB_ID_HET_GROUP_1", "101"},
          {"SLURM_JOB_NODELIST_HET_GROUP_0", "n2"},
          {"SLURM_JOB_NODELIST_HET_GROUP_1", "n1"},
          {"SLURM_STEP_RESV_PORTS", "20012-20014"}};
}

StepEnv lookup(const std::map<std::string, std::string>& m) {
  return [m](const char* name) -> std::optional<std::string> {
    auto it = m.find(name);
    return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

StepFacts component(uint32_t job, uint32_t tasks, const char* node) {
  StepFacts f;
  f.job_id = job;
  f.step_id = 0;
  f.num_nodes = 1;
  f.node_id = 0;
  f.local_task_count = tasks;
  f.total_task_count = tasks;
  f.first_node = node;
  f.node_name = node;
  f.resv_ports = "20012-20014";
  return f;
}

TEST(Het, ComponentsFormOneWorld) {
  auto env = het_env();
  StepFacts c1 = component(101, 1, "n1");
  apply_het_step(c1, lookup(env), "n[1-2]");
  EXPECT_EQ(c1.het_components, 2u);
  EXPECT_EQ(c1.job_id, 100u);  // the leading job: one SLURMDDP_STEP, one port
  EXPECT_EQ(c1.total_task_count, 3u);
  EXPECT_EQ(c1.num_nodes, 2u);
  EXPECT_EQ(c1.rank0_node, "n2");  // not n1, the first of the sorted step list
  EXPECT_THAT(c1.rank0_source, HasSubstr("het group 0"));
  EXPECT_TRUE(c1.resv_ports.empty());
  StepFacts c0 = component(100, 2, "n2");
  apply_het_step(c0, lookup(env), "n[1-2]");
  auto on_n1 = net_on("10.77.0.11");
  auto on_n2 = net_on("10.77.0.12");
  StepPlan p0 = plan_step(Settings{}, c0, on_n2.view());
  StepPlan p1 = plan_step(Settings{}, c1, on_n1.view());
  EXPECT_EQ(p0.step, "100.0");
  EXPECT_EQ(p1.step, "100.0");
  EXPECT_EQ(p0.master_addr, "10.77.0.12");
  EXPECT_EQ(p1.master_addr, "10.77.0.12");
  EXPECT_EQ(p0.port.port, p1.port.port);
  EXPECT_THAT(p1.port.source, HasSubstr("hash of job 100"));
  EXPECT_EQ(p1.world_size, 3u);
  // Slurm's global numbers per task
  TaskFacts t;
  t.local_rank = 0;
  t.global_rank = 2;
  t.node_rank = 1;
  auto e = as_map(task_environment(p1, t, on_n1.view()));
  EXPECT_EQ(e["RANK"], "2");
  EXPECT_EQ(e["WORLD_SIZE"], "3");
  EXPECT_EQ(e["NODE_RANK"], "1");
  EXPECT_EQ(e["LOCAL_RANK"], "0");
  EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "1");
  EXPECT_EQ(e["SLURMDDP_STEP"], "100.0");
  TaskFacts r0;
  r0.node_rank = 0;
  EXPECT_NO_THROW(task_environment(p0, r0, on_n2.view()));
}

TEST(Het, OneComponentOnItsOwnIsAnOrdinaryStepNamedAfterTheHetJob) {
  auto env = het_env();
  env["SLURM_STEP_NUM_TASKS"] = "1";
  StepFacts c1 = component(101, 1, "n1");
  apply_het_step(c1, lookup(env), "n1");
  EXPECT_EQ(c1.het_components, 0u);
  EXPECT_EQ(c1.job_id, 100u);  // SLURM_JOB_ID, which the tasks see
  EXPECT_EQ(c1.total_task_count, 1u);
  EXPECT_EQ(c1.resv_ports, "20012-20014");
  EXPECT_TRUE(c1.rank0_node.empty());
  StepFacts plain = component(7, 2, "n1");
  apply_het_step(plain, lookup({}), "n1");
  EXPECT_EQ(plain.job_id, 7u);
  EXPECT_EQ(plain.het_components, 0u);
}

TEST(Het, Rank0IsOnTheLowestGroupInTheStep) {
  // srun --het-group=1,2 of a job of three groups
  std::map<std::string, std::string> env = {{"SLURM_HET_SIZE", "3"},
                                            {"SLURM_JOB_NODELIST_HET_GROUP_0", "n3"},
                                            {"SLURM_JOB_NODELIST_HET_GROUP_1", "n[4,2]"},
                                            {"SLURM_JOB_NODELIST_HET_GROUP_2", "n1"}};
  auto r = het_rank0_node(lookup(env), "n[1-2]");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->node, "n2");
  EXPECT_THAT(r->source, HasSubstr("het group 1"));
  EXPECT_FALSE(het_rank0_node(lookup({}), "n[1-2]").has_value());
}

// Note [Bounded parsing]: the het groups' lists may be the user's. They are
// walked under one budget of hosts and bytes of names: a thousand-byte name a
// million times (a gigabyte once expanded) fails at the budget, naming the
// variable; the walk stops at the first host in the step; a list over the cap
// is refused unread.
TEST(Het, GroupListsAreWalkedUnderOneBudgetOfHostsAndBytes) {
  const std::string name(1000, 'a');
  auto env = het_env();
  env["SLURM_JOB_NODELIST_HET_GROUP_0"] = name + "[0-999999]";
  StepFacts c1 = component(101, 1, "n1");
  try {
    apply_het_step(c1, lookup(env), "n[1-2]");
    ADD_FAILURE() << "walked a gigabyte of host names";
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid SLURM_JOB_NODELIST_HET_GROUP_0='aaa"));
    EXPECT_THAT(e.what(), HasSubstr("more bytes of host names than the limit"));
  }

  env["SLURM_JOB_NODELIST_HET_GROUP_0"] = "n2," + name + "[0-999999]";
  c1 = component(101, 1, "n1");
  apply_het_step(c1, lookup(env), "n[1-2]");
  EXPECT_EQ(c1.rank0_node, "n2");

  env["SLURM_JOB_NODELIST_HET_GROUP_0"] = std::string(size_t{2} << 20, 'n');
  c1 = component(101, 1, "n1");
  try {
    apply_het_step(c1, lookup(env), "n[1-2]");
    ADD_FAILURE() << "accepted a 2 MiB SLURM_JOB_NODELIST_HET_GROUP_0";
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid SLURM_JOB_NODELIST_HET_GROUP_0: 2097152 bytes long, "
                                    "over the limit of 1048576 bytes"));
  }
}

TEST(Het, ContradictionsNameTheVariable) {
  auto env = het_env();
  env.erase("SLURM_JOB_NODELIST_HET_GROUP_0");
  env.erase("SLURM_JOB_NODELIST_HET_GROUP_1");
  StepFacts c1 = component(101, 1, "n1");
  try {
    apply_het_step(c1, lookup(env), "n[1-2]");
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("none of SLURM_JOB_NODELIST_HET_GROUP_0..1 has a node of "
                                    "SLURM_STEP_NODELIST='n[1-2]'"));
  }
  env = het_env();
  env.erase("SLURM_STEP_NUM_NODES");
  c1 = component(101, 1, "n1");
  try {
    apply_het_step(c1, lookup(env), "n[1-2]");
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("SLURM_STEP_NUM_NODES is not set"));
  }
  env = het_env();
  env["SLURM_STEP_NUM_TASKS"] = "x";
  c1 = component(101, 1, "n1");
  try {
    apply_het_step(c1, lookup(env), "n[1-2]");
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("SLURM_STEP_NUM_TASKS='x'"));
  }
}

TEST(Plan, UnresolvableAddressNamesHostAndSource) {
  auto net = net_on("10.77.0.11");
  Settings s;
  s.addr = Sourced<std::string>{"no-such-host.invalid", "--ddp-addr"};
  try {
    plan_step(s, facts(), net.view());
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("on node n1 (host from --ddp-addr)"));
    EXPECT_THAT(e.what(), HasSubstr("'no-such-host.invalid'"));
  }
}

TEST(Plan, RejectsInconsistentFacts) {
  StepFacts f = facts();
  f.node_id = 2;
  EXPECT_THROW(plan_step(Settings{}, f, net_on("10.77.0.11").view()), LaunchError);
  f = facts();
  f.local_task_count = 9;
  EXPECT_THROW(plan_step(Settings{}, f, net_on("10.77.0.11").view()), LaunchError);
}

TEST(TaskEnv, ExportsTheTorchrunContract) {
  auto net = net_on("10.77.0.12");
  Settings s;
  StepPlan p = plan_step(s, facts(1), net.view());
  TaskFacts t;
  t.local_rank = 1;
  t.global_rank = 5;
  t.gpus = gpu_list("CUDA_VISIBLE_DEVICES", "0,1,2,3");
  auto env = as_map(task_environment(p, t, net.view()));
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["NODE_RANK"], "1");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], "10.77.0.11");
  EXPECT_EQ(env["MASTER_PORT"], std::to_string(p.port.port));
  EXPECT_EQ(env["SLURMDDP_STEP"], "42.0");
  EXPECT_EQ(env["SLURMDDP_LOCAL_DEVICE"], "1");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  // the interface toward MASTER_ADDR, for Gloo and NCCL's sockets, without
  // overwriting the user's or the image's choice (Note [Socket interfaces])
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth0");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "eth0");
  for (const auto& c : task_environment(p, t, net.view())) {
    EXPECT_EQ(c.overwrite, c.name != "GLOO_SOCKET_IFNAME" && c.name != "NCCL_SOCKET_IFNAME")
        << c.name;
  }
}

TEST(TaskEnv, NcclIfnameNoLeavesNcclsOwnChoice) {
  auto net = net_on("10.77.0.12");
  Settings s;
  s.nccl_ifname = false;
  StepPlan p = plan_step(s, facts(1), net.view());
  TaskFacts t;
  t.local_rank = 1;
  t.global_rank = 5;
  auto env = as_map(task_environment(p, t, net.view()));
  EXPECT_EQ(env.count("NCCL_SOCKET_IFNAME"), 0u);
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth0");
}

TEST(TaskEnv, IfnameExportsSocketVariables) {
  auto net = net_on("10.77.0.11");
  Settings s;
  s.ifname = "eth0";
  StepPlan p = plan_step(s, facts(0), net.view());
  auto env = as_map(task_environment(p, TaskFacts{}, net.view()));
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "eth0");
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth0");
  EXPECT_EQ(env["SLURMDDP_LOCAL_DEVICE"], std::nullopt);  // no GPU: unset
}

TEST(TaskEnv, Rank0MustOwnMasterAddr) {
  auto net = net_on("10.77.0.11");
  StepPlan p = plan_step(Settings{}, facts(0), net.view());
  EXPECT_NO_THROW(task_environment(p, TaskFacts{}, net.view()));
  auto other = net_on("10.77.0.99");  // rank 0 is not on the resolved host
  try {
    task_environment(p, TaskFacts{}, other.view());
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("MASTER_ADDR=10.77.0.11"));
    EXPECT_THAT(e.what(), HasSubstr("is not an address of the node running rank 0"));
  }
}

TEST(TaskEnv, Rank0OffTheFirstNodeIsAnError) {
  auto net = net_on("10.77.0.12");
  StepPlan p = plan_step(Settings{}, facts(1), net.view());
  TaskFacts t;  // global rank 0 on node 1
  try {
    task_environment(p, t, net.view());
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("global rank 0 runs on node index 1"));
  }
}

TEST(TaskEnv, RanksOutOfRange) {
  auto net = net_on("10.77.0.11");
  StepPlan p = plan_step(Settings{}, facts(0), net.view());
  TaskFacts t;
  t.global_rank = 8;
  EXPECT_THROW(task_environment(p, t, net.view()), LaunchError);
  t.global_rank = 1;
  t.local_rank = 4;
  EXPECT_THROW(task_environment(p, t, net.view()), LaunchError);
}

TEST(TaskEnv, TorchrunLauncherExportsPetVariablesNotRanks) {
  auto net = net_on("10.77.0.12");
  Settings s;
  s.launcher = Launcher::kTorchrun;
  StepFacts f = facts(1);
  f.local_task_count = 1;
  f.total_task_count = 2;
  StepPlan p = plan_step(s, f, net.view());
  TaskFacts t;
  t.global_rank = 1;
  t.gpus = gpu_list("CUDA_VISIBLE_DEVICES", "0,1");
  auto env = as_map(task_environment(p, t, net.view()));
  EXPECT_EQ(env["PET_NNODES"], "2");
  EXPECT_EQ(env["PET_NODE_RANK"], "1");
  EXPECT_EQ(env["PET_NPROC_PER_NODE"], "2");
  EXPECT_EQ(env["PET_MASTER_ADDR"], "10.77.0.11");
  EXPECT_EQ(env["PET_MASTER_PORT"], std::to_string(p.port.port));
  EXPECT_EQ(env["PET_RDZV_BACKEND"], "static");
  EXPECT_EQ(env["PET_RDZV_ENDPOINT"], "10.77.0.11:" + std::to_string(p.port.port));
  EXPECT_EQ(env["PET_RDZV_ID"], "42.0");
  // torchrun sends the time-limit warning's SIGUSR1 on to its workers (a
  // value of the user's own is kept)
  EXPECT_EQ(env["PET_SIGNALS_TO_HANDLE"], "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2");
  for (const auto& c : task_environment(p, t, net.view())) {
    if (c.name == "PET_SIGNALS_TO_HANDLE") {
      EXPECT_FALSE(c.overwrite);
    }
  }
  EXPECT_EQ(env["MASTER_ADDR"], "10.77.0.11");
  for (const char* k : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK",
                        "GROUP_RANK", "SLURMDDP_LOCAL_DEVICE"}) {
    ASSERT_EQ(env.count(k), 1u) << k;
    EXPECT_EQ(env[k], std::nullopt) << k << " is unset";
  }
  // no GPUs: torchrun's own default or flag
  t.gpus = {};
  EXPECT_EQ(as_map(task_environment(p, t, net.view()))["PET_NPROC_PER_NODE"], std::nullopt);
  // two agents on one node would claim one node rank twice
  StepPlan two = plan_step(s, facts(1), net.view());
  try {
    task_environment(two, t, net.view());
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("this node runs 4 tasks"));
    EXPECT_THAT(e.what(), HasSubstr("--ntasks-per-node=1"));
  }
}

TEST(TaskEnv, MasterOnlyLauncherLeavesRanksToTheFramework) {
  auto net = net_on("10.77.0.11");
  Settings s;
  s.launcher = Launcher::kMasterOnly;
  StepPlan p = plan_step(s, facts(0), net.view());
  auto env = as_map(task_environment(p, TaskFacts{}, net.view()));
  EXPECT_EQ(env["MASTER_ADDR"], "10.77.0.11");
  EXPECT_EQ(env["MASTER_PORT"], std::to_string(p.port.port));
  EXPECT_EQ(env["RANK"], std::nullopt);
  EXPECT_EQ(env["WORLD_SIZE"], std::nullopt);
  EXPECT_EQ(env.count("PET_NNODES"), 0u);
}

TEST(TaskEnv, AnnouncesTheTokenAndTheExportedMaster) {
  auto net = net_on("10.77.0.11");
  StepFacts f = facts(0);
  f.has_token = true;
  StepPlan p = plan_step(Settings{}, f, net.view());
  auto env = as_map(task_environment(p, TaskFacts{}, net.view()));
  EXPECT_EQ(env["SLURMDDP_AUTH"], "hmac");
  EXPECT_EQ(env["SLURMDDP_MASTER"], "10.77.0.11:" + std::to_string(p.port.port));
  EXPECT_EQ(env.count("SLURMDDP_VERBOSE"), 0u);
  EXPECT_EQ(env["SLURMDDP_RESTART_COUNT"], "0");
  f.restart_count = 2;  // the job's third run
  p = plan_step(Settings{}, f, net.view());
  env = as_map(task_environment(p, TaskFacts{}, net.view()));
  EXPECT_EQ(env["SLURMDDP_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  f.has_token = false;
  Settings verbose;
  verbose.verbose = true;
  p = plan_step(verbose, f, net.view());
  env = as_map(task_environment(p, TaskFacts{}, net.view()));
  ASSERT_EQ(env.count("SLURMDDP_AUTH"), 1u);
  EXPECT_EQ(env["SLURMDDP_AUTH"], std::nullopt);
  EXPECT_EQ(env["SLURMDDP_VERBOSE"], "1");
}

TEST(Describe, NeverPrintsTheToken) {
  auto net = net_on("10.77.0.11");
  StepPlan p = plan_step(Settings{}, facts(0), net.view());
  std::string line = describe(p, true);
  EXPECT_THAT(line, HasSubstr("MASTER_ADDR=10.77.0.11"));
  EXPECT_THAT(line, HasSubstr("token=set"));
}

}  // namespace
}  // namespace slurmddp::launch
