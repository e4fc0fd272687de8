#include "resume/checkpoint_file.h"

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <limits>

#include "slurmddp/error.h"

namespace slurmddp::resume {

namespace {

constexpr const char* kMagicV1 = "slurmddp-checkpoint v1\n";
constexpr const char* kMagicV2 = "slurmddp-checkpoint v2\n";
constexpr size_t kMagic = 23;       // both magics' length
constexpr size_t kTrailerV1 = 26;   // "\nfnv1a64=" (9) + 16 hex + "\n"
constexpr size_t kDigitsLine = 17;  // 16 hex + "\n": what the checksum does not cover
constexpr const char* kPayloadKey = "\npayload_bytes=";

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

Error damaged(const std::string& name, const std::string& what) {
  return Error("checkpoint " + name + " is damaged: " + what +
               "; delete it (or its step directory) to resume from an older checkpoint");
}

// Exactly 16 lowercase hex digits (as hex16 writes them): a digit flipped to
// its uppercase or to anything else is damage, not another spelling.
bool parse_hex16(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// Unsigned decimal as to_string writes it (no sign, no leading zeros), at most `max`.
bool parse_decimal(const std::string& s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 20 || (s.size() > 1 && s[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const auto d = static_cast<uint64_t>(c - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// "k1=v1 k2=v2 ..." with exactly these keys in this order.
bool parse_fields(const std::string& line, const std::vector<const char*>& keys,
                  const std::vector<uint64_t>& max, std::vector<uint64_t>* values) {
  size_t at = 0;
  values->assign(keys.size(), 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string key = std::string(keys[i]) + "=";
    if (line.compare(at, key.size(), key) != 0) return false;
    at += key.size();
    size_t end = i + 1 < keys.size() ? line.find(' ', at) : line.size();
    if (end == std::string::npos) return false;
    if (!parse_decimal(line.substr(at, end - at), max[i], &(*values)[i])) return false;
    at = end + 1;
  }
  return true;
}

std::string encode_with(const char* magic, const std::string& header_fields, const RankFile& f) {
  std::string out = magic;
  out += header_fields;
  out += f.sampler;
  out.append(reinterpret_cast<const char*>(f.payload.data()), f.payload.size());
  return out;
}

}  // namespace

uint64_t fnv1a64(const char* data, size_t n, uint64_t h) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

std::string encode_header(int64_t step, int rank, int world, uint64_t sampler_bytes) {
  return std::string(kMagicV2) + "step=" + std::to_string(step) + " rank=" + std::to_string(rank) +
         " world=" + std::to_string(world) + " sampler_bytes=" + std::to_string(sampler_bytes) +
         "\n";
}

std::string checksum_line_start(uint64_t payload_bytes) {
  return kPayloadKey + std::to_string(payload_bytes) + " fnv1a64=";
}

std::string checksum_digits(uint64_t sum) {
  return hex16(sum) + "\n";
}

std::string encode(const RankFile& f) {
  std::string out = encode_header(f.step, f.rank, f.world, f.sampler.size());
  out += f.sampler;
  out.append(reinterpret_cast<const char*>(f.payload.data()), f.payload.size());
  out += checksum_line_start(f.payload.size());
  out += checksum_digits(fnv1a64(out.data(), out.size()));
  return out;
}

std::string encode_v1(const RankFile& f) {
  std::string out =
      encode_with(kMagicV1,
                  "step=" + std::to_string(f.step) + " rank=" + std::to_string(f.rank) +
                      " world=" + std::to_string(f.world) +
                      " sampler_bytes=" + std::to_string(f.sampler.size()) +
                      " payload_bytes=" + std::to_string(f.payload.size()) + "\n",
                  f);
  uint64_t sum = fnv1a64(out.data(), out.size());
  out += "\nfnv1a64=" + hex16(sum) + "\n";
  return out;
}

Layout read_checksum_line(const std::string& name, const std::string& head, const std::string& tail,
                          uint64_t file_bytes) {
  Layout l;
  l.file_bytes = file_bytes;
  const std::string size_text = std::to_string(file_bytes) + " bytes";
  if (head.size() < kMagic && (std::strncmp(kMagicV2, head.data(), head.size()) == 0 ||
                               std::strncmp(kMagicV1, head.data(), head.size()) == 0)) {
    throw damaged(name, "truncated at " + size_text);
  }
  if (head.compare(0, kMagic, kMagicV2) == 0) {
    l.version = 2;
  } else if (head.compare(0, kMagic, kMagicV1) == 0) {
    l.version = 1;
  } else {
    throw damaged(name,
                  "it does not start with '" + std::string(kMagicV2, kMagic - 1) + "' (or v1)");
  }
  const std::string missing = "truncated or missing its checksum line (" + size_text + ")";
  if (l.version == 1) {
    if (file_bytes < kMagic + kTrailerV1 || tail.size() < kTrailerV1) {
      throw damaged(name, "truncated at " + size_text);
    }
    const std::string line = tail.substr(tail.size() - kTrailerV1);
    if (line.compare(0, 9, "\nfnv1a64=") != 0 || line.back() != '\n' ||
        !parse_hex16(line.substr(9, 16), &l.checksum)) {
      throw damaged(name, missing);
    }
    l.data_end = file_bytes - kTrailerV1;
    l.summed_bytes = l.data_end;  // everything before the checksum line
  } else {
    // the last "\npayload_bytes=" in the tail (the payload may hold the text too)
    const size_t at = tail.rfind(kPayloadKey);
    if (at == std::string::npos || file_bytes < tail.size() ||
        file_bytes - (tail.size() - at) < kMagic) {
      throw damaged(name, missing);
    }
    const std::string line = tail.substr(at + 1);  // "payload_bytes=<P> fnv1a64=<hex>\n"
    const size_t space = line.find(' ');
    if (line.size() < kDigitsLine + 1 || line.back() != '\n' || space == std::string::npos ||
        line.compare(space, 9, " fnv1a64=") != 0 || space + 9 + kDigitsLine != line.size() ||
        !parse_decimal(line.substr(14, space - 14), std::numeric_limits<uint64_t>::max(),
                       &l.payload_bytes) ||
        !parse_hex16(line.substr(space + 9, 16), &l.checksum)) {
      throw damaged(name, missing);
    }
    l.data_end = file_bytes - (tail.size() - at);
    l.summed_bytes = file_bytes - kDigitsLine;  // the checksum line up to its digits too
  }
  return l;
}

void check_sum(const std::string& name, const Layout& layout, uint64_t actual) {
  if (actual != layout.checksum) {
    throw damaged(name, "checksum mismatch: the file says fnv1a64=" + hex16(layout.checksum) +
                            ", its bytes give " + hex16(actual));
  }
}

void read_header(const std::string& name, const std::string& head, Layout* l) {
  const size_t eol = head.find('\n', kMagic);
  if (eol == std::string::npos || eol >= l->data_end) {
    throw damaged(name, "no header line in its first " + std::to_string(head.size()) + " bytes");
  }
  const std::string header = head.substr(kMagic, eol - kMagic);
  std::vector<const char*> keys = {"step", "rank", "world", "sampler_bytes"};
  constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> max = {INT64_MAX, INT_MAX, INT_MAX, kMax64};
  if (l->version == 1) {
    keys.push_back("payload_bytes");
    max.push_back(kMax64);
  }
  std::vector<uint64_t> v;
  if (!parse_fields(header, keys, max, &v) || v[2] == 0) {
    throw damaged(name, "malformed header '" + header + "'");
  }
  l->step = static_cast<int64_t>(v[0]);
  l->rank = static_cast<int>(v[1]);
  l->world = static_cast<int>(v[2]);
  l->sampler_bytes = v[3];
  if (l->version == 1) l->payload_bytes = v[4];
  // Each size against what remains, never their sum: a header announcing
  // 2^64 - k bytes must not wrap around to the file's size.
  const uint64_t start = eol + 1;
  const uint64_t data = l->data_end - start;
  if (l->sampler_bytes > data || l->payload_bytes != data - l->sampler_bytes) {
    throw damaged(name, "it announces sampler_bytes=" + std::to_string(l->sampler_bytes) +
                            " and payload_bytes=" + std::to_string(l->payload_bytes) +
                            ", and holds " + std::to_string(data) + " bytes of data");
  }
  l->sampler_offset = start;
  l->payload_offset = start + l->sampler_bytes;
}

RankFile decode(const std::string& name, const std::string& bytes) {
  const std::string head = bytes.substr(0, kHeadBytes);
  const std::string tail = bytes.substr(bytes.size() - std::min(bytes.size(), kTailBytes));
  Layout l = read_checksum_line(name, head, tail, bytes.size());
  check_sum(name, l, fnv1a64(bytes.data(), l.summed_bytes));
  read_header(name, head, &l);
  RankFile f;
  f.step = l.step;
  f.rank = l.rank;
  f.world = l.world;
  f.sampler = bytes.substr(l.sampler_offset, l.sampler_bytes);
  const char* p = bytes.data() + l.payload_offset;
  f.payload.assign(p, p + l.payload_bytes);
  return f;
}

}  // namespace slurmddp::resume
