// Note [Failure notes] in notes.h.
#include "membership/notes.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "membership/ranks.h"
#include "slurmddp/error.h"

namespace slurmddp::membership {

namespace {

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

std::string context_keys(const DiagnosisContext& ctx) {
  return "rank=" + std::to_string(ctx.rank) + ", size=" + std::to_string(ctx.size) +
         ", timeout_ms=" + std::to_string(ctx.timeout.count());
}

std::string bytes_to_string(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

constexpr std::chrono::milliseconds kStoreReadTimeout{2000};

}  // namespace

const char* to_string(Observation::Kind kind) {
  switch (kind) {
    case Observation::Kind::kTimeout:
      return "timeout";
    case Observation::Kind::kPeer:
      return "peer";
    case Observation::Kind::kAborted:
      return "aborted";
    case Observation::Kind::kOther:
      return "other";
  }
  return "other";
}

std::string encode_note(const Observation& o, const std::string& op) {
  std::ostringstream os;
  os << "kind=" << to_string(o.kind) << '\n'
     << "peer=" << o.peer << '\n'
     << "op=" << one_line(op) << '\n'
     << "detail=" << one_line(o.detail);
  return os.str();
}

std::optional<Observation> decode_note(const std::string& text, std::string* op) {
  Observation o;
  bool have_kind = false;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    const std::string value = line.substr(eq + 1);
    if (key == "kind") {
      have_kind = true;
      if (value == "timeout") {
        o.kind = Observation::Kind::kTimeout;
      } else if (value == "peer") {
        o.kind = Observation::Kind::kPeer;
      } else if (value == "aborted") {
        o.kind = Observation::Kind::kAborted;
      } else {
        o.kind = Observation::Kind::kOther;
      }
    } else if (key == "peer") {
      try {
        o.peer = std::stoi(value);
      } catch (const std::exception&) {
        o.peer = -1;
      }
    } else if (key == "op") {
      if (op != nullptr) *op = value;
    } else if (key == "detail") {
      o.detail = value;
    }
  }
  if (!have_kind) return std::nullopt;
  return o;
}

std::string failure_key(const std::string& prefix, int rank) {
  return prefix + "/failed/" + std::to_string(rank);
}

std::chrono::milliseconds diagnosis_grace(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
}

void write_note(const DiagnosisContext& ctx, const Observation& o, const std::string& op) {
  if (!ctx.store) return;
  try {
    const std::string note = encode_note(o, op);
    ctx.store->set(failure_key(ctx.prefix, ctx.rank), Bytes(note.begin(), note.end()));
  } catch (const std::exception&) {
    // Best effort: the others then count this rank as a suspect.
  }
}

std::exception_ptr conclude(const DiagnosisContext& ctx, const Observation& own,
                            const std::string& op) {
  std::vector<std::optional<Observation>> notes(static_cast<size_t>(ctx.size));
  notes[static_cast<size_t>(ctx.rank)] = own;
  std::string store_problem;
  if (!ctx.store) {
    store_problem = "no store";
  } else if (ctx.size > 1) {
    std::vector<std::string> keys;
    for (int j = 0; j < ctx.size; ++j) {
      if (j != ctx.rank) keys.push_back(failure_key(ctx.prefix, j));
    }
    try {
      ctx.store->wait(keys, ctx.grace);
    } catch (const TimeoutError&) {
      // Some ranks wrote no note within the grace period: the suspects.
    } catch (const std::exception& e) {
      store_problem = e.what();
    }
    if (store_problem.empty()) {
      try {
        for (int j = 0; j < ctx.size; ++j) {
          if (j == ctx.rank) continue;
          const std::string key = failure_key(ctx.prefix, j);
          if (!ctx.store->check({key})) continue;
          notes[static_cast<size_t>(j)] =
              decode_note(bytes_to_string(ctx.store->get(key, kStoreReadTimeout)));
        }
      } catch (const std::exception& e) {
        store_problem = e.what();
      }
    }
  }
  return decide(ctx, own, op, notes, store_problem);
}

std::exception_ptr note_and_conclude(const DiagnosisContext& ctx, Observation::Kind kind,
                                     const std::string& op, const std::exception_ptr& plain) {
  if (!ctx.store || ctx.size <= 1) return plain;
  Observation own;
  own.kind = kind;
  try {
    std::rethrow_exception(plain);
  } catch (const std::exception& e) {
    own.detail = e.what();
  } catch (...) {
    own.detail = "unknown exception";
  }
  write_note(ctx, own, op);
  return conclude(ctx, own, op);
}

std::exception_ptr decide(const DiagnosisContext& ctx, const Observation& own,
                          const std::string& op,
                          const std::vector<std::optional<Observation>>& notes,
                          const std::string& store_problem) {
  const std::string head = ctx.component + ": failed to " + op + ": ";
  const std::string keys = context_keys(ctx);
  const std::string seen = own.detail.empty() ? "" : " (" + own.detail + ")";

  if (store_problem.empty()) {
    std::vector<int> suspects;
    for (int j = 0; j < ctx.size; ++j) {
      if (j != ctx.rank && !notes[static_cast<size_t>(j)]) suspects.push_back(j);
    }
    if (!suspects.empty()) {
      std::set<int> closed_by;  // ranks some rank saw drop a connection
      for (int j = 0; j < ctx.size; ++j) {
        const auto& n = notes[static_cast<size_t>(j)];
        if (n && n->kind == Observation::Kind::kPeer && n->peer >= 0) closed_by.insert(n->peer);
      }
      std::vector<int> lost;
      for (int s : suspects) {
        if (closed_by.count(s)) lost.push_back(s);
      }
      if (!lost.empty()) {
        const std::string who = lost.size() == 1 ? "lost peer rank " + std::to_string(lost[0])
                                                 : "lost peer ranks " + rank_list(lost);
        std::string peer_key = lost.size() == 1 ? std::to_string(lost[0]) : rank_list(lost);
        return std::make_exception_ptr(
            PeerError(head + who + seen + "; " + keys + ", peer=" + peer_key));
      }
      return std::make_exception_ptr(TimeoutError(
          head + "no response from " + (suspects.size() == 1 ? "rank " : "ranks ") +
          (suspects.size() == 1 ? std::to_string(suspects[0]) : rank_list(suspects)) +
          " within the timeout" + seen + "; " + keys + ", missing=" + rank_list(suspects)));
    }
    for (int j = 0; j < ctx.size; ++j) {
      const auto& n = notes[static_cast<size_t>(j)];
      if (j != ctx.rank && n && n->kind == Observation::Kind::kAborted) {
        std::string m = head + "rank " + std::to_string(j) + " aborted the communicator: ";
        m.append(n->detail).append("; ").append(keys).append(", peer=").append(std::to_string(j));
        return std::make_exception_ptr(PeerError(m));
      }
    }
  }

  const std::string note =
      store_problem.empty() ? "" : " (no group diagnosis: the store failed: " + store_problem + ")";
  const std::string peer = own.peer >= 0 ? ", peer=" + std::to_string(own.peer) : "";
  switch (own.kind) {
    case Observation::Kind::kTimeout:
      return std::make_exception_ptr(
          TimeoutError(head + "timed out" + seen + note + "; " + keys + peer));
    case Observation::Kind::kPeer: {
      const std::string who = own.peer >= 0
                                  ? "connection to rank " + std::to_string(own.peer) + " failed"
                                  : "connection to a peer failed";
      return std::make_exception_ptr(PeerError(head + who + seen + note + "; " + keys + peer));
    }
    case Observation::Kind::kAborted:
    case Observation::Kind::kOther:
      break;
  }
  return std::make_exception_ptr(Error(head + own.detail + note + "; " + keys + peer));
}

}  // namespace slurmddp::membership
