// Python bindings of layernorm / rmsnorm. Forward returns (out, saved...), backward returns the
// gradients; parameter gradients start from zero here, so `+=` yields the gradient itself.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "myriad/ops/norms.h"

namespace py = pybind11;

namespace myriad::python {

namespace {
Shape rows_of(const Tensor& x) { return Shape{x.numel() / x.size(-1)}; }
}  // namespace

void bind_norms(py::module_& ops) {
  ops.def(
      "layernorm_forward",
      [](const Tensor& x, const Tensor& weight, const py::object& bias, float eps) {
        Tensor b = bias.is_none() ? Tensor() : bias.cast<Tensor>();
        Tensor out = Tensor::empty(x.shape()), mean = Tensor::empty(rows_of(x)), rstd = Tensor::empty(rows_of(x));
        layernorm_forward(LayernormArgs{.eps = eps}, x, weight, b, out, mean, rstd);
        return py::make_tuple(out, mean, rstd);
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("eps") = 1e-5f, "(out, mean, rstd)");
  ops.def(
      "layernorm_backward",
      [](const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd, const Tensor& grad_out,
         bool with_bias, float eps) {
        Tensor grad_x = Tensor::empty(x.shape()), grad_w = Tensor::zeros(weight.shape());
        Tensor grad_b = with_bias ? Tensor::zeros(weight.shape()) : Tensor();
        layernorm_backward(LayernormArgs{.eps = eps}, x, weight, mean, rstd, grad_out, grad_x, grad_w, grad_b);
        if (with_bias) return py::tuple(py::make_tuple(grad_x, grad_w, grad_b));
        return py::tuple(py::make_tuple(grad_x, grad_w));
      },
      py::arg("x"), py::arg("weight"), py::arg("mean"), py::arg("rstd"), py::arg("grad_out"),
      py::arg("with_bias") = true, py::arg("eps") = 1e-5f, "(grad_x, grad_weight[, grad_bias])");
  ops.def(
      "rmsnorm_forward",
      [](const Tensor& x, const Tensor& weight, float eps) {
        Tensor out = Tensor::empty(x.shape()), rstd = Tensor::empty(rows_of(x));
        rmsnorm_forward(RmsnormArgs{.eps = eps}, x, weight, out, rstd);
        return py::make_tuple(out, rstd);
      },
      py::arg("x"), py::arg("weight"), py::arg("eps") = 1e-5f, "(out, rstd)");
  ops.def(
      "rmsnorm_backward",
      [](const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& grad_out, float eps) {
        Tensor grad_x = Tensor::empty(x.shape()), grad_w = Tensor::zeros(weight.shape());
        rmsnorm_backward(RmsnormArgs{.eps = eps}, x, weight, rstd, grad_out, grad_x, grad_w);
        return py::make_tuple(grad_x, grad_w);
      },
      py::arg("x"), py::arg("weight"), py::arg("rstd"), py::arg("grad_out"), py::arg("eps") = 1e-5f,
      "(grad_x, grad_weight)");
}

}  // namespace myriad::python
