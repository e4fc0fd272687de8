#include "comm/nccl_rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "comm/nccl_rules.h"
#include "comm/nccl_util.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes,
              "kNcclUniqueIdBytes must match NCCL_UNIQUE_ID_BYTES");

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

NcclUniqueId to_bytes(const ncclUniqueId& id) {
  NcclUniqueId b{};
  std::memcpy(b.data(), &id, b.size());
  return b;
}

ncclUniqueId from_bytes(const uint8_t* data) {
  ncclUniqueId id;
  std::memcpy(&id, data, sizeof id);
  return id;
}

}  // namespace

NcclRendezvous::NcclRendezvous(const NcclOptions& options, int device, std::string where,
                               Clock::time_point deadline)
    : options_(options), device_(device), where_(std::move(where)), deadline_(deadline) {}

std::string NcclRendezvous::key(const std::string& name) const {
  return options_.prefix + "/" + name;
}

std::chrono::milliseconds NcclRendezvous::remaining() const {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

void NcclRendezvous::announce() {
  if (!options_.store) return;
  const std::string record = "size=" + std::to_string(options_.size) +
                             "\ndevice=" + std::to_string(device_) + "\nhost=" + host_name() +
                             "\npid=" + std::to_string(getpid()) + "\n";
  options_.store->set(key("join/" + std::to_string(options_.rank)),
                      Bytes(record.begin(), record.end()));
}

ncclUniqueId NcclRendezvous::exchange() {
  const bool root = options_.rank == 0;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (root) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      std::rethrow_exception(nccl_failure("create NCCL's unique id", r, nullptr, where_));
    }
  }
  if (options_.bootstrap) {
    const NcclUniqueId got =
        options_.bootstrap(root ? std::optional<NcclUniqueId>(to_bytes(id)) : std::nullopt);
    return root ? id : from_bytes(got.data());
  }
  if (!options_.store) {
    if (options_.size == 1) return id;
    throw InvalidArgument("nccl: failed to exchange NCCL's unique id: NcclOptions has neither "
                          "a store nor a bootstrap callback; " + where_);
  }
  if (root) {
    options_.store->set(key("unique_id"), Bytes(reinterpret_cast<const uint8_t*>(&id),
                                                reinterpret_cast<const uint8_t*>(&id) + sizeof id));
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
  if (value.size() != sizeof(ncclUniqueId)) {
    throw ProtocolError("nccl: failed to read NCCL's unique id: the store holds " +
                        std::to_string(value.size()) + " bytes, expected " +
                        std::to_string(sizeof(ncclUniqueId)) + " (another program's key?); " +
                        where_ + ", key=" + key("unique_id"));
  }
  // Rank 0 recorded itself before publishing the id, so its record exists.
  const Bytes root_record = options_.store->get(key("join/0"), remaining());
  const int root_size = size_of(root_record);
  if (root_size != options_.size) {
    throw InvalidArgument("nccl: failed to join the communicator: the world size differs "
                          "between ranks; size=" + std::to_string(options_.size) + " (rank " +
                          std::to_string(options_.rank) + "), size=" +
                          std::to_string(root_size) + " (rank 0); " + where_);
  }
  return from_bytes(value.data());
}

std::string NcclRendezvous::diagnosis() {
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
    return describe(report);
  } catch (const std::exception& e) {
    return std::string("the store could not tell which ranks joined (") + e.what() + ")";
  }
}

}  // namespace slurmddp::comm
