#include "group/pmix_rendezvous.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pmix.h>
#include <sys/random.h>

#include <cstring>

#include "common/log.h"
#include "group/store_host.h"
#include "slurmddp/error.h"

namespace slurmddp {

namespace {

const char* const kComponent = "pmix";
const char* const kEndpointKey = "slurmddp.store.endpoint";
const char* const kTokenKey = "slurmddp.store.token";

std::string pmix_error(pmix_status_t rc) {
  return PMIx_Error_string(rc);
}

// Owns one PMIx_Init/PMIx_Finalize pair (PMIx counts them).
class PmixSession {
 public:
  PmixSession() {
    pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
    if (rc != PMIX_SUCCESS) {
      throw InvalidArgument("pmix: failed to connect to the PMIx server: " + pmix_error(rc) +
                            "; launch with srun --mpi=pmix, or set SLURMDDP_BOOTSTRAP=tcp");
    }
  }
  ~PmixSession() { PMIx_Finalize(nullptr, 0); }
  const pmix_proc_t& me() const { return me_; }

  void put(const char* key, const std::string& value) {
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = const_cast<char*>(value.c_str());  // PMIx copies on Put
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &v);
    if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) {
      throw Error(std::string("pmix: failed to publish ") + key + ": " + pmix_error(rc));
    }
  }

  void fence(std::chrono::milliseconds timeout, int rank) {
    pmix_proc_t all;
    PMIX_PROC_CONSTRUCT(&all);
    PMIX_LOAD_PROCID(&all, me_.nspace, PMIX_RANK_WILDCARD);
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    bool collect = true;
    int secs = static_cast<int>(std::max<long long>(1, (timeout.count() + 999) / 1000));
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc == PMIX_ERR_TIMEOUT) {
      throw TimeoutError(
          "pmix: failed to exchange the rendezvous endpoint: the PMIx fence did not "
          "complete within " +
          std::to_string(secs) +
          " s (a rank did not start or is stuck); rank=" + std::to_string(rank));
    }
    if (rc != PMIX_SUCCESS) {
      throw PeerError("pmix: failed to exchange the rendezvous endpoint: PMIx_Fence: " +
                      pmix_error(rc) + "; rank=" + std::to_string(rank));
    }
  }

  std::string get_from_rank0(const char* key) {
    pmix_proc_t zero;
    PMIX_PROC_CONSTRUCT(&zero);
    PMIX_LOAD_PROCID(&zero, me_.nspace, 0);
    pmix_value_t* val = nullptr;
    pmix_status_t rc = PMIx_Get(&zero, key, nullptr, 0, &val);
    if (rc != PMIX_SUCCESS || val == nullptr || val->type != PMIX_STRING) {
      if (val != nullptr) PMIX_VALUE_RELEASE(val);
      throw PeerError(std::string("pmix: failed to read ") + key +
                      " published by rank 0: " + pmix_error(rc));
    }
    std::string out = val->data.string;
    PMIX_VALUE_RELEASE(val);
    return out;
  }

 private:
  pmix_proc_t me_{};
};

// An address of this host other ranks can reach: on `ifname` when given, else
// the first non-loopback IPv4 address, else IPv6, else loopback.
std::string reachable_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::string v4, v6;
  for (ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr) continue;
    if (!ifname.empty() && ifname != p->ifa_name) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (p->ifa_addr->sa_family == AF_INET) {
      auto* a = &reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr;
      inet_ntop(AF_INET, a, buf, sizeof buf);
      if (std::strncmp(buf, "127.", 4) != 0 && v4.empty()) v4 = buf;
    } else if (p->ifa_addr->sa_family == AF_INET6) {
      auto* a = &reinterpret_cast<sockaddr_in6*>(p->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a)) continue;
      inet_ntop(AF_INET6, a, buf, sizeof buf);
      if (v6.empty()) v6 = buf;
    }
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return "127.0.0.1";
}

std::string random_token() {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0) throw Error(std::string("pmix: failed to draw a token: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : raw) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

}  // namespace

std::shared_ptr<TcpStore> pmix_rendezvous(const ProcessIdentity& id,
                                          std::chrono::milliseconds timeout) {
  PmixSession pmix;
  TcpStoreOptions o;
  o.timeout = timeout;
  std::shared_ptr<TcpStore> store;
  if (id.rank == 0) {
    o.token = id.token.empty() ? random_token() : id.token;
    o.is_server = true;
    o.port = 0;  // the kernel's choice: nothing to configure, nothing to collide with
    o.host = "127.0.0.1";
    // Note [Store host bounds]
    const TcpStoreServerOptions bounds = store_bounds(id.world_size, soft_nofile());
    o.server.max_unauthenticated = bounds.max_unauthenticated;
    o.server.reserve_fds = bounds.reserve_fds;
    store = make_tcp_store(o);
    std::string host = !id.master_addr.empty() ? id.master_addr : reachable_address(id.ifname);
    std::string endpoint = host + " " + std::to_string(store->port());
    pmix.put(kEndpointKey, endpoint);
    if (id.token.empty()) pmix.put(kTokenKey, o.token);
    SLURMDDP_LOG_DEBUG(kComponent, "store endpoint " << endpoint << " published");
  }
  pmix.fence(timeout, id.rank);
  if (id.rank != 0) {
    std::string endpoint = pmix.get_from_rank0(kEndpointKey);
    auto space = endpoint.rfind(' ');
    o.host = endpoint.substr(0, space);
    o.port = static_cast<uint16_t>(std::stoi(endpoint.substr(space + 1)));
    o.token = id.token.empty() ? pmix.get_from_rank0(kTokenKey) : id.token;
    store = make_tcp_store(o);
  }
  return store;
}

}  // namespace slurmddp
