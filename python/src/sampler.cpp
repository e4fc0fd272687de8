// slurmddp.Sampler: the C++ DistributedSampler (slurmddp/sampler.h) with its
// cursor, handing out indices in blocks so that Python pays per block, not
// per index: take() fills a NumPy array, take_list() a list (what iteration
// uses: a list's iterator is the fastest way to hand Python ints to a
// DataLoader).
#include "slurmddp/sampler.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "slurmddp/error.h"

namespace py = pybind11;

namespace slurmddp::python {

namespace {

SamplerMode parse_mode(const std::string& mode) {
  if (mode == "auto") return SamplerMode::kAuto;
  if (mode == "torch") return SamplerMode::kTorch;
  if (mode == "scalable") return SamplerMode::kScalable;
  throw InvalidArgument("Sampler: invalid mode='" + mode +
                        "': expected 'auto', 'torch' or 'scalable'");
}

void check_count(const char* what, int64_t count) {
  if (count < 0) {
    throw InvalidArgument(std::string("Sampler.") + what + ": max=" + std::to_string(count) +
                          " is negative");
  }
}

py::array_t<int64_t> take(DistributedSampler& s, int64_t max) {
  check_count("take", max);
  const int64_t count = std::min(max, s.remaining());
  py::array_t<int64_t> out(static_cast<py::ssize_t>(count));
  int64_t* data = out.mutable_data();
  {
    py::gil_scoped_release release;
    s.next(data, count);
  }
  return out;
}

py::list take_list(DistributedSampler& s, int64_t max) {
  check_count("take_list", max);
  const int64_t count = std::min(max, s.remaining());
  std::vector<int64_t> buf(static_cast<size_t>(count));
  {
    py::gil_scoped_release release;
    s.next(buf.data(), count);
  }
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(count));
  if (list == nullptr) throw py::error_already_set();
  for (int64_t i = 0; i < count; ++i) {
    PyObject* v = PyLong_FromLongLong(buf[static_cast<size_t>(i)]);
    if (v == nullptr) {
      Py_DECREF(list);
      throw py::error_already_set();
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), v);  // steals v
  }
  return py::reinterpret_steal<py::list>(list);
}

py::array_t<int64_t> indices(const DistributedSampler& s, int64_t first, int64_t count) {
  if (count < 0 || first < 0 || first > s.size() || count > s.size() - first) {
    // get() says the same; checked here so that no array is allocated first.
    s.get(first, count, nullptr);
  }
  py::array_t<int64_t> out(static_cast<py::ssize_t>(count));
  int64_t* data = out.mutable_data();
  {
    py::gil_scoped_release release;
    s.get(first, count, data);
  }
  return out;
}

}  // namespace

void bind_sampler(py::module_& m) {
  py::class_<DistributedSampler>(m, "Sampler", R"doc(
The shard of one rank of a shuffled dataset, per epoch (slurmddp/sampler.h).

mode 'torch' reproduces torch.utils.data.DistributedSampler index for index
(of the PyTorch named by torch_version, default: 2.6 or later; releases differ
from 214,748,364 samples on; n <= 2**32 - 1; costs 4 bytes per index of the
dataset while an epoch is shuffled); 'scalable' draws a keyed permutation in O(1) memory for
any n; 'auto' is 'torch' up to 2**24 samples and 'scalable' above. Evaluation
mode visits every index exactly once across ranks (no padding).

The sampler has a cursor: take()/take_list() hand out the next indices,
state()/load_state() save and restore where it stands.)doc")
      .def(py::init([](int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, int64_t seed,
                       bool drop_last, bool evaluation, const std::string& mode, int64_t epoch,
                       const std::optional<std::string>& torch_version) {
             SamplerOptions o;
             if (torch_version) o.torch_release = torch_release_of(*torch_version);
             o.shuffle = shuffle;
             o.seed = seed;
             o.drop_last = drop_last;
             o.evaluation = evaluation;
             o.mode = parse_mode(mode);
             o.epoch = epoch;
             py::gil_scoped_release release;  // a kTorch shuffle takes O(n)
             return DistributedSampler(n, num_replicas, rank, o);
           }),
           py::arg("n"), py::arg("num_replicas"), py::arg("rank"), py::kw_only(),
           py::arg("shuffle") = true, py::arg("seed") = 0, py::arg("drop_last") = false,
           py::arg("evaluation") = false, py::arg("mode") = "auto", py::arg("epoch") = 0,
           py::arg("torch_version") = py::none())
      .def("set_epoch", &DistributedSampler::set_epoch, py::arg("epoch"),
           py::call_guard<py::gil_scoped_release>(),
           "Selects the permutation of `epoch` and rewinds the cursor.")
      .def_property_readonly("epoch", &DistributedSampler::epoch)
      .def("__len__", &DistributedSampler::size)
      .def_property_readonly("size", &DistributedSampler::size,
                             "Indices in this rank's shard per epoch.")
      .def_property_readonly("total_size", &DistributedSampler::total_size)
      .def_property_readonly("dataset_size", &DistributedSampler::dataset_size)
      .def_property_readonly("num_replicas", &DistributedSampler::num_replicas)
      .def_property_readonly("rank", &DistributedSampler::rank)
      .def_property_readonly(
          "mode", [](const DistributedSampler& s) { return to_string(s.mode()); },
          "The mode in effect: 'torch' or 'scalable'.")
      .def_property_readonly(
          "torch_release",
          [](const DistributedSampler& s) { return to_string(s.options().torch_release); },
          "The PyTorch releases whose order mode 'torch' reproduces: '2.6+' or '<2.6'.")
      .def_property_readonly("shuffle",
                             [](const DistributedSampler& s) { return s.options().shuffle; })
      .def_property_readonly("seed", [](const DistributedSampler& s) { return s.options().seed; })
      .def_property_readonly("drop_last",
                             [](const DistributedSampler& s) { return s.options().drop_last; })
      .def_property_readonly("evaluation",
                             [](const DistributedSampler& s) { return s.options().evaluation; })
      .def_property_readonly("position", &DistributedSampler::position,
                             "Indices of this epoch handed out so far.")
      .def_property_readonly("remaining", &DistributedSampler::remaining)
      .def("seek", &DistributedSampler::seek, py::arg("position"),
           "Moves the cursor to `position` in [0, size].")
      .def("take", &take, py::arg("max"),
           "The next up to `max` indices as an int64 NumPy array (empty at the end of the epoch).")
      .def("take_list", &take_list, py::arg("max"),
           "The next up to `max` indices as a list of ints (empty at the end of the epoch).")
      .def("indices", &indices, py::arg("first"), py::arg("count"),
           "Indices first .. first+count-1 of this epoch's shard, independent of the cursor.")
      .def("__getitem__", &DistributedSampler::at, py::arg("i"))
      .def("shard_sizes", &DistributedSampler::shard_sizes,
           "Indices per epoch of every rank (they sum to n in evaluation mode).")
      .def_property_readonly(
          "fingerprint", [](const DistributedSampler& s) { return s.fingerprint(); },
          "Identifies the configuration; part of every state.")
      .def(
          "state", [](const DistributedSampler& s) { return s.state().to_string(); },
          "Where the sampler stands, as one line of text (epoch, position, fingerprint).")
      .def(
          "load_state",
          [](DistributedSampler& s, const std::string& text) {
            const SamplerState state = SamplerState::parse(text);
            py::gil_scoped_release release;
            s.load_state(state);
          },
          py::arg("state"),
          "Continues from a state() of a sampler with the same configuration (InvalidArgument "
          "otherwise).");
}

}  // namespace slurmddp::python
