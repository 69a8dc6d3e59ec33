// TensorParallelRegions: the region ops and vocabulary-parallel layers over the tp communicator.
#include "myriad/parallel/tensor_parallel_regions.h"

#include <vector>

#include "myriad/nn/linear.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/placement.h"
#include "myriad/parallel/tensor_parallel_region.h"

namespace myriad::parallel {

namespace {
constexpr int kRingTag = 0;  // the overlapped rings' blocks (p2p tag 0 of the tp group)
// Without sequence parallelism a reduction's rows go in this many blocks: more would add each
// all-reduce's latency again and thin the GEMM (the planner's model, docs/planning.md rule 4c).
constexpr int kAllReduceBlocks = 2;
}  // namespace

TensorParallelRegions::TensorParallelRegions(distributed::Communicator& tp, bool sequence_parallel,
                                             const nn::TransformerConfig& model)
    : tp_(tp),
      shards_rows_(sequence_parallel && tp.size() > 1),
      shard_{model.padded_vocab_size() * tp.rank() / tp.size(), model.vocab_size} {}

void TensorParallelRegions::gather_rows(const Tensor& rows, Tensor& full) const {
  if (shards_rows_) gather_from_sequence_region_forward(tp_, rows, full);  // else rows is full
}

void TensorParallelRegions::gather_rows_overlapped(const Tensor& rows, Tensor& full,
                                                   const RowsConsumer& consume) const {
  if (!shards_rows_) {
    consume(0, full.numel() / full.size(-1));  // rows is full
    return;
  }
  const int p = tp_.size(), r = tp_.rank();
  const std::int64_t C = full.size(-1), n = rows.numel() / C;
  MYRIAD_CHECK(n * p * C == full.numel(), "gather_rows_overlapped: tp rank " << r << " holds " << rows.describe()
                                                                             << ", which " << p << " ranks do not make "
                                                                             << full.describe());
  Tensor flat = full.view({n * p, C});
  auto block = [&](int owner) { return flat.slice(0, owner * n, (owner + 1) * n); };
  Tensor own = block(r);
  if (rows.raw_data() != own.raw_data()) copy(rows.view({n, C}), own);  // else in place already
  int held = r;  // the block passed on next: this rank's first, then the one received last
  for (int step = 1; step < p; ++step) {
    const int incoming = (r - step + p) % p;
    Tensor outgoing = block(held), arriving = block(incoming);
    distributed::WorkHandle send = tp_.send_async(outgoing, (r + 1) % p, kRingTag);
    distributed::WorkHandle recv = tp_.recv_async(arriving, (r - 1 + p) % p, kRingTag);
    tp_.start_point_to_point();
    consume(held * n, (held + 1) * n);  // overlaps the transfer
    recv->wait_on_stream();
    send->wait_on_stream();
    held = incoming;
  }
  consume(held * n, (held + 1) * n);
}

void TensorParallelRegions::reduce_to_rows_overlapped(Tensor& full, Tensor& rows, const RowsProducer& produce) const {
  if (!shards_rows_) {  // rows is full: the first block's all-reduce in flight while the second is produced
    const std::int64_t C = full.size(-1), N = full.numel() / C;
    Tensor flat = full.view({N, C});
    std::vector<distributed::WorkHandle> sums;
    for (int b = 0; b < kAllReduceBlocks; ++b) {
      const distributed::ChunkRange range = distributed::chunk_range(N, kAllReduceBlocks, b);
      if (range.size() == 0) continue;
      Tensor block = flat.slice(0, range.begin, range.end);
      produce(range.begin, range.end, block);
      sums.push_back(tp_.all_reduce_async(block));
    }
    for (distributed::WorkHandle& sum : sums) sum->wait_on_stream();
    return;
  }
  const int p = tp_.size(), r = tp_.rank();
  const std::int64_t C = full.size(-1), n = rows.numel() / C;
  MYRIAD_CHECK(n * p * C == full.numel(), "reduce_to_rows_overlapped: tp rank "
                                              << r << " holds " << rows.describe() << ", which " << p
                                              << " ranks do not make " << full.describe());
  // full's first blocks are the ring's buffers: the incoming sum, and two running sums (sent
  // alternately; with p = 2 only the first is sent).
  Tensor flat = full.view({n * p, C});
  auto scratch = [&](int i) { return flat.slice(0, i * n, (i + 1) * n); };
  Tensor incoming = scratch(0), own = rows.view({n, C});
  distributed::WorkHandle send, recv;
  for (int step = 0; step < p; ++step) {
    // Block b's sum starts on rank b + 1 and ends on b: at this step, block r - 1 - step.
    const int block = ((r - 1 - step) % p + p) % p;
    const bool last = step == p - 1;
    Tensor sum = last ? own : scratch(1 + step % 2);
    produce(block * n, (block + 1) * n, sum);  // overlaps the transfer started last step
    if (recv) {
      recv->wait_on_stream();
      send->wait_on_stream();
      nn::add_into(sum, incoming);
    }
    if (last) break;
    send = tp_.send_async(sum, (r + 1) % p, kRingTag);
    recv = tp_.recv_async(incoming, (r - 1 + p) % p, kRingTag);
    tp_.start_point_to_point();
  }
}

void TensorParallelRegions::reduce_to_rows(Tensor& full, Tensor& rows) const {
  if (shards_rows_) {
    reduce_scatter_to_sequence_region_forward(tp_, full, rows);
  } else {
    reduce_from_tp_region_forward(tp_, full);  // rows is full
  }
}

void TensorParallelRegions::embedding_lookup(const Tensor& ids, const Tensor& table, Tensor& out) const {
  vocab_parallel_embedding_lookup(shard_, ids, table, out);
}

void TensorParallelRegions::embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) const {
  vocab_parallel_embedding_backward(shard_, ids, grad_out, grad_table);
}

void TensorParallelRegions::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                                  const CrossEntropyArgs& args, Tensor& losses, Tensor& lse) const {
  vocab_parallel_cross_entropy_forward(tp_, shard_, logits, targets, args.ignore_index, losses, lse);
}

void TensorParallelRegions::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                                   const CrossEntropyArgs& args, const Tensor& lse,
                                                   const Tensor& grad_losses, Tensor& grad_logits) const {
  vocab_parallel_cross_entropy_backward(shard_, logits, targets, args.ignore_index, lse, grad_losses, grad_logits);
}

void TensorParallelRegions::gather_vocabulary(const Tensor& shard, Tensor& logits) const {
  // The shard plan splits the padded vocabulary evenly: every rank holds `columns` of them.
  const int n = tp_.size();
  const std::int64_t rows = logits.size(0), columns = logits.size(1) / n;
  MYRIAD_CHECK(shard.dim() == 2 && shard.size(0) == rows && shard.size(1) == columns && columns * n == logits.size(1),
               "gather_vocabulary: tp rank " << tp_.rank() << "'s logits are " << shape_string(shard.shape())
                                             << ", not (" << rows << ", " << columns << ")");
  Tensor all = ops::placement_of(logits, "logits").empty({n, rows, columns});
  tp_.all_gather_on_stream(shard, all);
  Tensor side_by_side = logits.view({rows, n, columns});
  copy(all.permute({1, 0, 2}), side_by_side);
}

}  // namespace myriad::parallel
