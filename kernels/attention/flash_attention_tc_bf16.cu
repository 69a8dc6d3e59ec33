// The bf16 instances of the tensor-core flash attention (kernels.h): forward
// and backward for head dims 64 and 128, causal or not. One file per element
// type keeps each translation unit's compile time bounded and lets the two
// types build in parallel.
#include <cuda_bf16.h>

#include "attention/flash_attention_tc_backward.cuh"
#include "attention/flash_attention_tc_forward.cuh"

namespace myriad::cuda {

void flash_attention_forward_tc_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                     __nv_bfloat16* out, float* lse, const FlashAttentionShape& shape,
                                     cudaStream_t stream) {
  forward_tc("flash_attention_forward_tc_bf16", q, k, v, out, lse, shape, stream);
}

void flash_attention_backward_tc_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                      const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* grad_out,
                                      __nv_bfloat16* grad_q, __nv_bfloat16* grad_k, __nv_bfloat16* grad_v, float* delta,
                                      std::int64_t delta_floats, const FlashAttentionShape& shape,
                                      cudaStream_t stream) {
  backward_tc("flash_attention_backward_tc_bf16", q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta,
              delta_floats, shape, stream);
}

}  // namespace myriad::cuda
