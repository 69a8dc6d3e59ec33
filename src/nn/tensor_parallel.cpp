// TensorParallel's layer helpers and the serial implementation (a group of one: every region op
// is the identity, the vocabulary ops are the plain embedding and cross-entropy ops).
#include "myriad/nn/tensor_parallel.h"

#include <optional>
#include <string>

#include "myriad/core/error.h"
#include "myriad/nn/host_tokens.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

void TensorParallel::gather_rows_overlapped(const Tensor& rows, Tensor& full, const RowsConsumer& consume) const {
  gather_rows(rows, full);
  consume(0, full.numel() / full.size(-1));
}

Tensor TensorParallel::own_rows_of(const Tensor& full) const {
  if (!shards_rows()) return full;
  const std::int64_t C = full.size(-1), n = full.numel() / C / size();
  return full.view({n * size(), C}).slice(0, rank() * n, (rank() + 1) * n).view({1, n, C});
}

void TensorParallel::reduce_to_rows_overlapped(Tensor& full, Tensor& rows, const RowsProducer& produce) const {
  const std::int64_t C = full.size(-1), N = full.numel() / C;
  Tensor all = full.view({N, C});
  produce(0, N, all);
  reduce_to_rows(full, rows);
}

void TensorParallel::row_parallel_linear(const LinearInto& linear, const Tensor& bias, Tensor& partial,
                                         Tensor& out) const {
  const std::int64_t C = out.size(-1);
  if (size() == 1) {
    Tensor all = out.view({out.numel() / C, C});
    linear(bias, 0, all.size(0), all);
    return;
  }
  Tensor full = full_of(out, partial);
  reduce_to_rows_overlapped(
      full, out, [&](std::int64_t begin, std::int64_t end, Tensor& block) { linear(Tensor(), begin, end, block); });
  if (bias.defined()) add_row_bias(out, bias);
}

namespace {

// Host ids / targets placed where `like` lives. On a device they are checked on the host first
// (checked_host_tokens), so the device op reads no flag back (no wait); the CPU op checks its own.
// Tokens already on like's device (a model's staged inputs: GptModel::set_inputs_staged) were
// checked by whoever placed them and are used as they are.
Tensor checked_placed_like(const char* op, const char* what, const Tensor& tokens, std::int64_t limit,
                           std::optional<std::int32_t> ignore, const Tensor& like) {
  if (!tokens.device().is_cpu() && tokens.device() == like.device()) return tokens;
  const ops::Placement placement = ops::placement_of(like, "tensor");
  if (placement.on_host()) return ops::placement_of(tokens, what).to_host(tokens);
  return placement.from_host(checked_host_tokens(op, what, tokens, limit, ignore));
}

std::int64_t classes_of(const CrossEntropyArgs& args, const Tensor& logits) {
  return args.classes > 0 ? args.classes : logits.size(-1);
}

CrossEntropyArgs checked(CrossEntropyArgs args) {
  args.targets_checked = true;
  return args;
}

class SerialTensorParallel final : public TensorParallel {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  bool shards_rows() const override { return false; }
  void gather_rows(const Tensor&, Tensor&) const override {}
  void reduce_to_rows(Tensor&, Tensor&) const override {}
  void embedding_lookup(const Tensor& ids, const Tensor& table, Tensor& out) const override {
    const Tensor placed = checked_placed_like("embedding_forward", "id", ids, table.size(0), std::nullopt, table);
    embedding_forward(EmbeddingArgs{.ids_checked = true}, placed, table, out);
  }
  void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) const override {
    const Tensor placed =
        checked_placed_like("embedding_backward", "id", ids, grad_table.size(0), std::nullopt, grad_table);
    myriad::embedding_backward(EmbeddingArgs{.ids_checked = true}, placed, grad_out, grad_table);
  }
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const CrossEntropyArgs& args, Tensor& losses,
                             Tensor& lse) const override {
    const Tensor placed = checked_placed_like("cross_entropy_forward", "target", targets, classes_of(args, logits),
                                              args.ignore_index, logits);
    myriad::cross_entropy_forward(checked(args), logits, placed, losses, lse);
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const CrossEntropyArgs& args,
                              const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits) const override {
    const Tensor placed = checked_placed_like("cross_entropy_backward", "target", targets, classes_of(args, logits),
                                              args.ignore_index, logits);
    myriad::cross_entropy_backward(checked(args), logits, placed, lse, grad_losses, grad_logits);
  }
  void gather_vocabulary(const Tensor& shard, Tensor& logits) const override { copy(shard, logits); }
};

}  // namespace

const TensorParallel& serial_tensor_parallel() {
  static const SerialTensorParallel serial;  // stateless: every model shares it
  return serial;
}

}  // namespace myriad::nn
