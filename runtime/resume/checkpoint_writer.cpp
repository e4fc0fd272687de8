#include "resume/checkpoint_writer.h"

#include <unistd.h>

#include <cstring>
#include <future>

#include "resume/checkpoint_file.h"
#include "slurmddp/error.h"

namespace slurmddp::resume {

RankFileWriter::RankFileWriter(const std::string& dir, const std::string& name, int64_t step,
                               int rank, int world, const std::string& sampler)
    : dir_(dir), name_(name), path_(dir + "/" + name), sum_(kFnvOffset) {
  TempFile t = create_temp(dir, name);
  temp_path_ = t.path;
  fd_ = std::move(t.fd);
  buffer_.reserve(kBufferBytes);
  try {
    const std::string header = encode_header(step, rank, world, sampler.size());
    put(header.data(), header.size());
    put(sampler.data(), sampler.size());
  } catch (...) {
    abort();
    throw;
  }
  payload_offset_ = total_;
}

RankFileWriter::~RankFileWriter() {
  abort();
}

void RankFileWriter::check_open(const char* what) const {
  if (!open()) {
    throw InvalidArgument("checkpoint: failed to " + std::string(what) + " " + path_ +
                          ": the file is already " + (committed_ ? "committed" : "aborted"));
  }
}

void RankFileWriter::put(const char* data, size_t n) {
  total_ += n;
  if (buffer_.size() + n <= kBufferBytes) {
    sum_ = fnv1a64(data, n, sum_);
    buffer_.insert(buffer_.end(), data, data + n);
    return;
  }
  flush();
  if (n < kBufferBytes) {
    sum_ = fnv1a64(data, n, sum_);
    buffer_.insert(buffer_.end(), data, data + n);
    return;
  }
  // Note [Streaming checkpoints]: a large record is checksummed by a thread
  // of its own while this one writes it (FNV-1a is sequential, ~1 GB/s: as
  // slow as the write, so side by side they take the time of one).
  const uint64_t before = sum_;
  auto sum = std::async(std::launch::async, [=] { return fnv1a64(data, n, before); });
  try {
    write_all(fd_.get(), data, n, temp_path_);
  } catch (...) {
    sum.wait();
    throw;
  }
  sum_ = sum.get();
}

void RankFileWriter::write(const void* data, size_t n) {
  check_open("write");
  try {
    put(static_cast<const char*>(data), n);
  } catch (...) {
    abort();
    throw;
  }
  payload_bytes_ += n;
}

void RankFileWriter::flush() {
  check_open("flush");
  if (buffer_.empty()) return;
  try {
    write_all(fd_.get(), buffer_.data(), buffer_.size(), temp_path_);
  } catch (...) {
    abort();
    throw;
  }
  buffer_.clear();
}

void RankFileWriter::commit() {
  check_open("commit");
  try {
    const std::string line = checksum_line_start(payload_bytes_);
    put(line.data(), line.size());
    const std::string digits = checksum_digits(sum_);
    put(digits.data(), digits.size());
    flush();
  } catch (...) {
    abort();
    throw;
  }
  TempFile t;
  t.fd = std::move(fd_);
  t.path = temp_path_;
  committed_ = true;
  commit_temp(std::move(t), dir_, name_);  // removes the temporary file when it fails
}

void RankFileWriter::abort() noexcept {
  if (!open()) return;
  fd_ = FileFd();
  ::unlink(temp_path_.c_str());
  buffer_.clear();
}

}  // namespace slurmddp::resume
