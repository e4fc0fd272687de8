// The C++ parts of slurmddp's preemption support (slurmddp/resume.py builds
// StopSignal, Checkpointer and requeue() on them over torch.distributed):
// the stop signals' handlers (Note [Stop requests]), the checkpoint file
// format and its atomic writes (Note [Checkpoint layout]), and requeue (Note
// [Requeue]). Blocking calls release the GIL.
#include <pybind11/stl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "resume/checkpoint_file.h"
#include "resume/checkpoint_io.h"
#include "slurmddp/checkpoint.h"
#include "slurmddp/error.h"
#include "slurmddp/requeue.h"
#include "slurmddp/stop.h"

namespace py = pybind11;

namespace slurmddp::python {

namespace {

// The process's stop handlers: a StopSignal with no communicator (Python
// agrees over torch.distributed and tells it with agree()).
struct StopHandlers {
  std::unique_ptr<StopSignal> stop;
  pid_t pid = getpid();

  StopSignal& get() {
    if (!stop) throw InvalidArgument("StopSignal: closed");
    return *stop;
  }
  void close() {
    if (stop && getpid() != pid) {
      (void)stop.release();  // a forked child: the parent owns the handlers' state
      return;
    }
    stop.reset();
  }
};

std::string as_string(const py::handle& v, const char* what) {
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::bytes>(v) || py::isinstance<py::bytearray>(v) ||
      py::isinstance<py::memoryview>(v)) {
    const py::buffer_info info = py::reinterpret_borrow<py::buffer>(v).request();
    return std::string(static_cast<const char*>(info.ptr),
                       static_cast<size_t>(info.size * info.itemsize));
  }
  throw InvalidArgument(std::string("checkpoint: ") + what + " must be bytes or str, not " +
                        std::string(py::str(py::type::handle_of(v).attr("__name__"))));
}

}  // namespace

void bind_resume(py::module_& m) {
  py::class_<StopHandlers>(m, "StopHandlers", R"doc(
Handlers for the stop signals (slurmddp.StopSignal wraps them): each only
records the first signal and calls the handler installed before it.)doc")
      .def(py::init([](const std::vector<int>& signals) {
             StopOptions options;
             options.signals = signals;
             auto h = std::make_unique<StopHandlers>();
             h->stop = std::make_unique<StopSignal>(std::move(options));
             return h;
           }),
           py::arg("signals"))
      .def_property_readonly("local_signal", [](StopHandlers& h) { return h.get().local_signal(); })
      .def_property_readonly("agreed_signal",
                             [](StopHandlers& h) { return h.get().agreed_signal(); })
      .def(
          "request", [](StopHandlers& h, int signal) { h.get().request(signal); },
          py::arg("signal"))
      .def(
          "agree", [](StopHandlers& h, int signal) { h.get().agree(signal); }, py::arg("signal"))
      .def(
          "reinstall", [](StopHandlers& h) { return h.get().reinstall(); },
          "Puts the handlers back in front of handlers installed after them (which they "
          "then call); returns the signals whose handler had been replaced.")
      .def("close", &StopHandlers::close);

  m.def(
      "keep_forever", [](const py::handle& obj) { obj.inc_ref(); }, py::arg("obj"),
      "Holds one more reference to obj that is never released: objects that another "
      "thread may still release during interpreter teardown (Note [Tensors outlive "
      "torch's Gloo thread] in slurmddp/resume.py).");

  m.def("signal_name", &signal_name, py::arg("signal"),
        "\"SIGUSR1\" for a signal number; \"signal N\" when it has no name.");

  m.def(
      "requeue",
      [](const std::string& scontrol) {
        py::gil_scoped_release release;
        requeue_job(scontrol);
      },
      py::arg("scontrol") = "scontrol",
      "Runs `scontrol requeue` for this job (the array task in a job array).");
  m.def(
      "requeue_target", [] { return requeue_target(); },
      "The job scontrol requeue names: <array job>_<task> in an array task, else SLURM_JOB_ID.");
  m.def("job_checkpoint_dir", &job_checkpoint_dir, py::arg("base"),
        "base/job-<id> (job-<array id>_<task> in a job array; base/local outside Slurm).");

  m.def(
      "encode_checkpoint",
      [](int64_t step, int rank, int world, const std::string& sampler, const py::handle& payload) {
        resume::RankFile f;
        f.step = step;
        f.rank = rank;
        f.world = world;
        f.sampler = sampler;
        const std::string p = as_string(payload, "payload");
        f.payload.assign(p.begin(), p.end());
        const std::string out = resume::encode(f);
        return py::bytes(out);
      },
      py::arg("step"), py::arg("rank"), py::arg("world"), py::arg("sampler"), py::arg("payload"),
      "One rank's checkpoint file (Note [Checkpoint layout]).");
  m.def(
      "read_checkpoint",
      [](const std::string& path) {
        resume::RankFile f;
        {
          py::gil_scoped_release release;
          auto bytes = resume::read_file(path);
          if (!bytes) {
            throw Error("checkpoint " + path + " is missing or unreadable (" +
                        std::strerror(errno) + "); the directory must be shared by every node");
          }
          f = resume::decode(path, *bytes);
        }
        return py::make_tuple(
            f.step, f.rank, f.world, f.sampler,
            py::bytes(reinterpret_cast<const char*>(f.payload.data()), f.payload.size()));
      },
      py::arg("path"),
      "(step, rank, world, sampler, payload) of a checkpoint file; raises slurmddp.Error "
      "naming the file when it is missing, truncated or fails its checksum.");
  m.def(
      "write_atomic",
      [](const std::string& dir, const std::string& name, const py::handle& data) {
        const std::string bytes = as_string(data, "data");
        py::gil_scoped_release release;
        resume::write_atomic(dir, name, bytes);
      },
      py::arg("dir"), py::arg("name"), py::arg("data"),
      "Writes dir/name atomically: a temporary file, fsync, rename, fsync of dir.");
  m.def(
      "prune_checkpoints",
      [](const std::string& dir, int64_t current, int keep) {
        py::gil_scoped_release release;
        resume::prune(dir, current, keep);
      },
      py::arg("dir"), py::arg("current"), py::arg("keep"),
      "Keeps the `keep` newest complete step-<N> directories up to `current`.");
}

}  // namespace slurmddp::python
