// Attention dispatch point: validates shapes / strides / dtypes / devices, then picks the backend.
#include "myriad/ops/attention.h"

#include <cmath>

#include "myriad/ops/backend.h"
#include "myriad/core/precision.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

// Only D needs unit stride; rows must not overlap so that a (T, D) head is a BLAS matrix.
void check_head_layout(const char* op, const char* name, const Tensor& t) {
  const std::int64_t T = t.size(2), D = t.size(3);
  MYRIAD_CHECK(D <= 1 || t.stride(3) == 1, op << ": '" << name
                                              << "' must have unit stride in D (its last dim), has shape "
                                              << shape_string(t.shape()) << " strides " << shape_string(t.strides()));
  MYRIAD_CHECK(T <= 1 || t.stride(2) >= D, op << ": '" << name << "' rows overlap (T stride " << t.stride(2) << " < D "
                                              << D << "), shape " << shape_string(t.shape()) << " strides "
                                              << shape_string(t.strides()));
}

// A block-sparse layout must have one set or one per (b, q head), and cover both row ranges on its
// block grid.
void check_layout(const char* op, const BlockLayout& layout, const AttentionArgs& args, std::int64_t heads,
                  std::int64_t Tq, std::int64_t Tk) {
  check_block_layout(layout, std::string(op) + ": layout");
  const std::int64_t bs = layout.block_size, covered = layout.query_blocks * bs;
  MYRIAD_CHECK(layout.sets == 1 || layout.sets == heads,
               op << ": layout has " << layout.sets << " sets, expected 1 or B * Hq = " << heads);
  MYRIAD_CHECK(args.q_offset % bs == 0 && args.k_offset % bs == 0,
               op << ": q_offset " << args.q_offset << " and k_offset " << args.k_offset
                  << " must be multiples of the layout's block_size " << bs);
  MYRIAD_CHECK(args.q_offset + Tq <= covered && args.k_offset + Tk <= covered,
               op << ": rows up to position " << std::max(args.q_offset + Tq, args.k_offset + Tk)
                  << " lie outside the layout's " << layout.query_blocks << " blocks of " << bs << " (" << covered
                  << " positions)");
}

// q, k, v and out: f32, or — with 16-bit products, which round q, k, v to the format and write
// out's values in it — that format (the model keeps its rotated q, k and the output so).
void check_f32_or_operands(const char* op, const char* name, const Tensor& t, const AttentionArgs& args) {
  const std::string also = args.operands == DType::f32 ? "" : " or " + std::string(dtype_name(args.operands));
  MYRIAD_CHECK(t.dtype() == DType::f32 || t.dtype() == args.operands,
               op << ": '" << name << "' " << t.describe() << " must be f32" << also << " (the operands' format)");
}

// Checks q, k, v (and the shapes derived from them) and returns the expected lse shape.
Shape check_qkv(const char* op, const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_f32_or_operands(op, "q", q, args);
  check_f32_or_operands(op, "k", k, args);
  check_f32_or_operands(op, "v", v, args);
  ops::check_rank(op, "q", q, 4);
  ops::check_rank(op, "k", k, 4);
  ops::check_rank(op, "v", v, 4);
  const std::int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1);
  MYRIAD_CHECK(k.size(0) == B && k.size(3) == D, op << ": 'k' has shape " << shape_string(k.shape())
                                                    << ", expected [B, Hkv, Tk, D] = [" << B << ", Hkv, Tk, " << D
                                                    << "] to match q " << shape_string(q.shape()));
  ops::check_shape(op, "v", v, k.shape());
  MYRIAD_CHECK(Hkv >= 1 && Hq % Hkv == 0, op << ": q heads Hq=" << Hq << " are not a multiple of kv heads Hkv=" << Hkv
                                             << " (q " << shape_string(q.shape()) << ", k " << shape_string(k.shape())
                                             << ")");
  MYRIAD_CHECK(D >= 1, op << ": head dim D must be positive, q has shape " << shape_string(q.shape()));
  check_head_layout(op, "q", q);
  check_head_layout(op, "k", k);
  check_head_layout(op, "v", v);
  MYRIAD_CHECK(args.block_q >= 0 && args.block_k >= 0,
               op << ": block sizes must be positive (or 0: automatic), got block_q=" << args.block_q
                  << " block_k=" << args.block_k);
  MYRIAD_CHECK(std::isfinite(args.scale), op << ": scale must be finite, got " << args.scale);
  MYRIAD_CHECK(args.operands == DType::f32 || args.operands == DType::bf16 || args.operands == DType::f16,
               op << ": operands must be f32, bf16 or f16, got " << dtype_name(args.operands));
  MYRIAD_CHECK(args.operands == DType::f32 || !args.accumulate,
               op << ": 16-bit products (operands " << dtype_name(args.operands)
                  << ") write their gradients; accumulate needs f32 operands");
  MYRIAD_CHECK(args.q_offset >= 0 && args.k_offset >= 0,
               op << ": offsets must be >= 0, got q_offset=" << args.q_offset << " k_offset=" << args.k_offset);
  if (args.layout != nullptr) check_layout(op, *args.layout, args, B * Hq, T, k.size(2));
  if (args.selected != nullptr) {
    const SelectedBlocks& s = *args.selected;
    MYRIAD_CHECK(args.layout == nullptr, op << ": both a layout and a selected layout are given");
    const std::int64_t bs = s.block_size, covered = s.query_blocks * bs, rows = s.sets * s.query_blocks;
    MYRIAD_CHECK(s.sets == B * Hq && bs >= 1 && s.capacity >= 1,
                 op << ": the selected layout has " << s.sets << " sets of block_size " << bs << ", capacity "
                    << s.capacity << ", expected B * Hq = " << B * Hq << " sets");
    MYRIAD_CHECK(args.q_offset % bs == 0 && args.k_offset % bs == 0 && args.q_offset + T <= covered &&
                     args.k_offset + k.size(2) <= covered,
                 op << ": q_offset " << args.q_offset << " / k_offset " << args.k_offset
                    << " are not on the selected layout's grid of " << s.query_blocks << " blocks of " << bs);
    ops::check_shape(op, "selected.key_blocks", s.key_blocks, {rows, s.capacity});
    ops::check_shape(op, "selected.row_begin", s.row_begin, {rows + 1});
    ops::check_shape(op, "selected.counts", s.counts, {rows});
    MYRIAD_CHECK(s.key_blocks.device() == q.device() && s.row_begin.device() == q.device(),
                 op << ": the selected layout is on " << s.key_blocks.device().str() << ", q on " << q.device().str());
  }
  return Shape{B, Hq, T};
}

void check_lse(const char* op, const char* name, const Tensor& lse, const Shape& expected) {
  ops::check_dtype(op, name, lse, DType::f32);
  ops::check_shape(op, name, lse, expected);
  ops::check_contiguous(op, name, lse);
}

void check_attention_like(const char* op, const char* name, const Tensor& t, const Tensor& like) {
  ops::check_dtype(op, name, t, DType::f32);
  ops::check_shape(op, name, t, like.shape());
  check_head_layout(op, name, t);
}

// The backward's grad_out and gradients: f32, or of the 16-bit products' format (mixed precision
// keeps the gradients only GEMMs read in it; the products round them to it anyway).
void check_gradient_like(const char* op, const char* name, const Tensor& t, const Tensor& like,
                         const AttentionArgs& args) {
  check_f32_or_operands(op, name, t, args);
  ops::check_shape(op, name, t, like.shape());
  check_head_layout(op, name, t);
}

void check_output(const char* op, const Tensor& out, const Tensor& q, const AttentionArgs& args) {
  check_f32_or_operands(op, "out", out, args);
  ops::check_shape(op, "out", out, q.shape());
  check_head_layout(op, "out", out);
}

// 16-bit products on the CPU (see ops/attention.h): a contiguous copy of t rounded to `format`.
Tensor rounded(const Tensor& t, DType format) {
  Tensor copy = t.dtype() == DType::f32 ? t.clone() : t.to(DType::f32);  // a tensor of the format: exact
  round_to_precision(copy, format);
  return copy;
}

// `result` (a contiguous f32 scratch) rounded to `format`, into `into` (any view the op accepts).
void round_into(Tensor& result, DType format, Tensor& into) {
  round_to_precision(result, format);
  cpu::copy(result, into);  // the CPU writes any view
}

// The CPU op's args: a selected layout as its compressed copy in `layout`.
AttentionArgs host_args(const AttentionArgs& args, BlockLayout& layout) {
  if (args.selected == nullptr) return args;
  layout = compact_layout(*args.selected);
  AttentionArgs host = args;
  host.selected = nullptr;
  host.layout = &layout;
  return host;
}

}  // namespace

float attention_scale(const AttentionArgs& args, std::int64_t head_dim) {
  if (args.scale != 0.0f) return args.scale;
  return head_dim > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))) : 1.0f;
}

void attention_forward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                       Tensor& lse) {
  const char* op = "attention_forward";
  Shape lse_shape = check_qkv(op, args, q, k, v);
  check_output(op, out, q, args);
  check_lse(op, "lse", lse, lse_shape);
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}};
  if (ops::check_same_device(op, tensors).is_cpu()) {
    BlockLayout layout;
    const AttentionArgs host = host_args(args, layout);
    if (args.operands == DType::f32) return cpu::attention_forward(host, q, k, v, out, lse);
    const DType f = args.operands;
    Tensor result = Tensor::empty(out.shape());
    cpu::attention_forward(host, rounded(q, f), rounded(k, f), rounded(v, f), result, lse);
    return round_into(result, f, out);
  }
  ops::backend_of(op, tensors).attention_forward(args, q, k, v, out, lse);
}

void attention_backward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& grad_out, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  const char* op = "attention_backward";
  Shape lse_shape = check_qkv(op, args, q, k, v);
  check_output(op, out, q, args);
  check_lse(op, "lse", lse, lse_shape);
  check_gradient_like(op, "grad_out", grad_out, q, args);
  if (grad_q.defined()) check_gradient_like(op, "grad_q", grad_q, q, args);
  if (grad_k.defined()) check_gradient_like(op, "grad_k", grad_k, k, args);
  if (grad_v.defined()) check_gradient_like(op, "grad_v", grad_v, v, args);
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"q", &q},           {"k", &k},           {"v", &v},
      {"out", &out},       {"lse", &lse},       {"grad_out", &grad_out},
      {"grad_q", &grad_q}, {"grad_k", &grad_k}, {"grad_v", &grad_v}};
  if (ops::check_same_device(op, tensors).is_cpu()) {
    BlockLayout layout;
    const AttentionArgs host = host_args(args, layout);
    if (args.operands == DType::f32) {
      return cpu::attention_backward(host, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v);
    }
    const DType f = args.operands;
    Tensor dq = grad_q.defined() ? Tensor::empty(q.shape()) : Tensor();
    Tensor dk = grad_k.defined() ? Tensor::empty(k.shape()) : Tensor();
    Tensor dv = grad_v.defined() ? Tensor::empty(v.shape()) : Tensor();
    cpu::attention_backward(host, rounded(q, f), rounded(k, f), rounded(v, f), rounded(out, f), lse,
                            rounded(grad_out, f), dq, dk, dv);
    if (grad_q.defined()) round_into(dq, f, grad_q);
    if (grad_k.defined()) round_into(dk, f, grad_k);
    if (grad_v.defined()) round_into(dv, f, grad_v);
    return;
  }
  ops::backend_of(op, tensors).attention_backward(args, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v);
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const char* op = "attention_merge";
  ops::check_rank(op, "out", out, 4);
  check_attention_like(op, "out", out, out);
  check_attention_like(op, "part_out", part_out, out);
  const Shape lse_shape{out.size(0), out.size(1), out.size(2)};
  check_lse(op, "lse", lse, lse_shape);
  check_lse(op, "part_lse", part_lse, lse_shape);
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"out", &out}, {"lse", &lse}, {"part_out", &part_out}, {"part_lse", &part_lse}};
  if (ops::check_same_device(op, tensors).is_cpu()) return cpu::attention_merge(out, lse, part_out, part_lse);
  ops::backend_of(op, tensors).attention_merge(out, lse, part_out, part_lse);
}

}  // namespace myriad
