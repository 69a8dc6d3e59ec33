// CudaBackend — the ops on one GPU: an ops::Backend over a DeviceContext's stream, cuBLASLt
// handle, plan cache and caching allocator, calling the pointer-based launchers of kernels/
// (kernels.h, gemm.h). The model runs unchanged on its tensors: matmul_forward(args, a, b, out)
// with a, b, out made by a CudaBackend queues the GEMM on that backend's stream.
//
// Tensors come from empty() / copy_from_host(); their Storage names this backend, so it must
// outlive them (as the DeviceContext must outlive the backend). Work is queued on the context's
// stream in call order; copy_to_host() and synchronize() wait for it. Scratch space an op needs
// (the norms' parameter-gradient partial sums) comes from the caching allocator.
//
// Layouts: norms and activations take the contiguous tensors their dispatch points require.
// Matmul takes any batch strides, but the last two dims of every operand must be row-major
// (unit stride, rows at most a pitch apart: cuBLASLt's leading dimension); alpha must be 1 (the
// cuBLASLt plans carry no scale yet). Other layouts are refused naming the tensor.
#pragma once

#include "myriad/cuda/device_context.h"
#include "myriad/ops/backend.h"

namespace myriad::cuda {

class CudaBackend final : public ops::Backend {
 public:
  explicit CudaBackend(DeviceContext& context) : context_(context) {}
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  DeviceContext& context() const { return context_; }

  Device device() const override;
  Tensor empty(const Shape& shape, DType dtype = DType::f32) override;
  Tensor copy_from_host(const Tensor& host) override;
  Tensor copy_to_host(const Tensor& device) override;
  void zero(const Tensor& device) override;
  void synchronize() override;

  void matmul_forward(const MatmulArgs& args, const Tensor& a, const Tensor& b, Tensor& out) override;
  void matmul_backward(const MatmulArgs& args, const Tensor& a, const Tensor& b, const Tensor& grad_out,
                       Tensor& grad_a, Tensor& grad_b) override;
  void layernorm_forward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         Tensor& out, Tensor& mean, Tensor& rstd) override;
  void layernorm_backward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight,
                          Tensor& grad_bias) override;
  void rmsnorm_forward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, Tensor& out,
                       Tensor& rstd) override;
  void rmsnorm_backward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                        const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight) override;
  void gelu_forward(const GeluArgs& args, const Tensor& x, Tensor& out) override;
  void gelu_backward(const GeluArgs& args, const Tensor& x, const Tensor& grad_out, Tensor& grad_x) override;
  void swiglu_forward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, Tensor& out) override;
  void swiglu_backward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                       Tensor& grad_gate, Tensor& grad_up) override;

 private:
  DeviceContext& context_;
};

}  // namespace myriad::cuda
