// Note [Shared-memory tier] in gloo_communicator.h: its setup and the tiered
// allreduce the worker runs.
#include <gloo/allreduce.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "comm/gloo/gloo_communicator.h"
#include "comm/gloo/gloo_communicator_impl.h"
#include "comm/host/reduce.h"
#include "common/log.h"
#include "slurmddp/error.h"

namespace slurmddp::comm {

namespace {

std::string node_name() {
  if (const char* n = std::getenv("SLURMD_NODENAME"); n != nullptr && *n != '\0') return n;
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string text(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

}  // namespace

void GlooCommunicator::setup_shm_tier() {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const auto left = [&] {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()),
                    std::chrono::milliseconds(0));
  };
  const std::string base = group_->key("shm");
  const std::string node = node_name();
  // The node's roster: every rank enters itself, then all meet; the node's
  // first entrant gathers the entries into one key that the others read
  // (Note [Join requests]: O(1) requests a rank, not one per node-mate).
  const std::string roster = base + "/node/" + node;
  const int64_t index = store_->add(roster + "/count", 1) - 1;
  store_->set(roster + "/" + std::to_string(index),
              std::to_string(rank_) + " " + std::to_string(getpid()));
  store_barrier(*store_, base + "/roster", rank_, size_, left());
  std::string entries;
  if (index == 0) {
    const int64_t local = std::stoll(text(store_->get(roster + "/count", left())));
    for (int64_t i = 0; i < local; ++i) {
      entries += text(store_->get(roster + "/" + std::to_string(i), left())) + "\n";
    }
    store_->set(roster + "/all", entries);
  } else {
    entries = text(store_->get(roster + "/all", left()));
  }
  std::vector<ShmPeer> peers;
  size_t from = 0;
  for (size_t eol = entries.find('\n'); eol != std::string::npos;
       from = eol + 1, eol = entries.find('\n', from)) {
    const std::string entry = entries.substr(from, eol - from);
    ShmPeer p;
    if (std::sscanf(entry.c_str(), "%d %d", &p.rank, &p.pid) != 2) {
      std::string m = "gloo: garbled shared-memory roster entry '" + entry;
      m += "' under " + roster;
      throw ProtocolError(m);
    }
    peers.push_back(p);
  }
  std::sort(peers.begin(), peers.end(),
            [](const ShmPeer& a, const ShmPeer& b) { return a.rank < b.rank; });
  node_leader_ = peers.front().rank == rank_;
  int64_t leader_index = -1;
  if (node_leader_) {
    leader_index = store_->add(base + "/leaders/count", 1) - 1;
  }
  // Whether this rank can take part: the switch, then the segment.
  std::string why_not;
  const char* env = std::getenv("SLURMDDP_SHM");
  if (env != nullptr && std::string(env) == "0") {
    why_not = "SLURMDDP_SHM=0";
  } else if (env != nullptr && *env != '\0' && std::string(env) != "1") {
    throw InvalidArgument("gloo: invalid SLURMDDP_SHM='" + std::string(env) +
                          "': expected 1 (use shared memory within a node, the default) or 0; "
                          "rank=" +
                          std::to_string(rank_));
  } else if (peers.size() > 1) {
    ShmOptions o;
    o.store = store_;
    o.key = roster + "/segment";
    o.peers = peers;
    o.rank = rank_;
    o.host = node;
    o.deadline = deadline;
    try {
      shm_ = std::make_unique<ShmNode>(o);
    } catch (const InvalidArgument&) {
      throw;
    } catch (const TimeoutError&) {
      throw;
    } catch (const Error& e) {
      why_not = e.what();
    }
  }
  if (!why_not.empty()) store_->add(base + "/off", 1);
  store_barrier(*store_, base + "/agreed", rank_, size_, left());
  const int64_t off =
      store_->check({base + "/off"}) ? std::stoll(text(store_->get(base + "/off", left()))) : 0;
  num_nodes_ = static_cast<int>(std::stoll(text(store_->get(base + "/leaders/count", left()))));
  // Note [Flat mesh only when flat]: a flat group keeps its mesh up to
  // flat_mesh_max ranks; a larger one is a ring of all ranks, each its own
  // node (leader index = rank).
  const bool flat = off > 0 || num_nodes_ == size_;
  const bool ring_of_all = flat && size_ > flat_mesh_max_;
  if (flat) {
    shm_.reset();
    SLURMDDP_LOG_DEBUG(kGlooComponent,
                       "communicator '"
                           << prefix_ << "': no shared-memory tier ("
                           << (off > 0 ? std::to_string(off) + " rank(s) could not use it" +
                                             (why_not.empty() ? "" : ": " + why_not)
                                       : "one rank per node")
                           << (ring_of_all ? "); a ring of all " + std::to_string(size_) +
                                                 " ranks (over flat_mesh_max " +
                                                 std::to_string(flat_mesh_max_) + ")"
                                           : ")"));
    if (!ring_of_all) return;
    num_nodes_ = size_;
    node_leader_ = true;
    leader_index = rank_;
  }
  if (num_nodes_ > 1 && node_leader_) {
    leaders_ctx_ =
        std::make_shared<MeshContext>(static_cast<int>(leader_index), num_nodes_, timeout_,
                                      MeshShape::kRing);  // Note [Leaders' ring]
    leader_ranks_.assign(static_cast<size_t>(num_nodes_), -1);
    leader_ranks_[static_cast<size_t>(leader_index)] = rank_;
    if (ring_of_all) {
      for (int k : leaders_ctx_->peers()) leader_ranks_[static_cast<size_t>(k)] = k;
    } else {
      // Which rank each leader is, for the failure notes' endpoints.
      const std::string me = std::to_string(rank_);
      store_->set(base + "/leaders/rank/" + std::to_string(leader_index),
                  Bytes(me.begin(), me.end()));
      for (int k : leaders_ctx_->peers()) {  // its ring neighbours' only: O(1) requests
        leader_ranks_[static_cast<size_t>(k)] =
            std::stoi(text(store_->get(base + "/leaders/rank/" + std::to_string(k), left())));
      }
    }
    try {
      leaders_ctx_->connect(*store_, base + "/leaders/mesh/", device_);  // Note [Mesh connection]
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw PeerError("gloo: failed to connect the node leaders' ring of '" + prefix_ +
                      "': " + strip_gloo_location(e.what()) + "; rank=" + std::to_string(rank_) +
                      ", size=" + std::to_string(size_));
    }
  }
  tiered_ = true;
  SLURMDDP_LOG_DEBUG(kGlooComponent, "communicator '"
                                         << prefix_ << "': shared-memory tier on " << node << ": "
                                         << peers.size() << " local rank(s), " << num_nodes_
                                         << " node(s)" << (node_leader_ ? ", leader" : ""));
}

void GlooCommunicator::tiered_allreduce(void* data, size_t count, DataType type, ReduceOp base) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  if (num_nodes_ == 1) {
    shm_->allreduce(data, count, type, base, deadline);
    return;
  }
  if (shm_) shm_->reduce_to_leader(data, count, type, base, deadline);
  if (node_leader_) gloo_allreduce(leaders_ctx_, leaders_tag_, data, count, type, base);
  if (shm_) shm_->broadcast_from_leader(data, count * element_size(type), deadline);
}

}  // namespace slurmddp::comm
