// Live comparison with the installed PyTorch: for hundreds of random
// configurations, DistributedSampler in kTorch mode must yield exactly what
// torch.utils.data.distributed.DistributedSampler yields. PyTorch runs in a
// child process (torch_reference.py). If PyTorch cannot be imported the test
// fails: parity that is not checked is not claimed.
//
// The interpreter is $SLURMDDP_TEST_PYTHON (the PyPI lane's) or
// $SLURMDDP_TORCH_PYTHON when set, else the one the build found
// (SLURMDDP_TEST_TORCH_PYTHON, set by meson); the script comes from
// SLURMDDP_TEST_TORCH_SCRIPT.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "slurmddp/sampler.h"

namespace slurmddp {

struct Config {
  int64_t n, replicas, rank;
  bool shuffle;
  int64_t seed, epoch;
  bool drop_last;
};

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "n=" << c.n << " num_replicas=" << c.replicas << " rank=" << c.rank
     << " shuffle=" << c.shuffle << " seed=" << c.seed << " epoch=" << c.epoch
     << " drop_last=" << c.drop_last;
  return os.str();
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

// Interpreter and script, or a failure explaining what is missing.
struct Reference {
  std::string python;
  std::string script;
};

::testing::AssertionResult find_reference(Reference* ref) {
  // The PyPI lane's interpreter first (Note [The Python under test] in
  // tests/system/cluster.cpp), then a user's choice.
  const char* user = std::getenv("SLURMDDP_TEST_PYTHON");
  if (user == nullptr || *user == '\0') user = std::getenv("SLURMDDP_TORCH_PYTHON");
  const char* built = std::getenv("SLURMDDP_TEST_TORCH_PYTHON");
  const char* script = std::getenv("SLURMDDP_TEST_TORCH_SCRIPT");
  if (user != nullptr && *user != '\0') {
    ref->python = user;
  } else if (built != nullptr && *built != '\0') {
    ref->python = built;
  } else {
    return ::testing::AssertionFailure()
           << "no Python interpreter for the PyTorch comparison: run through `meson test` (which "
              "sets SLURMDDP_TEST_TORCH_PYTHON) or set SLURMDDP_TORCH_PYTHON";
  }
  if (script == nullptr || *script == '\0') {
    return ::testing::AssertionFailure()
           << "SLURMDDP_TEST_TORCH_SCRIPT is not set: run through `meson test`";
  }
  ref->script = script;
  return ::testing::AssertionSuccess();
}

namespace {

// A new empty file under $TMPDIR (or /tmp); its path.
std::string temp_file(const char* stem) {
  const char* dir = std::getenv("TMPDIR");
  std::string path =
      std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/" + stem + "-XXXXXX";
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back('\0');
  const int fd = mkstemp(buf.data());
  if (fd < 0) {
    return "";
  }
  close(fd);
  return buf.data();
}

// Runs `command` and hands its stdout, chunk by chunk, to `sink`; stderr goes
// to a file that is reported on failure.
template <typename Sink>
::testing::AssertionResult run_streaming(const std::string& command, Sink&& sink) {
  const std::string err_path = temp_file("slurmddp-sampler-stderr");
  if (err_path.empty()) {
    return ::testing::AssertionFailure() << "mkstemp: " << std::strerror(errno);
  }
  FILE* pipe = popen((command + " 2>" + quote(err_path)).c_str(), "r");
  if (pipe == nullptr) {
    unlink(err_path.c_str());
    return ::testing::AssertionFailure() << "popen(" << command << "): " << std::strerror(errno);
  }
  std::vector<char> buf(1 << 20);
  size_t got;
  bool sink_ok = true;
  while ((got = fread(buf.data(), 1, buf.size(), pipe)) > 0) {
    if (sink_ok) {
      sink_ok = sink(buf.data(), got);
    }
  }
  const int status = pclose(pipe);
  std::ifstream err_file(err_path);
  std::stringstream err;
  err << err_file.rdbuf();
  unlink(err_path.c_str());
  if (status != 0) {
    return ::testing::AssertionFailure()
           << "`" << command << "` "
           << (WIFEXITED(status) ? "exited with code " + std::to_string(WEXITSTATUS(status))
                                 : "ended abnormally, wait status " + std::to_string(status))
           << (WIFEXITED(status) && WEXITSTATUS(status) == 3
                   ? " (PyTorch is not importable by this interpreter: install Debian's "
                     "python3-torch, or set SLURMDDP_TORCH_PYTHON to an interpreter that has torch)"
                   : "")
           << "; stderr: " << err.str();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult run_capture(const std::string& command, std::string* out) {
  out->clear();
  return run_streaming(command, [out](const char* data, size_t size) {
    out->append(data, size);
    return true;
  });
}

std::vector<Config> random_configs() {
  std::mt19937_64 rng(20261202);  // fixed: the same configurations on every run
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  // Sizes where something changes: the generator refreshes its 624-word state,
  // the optimized shuffle works in 4096-step blocks, PyTorch fills the
  // identity in 32768-element grains.
  const int64_t boundaries[] = {0,     1,     2,     3,     623,   624,    625,    626,
                                1247,  1248,  1249,  4095,  4096,  4097,   8193,   32767,
                                32768, 32769, 65535, 65536, 65537, 131071, 131072, 131073};
  std::vector<Config> configs;
  for (int k = 0; k < 420; ++k) {
    Config c{};
    const int64_t kind = uniform(0, 99);
    if (kind < 25) {
      c.n = uniform(0, 20);
    } else if (kind < 55) {
      c.n = uniform(21, 3000);
    } else if (kind < 75) {
      c.n = uniform(3001, 100000);
    } else if (kind < 90) {
      c.n = boundaries[uniform(0, sizeof boundaries / sizeof boundaries[0] - 1)];
    } else {
      c.n = uniform(100001, int64_t{1} << 21);
    }
    const int64_t rkind = uniform(0, 9);
    c.replicas = rkind < 6 ? uniform(1, 8) : (rkind < 9 ? uniform(9, 64) : uniform(65, 300));
    c.rank = uniform(0, c.replicas - 1);
    c.shuffle = uniform(0, 9) != 0;
    const int64_t skind = uniform(0, 4);
    c.seed = skind == 0   ? 0
             : skind == 1 ? uniform(1, 1000)
             : skind == 2 ? uniform(int64_t{1} << 31, int64_t{1} << 40)
             : skind == 3 ? -uniform(1, int64_t{1} << 40)
                          : uniform(0, 0xffffffffll);
    const int64_t ekind = uniform(0, 4);
    c.epoch = ekind < 3    ? uniform(0, 200)
              : ekind == 3 ? uniform(int64_t{1} << 32, int64_t{1} << 34)
                           : -uniform(1, 50);
    c.drop_last = uniform(0, 1) == 1;
    configs.push_back(c);
  }
  // The auto-mode limit (kTorch up to 2^24) and its neighbours, with many
  // replicas so that the expected output stays small.
  for (int64_t n : {(int64_t{1} << 24) - 1, int64_t{1} << 24, (int64_t{1} << 24) + 1}) {
    configs.push_back(Config{n, 96, 95, true, 11, 3, n % 2 == 0});
  }
  return configs;
}

TEST(TorchParity, SamplerMatchesPytorchIndexForIndex) {
  Reference ref;
  ASSERT_TRUE(find_reference(&ref));
  const std::vector<Config> configs = random_configs();

  const std::string cfg_path = temp_file("slurmddp-sampler-configs");
  ASSERT_FALSE(cfg_path.empty()) << "mkstemp: " << std::strerror(errno);
  {
    std::ofstream cfg(cfg_path);
    for (const Config& c : configs) {
      cfg << c.n << ' ' << c.replicas << ' ' << c.rank << ' ' << c.shuffle << ' ' << c.seed << ' '
          << c.epoch << ' ' << c.drop_last << '\n';
    }
  }
  std::string output;
  const auto ran = run_capture(
      quote(ref.python) + " " + quote(ref.script) + " sampler " + quote(cfg_path), &output);
  unlink(cfg_path.c_str());
  ASSERT_TRUE(ran);

  std::istringstream in(output);
  std::string word, version;
  ASSERT_TRUE(in >> word >> version) << "no version line from the reference";
  ASSERT_EQ(word, "torch");
  std::printf("comparing with PyTorch %s over %zu configurations\n", version.c_str(),
              configs.size());

  size_t compared_indices = 0, shuffled = 0, padded = 0, fewer_than_replicas = 0;
  for (const Config& c : configs) {
    int64_t count = -1;
    ASSERT_TRUE(in >> word >> count) << "reference output ended early at " << describe(c);
    ASSERT_EQ(word, "ok");
    std::vector<int64_t> want(static_cast<size_t>(count));
    for (int64_t& v : want) {
      ASSERT_TRUE(in >> v) << describe(c);
    }

    SamplerOptions o;
    o.shuffle = c.shuffle;
    o.seed = c.seed;
    o.drop_last = c.drop_last;
    o.mode = SamplerMode::kTorch;
    DistributedSampler s(c.n, c.replicas, c.rank, o);
    s.set_epoch(c.epoch);
    ASSERT_EQ(s.size(), count) << describe(c);
    std::vector<int64_t> got(static_cast<size_t>(s.size()));
    s.get(0, s.size(), got.data());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "first difference at shard index " << i << " for "
                                 << describe(c);
    }
    compared_indices += got.size();
    shuffled += c.shuffle ? 1 : 0;
    padded += (!c.drop_last && c.n % c.replicas != 0) ? 1 : 0;
    fewer_than_replicas += c.n < c.replicas ? 1 : 0;
  }
  // The mix the generator is meant to produce, so that a change to it cannot
  // quietly drop a whole class of configurations.
  EXPECT_GT(shuffled, configs.size() * 8 / 10);
  EXPECT_GT(padded, 100u);
  EXPECT_GT(fewer_than_replicas, 20u);
  std::printf("%zu indices identical\n", compared_indices);
}

// Slow suite: one permutation above 2^32/20 = 214,748,364, where PyTorch 2.6
// switched to another algorithm, compared in full with the installed torch's
// release (1.7 GB of int64 streamed from PyTorch; about a minute).
TEST(TorchParityLarge, RandpermAboveLaterReleasesThreshold) {
  Reference ref;
  ASSERT_TRUE(find_reference(&ref));
  const int64_t n = 214748370;
  const int64_t seed = 12345;
  std::string probe;
  ASSERT_TRUE(run_capture(quote(ref.python) + " " + quote(ref.script) + " probe", &probe));
  ASSERT_EQ(probe.rfind("torch ", 0), 0u) << probe;
  const std::string version = probe.substr(6, probe.find_first_of(" \n", 6) - 6);
  SamplerOptions o;
  o.seed = seed;
  o.mode = SamplerMode::kTorch;
  o.torch_release = torch_release_of(version);  // the installed torch's release
  std::printf("torch %s: randperm of release %s\n", version.c_str(), to_string(o.torch_release));
  DistributedSampler s(n, 1, 0, o);  // one replica: the shard is randperm(n) itself
  std::vector<int64_t> ours(1 << 17);
  int64_t checked = 0;
  int64_t first_difference = -1;
  std::string pending;  // bytes of a value split across reads
  const auto ran = run_streaming(
      quote(ref.python) + " " + quote(ref.script) + " randperm " + std::to_string(n) + " " +
          std::to_string(seed),
      [&](const char* data, size_t size) {
        pending.append(data, size);
        const size_t values = pending.size() / sizeof(int64_t);
        size_t done = 0;
        while (done < values && checked < n && first_difference < 0) {
          const int64_t take = std::min<int64_t>({static_cast<int64_t>(values - done),
                                                  static_cast<int64_t>(ours.size()), n - checked});
          s.get(checked, take, ours.data());
          for (int64_t k = 0; k < take; ++k) {
            int64_t theirs;
            std::memcpy(&theirs, pending.data() + (done + static_cast<size_t>(k)) * sizeof theirs,
                        sizeof theirs);
            if (theirs != ours[static_cast<size_t>(k)]) {
              first_difference = checked + k;
              break;
            }
          }
          checked += take;
          done += static_cast<size_t>(take);
        }
        pending.erase(0, done * sizeof(int64_t));
        return first_difference < 0;
      });
  ASSERT_TRUE(ran);
  EXPECT_EQ(first_difference, -1) << "randperm differs from PyTorch at index " << first_difference;
  EXPECT_EQ(checked, n) << "PyTorch sent fewer values than n";
}

}  // namespace
}  // namespace slurmddp

// Without an interpreter that imports torch there is nothing to compare with:
// the program skips (exit 77, the reason in capitals) unless the comparison is
// required here (CI=true or SLURMDDP_TORCH_TESTS=required), where it fails.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  slurmddp::Reference ref;
  const bool required = [] {
    const char* ci = std::getenv("CI");
    const char* req = std::getenv("SLURMDDP_TORCH_TESTS");
    return (ci != nullptr && std::string(ci) == "true") ||
           (req != nullptr && std::string(req) == "required");
  }();
  if (slurmddp::find_reference(&ref) &&
      std::system((slurmddp::quote(ref.python) + " -c 'import torch' 2>/dev/null").c_str()) != 0 &&
      !required) {
    std::fprintf(stderr,
                 "SKIPPING THE PYTORCH PARITY TESTS: %s cannot import torch (install Debian's "
                 "python3-torch, or set SLURMDDP_TORCH_PYTHON)\n",
                 ref.python.c_str());
    return 77;
  }
  return RUN_ALL_TESTS();
}
