// Python bindings of the elementwise / row-wise ops: gelu, swiglu, softmax, bias_add.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/softmax.h"

namespace py = pybind11;

namespace myriad::python {

void bind_elementwise(py::module_& ops) {
  ops.def(
      "gelu_forward",
      [](const Tensor& x) {
        Tensor out = Tensor::empty(x.shape());
        gelu_forward(GeluArgs{}, x, out);
        return out;
      },
      py::arg("x"), "GPT-2 tanh-approximated GELU");
  ops.def(
      "gelu_backward",
      [](const Tensor& x, const Tensor& grad_out) {
        Tensor grad_x = Tensor::empty(x.shape());
        gelu_backward(GeluArgs{}, x, grad_out, grad_x);
        return grad_x;
      },
      py::arg("x"), py::arg("grad_out"));
  ops.def(
      "swiglu_forward",
      [](const Tensor& gate, const Tensor& up) {
        Tensor out = Tensor::empty(gate.shape());
        swiglu_forward(SwigluArgs{}, gate, up, out);
        return out;
      },
      py::arg("gate"), py::arg("up"), "silu(gate) * up");
  ops.def(
      "swiglu_backward",
      [](const Tensor& gate, const Tensor& up, const Tensor& grad_out) {
        Tensor grad_gate = Tensor::empty(gate.shape()), grad_up = Tensor::empty(up.shape());
        swiglu_backward(SwigluArgs{}, gate, up, grad_out, grad_gate, grad_up);
        return py::make_tuple(grad_gate, grad_up);
      },
      py::arg("gate"), py::arg("up"), py::arg("grad_out"), "(grad_gate, grad_up)");
  ops.def(
      "softmax_forward",
      [](const Tensor& x) {
        Tensor out = Tensor::empty(x.shape());
        softmax_forward(SoftmaxArgs{}, x, out);
        return out;
      },
      py::arg("x"), "softmax over the last dim");
  ops.def(
      "softmax_backward",
      [](const Tensor& out, const Tensor& grad_out) {
        Tensor grad_x = Tensor::empty(out.shape());
        softmax_backward(SoftmaxArgs{}, out, grad_out, grad_x);
        return grad_x;
      },
      py::arg("out"), py::arg("grad_out"));
  ops.def(
      "bias_add_forward",
      [](const Tensor& x, const Tensor& bias) {
        Tensor out = Tensor::empty(x.shape());
        bias_add_forward(BiasAddArgs{}, x, bias, out);
        return out;
      },
      py::arg("x"), py::arg("bias"));
  ops.def(
      "bias_add_backward",
      [](const Tensor& grad_out, std::int64_t channels) {
        Tensor grad_x = Tensor::empty(grad_out.shape()), grad_bias = Tensor::zeros({channels});
        bias_add_backward(BiasAddArgs{}, grad_out, grad_x, grad_bias);
        return py::make_tuple(grad_x, grad_bias);
      },
      py::arg("grad_out"), py::arg("channels"), "(grad_x, grad_bias)");
}

}  // namespace myriad::python
