// GptModel's weight-only INT8 inference: int8 weights attached to parameters, read by the forward
// linear layers (nn::linear_forward with a Parameter); training code never sees them.
#include "myriad/nn/gpt_model.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/int8_linear.h"

namespace myriad::nn {

void GptModel::attach_int8(const std::string& name, const Tensor& q, const Tensor& scales, std::int64_t group_size) {
  MYRIAD_CHECK(split_.tp_size() == 1 && split_.first_stage && split_.last_stage && split_.ep_size() == 1,
               "INT8 weights need the whole model on one rank (tp, pp and ep 1): parameter '" << name << "'");
  std::size_t index = store_.size();
  for (std::size_t i = 0; i < store_.size(); ++i) {
    if (store_[i].name == name) index = i;
  }
  MYRIAD_CHECK(index < store_.size(), "INT8 weight '" << name << "' names no parameter of the model");
  Parameter& p = store_[index];
  MYRIAD_CHECK(p.shape.size() == 2 && q.shape() == p.shape, "INT8 weight '"
                                                                << name << "' has shape " << shape_string(q.shape())
                                                                << ", the parameter " << shape_string(p.shape));
  Tensor weight = Tensor::empty(p.shape);
  dequantize_int8(Int8Args{.group_size = group_size}, q, scales, weight);  // checks dtypes and the scales' shape
  const ops::Placement& placement = store_.placement();
  copy(placement.from_host(weight), p.value);
  p.int8_values = placement.from_host(q);
  p.int8_scales = placement.from_host(scales);
  p.int8_group = group_size;
}

bool GptModel::has_int8() const {
  for (std::size_t i = 0; i < store_.size(); ++i) {
    if (store_[i].int8_values.defined()) return true;
  }
  return false;
}

}  // namespace myriad::nn
