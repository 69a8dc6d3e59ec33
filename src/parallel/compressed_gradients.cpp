// CompressedGradients: one compressed sum of the (dense) gradients per step, expert buckets summed
// exactly over their own group (see compressed_gradients.h).
#include "myriad/parallel/compressed_gradients.h"

#include "flat_copy.h"

namespace myriad::parallel {

CompressedGradients::CompressedGradients(ParameterUnits& units, const distributed::CompressionSpec& spec)
    : units_(units), spec_(spec), sharded_(units.stage() >= 1) {
  if (sharded_) {
    units.compress_dense_reduce_scatters(spec);
    return;
  }
  const distributed::Communicator* ep = units.options().expert_parallel;
  const std::int64_t total = units.store().flat_grads().numel();
  if (ep == nullptr || ep->size() == 1) {
    sum_ = std::make_unique<distributed::CompressedSum>(units.dp(), total, spec, units.placement());
    return;
  }
  expert_data_ = units.options().expert_data_parallel;
  MYRIAD_CHECK(expert_data_ != nullptr, "gradient compression with ep " << ep->size() << ": no expert-data group");
  std::int64_t dense_elements = 0;
  for (const ZeroBucket& b : units.layout().buckets()) {
    (b.expert ? experts_ : dense_).push_back(Range{b.begin, b.end});
    if (!b.expert) dense_elements += b.size();
  }
  dense_grads_ = units.placement().empty({dense_elements});
  sum_ = std::make_unique<distributed::CompressedSum>(units.dp(), dense_elements, spec, units.placement());
}

void CompressedGradients::finish_step() {
  if (sharded_) return;  // the bucket reductions were the (compressed) exchange
  Tensor grads = units_.store().flat_grads();
  if (expert_data_ == nullptr) return sum_->sum(grads);
  std::int64_t at = 0;
  for (const Range& r : dense_) {
    Tensor packed = flat_view(dense_grads_, at, at + (r.end - r.begin));
    copy_floats(flat_view(grads, r.begin, r.end), packed);
    at += r.end - r.begin;
  }
  for (const Range& r : experts_) expert_data_->all_reduce_async(flat_view(grads, r.begin, r.end))->wait_on_stream();
  sum_->sum(dense_grads_);
  at = 0;
  for (const Range& r : dense_) {
    Tensor target = flat_view(grads, r.begin, r.end);
    copy_floats(flat_view(dense_grads_, at, at + (r.end - r.begin)), target);
    at += r.end - r.begin;
  }
}

}  // namespace myriad::parallel
