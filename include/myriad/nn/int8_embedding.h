// nn::int8_embedding_lookup — the token rows of a whole (tp 1) embedding parameter that holds
// weight-only INT8 rows (GptModel::attach_int8): out (N, C) = the rows of `ids` (N) i32, host or
// placed, dequantised where the table lives (ops/int8_linear.h: int8_embedding_forward). The ids
// are checked against the table's rows on the host first (an id out of range throws naming it).
#pragma once

#include "myriad/core/tensor.h"
#include "myriad/nn/parameter_store.h"

namespace myriad::nn {

void int8_embedding_lookup(const Tensor& ids, const Parameter& table, Tensor& out);

}  // namespace myriad::nn
