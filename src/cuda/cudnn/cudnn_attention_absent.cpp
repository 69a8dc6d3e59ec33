// cuda/cudnn_attention.h in a build without cuDNN or its frontend headers (MYRIAD_HAVE_CUDNN off):
// no cuDNN attention, with the reason; the CUDA backend then runs its own tensor-core kernels.
#include "myriad/cuda/cudnn_attention.h"

#include "myriad/core/error.h"

namespace myriad::cuda {

class CudnnAttention {};

std::shared_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t, std::string& why_not) {
  why_not =
      "this build has no cuDNN attention (configure found no cudnn.h, libcudnn or the cuDNN frontend headers: "
      "scripts/setup.sh installs the frontend; see docs/architecture.md)";
  return nullptr;
}

bool cudnn_attention_prepare(CudnnAttention&, const CudnnAttentionShape&, bool, std::int64_t&, std::string& why_not) {
  why_not = "this build has no cuDNN attention";
  return false;
}

void cudnn_attention_forward(CudnnAttention&, const CudnnAttentionShape&, const void*, const void*, const void*, void*,
                             float*, void*) {
  MYRIAD_THROW("cudnn_attention_forward: this build has no cuDNN attention");
}

void cudnn_attention_backward(CudnnAttention&, const CudnnAttentionShape&, const void*, const void*, const void*,
                              const void*, const float*, const void*, void*, void*, void*, void*) {
  MYRIAD_THROW("cudnn_attention_backward: this build has no cuDNN attention");
}

}  // namespace myriad::cuda
