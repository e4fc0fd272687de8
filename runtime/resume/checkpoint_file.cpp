#include "resume/checkpoint_file.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "slurmddp/error.h"

namespace slurmddp::resume {

namespace {

constexpr const char* kMagic = "slurmddp-checkpoint v1\n";
constexpr size_t kTrailer = 26;  // "\nfnv1a64=" (9) + 16 hex + "\n"

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace

uint64_t fnv1a64(const char* data, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ULL;
  return h;
}

std::string encode(const RankFile& f) {
  std::string out = kMagic;
  out += "step=" + std::to_string(f.step) + " rank=" + std::to_string(f.rank) +
         " world=" + std::to_string(f.world) +
         " sampler_bytes=" + std::to_string(f.sampler.size()) +
         " payload_bytes=" + std::to_string(f.payload.size()) + "\n";
  out += f.sampler;
  out.append(reinterpret_cast<const char*>(f.payload.data()), f.payload.size());
  uint64_t sum = fnv1a64(out.data(), out.size());
  out += "\nfnv1a64=" + hex16(sum) + "\n";
  return out;
}

RankFile decode(const std::string& name, const std::string& bytes) {
  auto damaged = [&](const std::string& what) {
    return Error("checkpoint " + name + " is damaged: " + what +
                 "; delete it (or its step directory) to resume from an older checkpoint");
  };
  const size_t magic = std::strlen(kMagic);
  if (bytes.size() < magic || bytes.compare(0, magic, kMagic) != 0) {
    throw damaged("it does not start with '" + std::string(kMagic, magic - 1) + "'");
  }
  if (bytes.size() < magic + kTrailer) {
    throw damaged("truncated at " + std::to_string(bytes.size()) + " bytes");
  }
  const size_t body = bytes.size() - kTrailer;
  std::string trailer = bytes.substr(body);
  if (trailer.compare(0, 9, "\nfnv1a64=") != 0 || trailer.back() != '\n') {
    throw damaged("truncated or missing its checksum line (" + std::to_string(bytes.size()) +
                  " bytes)");
  }
  std::string expected = trailer.substr(9, 16);
  std::string actual = hex16(fnv1a64(bytes.data(), body));
  if (expected != actual) {
    throw damaged("checksum mismatch: the file says fnv1a64=" + expected + ", its bytes give " +
                  actual);
  }
  size_t eol = bytes.find('\n', magic);
  if (eol == std::string::npos || eol >= body) throw damaged("no header line");
  std::string header = bytes.substr(magic, eol - magic);
  RankFile f;
  long long step = 0;
  int rank = 0, world = 0;
  unsigned long long sampler_bytes = 0, payload_bytes = 0;
  int used = 0;
  if (std::sscanf(header.c_str(),
                  "step=%lld rank=%d world=%d sampler_bytes=%llu payload_bytes=%llu%n", &step,
                  &rank, &world, &sampler_bytes, &payload_bytes, &used) != 5 ||
      static_cast<size_t>(used) != header.size()) {
    throw damaged("malformed header '" + header + "'");
  }
  size_t start = eol + 1;
  if (start + sampler_bytes + payload_bytes != body) {
    throw damaged("the header announces " + std::to_string(sampler_bytes + payload_bytes) +
                  " bytes of data, the file holds " + std::to_string(body - start));
  }
  f.step = step;
  f.rank = rank;
  f.world = world;
  f.sampler = bytes.substr(start, sampler_bytes);
  const char* p = bytes.data() + start + sampler_bytes;
  f.payload.assign(p, p + payload_bytes);
  return f;
}

}  // namespace slurmddp::resume
