// An optional capability of a Store backend: several requests in flight from
// one caller. store_barrier uses it to join a barrier in one round trip
// instead of two; backends without it get the plain set and add.
#pragma once

#include <cstdint>
#include <string>

#include "slurmddp/store.h"

namespace slurmddp::store {

class Pipelined {
 public:
  virtual ~Pipelined() = default;
  // Exactly set(set_key, value) followed by add(add_key, delta), applied in
  // that order, both sent before either reply is awaited; returns add's result.
  virtual int64_t set_then_add(const std::string& set_key, const Bytes& value,
                               const std::string& add_key, int64_t delta) = 0;
};

}  // namespace slurmddp::store
