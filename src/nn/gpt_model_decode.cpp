// GptModel::decode — a batched step of incremental inference: the new tokens of many sequences
// (prompts or chunks of them, and single decoded tokens) through every block against the paged KV
// cache, on the model's placement; the logits of each sequence's last new token come back to the
// host for sampling. Rows of different sequences meet only in the linear layers' GEMMs, so a
// sequence's logits do not depend on what else is in the batch beyond the GEMM's rounding.
// Under tensor parallelism (without sequence parallelism) every rank of the group calls it with the
// same sequences and block tables: its cache holds its own key/value heads, the embedding and the
// row-parallel layers are summed over the group, and the head's vocabulary shards are gathered, so
// every rank returns the whole logits.
#include <algorithm>

#include "myriad/nn/gpt_model.h"
#include "myriad/nn/int8_embedding.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/norms.h"

namespace myriad::nn {

PagedKvCache GptModel::make_paged_kv_cache(std::int64_t block_size, std::int64_t num_blocks) const {
  const LocalWidths mine = local_widths(config_, split_);  // this rank's key/value heads
  return PagedKvCache(config_.n_layer, mine.kv_heads, mine.head_dim, block_size, num_blocks, placement_);
}

Tensor GptModel::decode(const std::vector<DecodeSequence>& seqs, PagedKvCache& cache) const {
  require_whole_model("decode");
  MYRIAD_CHECK(!config_.attention.block_sparse(),
               "decode: the KV cache attends densely, but this model's attention is block-sparse; "
               "nn::generate re-runs the forward over the prefix instead");
  MYRIAD_CHECK(!split_.sharded_sequence(),
               "decode: sequence parallelism shards token rows over tp; decode runs "
               "with tp regions built without it (parallel.sequence_parallel false)");
  MYRIAD_CHECK(!seqs.empty(), "decode: no sequences");
  MYRIAD_CHECK(static_cast<std::int64_t>(cache.k.size()) == config_.n_layer,
               "decode: the KV cache has " << cache.k.size() << " layers, the model " << config_.n_layer);
  const std::int64_t C = config_.n_embd;
  std::int64_t N = 0;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const DecodeSequence& seq = seqs[s];
    const auto n = static_cast<std::int64_t>(seq.tokens.size());
    MYRIAD_CHECK(n >= 1, "decode: sequence " << s << " has no new tokens");
    MYRIAD_CHECK(seq.start >= 0 && seq.start + n <= config_.context_length,
                 "decode: sequence " << s << " positions [" << seq.start << ", " << seq.start + n
                                     << ") outside the context [0, " << config_.context_length << ")");
    MYRIAD_CHECK(
        seq.blocks != nullptr && static_cast<std::int64_t>(seq.blocks->size()) >= cache.blocks_for(seq.start + n),
        "decode: sequence " << s << " needs " << cache.blocks_for(seq.start + n) << " KV blocks for " << seq.start + n
                            << " positions, its table has " << (seq.blocks ? seq.blocks->size() : 0));
    for (std::int32_t b : *seq.blocks) {
      MYRIAD_CHECK(b >= 0 && b < cache.num_blocks,
                   "decode: sequence " << s << " names KV block " << b << " of " << cache.num_blocks);
    }
    for (std::int32_t id : seq.tokens) {
      MYRIAD_CHECK(id >= 0 && id < config_.vocab_size,
                   "decode: token id " << id << " outside the vocabulary [0, " << config_.vocab_size << ")");
    }
    N += n;
  }
  const ops::Placement& p = placement_;
  Tensor ids = Tensor::empty({1, N}, DType::i32), positions = Tensor::empty({1, N}, DType::i32);
  Tensor last_rows = Tensor::empty({static_cast<std::int64_t>(seqs.size())}, DType::i32);
  std::int64_t row = 0;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    for (std::size_t i = 0; i < seqs[s].tokens.size(); ++i, ++row) {
      ids.data<std::int32_t>()[row] = seqs[s].tokens[i];
      positions.data<std::int32_t>()[row] = static_cast<std::int32_t>(seqs[s].start + static_cast<std::int64_t>(i));
    }
    last_rows.data<std::int32_t>()[s] = static_cast<std::int32_t>(row - 1);
  }
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor x = p.empty({1, N, C}), y = p.empty({1, N, C});
  Tensor rows = x.view({N, C});
  if (store_[wte_].int8_values.defined()) {  // weight-only INT8 serving (whole model): the int8 rows
    int8_embedding_lookup(ids.view({N}), store_[wte_], rows);
  } else {  // each rank's vocabulary rows, summed over the group
    tp.embedding_lookup(ids.view({N}), store_[wte_].value, rows);
    tp.reduce_to_rows(x, x);
  }
  if (wpe_ != static_cast<std::size_t>(-1)) {
    Tensor pe = p.empty({1, N, C});
    embedding_forward(EmbeddingArgs{.ids_checked = true}, p.from_host(positions), store_[wpe_].value, pe);
    add_into(x, pe);
  }
  for (const TransformerBlock& block : blocks_) {
    block.decode(store_, x, seqs, cache, y);
    std::swap(x, y);
  }
  // The last new row of each sequence, then the final norm and the head on those rows only.
  const auto S = static_cast<std::int64_t>(seqs.size());
  Tensor last = p.empty({1, S, C});
  embedding_forward(EmbeddingArgs{.ids_checked = true}, p.from_host(last_rows.view({1, S})), x.view({N, C}), last);
  Tensor h = p.empty({S, C}), mean = p.empty({S}), rstd = p.empty({S});
  Tensor last2 = last.view({S, C});
  if (config_.norm == NormKind::layernorm) {
    layernorm_forward(LayernormArgs{.eps = config_.norm_eps}, last2, store_[norm_w_].value, store_[norm_b_].value, h,
                      mean, rstd);
  } else {
    rmsnorm_forward(RmsnormArgs{.eps = config_.norm_eps}, last2, store_[norm_w_].value, h, rstd);
  }
  // This rank's padded vocabulary columns (the whole padded head when whole, INT8 or not), every
  // rank's side by side, then the real columns.
  const Parameter& head = store_[head_];
  Tensor shard = p.empty({S, head.shape[0]});
  linear_forward(h, head, Tensor(), shard, activation_precision_);
  Tensor padded = shard;
  if (tp.size() > 1) {
    padded = p.empty({S, config_.padded_vocab_size()});
    tp.gather_vocabulary(shard, padded);
  }
  return p.to_host(padded).slice(1, 0, config_.vocab_size).contiguous();
}

}  // namespace myriad::nn
