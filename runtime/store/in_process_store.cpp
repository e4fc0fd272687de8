// The in-process backend: one KvTable behind a mutex; blocked get/wait sleep on
// a condition variable that every change of the table signals.
#include <condition_variable>
#include <mutex>

#include "slurmddp/error.h"
#include "slurmddp/store.h"
#include "store/kv_table.h"

namespace slurmddp {

namespace {

using Clock = std::chrono::steady_clock;

class InProcessStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    store::validate_key("set", key);
    store::validate_value("set", key, value.size());
    auto v = std::make_shared<const Bytes>(value);
    {
      std::lock_guard<std::mutex> lock(mu_);
      table_.set(key, std::move(v));
    }
    changed_.notify_all();
  }

  Bytes get(const std::string& key, Millis timeout) override {
    store::validate_key("get", key);
    timeout = store::clamp_timeout(timeout);
    std::unique_lock<std::mutex> lock(mu_);
    store::Value v;
    bool found = changed_.wait_until(lock, Clock::now() + timeout,
                                     [&] { return (v = table_.find(key)) != nullptr; });
    if (!found) {
      throw TimeoutError(store::timeout_message("get", {key}, {key}, timeout, ""));
    }
    return *v;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    store::validate_key("add", key);
    int64_t result = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      result = table_.add(key, delta);
    }
    changed_.notify_all();
    return result;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    store::validate_key("compare_set", key);
    store::validate_value("compare_set", key, expected.size());
    store::validate_value("compare_set", key, desired.size());
    auto d = std::make_shared<const Bytes>(desired);
    bool changed = false;
    store::Value result;
    {
      std::lock_guard<std::mutex> lock(mu_);
      result = table_.compare_set(key, expected, std::move(d), &changed);
    }
    if (changed) changed_.notify_all();
    return *result;
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    store::validate_keys("wait for", keys);
    timeout = store::clamp_timeout(timeout);
    std::unique_lock<std::mutex> lock(mu_);
    bool all = changed_.wait_until(lock, Clock::now() + timeout,
                                   [&] { return table_.missing(keys).empty(); });
    if (!all) {
      std::vector<std::string> missing;
      for (uint32_t i : table_.missing(keys)) missing.push_back(keys[i]);
      throw TimeoutError(store::timeout_message("wait for", keys, missing, timeout, ""));
    }
  }

  bool check(const std::vector<std::string>& keys) override {
    store::validate_keys("check", keys);
    std::lock_guard<std::mutex> lock(mu_);
    return table_.missing(keys).empty();
  }

  bool erase(const std::string& key) override {
    store::validate_key("erase", key);
    std::lock_guard<std::mutex> lock(mu_);
    return table_.erase(key);
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  store::KvTable table_;
};

}  // namespace

std::shared_ptr<Store> make_in_process_store() {
  return std::make_shared<InProcessStore>();
}

}  // namespace slurmddp
