// A Store that passes every request to another one and lets a test see each
// request first (count them, signal the moment a key is read, ...): override
// before().
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "slurmddp/store.h"

namespace slurmddp::support {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}

  void set(const std::string& k, const Bytes& v) override {
    before("set", {k});
    inner_->set(k, v);
  }
  Bytes get(const std::string& k, Millis t) override {
    before("get", {k});
    return inner_->get(k, t);
  }
  int64_t add(const std::string& k, int64_t d) override {
    before("add", {k});
    return inner_->add(k, d);
  }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    before("compare_set", {k});
    return inner_->compare_set(k, e, d);
  }
  void wait(const std::vector<std::string>& k, Millis t) override {
    before("wait", k);
    inner_->wait(k, t);
  }
  bool check(const std::vector<std::string>& k) override {
    before("check", k);
    return inner_->check(k);
  }
  bool erase(const std::string& k) override {
    before("erase", {k});
    return inner_->erase(k);
  }

 protected:
  // Called before each request is passed on, from the requesting thread.
  virtual void before(const char* op, const std::vector<std::string>& keys) = 0;

 private:
  std::shared_ptr<Store> inner_;
};

}  // namespace slurmddp::support
