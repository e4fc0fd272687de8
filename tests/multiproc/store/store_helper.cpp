// A helper process for the multi-process store tests.
//
//   store_helper server [--handshake-ms N] [--stall-ms N] [--max-unauth N] [--nofile N]
//                       [--reserve-fds N]
//       Hosts a TcpStoreServer on 127.0.0.1 (port chosen by the kernel),
//       prints "port <P>", then answers each "stats" line on stdin with one
//       line of counters; exits 0 at end of input.
//   store_helper rank --rank R --world N --timeout-ms T (--store-port P | --serve)
//                     [--as-init] [--nofile N] [--open-files K]
//       A rank: connects (or with --serve hosts the server and prints
//       "port <P>" first), enters barrier "init", publishes a value, reads
//       every other rank's value and checks it, enters barrier "exit", prints
//       "ok rank=R world=N" and exits 0. With --as-init the store is made as
//       init() makes it (rendezvous_store: MASTER_ADDR=127.0.0.1, the server's
//       bounds from the world size and the limit of open files); --nofile sets
//       the soft limit of open files first, as srun would pass it. With
//       --open-files K (and --serve), once it hosts the store it waits for a
//       line "go" on stdin, opens K files and holds them, and prints
//       "opened K files" or "error open: ..." and exits 7.
// SLURMDDP_TOKEN in the environment is the token of either. Errors go to
// stderr as "error <kind>: <message>" with exit codes 2 (TimeoutError),
// 3 (PeerError), 4 (ProtocolError), 5 (any other Error), 6 (bad usage).
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "group/rendezvous_store.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"
#include "slurmddp/tcp_store.h"
#include "slurmddp/tcp_store_server.h"

namespace {

using slurmddp::Bytes;
using std::chrono::milliseconds;

std::map<std::string, std::string> parse_flags(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw slurmddp::InvalidArgument("unexpected argument " + a);
    if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
      flags[a.substr(2)] = argv[++i];
    } else {
      flags[a.substr(2)] = "1";
    }
  }
  return flags;
}

long flag(const std::map<std::string, std::string>& f, const std::string& name, long dflt) {
  auto it = f.find(name);
  return it == f.end() ? dflt : std::stol(it->second);
}

std::string token() {
  const char* t = std::getenv("SLURMDDP_TOKEN");
  return t != nullptr ? t : "";
}

// The value rank r publishes: a closed form every other rank can check.
std::string value_of(int r) {
  return "rank-" + std::to_string(r) + "-" + std::to_string(r * r + 7);
}

void set_nofile(const std::map<std::string, std::string>& f) {
  if (f.count("nofile") == 0) return;
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = static_cast<rlim_t>(flag(f, "nofile", 0));
  setrlimit(RLIMIT_NOFILE, &r);
}

int run_server(const std::map<std::string, std::string>& f) {
  set_nofile(f);
  slurmddp::TcpStoreServerOptions o;
  o.bind_host = "127.0.0.1";
  o.token = token();
  o.handshake_timeout = milliseconds(flag(f, "handshake-ms", 10000));
  o.stall_timeout = milliseconds(flag(f, "stall-ms", 30000));
  o.max_unauthenticated = static_cast<size_t>(flag(f, "max-unauth", 4096));
  o.reserve_fds = static_cast<size_t>(flag(f, "reserve-fds", 0));
  auto server = slurmddp::TcpStoreServer::start(o);
  std::printf("port %u\n", server->port());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line != "stats") continue;
    auto s = server->stats();
    std::printf(
        "stats accepted=%llu open=%llu unauthenticated=%llu peak_unauthenticated=%llu "
        "authenticated=%llu parked=%llu buffered=%llu peak_buffered=%llu malformed=%llu "
        "oversized=%llu no_token=%llu wrong_token=%llu handshake_timeout=%llu stalled=%llu "
        "over_capacity=%llu\n",
        static_cast<unsigned long long>(s.accepted), static_cast<unsigned long long>(s.open),
        static_cast<unsigned long long>(s.unauthenticated),
        static_cast<unsigned long long>(s.peak_unauthenticated),
        static_cast<unsigned long long>(s.authenticated), static_cast<unsigned long long>(s.parked),
        static_cast<unsigned long long>(s.buffered_bytes),
        static_cast<unsigned long long>(s.peak_buffered_bytes),
        static_cast<unsigned long long>(s.refused_malformed),
        static_cast<unsigned long long>(s.refused_oversized),
        static_cast<unsigned long long>(s.refused_no_token),
        static_cast<unsigned long long>(s.refused_wrong_token),
        static_cast<unsigned long long>(s.refused_handshake_timeout),
        static_cast<unsigned long long>(s.refused_stalled),
        static_cast<unsigned long long>(s.refused_over_capacity));
    std::fflush(stdout);
  }
  return 0;
}

// The store as init() makes it (rendezvous_store.h).
std::shared_ptr<slurmddp::TcpStore> init_store(int rank, int world, milliseconds timeout,
                                               uint16_t port) {
  slurmddp::ProcessIdentity id;
  id.rank = rank;
  id.world_size = world;
  id.local_world_size = world;
  id.local_rank = rank;
  id.master_addr = "127.0.0.1";
  id.master_port = port;
  id.token = token();
  return std::dynamic_pointer_cast<slurmddp::TcpStore>(
      slurmddp::rendezvous_store(id, slurmddp::Bootstrap::kTcp, timeout, "init: "));
}

// Opens `count` files and keeps them open; "" or why not.
std::string open_files(long count, std::vector<int>* held) {
  for (long i = 0; i < count; ++i) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return "file " + std::to_string(i + 1) + " of " + std::to_string(count) + ": " +
             std::strerror(errno);
    }
    held->push_back(fd);
  }
  return "";
}

int run_rank(const std::map<std::string, std::string>& f) {
  const int rank = static_cast<int>(flag(f, "rank", -1));
  const int world = static_cast<int>(flag(f, "world", -1));
  const milliseconds timeout(flag(f, "timeout-ms", 10000));
  set_nofile(f);
  slurmddp::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = static_cast<uint16_t>(flag(f, "store-port", 0));
  o.token = token();
  o.timeout = timeout;
  // With --serve this rank hosts the server (as the rank on MASTER_ADDR
  // does) and prints its port: the other ranks need it to start.
  o.is_server = f.count("serve") != 0;
  o.server.bind_host = "127.0.0.1";
  auto store = f.count("as-init") != 0 ? init_store(o.is_server ? 0 : rank, world, timeout, o.port)
                                       : slurmddp::make_tcp_store(o);
  if (o.is_server) {
    std::printf("port %u\n", store->port());
    std::fflush(stdout);
  }
  std::vector<int> held;
  if (o.is_server && f.count("open-files") != 0) {
    std::string line;
    while (std::getline(std::cin, line) && line != "go") {
    }
    const std::string why = open_files(flag(f, "open-files", 0), &held);
    if (!why.empty()) {
      std::fprintf(stderr, "error open: %s\n", why.c_str());
      return 7;
    }
    std::printf("opened %zu files\n", held.size());
    std::fflush(stdout);
  }
  slurmddp::store_barrier(*store, "init", rank, world, timeout);
  std::string mine = value_of(rank);
  store->set("value/" + std::to_string(rank), Bytes(mine.begin(), mine.end()));
  for (int r = 0; r < world; ++r) {
    Bytes v = store->get("value/" + std::to_string(r), timeout);
    if (std::string(v.begin(), v.end()) != value_of(r)) {
      throw slurmddp::Error("wrong value from rank " + std::to_string(r) + ": " +
                            std::string(v.begin(), v.end()));
    }
  }
  slurmddp::store_barrier(*store, "exit", rank, world, timeout);
  std::printf("ok rank=%d world=%d\n", rank, world);
  for (int fd : held) close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: store_helper server|rank [--flag value]...\n");
    return 6;
  }
  const std::string mode = argv[1];
  try {
    auto f = parse_flags(argc, argv);
    if (mode == "server") return run_server(f);
    if (mode == "rank") return run_rank(f);
    std::fprintf(stderr, "error usage: unknown mode %s\n", mode.c_str());
    return 6;
  } catch (const slurmddp::TimeoutError& e) {
    std::fprintf(stderr, "error timeout: %s\n", e.what());
    return 2;
  } catch (const slurmddp::PeerError& e) {
    std::fprintf(stderr, "error peer: %s\n", e.what());
    return 3;
  } catch (const slurmddp::ProtocolError& e) {
    std::fprintf(stderr, "error protocol: %s\n", e.what());
    return 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error other: %s\n", e.what());
    return 5;
  }
}
