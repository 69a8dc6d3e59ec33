// GptModel's weight-only INT8 inference: int8 weights attached to parameters and read by the
// forward (nn::linear_forward / grouped_linear_forward with a Parameter, the token embedding's
// lookup in embed()); training code never sees them. Invariant after release_f32_copies(): an
// int8-attached parameter holds no f32 value (embed() and GptModel::decode look the token
// embedding's int8 rows up: nn::int8_embedding_lookup).
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
  MYRIAD_CHECK((p.shape.size() == 2 || p.shape.size() == 3) && q.shape() == p.shape && q.dtype() == DType::i8,
               "INT8 weight '" << name << "' is " << q.describe() << ", the parameter " << shape_string(p.shape)
                               << " (an int8 matrix, or one per expert)");
  Shape expected = p.shape;
  expected.back() = int8_groups(p.shape.back(), group_size);
  MYRIAD_CHECK(scales.dtype() == DType::f32 && scales.shape() == expected,
               "INT8 weight '" << name << "': scales " << scales.describe() << ", expected f32 "
                               << shape_string(expected) << " (group_size " << group_size << ")");
  const ops::Placement& placement = store_.placement();
  p.int8_values = placement.from_host(q);
  p.int8_scales = placement.from_host(scales);
  p.int8_group = group_size;
}

void GptModel::release_f32_copies() {
  store_.release_int8_values([](const Parameter&) { return false; });
}

bool GptModel::has_int8() const {
  for (std::size_t i = 0; i < store_.size(); ++i) {
    if (store_[i].int8_values.defined()) return true;
  }
  return false;
}

}  // namespace myriad::nn
