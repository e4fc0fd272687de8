// Rank files on disk: the streaming writer and reader (Note [Streaming
// checkpoints]), private temporary files and directories (Note [Planted
// files]), and reasons from whatever reading throws.
#include "resume/checkpoint_io.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>

#include "resume/checkpoint_file.h"
#include "resume/checkpoint_reader.h"
#include "resume/checkpoint_writer.h"
#include "resume/refusal.h"
#include "slurmddp/error.h"

namespace slurmddp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string fresh(const std::string& name) {
  std::string d = ::testing::TempDir() + "/ckpt-io-" + name + "-" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

size_t entries(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().empty() ? 0 : 1;
  return n;
}

resume::RankFile sample_with(size_t payload_bytes) {
  resume::RankFile f;
  f.step = 42;
  f.rank = 1;
  f.world = 3;
  f.sampler = "slurmddp-sampler v1 epoch=0 position=42 fingerprint=00000000000000ab";
  f.payload.resize(payload_bytes);
  for (size_t i = 0; i < payload_bytes; ++i) f.payload[i] = static_cast<uint8_t>(i * 131 + 7);
  return f;
}

// The writer's file is the in-memory encoder's, byte for byte, whatever the
// sizes of the writes (small ones gathered, large ones straight through).
TEST(RankFileWriter, StreamsTheSameBytesAsTheEncoder) {
  const std::string dir = fresh("writer");
  const resume::RankFile f = sample_with(3 * resume::RankFileWriter::kBufferBytes + 12345);
  {
    resume::RankFileWriter w(dir, "rank-1.ckpt", f.step, f.rank, f.world, f.sampler);
    const auto* p = f.payload.data();
    size_t at = 0;
    for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{5000},
                     resume::RankFileWriter::kBufferBytes + 3, size_t{64}}) {
      w.write(p + at, n);
      at += n;
    }
    w.write(p + at, f.payload.size() - at);
    EXPECT_EQ(w.payload_bytes(), f.payload.size());
    EXPECT_FALSE(fs::exists(dir + "/rank-1.ckpt"));  // nothing in place before commit
    w.commit();
    EXPECT_THAT(error_of([&] { w.write("x", 1); }), HasSubstr("already committed"));
  }
  EXPECT_EQ(contents(dir + "/rank-1.ckpt"), resume::encode(f));
  EXPECT_EQ(mode_of(dir + "/rank-1.ckpt"), 0600u);
  EXPECT_EQ(entries(dir), 1u);  // no temporary file left

  resume::RankFileReader r(dir + "/rank-1.ckpt", true);
  EXPECT_EQ(r.layout().version, 2);
  EXPECT_EQ(r.layout().step, 42);
  EXPECT_EQ(r.layout().rank, 1);
  EXPECT_EQ(r.layout().world, 3);
  EXPECT_EQ(r.sampler(), f.sampler);
  std::vector<uint8_t> back(r.layout().payload_bytes);
  r.read_at(r.layout().payload_offset, back.data(), back.size());
  EXPECT_EQ(back, f.payload);
}

TEST(RankFileWriter, WithoutCommitNothingIsLeft) {
  const std::string dir = fresh("abort");
  {
    resume::RankFileWriter w(dir, "rank-0.ckpt", 1, 0, 1, "");
    w.write("payload", 7);
    w.flush();
    EXPECT_TRUE(fs::exists(w.temp_path()));
    EXPECT_EQ(mode_of(w.temp_path()), 0600u);
  }  // dropped
  EXPECT_EQ(entries(dir), 0u);
  resume::RankFileWriter w(dir, "rank-0.ckpt", 1, 0, 1, "");
  w.abort();
  EXPECT_THAT(error_of([&] { w.commit(); }), HasSubstr("already aborted"));
  EXPECT_EQ(entries(dir), 0u);
}

// Every rank checks a file's structure; the checksum pass is the verifier's.
TEST(RankFileReader, StructureEverywhereChecksumWhenVerifying) {
  const std::string dir = fresh("reader");
  const std::string path = dir + "/rank-0.ckpt";
  std::string good = resume::encode(sample_with(10000));
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 1);
  std::ofstream(path, std::ios::binary) << flipped;
  EXPECT_NO_THROW(resume::RankFileReader(path, false));
  EXPECT_THAT(error_of([&] { resume::RankFileReader(path, true); }),
              HasSubstr("checkpoint " + path + " is damaged: checksum mismatch"));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() - 100);
  for (bool verify : {false, true}) {
    EXPECT_THAT(error_of([&] { resume::RankFileReader(path, verify); }),
                HasSubstr("checkpoint " + path + " is damaged: truncated"))
        << verify;
  }
  // a version 1 file reads the same way
  std::ofstream(path, std::ios::binary | std::ios::trunc) << resume::encode_v1(sample_with(10));
  resume::RankFileReader v1(path, true);
  EXPECT_EQ(v1.layout().version, 1);
  EXPECT_EQ(v1.layout().payload_bytes, 10u);
  EXPECT_THAT(error_of([&] { resume::RankFileReader(dir + "/rank-9.ckpt", false); }),
              HasSubstr("checkpoint " + dir +
                        "/rank-9.ckpt is missing or unreadable (No such "
                        "file or directory)"));
  EXPECT_THAT(error_of([&] { resume::RankFileReader(dir, false); }),
              HasSubstr("is not a regular file"));
}

// Note [Planted files]: a symlink at a temporary name is never followed.
TEST(PlantedFiles, ASymlinkAtTheNameIsNotFollowed) {
  const std::string dir = fresh("planted");
  const std::string victim = dir + "/victim";
  std::ofstream(victim) << "the user's file";
  const std::string link = dir + "/.rank-0.ckpt.tmp.planted";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  EXPECT_THAT(error_of([&] { resume::create_private_file(link); }),
              HasSubstr("checkpoint: failed to create " + link + ": File exists"));
  const std::string dangling = dir + "/.LATEST.tmp.dangling";
  ASSERT_EQ(::symlink((dir + "/made-through-the-link").c_str(), dangling.c_str()), 0);
  EXPECT_THAT(error_of([&] { resume::create_private_file(dangling); }), HasSubstr("File exists"));
  EXPECT_FALSE(fs::exists(dir + "/made-through-the-link"));
  EXPECT_EQ(contents(victim), "the user's file");

  // the final name a symlink: rename replaces the link, not its target
  ASSERT_EQ(::symlink(victim.c_str(), (dir + "/LATEST").c_str()), 0);
  resume::write_atomic(dir, "LATEST", "step-3\n");
  EXPECT_EQ(contents(victim), "the user's file");
  EXPECT_FALSE(fs::is_symlink(dir + "/LATEST"));
  EXPECT_EQ(contents(dir + "/LATEST"), "step-3\n");
}

TEST(PlantedFiles, FilesAre0600AndNewDirectories0700WhateverTheUmask) {
  const std::string dir = fresh("modes");
  const mode_t old = ::umask(0);
  resume::make_private_dirs(dir + "/job-1/step-2");
  resume::write_atomic(dir + "/job-1/step-2", "COMPLETE", "complete\n");
  resume::TempFile a = resume::create_temp(dir, "x");
  resume::TempFile b = resume::create_temp(dir, "x");
  ::umask(old);
  EXPECT_EQ(mode_of(dir + "/job-1"), 0700u);
  EXPECT_EQ(mode_of(dir + "/job-1/step-2"), 0700u);
  EXPECT_EQ(mode_of(dir + "/job-1/step-2/COMPLETE"), 0600u);
  EXPECT_EQ(mode_of(a.path), 0600u);
  EXPECT_NE(a.path, b.path);  // a new name every time
  EXPECT_EQ(a.path.rfind(dir + "/.x.tmp." + std::to_string(::getpid()) + ".", 0), 0u);
  // a directory that exists keeps its mode
  fs::create_directories(dir + "/shared");
  fs::permissions(dir + "/shared", fs::perms(0770));
  resume::make_private_dirs(dir + "/shared/");
  EXPECT_EQ(mode_of(dir + "/shared"), 0770u);
  std::ofstream(dir + "/file") << "x";
  EXPECT_THAT(error_of([&] { resume::make_private_dirs(dir + "/file/step-1"); }),
              HasSubstr(dir + "/file exists and is not a directory"));
}

// Whatever reading a checkpoint throws becomes this rank's reason (the
// load's agreement then tells every rank instead of leaving them waiting).
TEST(Refusal, EveryExceptionIsAReasonNamingTheRank) {
  EXPECT_EQ(resume::refusal_of([] {}, 1, "/d/step-4"), "");
  EXPECT_EQ(resume::refusal_of([] { throw Error("checkpoint /d/x is damaged: y"); }, 1, "/d"),
            "checkpoint /d/x is damaged: y");
  EXPECT_EQ(resume::refusal_of([] { throw std::bad_alloc(); }, 1, "/d/step-4"),
            "checkpoint: rank 1 failed to read /d/step-4: std::bad_alloc (std::bad_alloc)");
  EXPECT_EQ(resume::refusal_of([] { throw std::length_error("vector::reserve"); }, 2, "/d"),
            "checkpoint: rank 2 failed to read /d: vector::reserve (std::length_error)");
  EXPECT_EQ(resume::refusal_of([] { throw 7; }, 0, "/d"),
            "checkpoint: rank 0 failed to read /d: an exception of an unknown type");
}

}  // namespace
}  // namespace slurmddp
