// TensorParallel's layer helpers and the serial implementation (a group of one: every region op
// is the identity, the vocabulary ops are the plain embedding and cross-entropy ops).
#include "myriad/nn/tensor_parallel.h"

#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

void TensorParallel::row_parallel_linear(const Tensor& in, const Tensor& weight, const Tensor& bias, Tensor& partial,
                                         Tensor& out, DType operands) const {
  if (size() == 1) {
    linear_forward(in, weight, bias, out, operands);
    return;
  }
  Tensor full = full_of(out, partial);
  linear_forward(in, weight, Tensor(), full, operands);
  reduce_to_rows(full, out);
  if (bias.defined()) add_row_bias(out, bias);
}

namespace {

// Host ids / targets placed where `like` lives.
Tensor placed_like(const Tensor& tokens, const Tensor& like) {
  return ops::placement_of(like, "tensor").from_host(ops::placement_of(tokens, "tokens").to_host(tokens));
}

class SerialTensorParallel final : public TensorParallel {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  bool shards_rows() const override { return false; }
  void gather_rows(const Tensor&, Tensor&) const override {}
  void reduce_to_rows(Tensor&, Tensor&) const override {}
  void sum_replicated_grads(Tensor&) const override {}
  void embedding_lookup(const Tensor& ids, const Tensor& table, Tensor& out) const override {
    embedding_forward(EmbeddingArgs{}, placed_like(ids, table), table, out);
  }
  void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) const override {
    myriad::embedding_backward(EmbeddingArgs{}, placed_like(ids, grad_table), grad_out, grad_table);
  }
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const CrossEntropyArgs& args, Tensor& losses,
                             Tensor& lse) const override {
    myriad::cross_entropy_forward(args, logits, placed_like(targets, logits), losses, lse);
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const CrossEntropyArgs& args,
                              const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits) const override {
    myriad::cross_entropy_backward(args, logits, placed_like(targets, logits), lse, grad_losses, grad_logits);
  }
};

}  // namespace

const TensorParallel& serial_tensor_parallel() {
  static const SerialTensorParallel serial;  // stateless: every model shares it
  return serial;
}

}  // namespace myriad::nn
