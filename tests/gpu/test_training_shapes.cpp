// The CUDA backend at the shapes training runs, against the CPU ops (GPU only: label gpu, not in
// the emulated suite, whose CPU stand-ins would take minutes here): flash attention at T 1024 to
// 4096 with head dim 64 and 128, the cross-entropy over logits of more than 2^31 elements (V
// 50304: 64-bit offsets), the embedding backward at N 16k tokens (bit for bit), and one GPT-2 124M
// step of the one model against the host model.
// scripts/gpu_check.sh runs them with the rest of the gpu label.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cuda_backend_fixture.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/embedding.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::CudaBackendTest;

TEST_F(CudaBackendTest, FlashAttentionAtTrainingSequenceLengths) {
  struct Shape4 {
    std::int64_t T, D;
  };
  for (const Shape4 s : {Shape4{1024, 64}, Shape4{2048, 128}, Shape4{4096, 128}}) {
    SCOPED_TRACE(::testing::Message() << "T " << s.T << " D " << s.D);
    const Shape q_shape{1, 4, s.T, s.D}, kv_shape{1, 2, s.T, s.D};  // grouped queries: 2 per kv head
    const Tensor q = random(q_shape, 1), k = random(kv_shape, 2), v = random(kv_shape, 3), g = random(q_shape, 4);
    Tensor out = Tensor::empty(q_shape), lse = Tensor::empty({1, 4, s.T});
    attention_forward(AttentionArgs{}, q, k, v, out, lse);
    Tensor d_out = backend_->empty(q_shape), d_lse = backend_->empty({1, 4, s.T});
    const Tensor dq_in = on_device(q), dk_in = on_device(k), dv_in = on_device(v);
    attention_forward(AttentionArgs{}, dq_in, dk_in, dv_in, d_out, d_lse);
    expect_close(d_out, out, 1e-5, "out");
    expect_close(d_lse, lse, 1e-5, "lse");
    Tensor gq = Tensor::empty(q_shape), gk = Tensor::empty(kv_shape), gv = Tensor::empty(kv_shape);
    attention_backward(AttentionArgs{}, q, k, v, out, lse, g, gq, gk, gv);
    Tensor d_gq = backend_->empty(q_shape), d_gk = backend_->empty(kv_shape), d_gv = backend_->empty(kv_shape);
    attention_backward(AttentionArgs{}, dq_in, dk_in, dv_in, d_out, d_lse, on_device(g), d_gq, d_gk, d_gv);
    // Sums over up to T keys in another order: the tolerance grows like sqrt(T) ulps.
    const double tolerance = 1e-6 * std::sqrt(static_cast<double>(s.T)) * 8.0;
    expect_close(d_gq, gq, tolerance, "grad_q");
    expect_close(d_gk, gk, tolerance, "grad_k");
    expect_close(d_gv, gv, tolerance, "grad_v");
  }
}

// N x V > 2^31 logits (8.6 GB): a constant 0.5 everywhere but random rows at both ends; the
// random rows' loss, lse and gradient equal the CPU op's on those rows, a constant row's loss is
// log V exactly as the formula says.
TEST_F(CudaBackendTest, CrossEntropyOverMoreThanTwoToThe31Logits) {
  const std::int64_t V = 50304, N = (std::int64_t{1} << 31) / V + 64;
  ASSERT_GT(N * V, std::int64_t{1} << 31);
  Tensor logits = backend_->empty({N, V});
  fill(logits, 0.5f);
  const std::int64_t rows[] = {0, 1, N - 2, N - 1};
  Tensor targets = Tensor::empty({N}, DType::i32);
  for (std::int64_t i = 0; i < N; ++i) targets.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7919) % V);
  for (std::int64_t r : rows) {
    Tensor row = logits.slice(0, r, r + 1);
    copy(on_device(random({1, V}, 10 + static_cast<std::uint64_t>(r % 97))), row);
  }
  Tensor losses = backend_->empty({N}), lse = backend_->empty({N});
  const Tensor d_targets = on_device(targets);
  cross_entropy_forward(CrossEntropyArgs{}, logits, d_targets, losses, lse);
  Tensor grad_losses = backend_->empty({N});
  fill(grad_losses, 1.0f / static_cast<float>(N));
  cross_entropy_backward(CrossEntropyArgs{}, logits, d_targets, lse, grad_losses, logits);  // in place
  const Tensor host_losses = backend_->copy_to_host(losses), host_lse = backend_->copy_to_host(lse);
  for (std::int64_t r : rows) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    const Tensor row = random({1, V}, 10 + static_cast<std::uint64_t>(r % 97));
    Tensor want_loss = Tensor::empty({1}), want_lse = Tensor::empty({1}), want_grad = Tensor::empty({1, V});
    const Tensor target = targets.slice(0, r, r + 1).contiguous();
    cross_entropy_forward(CrossEntropyArgs{}, row, target, want_loss, want_lse);
    Tensor g = Tensor::full({1}, 1.0 / static_cast<double>(N));
    cross_entropy_backward(CrossEntropyArgs{}, row, target, want_lse, g, want_grad);
    EXPECT_NEAR(host_losses.data<float>()[r], want_loss.data<float>()[0], 1e-5);
    EXPECT_NEAR(host_lse.data<float>()[r], want_lse.data<float>()[0], 1e-5);
    expect_close(logits.slice(0, r, r + 1), want_grad, 1e-6, "gradient row");
  }
  const std::int64_t middle = N / 2;
  EXPECT_NEAR(host_losses.data<float>()[middle], std::log(static_cast<double>(V)), 1e-5);
}

// The embedding backward at a GPT-2 training shape (N = 16 x 1024 tokens, V 50304, C 768) on skewed
// ids: one id ~10 % of the tokens, a Zipf-like rest (log-uniform: P(id) ~ 1 / (id + 1)) and a few
// padding rows past 50257. The gradient added onto a random grad_table equals the CPU op's bit
// for bit (both add each element's rows in token order); then again as a vocabulary shard's call
// with some negative ids (another shard's rows: skipped), onto that result.
TEST_F(CudaBackendTest, EmbeddingBackwardAtTrainingShapeEqualsTheCpuBitForBit) {
  const std::int64_t B = 16, T = 1024, N = B * T, V = 50304, C = 768, used_vocab = 50257;
  const std::int32_t frequent = 198;
  Tensor ids = Tensor::empty({B, T}, DType::i32);
  std::int32_t* id = ids.data<std::int32_t>();
  std::int64_t frequent_count = 0, padding_count = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    const std::array<std::uint32_t, 4> r = philox4x32(2026, 60, static_cast<std::uint64_t>(n));
    if (r[1] % 10 == 0) {
      id[n] = frequent;
    } else if (r[1] % 1000 == 1) {
      id[n] = static_cast<std::int32_t>(used_vocab + r[2] % (V - used_vocab));
    } else {
      const double zipf = std::exp(r[0] * 0x1p-32 * std::log(static_cast<double>(used_vocab))) - 1.0;
      id[n] = static_cast<std::int32_t>(std::min(zipf, static_cast<double>(used_vocab - 1)));
    }
    frequent_count += id[n] == frequent;
    padding_count += id[n] >= used_vocab;
  }
  ASSERT_GT(frequent_count, N / 20);
  ASSERT_GT(padding_count, 0);
  auto expect_bit_equal = [&](const Tensor& device, const Tensor& want, const char* what) {
    const Tensor got = backend_->copy_to_host(device);
    ASSERT_EQ(got.shape(), want.shape()) << what;
    const float* g = got.data<float>();
    const float* w = want.data<float>();
    const std::int64_t count = want.numel();
    std::int64_t first = -1, differing = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      if (std::bit_cast<std::uint32_t>(g[i]) != std::bit_cast<std::uint32_t>(w[i])) {  // bits, not values
        if (first < 0) first = i;
        ++differing;
      }
    }
    EXPECT_EQ(differing, 0) << what << ": first at row " << first / C << " column " << first % C << ": "
                            << (first >= 0 ? g[first] : 0.0f) << " vs the CPU's " << (first >= 0 ? w[first] : 0.0f);
  };
  const Tensor grad_out = random({B, T, C}, 61);
  Tensor want = random({V, C}, 62);
  Tensor got = on_device(want);
  const Tensor d_grad_out = on_device(grad_out);
  embedding_backward(EmbeddingArgs{}, ids, grad_out, want);
  embedding_backward(EmbeddingArgs{}, on_device(ids), d_grad_out, got);
  expect_bit_equal(got, want, "grad_table");

  for (std::int64_t n = 0; n < N; n += 37) id[n] = -1 - static_cast<std::int32_t>(n % 5);
  const EmbeddingArgs shard{.vocab_shard = true};
  embedding_backward(shard, ids, grad_out, want);
  embedding_backward(shard, on_device(ids), d_grad_out, got);
  expect_bit_equal(got, want, "grad_table of a vocabulary shard");
}

// One GPT-2 124M step (B 2, T 256) of the model on the backend against the host model: the loss,
// and every gradient to 1e-3 of the largest one (f32 GEMMs summed in another order).
TEST_F(CudaBackendTest, Gpt2SmallStepEqualsTheHostModel) {
  const nn::TransformerConfig config = nn::TransformerConfig::gpt2(50257, 12, 12, 768, 1024);
  nn::GptModel host(config), device(config, {}, true, ops::Placement{backend_.get()});
  host.initialize(5);
  device.initialize(5);
  const std::int64_t B = 2, T = 256;
  Tensor ids = Tensor::empty({B, T}, DType::i32), targets = Tensor::empty({B, T}, DType::i32);
  for (std::int64_t i = 0; i < B * T; ++i) {
    ids.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 104729) % 50257);
    targets.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7907 + 3) % 50257);
  }
  const float scale = 1.0f / static_cast<float>(B * T);
  const nn::LossSum want = host.forward_backward(ids, targets, scale, Recompute::none);
  const nn::LossSum got = device.forward_backward(ids, targets, scale, Recompute::none);
  EXPECT_NEAR(got.sum / got.tokens, want.sum / want.tokens, 1e-4 * want.sum / want.tokens);
  const std::vector<double> g_host = testing::to_f64(host.parameters().flat_grads());
  const std::vector<double> g_device = testing::to_f64(backend_->copy_to_host(device.parameters().flat_grads()));
  double worst = 0.0, largest = 1e-30;
  for (std::size_t i = 0; i < g_host.size(); ++i) {
    worst = std::max(worst, std::abs(g_device[i] - g_host[i]));
    largest = std::max(largest, std::abs(g_host[i]));
  }
  EXPECT_LE(worst, 1e-3 * largest) << "largest gradient difference " << worst << " of " << largest;
}

}  // namespace
}  // namespace myriad
