// slurmddp._core.Watch: the C++ watchdog of the hang report (Note [Progress
// records]) for a Python program; slurmddp.torch.Progress wraps it.
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "bindings.h"
#include "group/watch.h"
#include "slurmddp/error.h"

namespace py = pybind11;

namespace slurmddp::python {

namespace {

// The Python callable lives here (destroyed with the GIL held); the watchdog's
// thread borrows it while it runs, and it is joined before this goes.
struct PyWatch {
  std::shared_ptr<progress::Tracker> tracker = std::make_shared<progress::Tracker>();
  Watch watch;
  py::object describe;
  pid_t pid = getpid();

  void close() {
    if (!watch.watchdog && !watch.signal) return;
    if (getpid() != pid) {
      // A forked child (a DataLoader worker): the thread is not in this
      // process; nothing to join or restore here.
      (void)watch.watchdog.release();
      (void)watch.signal.release();
      return;
    }
    py::gil_scoped_release release;  // the thread may be waiting for the GIL
    watch.watchdog.reset();
    watch.signal.reset();
  }
  ~PyWatch() {
    try {
      close();
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing to tell at destruction
    }
  }
};

// describe(full) -> (where, op, stack), called on the watchdog's thread. A
// Python error is logged into the record rather than raised on that thread.
void call_describe(PyObject* fn, progress::Record& record, bool full) {
  py::gil_scoped_acquire gil;
  try {
    auto [where, op, stack] = py::reinterpret_borrow<py::object>(fn)(full)
                                  .cast<std::tuple<std::string, std::string, std::string>>();
    record.where = where;
    if (!op.empty() && record.phase == progress::Phase::kUser) {
      record.phase = progress::Phase::kCollective;
      record.op = op;
      record.seq = -1;  // torch's sequence numbers are its own
    }
    record.stack = stack;
  } catch (py::error_already_set& e) {
    record.where = std::string("(describe failed: ") + e.what() + ")";
  } catch (const std::exception& e) {
    record.where = std::string("(describe failed: ") + e.what() + ")";
  }
}

// The tracker keeps an operation's name as a pointer that must outlive it:
// Python's names are kept here, one copy each.
const char* interned(const std::string& name) {
  static std::mutex mu;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  return names.insert(name).first->c_str();
}

}  // namespace

void bind_progress(py::module_& m) {
  py::class_<PyWatch>(m, "Watch", R"doc(
The hang report's watchdog for this rank (slurmddp.torch.Progress wraps it).)doc")
      .def(
          py::init([](const PyStore& store, int rank, int world_size, const std::string& node,
                      const std::string& scope, int64_t timeout_ms, const py::object& describe,
                      std::optional<int64_t> hang_after_ms,
                      std::optional<int64_t> straggler_every) {
            if (world_size < 1 || rank < 0 || rank >= world_size) {
              throw InvalidArgument("Watch: rank=" + std::to_string(rank) +
                                    " world_size=" + std::to_string(world_size) +
                                    "; expected 0 <= rank < world_size");
            }
            if (timeout_ms <= 0) {
              throw InvalidArgument("Watch: timeout_ms=" + std::to_string(timeout_ms) +
                                    "; expected a positive timeout");
            }
            auto w = std::make_unique<PyWatch>();
            WatchRequest r;
            r.store = store.store;
            r.scope = scope;
            r.rank = rank;
            r.size = world_size;
            r.node = node;
            r.timeout = std::chrono::milliseconds(timeout_ms);
            r.marks_collectives = false;
            if (hang_after_ms) {
              if (*hang_after_ms < 0) {
                throw InvalidArgument("Watch: hang_after_ms=" + std::to_string(*hang_after_ms) +
                                      "; expected 0 (never) or more");
              }
              r.hang_after = std::chrono::milliseconds(*hang_after_ms);
            }
            if (straggler_every) {
              if (*straggler_every < 0) {
                throw InvalidArgument("Watch: straggler_every=" + std::to_string(*straggler_every) +
                                      "; expected a number of steps, or 0 for no report");
              }
              r.straggler_every = *straggler_every;
            }
            if (!describe.is_none()) {
              w->describe = describe;
              PyObject* fn = w->describe.ptr();
              r.describe = [fn](progress::Record& rec, bool full) { call_describe(fn, rec, full); };
            }
            w->watch = make_watch(r, w->tracker);
            return w;
          }),
          py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("node"),
          py::arg("scope"), py::arg("timeout_ms"), py::arg("describe") = py::none(),
          py::arg("hang_after_ms") = py::none(), py::arg("straggler_every") = py::none())
      .def(
          "step_done", [](PyWatch& w, int64_t step) { w.tracker->step_done(step); },
          py::arg("step"), "This rank completed training step `step`.")
      .def(
          "data_enter", [](PyWatch& w) { w.tracker->data_enter(); },
          "The training waits for data from now (Note [Straggler windows]).")
      .def(
          "data_leave", [](PyWatch& w) { w.tracker->data_leave(); }, "The data has come.")
      .def(
          "enter", [](PyWatch& w, const std::string& op) { w.tracker->enter(interned(op), -1); },
          py::arg("op"), "This rank waits in collective `op` from now.")
      .def(
          "leave", [](PyWatch& w) { w.tracker->leave(); }, "The collective is done.")
      .def(
          "request",
          [](PyWatch& w) {
            if (w.watch.watchdog) w.watch.watchdog->request();
          },
          "Asks for a report now (taken at the next poll).")
      .def_property_readonly("active", [](const PyWatch& w) { return bool(w.watch.watchdog); })
      .def_property_readonly(
          "signal", [](const PyWatch& w) { return w.watch.signal ? w.watch.signal->signal() : 0; })
      .def_property_readonly(
          "printed",
          [](const PyWatch& w) { return w.watch.watchdog ? w.watch.watchdog->printed() : 0; })
      .def("close", &PyWatch::close, "Stops the watchdog (joins its thread).");
}

}  // namespace slurmddp::python
