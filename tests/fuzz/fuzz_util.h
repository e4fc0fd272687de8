// Small helpers shared by the fuzz targets: invariant checks that fail the run
// (libFuzzer keeps the input as a crash; a replay test fails), and ways to cut
// the input into the pieces a parser takes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace slurmddp::fuzz {

[[noreturn]] inline void violated(const char* file, int line, const char* condition,
                                  const std::string& detail) {
  std::fprintf(stderr, "%s:%d: invariant violated: %s; %s\n", file, line, condition,
               detail.c_str());
  std::abort();
}

// Checks an invariant; `detail` is evaluated only when it does not hold.
#define FUZZ_CHECK(condition, detail)                                                       \
  do {                                                                                      \
    if (!(condition)) ::slurmddp::fuzz::violated(__FILE__, __LINE__, #condition, (detail)); \
  } while (0)

inline std::string_view text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Pieces of s between separators; empty pieces are kept.
inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

// Takes fixed-size values off the front of the input, then the rest as text.
// Reading past the end gives zeros, so every input is usable.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t u8() { return n_ > 0 ? (--n_, *p_++) : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | u8();
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  bool flag() { return (u8() & 1) != 0; }
  std::string_view rest() {
    std::string_view s(reinterpret_cast<const char*>(p_), n_);
    p_ += n_;
    n_ = 0;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// An environment made of NAME=VALUE lines (a line without '=' sets NAME to "";
// a later line wins), as a lookup that never touches the process's environ.
class EnvMap {
 public:
  explicit EnvMap(std::string_view lines) {
    for (std::string_view line : split(lines, '\n')) {
      if (line.empty()) continue;
      size_t eq = line.find('=');
      std::string name(line.substr(0, eq));
      vars_[name] = eq == std::string_view::npos ? std::string() : std::string(line.substr(eq + 1));
    }
  }
  std::optional<std::string> get(const char* name) const {
    auto it = vars_.find(name);
    if (it == vars_.end()) return std::nullopt;
    return it->second;
  }
  const std::map<std::string, std::string>& vars() const { return vars_; }

 private:
  std::map<std::string, std::string> vars_;
};

}  // namespace slurmddp::fuzz
