// CudaBackend: gradient compression codes with error feedback and 1-bit Adam's update, over the
// kernels of kernels/optim/ (compression.cu, onebit_adam.cu). The dispatch points
// (ops/compression.h, ops/onebit_adam_update.h) checked the tensors; nothing here waits for the
// stream.
#include <cstdint>

#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/kernels.h"
#include "kernel_pointers.h"

namespace myriad::cuda {

namespace {
std::uint8_t* bytes(const Tensor& t) { return static_cast<std::uint8_t*>(t.raw_data()); }
}  // namespace

void CudaBackend::compress_encode(const CompressionSpec& spec, const Tensor& x, Tensor& error, Tensor& code) {
  DeviceGuard guard(context_.device());
  const std::int64_t n = x.numel();
  switch (spec.kind) {
    case Compression::sign:
      return sign_encode_f32(floats(x), floats(error), bytes(code), n, context_.stream());
    case Compression::int8:
      return int8_encode_f32(floats(x), floats(error), bytes(code), n, context_.stream());
    case Compression::topk:
      return topk_encode_f32(floats(x), floats(error), bytes(code), n, topk_count(spec.topk_ratio, n),
                             context_.stream());
  }
}

void CudaBackend::compress_decode(const CompressionSpec& spec, const Tensor& code, Tensor& out, bool accumulate) {
  DeviceGuard guard(context_.device());
  const std::int64_t n = out.numel();
  switch (spec.kind) {
    case Compression::sign:
      return sign_decode_f32(bytes(code), floats(out), n, accumulate, context_.stream());
    case Compression::int8:
      return int8_decode_f32(bytes(code), floats(out), n, accumulate, context_.stream());
    case Compression::topk:
      return topk_decode_f32(bytes(code), floats(out), n, topk_count(spec.topk_ratio, n), accumulate,
                             context_.stream());
  }
}

void CudaBackend::onebit_adam_momentum(const OneBitAdamMomentumArgs& args, Tensor& m, const Tensor& grad) {
  DeviceGuard guard(context_.device());
  onebit_adam_momentum_f32(floats(m), floats(grad), m.numel(), args.beta1, args.gain, context_.stream());
}

void CudaBackend::onebit_adam_update(const OneBitAdamUpdateArgs& args, Tensor& param, Tensor& m, const Tensor& v) {
  DeviceGuard guard(context_.device());
  const OneBitAdamStep step{.lr = args.lr,
                            .decay = args.decay,
                            .bias1 = args.bias1,
                            .bias2 = args.bias2,
                            .eps = args.eps,
                            .inverse_replicas = args.inverse_replicas};
  onebit_adam_update_f32(floats(param), floats(m), floats(v), param.numel(), step, context_.stream());
}

}  // namespace myriad::cuda
