#include "comm/gloo_store.h"

#include <utility>

namespace slurmddp::comm {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<slurmddp::Store> store, std::string prefix,
                                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  store_->set(prefix_ + key, Bytes(data.begin(), data.end()));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  const Bytes value = store_->get(prefix_ + key, timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  store_->wait(prefixed(keys), timeout_);
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout here; never wait longer than ours.
  const auto t = (timeout.count() <= 0 || timeout > timeout_) ? timeout_ : timeout;
  store_->wait(prefixed(keys), t);
}

std::vector<std::string> GlooStoreAdapter::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefix_ + k);
  return out;
}

}  // namespace slurmddp::comm
