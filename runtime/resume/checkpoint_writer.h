// Writing one rank's checkpoint file (version 2 of Note [Checkpoint layout])
// as its payload arrives, without holding it in memory (Note [Streaming
// checkpoints]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "resume/checkpoint_io.h"

namespace slurmddp::resume {

// Note [Streaming checkpoints]
//   A payload of gigabytes (a model and its optimizer state) is written the
//   way it is produced: torch.save hands the Python Checkpointer one record at
//   a time, each record goes through the checksum and into a private
//   temporary file (Note [Planted files]) and is dropped; nothing holds the
//   whole payload but the model itself. Hence version 2 of the file: the
//   payload's size, known only at the end, is in the checksum line, and the
//   checksum covers that line up to its digits. commit() writes the line,
//   fsyncs, renames into place and fsyncs the directory; a writer dropped
//   without commit() removes its temporary file. Loading is the reverse: the
//   structure of a file (magic, header, checksum line, sizes that add up to
//   the file's) costs a few hundred bytes and every rank checks it for every
//   file it uses; the checksum costs a pass over the file, and is verified by
//   the rank that wrote it (rank 0 for rank 0's payload, which with rank-0
//   scope every rank loads: the load's agreement spreads its verdict, so the
//   payload is read for its checksum once, not once per rank). The payload
//   then reaches torch.load as a window onto the file, read where it lies.
//   Small records are gathered into a buffer of kBufferBytes before a write;
//   larger ones are written from where they lie while another thread
//   checksums them.
class RankFileWriter {
 public:
  static constexpr size_t kBufferBytes = 1 << 20;

  // Creates the temporary file in `dir` for <dir>/<name> and writes the header
  // and the sampler state. Throws Error naming the path.
  RankFileWriter(const std::string& dir, const std::string& name, int64_t step, int rank, int world,
                 const std::string& sampler);
  RankFileWriter(const RankFileWriter&) = delete;
  RankFileWriter& operator=(const RankFileWriter&) = delete;
  ~RankFileWriter();  // abort() unless committed

  // Appends payload bytes. Throws Error naming the temporary file (a full
  // disk); InvalidArgument after commit() or abort().
  void write(const void* data, size_t n);
  // Hands the buffered bytes to the file (so that fd() reads all of them back).
  void flush();
  // The checksum line, fsync, rename into place, fsync of the directory.
  void commit();
  // Removes the temporary file; nothing reaches <dir>/<name>.
  void abort() noexcept;

  bool open() const { return fd_.get() >= 0; }
  uint64_t payload_offset() const { return payload_offset_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  // The temporary file, open read-write (for reading the payload back before commit()).
  int fd() const { return fd_.get(); }
  const std::string& temp_path() const { return temp_path_; }
  const std::string& path() const { return path_; }

 private:
  void put(const char* data, size_t n);  // through the checksum, into the buffer or file
  void check_open(const char* what) const;

  std::string dir_;
  std::string name_;
  std::string path_;
  std::string temp_path_;
  FileFd fd_;
  std::vector<char> buffer_;
  uint64_t sum_;
  uint64_t total_ = 0;  // bytes put so far
  uint64_t payload_offset_ = 0;
  uint64_t payload_bytes_ = 0;
  bool committed_ = false;
};

}  // namespace slurmddp::resume
