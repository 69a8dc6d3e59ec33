// myriad::Error becomes myriad.Error (a RuntimeError subclass) in Python, message intact.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "myriad/core/error.h"

namespace myriad::python {

void bind_errors(pybind11::module_& m) {
  static pybind11::exception<myriad::Error> error_type(m, "Error", PyExc_RuntimeError);
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const myriad::Error& e) {
      PyErr_SetString(error_type.ptr(), e.what());
    }
  });
}

}  // namespace myriad::python
