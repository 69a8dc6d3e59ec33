// The CUDA backend's attention against the CPU op (ops/attention.h) for what goes beyond dense
// self-attention: block-sparse layouts shared by every head and one per (batch, head), global
// offsets with k / v of another row count than q, gradients accumulated into (contiguous and
// heads of packed rows), rows that see no key (out 0, lse -inf, zero and finite gradients), and
// attention_merge of two key chunks (ring attention's combine). Through the ops' dispatch points,
// f32: the dtype the attention op takes (the 16-bit kernels are tested on a device in
// test_flash_attention_sparse.cpp). A layout block_size the kernels cannot tile is refused by name.
//
// Tolerance: 1e-4 relative to (1 + max |cpu|), as the dense attention suite: on a GPU the f32
// kernels sum in another order and use expf where the CPU uses its fast_exp (~1e-6 relative), so
// out, lse and the gradients of these O(1) inputs differ by a few 1e-6; on the emulated CUDA layer
// the same CPU op runs and the results match to rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_backend_fixture.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/block_layout.h"

namespace myriad {
namespace {

using testing::CudaBackendTest;
using testing::expect_error_mentions;

constexpr double kAttentionTolerance = 1e-4;

// One layout per (batch, q head) set: each query block keeps a random subset of the key blocks
// (the blocks up to its own when causal, any otherwise), and every fifth row keeps none at all.
BlockLayout random_layout(std::int64_t sets, std::int64_t blocks, std::int64_t block_size, bool causal,
                          std::uint32_t seed) {
  BlockLayout layout;
  layout.block_size = block_size;
  layout.query_blocks = blocks;
  layout.sets = sets;
  std::mt19937 rng(seed);
  for (std::int64_t s = 0; s < sets; ++s) {
    for (std::int64_t qb = 0; qb < blocks; ++qb) {
      if ((s + qb) % 5 != 3) {
        for (std::int64_t kb = 0; kb < (causal ? qb + 1 : blocks); ++kb) {
          if (kb == qb || rng() % 2 == 0) layout.key_blocks.push_back(static_cast<std::int32_t>(kb));
        }
      }
      layout.row_begin.push_back(layout.kept_blocks());
    }
  }
  return layout;
}

class CudaAttentionTest : public CudaBackendTest {
 protected:
  // lse may hold -inf (rows that see no key): those must match exactly, the rest within tolerance.
  void expect_lse_close(const Tensor& device, const Tensor& reference, const char* what) {
    const Tensor got = backend_->copy_to_host(device);
    ASSERT_EQ(got.shape(), reference.shape()) << what;
    double worst = 0.0, scale = 0.0;
    std::int64_t empty_rows = 0;
    for (std::int64_t i = 0; i < reference.numel(); ++i) {
      const float r = reference.data<float>()[i], g = got.data<float>()[i];
      if (std::isinf(r)) {
        EXPECT_TRUE(std::isinf(g) && g < 0) << what << "[" << i << "] = " << g << ", the cpu's -inf";
        ++empty_rows;
        continue;
      }
      ASSERT_TRUE(std::isfinite(g)) << what << "[" << i << "] = " << g << ", the cpu's " << r;
      worst = std::max(worst, std::abs(static_cast<double>(g) - r));
      scale = std::max(scale, std::abs(static_cast<double>(r)));
    }
    EXPECT_LE(worst, kAttentionTolerance * (1.0 + scale)) << what << ": max |device - cpu| " << worst;
    last_empty_rows_ = empty_rows;
  }

  // Forward and backward of `args` on the CPU and on the device from the same inputs; with
  // args.accumulate the gradients start from the same random values on both sides.
  void compare(const AttentionArgs& args, std::int64_t B, std::int64_t Hq, std::int64_t Hkv, std::int64_t Tq,
               std::int64_t Tk, std::int64_t D, std::uint64_t seed) {
    const Tensor q = random({B, Hq, Tq, D}, seed), k = random({B, Hkv, Tk, D}, seed + 1);
    const Tensor v = random({B, Hkv, Tk, D}, seed + 2), g = random({B, Hq, Tq, D}, seed + 3);
    Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({B, Hq, Tq});
    Tensor d_out = backend_->empty(q.shape()), d_lse = backend_->empty({B, Hq, Tq});
    attention_forward(args, q, k, v, out, lse);
    attention_forward(args, on_device(q), on_device(k), on_device(v), d_out, d_lse);
    expect_close(d_out, out, kAttentionTolerance, "out");
    expect_lse_close(d_lse, lse, "lse");
    const auto start = [&](const Shape& shape, std::uint64_t s) {
      return args.accumulate ? random(shape, s) : Tensor::zeros(shape);
    };
    Tensor dq = start(q.shape(), seed + 4), dk = start(k.shape(), seed + 5), dv = start(v.shape(), seed + 6);
    Tensor d_dq = on_device(dq), d_dk = on_device(dk), d_dv = on_device(dv);
    attention_backward(args, q, k, v, out, lse, g, dq, dk, dv);
    attention_backward(args, on_device(q), on_device(k), on_device(v), d_out, d_lse, on_device(g), d_dq, d_dk, d_dv);
    expect_close(d_dq, dq, kAttentionTolerance, "grad_q");  // also: every element finite (no NaN from empty rows)
    expect_close(d_dk, dk, kAttentionTolerance, "grad_k");
    expect_close(d_dv, dv, kAttentionTolerance, "grad_v");
  }

  std::int64_t last_empty_rows_ = 0;  // -inf entries of the last lse compared
};

TEST_F(CudaAttentionTest, FixedBlockSparseLayoutMatchesTheCpu) {
  const std::int64_t B = 2, Hq = 4, Hkv = 2, D = 64, bs = 32;
  const FixedBlockPattern pattern{.local_blocks = 1, .global_blocks = 1, .stride_blocks = 2};
  for (std::int64_t T : {160, 150}) {  // on the block grid, and a partial last block
    SCOPED_TRACE(::testing::Message() << "T " << T);
    const BlockLayout layout = fixed_block_layout(pattern, T, bs);
    compare(AttentionArgs{.layout = &layout}, B, Hq, Hkv, T, T, D, 100);
  }
  // Blocks of 64 (two query tiles per layout block) and head dim 128.
  const BlockLayout wide = fixed_block_layout(pattern, 256, 64);
  compare(AttentionArgs{.layout = &wide}, 1, 2, 1, 256, 256, 128, 110);
}

TEST_F(CudaAttentionTest, PerHeadLayoutWithRowsThatSeeNoKeyMatchesTheCpu) {
  const std::int64_t B = 2, Hq = 2, Hkv = 1, T = 192, D = 64, bs = 32, blocks = T / bs;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    const BlockLayout layout = random_layout(B * Hq, blocks, bs, causal, 7);
    compare(AttentionArgs{.causal = causal, .layout = &layout}, B, Hq, Hkv, T, T, D, 200);
    EXPECT_GT(last_empty_rows_, 0) << "the layout leaves some query blocks without keys";
  }
}

TEST_F(CudaAttentionTest, OffsetsWithFewerOrMoreKeysThanQueriesMatchTheCpu) {
  const std::int64_t B = 1, Hq = 4, Hkv = 2, D = 64;
  struct Case {
    std::int64_t Tq, Tk, q_offset, k_offset;
    bool causal;
  };
  // A later query chunk over earlier keys; keys that start after the first queries (those rows see
  // no key); non-causal cross lengths.
  for (const Case& c : {Case{48, 80, 64, 0, true}, Case{70, 45, 0, 40, true}, Case{33, 90, 7, 3, false}}) {
    SCOPED_TRACE(::testing::Message() << "Tq " << c.Tq << " Tk " << c.Tk << " offsets " << c.q_offset << " / "
                                      << c.k_offset << " causal " << c.causal);
    compare(AttentionArgs{.causal = c.causal, .q_offset = c.q_offset, .k_offset = c.k_offset}, B, Hq, Hkv, c.Tq, c.Tk,
            D, 300);
    if (c.k_offset > c.q_offset && c.causal) EXPECT_GT(last_empty_rows_, 0);
  }
  // With a layout: a query chunk of two blocks from position 96 over keys [32, 128).
  const BlockLayout layout = fixed_block_layout(FixedBlockPattern{.local_blocks = 2, .global_blocks = 1}, 192, 32);
  compare(AttentionArgs{.q_offset = 96, .k_offset = 32, .layout = &layout}, 2, 2, 2, 64, 96, D, 310);
}

TEST_F(CudaAttentionTest, AccumulateAddsIntoTheGradients) {
  const BlockLayout layout = fixed_block_layout(FixedBlockPattern{.local_blocks = 1, .global_blocks = 1}, 128, 32);
  compare(AttentionArgs{.accumulate = true}, 2, 2, 1, 50, 50, 64, 400);
  compare(AttentionArgs{.q_offset = 64, .layout = &layout, .accumulate = true}, 1, 2, 2, 64, 128, 64, 410);
}

// The model's layout with accumulate: gradients are heads of packed (B, T, W) rows, so the backend
// packs them and must start the packed copy from their current values.
TEST_F(CudaAttentionTest, AccumulateIntoHeadsOfPackedRows) {
  const std::int64_t B = 2, Hq = 2, Hkv = 1, T = 40, D = 64, W = (Hq + 2 * Hkv) * D;
  const AttentionArgs args{.accumulate = true};
  const auto heads = [&](const Tensor& packed, std::int64_t first, std::int64_t count) {
    return Tensor::from_storage(packed.storage(), {B, T, count, D}, {T * W, W, D, 1}, packed.offset() + first,
                                DType::f32)
        .permute({0, 2, 1, 3});
  };
  const Tensor q = random({B, Hq, T, D}, 500), k = random({B, Hkv, T, D}, 501), v = random({B, Hkv, T, D}, 502);
  const Tensor g = random({B, Hq, T, D}, 503);
  Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({B, Hq, T});
  attention_forward(args, q, k, v, out, lse);
  Tensor grad_rows = random({B, T, W}, 504), d_grad_rows = on_device(grad_rows);
  Tensor gq = heads(grad_rows, 0, Hq), gk = heads(grad_rows, Hq * D, Hkv), gv = heads(grad_rows, (Hq + Hkv) * D, Hkv);
  Tensor d_gq = heads(d_grad_rows, 0, Hq), d_gk = heads(d_grad_rows, Hq * D, Hkv);
  Tensor d_gv = heads(d_grad_rows, (Hq + Hkv) * D, Hkv);
  attention_backward(args, q, k, v, out, lse, g, gq, gk, gv);
  attention_backward(args, on_device(q), on_device(k), on_device(v), on_device(out), on_device(lse), on_device(g), d_gq,
                     d_gk, d_gv);
  expect_close(d_grad_rows, grad_rows, kAttentionTolerance, "qkv gradient rows (+=)");
}

// Ring attention's combine: a query chunk against two key chunks, each forward with its own
// offsets, merged on the device, equals the one forward over all keys; the first query rows see no
// key of the second chunk (its lse -inf there), so both merge branches for -inf are taken.
TEST_F(CudaAttentionTest, MergeOfTwoKeyChunksMatchesTheWholeAttention) {
  const std::int64_t B = 1, Hq = 2, Hkv = 1, Tq = 64, D = 64, split = 40, Tk = 96, q_offset = 32;
  const Tensor q = random({B, Hq, Tq, D}, 600), k = random({B, Hkv, Tk, D}, 601), v = random({B, Hkv, Tk, D}, 602);
  const AttentionArgs whole{.q_offset = q_offset};
  Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({B, Hq, Tq});
  attention_forward(whole, q, k, v, out, lse);
  // Chunk 1: keys [0, split); chunk 2: keys [split, Tk) at k_offset split (queries before it see none).
  const Tensor k1 = k.slice(2, 0, split).contiguous(), v1 = v.slice(2, 0, split).contiguous();
  const Tensor k2 = k.slice(2, split, Tk).contiguous(), v2 = v.slice(2, split, Tk).contiguous();
  Tensor d_out = backend_->empty(q.shape()), d_lse = backend_->empty({B, Hq, Tq});
  Tensor d_part = backend_->empty(q.shape()), d_part_lse = backend_->empty({B, Hq, Tq});
  const Tensor d_q = on_device(q);
  attention_forward(AttentionArgs{.q_offset = q_offset, .k_offset = split}, d_q, on_device(k2), on_device(v2), d_out,
                    d_lse);  // the accumulated side starts with -inf rows
  attention_forward(AttentionArgs{.q_offset = q_offset}, d_q, on_device(k1), on_device(v1), d_part, d_part_lse);
  attention_merge(d_out, d_lse, d_part, d_part_lse);
  expect_close(d_out, out, kAttentionTolerance, "merged out");
  expect_lse_close(d_lse, lse, "merged lse");
  // The other order (the part holds the -inf rows), against the CPU's own merge.
  Tensor c_out = Tensor::empty(q.shape()), c_lse = Tensor::empty({B, Hq, Tq});
  Tensor c_part = Tensor::empty(q.shape()), c_part_lse = Tensor::empty({B, Hq, Tq});
  attention_forward(AttentionArgs{.q_offset = q_offset}, q, k1, v1, c_out, c_lse);
  attention_forward(AttentionArgs{.q_offset = q_offset, .k_offset = split}, q, k2, v2, c_part, c_part_lse);
  Tensor d_c_out = on_device(c_out), d_c_lse = on_device(c_lse);
  attention_merge(c_out, c_lse, c_part, c_part_lse);
  attention_merge(d_c_out, d_c_lse, on_device(c_part), on_device(c_part_lse));
  expect_close(d_c_out, c_out, kAttentionTolerance, "merged out, -inf in the part");
  expect_lse_close(d_c_lse, c_lse, "merged lse, -inf in the part");
  expect_close(d_c_out, out, kAttentionTolerance, "merged out against the whole attention");
}

TEST_F(CudaAttentionTest, ALayoutBlockTheKernelsCannotTileIsRefused) {
  const BlockLayout layout = fixed_block_layout(FixedBlockPattern{.local_blocks = 1}, 64, 16);
  const Tensor q = on_device(random({1, 1, 64, 64}, 700));
  Tensor out = backend_->empty({1, 1, 64, 64}), lse = backend_->empty({1, 1, 64});
  expect_error_mentions([&] { attention_forward(AttentionArgs{.layout = &layout}, q, q, q, out, lse); },
                        {"attention_forward", "multiple of 32", "got 16"});
}

}  // namespace
}  // namespace myriad
