// cuDNN's fused attention (the cuDNN frontend's SDPA graphs) behind plain launchers, like the
// kernels of kernels.h: the CUDA backend's 16-bit attention runs it where it applies and falls
// back to its own tensor-core kernels elsewhere (the rule: CudaBackend::attention_forward).
//
// One problem is dense self-attention over contiguous 16-bit tensors: q, out, grad_out, grad_q
// (B, Hq, T, D); k, v, grad_k, grad_v (B, Hkv, T, D) (grouped-query heads: Hq % Hkv == 0); lse
// (B, Hq, T) f32 = cuDNN's softmax statistics, log sum_j exp(scale q . k_j) (natural log), the
// same quantity the flash kernels save, so either backward could read it. Causal masks are
// top-left aligned (query i sees keys j <= i). Everything runs on the stream given at creation,
// with no host wait; the workspace is the caller's (device memory of the returned size).
//
// Graphs are built once per (shape, direction) on first use — the frontend's heuristics pick the
// engine — and kept for the handle's life (a plan cache like the GEMM one). A shape cuDNN has no
// engine for is reported, not thrown, so the caller can fall back. Without cuDNN or its frontend
// at configure time (MYRIAD_HAVE_CUDNN off), make_cudnn_attention returns null with the reason.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

namespace myriad::cuda {

struct CudnnAttentionShape {
  std::int64_t batch = 0, q_heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  float scale = 0.0f;
  bool causal = true;
  bool f16 = false;  // IEEE half; else bf16
  bool operator==(const CudnnAttentionShape&) const = default;
};

// A device's cuDNN handle and its built graphs (opaque).
class CudnnAttention;

// The cuDNN attention of the current device on `stream`, or null with the reason in `why_not`
// (a build without cuDNN, the runtime older than 9, a GPU below sm_80, a handle that fails).
std::shared_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t stream, std::string& why_not);

// Builds (once) the forward or backward graph of `shape`; true with its workspace bytes, or false
// with cuDNN's reason (no engine for this shape).
bool cudnn_attention_prepare(CudnnAttention& attention, const CudnnAttentionShape& shape, bool backward,
                             std::int64_t& workspace_bytes, std::string& why_not);

// out, lse <- attention(q, k, v); a prepared forward graph.
void cudnn_attention_forward(CudnnAttention& attention, const CudnnAttentionShape& shape, const void* q, const void* k,
                             const void* v, void* out, float* lse, void* workspace);
// grad_q, grad_k, grad_v <- the gradients (written); a prepared backward graph.
void cudnn_attention_backward(CudnnAttention& attention, const CudnnAttentionShape& shape, const void* q, const void* k,
                              const void* v, const void* out, const float* lse, const void* grad_out, void* grad_q,
                              void* grad_k, void* grad_v, void* workspace);

}  // namespace myriad::cuda
