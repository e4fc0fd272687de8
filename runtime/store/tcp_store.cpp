// make_tcp_store: a client of the given server, or of the server this rank
// starts and hosts (TcpStoreOptions::is_server).
#include "slurmddp/tcp_store.h"

#include "slurmddp/tcp_store_server.h"
#include "store/tcp_client.h"

namespace slurmddp {

// A hosting store lets the other ranks finish before its server goes
// (TcpStoreOptions::linger): its own connection closes first.
//
// Note [Lingering host]
//   The host used to wait up to the whole linger (5 s) for every client to
//   disconnect. A peer that is stopped (SIGSTOP, a hung node) never does,
//   so rank 0 left 5 s after the others, past the timeout every user
//   configured. The linger is for the others' last requests (a barrier's
//   reply, a failure diagnosis), and those are traffic: so it also ends when
//   no request has come for linger_quiet (0.5 s). A client idle that long
//   after the host's own end is done, or cannot answer anyway.
store::TcpClient::~TcpClient() {
  if (!server_) return;
  fd_.reset();
  server_->drain(opts_.linger, opts_.linger_quiet);
}

std::shared_ptr<TcpStore> make_tcp_store(const TcpStoreOptions& options) {
  std::unique_ptr<TcpStoreServer> server;
  std::string host = options.host;
  uint16_t port = options.port;
  if (options.is_server) {
    TcpStoreServerOptions so = options.server;
    so.port = options.port;
    so.token = options.token;
    server = TcpStoreServer::start(so);
    port = server->port();
    // The hosting rank talks to its own server over loopback.
    if (so.bind_host.empty() || so.bind_host == "0.0.0.0") {
      host = "127.0.0.1";
    } else if (so.bind_host == "::") {
      host = "::1";
    } else {
      host = so.bind_host;
    }
  }
  auto client = std::make_shared<store::TcpClient>(options, host, port, std::move(server));
  client->connect();
  return client;
}

}  // namespace slurmddp
