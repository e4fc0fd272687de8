#include "comm/gloo/gloo_setup.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "common/log.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

namespace {

constexpr const char* kComponent = "gloo";

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

bool resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  freeaddrinfo(res);
  return true;
}

std::string first_of_list(const char* value) {
  std::string s(value);
  const auto comma = s.find(',');
  return comma == std::string::npos ? s : s.substr(0, comma);
}

}  // namespace

Bind choose_bind(const GlooOptions& o) {
  if (!o.ifname.empty() && !o.hostname.empty()) {
    throw InvalidArgument(
        "gloo: failed to choose the local address: set ifname or hostname, "
        "not both; ifname=" +
        o.ifname + ", hostname=" + o.hostname);
  }
  if (!o.ifname.empty()) return {o.ifname, "", "ifname=" + o.ifname};
  if (!o.hostname.empty()) return {"", o.hostname, "hostname=" + o.hostname};
  for (const char* var : {"SLURMDDP_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      const std::string ifname = first_of_list(v);
      return {ifname, "", std::string(var) + "=" + v};
    }
  }
  const std::string host = host_name();
  if (!host.empty() && resolves(host)) return {"", host, "hostname=" + host + " (this host)"};
  SLURMDDP_LOG_WARN(kComponent, "this host's name '"
                                    << host
                                    << "' does not resolve; binding 127.0.0.1 (set "
                                       "SLURMDDP_IFNAME to choose an interface)");
  return {"", "127.0.0.1", "hostname=127.0.0.1 (fallback)"};
}

size_t local_wmem_max() {
  std::ifstream in("/proc/sys/net/core/wmem_max");
  size_t v = 0;
  if (in >> v && v > 0) return v;
  return kDefaultWmemMax;
}

size_t effective_small_max(size_t requested, int size, size_t group_wmem_max) {
  if (size <= 1) return requested;
  const size_t per_peer = std::max<size_t>(size_t{4} << 10, (size_t{16} << 20) / (size - 1));
  return std::min({requested, per_peer, group_wmem_max});
}

}  // namespace slurmddp::comm
