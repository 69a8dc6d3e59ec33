// The cuDNN frontend code behind cuda/cudnn_attention.h (internal to src/cuda/cudnn): the same
// four functions, in their own object so that the public ones (cudnn_attention.cpp) stay a thin
// layer the emulated CUDA suites can replace by link order — the frontend's object also carries
// library template instances that a linker may take it for, and it defines no public symbol.
#pragma once

#include "myriad/cuda/cudnn_attention.h"

namespace myriad::cuda::cudnn_graphs {

std::shared_ptr<CudnnAttention> make(cudaStream_t stream, std::string& why_not);
bool prepare(CudnnAttention& attention, const CudnnAttentionShape& shape, bool backward, std::int64_t& workspace_bytes,
             std::string& why_not);
void forward(CudnnAttention& attention, const CudnnAttentionShape& shape, const void* q, const void* k, const void* v,
             void* out, float* lse, void* workspace);
void backward(CudnnAttention& attention, const CudnnAttentionShape& shape, const void* q, const void* k, const void* v,
              const void* out, const float* lse, const void* grad_out, void* grad_q, void* grad_k, void* grad_v,
              void* workspace);

}  // namespace myriad::cuda::cudnn_graphs
