// Block selection, dispatch point: validates shapes, dtypes and devices, then picks the backend
// (ops/block_selection.h); also the layout's capacity and its compressed host view.
#include "myriad/ops/block_selection.h"

#include <algorithm>

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"
#include "myriad/ops/placement.h"

namespace myriad {

namespace {

void check_contiguous_of(const char* op, const char* name, const Tensor& t, DType dtype, const Shape& shape) {
  ops::check_defined(op, name, t);
  ops::check_dtype(op, name, t, dtype);
  ops::check_shape(op, name, t, shape);
  ops::check_contiguous(op, name, t);
}

}  // namespace

std::int64_t selection_capacity(const BlockSelectArgs& args, std::int64_t query_blocks) {
  if (query_blocks <= 0) return 1;
  if (args.max_blocks <= 0) return query_blocks;  // no cap: every causal block
  const FixedBlockPattern& f = args.fixed;
  const std::int64_t strided = f.stride_blocks > 0 ? (query_blocks - 1) / f.stride_blocks : 0;
  const std::int64_t fixed =
      1 + std::max<std::int64_t>(f.local_blocks, 0) + std::max<std::int64_t>(f.global_blocks, 0) + strided;
  return std::max<std::int64_t>(1, std::min(query_blocks, fixed + args.max_blocks));
}

SelectedBlocks empty_selected_blocks(const BlockSelectArgs& args, std::int64_t sets, std::int64_t query_blocks,
                                     const Tensor& like) {
  const ops::Placement p = ops::placement_of(like, "empty_selected_blocks");
  SelectedBlocks s;
  s.block_size = args.block_size;
  s.query_blocks = query_blocks;
  s.sets = sets;
  s.capacity = selection_capacity(args, query_blocks);
  const std::int64_t rows = sets * query_blocks;
  s.key_blocks = p.empty({rows, s.capacity}, DType::i32);
  s.row_begin = p.empty({rows + 1}, DType::i64);
  s.counts = p.empty({rows}, DType::i32);
  s.mass = p.empty({rows}, DType::f64);
  return s;
}

BlockLayout compact_layout(const SelectedBlocks& selected) {
  const ops::Placement p = ops::placement_of(selected.key_blocks, "compact_layout");
  const Tensor keys = p.to_host(selected.key_blocks), counts = p.to_host(selected.counts);
  BlockLayout layout;
  layout.block_size = selected.block_size;
  layout.query_blocks = selected.query_blocks;
  layout.sets = selected.sets;
  const std::int64_t rows = selected.sets * selected.query_blocks;
  layout.row_begin.reserve(static_cast<std::size_t>(rows + 1));
  const std::int32_t* k = keys.data<std::int32_t>();
  const std::int32_t* c = counts.data<std::int32_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    layout.key_blocks.insert(layout.key_blocks.end(), k + r * selected.capacity, k + r * selected.capacity + c[r]);
    layout.row_begin.push_back(layout.kept_blocks());
  }
  return layout;
}

void block_means(const Tensor& x, std::int64_t block_size, Tensor& out) {
  const char* op = "block_means";
  ops::check_defined(op, "x", x);
  ops::check_dtype(op, "x", x, DType::f32);
  ops::check_rank(op, "x", x, 4);
  MYRIAD_CHECK(block_size >= 1, op << ": block_size " << block_size << " must be positive");
  MYRIAD_CHECK(x.size(3) <= 1 || x.stride(3) == 1, op << ": 'x' " << x.describe()
                                                      << " must have unit stride in D, has strides "
                                                      << shape_string(x.strides()));
  const std::int64_t nb = blocks_covering(x.size(2), block_size);
  ops::check_f32_contiguous(op, "out", out, {x.size(0), x.size(1), nb, x.size(3)});
  const Device device = ops::check_same_device(op, {{"x", &x}, {"out", &out}});
  if (device.is_cpu()) return cpu::block_means(x, block_size, out);
  ops::backend_of(op, {{"x", &x}, {"out", &out}}).block_means(x, block_size, out);
}

void select_blocks(const BlockSelectArgs& args, const Tensor& qbar, const Tensor& kbar, SelectedBlocks& out,
                   Tensor& totals) {
  const char* op = "select_blocks";
  ops::check_defined(op, "qbar", qbar);
  ops::check_defined(op, "kbar", kbar);
  ops::check_rank(op, "qbar", qbar, 4);
  ops::check_rank(op, "kbar", kbar, 4);
  const std::int64_t B = qbar.size(0), Hq = qbar.size(1), nb = qbar.size(2), D = qbar.size(3), Hkv = kbar.size(1);
  ops::check_f32_contiguous(op, "qbar", qbar, qbar.shape());
  ops::check_f32_contiguous(op, "kbar", kbar, {B, Hkv, nb, D});
  MYRIAD_CHECK(Hkv >= 1 && Hq % Hkv == 0, op << ": query heads " << Hq << " are not a multiple of the key heads " << Hkv
                                             << " (kbar " << kbar.describe() << ")");
  MYRIAD_CHECK(
      args.block_size >= 1 && args.seq_len > (nb - 1) * args.block_size && args.seq_len <= nb * args.block_size,
      op << ": seq_len " << args.seq_len << " is not covered by exactly " << nb << " blocks of " << args.block_size);
  MYRIAD_CHECK(args.chunk_blocks >= 0, op << ": chunk_blocks " << args.chunk_blocks << " must be >= 0");
  MYRIAD_CHECK(out.block_size == args.block_size && out.query_blocks == nb && out.sets == B * Hq &&
                   out.capacity == selection_capacity(args, nb),
               op << ": the output layout (block_size " << out.block_size << ", " << out.query_blocks
                  << " query blocks, " << out.sets << " sets, capacity " << out.capacity
                  << ") does not match the args and qbar " << qbar.describe()
                  << " (make it with empty_selected_blocks)");
  const std::int64_t rows = B * Hq * nb;
  check_contiguous_of(op, "key_blocks", out.key_blocks, DType::i32, {rows, out.capacity});
  check_contiguous_of(op, "row_begin", out.row_begin, DType::i64, {rows + 1});
  check_contiguous_of(op, "counts", out.counts, DType::i32, {rows});
  check_contiguous_of(op, "mass", out.mass, DType::f64, {rows});
  if (totals.defined()) check_contiguous_of(op, "totals", totals, DType::f64, {5});
  const Device device = ops::check_same_device(op, {{"qbar", &qbar},
                                                    {"kbar", &kbar},
                                                    {"key_blocks", &out.key_blocks},
                                                    {"row_begin", &out.row_begin},
                                                    {"counts", &out.counts},
                                                    {"mass", &out.mass},
                                                    {"totals", &totals}});
  if (device.is_cpu()) return cpu::select_blocks(args, qbar, kbar, out, totals);
  ops::backend_of(op, {{"qbar", &qbar}, {"key_blocks", &out.key_blocks}}).select_blocks(args, qbar, kbar, out, totals);
}

}  // namespace myriad
