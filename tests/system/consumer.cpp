#include "consumer.h"

#include <gtest/gtest.h>

namespace slurmddp::systest {

namespace {

const char* const kMain = R"(
#include <cstdio>
#include <cstdlib>
#include <vector>

int main() {
  const slurmddp::ProcessIdentity id = slurmddp::identity_from_environment();
  slurmddp::SamplerOptions o;
  o.shuffle = false;
  slurmddp::DistributedSampler sampler(20, id.world_size, id.rank, o);
  std::vector<long long> idx;
  for (int64_t i : sampler) idx.push_back(i);
  std::printf("consumer rank=%d world=%d local_rank=%d local_world=%d node_rank=%d indices=",
              id.rank, id.world_size, id.local_rank, id.local_world_size, id.node_rank);
  for (size_t i = 0; i < idx.size(); ++i) std::printf("%s%lld", i ? "," : "", idx[i]);
  // the rendezvous (the step's token) and a collective: the sum of rank + 1
  auto pg = slurmddp::init();
  std::vector<double> x{static_cast<double>(id.rank + 1)};
  pg->comm()->allreduce(x)->wait();
  std::printf(" sum=%g backend=%s\n", x[0], slurmddp::to_string(pg->comm()->backend()));
  return 0;
}
)";

}  // namespace

std::string consumer_source(const std::vector<std::string>& headers) {
  std::string src = "// includes every public header\n";
  for (const auto& h : headers) src += "#include <slurmddp/" + h + ">\n";
  return src + kMain;
}

void expect_consumer_lines(const Result& r, int world, int per_node) {
  auto consumers = parse_lines(r.out, "consumer ");
  ASSERT_EQ(consumers.size(), static_cast<size_t>(world)) << r.out << r.err;
  const int per_rank = (20 + world - 1) / world;
  for (const auto& c : consumers) {
    const int rank = std::stoi(c.at("rank"));
    EXPECT_EQ(c.at("world"), std::to_string(world));
    EXPECT_EQ(c.at("local_world"), std::to_string(per_node));
    EXPECT_EQ(c.at("local_rank"), std::to_string(rank % per_node));
    EXPECT_EQ(c.at("node_rank"), std::to_string(rank / per_node));
    std::string want;
    for (int k = 0; k < per_rank; ++k) {
      const int i = (rank + k * world) % 20;  // past the end: padded from the start
      want += (k != 0 ? "," : "") + std::to_string(i);
    }
    EXPECT_EQ(c.at("indices"), want) << "rank " << rank;
    EXPECT_EQ(c.at("sum"), std::to_string(world * (world + 1) / 2)) << "rank " << rank;
  }
}

}  // namespace slurmddp::systest
