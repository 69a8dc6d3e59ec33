// TensorParallelRegions — the model's TensorParallel (nn/tensor_parallel.h) over a tensor-
// parallel communicator: the parallelize step of the distributed layer. The Engine makes one from
// the layout (parallel.tp > 1, parallel.sequence_parallel) and hands it to the model through its
// ModelSplit; the model's layers then cross the group only through it.
//
//   without sequence parallelism: gather_rows is the identity, reduce_to_rows an all-reduce
//     (copy_to_tp_region / reduce_from_tp_region), replicated parameters need no reduction;
//   with it: gather_rows an all-gather of token rows, reduce_to_rows a reduce-scatter
//     (gather_from_sequence_region / reduce_scatter_to_sequence_region), and replicated
//     parameters' gradients (partial over each rank's rows) are all-reduced;
//   vocabulary: parallel/vocab_parallel.h on rows [padded * rank / tp, padded * (rank + 1) / tp).
// The communicator must carry the model's tensors (MPI for host tensors, NCCL for device ones).
#pragma once

#include "myriad/distributed/communicator.h"
#include "myriad/parallel/vocab_parallel.h"
#include "myriad/nn/tensor_parallel.h"
#include "myriad/nn/transformer_config.h"

namespace myriad::parallel {

class TensorParallelRegions final : public nn::TensorParallel {
 public:
  // `tp` (not owned) must outlive this object.
  TensorParallelRegions(distributed::Communicator& tp, bool sequence_parallel, const nn::TransformerConfig& model);

  int size() const override { return tp_.size(); }
  int rank() const override { return tp_.rank(); }
  bool shards_rows() const override { return shards_rows_; }

  void gather_rows(const Tensor& rows, Tensor& full) const override;
  // Sequence parallelism: a ring of send / recv instead of one all-gather — at step j each rank
  // passes on the block it got last (its own first) and receives the next one from its left
  // neighbour, while `consume` runs on the block it already holds (the same bytes per link as a
  // ring all-gather; with tp t, t - 1 transfers overlap t - 1 of the t GEMM blocks).
  void gather_rows_overlapped(const Tensor& rows, Tensor& full, const RowsConsumer& consume) const override;
  void reduce_to_rows(Tensor& full, Tensor& rows) const override;
  // Sequence parallelism: a ring reduce-scatter whose partial sums are produced as they are sent
  // — block b's sum starts on rank b + 1, and each rank adds its own partial of the block it
  // receives and passes it on, producing the next block's partial while the transfer runs (the
  // bytes per link of a ring reduce-scatter; t - 1 of the t GEMM blocks overlapped). Without it:
  // the rows in two blocks (chunk_range), the first all-reduced while the second is produced.
  void reduce_to_rows_overlapped(Tensor& full, Tensor& rows, const RowsProducer& produce) const override;

  void embedding_lookup(const Tensor& ids, const Tensor& table, Tensor& out) const override;
  void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) const override;
  // The shard's real columns of the logits are its own (VocabShard::real_columns); args gives the ignore index.
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const CrossEntropyArgs& args, Tensor& losses,
                             Tensor& lse) const override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const CrossEntropyArgs& args,
                              const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits) const override;
  // An all-gather of every rank's columns (the shard plan's even split), placed side by side.
  void gather_vocabulary(const Tensor& shard, Tensor& logits) const override;

 private:
  distributed::Communicator& tp_;
  bool shards_rows_;
  VocabShard shard_;
};

}  // namespace myriad::parallel
