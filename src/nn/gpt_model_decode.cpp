// GptModel::decode — one position of incremental inference through every block's KV cache, on
// the model's placement (the logits come back to the host for sampling).
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/norms.h"

namespace myriad::nn {

KvCache GptModel::make_kv_cache() const {
  return KvCache(config_.n_layer, config_.n_kv_head, config_.context_length, config_.head_dim(), placement_);
}

Tensor GptModel::decode(std::int32_t token, std::int64_t position, KvCache& cache) const {
  require_whole_model("decode");
  MYRIAD_CHECK(!config_.attention.block_sparse(),
               "decode: the KV cache attends densely, but this model's attention is block-sparse; "
               "nn::generate re-runs the forward over the prefix instead");
  MYRIAD_CHECK(split_.tp_size() == 1,
               "decode: the model is split over tp " << split_.tp_size() << "; generate on a serial copy");
  MYRIAD_CHECK(token >= 0 && token < config_.vocab_size,
               "decode: token id " << token << " outside the vocabulary [0, " << config_.vocab_size << ")");
  MYRIAD_CHECK(position == cache.length, "decode: position " << position << " but the cache holds " << cache.length);
  const std::int64_t C = config_.n_embd;
  const ops::Placement& p = placement_;
  const Tensor id = p.from_host(Tensor::full({1, 1}, token, DType::i32));
  Tensor x = p.empty({1, 1, C}), y = p.empty({1, 1, C});
  embedding_forward(EmbeddingArgs{}, id, store_[wte_].value, x);
  if (wpe_ != static_cast<std::size_t>(-1)) {
    const Tensor pos = p.from_host(Tensor::full({1, 1}, static_cast<double>(position), DType::i32));
    Tensor pe = p.empty({1, 1, C});
    embedding_forward(EmbeddingArgs{}, pos, store_[wpe_].value, pe);
    add_into(x, pe);
  }
  for (const TransformerBlock& block : blocks_) {
    block.decode(store_, x, position, cache, y);
    std::swap(x, y);
  }
  cache.length = position + 1;
  Tensor h = p.empty({1, C}), mean = p.empty({1}), rstd = p.empty({1});
  Tensor x2 = x.view({1, C});
  if (config_.norm == NormKind::layernorm) {
    layernorm_forward(LayernormArgs{.eps = config_.norm_eps}, x2, store_[norm_w_].value, store_[norm_b_].value, h, mean,
                      rstd);
  } else {
    rmsnorm_forward(RmsnormArgs{.eps = config_.norm_eps}, x2, store_[norm_w_].value, h, rstd);
  }
  const Parameter& head = store_[head_];
  if (head.int8_values.defined()) {  // INT8: the whole padded head, then its real columns
    Tensor padded = p.empty({1, head.shape[0]});
    linear_forward(h, head, Tensor(), padded, activation_precision_);
    return p.to_host(padded).slice(1, 0, config_.vocab_size).contiguous().view({config_.vocab_size});
  }
  Tensor logits = p.empty({1, config_.vocab_size});
  linear_forward(h, head_weight(false), Tensor(), logits, activation_precision_);
  return p.to_host(logits).view({config_.vocab_size});  // sampling runs on the host
}

}  // namespace myriad::nn
