// Python bindings of weight-only INT8 (ops/int8_linear.h): tensors in, new tensors out.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "myriad/ops/int8_linear.h"

namespace py = pybind11;

namespace myriad::python {

void bind_int8(py::module_& ops) {
  ops.def(
      "quantize_int8",
      [](const Tensor& weight, std::int64_t group_size) {
        MYRIAD_CHECK(weight.dim() == 2, "quantize_int8: weight must be 2-D (out, in), is " << weight.describe());
        Tensor q = Tensor::empty(weight.shape(), DType::i8);
        Tensor scales = Tensor::empty({weight.size(0), int8_groups(weight.size(1), group_size)});
        py::gil_scoped_release release;
        quantize_int8(Int8Args{.group_size = group_size}, weight, q, scales);
        return std::make_pair(q, scales);
      },
      py::arg("weight"), py::arg("group_size") = 0,
      "(q int8, scales f32): symmetric weight-only INT8 per output channel (group_size 0) or per group of "
      "group_size input columns");
  ops.def(
      "dequantize_int8",
      [](const Tensor& q, const Tensor& scales, std::int64_t group_size) {
        Tensor weight = Tensor::empty(q.shape());
        py::gil_scoped_release release;
        dequantize_int8(Int8Args{.group_size = group_size}, q, scales, weight);
        return weight;
      },
      py::arg("q"), py::arg("scales"), py::arg("group_size") = 0, "q * scale as f32");
  ops.def(
      "int8_linear_forward",
      [](const Tensor& x, const Tensor& q, const Tensor& scales, const py::object& bias, std::int64_t group_size) {
        Shape shape = x.shape();
        MYRIAD_CHECK(!shape.empty() && q.dim() == 2, "int8_linear_forward: x (..., K) and q (N, K) expected");
        shape.back() = q.size(0);
        Tensor y = Tensor::empty(shape);
        const Tensor b = bias.is_none() ? Tensor() : bias.cast<Tensor>();
        py::gil_scoped_release release;
        int8_linear_forward(Int8Args{.group_size = group_size}, x, q, scales, b, y);
        return y;
      },
      py::arg("x"), py::arg("q"), py::arg("scales"), py::arg("bias") = py::none(), py::arg("group_size") = 0,
      "x @ dequant(q, scales)^T + bias");
}

}  // namespace myriad::python
