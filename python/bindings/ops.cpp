// Registers every op family's Python bindings in the myriad.ops submodule.
#include "bindings.h"

namespace myriad::python {

void bind_matmul(pybind11::module_& ops);

void bind_ops(pybind11::module_& ops) {
  bind_matmul(ops);
}

}  // namespace myriad::python
