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
#include "resume/checkpoint_reader.h"
#include "resume/checkpoint_writer.h"
#include "resume/run_record.h"
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
      "claim_run",
      [](const std::string& dir) { return resume::claim_run(dir, resume::run_identity()); },
      py::arg("dir"),
      "Claims the per-job directory for this run, or raises Error saying whose it is; returns "
      "the run's nonce (Note [Run identity] in runtime/resume/run_record.h).");

  m.def(
      "encode_checkpoint",
      [](int64_t step, int rank, int world, const std::string& sampler, const py::handle& payload,
         int version) {
        resume::RankFile f;
        f.step = step;
        f.rank = rank;
        f.world = world;
        f.sampler = sampler;
        const std::string p = as_string(payload, "payload");
        f.payload.assign(p.begin(), p.end());
        if (version != 1 && version != 2) {
          throw InvalidArgument("encode_checkpoint: version=" + std::to_string(version) +
                                "; expected 1 or 2");
        }
        const std::string out = version == 1 ? resume::encode_v1(f) : resume::encode(f);
        return py::bytes(out);
      },
      py::arg("step"), py::arg("rank"), py::arg("world"), py::arg("sampler"), py::arg("payload"),
      py::arg("version") = 2,
      "One rank's checkpoint file in memory (Note [Checkpoint layout]; version 1 as "
      "written before version 2, for tests and tools).");
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
      "(step, rank, world, sampler, payload) of a checkpoint file, read whole; raises "
      "slurmddp.Error naming the file when it is missing, truncated or fails its checksum.");

  py::class_<resume::RankFileWriter>(m, "CheckpointWriter", R"doc(
One rank's checkpoint file written as its payload arrives (Note [Streaming
checkpoints]): the file-like object torch.save writes into. The header and the
sampler state are written at once to a private temporary file beside
dir/name; write() appends payload bytes through the checksum (the GIL
released); commit() writes the checksum line, fsyncs and renames into place;
abort() (or dropping it uncommitted) removes the temporary file. One thread at
a time.)doc")
      .def(py::init([](const std::string& dir, const std::string& name, int64_t step, int rank,
                       int world, const std::string& sampler) {
             py::gil_scoped_release release;
             return std::make_unique<resume::RankFileWriter>(dir, name, step, rank, world, sampler);
           }),
           py::arg("dir"), py::arg("name"), py::arg("step"), py::arg("rank"), py::arg("world"),
           py::arg("sampler"))
      .def(
          "write",
          [](resume::RankFileWriter& w, const py::buffer& data) {
            const py::buffer_info info = data.request();
            const auto n = static_cast<size_t>(info.size * info.itemsize);
            {
              py::gil_scoped_release release;
              w.write(info.ptr, n);
            }
            return n;
          },
          py::arg("data"), "Appends bytes to the payload; returns how many.")
      .def(
          "flush",
          [](resume::RankFileWriter& w) {
            py::gil_scoped_release release;
            if (w.open()) w.flush();
          },
          "Hands buffered bytes to the file (a no-op once committed or aborted).")
      .def(
          "commit",
          [](resume::RankFileWriter& w) {
            py::gil_scoped_release release;
            w.commit();
          },
          "The checksum line, fsync, rename into place, fsync of the directory.")
      .def(
          "abort",
          [](resume::RankFileWriter& w) {
            py::gil_scoped_release release;
            w.abort();
          },
          "Removes the temporary file (a no-op once committed).")
      .def("writable", [](const resume::RankFileWriter& w) { return w.open(); })
      .def("fileno", &resume::RankFileWriter::fd,
           "The temporary file, open for reading back the payload before commit().")
      .def_property_readonly("payload_offset", &resume::RankFileWriter::payload_offset)
      .def_property_readonly("payload_bytes", &resume::RankFileWriter::payload_bytes)
      .def_property_readonly("path", &resume::RankFileWriter::path)
      .def_property_readonly("temp_path", &resume::RankFileWriter::temp_path);

  py::class_<resume::RankFileReader>(m, "CheckpointFile", R"doc(
One rank's checkpoint file, open (Note [Streaming checkpoints]): its structure
checked on opening (header, checksum line, sizes), with verify=True its
checksum too, streamed with the GIL released. Raises slurmddp.Error naming the
file when it is missing, truncated or damaged. The payload is read by offset
(fileno(), payload_offset, payload_bytes).)doc")
      .def(py::init([](const std::string& path, bool verify) {
             py::gil_scoped_release release;
             return std::make_unique<resume::RankFileReader>(path, verify);
           }),
           py::arg("path"), py::arg("verify"))
      .def_property_readonly("version",
                             [](const resume::RankFileReader& f) { return f.layout().version; })
      .def_property_readonly("step",
                             [](const resume::RankFileReader& f) { return f.layout().step; })
      .def_property_readonly("rank",
                             [](const resume::RankFileReader& f) { return f.layout().rank; })
      .def_property_readonly("world",
                             [](const resume::RankFileReader& f) { return f.layout().world; })
      .def_property_readonly(
          "payload_offset",
          [](const resume::RankFileReader& f) { return f.layout().payload_offset; })
      .def_property_readonly(
          "payload_bytes", [](const resume::RankFileReader& f) { return f.layout().payload_bytes; })
      .def_property_readonly("path", &resume::RankFileReader::path)
      .def("sampler", &resume::RankFileReader::sampler, "The sampler state, as saved.")
      .def("fileno", &resume::RankFileReader::fd);

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
      "make_private_dirs",
      [](const std::string& path) {
        py::gil_scoped_release release;
        resume::make_private_dirs(path);
      },
      py::arg("path"),
      "Creates path and its missing parents with mode 0700 (Note [Planted files]); existing "
      "directories keep their mode.");
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
