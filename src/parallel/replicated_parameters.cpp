// ReplicatedParameters: bucket all-reduces over the full gradient buffer (see
// replicated_parameters.h).
#include "myriad/parallel/replicated_parameters.h"

#include "flat_copy.h"
#include "myriad/distributed/scalar_reduce.h"

namespace myriad::parallel {

ReplicatedParameters::ReplicatedParameters(nn::GptModel& model, distributed::Communicator& dp,
                                           const DataParallelOptions& options, const optim::AdamWConfig& adam)
    : ParameterUnits(model, dp, options, Sharding{options.bucket_elements, false}) {
  attach(adam);
}

Tensor ReplicatedParameters::owned_grads(const ZeroSegment& s) const {
  return flat_view(store_.flat_grads(), s.begin, s.end);
}

void ReplicatedParameters::launch_bucket(int bucket) {
  const ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(bucket)];
  Pending p;
  p.bucket = bucket;
  p.work = comm_of(b).all_reduce_async(flat_view(store_.flat_grads(), b.begin, b.end));
  pending_.push_back(std::move(p));
}

double ReplicatedParameters::gradient_sum_squares() const {
  // Dense gradients are complete here; expert ones cover this rank's experts only: summed over ep.
  distributed::Communicator* ep = options_.expert_parallel;
  if (ep == nullptr || ep->size() == 1) return optimizer_->grad_sum_squares();
  const auto [dense, expert] = optimizer_->grad_sum_squares_by_kind();
  return dense + distributed::sum_over_ranks(*ep, expert);
}

}  // namespace myriad::parallel
