// cuda/cudnn_attention.h with cuDNN (MYRIAD_HAVE_CUDNN): the public functions, forwarding to the
// frontend code of cudnn_graphs.cpp (cudnn_graphs.h says why they are apart).
#include "myriad/cuda/cudnn_attention.h"

#include "cudnn_graphs.h"

namespace myriad::cuda {

std::shared_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t stream, std::string& why_not) {
  return cudnn_graphs::make(stream, why_not);
}

bool cudnn_attention_prepare(CudnnAttention& attention, const CudnnAttentionShape& shape, bool backward,
                             std::int64_t& workspace_bytes, std::string& why_not) {
  return cudnn_graphs::prepare(attention, shape, backward, workspace_bytes, why_not);
}

void cudnn_attention_forward(CudnnAttention& attention, const CudnnAttentionShape& shape, const void* q, const void* k,
                             const void* v, void* out, float* lse, void* workspace) {
  cudnn_graphs::forward(attention, shape, q, k, v, out, lse, workspace);
}

void cudnn_attention_backward(CudnnAttention& attention, const CudnnAttentionShape& shape, const void* q, const void* k,
                              const void* v, const void* out, const float* lse, const void* grad_out, void* grad_q,
                              void* grad_k, void* grad_v, void* workspace) {
  cudnn_graphs::backward(attention, shape, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, workspace);
}

}  // namespace myriad::cuda
