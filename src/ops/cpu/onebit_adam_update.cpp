// CPU 1-bit Adam passes (ops/onebit_adam_update.h): elementwise, each operation rounded as written
// (compiled with -ffp-contract=off: src/CMakeLists.txt), the arithmetic optim/onebit_adam.cpp had.
#include <cmath>

#include "myriad/ops/onebit_adam_update.h"

namespace myriad::cpu {

void onebit_adam_momentum(const OneBitAdamMomentumArgs& args, Tensor& m, const Tensor& grad) {
  float* momentum = m.data<float>();
  const float* g = grad.data<float>();
  const std::int64_t n = m.numel();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) momentum[i] = args.beta1 * momentum[i] + args.gain * g[i];
}

void onebit_adam_update(const OneBitAdamUpdateArgs& args, Tensor& param, Tensor& m, const Tensor& v) {
  float* p = param.data<float>();
  float* mean = m.data<float>();
  const float* second = v.data<float>();
  const std::int64_t n = param.numel();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) {
    const float momentum = mean[i] * args.inverse_replicas;
    mean[i] = momentum;
    p[i] -= args.decay * p[i];
    p[i] -= args.lr * (momentum / args.bias1) / (std::sqrt(second[i] / args.bias2) + args.eps);
  }
}

}  // namespace myriad::cpu
