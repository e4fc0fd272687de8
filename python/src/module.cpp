// slurmddp._core: the C++ runtime's sampler and authenticated rendezvous for
// Python (the pure-Python package slurmddp wraps it; slurmddp.torch adapts
// it to PyTorch).
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"
#include "slurmddp_config.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "slurm-ddp's C++ runtime for Python: sampler and authenticated rendezvous store";
  m.attr("__version__") = SLURMDDP_VERSION;
  // What this copy was built with: for bug reports, and what scripts/versions
  // reports of a pip-installed package (its build environment is gone).
  pybind11::dict info;
  info["pybind11"] = std::to_string(PYBIND11_VERSION_MAJOR) + "." +
                     std::to_string(PYBIND11_VERSION_MINOR) + "." +
                     std::to_string(PYBIND11_VERSION_PATCH);
#if defined(__clang__)
  info["compiler"] = "clang " __clang_version__;
#elif defined(__GNUC__)
  info["compiler"] = "gcc " __VERSION__;
#endif
  info["pmix"] = SLURMDDP_HAVE_PMIX != 0;
  m.attr("build_info") = info;
  slurmddp::python::bind_errors(m);
  slurmddp::python::bind_sampler(m);
  slurmddp::python::bind_store(m);
  slurmddp::python::bind_progress(m);
  slurmddp::python::bind_resume(m);
}
