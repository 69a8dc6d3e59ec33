// ReplicaCopies: the dense and expert ranges of a replicated flat buffer and their groups (see
// replica_copies.h).
#include "myriad/parallel/replica_copies.h"

#include "flat_copy.h"
#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"
#include "myriad/parallel/parameter_units.h"

namespace myriad::parallel {

namespace {
void divide(const Tensor& t, const FlatRange& r, int copies) {
  Tensor view = flat_view(t, r.begin, r.end);
  add_forward(AddArgs{.alpha = 1.0f / static_cast<float>(copies), .beta = 0.0f}, view, Tensor(), view);
}
}  // namespace

ReplicaCopies replica_copies(ParameterUnits& units) {
  ReplicaCopies copies;
  copies.dense = &units.dp();
  const distributed::Communicator* ep = units.options().expert_parallel;
  if (ep == nullptr || ep->size() == 1) return copies;
  copies.experts = units.options().expert_data_parallel;
  MYRIAD_CHECK(copies.experts != nullptr, "parallel.ep " << ep->size() << ": no expert-data group");
  for (const ZeroBucket& b : units.layout().buckets()) {
    (b.expert ? copies.expert_ranges : copies.dense_ranges).push_back(FlatRange{b.begin, b.end});
  }
  return copies;
}

ReplicaCopies moment_copies(ParameterUnits& units) {
  ReplicaCopies copies = replica_copies(units);
  if (!copies.split()) return copies;
  copies.dense_ranges.clear();
  copies.expert_ranges.clear();
  std::int64_t offset = 0;
  for (const optim::OptimizerSegment& s : units.optimizer().segments()) {
    std::vector<FlatRange>& ranges = s.expert ? copies.expert_ranges : copies.dense_ranges;
    const std::int64_t end = offset + s.grad.numel();
    if (!ranges.empty() && ranges.back().end == offset) {
      ranges.back().end = end;  // adjacent segments of one kind: one range
    } else {
      ranges.push_back(FlatRange{offset, end});
    }
    offset = end;
  }
  return copies;
}

std::vector<distributed::WorkHandle> ReplicaCopies::start_sum(const Tensor& t) const {
  std::vector<distributed::WorkHandle> work;
  if (!split()) {
    work.push_back(dense->all_reduce_async(t));
    return work;
  }
  for (const FlatRange& r : dense_ranges) work.push_back(dense->all_reduce_async(flat_view(t, r.begin, r.end)));
  for (const FlatRange& r : expert_ranges) work.push_back(experts->all_reduce_async(flat_view(t, r.begin, r.end)));
  return work;
}

void ReplicaCopies::divide_by_copies(Tensor& t) const {
  if (!split()) {
    add_forward(AddArgs{.alpha = 1.0f / static_cast<float>(dense->size()), .beta = 0.0f}, t, Tensor(), t);
    return;
  }
  for (const FlatRange& r : dense_ranges) divide(t, r, dense->size());
  for (const FlatRange& r : expert_ranges) divide(t, r, experts->size());
}

}  // namespace myriad::parallel
