// TensorParallel — the model's view of its tensor-parallel group: the layer types and region ops
// through which activations cross the group (Megatron's conjugate f / g pairs and, with sequence
// parallelism, g / g-bar), called by the block and the head at fixed points whatever the layout.
// The model never names a communicator: the serial implementation (serial_tensor_parallel(), a
// group of one) is the identity, and the parallel ones live in the distributed layer, made by its
// parallelize step from the layout (parallel/tensor_parallel_regions.h).
//
// Rows: the token rows of the residual stream this rank holds — all B*T of them, or (shards_rows,
// sequence parallelism) its contiguous share, shaped (1, N/tp, C). "Full" activations are all rows
// (B, T, C), what column-parallel layers read and row-parallel layers produce (partial sums).
//   gather_rows(rows, full)     column-parallel input: identity (rows is full) or all-gather;
//                               the backward of a row-parallel output
//   reduce_to_rows(full, rows)  row-parallel output: identity (a group of one), all-reduce in
//                               place (rows is full) or reduce-scatter; the backward of a
//                               column-parallel input (the sum of each rank's partial gradient)
// Vocabulary parallelism: the embedding and head rows are split over the group (this rank holds
// rows [vocab_start, vocab_start + padded/tp)); the lookup and loss ops below take the rank's
// share and global token ids / targets (host tensors or on the table's device).
// Every method is collective over the group where it communicates; ranks call them in one order.
#pragma once

#include <functional>

#include <cstdint>

#include "myriad/core/tensor.h"
#include "myriad/ops/cross_entropy.h"

namespace myriad::nn {

class TensorParallel {
 public:
  virtual ~TensorParallel() = default;

  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual bool shards_rows() const = 0;

  virtual void gather_rows(const Tensor& rows, Tensor& full) const = 0;
  // gather_rows overlapped with the layer that reads the gathered rows: full <- every rank's rows,
  // and consume(begin, end) called for blocks of full's rows (full viewed as (N, C); the blocks
  // cover all N rows once), each as soon as its rows are in place — so a column-parallel GEMM on
  // one block runs while the next is in transfer. The default gathers, then consumes all rows.
  using RowsConsumer = std::function<void(std::int64_t begin, std::int64_t end)>;
  virtual void gather_rows_overlapped(const Tensor& rows, Tensor& full, const RowsConsumer& consume) const;
  virtual void reduce_to_rows(Tensor& full, Tensor& rows) const = 0;
  // reduce_to_rows of a partial product made block by block, overlapped with its reduction:
  // produce(begin, end, out) writes (`=`) this rank's partial sum of full's rows [begin, end) —
  // full viewed as (N, C) — into out ((end - begin, C)); every row is produced once. rows <- the
  // group's sum of this rank's rows (all of them without sequence parallelism). `full` is (N, C)
  // scratch; what it holds afterwards is unspecified. The default produces all rows into full,
  // then reduces.
  using RowsProducer = std::function<void(std::int64_t begin, std::int64_t end, Tensor& out)>;
  virtual void reduce_to_rows_overlapped(Tensor& full, Tensor& rows, const RowsProducer& produce) const;

  // out (N, C) = table rows of ids (N) this rank holds, zeros for other ranks' rows (unreduced).
  virtual void embedding_lookup(const Tensor& ids, const Tensor& table, Tensor& out) const = 0;
  // grad_table += the rows of grad_out (N, C) whose ids this rank holds.
  virtual void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) const = 0;
  // logits (N, this rank's padded vocabulary columns), of which the first args.classes are real
  // (0 = all); targets (N) global (args.ignore_index allowed); losses, lse (N): the whole
  // vocabulary's.
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const CrossEntropyArgs& args,
                                     Tensor& losses, Tensor& lse) const = 0;
  // grad_logits (N, columns) written (`=`, may alias logits; 0 in the padding), scaled per row by
  // grad_losses.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const CrossEntropyArgs& args,
                                      const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits) const = 0;
  // logits (N, padded vocabulary) on every rank = each rank's `shard` (N, its padded columns)
  // side by side: the whole distribution for sampling (serving's decode; training never gathers).
  virtual void gather_vocabulary(const Tensor& shard, Tensor& logits) const = 0;

  // Layer-level helpers built from the region ops (no communication of their own).
  // The buffer this rank's rows of a full activation live in: `full` itself, or `rows_scratch`.
  Tensor rows_of(const Tensor& full, const Tensor& rows_scratch) const { return shards_rows() ? rows_scratch : full; }
  // The buffer a full activation of `rows` lives in: `rows` itself, or `full_scratch`.
  Tensor full_of(const Tensor& rows, const Tensor& full_scratch) const { return shards_rows() ? full_scratch : rows; }
  // This rank's rows inside a full activation (B, T, C), where gather_rows puts them: a (1, N/tp, C)
  // view (full itself without sharded rows). A gather whose `rows` is this view copies nothing.
  Tensor own_rows_of(const Tensor& full) const;
  // Row-parallel linear: out (rows) = the group's sum of in @ weight^T, + bias (replicated).
  // `partial`: (B, T, C) scratch for the unreduced product when rows are sharded. In a group of
  // one the bias rides in the GEMM (no reduction comes between).
  // `linear(bias, begin, end, out)`: the layer's local product of input rows [begin, end) into
  // `out` ((end - begin, C), + the bias given: defined only when it may ride in the GEMM) — a
  // 16-bit or FP8 linear of the caller's choice; called per block of rows
  // (reduce_to_rows_overlapped) under sequence parallelism.
  using LinearInto = std::function<void(const Tensor& bias, std::int64_t begin, std::int64_t end, Tensor& out)>;
  void row_parallel_linear(const LinearInto& linear, const Tensor& bias, Tensor& partial, Tensor& out) const;
};

// The identity of a group of one (the serial model); stateless.
const TensorParallel& serial_tensor_parallel();

}  // namespace myriad::nn
