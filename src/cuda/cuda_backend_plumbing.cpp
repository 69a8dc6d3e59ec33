// CudaBackend: scaled sums and copies (the elementwise plumbing of ops/elementwise.h) over the
// layout kernels: axpby for sums and scales, the conversion kernels for dtype changes, split /
// merge of heads for the strided views attention and RoPE use.
#include <array>
#include <optional>
#include <type_traits>
#include <utility>

#include "myriad/cuda/check.h"
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/kernels.h"
#include "heads_layout.h"
#include "kernel_pointers.h"

namespace myriad::cuda {

// b and out f32, or one of them 16-bit (mixed precision's residual stream; the dispatch point
// refused both 16-bit).
void CudaBackend::add_forward(const AddArgs& args, const Tensor& a, const Tensor& b, Tensor& out) {
  DeviceGuard guard(context_.device());
  const Tensor& typed_b = b.defined() ? b : a;  // no b: a null pointer of f32
  with_input_and_output_pointers("add_forward", typed_b, out, [&](const auto* b_data, auto* out_data) {
    using B = std::remove_cv_t<std::remove_pointer_t<decltype(b_data)>>;
    using Out = std::remove_pointer_t<decltype(out_data)>;
    if constexpr (std::is_same_v<B, float> || std::is_same_v<Out, float>) {
      axpby_f32(args.alpha, a.data<float>(), args.beta, b.defined() ? b_data : nullptr, out_data, out.numel(), false,
                context_.stream());
    } else {
      MYRIAD_THROW("add_forward: b " << b.describe() << " and out " << out.describe() << " are both 16-bit");
    }
  });
}

void CudaBackend::fill(const Tensor& t, float value) {
  DeviceGuard guard(context_.device());
  fill_f32(t.data<float>(), value, t.numel(), context_.stream());
}

void CudaBackend::add_backward(const AddArgs& args, const Tensor& grad_out, Tensor& grad_a, Tensor& grad_b) {
  DeviceGuard guard(context_.device());
  // The gradient that is grad_out itself last, so that the other still reads grad_out.
  const bool b_in_place = grad_b.defined() && grad_b.raw_data() == grad_out.raw_data();
  const std::pair<Tensor*, float> a_part{&grad_a, args.alpha}, b_part{&grad_b, args.beta};
  for (auto [grad, factor] : b_in_place ? std::array{a_part, b_part} : std::array{b_part, a_part}) {
    if (!grad->defined()) continue;
    axpby_f32(factor, grad_out.data<float>(), 0.0f, static_cast<const float*>(nullptr), grad->data<float>(),
              grad_out.numel(), args.accumulate_grads, context_.stream());
  }
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  const char* op = "copy";
  DeviceGuard guard(context_.device());
  cudaStream_t stream = context_.stream();
  const std::int64_t n = src.numel();
  if (!dst.is_contiguous()) {  // into a strided view: the heads views of rows (f32; 16-bit from its own format)
    const std::optional<HeadsGather> g = heads_gather(dst);
    const bool sixteen = dst.dtype() != DType::f32 && src.dtype() == dst.dtype();
    MYRIAD_CHECK(g && (src.dtype() == DType::f32 || sixteen) && dst.shape() == src.shape(),
                 op << " on " << device().str() << ": cannot write the strided " << dst.describe() << " with strides "
                    << shape_string(dst.strides())
                    << " (a device copy writes contiguous tensors and the heads views of packed rows, from f32 or "
                       "from the view's own 16-bit format)");
    if (sixteen) {
      if (!src.is_contiguous()) {
        Tensor packed = empty(src.shape(), src.dtype());
        copy(src, packed);
        return copy(packed, dst);
      }
      return merge_heads_view(static_cast<const std::uint16_t*>(src.raw_data()),
                              static_cast<std::uint16_t*>(dst.raw_data()), g->row_stride, g->batch_stride, g->batches,
                              g->T, g->H, g->D, stream);
    }
    if (dst.dtype() != DType::f32) {  // f32 into a 16-bit view: rounded first, then placed
      Tensor narrow = empty(src.shape(), dst.dtype());
      copy(src, narrow);
      return copy(narrow, dst);
    }
    if (src.is_contiguous()) {
      return merge_heads_view(src.data<float>(), dst.data<float>(), g->row_stride, g->batch_stride, g->batches, g->T,
                              g->H, g->D, stream);
    }
    Tensor packed = empty(src.shape());
    copy(src, packed);
    return copy(packed, dst);
  }
  if (src.is_contiguous()) {
    if (src.dtype() == dst.dtype()) {
      if (src.nbytes() > 0 && src.raw_data() != dst.raw_data()) {
        MYRIAD_CUDA_CHECK(
            cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream));
      }
      return;
    }
    const auto as_bf16 = [](const Tensor& t) { return static_cast<__nv_bfloat16*>(t.raw_data()); };
    const auto as_f16 = [](const Tensor& t) { return static_cast<__half*>(t.raw_data()); };
    if (src.dtype() == DType::f32) {
      if (dst.dtype() == DType::bf16) return convert_f32_to_bf16(src.data<float>(), as_bf16(dst), n, stream);
      return convert_f32_to_f16(src.data<float>(), as_f16(dst), n, stream);
    }
    if (dst.dtype() == DType::f32) {
      if (src.dtype() == DType::bf16) return convert_bf16_to_f32(as_bf16(src), dst.data<float>(), n, stream);
      return convert_f16_to_f32(as_f16(src), dst.data<float>(), n, stream);
    }
    Tensor widened = empty(src.shape());  // bf16 <-> f16 through f32 (exact, then one rounding)
    copy(src, widened);
    return copy(widened, dst);
  }
  if (src.dtype() != DType::f32) {  // a 16-bit heads view: gathered in its format, converted after
    const std::optional<HeadsGather> g = heads_gather(src);
    MYRIAD_CHECK(g.has_value(), op << " on " << device().str() << ": cannot read the strided " << src.describe()
                                   << " with strides " << shape_string(src.strides())
                                   << " (a 16-bit source is read as a heads view of packed rows)");
    Tensor packed = dst.dtype() == src.dtype() ? dst : empty(src.shape(), src.dtype());
    split_heads_view(static_cast<const std::uint16_t*>(src.raw_data()), g->row_stride, g->batch_stride,
                     static_cast<std::uint16_t*>(packed.raw_data()), g->batches, g->T, g->H, g->D, stream);
    if (packed.raw_data() != dst.raw_data()) copy(packed, dst);
    return;
  }
  MYRIAD_CHECK(dst.dtype() == DType::f32, op << " on " << device().str() << ": a strided f32 source " << src.describe()
                                             << " is copied into f32 only (convert after gathering)");
  if (const std::optional<HeadsGather> g = heads_gather(src)) {  // (B, H, T, D) heads of rows, or rows of heads
    return split_heads_view(src.data<float>(), g->row_stride, g->batch_stride, dst.data<float>(), g->batches, g->T,
                            g->H, g->D, stream);
  }
  if (const auto row_stride = heads_row_stride(src, false)) {  // (B, T, H, D) rows of heads
    const std::int64_t B = src.size(0), T = src.size(1), H = src.size(2), D = src.size(3);
    Tensor heads = empty({B, H, T, D});
    split_heads_view(src.data<float>(), *row_stride, src.stride(0), heads.data<float>(), B, T, H, D, stream);
    return merge_heads_f32(heads.data<float>(), dst.data<float>(), H * D, B, T, H, D, stream);
  }
  MYRIAD_THROW(op << " on " << device().str() << ": cannot read " << src.describe() << " with strides "
                  << shape_string(src.strides())
                  << " (a device copy reads contiguous tensors and the heads views of packed rows)");
}

}  // namespace myriad::cuda
