#include "store/server_state.h"

#include "slurmddp/error.h"

namespace slurmddp::store {

void ServerState::handle(uint64_t conn, wire::Request&& req, Clock::time_point now) {
  using wire::Type;
  const std::string& key = req.keys.empty() ? std::string() : req.keys[0];
  switch (req.type) {
    case Type::kSet: {
      table_.set(key, std::make_shared<const Bytes>(std::move(req.value)));
      replies_->ok(conn, req.id);
      wake(key);
      break;
    }
    case Type::kGet: {
      if (Value v = table_.find(key)) {
        replies_->value(conn, req.id, v);
      } else {
        park(conn, req, now);
      }
      break;
    }
    case Type::kAdd: {
      try {
        int64_t v = table_.add(key, req.number);
        replies_->integer(conn, req.id, v);
        wake(key);
      } catch (const InvalidArgument& e) {
        replies_->error(conn, req.id, wire::ErrorCode::kInvalidArgument, e.what());
      }
      break;
    }
    case Type::kCompareSet: {
      bool changed = false;
      Value v = table_.compare_set(key, req.expected,
                                   std::make_shared<const Bytes>(std::move(req.value)), &changed);
      replies_->value(conn, req.id, v);
      if (changed) wake(key);
      break;
    }
    case Type::kWait: {
      if (table_.missing(req.keys).empty()) {
        replies_->ok(conn, req.id);
      } else {
        park(conn, req, now);
      }
      break;
    }
    case Type::kCheck: {
      replies_->boolean(conn, req.id, table_.missing(req.keys).empty());
      break;
    }
    case Type::kErase: {
      replies_->boolean(conn, req.id, table_.erase(key));
      break;
    }
    case Type::kJoin: {
      // Note [Barrier join]: store_barrier's steps, on this side.
      const std::string& count_key = req.keys[1];
      const std::string& done_key = req.keys[2];
      table_.set(key, mark_);
      wake(key);
      int64_t joined = 0;
      try {
        joined = table_.add(count_key, 1);
      } catch (const InvalidArgument& e) {
        replies_->error(conn, req.id, wire::ErrorCode::kInvalidArgument, e.what());
        break;
      }
      wake(count_key);
      if (joined == req.world) {
        table_.set(done_key, mark_);
        wake(done_key);
      }
      if (joined >= req.world || table_.contains(done_key)) {
        replies_->integer(conn, req.id, joined);
      } else {
        req.keys = {done_key};
        req.world = joined;  // what the reply will carry
        park(conn, req, now);
      }
      break;
    }
    default:
      break;  // decode_request accepts requests only
  }
}

void ServerState::park(uint64_t conn, wire::Request& req, Clock::time_point now) {
  if (req.number == 0) {  // "check once"
    replies_->timeout(conn, req.id, table_.missing(req.keys));
    return;
  }
  auto parked = parked_by_conn_.find(conn);
  if (parked != parked_by_conn_.end() && parked->second.size() >= max_parked_) {
    replies_->error(
        conn, req.id, wire::ErrorCode::kBusy,
        "store: failed to park the request: too many blocked requests on one connection; "
        "limit=" +
            std::to_string(max_parked_));
    return;
  }
  uint64_t wid = next_waiter_++;
  Waiter& w = waiters_[wid];
  w.conn = conn;
  w.request = req.id;
  w.type = req.type;
  w.keys = std::move(req.keys);
  w.joined = req.world;
  w.deadline = now + clamp_timeout(Millis(req.number));
  for (uint32_t i : table_.missing(w.keys)) {
    waiting_on_[w.keys[i]].insert(wid);
    w.registered.push_back(w.keys[i]);
  }
  parked_by_conn_[conn].insert(wid);
  deadlines_.emplace(w.deadline, wid);
}

void ServerState::unregister(uint64_t wid, Waiter& w) {
  for (const auto& k : w.registered) {
    auto it = waiting_on_.find(k);
    if (it == waiting_on_.end()) continue;
    it->second.erase(wid);
    if (it->second.empty()) waiting_on_.erase(it);
  }
  w.registered.clear();
}

void ServerState::wake(const std::string& key) {
  auto it = waiting_on_.find(key);
  if (it == waiting_on_.end()) return;
  std::unordered_set<uint64_t> woken = std::move(it->second);
  waiting_on_.erase(it);
  for (uint64_t wid : woken) {
    auto w = waiters_.find(wid);
    if (w == waiters_.end()) continue;
    unregister(wid, w->second);
    std::vector<uint32_t> missing = table_.missing(w->second.keys);
    if (missing.empty()) {
      finish_waiter(wid, false);
    } else {
      // Some key was erased since: keep waiting for it (Store::erase contract).
      for (uint32_t i : missing) {
        waiting_on_[w->second.keys[i]].insert(wid);
        w->second.registered.push_back(w->second.keys[i]);
      }
    }
  }
}

// Answers a parked request and forgets it.
void ServerState::finish_waiter(uint64_t wid, bool timed_out) {
  auto it = waiters_.find(wid);
  if (it == waiters_.end()) return;
  Waiter w = std::move(it->second);
  unregister(wid, w);
  waiters_.erase(it);
  deadlines_.erase({w.deadline, wid});
  auto parked = parked_by_conn_.find(w.conn);
  if (parked != parked_by_conn_.end()) {
    parked->second.erase(wid);
    if (parked->second.empty()) parked_by_conn_.erase(parked);
  }
  if (timed_out) {
    replies_->timeout(w.conn, w.request, table_.missing(w.keys));
  } else if (w.type == wire::Type::kGet) {
    replies_->value(w.conn, w.request, table_.find(w.keys[0]));
  } else if (w.type == wire::Type::kJoin) {
    replies_->integer(w.conn, w.request, w.joined);
  } else {
    replies_->ok(w.conn, w.request);
  }
}

void ServerState::expire_next() {
  if (!deadlines_.empty()) finish_waiter(deadlines_.begin()->second, true);
}

void ServerState::drop_waiter(uint64_t wid) {
  auto it = waiters_.find(wid);
  if (it == waiters_.end()) return;
  unregister(wid, it->second);
  deadlines_.erase({it->second.deadline, wid});
  waiters_.erase(it);
}

void ServerState::drop_connection(uint64_t conn) {
  auto parked = parked_by_conn_.find(conn);
  if (parked == parked_by_conn_.end()) return;
  for (uint64_t wid : parked->second) drop_waiter(wid);
  parked_by_conn_.erase(parked);
}

}  // namespace slurmddp::store
