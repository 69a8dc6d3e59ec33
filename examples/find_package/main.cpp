// Uses the installed myriad: a (2, 3) x (3, 2) product through the matmul op, checked against
// the sum written out here; a bad call refused through myriad::Error; and a small GPT-2-style
// model's first loss, which at initialisation (weights ~ N(0, 0.02)) is close to ln V. Exits 0
// when all three hold.
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "myriad/core/error.h"
#include "myriad/core/tensor.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/ops/matmul.h"

int main() {
  using myriad::Tensor;
  Tensor a = Tensor::empty({2, 3}), b = Tensor::empty({3, 2}), out = Tensor::empty({2, 2});
  for (int i = 0; i < 6; ++i) {
    a.data<float>()[i] = static_cast<float>(i + 1);
    b.data<float>()[i] = static_cast<float>(i % 2 == 0 ? i : -i);
  }
  myriad::matmul_forward(myriad::MatmulArgs{}, a, b, out);
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) {
      float want = 0.0f;
      for (int k = 0; k < 3; ++k) want += a.data<float>()[r * 3 + k] * b.data<float>()[k * 2 + c];
      const float got = out.data<float>()[r * 2 + c];
      if (std::fabs(got - want) > 1e-5f) {
        std::printf("out[%d, %d] = %g, expected %g\n", r, c, got, want);
        return 1;
      }
    }
  }
  try {
    Tensor wrong = Tensor::empty({4, 2});
    myriad::matmul_forward(myriad::MatmulArgs{}, a, wrong, out);
    std::printf("a (2, 3) x (4, 2) was not refused\n");
    return 1;
  } catch (const myriad::Error& e) {
    std::printf("refused as expected: %s\n", e.what());
  }
  const std::int64_t vocab = 100, batch = 2, seq = 16;
  myriad::nn::GptModel model(myriad::nn::TransformerConfig::gpt2(vocab, 2, 2, 32, seq));
  Tensor ids = Tensor::empty({batch, seq}, myriad::DType::i32),
         targets = Tensor::empty({batch, seq}, myriad::DType::i32);
  for (int i = 0; i < batch * seq; ++i) {
    ids.data<std::int32_t>()[i] = (i * 37) % vocab;
    targets.data<std::int32_t>()[i] = (i * 53 + 1) % vocab;
  }
  const myriad::nn::LossSum loss = model.forward_loss(ids, targets);
  const double mean = loss.sum / static_cast<double>(loss.tokens);
  std::printf("initial loss %.4f over %lld tokens (ln V = %.4f)\n", mean, static_cast<long long>(loss.tokens),
              std::log(static_cast<double>(vocab)));
  if (std::fabs(mean - std::log(static_cast<double>(vocab))) > 0.1) return 1;
  std::printf("myriad example: matmul %s and model ok\n", out.describe().c_str());
  return 0;
}
