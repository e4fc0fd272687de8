// Reading one rank's checkpoint file without holding it in memory (Note
// [Checkpoint layout], Note [Streaming checkpoints]): its structure from a few
// hundred bytes, its checksum in one streaming pass, its parts by offset.
#pragma once

#include <cstdint>
#include <string>

#include "resume/checkpoint_file.h"
#include "resume/checkpoint_io.h"

namespace slurmddp::resume {

class RankFileReader {
 public:
  // Opens `path` and checks its structure: magic, checksum line, header, and
  // that the sizes add up to the file's (every rank does this for every file
  // it uses). With `verify`, also the checksum over the whole file, streamed in
  // chunks, before the header is judged: a flipped byte anywhere is named a
  // checksum mismatch. Throws Error "checkpoint <path> is missing or
  // unreadable (<errno text>)..." or "checkpoint <path> is damaged: ...".
  RankFileReader(const std::string& path, bool verify);

  const Layout& layout() const { return layout_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }
  // The sampler state (sampler_bytes from sampler_offset).
  std::string sampler() const;
  // Reads n bytes at `offset`, all of them (throws Error on a short file).
  void read_at(uint64_t offset, void* buf, size_t n) const;

 private:
  std::string path_;
  FileFd fd_;
  Layout layout_;
};

// FNV-1a 64 over [0, n) of fd, read in chunks of `chunk` bytes.
uint64_t checksum_of(int fd, uint64_t n, const std::string& path, size_t chunk = 4 << 20);

}  // namespace slurmddp::resume
