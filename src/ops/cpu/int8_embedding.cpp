// CPU INT8 embedding lookup (ops/int8_linear.h): each looked-up row dequantised (q * its group's
// scale, exactly as dequantize_int8) into the output; ids checked first, so a bad id changes nothing.
#include "myriad/core/error.h"
#include "myriad/ops/int8_linear.h"

namespace myriad::cpu {

void int8_embedding_forward(const Int8Args& args, const Tensor& ids, const Tensor& q, const Tensor& scales,
                            Tensor& out) {
  const std::int64_t V = q.size(0), C = q.size(1), N = ids.numel(), groups = int8_groups(C, args.group_size);
  const std::int32_t* id = ids.data<std::int32_t>();
  for (std::int64_t n = 0; n < N; ++n) {
    MYRIAD_CHECK(id[n] >= 0 && id[n] < V, "int8_embedding_forward: ids[" << n << "] = " << id[n]
                                                                         << " is outside the table's [0, " << V
                                                                         << ") rows");
  }
  const std::int8_t* table = q.data<std::int8_t>();
  const float* s = scales.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int8_t* row = table + static_cast<std::int64_t>(id[n]) * C;
    const float* row_scales = s + static_cast<std::int64_t>(id[n]) * groups;
    float* dst = o + n * C;
    for (std::int64_t c = 0; c < C; ++c) {
      dst[c] = static_cast<float>(row[c]) * row_scales[args.group_size == 0 ? 0 : c / args.group_size];
    }
  }
}

}  // namespace myriad::cpu
