// The CUDA backend against the CPU for block selection (ops/block_selection.h): the block means of
// strided (B, H, T, D) views (bit-identical: float64 sums in row order), the fixed-capacity layout
// (kept blocks, counts, row offsets equal; mass and totals within float64 rounding of exp),
// for GQA, a short last block, fixed patterns, a cap, a threshold and the cp rows; and the flash
// attention reading a selected layout in place against the CPU attention on its compressed copy.
// Runs on a GPU (myriad_gpu_tests) and on the emulated CUDA layer (myriad_emulated_device_tests).
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_backend_fixture.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/block_selection.h"

namespace myriad {
namespace {

using testing::CudaBackendTest;

struct Case {
  std::int64_t B, Hq, Hkv, T, D, block_size;
  FixedBlockPattern fixed;
  double sparse_ratio, threshold;
  std::int64_t max_blocks, chunk_blocks, chunk0, chunk1;
};

TEST_F(CudaBackendTest, BlockSelectionMatchesTheCpu) {
  for (const Case& c : {Case{2, 4, 2, 256, 64, 32, {.local_blocks = 1, .global_blocks = 1}, 0.6, 0.0, 3, 0, 0, 0},
                        Case{1, 2, 2, 250, 64, 32, {}, 0.9, 0.05, 0, 0, 0, 0},
                        Case{1, 2, 1, 512, 64, 32, {.local_blocks = 0, .stride_blocks = 3}, 0.5, 0.0, 2, 4, 0, 3},
                        Case{2, 2, 2, 96, 128, 32, {}, 1.0, 0.0, 8, 0, 0, 0}}) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " Hq " << c.Hq << " Hkv " << c.Hkv << " T " << c.T << " bs "
                                      << c.block_size << " cap " << c.max_blocks << " chunks " << c.chunk_blocks);
    const std::int64_t nb = blocks_covering(c.T, c.block_size), W = (c.Hq + 2 * c.Hkv) * c.D;
    // q and k as the model has them: heads of packed (B, T, W) rows, permuted to (B, H, T, D).
    const Tensor packed = random({c.B, c.T, W}, 40 + c.T);
    const auto heads = [&](const Tensor& rows, std::int64_t first, std::int64_t H) {
      return Tensor::from_storage(rows.storage(), {c.B, H, c.T, c.D}, {c.T * W, c.D, W, 1}, rows.offset() + first,
                                  DType::f32);
    };
    const Tensor d_packed = on_device(packed);
    Tensor qbar = Tensor::empty({c.B, c.Hq, nb, c.D}), kbar = Tensor::empty({c.B, c.Hkv, nb, c.D});
    Tensor d_qbar = backend_->empty(qbar.shape()), d_kbar = backend_->empty(kbar.shape());
    block_means(heads(packed, 0, c.Hq), c.block_size, qbar);
    block_means(heads(packed, c.Hq * c.D, c.Hkv), c.block_size, kbar);
    block_means(heads(d_packed, 0, c.Hq), c.block_size, d_qbar);
    block_means(heads(d_packed, c.Hq * c.D, c.Hkv), c.block_size, d_kbar);
    const auto same_bytes = [&](const Tensor& d, const Tensor& h, const char* what) {
      const Tensor got = backend_->copy_to_host(d);
      EXPECT_EQ(std::memcmp(got.raw_data(), h.raw_data(), h.nbytes()), 0) << what;
    };
    same_bytes(d_qbar, qbar, "qbar");
    same_bytes(d_kbar, kbar, "kbar");
    for (std::int64_t i = 0; i < qbar.numel(); ++i) qbar.data<float>()[i] *= 8.0f;  // peakier weights
    d_qbar = on_device(qbar);
    const BlockSelectArgs args{.fixed = c.fixed,
                               .block_size = c.block_size,
                               .sparse_ratio = c.sparse_ratio,
                               .threshold = c.threshold,
                               .max_blocks = c.max_blocks,
                               .scale = 0.125f,
                               .seq_len = c.T,
                               .chunk_blocks = c.chunk_blocks,
                               .chunk0 = c.chunk0,
                               .chunk1 = c.chunk1};
    SelectedBlocks host = empty_selected_blocks(args, c.B * c.Hq, nb, qbar);
    SelectedBlocks device = empty_selected_blocks(args, c.B * c.Hq, nb, d_qbar);
    Tensor totals = Tensor::empty({5}, DType::f64);
    for (int i = 0; i < 5; ++i) totals.data<double>()[i] = 0.5 * (i + 1);
    Tensor d_totals = on_device(totals);
    select_blocks(args, qbar, kbar, host, totals);
    select_blocks(args, d_qbar, d_kbar, device, d_totals);
    same_bytes(device.key_blocks, host.key_blocks, "key_blocks");
    same_bytes(device.counts, host.counts, "counts");
    same_bytes(device.row_begin, host.row_begin, "row_begin");
    const Tensor mass = backend_->copy_to_host(device.mass), got_totals = backend_->copy_to_host(d_totals);
    for (std::int64_t r = 0; r < mass.numel(); ++r) {
      ASSERT_NEAR(mass.data<double>()[r], host.mass.data<double>()[r], 1e-5) << "mass[" << r << "]";
    }
    for (int i = 0; i < 5; ++i) {
      EXPECT_NEAR(got_totals.data<double>()[i], totals.data<double>()[i], 1e-5 * (1.0 + totals.data<double>()[i]))
          << "totals[" << i << "]";
    }
    // Flash attention on the selected layout in place against the CPU on its compressed copy
    // (every row wanted: the cp cases leave rows empty, which attention reads as no keys).
    if (c.chunk_blocks > 0) continue;
    const Tensor q = heads(packed, 0, c.Hq), k = heads(packed, c.Hq * c.D, c.Hkv);
    const Tensor v = heads(packed, (c.Hq + c.Hkv) * c.D, c.Hkv);
    if (c.T % c.block_size != 0) continue;  // the kernels' rows must fill the layout's blocks
    const BlockLayout layout = compact_layout(host);
    Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({c.B, c.Hq, c.T});
    attention_forward(AttentionArgs{.layout = &layout}, q, k, v, out, lse);
    Tensor d_out = backend_->empty(q.shape()), d_lse = backend_->empty({c.B, c.Hq, c.T});
    attention_forward(AttentionArgs{.selected = &device}, heads(d_packed, 0, c.Hq), heads(d_packed, c.Hq * c.D, c.Hkv),
                      heads(d_packed, (c.Hq + c.Hkv) * c.D, c.Hkv), d_out, d_lse);
    expect_close(d_out, out, 1e-5, "attention out");
  }
}

// Equal weights go to the lower block: identical key blocks of equal length, one pick allowed.
TEST_F(CudaBackendTest, BlockSelectionBreaksTiesToTheLowerBlock) {
  const std::int64_t nb = 8, D = 64;
  Tensor qbar = random({1, 1, nb, D}, 50), kbar = Tensor::empty({1, 1, nb, D});
  const Tensor row = random({D}, 51);
  for (std::int64_t b = 0; b < nb; ++b) std::memcpy(kbar.data<float>() + b * D, row.data<float>(), D * sizeof(float));
  const BlockSelectArgs args{.fixed = {.local_blocks = 0},
                             .block_size = 32,
                             .sparse_ratio = 1.0,
                             .max_blocks = 1,
                             .scale = 1.0f,
                             .seq_len = nb * 32};
  SelectedBlocks host = empty_selected_blocks(args, 1, nb, qbar);
  SelectedBlocks device = empty_selected_blocks(args, 1, nb, on_device(qbar));
  Tensor none;
  select_blocks(args, qbar, kbar, host, none);
  select_blocks(args, on_device(qbar), on_device(kbar), device, none);
  const BlockLayout want = compact_layout(host), got = compact_layout(device);
  for (std::int64_t qb = 1; qb < nb; ++qb) {
    ASSERT_EQ(want.row(0, qb).size(), 2u);
    EXPECT_EQ(want.row(0, qb)[0], 0) << "query block " << qb << " keeps block 0 of its equal candidates";
    EXPECT_EQ(std::vector<std::int32_t>(got.row(0, qb).begin(), got.row(0, qb).end()),
              std::vector<std::int32_t>(want.row(0, qb).begin(), want.row(0, qb).end()));
  }
}

}  // namespace
}  // namespace myriad
