// Note [Mesh connection] in gloo_mesh.h.
#include "comm/gloo/gloo_mesh.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "slurmddp/error.h"

namespace slurmddp::comm {

namespace {

using gloo::transport::tcp::Address;

constexpr const char* kMagic = "gloo-mesh 1 ";

std::string ip_text(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof buf);
  }
  return buf;
}

uint16_t port_of(const sockaddr_storage& ss) {
  return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(ss).sin6_port
                                        : reinterpret_cast<const sockaddr_in&>(ss).sin_port);
}

[[noreturn]] void bad_record(const std::string& record, int owner, const std::string& why) {
  throw ProtocolError("gloo: the mesh record of rank " + std::to_string(owner) +
                      " is not usable (" + why + "): '" + record.substr(0, 120) +
                      (record.size() > 120 ? "...'" : "'"));
}

}  // namespace

std::vector<int> mesh_peers(MeshShape shape, int rank, int size) {
  std::vector<int> out;
  if (shape == MeshShape::kFull) {
    out.reserve(static_cast<size_t>(size > 0 ? size - 1 : 0));
    for (int j = 0; j < size; ++j) {
      if (j != rank) out.push_back(j);
    }
    return out;
  }
  if (size < 2) return out;
  const int left = (rank + size - 1) % size;
  const int right = (rank + 1) % size;
  out.push_back(std::min(left, right));
  if (right != left) out.push_back(std::max(left, right));
  return out;
}

std::string encode_mesh_record(const std::vector<Address>& per_peer) {
  std::string ip;
  std::ostringstream entries;
  for (size_t k = 0; k < per_peer.size(); ++k) {
    const auto& ss = per_peer[k].getSockaddr();
    const std::string this_ip = ip_text(ss);
    if (this_ip.empty()) throw InvalidArgument("gloo: a mesh address is neither IPv4 nor IPv6");
    if (k == 0) ip = this_ip;
    if (this_ip != ip) {
      std::string m = "gloo: one rank's mesh addresses carry two IPs: ";
      m.append(ip).append(" and ").append(this_ip);
      throw InvalidArgument(m);
    }
    if (k > 0) entries << ',';
    entries << port_of(ss);
    if (per_peer[k].getSeq() != Address::kSequenceNumberUnset) {
      entries << '$' << per_peer[k].getSeq();
    }
  }
  return std::string(kMagic) + (ip.empty() ? "-" : ip) + " " + entries.str();
}

Address mesh_address_for(const std::string& record, int owner, int size, int me, MeshShape shape) {
  const std::string magic(kMagic);
  if (record.compare(0, magic.size(), magic) != 0) bad_record(record, owner, "no mesh header");
  const size_t space = record.find(' ', magic.size());
  if (space == std::string::npos) bad_record(record, owner, "no address list");
  const std::string ip = record.substr(magic.size(), space - magic.size());
  // The entry for `me`: the owner lists its peers in rank order.
  const std::vector<int> owners = mesh_peers(shape, owner, size);
  const auto at = std::lower_bound(owners.begin(), owners.end(), me);
  if (at == owners.end() || *at != me) {
    bad_record(record, owner, "rank " + std::to_string(me) + " is not its peer");
  }
  const int index = static_cast<int>(at - owners.begin());
  size_t begin = space + 1;
  int listed = 0;
  std::string entry;
  while (true) {
    const size_t comma = record.find(',', begin);
    const std::string e =
        record.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (listed == index) entry = e;
    ++listed;
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (listed != static_cast<int>(owners.size())) {
    bad_record(record, owner,
               std::to_string(listed) + " addresses for " + std::to_string(owners.size()) +
                   " peers in a group of " + std::to_string(size));
  }
  sockaddr_storage ss{};
  const size_t dollar = entry.find('$');
  const std::string port_text = entry.substr(0, dollar);
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port_text) > 65535) {
    bad_record(record, owner, "port '" + port_text + "'");
  }
  const auto port = htons(static_cast<uint16_t>(std::stoi(port_text)));
  auto* in4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = port;
  } else if (inet_pton(AF_INET6, ip.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = port;
  } else {
    bad_record(record, owner, "IP '" + ip + "'");
  }
  gloo::transport::tcp::sequence_number_t seq = Address::kSequenceNumberUnset;
  if (dollar != std::string::npos) {
    const std::string s = entry.substr(dollar + 1);
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) {
      bad_record(record, owner, "sequence number '" + s + "'");
    }
    seq = static_cast<gloo::transport::tcp::sequence_number_t>(std::stoll(s));
  }
  return Address(ss, seq);
}

bool mesh_dials(const Address& self, const Address& peer) {
  const auto& a = self.getSockaddr();
  const auto& b = peer.getSockaddr();
  int rv = 0;
  if (a.ss_family == AF_INET && b.ss_family == AF_INET) {
    const auto& sa = reinterpret_cast<const sockaddr_in&>(a);
    const auto& sb = reinterpret_cast<const sockaddr_in&>(b);
    rv = std::memcmp(&sa.sin_addr, &sb.sin_addr, sizeof sa.sin_addr);
    if (rv == 0) rv = sa.sin_port - sb.sin_port;
  } else if (a.ss_family == AF_INET6 && b.ss_family == AF_INET6) {
    const auto& sa = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& sb = reinterpret_cast<const sockaddr_in6&>(b);
    rv = std::memcmp(&sa.sin6_addr, &sb.sin6_addr, sizeof sa.sin6_addr);
    if (rv == 0) rv = sa.sin6_port - sb.sin6_port;
  }
  return rv > 0;
}

std::string mesh_endpoint(const Address& a) {
  // Gloo's own text (the port as the socket address holds it), less the
  // "$<sequence>" that its error messages do not print.
  const std::string s = a.str();
  return s.substr(0, s.find('$'));
}

MeshContext::MeshContext(int rank, int size, std::chrono::milliseconds timeout, MeshShape shape)
    : gloo::Context(rank, size), shape_(shape), peers_(mesh_peers(shape, rank, size)) {
  setTimeout(timeout);
}

void MeshContext::connect(Store& store, const std::string& prefix,
                          const std::shared_ptr<gloo::transport::Device>& device) {
  const auto deadline = std::chrono::steady_clock::now() + getTimeout();
  auto transport = device->createContext(rank, size);
  transport->setTimeout(getTimeout());
  std::vector<Address> mine(static_cast<size_t>(size));
  std::vector<Address> listed;
  listed.reserve(peers_.size());
  for (int j : peers_) {
    auto& pair = transport->createPair(j);
    const auto* a = dynamic_cast<const Address*>(&pair->address());
    if (a == nullptr) {
      throw InvalidArgument("gloo: the mesh needs Gloo's TCP transport; rank=" +
                            std::to_string(rank));
    }
    mine[static_cast<size_t>(j)] = *a;
    listed.push_back(*a);
  }
  const std::string record = encode_mesh_record(listed);
  store.set(prefix + std::to_string(rank), Bytes(record.begin(), record.end()));

  std::vector<Address> theirs(static_cast<size_t>(size));
  std::vector<int> dial, accept;
  endpoints_.assign(static_cast<size_t>(size), {});
  for (int j : peers_) {
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds(0));
    const Bytes b = store.get(prefix + std::to_string(j), left);
    theirs[static_cast<size_t>(j)] =
        mesh_address_for(std::string(b.begin(), b.end()), j, size, rank, shape_);
    endpoints_[static_cast<size_t>(j)] = {mesh_endpoint(mine[static_cast<size_t>(j)]),
                                          mesh_endpoint(theirs[static_cast<size_t>(j)])};
    (mesh_dials(mine[static_cast<size_t>(j)], theirs[static_cast<size_t>(j)]) ? dial : accept)
        .push_back(j);
  }
  for (const auto* list : {&dial, &accept}) {
    for (int j : *list) transport->getPair(j)->connect(theirs[static_cast<size_t>(j)].bytes());
  }
  device_ = device;
  transportContext_ = std::move(transport);
}

}  // namespace slurmddp::comm
