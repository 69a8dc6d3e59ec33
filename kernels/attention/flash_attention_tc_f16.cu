// The f16 (IEEE half) instances of the tensor-core flash attention (kernels.h):
// forward and backward for head dims 64 and 128, causal or not. One file per
// element type keeps each translation unit's compile time bounded and lets the
// two types build in parallel.
#include <cuda_fp16.h>

#include "attention/flash_attention_tc_backward.cuh"
#include "attention/flash_attention_tc_forward.cuh"

namespace myriad::cuda {

void flash_attention_forward_tc_f16(const __half* q, const __half* k, const __half* v, __half* out, float* lse,
                                    const FlashAttentionShape& shape, cudaStream_t stream) {
  forward_tc("flash_attention_forward_tc_f16", q, k, v, out, lse, shape, stream);
}

void flash_attention_backward_tc_f16(const __half* q, const __half* k, const __half* v, const __half* out,
                                     const float* lse, const __half* grad_out, __half* grad_q, __half* grad_k,
                                     __half* grad_v, float* delta, std::int64_t delta_floats,
                                     const FlashAttentionShape& shape, cudaStream_t stream) {
  backward_tc("flash_attention_backward_tc_f16", q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta,
              delta_floats, shape, stream);
}

}  // namespace myriad::cuda
