// Gloo's rendezvous store interface implemented over a slurmddp::Store, with
// every key under a prefix and every blocking call bounded by a timeout.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "slurmddp/store.h"

namespace slurmddp::comm {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  // Keys become prefix + key (pass a prefix ending in '/').
  GlooStoreAdapter(std::shared_ptr<slurmddp::Store> store, std::string prefix,
                   std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key exists (Gloo relies on that), at most the timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;

  std::shared_ptr<slurmddp::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace slurmddp::comm
