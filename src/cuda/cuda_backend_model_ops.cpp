// CudaBackend: attention (dense or block-sparse, offsets, accumulate, merge), RoPE, embedding,
// cross-entropy, bias and AdamW over the kernels' launchers (see cuda_backend.h for the layouts
// each accepts).
#include <algorithm>
#include <type_traits>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <tuple>

#include "myriad/cuda/check.h"
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/kernels.h"
#include "heads_layout.h"
#include "kernel_pointers.h"

namespace myriad::cuda {

namespace {

void require_contiguous(const char* op, const char* name, const Tensor& t) {
  MYRIAD_CHECK(!t.defined() || t.is_contiguous(), op << " on " << t.device().str() << ": '" << name << "' "
                                                     << t.describe() << " must be contiguous (strides "
                                                     << shape_string(t.strides()) << ")");
}

}  // namespace

Tensor CudaBackend::bad_index_flag() {
  Tensor flag = empty({1}, DType::i64);
  const long long none = LLONG_MAX;
  DeviceGuard guard(context_.device());
  const bool staged = uploads_.upload(flag.raw_data(), &none, sizeof none, context_.stream());
  MYRIAD_CHECK(staged, "bad_index_flag: an 8-byte upload was not staged");
  return flag;
}

long long CudaBackend::read_bad_index(const Tensor& flag) { return copy_to_host(flag).data<std::int64_t>()[0]; }

long long* CudaBackend::unread_index_flag() {
  if (!unread_flag_.defined()) unread_flag_ = empty({1}, DType::i64);
  return static_cast<long long*>(unread_flag_.raw_data());
}

// ---- attention: (B, H, T, D) in the flash kernels' contiguous layout ---------------------------

namespace {

// A (B, H, T, D) operand as the kernels need it: itself when contiguous, else a packed copy
// (split_heads from its rows). Outputs are written into the packed copy and merged back.
struct HeadsOperand {
  Tensor original, packed;
  std::optional<HeadsGather> gather;  // set when `packed` is a copy of a strided view

  float* data() const { return floats(packed); }
};

}  // namespace

static HeadsOperand heads_operand(CudaBackend& backend, const char* op, const char* name, const Tensor& t, bool read) {
  if (!t.defined() || t.is_contiguous()) return {t, t, std::nullopt};
  const std::optional<HeadsGather> gather = heads_gather(t);
  MYRIAD_CHECK(gather.has_value(), op << " on " << t.device().str() << ": '" << name << "' " << t.describe()
                                      << " must be contiguous (B, H, T, D), heads of packed rows (strides [T*W, D, W, "
                                         "1]) or a chunk of contiguous heads' rows, has strides "
                                      << shape_string(t.strides()));
  HeadsOperand operand{t, backend.empty(t.shape()), gather};
  if (read) backend.copy(t, operand.packed);  // gathers the heads of the rows
  return operand;
}

static void write_back(CudaBackend& backend, const HeadsOperand& operand) {
  if (!operand.gather || !operand.original.defined()) return;
  const HeadsGather& g = *operand.gather;
  DeviceGuard guard(backend.context().device());
  merge_heads_view(operand.packed.data<float>(), operand.original.data<float>(), g.row_stride, g.batch_stride,
                   g.batches, g.T, g.H, g.D, backend.context().stream());
}

// A block-sparse layout's CSR arrays in device scratch for one call (the kernels read them there;
// BlockLayout holds them in host vectors), or a selection's fixed-capacity layout read in place
// (its rows are CSR rows r capacity apart, padded with blocks past the sequence, which the kernels
// skip), and the shape the kernels take. A layout's block_size
// must be a multiple of the CUDA-core kernels' query tile (kFlashAttentionLayoutTile) so that a
// tile of query rows lies in one layout block; anything else is refused here, naming the op.
struct FlashProblem {
  FlashAttentionShape shape;
  Tensor row_begin, key_blocks;  // device copies of the layout's arrays (undefined when dense)
};

static FlashProblem flash_problem(CudaBackend& backend, const char* op, const AttentionArgs& args, const Tensor& q,
                                  const Tensor& k) {
  FlashProblem p;
  p.shape = FlashAttentionShape{.batch = q.size(0),
                                .q_heads = q.size(1),
                                .kv_heads = k.size(1),
                                .q_seq = q.size(2),
                                .head_dim = q.size(3),
                                .scale = args.scale,
                                .causal = args.causal,
                                .k_seq = k.size(2),
                                .q_offset = args.q_offset,
                                .k_offset = args.k_offset,
                                .accumulate = args.accumulate};
  if (args.selected != nullptr) {  // a selection's layout, already on the device: read in place
    const SelectedBlocks& s = *args.selected;
    MYRIAD_CHECK(s.block_size % kFlashAttentionLayoutTile == 0,
                 op << " on " << q.device().str() << ": the CUDA attention kernels need a layout block_size that is "
                    << "a multiple of " << kFlashAttentionLayoutTile << " (their query tile), got " << s.block_size
                    << "; use such a block size or training.device cpu");
    p.shape.layout = FlashAttentionLayout{.row_begin = s.row_begin.data<std::int64_t>(),
                                          .key_blocks = s.key_blocks.data<std::int32_t>(),
                                          .block_size = s.block_size,
                                          .query_blocks = s.query_blocks,
                                          .sets = s.sets};
    return p;
  }
  if (args.layout == nullptr) return p;
  const BlockLayout& layout = *args.layout;
  MYRIAD_CHECK(layout.block_size % kFlashAttentionLayoutTile == 0,
               op << " on " << q.device().str() << ": the CUDA attention kernels need a layout block_size that is a "
                  << "multiple of " << kFlashAttentionLayoutTile << " (their query tile), got " << layout.block_size
                  << " (q " << shape_string(q.shape()) << ", k " << shape_string(k.shape())
                  << "); use such a block size or training.device cpu");
  const CudaBackend::DeviceBlockLayout arrays = backend.device_block_layout(layout);
  p.row_begin = arrays.row_begin;
  p.key_blocks = arrays.key_blocks;
  p.shape.layout = FlashAttentionLayout{.row_begin = p.row_begin.data<std::int64_t>(),
                                        .key_blocks = p.key_blocks.data<std::int32_t>(),
                                        .block_size = layout.block_size,
                                        .query_blocks = layout.query_blocks,
                                        .sets = layout.sets};
  return p;
}

CudaBackend::DeviceBlockLayout CudaBackend::device_block_layout(const BlockLayout& layout) {
  BlockLayoutKey key{layout.block_size, layout.query_blocks, layout.sets, layout.row_begin, layout.key_blocks};
  if (const auto found = block_layouts_.find(key); found != block_layouts_.end()) return found->second;
  Tensor row_begin = Tensor::empty({static_cast<std::int64_t>(layout.row_begin.size())}, DType::i64);
  std::copy(layout.row_begin.begin(), layout.row_begin.end(), row_begin.data<std::int64_t>());
  // At least one entry, so that the device pointer is not null for a layout that keeps nothing.
  Tensor key_blocks = Tensor::zeros({std::max<std::int64_t>(layout.kept_blocks(), 1)}, DType::i32);
  std::copy(layout.key_blocks.begin(), layout.key_blocks.end(), key_blocks.data<std::int32_t>());
  DeviceBlockLayout arrays{copy_from_host(row_begin), copy_from_host(key_blocks)};
  if (block_layouts_.size() < kCachedBlockLayouts) block_layouts_.emplace(std::move(key), arrays);
  return arrays;
}

// ---- 16-bit products (AttentionArgs::operands): the tensor-core kernels on 16-bit copies --------

// A `format` copy of a packed (contiguous) f32 operand.
static Tensor narrow_copy(CudaBackend& backend, const Tensor& packed, DType format) {
  Tensor narrow = backend.empty(packed.shape(), format);
  backend.copy(packed, narrow);
  return narrow;
}

// An attention input's packed f32 copy (heads_operand, read), or nothing for an input already in
// a 16-bit format (sixteen_bit_operand reads it in place).
static HeadsOperand f32_input(CudaBackend& backend, const char* op, const char* name, const Tensor& t) {
  return t.dtype() == DType::f32 ? heads_operand(backend, op, name, t, true) : HeadsOperand{};
}

// An attention input as the 16-bit kernels read it: contiguous (B, H, T, D) in `format` — a
// tensor already in the format itself or its packed copy (its heads gathered, no conversion),
// else the f32 operand's packed copy narrowed.
static Tensor sixteen_bit_operand(CudaBackend& backend, const Tensor& t, const HeadsOperand& operand, DType format) {
  if (t.dtype() == DType::f32) return narrow_copy(backend, operand.packed, format);
  if (t.is_contiguous()) return t;
  Tensor packed = backend.empty(t.shape(), format);
  backend.copy(t, packed);
  return packed;
}

template <typename H>
static H* halves(const Tensor& t) {
  return static_cast<H*>(t.raw_data());
}

// The tensor-core kernels of the 16-bit type H over 16-bit copies.
template <typename H>
static void tc_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, float* lse,
                       const FlashAttentionShape& shape, cudaStream_t stream) {
  if constexpr (std::is_same_v<H, __nv_bfloat16>) {
    flash_attention_forward_tc_bf16(halves<H>(q), halves<H>(k), halves<H>(v), halves<H>(out), lse, shape, stream);
  } else {
    flash_attention_forward_tc_f16(halves<H>(q), halves<H>(k), halves<H>(v), halves<H>(out), lse, shape, stream);
  }
}
template <typename H>
static void tc_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const float* lse,
                        const Tensor& grad_out, Tensor& dq, Tensor& dk, Tensor& dv, float* delta,
                        std::int64_t delta_floats, const FlashAttentionShape& shape, cudaStream_t stream) {
  if constexpr (std::is_same_v<H, __nv_bfloat16>) {
    flash_attention_backward_tc_bf16(halves<H>(q), halves<H>(k), halves<H>(v), halves<H>(out), lse, halves<H>(grad_out),
                                     halves<H>(dq), halves<H>(dk), halves<H>(dv), delta, delta_floats, shape, stream);
  } else {
    flash_attention_backward_tc_f16(halves<H>(q), halves<H>(k), halves<H>(v), halves<H>(out), lse, halves<H>(grad_out),
                                    halves<H>(dq), halves<H>(dk), halves<H>(dv), delta, delta_floats, shape, stream);
  }
}

CudnnAttention* CudaBackend::cudnn_attention() {
  if (!cudnn_tried_) {
    cudnn_tried_ = true;
    const char* setting = std::getenv("MYRIAD_CUDNN_ATTENTION");
    if (setting != nullptr && std::string(setting) == "off") {
      cudnn_why_not_ = "MYRIAD_CUDNN_ATTENTION=off";
    } else {
      DeviceGuard guard(context_.device());
      cudnn_ = make_cudnn_attention(context_.stream(), cudnn_why_not_);
    }
  }
  return cudnn_.get();
}

// The problem as cuDNN's fused attention takes it, when the rule of cuda_backend.h holds.
static std::optional<CudnnAttentionShape> cudnn_shape(const AttentionArgs& args, const FlashAttentionShape& s) {
  const bool dense = args.layout == nullptr && args.selected == nullptr && s.q_offset == 0 && s.k_offset == 0 &&
                     s.key_rows() == s.q_seq && !args.accumulate;
  if (!dense || (s.head_dim != 64 && s.head_dim != 128) || args.operands == DType::f32) return std::nullopt;
  return CudnnAttentionShape{.batch = s.batch,
                             .q_heads = s.q_heads,
                             .kv_heads = s.kv_heads,
                             .seq = s.q_seq,
                             .head_dim = s.head_dim,
                             .scale = attention_scale(args, s.head_dim),
                             .causal = s.causal,
                             .f16 = args.operands == DType::f16};
}

// cuDNN's graph of `shape` prepared, with its workspace; false when cuDNN is not used for it.
static bool cudnn_ready(CudaBackend& backend, const std::optional<CudnnAttentionShape>& shape, bool backward,
                        Tensor& workspace) {
  CudnnAttention* cudnn = shape ? backend.cudnn_attention() : nullptr;
  if (cudnn == nullptr) return false;
  std::int64_t bytes = 0;
  std::string why_not;
  if (!cudnn_attention_prepare(*cudnn, *shape, backward, bytes, why_not)) return false;
  workspace = backend.empty({std::max<std::int64_t>(1, (bytes + 3) / 4)});
  return true;
}

void CudaBackend::attention_forward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v,
                                    Tensor& out, Tensor& lse) {
  const char* op = "attention_forward";
  const FlashProblem problem = flash_problem(*this, op, args, q, k);
  // A 16-bit input (the rotated q, k the model keeps) is read in its format (sixteen_bit_operand).
  const HeadsOperand pq = f32_input(*this, op, "q", q);
  const HeadsOperand pk = f32_input(*this, op, "k", k);
  const HeadsOperand pv = f32_input(*this, op, "v", v);
  // A 16-bit out (the model keeps it for the next GEMM) is written from the kernels' 16-bit result.
  const bool sixteen_bit_out = out.dtype() != DType::f32;
  const HeadsOperand po = sixteen_bit_out ? HeadsOperand{} : heads_operand(*this, op, "out", out, false);
  DeviceGuard guard(context_.device());
  if (args.operands != DType::f32) {
    const DType f = args.operands;
    const Tensor q16 = sixteen_bit_operand(*this, q, pq, f), k16 = sixteen_bit_operand(*this, k, pk, f);
    const Tensor v16 = sixteen_bit_operand(*this, v, pv, f);
    Tensor o16 = sixteen_bit_out && out.is_contiguous() ? out : empty(out.shape(), f), workspace;
    const std::optional<CudnnAttentionShape> shape = cudnn_shape(args, problem.shape);
    if (cudnn_ready(*this, shape, false, workspace)) {
      cudnn_attention_forward(*cudnn_, *shape, q16.raw_data(), k16.raw_data(), v16.raw_data(), o16.raw_data(),
                              floats(lse), workspace.raw_data());
    } else {
      (f == DType::bf16 ? tc_forward<__nv_bfloat16> : tc_forward<__half>)(q16, k16, v16, o16, floats(lse),
                                                                          problem.shape, context_.stream());
    }
    if (sixteen_bit_out) {
      if (o16.raw_data() != out.raw_data()) copy(o16, out);  // the heads placed into the rows, 16-bit
      return;
    }
    Tensor widened = po.packed;
    copy(o16, widened);
  } else {
    flash_attention_forward_f32(pq.data(), pk.data(), pv.data(), po.data(), floats(lse), problem.shape,
                                context_.stream());
  }
  write_back(*this, po);
}

void CudaBackend::attention_backward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, const Tensor& grad_out, Tensor& grad_q,
                                     Tensor& grad_k, Tensor& grad_v) {
  const char* op = "attention_backward";
  const FlashProblem problem = flash_problem(*this, op, args, q, k);
  const HeadsOperand pq = f32_input(*this, op, "q", q);
  const HeadsOperand pk = f32_input(*this, op, "k", k);
  const bool sixteen_bit_out = out.dtype() != DType::f32;  // kept 16-bit by the model: read in its format
  const HeadsOperand pv = f32_input(*this, op, "v", v);
  const HeadsOperand po = sixteen_bit_out ? HeadsOperand{} : heads_operand(*this, op, "out", out, true);
  const HeadsOperand pg = f32_input(*this, op, "grad_out", grad_out);  // a 16-bit grad_out is read in place
  // The kernel writes (or adds into) all three gradients: a skipped one goes to scratch. With
  // accumulate, a packed copy of a strided gradient starts from its current values. A gradient
  // kept 16-bit by the model is written from the kernels' 16-bit result (no f32 copy).
  Tensor dq = grad_q.defined() ? grad_q : empty(q.shape()), dk = grad_k.defined() ? grad_k : empty(k.shape());
  Tensor dv = grad_v.defined() ? grad_v : empty(v.shape());
  const bool read = args.accumulate;
  auto f32_gradient = [&](const char* name, const Tensor& t) {
    return t.dtype() == DType::f32 ? heads_operand(*this, op, name, t, read) : HeadsOperand{};
  };
  const HeadsOperand pdq = f32_gradient("grad_q", dq), pdk = f32_gradient("grad_k", dk);
  const HeadsOperand pdv = f32_gradient("grad_v", dv);
  const std::int64_t delta_floats = q.size(0) * q.size(1) * q.size(2);
  Tensor delta = empty({std::max<std::int64_t>(delta_floats, 1)});
  DeviceGuard guard(context_.device());
  if (args.operands != DType::f32) {  // never accumulates (ops/attention.cpp): the packed grads are written
    const DType f = args.operands;
    const Tensor q16 = sixteen_bit_operand(*this, q, pq, f), k16 = sixteen_bit_operand(*this, k, pk, f);
    const Tensor v16 = sixteen_bit_operand(*this, v, pv, f);
    Tensor o16 = sixteen_bit_out && out.is_contiguous() ? out : empty(out.shape(), f);
    if (o16.raw_data() != out.raw_data()) copy(sixteen_bit_out ? out : po.packed, o16);
    const Tensor g16 = sixteen_bit_operand(*this, grad_out, pg, f);
    Tensor dq16 = empty(q.shape(), f), dk16 = empty(k.shape(), f), dv16 = empty(v.shape(), f), workspace;
    const std::optional<CudnnAttentionShape> shape = cudnn_shape(args, problem.shape);
    if (cudnn_ready(*this, shape, true, workspace)) {
      cudnn_attention_backward(*cudnn_, *shape, q16.raw_data(), k16.raw_data(), v16.raw_data(), o16.raw_data(),
                               floats(lse), g16.raw_data(), dq16.raw_data(), dk16.raw_data(), dv16.raw_data(),
                               workspace.raw_data());
    } else {
      (f == DType::bf16 ? tc_backward<__nv_bfloat16> : tc_backward<__half>)(q16, k16, v16, o16, floats(lse), g16, dq16,
                                                                            dk16, dv16, floats(delta), delta_floats,
                                                                            problem.shape, context_.stream());
    }
    for (auto [narrow, target, written] : {std::tuple{&dq16, &dq, &pdq}, {&dk16, &dk, &pdk}, {&dv16, &dv, &pdv}}) {
      if (target->dtype() != DType::f32) {
        copy(*narrow, *target);  // the heads placed into the rows, 16-bit
        continue;
      }
      Tensor widened = written->packed;
      copy(*narrow, widened);
    }
  } else {
    flash_attention_backward_f32(pq.data(), pk.data(), pv.data(), po.data(), floats(lse), pg.data(), pdq.data(),
                                 pdk.data(), pdv.data(), floats(delta), delta_floats, problem.shape, context_.stream());
  }
  for (const HeadsOperand* written : {&pdq, &pdk, &pdv}) write_back(*this, *written);
}

void CudaBackend::attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const char* op = "attention_merge";
  require_contiguous(op, "lse", lse);
  require_contiguous(op, "part_lse", part_lse);
  const HeadsOperand po = heads_operand(*this, op, "out", out, true);
  const HeadsOperand pp = heads_operand(*this, op, "part_out", part_out, true);
  DeviceGuard guard(context_.device());
  attention_merge_f32(po.data(), floats(lse), pp.data(), floats(part_lse), out.size(0) * out.size(1) * out.size(2),
                      out.size(3), context_.stream());
  write_back(*this, po);
}

// ---- RoPE: (B, T, H, D), contiguous or rows of heads --------------------------------------------

void CudaBackend::rope_forward(const RopeArgs& args, const Tensor& x, Tensor& out) {
  rope_apply("rope_forward", args, x, out, false);
}

void CudaBackend::rope_backward(const RopeArgs& args, const Tensor& grad_out, Tensor& grad_x) {
  rope_apply("rope_backward", args, grad_out, grad_x, true);
}

const Tensor& CudaBackend::rope_tables(const RopeArgs& args, std::int64_t T, std::int64_t D) {
  Tensor& tables = rope_tables_[{T, D, args.theta, args.position_offset}];
  if (!tables.defined()) {
    tables = empty({2, T, D / 2});
    DeviceGuard guard(context_.device());
    rope_table_f32(tables.data<float>(), tables.data<float>() + T * (D / 2), T, D, args.theta, args.position_offset,
                   context_.stream());
  }
  return tables;
}

// One rope_rows launch on x and out where they lie (contiguous, or rows of heads at any row and
// batch stride; f32 or 16-bit in and out). Between two different 16-bit formats the rotation goes
// into f32 rows first and is rounded once into out.
void CudaBackend::rope_apply(const char* op, const RopeArgs& args, const Tensor& x, Tensor& out, bool backward) {
  const std::int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  const auto row_stride = [&](const Tensor& t, const char* name) {
    const std::optional<std::int64_t> stride = heads_row_stride(t, false);
    MYRIAD_CHECK(stride.has_value(), op << " on " << t.device().str() << ": '" << name << "' " << t.describe()
                                        << " must be contiguous (B, T, H, D) or rows of heads (strides [T*W, W, D, "
                                           "1]), has strides "
                                        << shape_string(t.strides()));
    return *stride;
  };
  const RopeRows rows{.batch = B,
                      .seq = T,
                      .heads = H,
                      .head_dim = D,
                      .x_batch_stride = x.stride(0),
                      .x_row_stride = row_stride(x, backward ? "grad_out" : "x"),
                      .out_batch_stride = out.stride(0),
                      .out_row_stride = row_stride(out, backward ? "grad_x" : "out"),
                      .backward = backward};
  if (x.dtype() != DType::f32 && out.dtype() != DType::f32 && x.dtype() != out.dtype()) {
    Tensor rotated = empty({B, T, H, D});
    rope_apply(op, args, x, rotated, backward);
    copy(rotated, out);
    return;
  }
  const Tensor& tables = rope_tables(args, T, D);
  const float* cos_table = tables.data<float>();
  const float* sin_table = cos_table + T * (D / 2);
  DeviceGuard guard(context_.device());
  with_output_pointer(op, x, [&](auto* in) {
    with_output_pointer(op, out, [&](auto* to) {
      using In = std::remove_pointer_t<decltype(in)>;
      using Out = std::remove_pointer_t<decltype(to)>;
      if constexpr (std::is_same_v<In, float> || std::is_same_v<Out, float> || std::is_same_v<In, Out>) {
        rope_rows(static_cast<const In*>(in), to, cos_table, sin_table, rows, context_.stream());
      }
    });
  });
}

// ---- embedding, cross-entropy: the kernels flag bad ids on the device ------------------------

void CudaBackend::embedding_forward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& table, Tensor& out) {
  const char* op = "embedding_forward";
  require_contiguous(op, "ids", ids);
  require_contiguous(op, "table", table);
  // Ids the caller checked, or a vocabulary shard's (the others' rows are negative): nothing read back.
  const bool read_back = !args.ids_checked && !args.vocab_shard;
  Tensor flag = read_back ? bad_index_flag() : Tensor();
  DeviceGuard guard(context_.device());
  long long* bad_index = read_back ? static_cast<long long*>(flag.raw_data()) : unread_index_flag();
  // The kernel writes zeros for an id outside [0, V): a vocabulary shard's other rows (not checked).
  embedding_forward_f32(ids.data<std::int32_t>(), floats(table), floats(out), bad_index, ids.numel(), table.size(0),
                        table.size(1), context_.stream());
  if (!read_back) return;
  const long long bad = read_bad_index(flag);
  MYRIAD_CHECK(bad == LLONG_MAX, op << ": the id at flat index " << bad << " of ids " << ids.describe()
                                    << " is outside [0, V) with V = " << table.size(0));
}

void CudaBackend::embedding_backward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& grad_out,
                                     Tensor& grad_table) {
  const char* op = "embedding_backward";
  require_contiguous(op, "ids", ids);
  require_contiguous(op, "grad_out", grad_out);
  const bool read_back = !args.ids_checked && !args.vocab_shard;  // as in embedding_forward
  Tensor flag = read_back ? bad_index_flag() : Tensor();
  DeviceGuard guard(context_.device());
  long long* bad_index = read_back ? static_cast<long long*>(flag.raw_data()) : unread_index_flag();
  // The kernel sorts the ids in device scratch (stream-ordered: freed on return, reused in order).
  const std::int64_t scratch_bytes = embedding_backward_scratch_bytes(ids.numel(), grad_table.size(0));
  Tensor scratch = scratch_bytes > 0 ? empty({scratch_bytes}, DType::i8) : Tensor();
  // The kernel skips an id outside [0, V): a vocabulary shard's other rows (not checked).
  embedding_backward_f32(ids.data<std::int32_t>(), floats(grad_out), floats(grad_table), bad_index,
                         scratch.defined() ? scratch.raw_data() : nullptr, scratch_bytes, ids.numel(),
                         grad_table.size(0), grad_table.size(1), context_.stream());
  if (!read_back) return;
  const long long bad = read_bad_index(flag);
  MYRIAD_CHECK(bad == LLONG_MAX, op << ": the id at flat index " << bad << " of ids " << ids.describe()
                                    << " is outside [0, V) with V = " << grad_table.size(0));
}

void CudaBackend::cross_entropy_forward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets,
                                        Tensor& losses, Tensor& lse) {
  const char* op = "cross_entropy_forward";
  require_contiguous(op, "logits", logits);
  require_contiguous(op, "targets", targets);
  const std::int64_t width = logits.size(-1), rows = logits.numel() / std::max<std::int64_t>(width, 1);
  const std::int64_t vocab = args.classes > 0 ? args.classes : width;
  Tensor flag = args.targets_checked ? Tensor() : bad_index_flag();
  DeviceGuard guard(context_.device());
  long long* bad_index = args.targets_checked ? unread_index_flag() : static_cast<long long*>(flag.raw_data());
  cross_entropy_forward_f32(floats(logits), targets.data<std::int32_t>(), floats(losses), floats(lse), bad_index, rows,
                            vocab, width, args.ignore_index, context_.stream());
  if (args.targets_checked) return;
  const long long bad = read_bad_index(flag);
  MYRIAD_CHECK(bad == LLONG_MAX, op << ": the target in row " << bad << " of " << rows << " is outside [0, V) with V = "
                                    << vocab << " and is not the ignore index " << args.ignore_index);
}

void CudaBackend::cross_entropy_backward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets,
                                         const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits) {
  const char* op = "cross_entropy_backward";
  require_contiguous(op, "logits", logits);
  require_contiguous(op, "targets", targets);
  require_contiguous(op, "lse", lse);
  require_contiguous(op, "grad_losses", grad_losses);
  const std::int64_t width = logits.size(-1), rows = logits.numel() / std::max<std::int64_t>(width, 1);
  const std::int64_t vocab = args.classes > 0 ? args.classes : width;
  DeviceGuard guard(context_.device());
  if (args.vocab_shard) {  // targets outside [0, V): another shard's, no one-hot term here
    cross_entropy_backward_shard_f32(floats(logits), targets.data<std::int32_t>(), floats(lse), floats(grad_losses),
                                     floats(grad_logits), rows, vocab, width, 0, args.ignore_index, context_.stream());
    return;
  }
  cross_entropy_backward_f32(floats(logits), targets.data<std::int32_t>(), floats(lse), floats(grad_losses),
                             floats(grad_logits), rows, vocab, width, args.ignore_index, context_.stream());
}

// ---- vocabulary-shard loss pieces (ops/vocab_shard_loss.h; the dispatch point checked the shapes) ----

void CudaBackend::vocab_shard_tokens(const VocabShardMap& map, const Tensor& tokens, Tensor& out) {
  DeviceGuard guard(context_.device());
  vocab_shard_tokens_i32(tokens.data<std::int32_t>(), out.data<std::int32_t>(), tokens.numel(), map.vocab_start,
                         map.rows, map.output == VocabShardMap::Output::state, map.elsewhere, map.ignore_index,
                         context_.stream());
}

void CudaBackend::vocab_shard_partials(const Tensor& state, const Tensor& local_lse, const Tensor& local_loss,
                                       const Tensor& maxima, Tensor& packed) {
  DeviceGuard guard(context_.device());
  vocab_shard_partials_f32(state.data<std::int32_t>(), floats(local_lse), floats(local_loss), floats(maxima),
                           floats(packed), state.numel(), context_.stream());
}

void CudaBackend::vocab_shard_combine(const Tensor& state, const Tensor& maxima, const Tensor& packed, Tensor& lse,
                                      Tensor& losses) {
  DeviceGuard guard(context_.device());
  vocab_shard_combine_f32(state.data<std::int32_t>(), floats(maxima), floats(packed), floats(lse), floats(losses),
                          state.numel(), context_.stream());
}

// ---- softmax ----------------------------------------------------------------------------------

void CudaBackend::softmax_forward(const SoftmaxArgs&, const Tensor& x, Tensor& out) {
  require_contiguous("softmax_forward", "x", x);
  const std::int64_t cols = x.size(-1), rows = x.numel() / std::max<std::int64_t>(cols, 1);
  DeviceGuard guard(context_.device());
  softmax_forward_f32(floats(x), floats(out), rows, cols, context_.stream());
}

void CudaBackend::softmax_backward(const SoftmaxArgs&, const Tensor& out, const Tensor& grad_out, Tensor& grad_x) {
  require_contiguous("softmax_backward", "out", out);
  require_contiguous("softmax_backward", "grad_out", grad_out);
  const std::int64_t cols = out.size(-1), rows = out.numel() / std::max<std::int64_t>(cols, 1);
  DeviceGuard guard(context_.device());
  softmax_backward_f32(floats(out), floats(grad_out), floats(grad_x), rows, cols, context_.stream());
}

// ---- bias, AdamW ----------------------------------------------------------------------------

void CudaBackend::bias_add_forward(const BiasAddArgs&, const Tensor& x, const Tensor& bias, Tensor& out) {
  const std::int64_t width = bias.numel(), rows = x.numel() / std::max<std::int64_t>(width, 1);
  DeviceGuard guard(context_.device());
  if (out.raw_data() != x.raw_data() && x.nbytes() > 0) {
    MYRIAD_CUDA_CHECK(
        cudaMemcpyAsync(out.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice, context_.stream()));
  }
  add_broadcast_rows_f32(floats(out), floats(bias), rows, width, context_.stream());
}

void CudaBackend::bias_add_backward(const BiasAddArgs&, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_bias) {
  const std::int64_t width = grad_out.size(-1), rows = grad_out.numel() / std::max<std::int64_t>(width, 1);
  DeviceGuard guard(context_.device());
  if (grad_x.defined() && grad_x.raw_data() != grad_out.raw_data() && grad_out.nbytes() > 0) {
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(grad_x.raw_data(), grad_out.raw_data(), grad_out.nbytes(),
                                      cudaMemcpyDeviceToDevice, context_.stream()));
  }
  if (!grad_bias.defined()) return;
  switch (grad_out.dtype()) {  // f32, or a 16-bit gradient (no grad_x then: the dispatch point checked it)
    case DType::bf16:
      return column_sums_accumulate_f32(static_cast<const __nv_bfloat16*>(grad_out.raw_data()), floats(grad_bias), rows,
                                        width, context_.stream());
    case DType::f16:
      return column_sums_accumulate_f32(static_cast<const __half*>(grad_out.raw_data()), floats(grad_bias), rows, width,
                                        context_.stream());
    default:
      return column_sums_accumulate_f32(floats(grad_out), floats(grad_bias), rows, width, context_.stream());
  }
}

void CudaBackend::adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                               const AdamWCopies& copies) {
  const AdamWStep step{.lr = args.lr,
                       .beta1 = args.beta1,
                       .beta2 = args.beta2,
                       .eps = args.eps,
                       .weight_decay = args.weight_decay,
                       .grad_scale = args.grad_scale,
                       .step = args.step};
  DeviceGuard guard(context_.device());
  const AdamWCopyPointers out{.rounded = copies.rounded.defined() ? floats(copies.rounded) : nullptr,
                              .narrow = copies.narrow.defined() ? copies.narrow.raw_data() : nullptr,
                              .f16 = copies.format == DType::f16};
  adamw_update_f32(floats(param), floats(grad), floats(m), floats(v), param.numel(), step, context_.stream(), out);
}

double CudaBackend::grad_norm_squared(const Tensor& grad) { return grad_norms_squared({grad}).at(0); }

std::vector<double> CudaBackend::grad_norms_squared(const std::vector<Tensor>& grads) {
  std::int64_t scratch_doubles = 1;
  for (const Tensor& grad : grads) {
    require_contiguous("grad_norm_squared", "grad", grad);
    scratch_doubles = std::max(scratch_doubles, grad_norm_scratch_doubles(grad.numel()));
  }
  // The scratch is reused tensor after tensor (stream order); the sums land side by side.
  Tensor scratch = empty({scratch_doubles}, DType::i64);  // doubles: 8 bytes each
  Tensor sums = empty({std::max<std::int64_t>(static_cast<std::int64_t>(grads.size()), 1)}, DType::i64);
  DeviceGuard guard(context_.device());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    grad_norm_squared_f32(floats(grads[i]), grads[i].numel(), static_cast<double*>(scratch.raw_data()), scratch_doubles,
                          static_cast<double*>(sums.raw_data()) + i, context_.stream());
  }
  std::vector<double> result(grads.size());
  const Tensor host = copy_to_host(sums);
  std::memcpy(result.data(), host.raw_data(), result.size() * sizeof(double));
  return result;
}

}  // namespace myriad::cuda
