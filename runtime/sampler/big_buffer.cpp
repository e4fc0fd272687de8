#include "sampler/big_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "slurmddp/error.h"

namespace slurmddp::sampler {
namespace {
// Below this size a huge page would waste more than it saves.
constexpr size_t kHugePageWorthwhile = size_t{8} << 20;
}  // namespace

RawMapping::RawMapping(size_t bytes) {
  if (bytes == 0) {
    return;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw Error("sampler: failed to allocate permutation buffer: " +
                std::string(std::strerror(err)) + "; bytes=" + std::to_string(bytes));
  }
#ifdef MADV_HUGEPAGE
  // Advisory only: without huge pages the buffer still works, just slower.
  if (bytes >= kHugePageWorthwhile) {
    (void)::madvise(p, bytes, MADV_HUGEPAGE);
  }
#endif
  data_ = p;
  bytes_ = bytes;
}

RawMapping::~RawMapping() {
  if (data_ != nullptr) {
    ::munmap(data_, bytes_);
  }
}

RawMapping::RawMapping(RawMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

RawMapping& RawMapping::operator=(RawMapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) {
      ::munmap(data_, bytes_);
    }
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace slurmddp::sampler
