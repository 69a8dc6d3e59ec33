// Registers every op family's Python bindings in the myriad.ops submodule.
#include "bindings.h"

namespace myriad::python {

void bind_matmul(pybind11::module_& ops);
void bind_norms(pybind11::module_& ops);
void bind_elementwise(pybind11::module_& ops);
void bind_attention(pybind11::module_& ops);
void bind_training_ops(pybind11::module_& ops);
void bind_int8(pybind11::module_& ops);

void bind_ops(pybind11::module_& ops) {
  bind_matmul(ops);
  bind_norms(ops);
  bind_elementwise(ops);
  bind_attention(ops);
  bind_training_ops(ops);
  bind_int8(ops);
}

}  // namespace myriad::python
