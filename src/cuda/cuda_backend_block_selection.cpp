// CudaBackend: the block selection of block-sparse attention (ops/block_selection.h) over the
// kernels of kernels/attention/block_selection.cu. Everything stays on the stream: the layout's
// size comes from the shapes, and the totals are added on the device (read with the step's
// metrics).
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/kernels.h"
#include "kernel_pointers.h"

namespace myriad::cuda {

void CudaBackend::block_means(const Tensor& x, std::int64_t block_size, Tensor& out) {
  DeviceGuard guard(context_.device());
  block_means_f32(x.data<float>(), floats(out), x.size(0), x.size(1), x.size(2), x.size(3), x.stride(0), x.stride(1),
                  x.stride(2), block_size, context_.stream());
}

void CudaBackend::select_blocks(const BlockSelectArgs& args, const Tensor& qbar, const Tensor& kbar,
                                SelectedBlocks& out, Tensor& totals) {
  const BlockSelectShape shape{.batch = qbar.size(0),
                               .q_heads = qbar.size(1),
                               .kv_heads = kbar.size(1),
                               .query_blocks = qbar.size(2),
                               .head_dim = qbar.size(3),
                               .capacity = out.capacity,
                               .block_size = args.block_size,
                               .seq_len = args.seq_len,
                               .local_blocks = args.fixed.local_blocks,
                               .global_blocks = args.fixed.global_blocks,
                               .stride_blocks = args.fixed.stride_blocks,
                               .sparse_ratio = args.sparse_ratio,
                               .threshold = args.threshold,
                               .max_blocks = args.max_blocks,
                               .scale = args.scale,
                               .chunk_blocks = args.chunk_blocks,
                               .chunk0 = args.chunk0,
                               .chunk1 = args.chunk1};
  DeviceGuard guard(context_.device());
  select_blocks_f32(shape, floats(qbar), floats(kbar), out.key_blocks.data<std::int32_t>(),
                    out.row_begin.data<std::int64_t>(), out.counts.data<std::int32_t>(), out.mass.data<double>(),
                    totals.defined() ? totals.data<double>() : nullptr, context_.stream());
}

}  // namespace myriad::cuda
