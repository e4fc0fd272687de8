// The parts of the extension module slurmddp._core, one function per file.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "slurmddp/store.h"

namespace slurmddp::python {

// What Python holds of a store (slurmddp.Store): the store, and what to call
// it in messages.
struct PyStore {
  std::shared_ptr<Store> store;
  std::string endpoint;
};

// slurmddp.Error and its subclasses, and the translation of the runtime's
// exceptions into them (errors.cpp).
void bind_errors(pybind11::module_& m);
// slurmddp.Sampler (sampler.cpp).
void bind_sampler(pybind11::module_& m);
// slurmddp.Store, connect() and rendezvous() (store.cpp).
void bind_store(pybind11::module_& m);
// slurmddp._core.Watch, the hang report's watchdog (progress.cpp).
void bind_progress(pybind11::module_& m);
// slurmddp._core's stop handlers, checkpoint files and requeue (resume.cpp).
void bind_resume(pybind11::module_& m);

}  // namespace slurmddp::python
