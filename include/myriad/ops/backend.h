// ops::Backend — a device's implementation of the ops, behind the same dispatch points as the
// CPU reference (ggml's backend idea): matmul_forward(args, a, b, out) on cuda:N tensors runs
// the backend that made their memory. The CPU ops need no backend object; every other device
// has one, and the model code never names it.
//
// A backend makes its tensors (empty(), copies to and from the host); their Storage points back
// to it (ExecutionContext), which is how a dispatch point finds it: backend_of() takes the op's
// tensors, checks that all defined ones share one backend and returns it. Methods receive
// arguments already checked by the dispatch point (shapes, dtypes, one device) and keep the op's
// contract (ops/<op>.h: which outputs are written `=` and which accumulate `+=`). Work may be
// queued asynchronously; copies to the host and synchronize() wait for it.
//
// Ops a backend does not implement yet throw myriad::Error naming the op and the backend.
#pragma once

#include <initializer_list>
#include <string>

#include "myriad/core/execution_context.h"
#include "myriad/core/tensor.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/adamw.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/block_selection.h"
#include "myriad/ops/compression.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/fp8.h"
#include "myriad/ops/grouped_matmul.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/moe_routing.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/onebit_adam_update.h"
#include "myriad/ops/op_checks.h"
#include "myriad/ops/rope.h"
#include "myriad/ops/softmax.h"
#include "myriad/ops/token_routing.h"
#include "myriad/ops/vocab_shard_loss.h"

namespace myriad::ops {

class Backend : public ExecutionContext {
 public:
  ~Backend() override = default;

  virtual Device device() const = 0;
  // Uninitialised contiguous tensor on this backend's device.
  virtual Tensor empty(const Shape& shape, DType dtype = DType::f32) = 0;
  // A contiguous device copy of a host tensor (any strides); returns once `host` has been read.
  virtual Tensor copy_from_host(const Tensor& host) = 0;
  // A contiguous host copy of one of this backend's tensors (contiguous), after earlier work.
  virtual Tensor copy_to_host(const Tensor& device) = 0;
  // Sets every byte of one of this backend's tensors (contiguous) to zero (the op zero()).
  virtual void zero(const Tensor& device) = 0;
  // Waits for all queued work; throws on a device fault.
  virtual void synchronize() = 0;

  virtual void matmul_forward(const MatmulArgs& args, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void matmul_backward(const MatmulArgs& args, const Tensor& a, const Tensor& b, const Tensor& grad_out,
                               Tensor& grad_a, Tensor& grad_b) = 0;
  virtual void layernorm_forward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 Tensor& out, Tensor& mean, Tensor& rstd) = 0;
  virtual void layernorm_backward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight,
                                  Tensor& grad_bias) = 0;
  virtual void rmsnorm_forward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, Tensor& out,
                               Tensor& rstd) = 0;
  virtual void rmsnorm_backward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight) = 0;
  virtual void gelu_forward(const GeluArgs& args, const Tensor& x, Tensor& out) = 0;
  virtual void gelu_backward(const GeluArgs& args, const Tensor& x, const Tensor& grad_out, Tensor& grad_x) = 0;
  virtual void swiglu_forward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void swiglu_backward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                               Tensor& grad_gate, Tensor& grad_up) = 0;

  // Families a backend may not provide yet: by default they throw naming the op and the device.
  virtual void attention_forward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v,
                                 Tensor& out, Tensor& lse);
  virtual void attention_backward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& grad_out, Tensor& grad_q,
                                  Tensor& grad_k, Tensor& grad_v);
  virtual void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse);
  virtual void rope_forward(const RopeArgs& args, const Tensor& x, Tensor& out);
  virtual void rope_backward(const RopeArgs& args, const Tensor& grad_out, Tensor& grad_x);
  virtual void embedding_forward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& table, Tensor& out);
  virtual void embedding_backward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& grad_out,
                                  Tensor& grad_table);
  virtual void cross_entropy_forward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets,
                                     Tensor& losses, Tensor& lse);
  virtual void cross_entropy_backward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits);
  virtual void bias_add_forward(const BiasAddArgs& args, const Tensor& x, const Tensor& bias, Tensor& out);
  virtual void bias_add_backward(const BiasAddArgs& args, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_bias);
  virtual void softmax_forward(const SoftmaxArgs& args, const Tensor& x, Tensor& out);
  virtual void softmax_backward(const SoftmaxArgs& args, const Tensor& out, const Tensor& grad_out, Tensor& grad_x);
  // The vocabulary-parallel loss's per-token pieces and token map (ops/vocab_shard_loss.h).
  virtual void vocab_shard_tokens(const VocabShardMap& map, const Tensor& tokens, Tensor& out);
  virtual void vocab_shard_partials(const Tensor& state, const Tensor& local_lse, const Tensor& local_loss,
                                    const Tensor& maxima, Tensor& packed);
  virtual void vocab_shard_combine(const Tensor& state, const Tensor& maxima, const Tensor& packed, Tensor& lse,
                                   Tensor& losses);
  virtual void adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                            const AdamWCopies& copies);
  // Gradient compression (ops/compression.h) and 1-bit Adam's update (ops/onebit_adam_update.h).
  virtual void compress_encode(const CompressionSpec& spec, const Tensor& x, Tensor& error, Tensor& code);
  virtual void compress_decode(const CompressionSpec& spec, const Tensor& code, Tensor& out, bool accumulate);
  virtual void onebit_adam_momentum(const OneBitAdamMomentumArgs& args, Tensor& m, const Tensor& grad);
  virtual void onebit_adam_update(const OneBitAdamUpdateArgs& args, Tensor& param, Tensor& m, const Tensor& v);
  virtual void add_forward(const AddArgs& args, const Tensor& a, const Tensor& b, Tensor& out);
  virtual void add_backward(const AddArgs& args, const Tensor& grad_out, Tensor& grad_a, Tensor& grad_b);
  virtual void copy(const Tensor& src, Tensor& dst);
  virtual void fill(const Tensor& t, float value);
  virtual void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                              Tensor& y);
  virtual void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& pre_activation,
                                   Tensor& y);
  virtual void linear_dgelu_backward(const Tensor& grad_y, const Tensor& weight, const Tensor& pre_activation,
                                     Tensor& grad_pre, Tensor& grad_bias);
  virtual double grad_norm_squared(const Tensor& grad);
  // One per tensor (ops/adamw.h); the default calls grad_norm_squared for each.
  virtual std::vector<double> grad_norms_squared(const std::vector<Tensor>& grads);
  // FP8 quantisation and GEMM (ops/fp8.h).
  virtual void fp8_quantize(const Tensor& x, const Tensor& scale, Tensor& out, Tensor& out_t, Tensor& amax);
  virtual void fp8_gemm(const Fp8GemmArgs& args, const Tensor& a, const Tensor& a_dequant, const Tensor& b,
                        const Tensor& b_dequant, Tensor& out);
  // Weight-only INT8 linear (ops/int8_linear.h).
  virtual void int8_linear_forward(const Int8Args& args, const Tensor& x, const Tensor& q, const Tensor& scales,
                                   const Tensor& bias, Tensor& y);
  virtual void int8_embedding_forward(const Int8Args& args, const Tensor& ids, const Tensor& q, const Tensor& scales,
                                      Tensor& out);
  // Mixture of experts: token routing (ops/token_routing.h) and the experts' grouped GEMMs.
  virtual void gather_rows(const Tensor& x, const Tensor& source, Tensor& out, const RowIndexArgs& args);
  virtual void combine_rows_forward(const Tensor& rows, const Tensor& slot, const Tensor& weight, Tensor& out,
                                    const RowIndexArgs& args);
  virtual void combine_rows_backward(const Tensor& rows, const Tensor& slot, const Tensor& weight,
                                     const Tensor& grad_out, Tensor& grad_rows, Tensor& grad_weight,
                                     const RowIndexArgs& args);
  // The router's decisions and their gradient (ops/moe_routing.h).
  virtual void route_tokens(const RouteArgs& args, const Tensor& logits, RoutedTokens& out, const Tensor& context);
  virtual void route_tokens_backward(const RouteArgs& args, const Tensor& logits, const Tensor& expert,
                                     const Tensor& grad_weight, double aux_scale, double z_scale, Tensor& grad_logits,
                                     const Tensor& context, const Tensor& scale);
  virtual void count_route_choices(const RouteArgs& args, const Tensor& logits, Tensor& counts);
  // Block-sparse attention's selection (ops/block_selection.h).
  virtual void block_means(const Tensor& x, std::int64_t block_size, Tensor& out);
  virtual void select_blocks(const BlockSelectArgs& args, const Tensor& qbar, const Tensor& kbar, SelectedBlocks& out,
                             Tensor& totals);
  virtual void grouped_matmul_forward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight,
                                      const Tensor& bias, const std::vector<std::int64_t>& offsets, Tensor& out);
  virtual void grouped_matmul_backward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight,
                                       const std::vector<std::int64_t>& offsets, const Tensor& grad_out, Tensor& grad_x,
                                       Tensor& grad_weight, Tensor& grad_bias);

 protected:
  [[noreturn]] void unsupported(const char* op) const;
};

// The backend that made the memory of every defined tensor in `tensors` (a device op's dispatch
// point, after check_same_device). Throws myriad::Error naming the op and the tensor when one has
// no backend (device memory wrapped from elsewhere) or two tensors belong to different backends.
Backend& backend_of(const char* op, std::initializer_list<NamedTensor> tensors);

}  // namespace myriad::ops
