// The parts of the extension module slurmddp._core, one function per file.
#pragma once

#include <pybind11/pybind11.h>

namespace slurmddp::python {

// slurmddp.Error and its subclasses, and the translation of the runtime's
// exceptions into them (errors.cpp).
void bind_errors(pybind11::module_& m);
// slurmddp.Sampler (sampler.cpp).
void bind_sampler(pybind11::module_& m);
// slurmddp.Store, connect() and rendezvous() (store.cpp).
void bind_store(pybind11::module_& m);

}  // namespace slurmddp::python
