// The myriad._myriad extension module: core types, ops, and the myriad.Error exception.
// Each part binds itself from its own file; this one only wires them together.
#include <pybind11/pybind11.h>

#include "bindings.h"

PYBIND11_MODULE(_myriad, m) {
  m.doc() = "myriad: distributed LLM training runtime (C++ engine bindings)";
  m.attr("__version__") = MYRIAD_VERSION;  // project(VERSION) in CMakeLists.txt: the one place it is written
  myriad::python::bind_errors(m);
  myriad::python::bind_tensor(m);
  pybind11::module_ ops = m.def_submodule("ops", "Reference ops: <op>_forward / <op>_backward pairs");
  myriad::python::bind_ops(ops);
  myriad::python::bind_config(m);
  myriad::python::bind_dist(m);
  myriad::python::bind_train(m);
  pybind11::module_ data = m.def_submodule("data", "myriad-data: tokenize, dedup, mix and inspect (docs/data.md)");
  myriad::python::bind_data(data);
}
