// Membership: the one rendezvous every communicator stands on.
//
// Every rank of a group joins once: it records itself (world size, host, pid,
// plus whatever its backend needs the others to know) under the group's
// prefix; the group checks the world size once and agrees on the values it
// must share; and a rendezvous that does not complete says who is missing, in
// one format ("3/4 ranks joined; missing: [2]", membership/ranks.h).
// Communicators are then built from a Membership and exchange only their own
// data, under key(): Gloo its mesh addresses, NCCL its unique id. init() joins
// one for the process group; a communicator made on its own joins its own.
//
// Note [Rendezvous generations]
// Several groups may be formed one after another on one store with the same
// prefix (a program that rebuilds its communicator, a test that makes
// several). Keys written by an earlier group stay in the store: with fixed
// keys a rank arriving early at the second would read the first one's data (a
// stale NCCL id, stale Gloo addresses). So every join works under a fresh
// generation: each rank takes its own next number with the store's atomic add
// on "<prefix>/generation/<rank>" (1 for its first group on that prefix, 2 for
// its second, ...), and all keys of that group live under
// "<prefix>/<generation>/". Ranks meet at the same generation because every
// rank forms its groups on a prefix in the same order (creation is
// collective). When a rank starts generation g it erases its record of
// generation g-1 (that group is over on every rank, or it failed), and each
// backend erases its own keys of g-1 (previous_key()), so the store does not
// grow with every group. A rank that failed before joining took no number, so
// after a retry it counts one behind: it then waits for data that never comes
// and times out naming the generations (diagnosis()) instead of reading a
// dead group's data; retry such a failure with a new prefix.
//
// Note [Join requests]
// Rank 0 hosts the store every rank of init() talks to, on one thread, so what
// a rank asks of it is what bounds a start at scale. Each rank's requests do
// not grow with the number of ranks on its node or in the group: joining
// (generation, size and equal-field counters, its node's mark, its record,
// rank 0's record, the verdict), the shared-memory roster (its entry, one
// barrier, the node's roster in one key), the segment, one more barrier, and
// its endpoints: about 18. What a node needs once (vouching for its P ranks,
// Note [Locating missing ranks]; gathering its roster) is done by the first
// of its ranks to arrive: about 2P requests a node, 2 a rank. Measured
// (bench/launch/init-scale, cluster-scale): 20 N + 8 n + 1 requests for N
// ranks on n nodes with two or more ranks a node; it was N (2P + 17) + 8 n + 1
// when every rank wrote and read one key per node-mate. A flat group (one
// rank a node) of up to 512 ranks adds its mesh, N^2; a larger one is a ring
// (Note [Flat mesh only when flat] in comm/gloo/gloo_communicator.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "env/locality.h"
#include "slurmddp/error.h"
#include "slurmddp/store.h"

namespace slurmddp::membership {

using Clock = std::chrono::steady_clock;

// Where ranks run (env/locality.h): the join's JoinOptions::locality.
using slurmddp::Locality;

struct JoinOptions {
  std::shared_ptr<Store> store;  // may be null for a group of one
  std::string prefix;            // keys live under "<prefix>/"
  int rank = 0;
  int size = 1;
  Clock::time_point deadline{};  // nothing blocks past it
  // Messages: "<head><cause>; <where>", e.g. head "gloo: failed to connect
  // process group 'p': " and where "rank=1, size=4, timeout_ms=3000".
  std::string head;
  std::string where;
  // Extra fields of this rank's record (a backend's bootstrap data), e.g.
  // {"wmem_max", "212992"}; names are [a-z_]+, values one line.
  std::vector<std::pair<std::string, std::string>> fields;
  // Names among `fields` that every rank must give the same value, e.g.
  // "backend": a rank that differs fails the join at once on every rank, the
  // error naming rank 0's value and the first different rank's, each with the
  // field "<name>_why" when the records carry it (Note [Equal fields]).
  std::vector<std::string> agree_equal;
  Locality locality;
};

// What a rank recorded when it joined.
struct Record {
  int size = -1;  // -1: absent or garbled
  std::string host;
  std::string pid;
  std::map<std::string, std::string> fields;  // everything, size/host/pid included
  std::string field(const std::string& name) const;
};
Record parse_record(const Bytes& text);

// Two ranks that disagree on the world size (both named in what()).
class SizeMismatch : public InvalidArgument {
 public:
  SizeMismatch(const std::string& message, int rank, int size, int other_rank, int other_size)
      : InvalidArgument(message),
        rank(rank),
        size(size),
        other_rank(other_rank),
        other_size(other_size) {}
  int rank, size, other_rank, other_size;
};

class Membership {
 public:
  explicit Membership(JoinOptions options);  // touches nothing yet

  // Takes this rank's generation and writes its record under
  // "<prefix>/<generation>/join/<rank>" (Note [Rendezvous generations]).
  // Never blocks on other ranks. Idempotent; a no-op without a store.
  void announce();

  // Every rank: waits until all `size` ranks have announced, checks once that
  // they all have this world size (SizeMismatch naming both values) and agrees
  // on the group's minimum of the numeric record fields `agree_min` (see
  // agreed()). Rank 0 checks and publishes a verdict; the others compare
  // their size with rank 0's and read the verdict, so nobody goes on to wait
  // for a peer that will never come. Past the deadline: TimeoutError
  // "k/n ranks joined; missing: [...]". Calls announce() first if needed.
  void complete(const std::vector<std::string>& agree_min = {});

  // Both steps: the usual way to join.
  static std::shared_ptr<Membership> join(JoinOptions options,
                                          const std::vector<std::string>& agree_min = {});

  int rank() const { return o_.rank; }
  int size() const { return o_.size; }
  const std::shared_ptr<Store>& store() const { return o_.store; }
  const std::string& prefix() const { return o_.prefix; }
  const std::string& where() const { return o_.where; }
  Clock::time_point deadline() const { return o_.deadline; }
  std::chrono::milliseconds remaining() const;
  // 0 before announce() or without a store.
  int64_t generation() const { return generation_; }
  bool completed() const { return completed_; }

  // "<prefix>/<generation>/<name>": where a backend keeps its data.
  std::string key(const std::string& name) const;
  // The same key one generation back ("" at generation 1 or before announce).
  std::string previous_key(const std::string& name) const;
  // "<prefix>/<generation>", for code that builds keys itself.
  std::string scope() const;

  // The record rank `r` wrote at this generation (after complete(), every
  // rank's is there); waits until the deadline for it. Without a store, this
  // rank's own record.
  Record record(int r) const;
  // The group's minimum of a field named in complete()'s agree_min.
  std::optional<int64_t> agreed(const std::string& field) const;

  // Non-blocking: "3/4 ranks joined; missing: [2]" for this generation, plus
  // the ranks that announced another world size and missing ranks that are
  // at another generation; a note instead when there is no store or it
  // cannot be read.
  std::string diagnosis() const;

 private:
  std::string join_key(int rank) const { return key("join/" + std::to_string(rank)); }
  std::string other_generations(const std::vector<int>& missing) const;
  // " (hosts: n1 [3]; n4 [8-11], where no rank joined)" for `missing`, or ""
  // when nothing is known about where they run (locate.cpp).
  std::string where_missing(const std::vector<int>& missing) const;
  void announce_locality() const;
  // Rank 0, every record visible: "" when every rank has rank 0's value of
  // each agree_equal field, else the problem naming both values.
  std::string unequal_fields() const;
  // "1023/1024 ranks joined; missing: [513] (hosts: n33 [513])" and `also`:
  // who is missing and where, from the store (O(log size) requests a
  // missing rank, Note [Probing for missing ranks]).
  std::string not_joined_text(const std::string& also = "") const;
  [[noreturn]] void throw_not_joined(const std::string& also = "") const;
  void note_other_size() const;

  JoinOptions o_;
  int64_t generation_ = 0;
  bool completed_ = false;
  std::map<std::string, int64_t> agreed_;
};

}  // namespace slurmddp::membership
