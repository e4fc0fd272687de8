// An uninitialized array of trivially copyable values backed by its own
// anonymous mapping, released on destruction. Large buffers ask the kernel for
// transparent huge pages: the PyTorch-parity shuffle touches one random word
// per step across the whole array, and 2 MiB pages cut its TLB misses.
#pragma once

#include <cstddef>
#include <type_traits>

namespace slurmddp::sampler {

class RawMapping {
 public:
  RawMapping() = default;
  explicit RawMapping(size_t bytes);  // throws Error when the mapping fails
  ~RawMapping();
  RawMapping(RawMapping&& other) noexcept;
  RawMapping& operator=(RawMapping&& other) noexcept;
  RawMapping(const RawMapping&) = delete;
  RawMapping& operator=(const RawMapping&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
class BigBuffer {
  static_assert(std::is_trivially_copyable<T>::value, "BigBuffer holds plain values");

 public:
  BigBuffer() = default;
  explicit BigBuffer(size_t count) : map_(count * sizeof(T)), count_(count) {}

  T* data() { return static_cast<T*>(map_.data()); }
  const T* data() const { return static_cast<const T*>(map_.data()); }
  size_t size() const { return count_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }

 private:
  RawMapping map_;
  size_t count_ = 0;
};

}  // namespace slurmddp::sampler
