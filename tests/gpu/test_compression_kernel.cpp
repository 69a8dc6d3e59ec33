// The compression kernels and 1-bit Adam's update kernel (kernels/optim/compression.cu,
// onebit_adam.cu) through CudaBackend against the CPU ops: the same code bytes, the same error
// feedback and the same decoded values bit for bit (the kernels round each operation as the CPU
// does), for segment sizes around the block sizes, top-k ratios with ties in the magnitudes
// (ties go to the lower index), decode's `=` and `+=`, and unaligned segments (a chunk of a
// larger code buffer); the update kernel gives the CPU op's parameters and momenta bit for bit.
// Skips without a GPU; the emulated CUDA layer runs the same test on its CPU launchers.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_backend_fixture.h"
#include "myriad/ops/compression.h"
#include "myriad/ops/onebit_adam_update.h"

namespace myriad::testing {
namespace {

class CompressionKernels : public CudaBackendTest {
 protected:
  // Host bytes of a device or host tensor.
  std::vector<std::uint8_t> bytes_of(const Tensor& t) {
    const Tensor host = t.device().is_cpu() ? t.contiguous() : backend_->copy_to_host(t);
    const auto* p = static_cast<const std::uint8_t*>(host.raw_data());
    return std::vector<std::uint8_t>(p, p + host.nbytes());
  }

  // Encodes x with error on both devices (the device code written at byte `offset` of a larger
  // buffer), then decodes into a `prior` buffer with and without accumulation; all bytes equal.
  void expect_same_as_cpu(const CompressionSpec& spec, const Tensor& x, const Tensor& error, std::int64_t offset) {
    const std::int64_t n = x.numel(), bytes = encoded_bytes(spec, n);
    Tensor cpu_error = error.clone(), cpu_code = Tensor::empty({bytes}, DType::i8);
    compress_encode(spec, x, cpu_error, cpu_code);
    Tensor dev_x = on_device(x), dev_error = on_device(error);
    Tensor dev_buffer = backend_->empty({bytes + offset}, DType::i8);
    Tensor dev_code = dev_buffer.slice(0, offset, offset + bytes);
    compress_encode(spec, dev_x, dev_error, dev_code);
    EXPECT_EQ(bytes_of(dev_code), bytes_of(cpu_code)) << "code";
    EXPECT_EQ(bytes_of(dev_error), bytes_of(cpu_error)) << "error";
    const Tensor prior = random({n}, 77);
    for (bool accumulate : {false, true}) {
      Tensor cpu_out = prior.clone(), dev_out = on_device(prior);
      compress_decode(spec, cpu_code, cpu_out, accumulate);
      compress_decode(spec, dev_code, dev_out, accumulate);
      EXPECT_EQ(bytes_of(dev_out), bytes_of(cpu_out)) << "decoded, accumulate " << accumulate;
    }
  }
};

TEST_F(CompressionKernels, SignAndInt8CodesEqualTheCpuOps) {
  for (Compression kind : {Compression::sign, Compression::int8}) {
    for (std::int64_t n : {1, 63, 64, 65, 255, 256, 257, 4099, 300007}) {
      SCOPED_TRACE(std::string(compression_name(kind)) + " n=" + std::to_string(n));
      Tensor x = random({n}, 1), error = random({n}, 2);
      for (std::int64_t i = 0; i < n; i += 97) x.data<float>()[i] = 0.0f;  // zeros and their signs
      if (n > 300) {
        for (std::int64_t i = 0; i < 256; ++i) {
          x.data<float>()[i] = 0.0f;  // a whole block of zeros: scale 0
          error.data<float>()[i] = 0.0f;
        }
      }
      expect_same_as_cpu(CompressionSpec{kind}, x, error, n % 3);
    }
  }
}

TEST_F(CompressionKernels, TopKSelectionOnTheDeviceEqualsTheCpuOps) {
  for (double ratio : {0.001, 0.01, 0.3, 1.0}) {
    for (std::int64_t n : {1, 2, 1023, 1024, 1025, 50000}) {
      SCOPED_TRACE("ratio " + std::to_string(ratio) + " n=" + std::to_string(n));
      Tensor x = random({n}, 3), error = random({n}, 4);
      // Many equal magnitudes (with both signs), so the k-th largest is a tie the index decides.
      for (std::int64_t i = 0; i < n; i += 3) {
        x.data<float>()[i] = (i % 2 == 0 ? 2.0f : -2.0f);
        error.data<float>()[i] = 0.0f;
      }
      expect_same_as_cpu(CompressionSpec{Compression::topk, ratio}, x, error, 4 * (n % 2));
    }
  }
}

TEST_F(CompressionKernels, OneBitAdamMomentumAndUpdateEqualTheCpuOps) {
  const std::int64_t n = 100003;
  const Tensor p = random({n}, 5), m = random({n}, 6);
  Tensor v = random({n}, 7);
  for (std::int64_t i = 0; i < n; ++i) v.data<float>()[i] *= v.data<float>()[i];
  const OneBitAdamUpdateArgs args{
      .lr = 3e-3f, .decay = 3e-4f, .bias1 = 0.271f, .bias2 = 0.0975f, .eps = 1e-8f, .inverse_replicas = 0.5f};
  Tensor cpu_p = p.clone(), cpu_m = m.clone(), dev_p = on_device(p), dev_m = on_device(m);
  onebit_adam_update(args, cpu_p, cpu_m, v);
  onebit_adam_update(args, dev_p, dev_m, on_device(v));
  EXPECT_EQ(bytes_of(dev_p), bytes_of(cpu_p));
  EXPECT_EQ(bytes_of(dev_m), bytes_of(cpu_m));
  const Tensor g = random({n}, 8);
  const OneBitAdamMomentumArgs momentum{.beta1 = 0.9f, .gain = 0.2f};
  onebit_adam_momentum(momentum, cpu_m, g);
  onebit_adam_momentum(momentum, dev_m, on_device(g));
  EXPECT_EQ(bytes_of(dev_m), bytes_of(cpu_m)) << "momentum";
}

}  // namespace
}  // namespace myriad::testing
