#include "comm/gloo/gloo_failure.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "comm/host/shm_node.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

namespace {

bool mentions_timeout(const std::string& message) {
  std::string lower(message);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("timeout") != std::string::npos || lower.find("timed out") != std::string::npos;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

std::string strip_gloo_location(const std::string& message) {
  // "[../gloo/transport/tcp/pair.cc:598] Connection closed by peer ..."
  if (message.size() > 2 && message[0] == '[') {
    const auto close = message.find("] ");
    if (close != std::string::npos) {
      const std::string inside = message.substr(1, close - 1);
      if (inside.find(".cc:") != std::string::npos || inside.find(".h:") != std::string::npos) {
        return message.substr(close + 2);
      }
    }
  }
  return message;
}

std::string find_endpoint(const std::string& message) {
  size_t pos = 0;
  while ((pos = message.find('[', pos)) != std::string::npos) {
    const auto close = message.find("]:", pos);
    if (close == std::string::npos) return "";
    size_t end = close + 2;
    while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
    const std::string host = message.substr(pos + 1, close - pos - 1);
    if (end > close + 2 && host.find(' ') == std::string::npos &&
        host.find('[') == std::string::npos) {
      return message.substr(pos, end - pos);
    }
    pos = close + 1;
  }
  return "";
}

Observation classify(const std::exception_ptr& error) {
  Observation o;
  try {
    std::rethrow_exception(error);
  } catch (const gloo::IoException& e) {
    o.detail = strip_gloo_location(e.what());
    o.kind = mentions_timeout(o.detail) ? Observation::Kind::kTimeout : Observation::Kind::kPeer;
    o.endpoint = find_endpoint(o.detail);
  } catch (const TimeoutError& e) {
    o.kind = Observation::Kind::kTimeout;
    o.detail = e.what();
  } catch (const ShmPeerDied& e) {
    // The shared-memory tier saw this node-mate die: the peer of the note.
    o.kind = Observation::Kind::kPeer;
    o.detail = e.what();
    o.peer = e.rank;
  } catch (const PeerError& e) {
    o.kind = Observation::Kind::kPeer;
    o.detail = e.what();
  } catch (const gloo::Exception& e) {
    o.detail = strip_gloo_location(e.what());
    o.kind = mentions_timeout(o.detail) ? Observation::Kind::kTimeout : Observation::Kind::kOther;
  } catch (const std::exception& e) {
    o.detail = strip_gloo_location(e.what());
  } catch (...) {
    o.detail = "unknown exception";
  }
  o.detail = one_line(o.detail);
  return o;
}

std::string encode_endpoints(const std::vector<std::vector<std::string>>& per_peer) {
  std::ostringstream os;
  for (size_t peer = 0; peer < per_peer.size(); ++peer) {
    if (per_peer[peer].empty()) continue;
    os << peer;
    for (const auto& e : per_peer[peer]) os << ' ' << e;
    os << '\n';
  }
  return os.str();
}

std::vector<std::string> decode_endpoints(const std::string& text, int peer) {
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    int p = -1;
    if (!(ls >> p) || p != peer) continue;
    std::vector<std::string> out;
    std::string e;
    while (ls >> e) out.push_back(e);
    return out;
  }
  return {};
}

std::string endpoints_key(const std::string& prefix, int rank) {
  return prefix + "/endpoints/" + std::to_string(rank);
}

namespace {

std::string bytes_to_string(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

constexpr std::chrono::milliseconds kStoreReadTimeout{2000};

}  // namespace

void resolve_peer(const DiagnosisContext& ctx, Observation& o) {
  if (o.endpoint.empty() || o.peer >= 0 || !ctx.store) return;
  for (int j = 0; j < ctx.size; ++j) {
    if (j == ctx.rank) continue;
    try {
      const std::string key = endpoints_key(ctx.prefix, j);
      if (!ctx.store->check({key})) continue;
      for (const auto& e :
           decode_endpoints(bytes_to_string(ctx.store->get(key, kStoreReadTimeout)), ctx.rank)) {
        if (e == o.endpoint) {
          o.peer = j;
          return;
        }
      }
    } catch (const std::exception&) {
      return;  // the store is gone too: leave the peer unknown
    }
  }
}

}  // namespace slurmddp::comm
