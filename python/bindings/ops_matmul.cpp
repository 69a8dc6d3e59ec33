// Python bindings of matmul: outputs are allocated when not given; gradients returned as a tuple.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "myriad/ops/matmul.h"

namespace py = pybind11;

namespace myriad::python {

void bind_matmul(py::module_& ops) {
  ops.def(
      "matmul_forward",
      [](const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, float alpha, const py::object& out) {
        MatmulArgs args{
            .transpose_a = transpose_a, .transpose_b = transpose_b, .alpha = alpha, .accumulate = !out.is_none()};
        std::int64_t m = transpose_a ? a.size(-1) : a.size(-2);
        std::int64_t n = transpose_b ? b.size(-2) : b.size(-1);
        Shape shape(a.shape().begin(), a.shape().end() - 2);
        shape.push_back(m);
        shape.push_back(n);
        Tensor result = output_or_new(out, shape);
        if (out.is_none()) args.accumulate = false;
        matmul_forward(args, a, b, result);
        return result;
      },
      py::arg("a"), py::arg("b"), py::arg("transpose_a") = false, py::arg("transpose_b") = false,
      py::arg("alpha") = 1.0f, py::arg("accumulate_into") = py::none(),
      "alpha * op(a) @ op(b); with accumulate_into=t, adds into t and returns it");
  ops.def(
      "matmul_backward",
      [](const Tensor& a, const Tensor& b, const Tensor& grad_out, bool transpose_a, bool transpose_b, float alpha) {
        MatmulArgs args{.transpose_a = transpose_a, .transpose_b = transpose_b, .alpha = alpha};
        Tensor grad_a = Tensor::empty(a.shape()), grad_b = Tensor::empty(b.shape());
        matmul_backward(args, a, b, grad_out, grad_a, grad_b);
        return py::make_tuple(grad_a, grad_b);
      },
      py::arg("a"), py::arg("b"), py::arg("grad_out"), py::arg("transpose_a") = false, py::arg("transpose_b") = false,
      py::arg("alpha") = 1.0f, "(grad_a, grad_b)");
}

}  // namespace myriad::python
