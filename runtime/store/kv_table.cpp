#include "store/kv_table.h"

#include <charconv>

#include "common/quote.h"
#include "slurmddp/error.h"

namespace slurmddp::store {

using common::quote;

void validate_key(const char* op, const std::string& key) {
  if (key.empty()) {
    throw InvalidArgument(std::string("store: failed to ") + op + ": the key is empty");
  }
  if (key.size() > kMaxKeySize) {
    throw InvalidArgument(std::string("store: failed to ") + op + " key " + quote(key) +
                          ": the key is too long; size=" + std::to_string(key.size()) +
                          ", limit=" + std::to_string(kMaxKeySize));
  }
}

void validate_value(const char* op, const std::string& key, size_t value_size) {
  if (value_size > kMaxValueSize) {
    throw InvalidArgument(std::string("store: failed to ") + op + " key " + quote(key) +
                          ": the value is too large; size=" + std::to_string(value_size) +
                          ", limit=" + std::to_string(kMaxValueSize));
  }
}

void validate_keys(const char* op, const std::vector<std::string>& keys) {
  for (const auto& k : keys) validate_key(op, k);
}

Value KvTable::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second;
}

void KvTable::set(const std::string& key, Value value) {
  auto [it, inserted] = map_.try_emplace(key);
  if (inserted) {
    payload_bytes_ += key.size();
  } else {
    payload_bytes_ -= it->second->size();
  }
  payload_bytes_ += value->size();
  it->second = std::move(value);
}

int64_t KvTable::add(const std::string& key, int64_t delta) {
  int64_t current = 0;
  if (Value v = find(key)) {
    const char* first = reinterpret_cast<const char*>(v->data());
    const char* last = first + v->size();
    auto [ptr, ec] = std::from_chars(first, last, current);
    if (v->empty() || ec != std::errc() || ptr != last) {
      throw InvalidArgument(
          "store: failed to add to key " + quote(key) +
          ": its value is not a decimal integer; value=" + quote(std::string(first, last)));
    }
  }
  int64_t result = 0;
  if (__builtin_add_overflow(current, delta, &result)) {
    throw InvalidArgument("store: failed to add to key " + quote(key) +
                          ": the counter would overflow; value=" + std::to_string(current) +
                          ", delta=" + std::to_string(delta));
  }
  std::string text = std::to_string(result);
  set(key, std::make_shared<const Bytes>(text.begin(), text.end()));
  return result;
}

Value KvTable::compare_set(const std::string& key, const Bytes& expected, Value desired,
                           bool* changed) {
  *changed = false;
  Value current = find(key);
  bool matches = current ? *current == expected : expected.empty();
  if (!matches) return current ? current : std::make_shared<const Bytes>();
  set(key, desired);
  *changed = true;
  return desired;
}

std::vector<uint32_t> KvTable::missing(const std::vector<std::string>& keys) const {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!contains(keys[i])) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

std::string format_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string out = "[";
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i != 0) out += ", ";
    out += quote(keys[i]);
  }
  if (keys.size() > kShown) out += ", ... and " + std::to_string(keys.size() - kShown) + " more";
  return out + "]";
}

std::string timeout_message(const char* op, const std::vector<std::string>& keys,
                            const std::vector<std::string>& missing, Millis timeout,
                            const std::string& where) {
  std::string object =
      keys.size() == 1 ? "key " + quote(keys[0]) : std::to_string(keys.size()) + " keys";
  std::string msg = std::string("store: failed to ") + op + " " + object + ": timed out after " +
                    std::to_string(timeout.count()) + " ms; missing=" + format_keys(missing);
  if (!where.empty()) msg += "; " + where;
  return msg;
}

}  // namespace slurmddp::store
