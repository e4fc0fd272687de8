// How rank 0 hosts the rendezvous store under init(): the bounds on
// connections that have not authenticated yet, tied to the world size and the
// limit of open files, and the address it listens on.
//
// Note [Store host bounds]
//   Anyone who can reach rank 0's port can open connections without the token
//   and hold them until the handshake deadline (TcpStoreServerOptions). Each
//   holds one of rank 0's descriptors, and rank 0 needs its descriptors for
//   everything else: the ranks' store connections, both Gloo meshes (or
//   NCCL's sockets), checkpoints, the program's own files. So init() sizes the
//   server from the job:
//   - pending (unauthenticated) connections: at most 2 per rank (every rank
//     may connect at once, and retry once), at least kMinPending, at most
//     kMaxPending, and never more than the limit of open files leaves once the
//     ranks' connections and the reserve are counted (at least kFloorPending,
//     so that ranks can still join one by one);
//   - the reserve the server leaves to the rest of the process: both meshes
//     and a margin (open_files_needed's), 2 per rank + 256;
//   - the soft limit of open files is raised to hold all of it (Note [Open
//     files at scale]).
//   Past a bound the server closes the oldest pending connection of the most
//   crowded source, never a newly joining rank (Note [Pending connections]).
//
// Note [Store listen address]
//   The store listens on the address the ranks connect to (MASTER_ADDR) when
//   that is certainly an address of rank 0's host, so it is not reachable
//   through the host's other interfaces: an IP literal (what the plugin
//   exports) that one of the host's interfaces holds, or a loopback literal
//   (all ranks on this host); or a host name every address of which is a
//   non-loopback address of this host, and exactly one. Otherwise (a name that
//   resolves to loopback here, as Debian's /etc/hosts maps the host's own name
//   to 127.0.1.1, while other nodes resolve it through DNS; a name with
//   several addresses; an address this host does not hold, behind NAT or in
//   another network namespace; a name that does not resolve) it listens on
//   every interface, as before, and says why at info level.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/address.h"
#include "slurmddp/tcp_store_server.h"

namespace slurmddp {

inline constexpr uint64_t kMinPending = 64;
inline constexpr uint64_t kMaxPending = 4096;
inline constexpr uint64_t kFloorPending = 16;
inline constexpr uint64_t kOwnFilesMargin = 256;

// The pending connections init() allows rank 0's store for `world_size`
// ranks when the limit of open files is no concern.
uint64_t pending_wanted(int world_size);

// Descriptors the store's server leaves to the rest of rank 0's process.
uint64_t reserve_wanted(int world_size);

// RLIMIT_NOFILE's soft limit now; 0 when unlimited (or unknown).
uint64_t soft_nofile();

// The server's bounds for `world_size` ranks under a soft RLIMIT_NOFILE of
// `nofile` (0: unlimited): max_unauthenticated and reserve_fds set, the other
// fields at their defaults.
TcpStoreServerOptions store_bounds(int world_size, uint64_t nofile);

// Where to listen (Note [Store listen address]): `host` to bind, empty for
// every interface, and why, for the log.
struct ListenChoice {
  std::string host;
  std::string why;
};
ListenChoice store_listen_address(const std::string& master_addr,
                                  const std::vector<launch::IpAddress>& resolved,
                                  const std::vector<launch::InterfaceAddress>& local);

}  // namespace slurmddp
