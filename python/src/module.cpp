// slurmddp._core: the C++ runtime's sampler and authenticated rendezvous for
// Python (the pure-Python package slurmddp wraps it; slurmddp.torch adapts
// it to PyTorch).
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "slurmddp_config.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "slurm-ddp's C++ runtime for Python: sampler and authenticated rendezvous store";
  m.attr("__version__") = SLURMDDP_VERSION;
  slurmddp::python::bind_errors(m);
  slurmddp::python::bind_sampler(m);
  slurmddp::python::bind_store(m);
  slurmddp::python::bind_progress(m);
  slurmddp::python::bind_resume(m);
}
