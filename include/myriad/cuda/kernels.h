// Host launchers of the CUDA kernels in kernels/<family>/. They take device pointers, element
// counts and a stream, never Tensor: the ops layer unpacks tensors and calls these.
//
// Every launcher validates its arguments before touching the GPU and throws myriad::Error
// naming the launcher, the argument and the value (negative or oversized counts, null or
// misaligned pointers, forbidden overlaps, short scratch space), then enqueues the work on
// `stream` and checks the launch with MYRIAD_CUDA_CHECK. Work is asynchronous: faults inside a
// kernel surface at the next synchronising call. Empty inputs enqueue nothing. All pointers are
// device memory of the current device. Results are deterministic (no atomics, fixed reduction
// orders that depend on the sizes only, not on the GPU).
//
// bf16 data is __nv_bfloat16 and f16 data __half (bit-identical to the uint16 patterns of
// core/half.h); the math is done in f32 and rounded to nearest even on store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace myriad::cuda {

// ---- GELU, GPT-2 tanh approximation (kernels/activations/gelu.cu) --------------------------
//   out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   elementwise over n values
// Backward writes grad_x = gelu'(x) * grad_out (`=`, an activation gradient).
// In place is allowed (out == x; grad_x == grad_out); any other overlap is rejected. Buffers
// that are all 16-byte aligned are processed in 16-byte packets, others element by element.
void gelu_forward_f32(const float* x, float* out, std::int64_t n, cudaStream_t stream);  // (n) -> (n)
void gelu_forward_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream);
// f32 in, the GELU rounded once into bf16 / f16 (nearest even): a GEMM operand kept in mixed precision.
void gelu_forward_f32(const float* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream);
void gelu_forward_f32(const float* x, __half* out, std::int64_t n, cudaStream_t stream);
// f16 in and out, as gelu_forward_bf16 (a kept pre-activation: read widened, rounded once).
void gelu_forward_f16(const __half* x, __half* out, std::int64_t n, cudaStream_t stream);
void gelu_backward_f32(const float* x, const float* grad_out, float* grad_x, std::int64_t n, cudaStream_t stream);
void gelu_backward_bf16(const __nv_bfloat16* x, const __nv_bfloat16* grad_out, __nv_bfloat16* grad_x, std::int64_t n,
                        cudaStream_t stream);
// A kept 16-bit pre-activation: x read widened, f32 grad_out, grad_x rounded once into x's format.
void gelu_backward_f32(const __nv_bfloat16* x, const float* grad_out, __nv_bfloat16* grad_x, std::int64_t n,
                       cudaStream_t stream);
void gelu_backward_f32(const __half* x, const float* grad_out, __half* grad_x, std::int64_t n, cudaStream_t stream);

// ---- LayerNorm over the last dim, f32, one warp per row (kernels/norms/layernorm.cu) ----------
//   mean = sum_c x / C,  var = sum_c (x - mean)^2 / C,  rstd = 1 / sqrt(var + eps)
//   out  = (x - mean) * rstd * weight + bias
// x, out: (N, C) row-major contiguous; weight, bias: (C); mean, rstd: (N), saved for backward.
// bias, mean and rstd may be null (no bias; nothing saved). out must not overlap x.
void layernorm_forward_f32(const float* x, const float* weight, const float* bias, float* out, float* mean, float* rstd,
                           std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream);
// The same with out in bf16 / f16: the f32 value rounded once (nearest even); statistics f32.
void layernorm_forward_f32(const float* x, const float* weight, const float* bias, __nv_bfloat16* out, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream);
void layernorm_forward_f32(const float* x, const float* weight, const float* bias, __half* out, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream);

// Backward with xhat = (x - mean) * rstd and g = grad_out * weight:
//   grad_x      = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))   written (`=`)
//   grad_weight += sum_n grad_out * xhat                              accumulated (`+=`)
//   grad_bias   += sum_n grad_out                                     accumulated (`+=`)
// grad_out, x, grad_x: (N, C); weight, grad_weight, grad_bias: (C); mean, rstd: (N) from forward.
// Any of grad_x, grad_weight, grad_bias may be null to skip it. grad_x must not overlap the inputs.
// The parameter gradients are reduced over row groups into `scratch`, which must hold at least
// layernorm_backward_scratch_floats(N, C) floats (0 for N <= 256: scratch may then be null).
std::int64_t layernorm_backward_scratch_floats(std::int64_t rows, std::int64_t channels);
void layernorm_backward_f32(const float* grad_out, const float* x, const float* weight, const float* mean,
                            const float* rstd, float* grad_x, float* grad_weight, float* grad_bias, float* scratch,
                            std::int64_t scratch_floats, std::int64_t rows, std::int64_t channels, cudaStream_t stream);

// ---- RMSNorm over the last dim, f32 (kernels/norms/layernorm.cu, the uncentred LayerNorm) ------
//   rstd = 1 / sqrt(sum_c x^2 / C + eps);  out = x * rstd * weight
// x, out: (N, C); weight: (C); rstd: (N) saved for backward (may be null). out must not overlap x.
void rmsnorm_forward_f32(const float* x, const float* weight, float* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream);
void rmsnorm_forward_f32(const float* x, const float* weight, __nv_bfloat16* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream);
void rmsnorm_forward_f32(const float* x, const float* weight, __half* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream);
// xhat = x * rstd, g = grad_out * weight:
//   grad_x = rstd * (g - xhat * mean_c(g * xhat)) written; grad_weight += sum_n grad_out * xhat.
// grad_x or grad_weight may be null; scratch as for layernorm (layernorm_backward_scratch_floats).
void rmsnorm_backward_f32(const float* grad_out, const float* x, const float* weight, const float* rstd, float* grad_x,
                          float* grad_weight, float* scratch, std::int64_t scratch_floats, std::int64_t rows,
                          std::int64_t channels, cudaStream_t stream);

// ---- Both norms from a 16-bit x (mixed precision's residual stream; kernels/norms/layernorm.cu) --
// x bf16 / f16, widened exactly where it is read (the results are the f32 kernels' on the same
// values); the forward's out f32 or of x's format (rounded once); the backward's gradients f32.
void layernorm_forward_f32(const __nv_bfloat16* x, const float* weight, const float* bias, __nv_bfloat16* out,
                           float* mean, float* rstd, std::int64_t rows, std::int64_t channels, float eps,
                           cudaStream_t stream);
void layernorm_forward_f32(const __nv_bfloat16* x, const float* weight, const float* bias, float* out, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream);
void rmsnorm_forward_f32(const __nv_bfloat16* x, const float* weight, __nv_bfloat16* out, float* rstd,
                         std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream);
void rmsnorm_forward_f32(const __nv_bfloat16* x, const float* weight, float* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream);
void layernorm_backward_f32(const float* grad_out, const __nv_bfloat16* x, const float* weight, const float* mean,
                            const float* rstd, float* grad_x, float* grad_weight, float* grad_bias, float* scratch,
                            std::int64_t scratch_floats, std::int64_t rows, std::int64_t channels, cudaStream_t stream);
void rmsnorm_backward_f32(const float* grad_out, const __nv_bfloat16* x, const float* weight, const float* rstd,
                          float* grad_x, float* grad_weight, float* scratch, std::int64_t scratch_floats,
                          std::int64_t rows, std::int64_t channels, cudaStream_t stream);
void layernorm_forward_f32(const __half* x, const float* weight, const float* bias, __half* out, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream);
void layernorm_forward_f32(const __half* x, const float* weight, const float* bias, float* out, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream);
void rmsnorm_forward_f32(const __half* x, const float* weight, __half* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream);
void rmsnorm_forward_f32(const __half* x, const float* weight, float* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream);
void layernorm_backward_f32(const float* grad_out, const __half* x, const float* weight, const float* mean,
                            const float* rstd, float* grad_x, float* grad_weight, float* grad_bias, float* scratch,
                            std::int64_t scratch_floats, std::int64_t rows, std::int64_t channels, cudaStream_t stream);
void rmsnorm_backward_f32(const float* grad_out, const __half* x, const float* weight, const float* rstd, float* grad_x,
                          float* grad_weight, float* scratch, std::int64_t scratch_floats, std::int64_t rows,
                          std::int64_t channels, cudaStream_t stream);

// ---- SwiGLU, f32 (kernels/activations/swiglu.cu) ---------------------------------------------
//   out = silu(gate) * up elementwise over n; backward writes grad_gate, grad_up (`=`, either may
// be null). Outputs may be the buffer of an input (in place); other overlaps are rejected.
void swiglu_forward_f32(const float* gate, const float* up, float* out, std::int64_t n, cudaStream_t stream);
// out in bf16 / f16 (rounded once, nearest even; then out may not overlap gate or up).
void swiglu_forward_f32(const float* gate, const float* up, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream);
void swiglu_forward_f32(const float* gate, const float* up, __half* out, std::int64_t n, cudaStream_t stream);
void swiglu_backward_f32(const float* gate, const float* up, const float* grad_out, float* grad_gate, float* grad_up,
                         std::int64_t n, cudaStream_t stream);
// The gradients in bf16 / f16 (each rounded once, nearest even; then they overlap no input).
void swiglu_backward_f32(const float* gate, const float* up, const float* grad_out, __nv_bfloat16* grad_gate,
                         __nv_bfloat16* grad_up, std::int64_t n, cudaStream_t stream);
void swiglu_backward_f32(const float* gate, const float* up, const float* grad_out, __half* grad_gate, __half* grad_up,
                         std::int64_t n, cudaStream_t stream);
// gate and up in bf16 / f16 (mixed precision's kept pre-activations, widened where read): out and
// the gradients in that format.
void swiglu_forward_f32(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out, std::int64_t n,
                        cudaStream_t stream);
void swiglu_forward_f32(const __half* gate, const __half* up, __half* out, std::int64_t n, cudaStream_t stream);
void swiglu_backward_f32(const __nv_bfloat16* gate, const __nv_bfloat16* up, const float* grad_out,
                         __nv_bfloat16* grad_gate, __nv_bfloat16* grad_up, std::int64_t n, cudaStream_t stream);
void swiglu_backward_f32(const __half* gate, const __half* up, const float* grad_out, __half* grad_gate,
                         __half* grad_up, std::int64_t n, cudaStream_t stream);

// ---- RoPE, f32, rotate-half convention of ops/rope.h (kernels/position/rope.cu) --------------
// rope_table_f32 fills cos/sin tables (seq, head_dim / 2) on the device from float64 angles
// (position_offset + t) * theta^(-2i / head_dim) (it synchronises the stream). rope_f32 rotates
// contiguous (batch, seq, heads, head_dim) x into out (may be x) by +angle, or by -angle when
// `backward` (the gradient: grad_x from grad_out).
// rope_rows: the same rotation on (batch, seq, heads, head_dim) rows of heads at any strides —
// element (b, t, h, d) at b * batch_stride + t * row_stride + h * head_dim + d (in elements) — the
// heads views of the model's packed q / k rows; x f32 or bf16 / f16, out f32 or a 16-bit format
// (f32 math, out rounded once, nearest even). out may be x as the same view (in place), else the
// two must not overlap.
struct RopeRows {
  std::int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  std::int64_t x_batch_stride = 0, x_row_stride = 0, out_batch_stride = 0, out_row_stride = 0;
  bool backward = false;  // rotate by -angle (the gradient)
};
void rope_rows(const float* x, float* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream);
void rope_rows(const float* x, __nv_bfloat16* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream);
void rope_rows(const float* x, __half* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream);
void rope_rows(const __nv_bfloat16* x, __nv_bfloat16* out, const float* cos_table, const float* sin_table,
               const RopeRows& rows, cudaStream_t stream);
void rope_rows(const __half* x, __half* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream);
void rope_rows(const __nv_bfloat16* x, float* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream);
void rope_rows(const __half* x, float* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream);
void rope_table_f32(float* cos_table, float* sin_table, std::int64_t seq, std::int64_t head_dim, double theta,
                    std::int64_t position_offset, cudaStream_t stream);
void rope_f32(const float* x, float* out, const float* cos_table, const float* sin_table, std::int64_t batch,
              std::int64_t seq, std::int64_t heads, std::int64_t head_dim, bool backward, cudaStream_t stream);

// ---- Embedding, f32 table (V, C), i32 ids (N) (kernels/embedding/embedding.cu) ---------------
// forward: out (N, C) = table rows (zeros for a bad id); backward: grad_table (V, C) += grad_out
// rows, deterministic (each element summed in token order, as on the CPU: bit for bit). A bad id
// (outside [0, V)) is skipped and lowers *bad_index (device long long, initialised to LLONG_MAX)
// to its position.
// The backward is parallel over tokens: it sorts (id, position) pairs (a stable radix sort) in
// `scratch`, which must hold at least embedding_backward_scratch_bytes(N, V) bytes, 16-byte
// aligned (0 for N = 0: scratch may then be null), and must not overlap the other buffers.
// N < 2^31. The size is CUB's for the current device: ask on the device that will run the call.
void embedding_forward_f32(const std::int32_t* ids, const float* table, float* out, long long* bad_index,
                           std::int64_t tokens, std::int64_t vocab, std::int64_t channels, cudaStream_t stream);
std::int64_t embedding_backward_scratch_bytes(std::int64_t tokens, std::int64_t vocab);
void embedding_backward_f32(const std::int32_t* ids, const float* grad_out, float* grad_table, long long* bad_index,
                            void* scratch, std::int64_t scratch_bytes, std::int64_t tokens, std::int64_t vocab,
                            std::int64_t channels, cudaStream_t stream);

// ---- Token routing of a mixture of experts, f32 rows of C values (kernels/moe/token_routing.cu)
// The ops of ops/token_routing.h on contiguous device memory:
//   gather_rows_f32           out (rows, C)[r] = x (tokens, C)[source[r]], zeros for source -1
//   combine_rows_forward_f32  out (tokens, C)[t] = sum_j weight[t, j] rows (row_count, C)[slot[t, j]]
//                             over slot (tokens, k) entries >= 0, j increasing (weight null: ones)
//   combine_rows_backward_f32 grad_rows (row_count, C) zeroed, then grad_rows[slot[t, j]] =
//                             weight[t, j] grad_out[t] (`=`); grad_weight (tokens, k), may be null,
//                             = <grad_out[t], rows[slot[t, j]]> (0 for -1) by a fixed-order block
//                             reduction; rows may be null when grad_weight is
// An index outside its range ([-1, tokens) for source, [-1, row_count) for slot) counts as -1 and
// lowers *bad_index (device long long, initialised to LLONG_MAX) to its flat position. Each row
// may appear at most once in slot (not checked: the caller's contract). Outputs must not overlap
// inputs.
void gather_rows_f32(const float* x, const std::int32_t* source, float* out, long long* bad_index, std::int64_t rows,
                     std::int64_t tokens, std::int64_t channels, cudaStream_t stream);
void combine_rows_forward_f32(const float* rows, const std::int32_t* slot, const float* weight, float* out,
                              long long* bad_index, std::int64_t tokens, std::int64_t k, std::int64_t row_count,
                              std::int64_t channels, cudaStream_t stream);
void combine_rows_backward_f32(const float* rows, const std::int32_t* slot, const float* weight, const float* grad_out,
                               float* grad_rows, float* grad_weight, long long* bad_index, std::int64_t tokens,
                               std::int64_t k, std::int64_t row_count, std::int64_t channels, cudaStream_t stream);

// ---- MoE routing decisions and their gradient, float64 math (kernels/moe/routing.cu) ----------
// The contract of ops/moe_routing.h on contiguous device memory, for `tokens` = B sequences of
// seq_len, `experts`, top_k <= kMaxRouteTopK. RouteShape::expert_block is the padded layout's M
// (padded only); source has source_rows entries. totals may be null (not computed) and is added to.
// Scratch: at least route_tokens_scratch_bytes(shape) bytes of device memory, 8-byte aligned.
// Sums over tokens use a fixed-order block reduction; nothing depends on the GPU or on timing.
// Context parallelism (context_ranks > 1): `context` is the (cp, B, 2, E) all-gathered choice
// counts (count_route_choices_f32 writes a rank's (B, 2, E)); null otherwise.
constexpr std::int64_t kMaxRouteTopK = 16;
struct RouteShape {
  std::int64_t tokens = 0, experts = 0, top_k = 1, seq_len = 1;
  std::int64_t capacity = -1;     // -1: dropless
  bool padded = false;            // the row layout (ops/moe_routing.h)
  std::int64_t expert_block = 0;  // padded: rows per expert
  bool sigmoid = false, normalize_top_k = true;
  std::int64_t context_ranks = 1, context_rank = 0;
};
std::int64_t route_tokens_scratch_bytes(const RouteShape& shape);
void route_tokens_f32(const RouteShape& shape, const float* logits, const std::int64_t* context, std::int32_t* expert,
                      float* weight, std::int32_t* slot, std::int32_t* source, std::int64_t source_rows,
                      std::int64_t* counts, double* totals, void* scratch, std::int64_t scratch_bytes,
                      cudaStream_t stream);
// scale: null, or one float on the device that multiplies aux_scale and z_scale when the kernel runs.
void route_tokens_backward_f32(const RouteShape& shape, const float* logits, const std::int64_t* context,
                               const std::int32_t* expert, const float* grad_weight, double aux_scale, double z_scale,
                               const float* scale, float* grad_logits, void* scratch, std::int64_t scratch_bytes,
                               cudaStream_t stream);
// counts (B, chunks, E): chunks = 2 under context parallelism, else 1.
std::int64_t count_route_choices_scratch_bytes(const RouteShape& shape);
void count_route_choices_f32(const RouteShape& shape, const float* logits, std::int64_t* counts, void* scratch,
                             std::int64_t scratch_bytes, cudaStream_t stream);

// ---- Per-group bias of a grouped linear layer, f32 (kernels/moe/group_bias.cu) ----------------
// Groups of consecutive rows [offsets[g], offsets[g + 1]) of x (rows, cols); offsets: groups + 1
// device int64, non-decreasing from 0 to rows (as ops/grouped_matmul.h checked on the host).
//   add_group_bias_f32                x[r, :] += bias (groups, cols)[group of r, :]
//   group_column_sums_accumulate_f32  out (groups, cols)[g, :] += column sums of the group's rows,
//                                     rows summed in an order fixed by the sizes; an empty group's
//                                     row of out is not touched (at most 65535 groups)
void add_group_bias_f32(float* x, const float* bias, const std::int64_t* offsets, std::int64_t groups,
                        std::int64_t rows, std::int64_t cols, cudaStream_t stream);
void group_column_sums_accumulate_f32(const float* x, float* out, const std::int64_t* offsets, std::int64_t groups,
                                      std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// ---- Block selection of block-sparse attention (kernels/attention/block_selection.cu) ---------
// The contract of ops/block_selection.h on device memory.
//   block_means_f32    out (B, H, nb, D) contiguous = the float64 means, in row order, of the
//                      rows of each block of x (B, H, T, D) with strides (sb, sh, st, 1)
//   select_blocks_f32  the fixed-capacity layout (key_blocks (R, capacity) padded with
//                      query_blocks, row_begin (R + 1) = r capacity, counts (R), mass (R)) from
//                      qbar (B, Hq, nb, D) and kbar (B, Hkv, nb, D) contiguous; totals (5 f64)
//                      added to when not null (one thread, rows in order: no atomics)
// One block per layout row: f32 scores in d order, float64 weights, the kept blocks by repeated
// block-wide arg-max (equal weights to the lower block, NaN lowest). Scores need nb * 9 bytes of
// shared memory per block (block_select_smem_bytes; up to the device's opt-in limit).
struct BlockSelectShape {
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, query_blocks = 0, head_dim = 0, capacity = 1;
  std::int64_t block_size = 64, seq_len = 0;
  std::int64_t local_blocks = 0, global_blocks = 0, stride_blocks = 0;  // the fixed pattern
  double sparse_ratio = 0.0, threshold = 0.0;
  std::int64_t max_blocks = 0;
  float scale = 1.0f;
  std::int64_t chunk_blocks = 0, chunk0 = 0, chunk1 = 0;  // rows wanted (chunk_blocks 0: all)
};
void block_means_f32(const float* x, float* out, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                     std::int64_t stride_b, std::int64_t stride_h, std::int64_t stride_t, std::int64_t block_size,
                     cudaStream_t stream);
void select_blocks_f32(const BlockSelectShape& shape, const float* qbar, const float* kbar, std::int32_t* key_blocks,
                       std::int64_t* row_begin, std::int32_t* counts, double* mass, double* totals,
                       cudaStream_t stream);

// ---- Flash attention, causal or not, GQA, head dim 64 / 128 (kernels/attention/flash_attention.cu)
// q, out, grad_out, grad_q: (batch, q_heads, q_seq, head_dim) contiguous; k, v, grad_k, grad_v:
// (batch, kv_heads, k_seq, head_dim); lse: (batch, q_heads, q_seq) f32, written by the forward and
// read by the backward. The math of ops/attention.h (scale 0 = 1 / sqrt(head_dim)); f32 math for
// bf16 tensors. Query row i sits at global position q_offset + i, key row j at k_offset + j;
// causal compares those positions; with a layout (block-sparse, ops/block_layout.h) a query reads
// only the key blocks its layout row lists. A query row that sees no key gets out = 0 and
// lse = -inf, and the backward gives it (and reading it) zero gradient. No T x T matrix is
// stored. The backward writes grad_q, grad_k, grad_v (`=`), or adds into them with `accumulate`,
// and uses `delta` (batch * q_heads * q_seq floats of device scratch). Gradients must not
// overlap inputs.
//
// A layout's CSR arrays live in device memory and must satisfy BlockLayout's invariants (the
// launchers cannot read them: checked on the host by the op, check_block_layout). The launchers
// check the rest: sets 1 or batch * q_heads, offsets multiples of block_size, both row ranges
// inside query_blocks * block_size positions, and block_size a multiple of the kernel's query tile
// (kFlashAttentionLayoutTile for the CUDA-core kernels, kFlashAttentionTcLayoutTile for the
// tensor-core ones), so that a query tile lies inside one layout block. Key tiles need no
// alignment: the kernels walk the listed blocks' key rows, masking a tile's rows past a block.
struct FlashAttentionLayout {
  const std::int64_t* row_begin = nullptr;   // device, sets * query_blocks + 1 entries; null: dense
  const std::int32_t* key_blocks = nullptr;  // device, row_begin[sets * query_blocks] entries
  std::int64_t block_size = 0, query_blocks = 0, sets = 1;
};
constexpr std::int64_t kFlashAttentionLayoutTile = 32;    // query rows per block, CUDA-core kernels
constexpr std::int64_t kFlashAttentionTcLayoutTile = 64;  // query rows per block, tensor-core kernels
struct FlashAttentionShape {
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, q_seq = 0, head_dim = 0;
  float scale = 0.0f;
  bool causal = true;
  std::int64_t k_seq = -1;                  // key / value rows; -1: q_seq (self-attention)
  std::int64_t q_offset = 0, k_offset = 0;  // global positions of q's and k's row 0
  bool accumulate = false;                  // the backward adds into grad_q, grad_k, grad_v
  FlashAttentionLayout layout{};            // block-sparse; row_begin null: every (causal) key

  std::int64_t key_rows() const { return k_seq < 0 ? q_seq : k_seq; }
};
void flash_attention_forward_f32(const float* q, const float* k, const float* v, float* out, float* lse,
                                 const FlashAttentionShape& shape, cudaStream_t stream);
void flash_attention_forward_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                  __nv_bfloat16* out, float* lse, const FlashAttentionShape& shape,
                                  cudaStream_t stream);
// The same forward on tensor cores (kernels/attention/flash_attention_tc_forward.cuh, instances
// per type in flash_attention_tc_{bf16,f16}.cu: WMMA 16-bit products, f32 accumulation and
// softmax, probabilities rounded to the input type before P V as FlashAttention does): same out
// and lse contract; q, k, v, out 16-byte aligned. The f16 variant is the same math on IEEE half
// (training.precision fp16): 5 exponent bits, so out-of-range values become inf, which the loss
// scaler detects.
void flash_attention_forward_tc_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                     __nv_bfloat16* out, float* lse, const FlashAttentionShape& shape,
                                     cudaStream_t stream);
void flash_attention_forward_tc_f16(const __half* q, const __half* k, const __half* v, __half* out, float* lse,
                                    const FlashAttentionShape& shape, cudaStream_t stream);
// The backward on tensor cores (kernels/attention/flash_attention_tc_backward.cuh: WMMA 16-bit
// products, f32 accumulation; P and dS rounded to the input type before their products): the
// contract of flash_attention_backward_bf16; all tensors 16-byte aligned.
void flash_attention_backward_tc_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                      const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* grad_out,
                                      __nv_bfloat16* grad_q, __nv_bfloat16* grad_k, __nv_bfloat16* grad_v, float* delta,
                                      std::int64_t delta_floats, const FlashAttentionShape& shape, cudaStream_t stream);
void flash_attention_backward_tc_f16(const __half* q, const __half* k, const __half* v, const __half* out,
                                     const float* lse, const __half* grad_out, __half* grad_q, __half* grad_k,
                                     __half* grad_v, float* delta, std::int64_t delta_floats,
                                     const FlashAttentionShape& shape, cudaStream_t stream);
void flash_attention_backward_f32(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                  const float* grad_out, float* grad_q, float* grad_k, float* grad_v, float* delta,
                                  std::int64_t delta_floats, const FlashAttentionShape& shape, cudaStream_t stream);
void flash_attention_backward_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* grad_out,
                                   __nv_bfloat16* grad_q, __nv_bfloat16* grad_k, __nv_bfloat16* grad_v, float* delta,
                                   std::int64_t delta_floats, const FlashAttentionShape& shape, cudaStream_t stream);

// out, lse <- the attention over the union of two disjoint key sets (ops/attention.h,
// attention_merge; kernels/attention/attention_merge.cu): out, part_out (rows, head_dim) and lse,
// part_lse (rows) contiguous f32, rows = batch * heads * seq. Weights exp(lse - new_lse) in
// float64 as on the CPU; a row whose part_lse is -inf keeps out and lse, one whose lse is -inf
// takes part_out and part_lse. out and lse are updated in place; the parts must not overlap them.
void attention_merge_f32(float* out, float* lse, const float* part_out, const float* part_lse, std::int64_t rows,
                         std::int64_t head_dim, cudaStream_t stream);

// ---- AdamW over fp32 master weights (kernels/optim/adamw.cu) ---------------------------------
// The update of ops/adamw.h elementwise over n values: param, m, v updated in place from grad
// (scaled by grad_scale first: clipping, loss-scale unscaling). All four must be disjoint.
struct AdamWStep {
  float lr = 0.0f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f, grad_scale = 1.0f;
  std::int64_t step = 0;  // 1-based count including this update (bias correction)
};
// Compute copies written in the same pass (ops/adamw.h): rounded (n floats) = the updated param
// rounded to bf16 (f16 when `f16`), narrow (n bf16 / f16) = the same values; null = not written.
struct AdamWCopyPointers {
  float* rounded = nullptr;
  void* narrow = nullptr;
  bool f16 = false;
};
void adamw_update_f32(float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWStep& step,
                      cudaStream_t stream, const AdamWCopyPointers& copies = {});

// *out (device double) = sum of grad[i]^2 in float64, in an order fixed by n (bit-identical run
// to run). scratch: at least grad_norm_scratch_doubles(n) doubles of device memory.
std::int64_t grad_norm_scratch_doubles(std::int64_t n);
void grad_norm_squared_f32(const float* grad, std::int64_t n, double* scratch, std::int64_t scratch_doubles,
                           double* out, cudaStream_t stream);

// ---- Compression codes with error feedback (kernels/optim/compression.cu) -------------------
// The codes of ops/compression.h over one segment of n values: x (n) read, error (n) updated in
// place (y = x + error; error = y - decoded), code written (the op's byte layout; any alignment);
// decode writes out (n) `=` or, with accumulate, `+=`. The arithmetic is the CPU op's operation
// for operation (no fused multiply-adds; the sign scale summed in float64 in index order), so the
// bytes equal the CPU's. Top-k (k = topk_count(ratio, n) >= 1) selects on the device — a radix
// select over |y|'s bits with ties to the lower index, one thread block per segment — and reads
// nothing back. x, error, code and out must be disjoint; no scratch.
void sign_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, cudaStream_t stream);
void int8_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, cudaStream_t stream);
void topk_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, std::int64_t k,
                     cudaStream_t stream);
void sign_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, bool accumulate, cudaStream_t stream);
void int8_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, bool accumulate, cudaStream_t stream);
void topk_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, std::int64_t k, bool accumulate,
                     cudaStream_t stream);

// ---- Exact sums: the block fixed-point encoding (kernels/comm/exact_sum.cu) -------------------
// The host functions of ops/exact_sum.h on device memory, with the host's bits:
//   exact_sum_exponents_f32  exponents (exact_sum_blocks(n)) = this rank's block exponents of x (n)
//   to_exact_fixed_f32       q (n) = the int64 terms of x (n) under the group's exponents
//   from_exact_fixed_f32     out (n) = the f32 values of the summed q (n), element first + i of the
//                            buffer the exponents describe (a reduce-scatter's chunk)
// headroom in [0, 31] (exact_sum_headroom of the group's size). Outputs must not overlap inputs.
void exact_sum_exponents_f32(const float* x, std::int64_t n, std::int32_t* exponents, cudaStream_t stream);
void to_exact_fixed_f32(const float* x, std::int64_t n, const std::int32_t* exponents, int headroom, std::int64_t* q,
                        cudaStream_t stream);
void from_exact_fixed_f32(const std::int64_t* q, std::int64_t first, std::int64_t n, const std::int32_t* exponents,
                          int headroom, float* out, cudaStream_t stream);

// ---- 1-bit Adam's update with the frozen variance (kernels/optim/onebit_adam.cu) -------------
// ops/onebit_adam_update.h elementwise over n: m = m * inverse_replicas; p -= decay * p;
// p -= lr * (m / bias1) / (sqrt(v / bias2) + eps), each operation rounded (no fused
// multiply-adds: the CPU's bits). param, m, v disjoint.
struct OneBitAdamStep {
  float lr = 0.0f, decay = 0.0f, bias1 = 1.0f, bias2 = 1.0f, eps = 1e-8f, inverse_replicas = 1.0f;
};
void onebit_adam_update_f32(float* param, float* m, const float* v, std::int64_t n, const OneBitAdamStep& step,
                            cudaStream_t stream);
// m = beta1 * m + gain * grad over n (each product rounded, then the sum); m and grad disjoint.
void onebit_adam_momentum_f32(float* m, const float* grad, std::int64_t n, float beta1, float gain,
                              cudaStream_t stream);

// ---- Vocabulary-shard loss pieces, f32 over n rows (kernels/loss/vocab_shard.cu) -------------
// The contract of ops/vocab_shard_loss.h: partials writes packed (2n) from state (n, i32),
// local_lse, local_loss and maxima (n); combine writes lse and losses (n) from state, maxima and
// the all-reduced packed. Outputs must not overlap inputs.
void vocab_shard_partials_f32(const std::int32_t* state, const float* local_lse, const float* local_loss,
                              const float* maxima, float* packed, std::int64_t n, cudaStream_t stream);
// ops/vocab_shard_loss.h's token map over n tokens: the shard's rows (`elsewhere` for another
// shard's token, ignore_index kept) or, with `state`, 1 / 0 / -1. out must not overlap tokens.
void vocab_shard_tokens_i32(const std::int32_t* tokens, std::int32_t* out, std::int64_t n, std::int64_t vocab_start,
                            std::int64_t rows, bool state, std::int32_t elsewhere, std::int32_t ignore_index,
                            cudaStream_t stream);
void vocab_shard_combine_f32(const std::int32_t* state, const float* maxima, const float* packed, float* lse,
                             float* losses, std::int64_t n, cudaStream_t stream);

// ---- Row softmax, f32 (rows, cols) (kernels/softmax/softmax.cu) -----------------------------
// The contract of ops/softmax.h: forward out = softmax(x) per row (out may be x); backward
// grad_x = out * (grad_out - sum(grad_out * out)) per row (grad_x may be grad_out or out).
void softmax_forward_f32(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
void softmax_backward_f32(const float* out, const float* grad_out, float* grad_x, std::int64_t rows, std::int64_t cols,
                          cudaStream_t stream);

// ---- Fused softmax cross-entropy, f32 logits (N, V) (kernels/loss/cross_entropy.cu) ----------
// The contract of ops/cross_entropy.h: losses, lse (N) written; backward writes grad_logits
// (may be the logits buffer itself: no probability matrix is stored) scaled per row by
// grad_losses. A target outside [0, V) that is not ignore_index: the forward writes NaN for that
// row and atomically lowers *bad_row (device long long; initialise it to LLONG_MAX) to the row,
// which the caller checks after synchronising; the backward gives such rows zero gradient.
// Rows lie row_length >= vocab floats apart (the padded vocabulary): columns [vocab, row_length)
// are padding, left out of the sums, and the backward writes them 0.
void cross_entropy_forward_f32(const float* logits, const std::int32_t* targets, float* losses, float* lse,
                               long long* bad_row, std::int64_t rows, std::int64_t vocab, std::int64_t row_length,
                               std::int32_t ignore_index, cudaStream_t stream);
void cross_entropy_backward_f32(const float* logits, const std::int32_t* targets, const float* lse,
                                const float* grad_losses, float* grad_logits, std::int64_t rows, std::int64_t vocab,
                                std::int64_t row_length, std::int32_t ignore_index, cudaStream_t stream);
// The backward on a vocabulary shard (tensor parallelism, parallel/vocab_parallel.h): logits are the
// columns [vocab_start, vocab_start + vocab) of each row, lse the whole row's (combined over the
// shards), targets global ids. grad = (exp(x - lse) - [target == vocab_start + v]) * grad_loss,
// 0 for ignore_index rows; a target in another shard only has no one-hot term here.
void cross_entropy_backward_shard_f32(const float* logits, const std::int32_t* targets, const float* lse,
                                      const float* grad_losses, float* grad_logits, std::int64_t rows,
                                      std::int64_t vocab, std::int64_t row_length, std::int64_t vocab_start,
                                      std::int32_t ignore_index, cudaStream_t stream);

// ---- Tensor plumbing for the device model, f32 (kernels/tensor/layout.cu) --------------------
// add_f32: out = a + b over n (out may be a or b). add_broadcast_rows_f32: x (rows, width) +=
// row (width) on every row (row must not overlap x). column_sums_accumulate_f32: out (cols) +=
// the column sums of x (rows, cols) — bias gradients, position-table gradients; rows are summed
// in an order fixed by the sizes. split_heads_f32: dst (batch, heads, seq, head_dim) contiguous
// from rows of src whose row r = b * seq + t holds heads x head_dim values at stride
// src_row_stride (a q, k or v slice of the fused qkv rows); merge_heads_f32 is its inverse
// into rows of stride dst_row_stride. Sources and destinations must not overlap.
void add_f32(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream);
// out[i] = value for i < n.
void fill_f32(float* out, float value, std::int64_t n, cudaStream_t stream);
// out = alpha * a + beta * b over n (b null: out = alpha * a); with `accumulate`, out += that.
// out may be a or b (in place, without accumulate: each element is read before it is written).
void axpby_f32(float alpha, const float* a, float beta, const float* b, float* out, std::int64_t n, bool accumulate,
               cudaStream_t stream);
// The same with b or out in a 16-bit format (mixed precision's residual stream): b widened
// exactly; a 16-bit out is the f32 value rounded once (nearest even; not with `accumulate`).
void axpby_f32(float alpha, const float* a, float beta, const __nv_bfloat16* b, float* out, std::int64_t n,
               bool accumulate, cudaStream_t stream);
void axpby_f32(float alpha, const float* a, float beta, const __half* b, float* out, std::int64_t n, bool accumulate,
               cudaStream_t stream);
void axpby_f32(float alpha, const float* a, float beta, const float* b, __nv_bfloat16* out, std::int64_t n,
               bool accumulate, cudaStream_t stream);
void axpby_f32(float alpha, const float* a, float beta, const float* b, __half* out, std::int64_t n, bool accumulate,
               cudaStream_t stream);
void add_broadcast_rows_f32(float* x, const float* row, std::int64_t rows, std::int64_t width, cudaStream_t stream);
void column_sums_accumulate_f32(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// The same from bf16 / f16 rows (mixed precision's kept gradients), widened exactly, summed in f32.
void column_sums_accumulate_f32(const __nv_bfloat16* x, float* out, std::int64_t rows, std::int64_t cols,
                                cudaStream_t stream);
void column_sums_accumulate_f32(const __half* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
void split_heads_f32(const float* src, std::int64_t src_row_stride, float* dst, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim, cudaStream_t stream);
void merge_heads_f32(const float* src, float* dst, std::int64_t dst_row_stride, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim, cudaStream_t stream);
// The same two for 16-bit values (bf16 or f16: the bits are moved, not converted).
void split_heads_16(const std::uint16_t* src, std::int64_t src_row_stride, std::uint16_t* dst, std::int64_t batch,
                    std::int64_t seq, std::int64_t heads, std::int64_t head_dim, cudaStream_t stream);
void merge_heads_16(const std::uint16_t* src, std::uint16_t* dst, std::int64_t dst_row_stride, std::int64_t batch,
                    std::int64_t seq, std::int64_t heads, std::int64_t head_dim, cudaStream_t stream);
// out = x rounded to bf16 (nearest even, as core/half.h) over n values; x and out disjoint.
void convert_f32_to_bf16(const float* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream);
// out = x widened to f32 (exact) over n values; x and out disjoint.
void convert_bf16_to_f32(const __nv_bfloat16* x, float* out, std::int64_t n, cudaStream_t stream);
// The same two for IEEE half (f16): values beyond its range (65504) round to inf.
void convert_f32_to_f16(const float* x, __half* out, std::int64_t n, cudaStream_t stream);
void convert_f16_to_f32(const __half* x, float* out, std::int64_t n, cudaStream_t stream);

// ---- Weight-only INT8 linear, f32 activations (kernels/quantized/int8_linear.cu) -------------
//   y (rows, n) = x (rows, k) @ (q * scale)^T + bias (n, may be null)
// q (n, k) int8 row-major; scales (n, groups) f32 with groups = ceil(k / group_size), or 1 for
// group_size 0 (per output channel); dequantisation as ops/int8_linear.h. y is written (`=`) and
// must not overlap x.
void int8_linear_forward_f32(const float* x, const std::int8_t* q, const float* scales, const float* bias, float* y,
                             std::int64_t rows, std::int64_t n, std::int64_t k, std::int64_t group_size,
                             cudaStream_t stream);
// ---- FP8 quantisation (kernels/quantized/fp8_quantize.cu; ops/fp8.h) ------------------------
// out (rows, cols) = fp8(x * scale), E4M3 or (e5m2) E5M2, rounded to nearest even and saturated
// (NaN stays NaN); out_t (cols, rows) the same transposed, or null; amax (one f32 holding a
// non-negative value or NaN) = max(amax, max |x|), or null. x row-major f32; outputs written (`=`).
// `scale` is one f32 on the device, read by the kernel (a recorded graph replays with its value).
void fp8_quantize_f32(const float* x, std::uint8_t* out, std::uint8_t* out_t, float* amax, std::int64_t rows,
                      std::int64_t cols, const float* scale, bool e5m2, cudaStream_t stream);
// INT8 embedding lookup (kernels/quantized/int8_embedding.cu): out (n, c)[i, :] = q[ids[i], :] *
// the row's scales, q (V, c) int8, scales (V, groups) as above; ids in [0, V), checked by the
// caller on the host. out is written (`=`).
void int8_embedding_forward_f32(const std::int32_t* ids, const std::int8_t* q, const float* scales, float* out,
                                std::int64_t n, std::int64_t c, std::int64_t group_size, cudaStream_t stream);

}  // namespace myriad::cuda
