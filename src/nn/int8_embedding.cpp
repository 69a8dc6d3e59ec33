// nn::int8_embedding_lookup (nn/int8_embedding.h): the ids checked on the host, placed where the
// int8 table lives, and the rows dequantised there.
#include "myriad/nn/int8_embedding.h"

#include "myriad/core/error.h"
#include "myriad/nn/host_tokens.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

void int8_embedding_lookup(const Tensor& ids, const Parameter& table, Tensor& out) {
  MYRIAD_CHECK(table.int8_values.defined() && table.shard_dim < 0,
               "int8_embedding_lookup: '" << table.name << "' holds no whole INT8 table");
  const Tensor checked = checked_host_tokens("int8_embedding_forward", "id", ids, table.int8_values.size(0));
  const Tensor placed = ops::placement_of(table.int8_values, table.name.c_str()).from_host(checked);
  int8_embedding_forward(Int8Args{.group_size = table.int8_group}, placed, table.int8_values, table.int8_scales, out);
}

}  // namespace myriad::nn
