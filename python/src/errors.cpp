// Note [Python exceptions]
//   Each runtime error becomes a subclass of slurmddp.Error (itself a
//   RuntimeError, which is what torch.distributed raises) that is also the
//   matching built-in: InvalidArgument is a ValueError, TimeoutError the
//   built-in TimeoutError, PeerError a ConnectionError. Code that catches the
//   built-ins keeps working and code that wants to can tell ours apart. The
//   message is the runtime's, unchanged: it names the variable, the value,
//   the rank and host.
#include <Python.h>

#include "bindings.h"
#include "slurmddp/error.h"

namespace py = pybind11;

namespace slurmddp::python {

namespace {

// New exception classes live as long as the interpreter; the module keeps a
// reference too.
PyObject* make_class(py::module_& m, const char* name, std::initializer_list<PyObject*> bases,
                     const char* doc) {
  py::tuple tb(bases.size());
  size_t i = 0;
  for (PyObject* b : bases) tb[i++] = py::reinterpret_borrow<py::object>(b);
  const std::string qualified = std::string("slurmddp.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, tb.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(cls));
  return cls;
}

}  // namespace

void bind_errors(py::module_& m) {
  static PyObject* error =
      make_class(m, "Error", {PyExc_RuntimeError}, "Base of every error slurm-ddp raises.");
  static PyObject* invalid =
      make_class(m, "InvalidArgument", {error, PyExc_ValueError},
                 "A value from the caller or the environment is missing, garbled or "
                 "contradictory; the message names it.");
  static PyObject* timeout =
      make_class(m, "TimeoutError", {error, PyExc_TimeoutError},
                 "An operation did not complete in time; the message says who is missing.");
  static PyObject* peer = make_class(m, "PeerError", {error, PyExc_ConnectionError},
                                     "A peer or the store server died or closed the connection.");
  static PyObject* protocol = make_class(
      m, "ProtocolError", {error}, "A peer broke the protocol, or authentication was refused.");
  // pybind11's ExceptionTranslator takes the pointer by value.
  py::register_exception_translator(
      [](std::exception_ptr p) {  // NOLINT(performance-unnecessary-value-param)
        try {
          if (p) std::rethrow_exception(p);
        } catch (const InvalidArgument& e) {
          PyErr_SetString(invalid, e.what());
        } catch (const TimeoutError& e) {
          PyErr_SetString(timeout, e.what());
        } catch (const PeerError& e) {
          PyErr_SetString(peer, e.what());
        } catch (const ProtocolError& e) {
          PyErr_SetString(protocol, e.what());
        } catch (const Error& e) {
          PyErr_SetString(error, e.what());
        }
      });
}

}  // namespace slurmddp::python
