// myriad::Error becomes myriad.Error (a RuntimeError subclass) in Python.
//
// str(e) is what a user reads: "[rank N] message" (the problem, naming the key, file or tensor);
// debug builds keep the C++ source location in it too. The location is always on the exception
// as e.file and e.line (drivers write it to the rank's log), with e.rank and e.message. Text that
// is not valid UTF-8 (a byte string from a bad input file) is decoded with replacement characters,
// so the message survives instead of becoming a UnicodeDecodeError. A std::filesystem error that
// escapes the library arrives the same way, as myriad.Error naming the path.
#include <pybind11/pybind11.h>

#include <filesystem>
#include <string>

#include "bindings.h"
#include "myriad/core/error.h"

namespace py = pybind11;

namespace myriad::python {

namespace {

py::str decoded(const std::string& text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

void raise(const py::object& type, const std::string& shown, const std::string& message, const std::string& file,
           int line, int rank) {
  py::object error = type(decoded(shown));
  error.attr("message") = decoded(message);
  error.attr("file") = decoded(file);
  error.attr("line") = line;
  error.attr("rank") = rank < 0 ? 0 : rank;
  PyErr_SetObject(type.ptr(), error.ptr());
}

}  // namespace

void bind_errors(py::module_& m) {
  static py::exception<myriad::Error> error_type(m, "Error", PyExc_RuntimeError);
  // NOLINTNEXTLINE(performance-unnecessary-value-param): pybind11's ExceptionTranslator takes it by value
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const myriad::Error& e) {
      const std::string where = "[rank " + std::to_string(e.rank() < 0 ? 0 : e.rank()) + "] ";
#ifdef NDEBUG
      const std::string shown = where + e.message();
#else
      const std::string shown = where + e.file() + ":" + std::to_string(e.line()) + ": " + e.message();
#endif
      raise(error_type, shown, e.message(), e.file(), e.line(), e.rank());
    } catch (const std::filesystem::filesystem_error& e) {
      const int rank = launcher_rank();
      const std::string message = std::string("file system: ") + e.what();
      raise(error_type, "[rank " + std::to_string(rank < 0 ? 0 : rank) + "] " + message, message, "", 0, rank);
    }
  });
}

}  // namespace myriad::python
