// CudaBackend — the ops on one GPU: an ops::Backend over a DeviceContext's stream, cuBLASLt
// handle, plan cache and caching allocator, calling the pointer-based launchers of kernels/
// (kernels.h, gemm.h). The model runs unchanged on its tensors: matmul_forward(args, a, b, out)
// with a, b, out made by a CudaBackend queues the GEMM on that backend's stream.
//
// Tensors come from empty() / copy_from_host(); their Storage names this backend, so it must
// outlive them (as the DeviceContext must outlive the backend). Work is queued on the context's
// stream in call order; copy_to_host() and synchronize() wait for it. copy_from_host() of up to
// 4 MiB (a step's ids and targets) is staged through pinned buffers and queued without waiting
// (pinned_uploads.h); a larger one waits for its copy. Scratch space an op needs
// (the norms' parameter-gradient partial sums) comes from the caching allocator.
//
// Layouts: norms, activations, embedding, cross-entropy, bias and AdamW take the contiguous
// tensors their dispatch points require (embedding and cross-entropy also contiguous inputs).
// Matmul takes f32, bf16 or f16 operands (of one type; f32 sums and outputs, as the ops contract
// says) and any batch strides, but the last two dims of every operand must be row-major (unit
// stride, rows a pitch apart: cuBLASLt's leading dimension); alpha must be 1 (the cuBLASLt plans
// carry no scale yet). Attention takes (B, H, T, D) tensors that are contiguous or heads of packed
// rows — the view (B, T, W) -> (B, T, H, D) -> (B, H, T, D) the model makes of its fused qkv and
// attention output (strides [T*W, D, W, 1]), packed for the flash kernels (head dim 64 or 128) and
// unpacked after; k and v may have another row count and global offset than q, and a
// block-sparse layout is a host BlockLayout (a fixed pattern: uploaded to device scratch on each
// call) or a selection's SelectedBlocks already on the device (read in place, no upload), its
// block_size a multiple of 32, the kernels' query tile; attention_merge takes out / part_out of
// either kind and contiguous lse. 16-bit attention products (AttentionArgs::operands) run on
// 16-bit copies: cuDNN's fused attention (cuda/cudnn_attention.h) for dense self-attention (no
// layout, no offsets, as many keys as queries, head dim 64 / 128) when this build and GPU have it
// and MYRIAD_CUDNN_ATTENTION is not "off", else the tensor-core (WMMA) kernels; the reason cuDNN
// is not used is cudnn_attention_unavailable(). RoPE takes (B, T, H, D) tensors that are contiguous or such rows of
// heads (strides [T*W, W, D, 1]). copy() reads a contiguous source of any float type (f32 <-> bf16 / f16 by the
// conversion kernels; bf16 <-> f16 through f32) or an f32 view of either kind of heads. Token routing and grouped
// matmul take the contiguous tensors their dispatch points require; grouped matmul runs one cuBLAS grouped GEMM per
// product and widens bf16 / f16 operands to f32 first (cuda_backend_moe.cpp says why). Compression codes and the 1-bit
// Adam update take the contiguous tensors their dispatch points require; a top-k code is selected on the device. Other
// layouts are refused naming the tensor. A bad token id, target or routing index is reported like the CPU op's error,
// which costs a wait for the stream (the kernels flag it on the device).
#pragma once

#include <map>
#include <tuple>
#include <vector>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "myriad/cuda/cudnn_attention.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/pinned_uploads.h"
#include "myriad/ops/backend.h"

namespace myriad::cuda {

class CudaBackend final : public ops::Backend {
 public:
  explicit CudaBackend(DeviceContext& context) : context_(context) {}
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  DeviceContext& context() const { return context_; }

  Device device() const override;
  Tensor empty(const Shape& shape, DType dtype = DType::f32) override;
  Tensor copy_from_host(const Tensor& host) override;
  Tensor copy_to_host(const Tensor& device) override;
  void zero(const Tensor& device) override;
  void synchronize() override;

  void matmul_forward(const MatmulArgs& args, const Tensor& a, const Tensor& b, Tensor& out) override;
  void matmul_backward(const MatmulArgs& args, const Tensor& a, const Tensor& b, const Tensor& grad_out, Tensor& grad_a,
                       Tensor& grad_b) override;
  void layernorm_forward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         Tensor& out, Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight,
                          Tensor& grad_bias) override;
  void rmsnorm_forward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, Tensor& out,
                       Tensor& rstd) override;
  void rmsnorm_backward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                        const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight) override;
  void gelu_forward(const GeluArgs& args, const Tensor& x, Tensor& out) override;
  void gelu_backward(const GeluArgs& args, const Tensor& x, const Tensor& grad_out, Tensor& grad_x) override;
  void swiglu_forward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, Tensor& out) override;
  void swiglu_backward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                       Tensor& grad_gate, Tensor& grad_up) override;
  void attention_forward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         Tensor& lse) override;
  void attention_backward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& grad_out, Tensor& grad_q, Tensor& grad_k,
                          Tensor& grad_v) override;
  void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) override;
  void rope_forward(const RopeArgs& args, const Tensor& x, Tensor& out) override;
  void rope_backward(const RopeArgs& args, const Tensor& grad_out, Tensor& grad_x) override;
  void embedding_forward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& table, Tensor& out) override;
  void embedding_backward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& grad_out,
                          Tensor& grad_table) override;
  void cross_entropy_forward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets, Tensor& losses,
                             Tensor& lse) override;
  void cross_entropy_backward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits) override;
  void softmax_forward(const SoftmaxArgs& args, const Tensor& x, Tensor& out) override;
  void softmax_backward(const SoftmaxArgs& args, const Tensor& out, const Tensor& grad_out, Tensor& grad_x) override;
  void vocab_shard_tokens(const VocabShardMap& map, const Tensor& tokens, Tensor& out) override;
  void vocab_shard_partials(const Tensor& state, const Tensor& local_lse, const Tensor& local_loss,
                            const Tensor& maxima, Tensor& packed) override;
  void vocab_shard_combine(const Tensor& state, const Tensor& maxima, const Tensor& packed, Tensor& lse,
                           Tensor& losses) override;
  void bias_add_forward(const BiasAddArgs& args, const Tensor& x, const Tensor& bias, Tensor& out) override;
  void bias_add_backward(const BiasAddArgs& args, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_bias) override;
  void adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                    const AdamWCopies& copies) override;
  double grad_norm_squared(const Tensor& grad) override;
  std::vector<double> grad_norms_squared(const std::vector<Tensor>& grads) override;  // one read back
  // Gradient compression and 1-bit Adam's update (cuda_backend_compression.cpp).
  void compress_encode(const CompressionSpec& spec, const Tensor& x, Tensor& error, Tensor& code) override;
  void compress_decode(const CompressionSpec& spec, const Tensor& code, Tensor& out, bool accumulate) override;
  void onebit_adam_momentum(const OneBitAdamMomentumArgs& args, Tensor& m, const Tensor& grad) override;
  void onebit_adam_update(const OneBitAdamUpdateArgs& args, Tensor& param, Tensor& m, const Tensor& v) override;
  void add_forward(const AddArgs& args, const Tensor& a, const Tensor& b, Tensor& out) override;
  void add_backward(const AddArgs& args, const Tensor& grad_out, Tensor& grad_a, Tensor& grad_b) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void fill(const Tensor& t, float value) override;
  void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      Tensor& y) override;
  // The GELU MLP's pair (ops/linear.h): cuBLASLt's GELU_AUX(_BIAS) and DGELU(_BGRAD) epilogues.
  void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& pre_activation,
                           Tensor& y) override;
  void linear_dgelu_backward(const Tensor& grad_y, const Tensor& weight, const Tensor& pre_activation, Tensor& grad_pre,
                             Tensor& grad_bias) override;
  void int8_linear_forward(const Int8Args& args, const Tensor& x, const Tensor& q, const Tensor& scales,
                           const Tensor& bias, Tensor& y) override;
  // FP8 (cuda_backend_matmul.cpp): the quantisation kernel and cuBLASLt's FP8 GEMM, sm_89+ only.
  void fp8_quantize(const Tensor& x, const Tensor& scale, Tensor& out, Tensor& out_t, Tensor& amax) override;
  void fp8_gemm(const Fp8GemmArgs& args, const Tensor& a, const Tensor& a_dequant, const Tensor& b,
                const Tensor& b_dequant, Tensor& out) override;
  // Why this GPU cannot run FP8 GEMMs ("" when it can: compute capability 8.9 or newer); asked
  // of the device once, then kept (every FP8 GEMM checks it).
  const std::string& fp8_unavailable() const;
  void int8_embedding_forward(const Int8Args& args, const Tensor& ids, const Tensor& q, const Tensor& scales,
                              Tensor& out) override;
  // Mixture of experts (cuda_backend_moe.cpp): token routing kernels, cuBLAS grouped GEMMs.
  void gather_rows(const Tensor& x, const Tensor& source, Tensor& out, const RowIndexArgs& args) override;
  void combine_rows_forward(const Tensor& rows, const Tensor& slot, const Tensor& weight, Tensor& out,
                            const RowIndexArgs& args) override;
  void combine_rows_backward(const Tensor& rows, const Tensor& slot, const Tensor& weight, const Tensor& grad_out,
                             Tensor& grad_rows, Tensor& grad_weight, const RowIndexArgs& args) override;
  void route_tokens(const RouteArgs& args, const Tensor& logits, RoutedTokens& out, const Tensor& context) override;
  // Block selection (cuda_backend_block_selection.cpp): the layout stays on the device.
  void block_means(const Tensor& x, std::int64_t block_size, Tensor& out) override;
  void select_blocks(const BlockSelectArgs& args, const Tensor& qbar, const Tensor& kbar, SelectedBlocks& out,
                     Tensor& totals) override;
  void route_tokens_backward(const RouteArgs& args, const Tensor& logits, const Tensor& expert,
                             const Tensor& grad_weight, double aux_scale, double z_scale, Tensor& grad_logits,
                             const Tensor& context, const Tensor& scale) override;
  void count_route_choices(const RouteArgs& args, const Tensor& logits, Tensor& counts) override;
  void grouped_matmul_forward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const std::vector<std::int64_t>& offsets, Tensor& out) override;
  void grouped_matmul_backward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight,
                               const std::vector<std::int64_t>& offsets, const Tensor& grad_out, Tensor& grad_x,
                               Tensor& grad_weight, Tensor& grad_bias) override;

  // A host block layout's CSR arrays on the device (row_begin i64, key_blocks i32; key_blocks has
  // at least one entry), uploaded on first use and kept per distinct layout (up to
  // kCachedBlockLayouts; past that uploaded per call): a fixed block-sparse pattern is the same every
  // micro-batch, so after the first nothing is uploaded, and a CUDA graph can record its attention.
  struct DeviceBlockLayout {
    Tensor row_begin, key_blocks;
  };
  static constexpr std::size_t kCachedBlockLayouts = 64;
  DeviceBlockLayout device_block_layout(const BlockLayout& layout);

  // cuDNN's fused attention of this device (made on first use), or null: then
  // cudnn_attention_unavailable() says why (see the file comment).
  CudnnAttention* cudnn_attention();
  const std::string& cudnn_attention_unavailable() const { return cudnn_why_not_; }

 private:
  // A device long long set to LLONG_MAX, for the kernels that report the first bad index.
  Tensor bad_index_flag();
  // Reads a bad_index_flag() back (waits for the stream); LLONG_MAX when nothing was bad.
  long long read_bad_index(const Tensor& flag);
  // A device long long the kernels may lower but nobody reads: for indices the caller checked on
  // the host (EmbeddingArgs::ids_checked, CrossEntropyArgs::targets_checked, vocabulary shards).
  long long* unread_index_flag();
  void rope_apply(const char* op, const RopeArgs& args, const Tensor& x, Tensor& out, bool backward);
  // The cos / sin tables of (args, T, D) on the device, made on first use.
  const Tensor& rope_tables(const RopeArgs& args, std::int64_t T, std::int64_t D);

  // device_block_layout()'s copies, by the layout's contents.
  using BlockLayoutKey =
      std::tuple<std::int64_t, std::int64_t, std::int64_t, std::vector<std::int64_t>, std::vector<std::int32_t>>;
  std::map<BlockLayoutKey, DeviceBlockLayout> block_layouts_;
  // cos / sin tables per (seq, head_dim, theta, position offset), made on first use.
  std::map<std::tuple<std::int64_t, std::int64_t, double, std::int64_t>, Tensor> rope_tables_;

  DeviceContext& context_;
  Tensor unread_flag_;                     // unread_index_flag()'s storage, made on first use
  PinnedUploads uploads_;                  // copy_from_host's small uploads: queued, not waited for
  std::shared_ptr<CudnnAttention> cudnn_;  // cudnn_attention(): made once (cudnn_tried_)
  std::string cudnn_why_not_;
  bool cudnn_tried_ = false;
  mutable std::optional<std::string> fp8_why_not_;  // fp8_unavailable(): the device's answer, once
};

}  // namespace myriad::cuda
