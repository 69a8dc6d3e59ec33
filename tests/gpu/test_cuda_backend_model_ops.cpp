// The CUDA backend against the CPU backend for the rest of what the model calls: attention (flash
// kernels; contiguous heads and the heads of packed qkv rows, causal or not, grouped-query),
// RoPE on rows of heads, embedding (f32 and INT8 rows), INT8 experts, cross-entropy with ignored
// rows, bias, AdamW and the gradient norm — through the ops' dispatch points, written and
// accumulated outputs alike; bad ids and targets reported as the CPU op reports them; ops no
// backend provides still refused by name.
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include <climits>

#include "cuda_backend_fixture.h"
#if MYRIAD_EMULATED_CUDA
#include "emulated_streams.h"
#endif
#include "myriad/nn/linear.h"
#include "myriad/ops/adamw.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/ops/rope.h"
#include "myriad/ops/softmax.h"
#include "myriad/ops/vocab_shard_loss.h"

namespace myriad {
namespace {

using testing::CudaBackendTest;
using testing::expect_error_mentions;

constexpr double kModelOpsTolerance = 1e-4;

// (B, T, heads, D) view of columns [first, first + heads * D) of packed (B, T, W) rows.
Tensor rows_of_heads(const Tensor& packed, std::int64_t first, std::int64_t heads, std::int64_t D) {
  const std::int64_t B = packed.size(0), T = packed.size(1), W = packed.size(2);
  return Tensor::from_storage(packed.storage(), {B, T, heads, D}, {T * W, W, D, 1}, packed.offset() + first,
                              DType::f32);
}
Tensor bhtd(const Tensor& bthd) { return bthd.permute({0, 2, 1, 3}); }

TEST_F(CudaBackendTest, Int8LinearMatchesTheCpuPerChannelAndPerGroup) {
  // Tiles of 32 rows / channels / k with ragged edges everywhere, and one decode row.
  for (const auto& [rows, n, k] : {std::array<std::int64_t, 3>{70, 100, 96}, {1, 64, 70}, {33, 31, 130}}) {
    for (std::int64_t group : {0, 32, 48}) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << rows << "x" << n << "x" << k << " group " << group << " bias " << with_bias);
        const Int8Args args{.group_size = group};
        const Tensor w = random({n, k}, 1), x = random({rows, k}, 2), b = random({n}, 3);
        Tensor q = Tensor::empty({n, k}, DType::i8), scales = Tensor::empty({n, int8_groups(k, group)});
        quantize_int8(args, w, q, scales);
        Tensor y = Tensor::empty({rows, n}), d_y = backend_->empty({rows, n});
        int8_linear_forward(args, x, q, scales, with_bias ? b : Tensor(), y);
        int8_linear_forward(args, on_device(x), on_device(q), on_device(scales), with_bias ? on_device(b) : Tensor(),
                            d_y);
        expect_close(d_y, y, kModelOpsTolerance, "y");
      }
    }
  }
}

TEST_F(CudaBackendTest, Int8EmbeddingAndInt8ExpertsMatchTheCpu) {
  // The INT8 token embedding's rows (per channel and per group), and an MoE layer's INT8 experts
  // (nn::grouped_linear_forward: one int8 linear per non-empty expert, on views of the weight).
  const std::int64_t V = 50, C = 70, N = 29;
  Tensor ids = Tensor::empty({N}, DType::i32);
  for (std::int64_t i = 0; i < N; ++i) ids.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 17 + 3) % V);
  for (std::int64_t group : {0, 32}) {
    SCOPED_TRACE(::testing::Message() << "group " << group);
    const Int8Args args{.group_size = group};
    const Tensor table = random({V, C}, 1);
    Tensor q = Tensor::empty({V, C}, DType::i8), scales = Tensor::empty({V, int8_groups(C, group)});
    quantize_int8(args, table, q, scales);
    Tensor out = Tensor::empty({N, C}), d_out = backend_->empty({N, C});
    int8_embedding_forward(args, ids, q, scales, out);
    int8_embedding_forward(args, on_device(ids), on_device(q), on_device(scales), d_out);
    expect_close(d_out, out, 0.0, "embedding rows");

    const std::int64_t G = 3, M = 33, K = 40;
    const std::vector<std::int64_t> offsets{0, 9, 9, 21};
    nn::Parameter host, device;
    host.name = device.name = "experts";
    host.int8_values = Tensor::empty({G, M, K}, DType::i8);
    host.int8_scales = Tensor::empty({G, M, int8_groups(K, group)});
    host.int8_group = device.int8_group = group;
    Tensor q2 = host.int8_values.view({G * M, K}), s2 = host.int8_scales.view({G * M, int8_groups(K, group)});
    quantize_int8(args, random({G * M, K}, 2), q2, s2);
    device.int8_values = on_device(host.int8_values);
    device.int8_scales = on_device(host.int8_scales);
    const Tensor x = random({offsets.back(), K}, 3);
    Tensor y = Tensor::empty({offsets.back(), M}), d_y = backend_->empty({offsets.back(), M});
    nn::grouped_linear_forward(x, host, offsets, y);
    nn::grouped_linear_forward(on_device(x), device, offsets, d_y);
    expect_close(d_y, y, kModelOpsTolerance, "expert rows");
  }
}

TEST_F(CudaBackendTest, AttentionOnContiguousHeadsCausalOrNotWithGroupedQueries) {
  const std::int64_t B = 2, Hq = 4, Hkv = 2, T = 37, D = 64;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    const AttentionArgs args{.causal = causal};
    const Tensor q = random({B, Hq, T, D}, 1), k = random({B, Hkv, T, D}, 2), v = random({B, Hkv, T, D}, 3);
    const Tensor g = random({B, Hq, T, D}, 4);
    Tensor out = Tensor::empty({B, Hq, T, D}), lse = Tensor::empty({B, Hq, T});
    Tensor d_out = backend_->empty({B, Hq, T, D}), d_lse = backend_->empty({B, Hq, T});
    attention_forward(args, q, k, v, out, lse);
    attention_forward(args, on_device(q), on_device(k), on_device(v), d_out, d_lse);
    expect_close(d_out, out, kModelOpsTolerance, "out");
    expect_close(d_lse, lse, kModelOpsTolerance, "lse");
    Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()), dv = Tensor::empty(v.shape());
    attention_backward(args, q, k, v, out, lse, g, dq, dk, dv);
    Tensor d_dq = backend_->empty(q.shape()), d_dk = backend_->empty(k.shape()), d_dv = backend_->empty(v.shape());
    attention_backward(args, on_device(q), on_device(k), on_device(v), d_out, d_lse, on_device(g), d_dq, d_dk, d_dv);
    expect_close(d_dq, dq, kModelOpsTolerance, "grad_q");
    expect_close(d_dk, dk, kModelOpsTolerance, "grad_k");
    expect_close(d_dv, dv, kModelOpsTolerance, "grad_v");
    // A skipped gradient leaves the others as they were.
    Tensor skipped, d_dk2 = backend_->empty(k.shape());
    attention_backward(args, on_device(q), on_device(k), on_device(v), d_out, d_lse, on_device(g), skipped, d_dk2,
                       skipped);
    expect_close(d_dk2, dk, kModelOpsTolerance, "grad_k alone");
  }
}

// The model's layout: q, k, v are heads of the fused qkv rows, the output heads of the (B, T, Hq*D)
// attention rows, the gradients heads of the (B, T, W) qkv gradient rows.
// With f32 products (the CUDA-core kernels) and 16-bit ones (AttentionArgs::operands: the
// tensor-core kernels on 16-bit copies; on a GPU they also round P and dS, hence 2e-2).
TEST_F(CudaBackendTest, AttentionOnTheHeadsOfPackedQkvRows) {
  for (const DType operands : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(operands));
    const AttentionArgs args{.operands = operands};
    const double tolerance = operands == DType::f32 ? kModelOpsTolerance : 2e-2;
    const std::int64_t B = 2, Hq = 2, Hkv = 1, T = 19, D = 64, W = (Hq + 2 * Hkv) * D;
    const Tensor qkv = random({B, T, W}, 10), g_rows = random({B, T, Hq * D}, 11);
    const Tensor d_qkv_in = on_device(qkv), d_g_rows = on_device(g_rows);
    const auto views = [&](const Tensor& packed) {
      return std::array<Tensor, 3>{bhtd(rows_of_heads(packed, 0, Hq, D)), bhtd(rows_of_heads(packed, Hq * D, Hkv, D)),
                                   bhtd(rows_of_heads(packed, (Hq + Hkv) * D, Hkv, D))};
    };
    const auto heads = [&](const Tensor& rows) { return bhtd(rows.view({B, T, Hq, D})); };
    Tensor att = Tensor::empty({B, T, Hq * D}), lse = Tensor::empty({B, Hq, T});
    Tensor d_att = backend_->empty({B, T, Hq * D}), d_lse = backend_->empty({B, Hq, T});
    auto [q, k, v] = views(qkv);
    auto [dq_in, dk_in, dv_in] = views(d_qkv_in);
    Tensor att_heads = heads(att), d_att_heads = heads(d_att);
    attention_forward(args, q, k, v, att_heads, lse);
    attention_forward(args, dq_in, dk_in, dv_in, d_att_heads, d_lse);
    expect_close(d_att, att, tolerance, "attention rows");
    Tensor grad_qkv = Tensor::zeros({B, T, W}), d_grad_qkv = backend_->empty({B, T, W});
    backend_->zero(d_grad_qkv);
    auto [gq, gk, gv] = views(grad_qkv);
    auto [d_gq, d_gk, d_gv] = views(d_grad_qkv);
    attention_backward(args, q, k, v, att_heads, lse, heads(g_rows), gq, gk, gv);
    attention_backward(args, dq_in, dk_in, dv_in, d_att_heads, d_lse, heads(d_g_rows), d_gq, d_gk, d_gv);
    expect_close(d_grad_qkv, grad_qkv, tolerance, "qkv gradient rows");
  }
}

// 16-bit attention products: cuDNN's fused attention for dense self-attention where this build
// and GPU have it; the tensor-core kernels elsewhere (offsets) and with MYRIAD_CUDNN_ATTENTION=off.
// Every path matches the CPU op with the same operands (on a GPU to bf16 / f16 precision: the
// kernels also round P and dS). The emulated layer counts the cuDNN launches.
TEST_F(CudaBackendTest, SixteenBitAttentionRunsCudnnWhereItAppliesElseTheTensorCoreKernels) {
  const std::int64_t B = 2, Hq = 4, Hkv = 2, T = 24, D = 64;
  const Tensor q = random({B, Hq, T, D}, 80), k = random({B, Hkv, T, D}, 81), v = random({B, Hkv, T, D}, 82);
  const Tensor g = random({B, Hq, T, D}, 83);
  const auto close = [](cuda::CudaBackend& backend, const Tensor& device, const Tensor& want, const char* what) {
    const Tensor got = backend.copy_to_host(device);
    double worst = 0.0;
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      worst = std::max(worst, std::abs(double{got.data<float>()[i]} - double{want.data<float>()[i]}));
    }
    EXPECT_LE(worst, 2e-2) << what;
  };
  const auto run = [&](cuda::CudaBackend& backend, const AttentionArgs& args) {
    Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({B, Hq, T});
    Tensor gq = Tensor::empty(q.shape()), gk = Tensor::empty(k.shape()), gv = Tensor::empty(v.shape());
    attention_forward(args, q, k, v, out, lse);
    attention_backward(args, q, k, v, out, lse, g, gq, gk, gv);
    const Tensor dq_in = backend.copy_from_host(q), dk_in = backend.copy_from_host(k),
                 dv_in = backend.copy_from_host(v);
    Tensor d_out = backend.empty(q.shape()), d_lse = backend.empty({B, Hq, T});
    Tensor d_gq = backend.empty(q.shape()), d_gk = backend.empty(k.shape()), d_gv = backend.empty(v.shape());
    attention_forward(args, dq_in, dk_in, dv_in, d_out, d_lse);
    attention_backward(args, dq_in, dk_in, dv_in, d_out, d_lse, backend.copy_from_host(g), d_gq, d_gk, d_gv);
    close(backend, d_out, out, "out");
    close(backend, d_lse, lse, "lse");
    close(backend, d_gq, gq, "grad_q");
    close(backend, d_gk, gk, "grad_k");
    close(backend, d_gv, gv, "grad_v");
  };
#if MYRIAD_EMULATED_CUDA
  const auto cudnn_calls = [] { return emulated::cudnn_attention_calls(); };
#else
  const auto cudnn_calls = [] { return std::uint64_t{0}; };
#endif
  const std::uint64_t before = cudnn_calls();
  run(*backend_, AttentionArgs{.operands = DType::bf16});
  if (backend_->cudnn_attention() == nullptr) {
    std::cout << "cuDNN attention not used here: " << backend_->cudnn_attention_unavailable() << std::endl;
  }
#if MYRIAD_EMULATED_CUDA
  EXPECT_NE(backend_->cudnn_attention(), nullptr);
  EXPECT_EQ(cudnn_calls(), before + 2) << "the dense problem's forward and backward";
#endif
  run(*backend_, AttentionArgs{.q_offset = 32, .k_offset = 32, .operands = DType::f16});
  EXPECT_EQ(cudnn_calls(), before + 2) << "offsets: the tensor-core kernels";
  setenv("MYRIAD_CUDNN_ATTENTION", "off", 1);
  cuda::CudaBackend without(*context_);
  run(without, AttentionArgs{.operands = DType::bf16});
  unsetenv("MYRIAD_CUDNN_ATTENTION");
  EXPECT_EQ(without.cudnn_attention(), nullptr);
  EXPECT_EQ(without.cudnn_attention_unavailable(), "MYRIAD_CUDNN_ATTENTION=off");
  EXPECT_EQ(cudnn_calls(), before + 2);
}

TEST_F(CudaBackendTest, RopeOnRowsOfHeadsAndInPlace) {
  const std::int64_t B = 2, T = 11, H = 3, D = 16, W = 5 * D;
  const RopeArgs args{.theta = 10000.0, .position_offset = 5};
  const Tensor packed = random({B, T, W}, 20);
  const Tensor x = rows_of_heads(packed, D, H, D), d_x = rows_of_heads(on_device(packed), D, H, D);
  Tensor out = Tensor::empty({B, T, H, D}), d_out = backend_->empty({B, T, H, D});
  rope_forward(args, x, out);
  rope_forward(args, d_x, d_out);
  expect_close(d_out, out, kModelOpsTolerance, "rope of rows of heads");
  rope_backward(args, out, out);  // in place: rotating back gives x
  rope_backward(args, d_out, d_out);
  expect_close(d_out, out, kModelOpsTolerance, "rope backward in place");
  // Into rows of heads (the output a view too).
  Tensor rows = Tensor::zeros({B, T, W}), d_rows = backend_->empty({B, T, W});
  backend_->zero(d_rows);
  Tensor into = rows_of_heads(rows, 2 * D, H, D), d_into = rows_of_heads(d_rows, 2 * D, H, D);
  rope_forward(args, x, into);
  rope_forward(args, d_x, d_into);
  expect_close(d_rows, rows, kModelOpsTolerance, "rope into rows of heads");
}

TEST_F(CudaBackendTest, EmbeddingLooksUpAndAccumulatesAndNamesABadId) {
  const std::int64_t V = 50, C = 24;
  Tensor ids = Tensor::empty({3, 7}, DType::i32);
  for (std::int64_t i = 0; i < ids.numel(); ++i) ids.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 17) % V);
  ids.data<std::int32_t>()[4] = ids.data<std::int32_t>()[9];  // a repeated id sums its rows
  const Tensor table = random({V, C}, 30), g = random({3, 7, C}, 31);
  Tensor out = Tensor::empty({3, 7, C}), d_out = backend_->empty({3, 7, C});
  embedding_forward(EmbeddingArgs{}, ids, table, out);
  embedding_forward(EmbeddingArgs{}, on_device(ids), on_device(table), d_out);
  expect_close(d_out, out, 0.0, "lookup");
  Tensor grad = random({V, C}, 32), d_grad = on_device(grad);
  embedding_backward(EmbeddingArgs{}, ids, g, grad);
  embedding_backward(EmbeddingArgs{}, on_device(ids), on_device(g), d_grad);
  expect_close(d_grad, grad, 1e-6, "table gradient (+=)");
  ids.data<std::int32_t>()[12] = static_cast<std::int32_t>(V);
  expect_error_mentions([&] { embedding_forward(EmbeddingArgs{}, on_device(ids), on_device(table), d_out); },
                        {"embedding_forward", "flat index 12", "outside [0, V) with V = 50"});
}

TEST_F(CudaBackendTest, CrossEntropyWithIgnoredRowsAndABadTarget) {
  const std::int64_t N = 9, V = 130;
  const CrossEntropyArgs args{.ignore_index = -1};
  Tensor logits = random({N, V}, 40);
  for (std::int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] *= 8.0f;
  Tensor targets = Tensor::empty({N}, DType::i32);
  for (std::int64_t i = 0; i < N; ++i) targets.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37) % V);
  targets.data<std::int32_t>()[3] = -1;
  const Tensor grad_losses = random({N}, 41);
  Tensor losses = Tensor::empty({N}), lse = Tensor::empty({N});
  Tensor d_losses = backend_->empty({N}), d_lse = backend_->empty({N});
  cross_entropy_forward(args, logits, targets, losses, lse);
  cross_entropy_forward(args, on_device(logits), on_device(targets), d_losses, d_lse);
  expect_close(d_losses, losses, kModelOpsTolerance, "losses");
  expect_close(d_lse, lse, kModelOpsTolerance, "lse");
  Tensor grad = Tensor::empty({N, V}), d_grad = backend_->empty({N, V});
  cross_entropy_backward(args, logits, targets, lse, grad_losses, grad);
  cross_entropy_backward(args, on_device(logits), on_device(targets), d_lse, on_device(grad_losses), d_grad);
  expect_close(d_grad, grad, kModelOpsTolerance, "grad_logits");
  targets.data<std::int32_t>()[6] = static_cast<std::int32_t>(V + 3);
  expect_error_mentions([&] { cross_entropy_forward(args, on_device(logits), on_device(targets), d_losses, d_lse); },
                        {"cross_entropy_forward", "row 6 of 9", "outside [0, V) with V = 130"});
}

TEST_F(CudaBackendTest, VocabShardEmbeddingAndCrossEntropyBackwardMatchTheCpu) {
  const std::int64_t N = 10, V = 70, C = 16;
  Tensor ids = Tensor::empty({N}, DType::i32), targets = Tensor::empty({N}, DType::i32);
  for (std::int64_t i = 0; i < N; ++i) {
    ids.data<std::int32_t>()[i] = i % 3 == 0 ? -1 : static_cast<std::int32_t>((i * 29) % V);  // -1: another shard
    targets.data<std::int32_t>()[i] =
        i % 4 == 1 ? static_cast<std::int32_t>(V + i) : static_cast<std::int32_t>((i * 13) % V);
  }
  targets.data<std::int32_t>()[6] = -100;
  const EmbeddingArgs shard{.vocab_shard = true};
  const Tensor table = random({V, C}, 50), g = random({N, C}, 51);
  Tensor out = Tensor::empty({N, C}), d_out = backend_->empty({N, C});
  embedding_forward(shard, ids, table, out);
  embedding_forward(shard, on_device(ids), on_device(table), d_out);
  expect_close(d_out, out, 0.0, "shard lookup");
  Tensor grad = random({V, C}, 52), d_grad = on_device(grad);
  embedding_backward(shard, ids, g, grad);
  embedding_backward(shard, on_device(ids), on_device(g), d_grad);
  expect_close(d_grad, grad, 1e-6, "shard table gradient (+=)");
  const CrossEntropyArgs args{.ignore_index = -100, .vocab_shard = true};
  const Tensor logits = random({N, V}, 53), lse = random({N}, 54), grad_losses = random({N}, 55);
  Tensor dl = Tensor::empty({N, V}), d_dl = backend_->empty({N, V});
  cross_entropy_backward(args, logits, targets, lse, grad_losses, dl);
  cross_entropy_backward(args, on_device(logits), on_device(targets), on_device(lse), on_device(grad_losses), d_dl);
  expect_close(d_dl, dl, kModelOpsTolerance, "shard grad_logits");
}

TEST_F(CudaBackendTest, VocabShardTokenMapEqualsTheCpuExactly) {
  const std::int64_t n = 1000, vocab = 50257;
  Tensor tokens = Tensor::empty({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) {
    tokens.data<std::int32_t>()[i] = i % 11 == 0 ? -100 : static_cast<std::int32_t>((i * 7919) % vocab);
  }
  for (const bool state : {false, true}) {
    const VocabShardMap map{.output = state ? VocabShardMap::Output::state : VocabShardMap::Output::rows,
                            .vocab_start = 25128,
                            .rows = 25129,
                            .elsewhere = -1,
                            .ignore_index = -100};
    Tensor want = Tensor::empty({n}, DType::i32), d_out = backend_->empty({n}, DType::i32);
    vocab_shard_tokens(map, tokens, want);
    vocab_shard_tokens(map, on_device(tokens), d_out);
    const Tensor got = backend_->copy_to_host(d_out);
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got.data<std::int32_t>()[i], want.data<std::int32_t>()[i]) << "state " << state << " token " << i;
    }
  }
}

TEST_F(CudaBackendTest, BiasAddWritesAndItsGradientAccumulates) {
  const Tensor x = random({6, 10}, 50), bias = random({10}, 51), g = random({6, 10}, 52);
  Tensor out = Tensor::empty({6, 10}), d_out = backend_->empty({6, 10});
  bias_add_forward(BiasAddArgs{}, x, bias, out);
  bias_add_forward(BiasAddArgs{}, on_device(x), on_device(bias), d_out);
  expect_close(d_out, out, 1e-6, "x + bias");
  Tensor d_x = on_device(x);
  bias_add_forward(BiasAddArgs{}, d_x, on_device(bias), d_x);
  expect_close(d_x, out, 1e-6, "x + bias in place");
  Tensor gx = Tensor::empty({6, 10}), gb = random({10}, 53), d_gx = backend_->empty({6, 10}), d_gb = on_device(gb);
  bias_add_backward(BiasAddArgs{}, g, gx, gb);
  bias_add_backward(BiasAddArgs{}, on_device(g), d_gx, d_gb);
  expect_close(d_gx, gx, 0.0, "grad_x");
  expect_close(d_gb, gb, 1e-5, "grad_bias (+=)");
}

TEST_F(CudaBackendTest, AdamWUpdateAndGradientNorm) {
  const AdamWArgs args{
      .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 3, .grad_scale = 0.5f};
  Tensor p = random({1000}, 60), g = random({1000}, 61), m = random({1000}, 62), v = random({1000}, 63);
  for (std::int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = std::abs(v.data<float>()[i]);
  Tensor d_p = on_device(p), d_m = on_device(m), d_v = on_device(v);
  adamw_update(args, p, g, m, v);
  adamw_update(args, d_p, on_device(g), d_m, d_v);
  expect_close(d_p, p, 1e-6, "param");
  expect_close(d_m, m, 1e-6, "m");
  expect_close(d_v, v, 1e-6, "v");
  EXPECT_NEAR(grad_norm_squared(on_device(g)), grad_norm_squared(g), 1e-9 * grad_norm_squared(g));
}

// The compute copies written by the update's kernel are the device's updated param rounded: the
// f32 copy equals round_to_format of it and the 16-bit copy its conversion, bit for bit (the
// device and CPU params themselves differ by fused multiply-adds only).
TEST_F(CudaBackendTest, AdamWComputeCopiesAreTheUpdatedParamRounded) {
  const AdamWArgs args{.lr = 1e-2f, .weight_decay = 0.1f, .step = 2, .grad_scale = 0.5f};
  for (const DType format : {DType::bf16, DType::f16}) {
    Tensor p = random({1000}, 64), g = random({1000}, 65);
    Tensor d_p = on_device(p), d_m = on_device(Tensor::zeros({1000})), d_v = on_device(Tensor::zeros({1000}));
    AdamWCopies copies{.format = format, .rounded = backend_->empty({1000}), .narrow = backend_->empty({1000}, format)};
    adamw_update(args, d_p, on_device(g), d_m, d_v, copies);
    Tensor rounded = backend_->empty({1000});
    copy(d_p, rounded);
    round_to_format(rounded, format);
    expect_close(copies.rounded, backend_->copy_to_host(rounded), 0.0, "rounded copy");
    Tensor narrow = backend_->empty({1000}, format);
    copy(d_p, narrow);
    const Tensor got = backend_->copy_to_host(copies.narrow), want = backend_->copy_to_host(narrow);
    EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << dtype_name(format);
  }
}

// Rows longer than a block (700 > 256 threads), large logits, masked (-inf) entries, in place.
TEST_F(CudaBackendTest, SoftmaxForwardAndBackwardMatchTheCpuInPlaceToo) {
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 700}}) {
    Tensor x = random(shape, 70);
    for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= 30.0f;
    x.data<float>()[1] = -INFINITY;
    const Tensor g = random(shape, 71);
    Tensor out = Tensor::empty(shape), d_out = backend_->empty(shape);
    softmax_forward(SoftmaxArgs{}, x, out);
    softmax_forward(SoftmaxArgs{}, on_device(x), d_out);
    expect_close(d_out, out, kModelOpsTolerance, "softmax");
    Tensor grad = Tensor::empty(shape), d_grad = backend_->empty(shape);
    softmax_backward(SoftmaxArgs{}, out, g, grad);
    softmax_backward(SoftmaxArgs{}, d_out, on_device(g), d_grad);
    expect_close(d_grad, grad, kModelOpsTolerance, "softmax gradient");
    Tensor d_in_place = on_device(x), d_g = on_device(g);
    softmax_forward(SoftmaxArgs{}, d_in_place, d_in_place);
    softmax_backward(SoftmaxArgs{}, d_in_place, d_g, d_g);
    expect_close(d_in_place, out, kModelOpsTolerance, "softmax in place");
    expect_close(d_g, grad, kModelOpsTolerance, "softmax gradient in place");
  }
}

// The vocabulary-parallel loss's pieces: every state (in this shard, elsewhere, ignored), a row
// whose shard holds no column (local lse -inf), more rows than a block, and the batched gradient
// norms (one read back) equal to the single ones.
TEST_F(CudaBackendTest, VocabShardLossPiecesAndBatchedGradientNormsMatchTheCpu) {
  const std::int64_t n = 700;
  Tensor state = Tensor::empty({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) state.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 3) - 1;
  Tensor lse = random({n}, 80), loss = random({n}, 81), maxima = random({n}, 82);
  for (std::int64_t i = 0; i < n; ++i) {
    loss.data<float>()[i] = std::abs(loss.data<float>()[i]);
    maxima.data<float>()[i] = std::max(maxima.data<float>()[i], lse.data<float>()[i]) + 0.5f;
  }
  lse.data<float>()[4] = -INFINITY;
  Tensor packed = Tensor::empty({2 * n}), d_packed = backend_->empty({2 * n});
  vocab_shard_partials(state, lse, loss, maxima, packed);
  vocab_shard_partials(on_device(state), on_device(lse), on_device(loss), on_device(maxima), d_packed);
  expect_close(d_packed, packed, kModelOpsTolerance, "packed");
  // As summed over the group: the other shards add to every row's exp-sum (so row 4's is > 0).
  for (std::int64_t i = 0; i < n; ++i) packed.data<float>()[i] += 1.0f;
  Tensor out_lse = Tensor::empty({n}), out_losses = Tensor::empty({n});
  Tensor d_lse = backend_->empty({n}), d_losses = backend_->empty({n});
  vocab_shard_combine(state, maxima, packed, out_lse, out_losses);
  vocab_shard_combine(on_device(state), on_device(maxima), on_device(packed), d_lse, d_losses);
  expect_close(d_lse, out_lse, kModelOpsTolerance, "lse");
  expect_close(d_losses, out_losses, kModelOpsTolerance, "losses");

  const std::vector<Tensor> grads = {random({1000}, 83), random({5}, 84), random({70000}, 85)};
  std::vector<Tensor> d_grads;
  for (const Tensor& g : grads) d_grads.push_back(on_device(g));
  const std::vector<double> batched = grad_norms_squared(d_grads);
  ASSERT_EQ(batched.size(), grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    EXPECT_EQ(batched[i], grad_norm_squared(d_grads[i])) << "tensor " << i;
    EXPECT_NEAR(batched[i], grad_norm_squared(grads[i]), 1e-9 * grad_norm_squared(grads[i])) << "tensor " << i;
  }
}

}  // namespace
}  // namespace myriad
