// Declarations of the per-area binding functions of the _myriad module.
#pragma once

#include <pybind11/pybind11.h>

#include "myriad/core/tensor.h"

namespace myriad::python {

void bind_errors(pybind11::module_& m);
void bind_tensor(pybind11::module_& m);
void bind_ops(pybind11::module_& ops);
void bind_config(pybind11::module_& m);  // myriad.Config
void bind_train(pybind11::module_& m);
void bind_dist(pybind11::module_& m);
void bind_data(pybind11::module_& m);  // the myriad.data submodule

// An output argument: the given tensor, or a new f32 CPU tensor of `shape` when None.
Tensor output_or_new(const pybind11::object& given, const Shape& shape, DType dtype = DType::f32);

}  // namespace myriad::python
