#include "launch/settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "launch/error.h"

namespace slurmddp::launch {
namespace {

using ::testing::HasSubstr;

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* n) -> std::optional<std::string> {
      auto it = vars.find(n);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

std::string error_of(const std::vector<std::string>& args) {
  try {
    parse_plugstack_args(args);
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Plugstack, Defaults) {
  auto c = parse_plugstack_args({});
  EXPECT_TRUE(c.enabled_by_default);
  EXPECT_EQ(c.port_range, kDefaultPortRange);
  EXPECT_GT(c.port_range.lo, 60999);  // above Linux's ephemeral range
  EXPECT_TRUE(c.networks.empty());
  EXPECT_FALSE(c.bind_gpu);
  EXPECT_TRUE(c.threads);
}

TEST(Plugstack, EveryKey) {
  auto c =
      parse_plugstack_args({"default=off", "port_range=20000-20099", "network=10.0.0.0/8",
                            "hostname_suffix=-ib", "ifname=ib0", "bind_gpu=yes", "verbose=on"});
  EXPECT_FALSE(c.enabled_by_default);
  EXPECT_EQ(c.port_range.lo, 20000);
  EXPECT_EQ(c.port_range.hi, 20099);
  ASSERT_EQ(c.networks.size(), 1u);
  EXPECT_EQ(c.networks[0].str(), "10.0.0.0/8");
  EXPECT_EQ(c.hostname_suffix, "-ib");
  EXPECT_EQ(c.ifname, "ib0");
  EXPECT_TRUE(c.bind_gpu);
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(c.launcher, Launcher::kDirect);
  EXPECT_EQ(parse_plugstack_args({"launcher=torchrun"}).launcher, Launcher::kTorchrun);
  EXPECT_FALSE(parse_plugstack_args({"threads=no"}).threads);
  EXPECT_TRUE(parse_plugstack_args({"threads=no", "threads=yes"}).threads);
  EXPECT_TRUE(parse_plugstack_args({}).nccl_ifname);
  EXPECT_FALSE(parse_plugstack_args({"nccl_ifname=no"}).nccl_ifname);
  EXPECT_FALSE(resolve_settings(
                   {}, [](const char*) { return std::optional<std::string>(); },
                   parse_plugstack_args({"nccl_ifname=no"}))
                   .nccl_ifname);
  EXPECT_EQ(plugstack_keys().size(), 11u);
}

// Note [Open store]: the admin's way to make the runtime refuse an open store.
TEST(Plugstack, RequireTokenKey) {
  EXPECT_FALSE(parse_plugstack_args({}).require_token);
  EXPECT_TRUE(parse_plugstack_args({"require_token=yes"}).require_token);
  EXPECT_FALSE(parse_plugstack_args({"require_token=yes", "require_token=no"}).require_token);
  EXPECT_THAT(error_of({"require_token=always"}),
              HasSubstr("invalid plugstack argument require_token='always': expected one of "
                        "yes|no"));
  EXPECT_THAT(error_of({"colour=blue"}), HasSubstr("require_token"));
  bool found = false;
  for (const auto& k : plugstack_keys()) {
    if (std::string(k.key) != "require_token") continue;
    found = true;
    EXPECT_STREQ(k.form, "yes|no");
    EXPECT_STREQ(k.default_value, "no");
    EXPECT_THAT(k.help, HasSubstr("SLURMDDP_REQUIRE_TOKEN=1"));
  }
  EXPECT_TRUE(found);
}

TEST(Plugstack, ThreadsKeyIsDocumented) {
  bool found = false;
  for (const auto& k : plugstack_keys()) {
    if (std::string(k.key) != "threads") continue;
    found = true;
    EXPECT_STREQ(k.form, "yes|no");
    EXPECT_STREQ(k.default_value, "yes");
    EXPECT_THAT(k.help, HasSubstr("OMP_NUM_THREADS"));
  }
  EXPECT_TRUE(found);
}

TEST(Plugstack, StrictErrorsNameKeyValueAndForm) {
  EXPECT_THAT(error_of({"colour=blue"}), HasSubstr("unknown plugstack argument 'colour'"));
  EXPECT_THAT(error_of({"colour=blue"}), HasSubstr("accepted keys: default, port_range"));
  EXPECT_THAT(error_of({"verbose"}), HasSubstr("expected key=value"));
  EXPECT_THAT(error_of({"default=maybe"}),
              HasSubstr("invalid plugstack argument default='maybe': expected one of yes|no"));
  EXPECT_THAT(error_of({"port_range=9-1"}),
              HasSubstr("invalid plugstack argument port_range='9-1'"));
  EXPECT_THAT(error_of({"network=10.0.0.0/40"}), HasSubstr("network prefix length='40'"));
  EXPECT_THAT(error_of({"ifname=a b"}), HasSubstr("ifname='a b'"));
  EXPECT_THAT(error_of({"threads=some"}),
              HasSubstr("invalid plugstack argument threads='some': expected one of yes|no"));
  EXPECT_THAT(error_of({"launcher=mpirun"}),
              HasSubstr("invalid plugstack argument launcher='mpirun': expected one of direct, "
                        "torchrun, master-only"));
}

TEST(Resolve, LauncherPrecedence) {
  PlugstackConfig conf;
  conf.launcher = Launcher::kMasterOnly;
  FakeEnv env;
  UserOptions opts;
  EXPECT_EQ(resolve_settings(opts, env.lookup(), conf).launcher, Launcher::kMasterOnly);
  env.vars[kEnvLauncher] = "direct";
  EXPECT_EQ(resolve_settings(opts, env.lookup(), conf).launcher, Launcher::kDirect);
  opts.launcher = "torchrun";
  EXPECT_EQ(resolve_settings(opts, env.lookup(), conf).launcher, Launcher::kTorchrun);
  opts.launcher = "Torchrun";
  try {
    resolve_settings(opts, env.lookup(), conf);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid --ddp-launcher='Torchrun'"));
  }
  for (Launcher l : {Launcher::kDirect, Launcher::kTorchrun, Launcher::kMasterOnly}) {
    EXPECT_EQ(parse_launcher("x", to_string(l)), l);
  }
}

TEST(Resolve, ThreadsPrecedence) {
  PlugstackConfig conf;
  FakeEnv env;
  UserOptions opts;
  EXPECT_TRUE(resolve_settings(opts, env.lookup(), conf).threads);  // default yes
  conf.threads = false;
  EXPECT_FALSE(resolve_settings(opts, env.lookup(), conf).threads);
  env.vars[kEnvThreads] = "1";  // parsed like SLURMDDP_BIND_GPU
  EXPECT_TRUE(resolve_settings(opts, env.lookup(), conf).threads);
  env.vars[kEnvThreads] = "no";
  EXPECT_FALSE(resolve_settings(opts, env.lookup(), conf).threads);
  opts.threads = "yes";
  EXPECT_TRUE(resolve_settings(opts, env.lookup(), conf).threads);
  opts.threads = "No";
  EXPECT_FALSE(resolve_settings(opts, env.lookup(), conf).threads);
}

TEST(Resolve, BadThreadsValuesNameTheirSource) {
  PlugstackConfig conf;
  FakeEnv env;
  UserOptions opts;
  opts.threads = "maybe";
  try {
    resolve_settings(opts, env.lookup(), conf);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid --ddp-threads='maybe': expected yes or no"));
  }
  opts.threads = "";  // --ddp-threads= with no value
  EXPECT_THROW(resolve_settings(opts, env.lookup(), conf), LaunchError);
  opts.threads.reset();
  env.vars[kEnvThreads] = "sometimes";
  try {
    resolve_settings(opts, env.lookup(), conf);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("invalid SLURMDDP_THREADS='sometimes': expected one of yes|no"));
  }
  // A good option does not hide a bad variable: every source is validated.
  opts.threads = "yes";
  EXPECT_THROW(resolve_settings(opts, env.lookup(), conf), LaunchError);
}

TEST(Resolve, PrecedenceOptionOverEnvironmentOverPlugstack) {
  PlugstackConfig conf;
  conf.ifname = "eth0";
  conf.enabled_by_default = false;
  FakeEnv env;
  UserOptions opts;
  auto s = resolve_settings(opts, env.lookup(), conf);
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.ifname, "eth0");
  env.vars[kEnvEnable] = "yes";
  env.vars[kEnvIfname] = "ib0";
  s = resolve_settings(opts, env.lookup(), conf);
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.ifname, "ib0");
  opts.enable = false;
  opts.ifname = "ib1";
  s = resolve_settings(opts, env.lookup(), conf);
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.ifname, "ib1");
}

TEST(Resolve, PortSources) {
  PlugstackConfig conf;
  FakeEnv env;
  UserOptions opts;
  EXPECT_FALSE(resolve_settings(opts, env.lookup(), conf).port.has_value());
  env.vars["MASTER_PORT"] = "29500";
  auto s = resolve_settings(opts, env.lookup(), conf);
  ASSERT_TRUE(s.port);
  EXPECT_EQ(s.port->value, 29500);
  EXPECT_EQ(s.port->source, "MASTER_PORT");
  env.vars[kEnvPort] = "29600";
  EXPECT_EQ(resolve_settings(opts, env.lookup(), conf).port->value, 29600);
  opts.port = "29999";
  s = resolve_settings(opts, env.lookup(), conf);
  EXPECT_EQ(s.port->value, 29999);
  EXPECT_EQ(s.port->source, "--ddp-port");
}

TEST(Resolve, InheritedMasterPortOfAnEarlierStepIsIgnored) {
  PlugstackConfig conf;
  FakeEnv env;
  env.vars["MASTER_PORT"] = "61234";
  env.vars[kEnvStep] = "7.0";
  EXPECT_FALSE(resolve_settings({}, env.lookup(), conf, "7.1").port.has_value());
  EXPECT_FALSE(resolve_settings({}, env.lookup(), conf, "").port.has_value());
  // the step's own marker (already exported) does not hide a user's port
  EXPECT_TRUE(resolve_settings({}, env.lookup(), conf, "7.0").port.has_value());
}

TEST(Resolve, BadValuesNameTheirSource) {
  PlugstackConfig conf;
  FakeEnv env;
  UserOptions opts;
  opts.port = "abc";
  try {
    resolve_settings(opts, env.lookup(), conf);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid --ddp-port='abc'"));
  }
  opts.port.reset();
  env.vars["MASTER_PORT"] = "70000";
  try {
    resolve_settings(opts, env.lookup(), conf);
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid MASTER_PORT='70000'"));
  }
  env.vars.clear();
  env.vars[kEnvAddr] = "bad host";
  EXPECT_THROW(resolve_settings(opts, env.lookup(), conf), LaunchError);
}

}  // namespace
}  // namespace slurmddp::launch
