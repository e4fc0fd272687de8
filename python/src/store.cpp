// slurmddp.Store (the runtime's Store contract, slurmddp/store.h),
// slurmddp.connect() (a TCP store client, or server and client) and
// slurmddp.rendezvous() (what init() does before it builds a communicator:
// identity, the authenticated store, the join that names who is missing).
// Every blocking call releases the GIL.
#include <pybind11/stl.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "common/log.h"
#include "env/locality.h"
#include "group/rendezvous_store.h"
#include "membership/membership.h"
#include "slurmddp/error.h"
#include "slurmddp/identity.h"
#include "slurmddp/tcp_store.h"

namespace py = pybind11;

namespace slurmddp::python {

namespace {

using Millis = std::chrono::milliseconds;

Bytes to_bytes(const py::handle& v, const char* what) {
  if (py::isinstance<py::bytes>(v) || py::isinstance<py::bytearray>(v) ||
      py::isinstance<py::memoryview>(v)) {
    const py::buffer_info info = py::reinterpret_borrow<py::buffer>(v).request();
    const auto* p = static_cast<const uint8_t*>(info.ptr);
    return Bytes(p, p + info.size * info.itemsize);
  }
  if (py::isinstance<py::str>(v)) {
    const std::string s = v.cast<std::string>();
    return Bytes(s.begin(), s.end());
  }
  throw InvalidArgument(std::string("Store: ") + what + " must be bytes or str, not " +
                        std::string(py::str(py::type::handle_of(v).attr("__name__"))));
}

py::bytes to_py(const Bytes& b) {
  return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

Millis millis(int64_t ms, const char* what) {
  if (ms < 0) {
    throw InvalidArgument(std::string("Store.") + what + ": timeout_ms=" + std::to_string(ms) +
                          " is negative");
  }
  return Millis(ms);
}

// The rendezvous of slurmddp:// (Python side: slurmddp.torch).
struct Rendezvous {
  PyStore store;
  ProcessIdentity id;
  int64_t timeout_ms = 0;
};

Rendezvous rendezvous(std::optional<int> rank, std::optional<int> world_size,
                      std::optional<int64_t> timeout_ms) {
  Rendezvous r;
  r.id = identity_from_environment();
  const ProcessIdentity& id = r.id;
  const std::string where_env =
      " (identity from " + std::string(to_string(id.source)) + ": " + id.describe() + ")";
  if (rank && *rank != id.rank) {
    throw InvalidArgument("slurmddp:// rendezvous: rank=" + std::to_string(*rank) +
                          " was passed, but the environment gives this task rank " +
                          std::to_string(id.rank) + where_env + "; leave rank unset");
  }
  if (world_size && *world_size != id.world_size) {
    throw InvalidArgument("slurmddp:// rendezvous: world_size=" + std::to_string(*world_size) +
                          " was passed, but the environment gives world size " +
                          std::to_string(id.world_size) + where_env + "; leave world_size unset");
  }
  log::set_rank(id.rank);
  std::optional<Millis> requested;
  if (timeout_ms) requested = millis(*timeout_ms, "rendezvous");
  // SLURMDDP_TIMEOUT, when set, bounds the rendezvous (torch always passes
  // its 30-minute default).
  const Millis timeout = std::getenv("SLURMDDP_TIMEOUT") != nullptr
                             ? timeout_from_environment(std::nullopt)
                             : timeout_from_environment(requested);
  r.timeout_ms = timeout.count();
  auto store = rendezvous_store(id, bootstrap_from_environment(Bootstrap::kAuto), timeout,
                                "slurmddp:// rendezvous: ");
  // init()'s join, under its own prefix and without a backend's fields.
  membership::Membership::join(
      join_options(id, store, "slurmddp/torch", "slurmddp:// rendezvous: ", timeout));
  r.store.store = store;
  if (auto tcp = std::dynamic_pointer_cast<TcpStore>(store)) r.store.endpoint = tcp->endpoint();
  return r;
}

}  // namespace

void bind_store(py::module_& m) {
  py::class_<PyStore>(m, "Store", R"doc(
A client of slurm-ddp's rendezvous store (slurmddp/store.h): any number of
threads may use it; blocking calls take a timeout in milliseconds and raise
slurmddp.TimeoutError naming the missing keys; a lost server raises
slurmddp.PeerError naming host:port.)doc")
      .def_property_readonly(
          "endpoint", [](const PyStore& s) { return s.endpoint; },
          "host:port of the server ('' for an in-process store).")
      .def(
          "set",
          [](PyStore& s, const std::string& key, const py::object& value) {
            Bytes v = to_bytes(value, "value");
            py::gil_scoped_release release;
            s.store->set(key, v);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "get",
          [](PyStore& s, const std::string& key, int64_t timeout_ms) {
            Bytes v;
            {
              py::gil_scoped_release release;
              v = s.store->get(key, millis(timeout_ms, "get"));
            }
            return to_py(v);
          },
          py::arg("key"), py::arg("timeout_ms"))
      .def(
          "add",
          [](PyStore& s, const std::string& key, int64_t delta) {
            return s.store->add(key, delta);
          },
          py::arg("key"), py::arg("delta"), py::call_guard<py::gil_scoped_release>())
      .def(
          "compare_set",
          [](PyStore& s, const std::string& key, const py::object& expected,
             const py::object& desired) {
            Bytes e = to_bytes(expected, "expected");
            Bytes d = to_bytes(desired, "desired");
            Bytes out;
            {
              py::gil_scoped_release release;
              out = s.store->compare_set(key, e, d);
            }
            return to_py(out);
          },
          py::arg("key"), py::arg("expected"), py::arg("desired"))
      .def(
          "wait",
          [](PyStore& s, const std::vector<std::string>& keys, int64_t timeout_ms) {
            s.store->wait(keys, millis(timeout_ms, "wait"));
          },
          py::arg("keys"), py::arg("timeout_ms"), py::call_guard<py::gil_scoped_release>())
      .def(
          "check",
          [](PyStore& s, const std::vector<std::string>& keys) { return s.store->check(keys); },
          py::arg("keys"), py::call_guard<py::gil_scoped_release>())
      .def(
          "delete_key", [](PyStore& s, const std::string& key) { return s.store->erase(key); },
          py::arg("key"), py::call_guard<py::gil_scoped_release>())
      .def(
          "close",
          [](PyStore& s) {
            // A hosting store lingers (serving the others' last requests) as
            // long as they stay connected: not with the GIL held.
            std::shared_ptr<Store> old = std::move(s.store);
            py::gil_scoped_release release;
            old.reset();
          },
          "Disconnects (a hosted server first serves the ranks still connected, up to its "
          "linger time). Later calls raise slurmddp.Error.");

  m.def(
      "connect",
      [](const std::string& host, int port, bool is_server, const std::string& token,
         int64_t timeout_ms, int64_t linger_ms) {
        if (port < 0 || port > 65535) {
          throw InvalidArgument("connect: port=" + std::to_string(port) + " is outside [0, 65535]");
        }
        TcpStoreOptions o;
        o.host = host;
        o.port = static_cast<uint16_t>(port);
        o.is_server = is_server;
        o.token = token;
        o.timeout = millis(timeout_ms, "connect");
        o.linger = millis(linger_ms, "connect");
        std::shared_ptr<TcpStore> tcp;
        {
          py::gil_scoped_release release;
          tcp = make_tcp_store(o);
        }
        return PyStore{tcp, tcp->endpoint()};
      },
      py::arg("host"), py::arg("port"), py::kw_only(), py::arg("is_server") = false,
      py::arg("token") = "", py::arg("timeout_ms") = 300000, py::arg("linger_ms") = 5000,
      R"doc(
Connects to the TCP store at host:port, proving knowledge of `token` (empty: an
open store). With is_server, first starts the server in this process, bound on
all interfaces (port 0: a free one; see Store.endpoint).)doc");

  m.def(
      "in_process_store",
      [] {
        return PyStore{make_in_process_store(), ""};
      },
      "A store inside this process (tests, single-process runs).");

  py::class_<Rendezvous>(m, "Rendezvous", "The result of rendezvous().")
      .def_property_readonly("store", [](const Rendezvous& r) { return r.store; })
      .def_property_readonly("rank", [](const Rendezvous& r) { return r.id.rank; })
      .def_property_readonly("world_size", [](const Rendezvous& r) { return r.id.world_size; })
      .def_property_readonly("local_rank", [](const Rendezvous& r) { return r.id.local_rank; })
      .def_property_readonly("local_world_size",
                             [](const Rendezvous& r) { return r.id.local_world_size; })
      .def_property_readonly("node_rank", [](const Rendezvous& r) { return r.id.node_rank; })
      .def_property_readonly("authenticated",
                             [](const Rendezvous& r) { return !r.id.token.empty(); })
      .def_property_readonly("timeout_ms", [](const Rendezvous& r) { return r.timeout_ms; })
      .def_property_readonly("identity", [](const Rendezvous& r) { return r.id.describe(); })
      .def_property_readonly(
          "node", [](const Rendezvous& r) { return locality_from_environment(r.id).node; },
          "This rank's node, as the hang report names it.");

  m.def("rendezvous", &rendezvous, py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
        py::arg("timeout_ms") = py::none(), py::call_guard<py::gil_scoped_release>(),
        R"doc(
Reads this task's identity from the environment (slurm-ddp's plugin, torchrun,
bare Slurm or PMIx), connects to the step's authenticated store (rank 0 hosts
it on MASTER_PORT; SLURMDDP_TOKEN proves membership) and waits until every
rank has joined. A rank that does not arrive in time makes every waiting rank
raise slurmddp.TimeoutError "k/n ranks joined; missing: [..] (hosts: ..)".
rank/world_size, when given (not None), must agree with the environment.
SLURMDDP_TIMEOUT, when set, overrides timeout_ms.)doc");
}

}  // namespace slurmddp::python
