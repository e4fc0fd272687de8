#include "grad_sync/layout.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "grad_sync/device.h"
#include "slurmddp/error.h"

namespace slurmddp::grad_sync {

namespace {

constexpr int64_t kMagic = 0x67736c61796f7531;   // "gslayou1"
constexpr size_t kHeaderWords = 5;               // magic, first, cap, compression, n
constexpr size_t kWordsPerParam = 4;             // count, dtype, device, name bytes
constexpr size_t kSummaryWords = 4;              // ok, digest, n, serialized words
constexpr size_t kNameWords = 8;                 // names in difference records: 64 bytes
constexpr size_t kRecordWords = 4 + kNameWords;  // field, param, value0, value, name

const char* head() {
  return "grad_sync: failed to check the parameter layout: ";
}

const char* device_name(int64_t v) {
  switch (static_cast<DeviceKind>(v)) {
    case DeviceKind::kHost:
      return "host";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

const char* field_name(LayoutField f) {
  switch (f) {
    case LayoutField::kNone:
      return "none";
    case LayoutField::kFirstBucketBytes:
      return "first_bucket_bytes";
    case LayoutField::kBucketCapBytes:
      return "bucket_cap_bytes";
    case LayoutField::kCompression:
      return "compression";
    case LayoutField::kNumParameters:
      return "num_parameters";
    case LayoutField::kCount:
      return "count";
    case LayoutField::kDtype:
      return "dtype";
    case LayoutField::kDevice:
      return "device";
  }
  return "unknown";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < ranks.size(); ++i) {
    os << (i ? ", " : "") << ranks[i];
  }
  os << ']';
  return os.str();
}

std::string display_name(const std::string& name, int64_t index) {
  return name.empty() ? "#" + std::to_string(index) : name;
}

void pack_bytes(const std::string& s, std::vector<int64_t>& words) {
  const size_t first = words.size();
  words.resize(first + (s.size() + 7) / 8, 0);
  if (!s.empty()) {
    std::memcpy(words.data() + first, s.data(), s.size());
  }
}

// Runs a collective on int64 words staged through the device's memory.
class Staging {
 public:
  Staging(Device& device, size_t words) : device_(device), bytes_(words * 8) {
    buffer_ = device_.allocate(bytes_);
  }
  ~Staging() { device_.release(buffer_); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  void* get() const { return buffer_; }
  void put(const std::vector<int64_t>& w, size_t at_word) {
    device_.upload(static_cast<uint8_t*>(buffer_) + at_word * 8, w.data(), w.size() * 8);
  }
  std::vector<int64_t> take(size_t words) {
    std::vector<int64_t> w(words);
    device_.download(w.data(), buffer_, words * 8);
    return w;
  }

 private:
  Device& device_;
  size_t bytes_;
  void* buffer_ = nullptr;
};

std::vector<int64_t> allgather_words(Communicator& comm, Device& device,
                                     const std::vector<int64_t>& mine,
                                     std::chrono::milliseconds timeout) {
  const size_t k = mine.size();
  const size_t n = static_cast<size_t>(comm.size());
  Staging send(device, k);
  Staging recv(device, k * n);
  send.put(mine, 0);
  comm.allgather(send.get(), recv.get(), k, DataType::kInt64)->wait(timeout);
  return recv.take(k * n);
}

void broadcast_words(Communicator& comm, Device& device, std::vector<int64_t>& words,
                     std::chrono::milliseconds timeout) {
  if (words.empty()) {
    return;
  }
  Staging buf(device, words.size());
  if (comm.rank() == 0) {
    buf.put(words, 0);
  }
  comm.broadcast(buf.get(), words.size(), DataType::kInt64, 0)->wait(timeout);
  words = buf.take(words.size());
}

}  // namespace

std::vector<int64_t> encode_shape(const LayoutDescription& layout) {
  std::vector<int64_t> w = {kMagic, static_cast<int64_t>(layout.first_bucket_bytes),
                            static_cast<int64_t>(layout.bucket_cap_bytes),
                            static_cast<int64_t>(layout.compression),
                            static_cast<int64_t>(layout.params.size())};
  w.reserve(w.size() + 3 * layout.params.size());
  for (const auto& p : layout.params) {
    w.push_back(static_cast<int64_t>(p.count));
    w.push_back(static_cast<int64_t>(p.dtype));
    w.push_back(static_cast<int64_t>(p.device));
  }
  return w;
}

uint64_t layout_digest(const LayoutDescription& layout) {
  // FNV-1a over the little-endian bytes of the shape words.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int64_t word : encode_shape(layout)) {
    uint64_t u = static_cast<uint64_t>(word);
    for (int i = 0; i < 8; ++i) {
      h ^= u & 0xff;
      h *= 0x100000001b3ULL;
      u >>= 8;
    }
  }
  return h;
}

std::vector<int64_t> serialize_layout(const LayoutDescription& layout) {
  std::vector<int64_t> w = {kMagic, static_cast<int64_t>(layout.first_bucket_bytes),
                            static_cast<int64_t>(layout.bucket_cap_bytes),
                            static_cast<int64_t>(layout.compression),
                            static_cast<int64_t>(layout.params.size())};
  std::string names;
  for (const auto& p : layout.params) {
    w.push_back(static_cast<int64_t>(p.count));
    w.push_back(static_cast<int64_t>(p.dtype));
    w.push_back(static_cast<int64_t>(p.device));
    w.push_back(static_cast<int64_t>(p.name.size()));
    names += p.name;
  }
  pack_bytes(names, w);
  return w;
}

LayoutDescription deserialize_layout(const std::vector<int64_t>& w) {
  auto bad = [](const std::string& why) {
    return ProtocolError(std::string(head()) + "rank 0 sent a malformed layout: " + why);
  };
  if (w.size() < kHeaderWords || w[0] != kMagic) {
    throw bad("bad header");
  }
  LayoutDescription l;
  l.first_bucket_bytes = static_cast<uint64_t>(w[1]);
  l.bucket_cap_bytes = static_cast<uint64_t>(w[2]);
  l.compression = static_cast<Compression>(w[3]);
  const auto n = static_cast<uint64_t>(w[4]);
  if (n > (w.size() - kHeaderWords) / kWordsPerParam) {
    throw bad("n=" + std::to_string(n));
  }
  size_t name_bytes = 0;
  l.params.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t* p = w.data() + kHeaderWords + i * kWordsPerParam;
    l.params[i].count = static_cast<uint64_t>(p[0]);
    l.params[i].dtype = static_cast<DataType>(p[1]);
    l.params[i].device = static_cast<DeviceKind>(p[2]);
    if (p[3] < 0) {
      throw bad("negative name size");
    }
    l.params[i].name.resize(static_cast<size_t>(p[3]));
    name_bytes += static_cast<size_t>(p[3]);
  }
  const size_t names_at = kHeaderWords + n * kWordsPerParam;
  if ((w.size() - names_at) * 8 < name_bytes) {
    throw bad("names truncated");
  }
  const auto* bytes = reinterpret_cast<const char*>(w.data() + names_at);
  for (auto& p : l.params) {
    std::memcpy(p.name.data(), bytes, p.name.size());
    bytes += p.name.size();
  }
  return l;
}

LayoutDifference first_difference(const LayoutDescription& a, const LayoutDescription& b) {
  auto d = [](LayoutField f, int64_t param, int64_t v0, int64_t v) {
    return LayoutDifference{f, param, v0, v};
  };
  if (a.first_bucket_bytes != b.first_bucket_bytes) {
    return d(LayoutField::kFirstBucketBytes, -1, static_cast<int64_t>(a.first_bucket_bytes),
             static_cast<int64_t>(b.first_bucket_bytes));
  }
  if (a.bucket_cap_bytes != b.bucket_cap_bytes) {
    return d(LayoutField::kBucketCapBytes, -1, static_cast<int64_t>(a.bucket_cap_bytes),
             static_cast<int64_t>(b.bucket_cap_bytes));
  }
  if (a.compression != b.compression) {
    return d(LayoutField::kCompression, -1, static_cast<int64_t>(a.compression),
             static_cast<int64_t>(b.compression));
  }
  const size_t common = std::min(a.params.size(), b.params.size());
  for (size_t i = 0; i < common; ++i) {
    const auto& p = a.params[i];
    const auto& q = b.params[i];
    const auto at = static_cast<int64_t>(i);
    if (p.count != q.count) {
      return d(LayoutField::kCount, at, static_cast<int64_t>(p.count),
               static_cast<int64_t>(q.count));
    }
    if (p.dtype != q.dtype) {
      return d(LayoutField::kDtype, at, static_cast<int64_t>(p.dtype),
               static_cast<int64_t>(q.dtype));
    }
    if (p.device != q.device) {
      return d(LayoutField::kDevice, at, static_cast<int64_t>(p.device),
               static_cast<int64_t>(q.device));
    }
  }
  if (a.params.size() != b.params.size()) {
    return d(LayoutField::kNumParameters, static_cast<int64_t>(common),
             static_cast<int64_t>(a.params.size()), static_cast<int64_t>(b.params.size()));
  }
  return {};
}

std::string field_text(LayoutField field, int64_t value) {
  std::string v;
  switch (field) {
    case LayoutField::kDtype:
      v = to_string(static_cast<DataType>(value));
      break;
    case LayoutField::kDevice:
      v = device_name(value);
      break;
    case LayoutField::kCompression:
      v = to_string(static_cast<Compression>(value));
      break;
    default:
      v = std::to_string(value);
  }
  return std::string(field_name(field)) + "=" + v;
}

std::string describe_difference(int other, const LayoutDifference& d, const std::string& name0,
                                const std::string& name_other,
                                const std::vector<int>& differing_ranks) {
  std::ostringstream os;
  const std::string r0 = "rank 0";
  const std::string ro = "rank " + std::to_string(other);
  os << ro << " registered a different layout than " << r0 << ": ";
  if (d.param >= 0) {
    const std::string a = display_name(name0, d.param);
    const std::string b = display_name(name_other, d.param);
    os << "parameter " << d.param;
    if (d.field == LayoutField::kNumParameters) {
      const bool rank0_has_it = d.value0 > d.value;
      os << " ('" << (rank0_has_it ? a : b) << "' on " << (rank0_has_it ? r0 : ro)
         << ") is missing on " << (rank0_has_it ? ro : r0) << ": ";
    } else if (a == b) {
      os << " ('" << a << "'): ";
    } else {
      os << " ('" << a << "' on " << r0 << ", '" << b << "' on " << ro << "): ";
    }
  }
  os << field_text(d.field, d.value0) << " on " << r0 << ", " << field_text(d.field, d.value)
     << " on " << ro << "; ranks that differ from rank 0: " << rank_list(differing_ranks);
  return os.str();
}

void check_layout(Communicator& comm, Device& device, const LayoutDescription& layout,
                  const std::string& local_error, std::chrono::milliseconds timeout) {
  const int rank = comm.rank();
  const int size = comm.size();
  const std::string where = "; rank=" + std::to_string(rank) + ", size=" + std::to_string(size);
  const std::vector<int64_t> serialized = serialize_layout(layout);

  // Step 1.
  const std::vector<int64_t> summary = {
      local_error.empty() ? 1 : 0, static_cast<int64_t>(layout_digest(layout)),
      static_cast<int64_t>(layout.params.size()), static_cast<int64_t>(serialized.size())};
  const auto all = allgather_words(comm, device, summary, timeout);
  auto at = [&](int r, size_t word) { return all[static_cast<size_t>(r) * kSummaryWords + word]; };

  // Step 3.
  if (!local_error.empty()) {
    throw InvalidArgument(local_error);
  }
  for (int r = 0; r < size; ++r) {
    if (at(r, 0) != 1) {
      throw InvalidArgument(std::string(head()) + "rank " + std::to_string(r) +
                            " refused its own parameters (see its error)" + where);
    }
  }
  // Step 2.
  bool same = true;
  for (int r = 1; r < size; ++r) {
    same = same && at(r, 1) == at(0, 1);
  }
  if (same) {
    return;
  }

  // Step 4.
  std::vector<int64_t> words(static_cast<size_t>(at(0, 3)));
  if (rank == 0) {
    words = serialized;
  }
  broadcast_words(comm, device, words, timeout);
  const LayoutDescription rank0 = rank == 0 ? layout : deserialize_layout(words);
  const LayoutDifference mine = first_difference(rank0, layout);
  std::vector<int64_t> record = {static_cast<int64_t>(mine.field), mine.param, mine.value0,
                                 mine.value};
  std::string my_name;
  if (mine.param >= 0 && static_cast<size_t>(mine.param) < layout.params.size()) {
    my_name = layout.params[static_cast<size_t>(mine.param)].name.substr(0, kNameWords * 8);
  }
  record.resize(kRecordWords, 0);
  if (!my_name.empty()) {
    std::memcpy(record.data() + 4, my_name.data(), my_name.size());
  }
  const auto records = allgather_words(comm, device, record, timeout);

  std::vector<int> differing;
  for (int r = 0; r < size; ++r) {
    if (records[static_cast<size_t>(r) * kRecordWords] != 0) {
      differing.push_back(r);
    }
  }
  if (differing.empty()) {
    throw Error(std::string(head()) +
                "layout digests differ but no difference was found (rank 0's layout "
                "did not arrive intact)" +
                where);
  }
  const int other = differing.front();
  const int64_t* rec = records.data() + static_cast<size_t>(other) * kRecordWords;
  LayoutDifference d{static_cast<LayoutField>(rec[0]), rec[1], rec[2], rec[3]};
  char name_buf[kNameWords * 8 + 1] = {};
  std::memcpy(name_buf, rec + 4, kNameWords * 8);
  std::string name0;
  if (d.param >= 0 && static_cast<size_t>(d.param) < rank0.params.size()) {
    name0 = rank0.params[static_cast<size_t>(d.param)].name;
  }
  throw InvalidArgument(std::string(head()) +
                        describe_difference(other, d, name0, name_buf, differing) + where);
}

}  // namespace slurmddp::grad_sync
