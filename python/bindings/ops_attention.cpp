// Python bindings of causal self-attention (blocked, online softmax; GQA) and RoPE.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/rope.h"

namespace py = pybind11;

namespace myriad::python {

void bind_attention(py::module_& ops) {
  ops.def(
      "attention_forward",
      [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale) {
        AttentionArgs args;
        args.causal = causal;
        args.scale = scale;
        Tensor out = Tensor::empty(q.shape());
        Tensor lse = Tensor::empty({q.size(0), q.size(1), q.size(2)});
        attention_forward(args, q, k, v, out, lse);
        return py::make_tuple(out, lse);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = true, py::arg("scale") = 0.0f,
      "q (B, Hq, T, D), k/v (B, Hkv, T, D) -> (out (B, Hq, T, D), lse (B, Hq, T)); scale 0 = 1/sqrt(D)");
  ops.def(
      "attention_backward",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
         const Tensor& grad_out, bool causal, float scale) {
        AttentionArgs args;
        args.causal = causal;
        args.scale = scale;
        Tensor gq = Tensor::empty(q.shape()), gk = Tensor::empty(k.shape()), gv = Tensor::empty(v.shape());
        attention_backward(args, q, k, v, out, lse, grad_out, gq, gk, gv);
        return py::make_tuple(gq, gk, gv);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("grad_out"),
      py::arg("causal") = true, py::arg("scale") = 0.0f, "(grad_q, grad_k, grad_v)");
  ops.def(
      "rope_forward",
      [](const Tensor& x, double theta, std::int64_t position_offset) {
        Tensor out = Tensor::empty(x.shape());
        rope_forward(RopeArgs{.theta = theta, .position_offset = position_offset}, x, out);
        return out;
      },
      py::arg("x"), py::arg("theta") = 10000.0, py::arg("position_offset") = 0, "x (B, T, H, D), rotate-half RoPE");
  ops.def(
      "rope_backward",
      [](const Tensor& grad_out, double theta, std::int64_t position_offset) {
        Tensor grad_x = Tensor::empty(grad_out.shape());
        rope_backward(RopeArgs{.theta = theta, .position_offset = position_offset}, grad_out, grad_x);
        return grad_x;
      },
      py::arg("grad_out"), py::arg("theta") = 10000.0, py::arg("position_offset") = 0);
}

}  // namespace myriad::python
