// Note [Rendezvous generations] in nccl_id_exchange.h.
#include "comm/nccl_id_exchange.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "comm/nccl_rules.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// Field "key=value" of a join record ("size=4\ndevice=0\n...").
std::string field(const Bytes& record, const std::string& name) {
  std::istringstream is(std::string(record.begin(), record.end()));
  std::string line;
  while (std::getline(is, line)) {
    if (line.compare(0, name.size() + 1, name + "=") == 0) return line.substr(name.size() + 1);
  }
  return "";
}

int size_of(const Bytes& record) {
  const std::string s = field(record, "size");
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoi(s);
}

}  // namespace

NcclIdExchange::NcclIdExchange(const NcclOptions& options, int device, std::string where,
                               Clock::time_point deadline)
    : options_(options), device_(device), where_(std::move(where)), deadline_(deadline) {}

std::string NcclIdExchange::key(const std::string& name) const {
  return key_at(generation_, name);
}

std::string NcclIdExchange::key_at(int64_t generation, const std::string& name) const {
  return options_.prefix + "/" + std::to_string(generation) + "/" + name;
}

std::chrono::milliseconds NcclIdExchange::remaining() const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

void NcclIdExchange::announce() {
  if (!options_.store || generation_ != 0) return;
  generation_ =
      options_.store->add(options_.prefix + "/generation/" + std::to_string(options_.rank), 1);
  const std::string record = "size=" + std::to_string(options_.size) +
                             "\ndevice=" + std::to_string(device_) + "\nhost=" + host_name() +
                             "\npid=" + std::to_string(getpid()) +
                             "\ngeneration=" + std::to_string(generation_) + "\n";
  options_.store->set(key("join/" + std::to_string(options_.rank)),
                      Bytes(record.begin(), record.end()));
  if (generation_ > 1) {
    // This rank's previous creation is over (Note [Rendezvous generations]):
    // the keys it wrote there go.
    const int64_t previous = generation_ - 1;
    options_.store->erase(key_at(previous, "join/" + std::to_string(options_.rank)));
    if (options_.rank == 0) options_.store->erase(key_at(previous, "unique_id"));
  }
}

NcclUniqueId NcclIdExchange::exchange(const std::function<NcclUniqueId()>& create_root_id) {
  const bool root = options_.rank == 0;
  const NcclUniqueId id = root ? create_root_id() : NcclUniqueId{};
  if (options_.bootstrap) {
    const NcclUniqueId got =
        options_.bootstrap(root ? std::optional<NcclUniqueId>(id) : std::nullopt);
    return root ? id : got;
  }
  if (!options_.store) {
    if (options_.size == 1) return id;
    throw InvalidArgument(
        "nccl: failed to exchange NCCL's unique id: NcclOptions has neither "
        "a store nor a bootstrap callback; " +
        where_);
  }
  announce();  // no-op when done already: the id must live under this generation
  if (root) {
    options_.store->set(key("unique_id"), Bytes(id.begin(), id.end()));
    return id;
  }
  Bytes value;
  const auto budget = remaining();
  try {
    value = options_.store->get(key("unique_id"), budget);
  } catch (const TimeoutError& e) {
    throw TimeoutError("nccl: failed to get NCCL's unique id from rank 0 within " +
                       std::to_string(budget.count()) + " ms: " + diagnosis() + "; " + where_ +
                       ", key=" + key("unique_id") + " (" + e.what() + ")");
  }
  if (value.size() != kNcclUniqueIdBytes) {
    throw ProtocolError("nccl: failed to read NCCL's unique id: the store holds " +
                        std::to_string(value.size()) + " bytes, expected " +
                        std::to_string(kNcclUniqueIdBytes) + " (another program's key?); " +
                        where_ + ", key=" + key("unique_id"));
  }
  // Rank 0 recorded itself (in this generation) before publishing the id.
  const Bytes root_record = options_.store->get(key("join/0"), remaining());
  const int root_size = size_of(root_record);
  if (root_size != options_.size) {
    throw InvalidArgument(
        "nccl: failed to join the communicator: the world size differs "
        "between ranks; size=" +
        std::to_string(options_.size) + " (rank " + std::to_string(options_.rank) +
        "), size=" + std::to_string(root_size) + " (rank 0); " + where_);
  }
  NcclUniqueId got{};
  std::copy(value.begin(), value.end(), got.begin());
  return got;
}

// Missing ranks that are at another creation on this prefix (the usual cause:
// a retry after one rank failed before its rendezvous), e.g.
// "; ranks at another generation of prefix 'p': [1 (generation 3)], this rank
// is at generation 2 (Note [Rendezvous generations])".
std::string NcclIdExchange::other_generations(const JoinReport& report) {
  std::string listed;
  for (int r = 0; r < options_.size && r < 32; ++r) {
    if (std::find(report.joined.begin(), report.joined.end(), r) != report.joined.end()) continue;
    const std::string k = options_.prefix + "/generation/" + std::to_string(r);
    if (!options_.store->check({k})) continue;
    const Bytes v = options_.store->get(k, std::chrono::milliseconds(0));
    const std::string g(v.begin(), v.end());
    if (g == std::to_string(generation_)) continue;
    listed += (listed.empty() ? "" : ", ") + std::to_string(r) + " (generation " + g + ")";
  }
  if (listed.empty()) return "";
  return "; ranks at another generation of prefix '" + options_.prefix + "': [" + listed +
         "], this rank is at generation " + std::to_string(generation_) +
         " (Note [Rendezvous generations])";
}

std::string NcclIdExchange::diagnosis() {
  if (!options_.store) return "no store to tell which ranks joined";
  try {
    JoinReport report;
    report.size = options_.size;
    for (int r = 0; r < options_.size; ++r) {
      const std::string k = key("join/" + std::to_string(r));
      if (!options_.store->check({k})) continue;
      report.joined.push_back(r);
      const int size = size_of(options_.store->get(k, std::chrono::milliseconds(0)));
      if (size != options_.size) report.other_sizes.emplace_back(r, size);
    }
    return describe(report) + other_generations(report);
  } catch (const std::exception& e) {
    return std::string("the store could not tell which ranks joined (") + e.what() + ")";
  }
}

}  // namespace slurmddp::comm
