#include "common/quote.h"

#include <cstdio>

namespace slurmddp::common {

std::string quote(std::string_view value) {
  constexpr size_t kMax = 80;
  std::string out = "'";
  size_t n = 0;
  for (char c : value) {
    if (n++ == kMax) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\'' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string optional_text(const std::optional<int>& value) {
  return value ? std::to_string(*value) : std::string("unset");
}

}  // namespace slurmddp::common
