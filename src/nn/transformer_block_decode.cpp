// TransformerBlock::decode — the forward of a batch of new positions from many sequences against
// the paged KV cache (serving and generation), over the ops on the model's placement (host or a
// backend). Same math as forward(): the norms, projections and MLP run on all rows at once
// (1, N, ·); each sequence's rows append their k, v to its cache blocks, then attend causally over
// its cached positions [0, start + n) — gathered from the blocks into one contiguous (L, Hkv, D)
// buffer — with the attention op at query offset `start`. An MoE block routes the N rows as N
// sequences of one token (capacity per sequence never binds, so no row depends on the others).
// Under tensor parallelism a rank holds its heads and MLP columns (and caches its key/value heads);
// the projection and the MLP's output are row-parallel (summed over the group), and the MoE layer
// runs on the rank's block of rows, summed likewise (moe_sequences, as in forward).
#include "myriad/nn/linear.h"
#include "myriad/nn/transformer_block.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/placement.h"
#include "myriad/ops/rope.h"

namespace myriad::nn {

namespace {

// Calls fn(first position, count, cache row) for each run of consecutive positions in
// [begin, end) that lies in one block of `table`.
template <typename Fn>
void for_block_runs(const std::vector<std::int32_t>& table, std::int64_t block_size, std::int64_t begin,
                    std::int64_t end, Fn&& fn) {
  for (std::int64_t p = begin; p < end;) {
    const std::int64_t index = p / block_size, offset = p % block_size;
    const std::int64_t count = std::min(block_size - offset, end - p);
    fn(p, count, static_cast<std::int64_t>(table[index]) * block_size + offset);
    p += count;
  }
}

}  // namespace

void TransformerBlock::decode(const ParameterStore& store, const Tensor& x, const std::vector<DecodeSequence>& seqs,
                              PagedKvCache& cache, Tensor& y) const {
  const std::int64_t C = config_.n_embd, F = widths_.ffn, Hq = widths_.heads, Hkv = widths_.kv_heads;
  const std::int64_t D = widths_.head_dim, W = widths_.qkv(), N = x.size(1);
  const ops::Placement p = ops::placement_of(x, "x");
  auto value = [&](std::size_t index) { return index == npos ? Tensor() : store[index].value; };
  Tensor mean = p.empty({1, N}), rstd = p.empty({1, N});
  Tensor h = p.empty({1, N, C}), qkv = p.empty({1, N, W});
  norm_forward(store, norm1_w_, norm1_b_, x, h, mean, rstd);
  linear_forward(h, store[qkv_w_], value(qkv_b_), qkv, operands_);
  // q, k, v: the heads of each qkv row (strides [N W, W, D, 1]), gathered contiguous (1, N, H, D).
  auto heads = [&](std::int64_t first, std::int64_t count) {
    const Tensor view =
        Tensor::from_storage(qkv.storage(), {1, N, count, D}, {N * W, W, D, 1}, qkv.offset() + first * D, DType::f32);
    Tensor out = p.empty({1, N, count, D});
    copy(view, out);
    return out;
  };
  Tensor q = heads(0, Hq), k = heads(Hq, Hkv), v = heads(Hq + Hkv, Hkv);
  Tensor att = p.empty({1, N, Hq * D});
  const Tensor& k_cache = cache.k[layer_];
  const Tensor& v_cache = cache.v[layer_];
  std::int64_t row = 0;
  for (const DecodeSequence& seq : seqs) {
    const auto n = static_cast<std::int64_t>(seq.tokens.size());
    const std::int64_t L = seq.start + n;
    Tensor q_seq = q.slice(1, row, row + n), k_seq = k.slice(1, row, row + n), v_seq = v.slice(1, row, row + n);
    if (config_.positions == PositionKind::rope) {
      const RopeArgs rope{.theta = config_.rope_theta, .position_offset = seq.start};
      rope_forward(rope, q_seq, q_seq);
      rope_forward(rope, k_seq, k_seq);
    }
    // Append the new positions' k, v to the sequence's blocks.
    for_block_runs(*seq.blocks, cache.block_size, seq.start, L,
                   [&](std::int64_t pos, std::int64_t count, std::int64_t at) {
                     Tensor k_rows = k_cache.slice(0, at, at + count), v_rows = v_cache.slice(0, at, at + count);
                     copy(k_seq.view({n, Hkv, D}).slice(0, pos - seq.start, pos - seq.start + count), k_rows);
                     copy(v_seq.view({n, Hkv, D}).slice(0, pos - seq.start, pos - seq.start + count), v_rows);
                   });
    // Every cached position of the sequence, contiguous.
    Tensor keys = p.empty({L, Hkv, D}), values = p.empty({L, Hkv, D});
    for_block_runs(*seq.blocks, cache.block_size, 0, L, [&](std::int64_t pos, std::int64_t count, std::int64_t at) {
      Tensor k_dst = keys.slice(0, pos, pos + count), v_dst = values.slice(0, pos, pos + count);
      copy(k_cache.slice(0, at, at + count), k_dst);
      copy(v_cache.slice(0, at, at + count), v_dst);
    });
    Tensor out = att.slice(1, row, row + n).view({1, n, Hq, D}).permute({0, 2, 1, 3});
    Tensor lse = p.empty({1, Hq, n});
    const AttentionArgs args{.causal = true, .q_offset = seq.start, .k_offset = 0};
    attention_forward(args, q_seq.permute({0, 2, 1, 3}), keys.view({1, L, Hkv, D}).permute({0, 2, 1, 3}),
                      values.view({1, L, Hkv, D}).permute({0, 2, 1, 3}), out, lse);
    row += n;
  }
  // Without sequence parallelism the row-parallel outputs reduce in place: no partial buffer.
  Tensor x_mid = p.empty({1, N, C}), no_partial;
  row_parallel_output(std::nullopt, att, store[proj_w_], value(proj_b_), x, no_partial, x_mid);
  Tensor h2 = p.empty({1, N, C});
  norm_forward(store, norm2_w_, norm2_b_, x_mid, h2, mean, rstd);
  if (moe_) {
    const TensorParallel& tp = split_.tensor_parallel();
    const IndexRange mine = moe_sequences(N);
    Tensor partial = p.empty({1, N, C});
    Tensor routed = partial.view({N, 1, C});
    if (mine.size() < N) zero(routed);
    Tensor out = routed.slice(0, mine.begin, mine.end);
    MoeActivations scratch;
    moe_->forward(store, h2.view({N, 1, C}).slice(0, mine.begin, mine.end), out, scratch);
    if (mine.size() == N && tp.rank() != 0) zero(routed);  // ran whole on every rank: rank 0's is summed
    tp.reduce_to_rows(partial, partial);
    add(x_mid, partial, y);
    return;
  }
  Tensor fc = p.empty({1, N, F}), act = p.empty({1, N, F});
  linear_forward(h2, store[fc_w_], value(fc_b_), fc, operands_);
  if (config_.mlp == MlpKind::gelu) {
    gelu_forward(GeluArgs{}, fc, act);
  } else {
    Tensor up = p.empty({1, N, F});
    linear_forward(h2, store[up_w_], Tensor(), up, operands_);
    swiglu_forward(SwigluArgs{}, fc, up, act);
  }
  row_parallel_output(std::nullopt, act, store[out_w_], value(out_b_), x_mid, no_partial, y);
}

}  // namespace myriad::nn
