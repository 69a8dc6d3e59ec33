// Python bindings of embedding, fused softmax cross-entropy and the AdamW update.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "myriad/ops/adamw.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"

namespace py = pybind11;

namespace myriad::python {

void bind_training_ops(py::module_& ops) {
  ops.def(
      "embedding_forward",
      [](const Tensor& ids, const Tensor& table) {
        Shape shape = ids.shape();
        shape.push_back(table.size(1));
        Tensor out = Tensor::empty(shape);
        embedding_forward(EmbeddingArgs{}, ids, table, out);
        return out;
      },
      py::arg("ids"), py::arg("table"), "ids (i32, any shape), table (V, C) -> (ids..., C)");
  ops.def(
      "embedding_backward",
      [](const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) {
        embedding_backward(EmbeddingArgs{}, ids, grad_out, grad_table);
        return grad_table;
      },
      py::arg("ids"), py::arg("grad_out"), py::arg("grad_table"), "accumulates into grad_table (+=) and returns it");
  ops.def(
      "cross_entropy_forward",
      [](const Tensor& logits, const Tensor& targets, std::int32_t ignore_index) {
        Tensor losses = Tensor::empty({logits.size(0)}), lse = Tensor::empty({logits.size(0)});
        cross_entropy_forward(CrossEntropyArgs{.ignore_index = ignore_index}, logits, targets, losses, lse);
        return py::make_tuple(losses, lse);
      },
      py::arg("logits"), py::arg("targets"), py::arg("ignore_index") = -100, "(losses (N), lse (N))");
  ops.def(
      "cross_entropy_backward",
      [](const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_losses,
         std::int32_t ignore_index) {
        Tensor grad_logits = Tensor::empty(logits.shape());
        cross_entropy_backward(CrossEntropyArgs{.ignore_index = ignore_index}, logits, targets, lse, grad_losses,
                               grad_logits);
        return grad_logits;
      },
      py::arg("logits"), py::arg("targets"), py::arg("lse"), py::arg("grad_losses"), py::arg("ignore_index") = -100);
  ops.def("count_valid_targets", &count_valid_targets, py::arg("targets"), py::arg("ignore_index") = -100);
  ops.def(
      "adamw_update",
      [](Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2, float eps,
         float weight_decay, std::int64_t step, float grad_scale) {
        AdamWArgs args{.lr = lr,
                       .beta1 = beta1,
                       .beta2 = beta2,
                       .eps = eps,
                       .weight_decay = weight_decay,
                       .step = step,
                       .grad_scale = grad_scale};
        adamw_update(args, param, grad, m, v);
      },
      py::arg("param"), py::arg("grad"), py::arg("m"), py::arg("v"), py::arg("lr"), py::arg("beta1") = 0.9f,
      py::arg("beta2") = 0.95f, py::arg("eps") = 1e-8f, py::arg("weight_decay") = 0.0f, py::arg("step"),
      py::arg("grad_scale") = 1.0f, "in-place AdamW step on param, m, v");
  ops.def("grad_norm_squared", &grad_norm_squared, py::arg("grad"));
}

}  // namespace myriad::python
