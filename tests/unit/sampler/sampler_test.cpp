// DistributedSampler and BatchSampler: shard structure, modes, evaluation,
// resume and errors. The live comparison with PyTorch is in torch_parity_test.cpp;
// here kTorch is checked against a line-by-line transcription of PyTorch's
// DistributedSampler (reference.h), which runs without Python.
#include "slurmddp/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "reference.h"
#include "slurmddp/error.h"

namespace slurmddp {
namespace {

using sampler_test::iota_vector;
using sampler_test::naive_randperm;
using sampler_test::naive_torch_shard;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int64_t> all_of(const DistributedSampler& s) {
  return std::vector<int64_t>(s.begin(), s.end());
}

SamplerOptions opts(bool shuffle, int64_t seed, bool drop_last, SamplerMode mode,
                    bool evaluation = false) {
  SamplerOptions o;
  o.shuffle = shuffle;
  o.seed = seed;
  o.drop_last = drop_last;
  o.mode = mode;
  o.evaluation = evaluation;
  return o;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

// ---- hand-computed shards without shuffle (identical in both modes) ----

TEST(Sampler, UnshuffledShardsPadDropAndEvaluate) {
  for (SamplerMode mode : {SamplerMode::kTorch, SamplerMode::kScalable}) {
    // n = 10, R = 3: padded to 12 = [0..9, 0, 1]; rank 1 takes positions 1, 4, 7, 10.
    DistributedSampler padded(10, 3, 1, opts(false, 0, false, mode));
    EXPECT_EQ(padded.size(), 4);
    EXPECT_EQ(padded.total_size(), 12);
    EXPECT_THAT(all_of(padded), ElementsAre(1, 4, 7, 0));
    DistributedSampler last(10, 3, 2, opts(false, 0, false, mode));
    EXPECT_THAT(all_of(last), ElementsAre(2, 5, 8, 1));
    // drop_last: 9 = [0..8]; rank 1 takes 1, 4, 7.
    DistributedSampler dropped(10, 3, 1, opts(false, 0, true, mode));
    EXPECT_EQ(dropped.total_size(), 9);
    EXPECT_THAT(all_of(dropped), ElementsAre(1, 4, 7));
    // evaluation: rank 0 gets the one extra sample, nobody gets padding.
    DistributedSampler eval0(10, 3, 0, opts(false, 0, false, mode, true));
    DistributedSampler eval2(10, 3, 2, opts(false, 0, false, mode, true));
    EXPECT_THAT(all_of(eval0), ElementsAre(0, 3, 6, 9));
    EXPECT_THAT(all_of(eval2), ElementsAre(2, 5, 8));
    EXPECT_THAT(eval0.shard_sizes(), ElementsAre(4, 3, 3));
    EXPECT_EQ(eval0.total_size(), 10);
  }
}

TEST(Sampler, FewerSamplesThanReplicas) {
  // n = 2, R = 5: padding repeats [0, 1] to [0, 1, 0, 1, 0].
  EXPECT_THAT(all_of(DistributedSampler(2, 5, 3, opts(false, 0, false, SamplerMode::kScalable))),
              ElementsAre(1));
  EXPECT_THAT(all_of(DistributedSampler(2, 5, 4, opts(false, 0, false, SamplerMode::kTorch))),
              ElementsAre(0));
  EXPECT_EQ(DistributedSampler(2, 5, 0, opts(false, 0, true, SamplerMode::kTorch)).size(), 0);
  DistributedSampler eval(2, 5, 1, opts(true, 0, false, SamplerMode::kTorch, true));
  EXPECT_THAT(eval.shard_sizes(), ElementsAre(1, 1, 0, 0, 0));
  EXPECT_EQ(DistributedSampler::shard_size(2, 5, 4, opts(true, 0, false, SamplerMode::kAuto, true)),
            0);
}

TEST(Sampler, EmptyDataset) {
  for (bool drop_last : {false, true}) {
    DistributedSampler s(0, 4, 2, opts(true, 0, drop_last, SamplerMode::kTorch));
    EXPECT_EQ(s.size(), 0);
    EXPECT_EQ(s.total_size(), 0);
    EXPECT_EQ(s.begin(), s.end());
    int64_t out = -7;
    EXPECT_FALSE(s.next(&out));
    EXPECT_EQ(out, -7);
  }
}

// ---- kTorch against the transcription of PyTorch ----

TEST(Sampler, TorchModeMatchesTranscribedPytorch) {
  const int64_t sizes[] = {1, 2, 5, 17, 100, 623, 624, 625, 1000, 4097, 9001};
  for (int64_t n : sizes) {
    for (int64_t replicas : {1, 2, 3, 7, 8, 13}) {
      for (bool drop_last : {false, true}) {
        for (int64_t epoch : {0, 1, 5}) {
          const int64_t seed = 1234;
          const auto perm = naive_randperm(static_cast<uint64_t>(seed + epoch), n);
          for (int64_t rank = 0; rank < replicas; ++rank) {
            DistributedSampler s(n, replicas, rank,
                                 opts(true, seed, drop_last, SamplerMode::kTorch));
            s.set_epoch(epoch);
            ASSERT_EQ(all_of(s), naive_torch_shard(perm, replicas, rank, drop_last))
                << "n=" << n << " R=" << replicas << " rank=" << rank << " drop_last=" << drop_last
                << " epoch=" << epoch;
          }
        }
      }
    }
  }
}

TEST(Sampler, TorchModeSeedPlusEpochWrapsLikePythonLowBits) {
  // PyTorch seeds mt19937 with the low 32 bits of seed + epoch; negative values
  // count in two's complement.
  DistributedSampler a(500, 4, 1, opts(true, -3, false, SamplerMode::kTorch));
  a.set_epoch(1);  // seed + epoch = -2
  const auto perm = naive_randperm(static_cast<uint64_t>(int64_t{-2}), 500);
  EXPECT_EQ(all_of(a), naive_torch_shard(perm, 4, 1, false));
  DistributedSampler b(500, 4, 1, opts(true, 10, false, SamplerMode::kTorch));
  b.set_epoch((int64_t{1} << 32) + 5);  // same low 32 bits as seed 15
  DistributedSampler c(500, 4, 1, opts(true, 15, false, SamplerMode::kTorch));
  EXPECT_EQ(all_of(b), all_of(c));
}

TEST(Sampler, AutoModePicksTorchUpToLimitThenScalable) {
  EXPECT_EQ(DistributedSampler(kSamplerAutoTorchMaxSize, 64, 0).mode(), SamplerMode::kTorch);
  EXPECT_EQ(DistributedSampler(kSamplerAutoTorchMaxSize + 1, 64, 0).mode(), SamplerMode::kScalable);
  EXPECT_STREQ(to_string(SamplerMode::kScalable), "scalable");
}

// ---- both modes: every index exactly once, plus PyTorch's padding ----

// Rebuilds the global padded sequence G from all ranks' shards
// (G[rank + i*R] = shard_rank[i]) and checks that G[0..n) is a permutation of
// [0, n) and that the padding repeats it: G[p] == G[p mod n].
void expect_sharded_permutation(int64_t n, int64_t replicas, const SamplerOptions& o,
                                int64_t epoch) {
  std::vector<int64_t> global;
  for (int64_t rank = 0; rank < replicas; ++rank) {
    DistributedSampler s(n, replicas, rank, o);
    s.set_epoch(epoch);
    if (global.empty()) {
      global.assign(static_cast<size_t>(s.total_size()), -1);
    }
    ASSERT_EQ(s.size(), s.shard_sizes()[static_cast<size_t>(rank)]);
    for (int64_t i = 0; i < s.size(); ++i) {
      const int64_t p = rank + i * replicas;
      ASSERT_LT(p, s.total_size());
      global[static_cast<size_t>(p)] = s.at(i);
    }
  }
  const int64_t covered = o.drop_last ? static_cast<int64_t>(global.size())
                                      : std::min<int64_t>(n, static_cast<int64_t>(global.size()));
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int64_t p = 0; p < covered; ++p) {
    const int64_t v = global[static_cast<size_t>(p)];
    ASSERT_GE(v, 0);
    ASSERT_LT(v, n);
    ASSERT_EQ(seen[static_cast<size_t>(v)]++, 0)
        << "n=" << n << " R=" << replicas << ": " << v << " twice";
  }
  if (!o.drop_last) {
    // Without drop_last every index appears (evaluation: exactly once, no padding).
    for (int64_t v = 0; v < n; ++v) {
      ASSERT_EQ(seen[static_cast<size_t>(v)], 1) << "missing " << v;
    }
    for (int64_t p = n; p < static_cast<int64_t>(global.size()); ++p) {
      ASSERT_EQ(global[static_cast<size_t>(p)], global[static_cast<size_t>(p % n)])
          << "padding at " << p;
    }
  }
}

TEST(Sampler, EveryIndexExactlyOnceAcrossRanksPlusPadding) {
  for (SamplerMode mode : {SamplerMode::kTorch, SamplerMode::kScalable}) {
    for (int64_t n = 0; n <= 130; ++n) {
      for (int64_t replicas = 1; replicas <= 9; ++replicas) {
        for (int variant = 0; variant < 3; ++variant) {
          const SamplerOptions o = opts(true, 77 + n, variant == 1, mode, variant == 2);
          expect_sharded_permutation(n, replicas, o, n % 4);
          if (HasFatalFailure()) {
            return;
          }
        }
      }
    }
    for (int64_t n : {1000, 4096, 65537}) {
      for (int64_t replicas : {3, 8, 24}) {
        expect_sharded_permutation(n, replicas, opts(true, 5, false, mode), 2);
        expect_sharded_permutation(n, replicas, opts(true, 5, false, mode, true), 2);
        if (HasFatalFailure()) {
          return;
        }
      }
    }
  }
}

TEST(Sampler, EvaluationShardsDifferByAtMostOneAndSumToN) {
  for (int64_t n : {0, 1, 7, 8, 9, 1001}) {
    for (int64_t replicas : {1, 4, 8, 16}) {
      DistributedSampler s(n, replicas, 0, opts(true, 3, false, SamplerMode::kScalable, true));
      const auto sizes = s.shard_sizes();
      int64_t sum = 0;
      for (int64_t v : sizes) {
        sum += v;
      }
      EXPECT_EQ(sum, n);
      const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
      EXPECT_LE(*hi - *lo, 1);
      for (int64_t r = 0; r < replicas; ++r) {
        EXPECT_EQ(sizes[static_cast<size_t>(r)], n / replicas + (r < n % replicas ? 1 : 0));
      }
    }
  }
}

TEST(Sampler, EvaluationInTorchModeIsTorchPermutationWithoutPadding) {
  const auto perm = naive_randperm(9 + 2, 103);
  DistributedSampler s(103, 4, 3, opts(true, 9, false, SamplerMode::kTorch, true));
  s.set_epoch(2);
  std::vector<int64_t> want;
  for (int64_t p = 3; p < 103; p += 4) {
    want.push_back(perm[static_cast<size_t>(p)]);
  }
  EXPECT_EQ(all_of(s), want);
}

// ---- epochs and seeds ----

TEST(Sampler, EpochsAndSeedsReshuffle) {
  for (SamplerMode mode : {SamplerMode::kTorch, SamplerMode::kScalable}) {
    DistributedSampler s(1000, 2, 0, opts(true, 0, false, mode));
    const auto e0 = all_of(s);
    s.set_epoch(1);
    const auto e1 = all_of(s);
    s.set_epoch(0);
    EXPECT_EQ(all_of(s), e0);
    EXPECT_NE(e0, e1);
    DistributedSampler other_seed(1000, 2, 0, opts(true, 1, false, mode));
    EXPECT_NE(all_of(other_seed), e0);
    // Starting at epoch 1 is the same as moving there; the fingerprint ignores it.
    SamplerOptions at_one = opts(true, 0, false, mode);
    at_one.epoch = 1;
    DistributedSampler started(1000, 2, 0, at_one);
    EXPECT_EQ(started.epoch(), 1);
    EXPECT_EQ(all_of(started), e1);
    EXPECT_EQ(started.fingerprint(), s.fingerprint());
    // Shuffled, not the identity stride.
    DistributedSampler plain(1000, 2, 0, opts(false, 0, false, mode));
    EXPECT_NE(all_of(plain), e0);
  }
}

TEST(Sampler, ScalableModeHandlesHugeDatasetsInConstantMemory) {
  const int64_t n = 10000000000;  // 10^10: no table could hold it here
  DistributedSampler s(n, 8, 5, opts(true, 42, false, SamplerMode::kScalable));
  EXPECT_EQ(s.size(), 1250000000);
  std::vector<int64_t> chunk(4096);
  s.seek(s.size() - 4096);
  EXPECT_EQ(s.next(chunk.data(), 10000), 4096);
  for (size_t k = 0; k < chunk.size(); ++k) {
    ASSERT_GE(chunk[k], 0);
    ASSERT_LT(chunk[k], n);
    ASSERT_EQ(chunk[k], s.at(s.size() - 4096 + static_cast<int64_t>(k)));
  }
  // The largest supported size, 2^63 - 1, on one replica.
  DistributedSampler biggest(INT64_MAX, 1, 0, opts(true, 1, false, SamplerMode::kAuto));
  EXPECT_EQ(biggest.mode(), SamplerMode::kScalable);
  EXPECT_GE(biggest.at(INT64_MAX - 1), 0);
}

// ---- random access, bulk reads and iteration agree ----

TEST(Sampler, AtGetNextAndIterationAgree) {
  for (SamplerMode mode : {SamplerMode::kTorch, SamplerMode::kScalable}) {
    for (bool shuffle : {true, false}) {
      DistributedSampler s(10007, 6, 4, opts(shuffle, 8, false, mode));
      const auto iterated = all_of(s);
      ASSERT_EQ(static_cast<int64_t>(iterated.size()), s.size());
      std::vector<int64_t> bulk(static_cast<size_t>(s.size()));
      s.get(0, s.size(), bulk.data());
      EXPECT_EQ(bulk, iterated);
      std::vector<int64_t> stepped;
      int64_t v;
      while (s.next(&v)) {
        stepped.push_back(v);
      }
      EXPECT_EQ(stepped, iterated);
      for (int64_t i : {int64_t{0}, int64_t{1}, s.size() - 1}) {
        EXPECT_EQ(s[i], iterated[static_cast<size_t>(i)]);
      }
    }
  }
}

// ---- mid-epoch resume ----

TEST(Sampler, ResumeMidEpochGivesExactlyTheRemainingSequence) {
  for (SamplerMode mode : {SamplerMode::kTorch, SamplerMode::kScalable}) {
    const SamplerOptions o = opts(true, 2024, false, mode);
    DistributedSampler first(5003, 4, 2, o);
    first.set_epoch(3);
    const auto whole = all_of(first);
    for (int64_t cut : {int64_t{0}, int64_t{1}, int64_t{617}, first.size() - 1, first.size()}) {
      first.set_epoch(3);
      std::vector<int64_t> consumed(static_cast<size_t>(cut));
      ASSERT_EQ(first.next(consumed.data(), cut), cut);
      const std::string saved = first.state().to_string();

      DistributedSampler resumed(5003, 4, 2, o);  // a fresh process: epoch 0
      resumed.load_state(SamplerState::parse(saved));
      EXPECT_EQ(resumed.epoch(), 3);
      EXPECT_EQ(resumed.position(), cut);
      std::vector<int64_t> rest(static_cast<size_t>(resumed.remaining()));
      EXPECT_EQ(resumed.next(rest.data(), resumed.remaining() + 5), first.size() - cut);
      consumed.insert(consumed.end(), rest.begin(), rest.end());
      EXPECT_EQ(consumed, whole) << "cut=" << cut;
      int64_t v;
      EXPECT_FALSE(resumed.next(&v));
    }
  }
}

TEST(Sampler, StateTextRoundTripsAndRejectsGarbage) {
  SamplerState s;
  s.epoch = -4;
  s.position = 123456789012;
  s.fingerprint = 0x00ab00cd00ef0012ull;
  EXPECT_EQ(s.to_string(),
            "slurmddp-sampler v1 epoch=-4 position=123456789012 fingerprint=00ab00cd00ef0012");
  EXPECT_EQ(SamplerState::parse(s.to_string()), s);
  for (const char* bad :
       {"", "slurmddp-sampler v1 epoch=1 position=2",
        "slurmddp-sampler v2 epoch=1 position=2 fingerprint=0000000000000000",
        "slurmddp-sampler v1 epoch=x position=2 fingerprint=0000000000000000",
        "slurmddp-sampler v1 epoch=1 position=2 fingerprint=00000000000000zz",
        "slurmddp-sampler v1 epoch=1 position=2 fingerprint=0000000000000000 x"}) {
    EXPECT_THAT(error_of([&] { SamplerState::parse(bad); }),
                HasSubstr("sampler: failed to parse sampler state"))
        << bad;
  }
  EXPECT_THAT(error_of([] { SamplerState::parse("garbage here"); }),
              HasSubstr("text=\"garbage here\""));
}

TEST(Sampler, LoadStateRefusesAnotherConfigurationOrPosition) {
  DistributedSampler a(1000, 4, 1, opts(true, 1, false, SamplerMode::kTorch));
  DistributedSampler other_seed(1000, 4, 1, opts(true, 2, false, SamplerMode::kTorch));
  DistributedSampler other_rank(1000, 4, 2, opts(true, 1, false, SamplerMode::kTorch));
  DistributedSampler other_mode(1000, 4, 1, opts(true, 1, false, SamplerMode::kScalable));
  a.set_epoch(2);
  a.seek(10);
  const SamplerState state = a.state();
  for (DistributedSampler* s : {&other_seed, &other_rank, &other_mode}) {
    EXPECT_THAT(error_of([&] { s->load_state(state); }),
                HasSubstr("sampler: failed to load sampler state: it was saved by a sampler with "
                          "another configuration"));
    EXPECT_EQ(s->epoch(), 0);  // unchanged
  }
  SamplerState beyond = state;
  beyond.position = 251;  // size is 250
  EXPECT_THAT(error_of([&] { a.load_state(beyond); }), HasSubstr("position=251"));
  EXPECT_EQ(a.position(), 10);
  EXPECT_EQ(a.fingerprint(), state.fingerprint);
}

TEST(Sampler, TorchReleaseOfAVersionString) {
  EXPECT_EQ(torch_release_of("2.6.0+debian"), TorchRelease::k2_6AndLater);
  EXPECT_EQ(torch_release_of("2.10.1"), TorchRelease::k2_6AndLater);
  EXPECT_EQ(torch_release_of("3.0"), TorchRelease::k2_6AndLater);
  EXPECT_EQ(torch_release_of("2.5.1+cu124"), TorchRelease::kBefore2_6);
  EXPECT_EQ(torch_release_of("1.13.0a0"), TorchRelease::kBefore2_6);
  for (const char* bad : {"", "2", "v2.6", "two.six", "-1.0"}) {
    EXPECT_THAT(error_of([&] { torch_release_of(bad); }),
                HasSubstr(std::string("version='") + bad + "'"));
  }
  EXPECT_STREQ(to_string(TorchRelease::k2_6AndLater), "2.6+");
  EXPECT_STREQ(to_string(TorchRelease::kBefore2_6), "<2.6");
}

TEST(Sampler, BelowTheSplitEveryTorchReleaseGivesTheSameOrderAndState) {
  // Below kTorchRandpermSplit every release draws the same order: states move freely.
  SamplerOptions o = opts(true, 1, false, SamplerMode::kTorch);
  o.torch_release = TorchRelease::kBefore2_6;
  DistributedSampler before(100000, 4, 1, o);
  o.torch_release = TorchRelease::k2_6AndLater;
  DistributedSampler since(100000, 4, 1, o);
  EXPECT_EQ(before.fingerprint(), since.fingerprint());
  for (int64_t i : {0, 1, 777, 24999}) EXPECT_EQ(before.at(i), since.at(i));
}

// ---- batch sampler ----

TEST(BatchSampler, BatchesAreConsecutiveRunsOfTheShard) {
  DistributedSampler s(103, 2, 1, opts(true, 4, false, SamplerMode::kTorch));  // size 52
  const auto shard = all_of(s);
  BatchSampler keep(s, 10, false), drop(s, 10, true);
  EXPECT_EQ(keep.size(), 6);
  EXPECT_EQ(drop.size(), 5);
  EXPECT_EQ(keep.batch(5), std::vector<int64_t>(shard.begin() + 50, shard.end()));
  EXPECT_EQ(drop.batch(4), std::vector<int64_t>(shard.begin() + 40, shard.begin() + 50));
  std::vector<int64_t> joined;
  for (const auto& b : keep) {
    joined.insert(joined.end(), b.begin(), b.end());
  }
  EXPECT_EQ(joined, shard);
  int batches = 0;
  std::vector<int64_t> b;
  while (drop.next(&b)) {
    EXPECT_EQ(b.size(), 10u);
    ++batches;
  }
  EXPECT_EQ(batches, 5);
  EXPECT_EQ(drop.sampler().remaining(), 2);  // the short tail is neither returned nor consumed
  EXPECT_THAT(error_of([&] { keep.batch(6); }), HasSubstr("b=6"));
}

TEST(BatchSampler, ResumesMidEpoch) {
  BatchSampler a(DistributedSampler(1000, 3, 0, opts(true, 5, false, SamplerMode::kScalable)), 32);
  a.set_epoch(7);
  std::vector<int64_t> batch, before;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(a.next(&batch));
    before.insert(before.end(), batch.begin(), batch.end());
  }
  BatchSampler b(DistributedSampler(1000, 3, 0, opts(true, 5, false, SamplerMode::kScalable)), 32);
  b.load_state(a.state());
  EXPECT_EQ(b.sampler().epoch(), 7);
  std::vector<std::vector<int64_t>> rest_a, rest_b;
  while (a.next(&batch)) {
    rest_a.push_back(batch);
  }
  while (b.next(&batch)) {
    rest_b.push_back(batch);
  }
  EXPECT_EQ(rest_a.size(), 7u);  // 334 indices: 4 batches done, 7 left (the last has 14)
  EXPECT_EQ(rest_b, rest_a);
  EXPECT_EQ(rest_b.back().size(), 14u);
  b.set_epoch(7);
  EXPECT_EQ(b.batch(3), std::vector<int64_t>(before.begin() + 96, before.end()));
}

// ---- bad input names the value ----

TEST(Sampler, BadInputNamesTheValue) {
  EXPECT_THAT(
      error_of([] { DistributedSampler(-5, 2, 0); }),
      HasSubstr("sampler: failed to create DistributedSampler: dataset size must be >= 0; n=-5"));
  EXPECT_THAT(error_of([] { DistributedSampler(10, 0, 0); }), HasSubstr("num_replicas=0"));
  EXPECT_THAT(error_of([] { DistributedSampler(10, -3, 0); }), HasSubstr("num_replicas=-3"));
  EXPECT_THAT(error_of([] { DistributedSampler(10, 8, 8); }), HasSubstr("rank=8, num_replicas=8"));
  EXPECT_THAT(error_of([] { DistributedSampler(10, 8, -1); }), HasSubstr("rank=-1"));
  EXPECT_THAT(
      error_of([] { DistributedSampler(10, 2, 0, opts(true, 0, true, SamplerMode::kAuto, true)); }),
      HasSubstr("drop_last=true, evaluation=true"));
  EXPECT_THAT(error_of([] {
                DistributedSampler(kSamplerTorchMaxSize + 1, 2, 0,
                                   opts(true, 0, false, SamplerMode::kTorch));
              }),
              HasSubstr("n=4294967296, max=4294967295"));
  EXPECT_THAT(error_of([] { DistributedSampler(INT64_MAX, 2, 0); }),
              HasSubstr("n=9223372036854775807, num_replicas=2"));
  EXPECT_THAT(
      error_of([] { BatchSampler(DistributedSampler(10, 1, 0), 0); }),
      HasSubstr("sampler: failed to create BatchSampler: batch size must be >= 1; batch_size=0"));
  EXPECT_THAT(error_of([] { BatchSampler(DistributedSampler(10, 1, 0), -2); }),
              HasSubstr("batch_size=-2"));
  DistributedSampler s(10, 3, 1);
  EXPECT_THAT(error_of([&] { s.at(4); }), HasSubstr("i=4"));
  EXPECT_THAT(error_of([&] { s.at(-1); }), HasSubstr("i=-1"));
  EXPECT_THAT(error_of([&] { s.seek(5); }), HasSubstr("position=5"));
  int64_t out[4];
  EXPECT_THAT(error_of([&] { s.get(2, 3, out); }), HasSubstr("first=2, count=3"));
  EXPECT_THAT(error_of([&] { s.next(out, -1); }), HasSubstr("max=-1"));
  // Errors derive from the runtime's base.
  EXPECT_THROW(DistributedSampler(-1, 1, 0), Error);
}

}  // namespace
}  // namespace slurmddp
