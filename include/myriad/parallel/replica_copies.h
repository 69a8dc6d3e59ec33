// ReplicaCopies — which ranks hold the copies of each element of a replicated (zero_stage 0) flat
// buffer, for the exchanges that average or sum whole buffers themselves (local SGD's parameters,
// 1-bit Adam's momenta).
//
// ep 1: every element has one copy per dp rank; the whole buffer is one range over dp.
// ep > 1 (a mixture of experts with expert parallelism): the dense elements — the ranges of the
// dense buckets — have one copy per dp rank, while an expert bucket's elements are held only by
// the expert-data group (the ranks holding the same experts: RankGrid::expert_data_group); the ranks of one ep group
// hold different experts, so an expert element averaged over dp would mix different parameters.
// Invariant: the ranges of the two kinds are disjoint, in bucket (flat) order, and cover every
// element that is not padding (padding stays 0 in every buffer).
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"

namespace myriad::parallel {

class ParameterUnits;

struct FlatRange {
  std::int64_t begin = 0, end = 0;  // flat element range
  std::int64_t size() const { return end - begin; }
};

struct ReplicaCopies {
  distributed::Communicator* dense = nullptr;          // the dp group
  distributed::Communicator* experts = nullptr;        // ep > 1: the expert-data group; nullptr at ep 1
  std::vector<FlatRange> dense_ranges, expert_ranges;  // ep > 1 only

  bool split() const { return experts != nullptr; }
  // Starts t <- the sum over each element's copies (one collective per range at ep > 1); the
  // caller waits on every handle (on the stream) before reading t.
  std::vector<distributed::WorkHandle> start_sum(const Tensor& t) const;
  // t <- t / (the number of copies of each element), in place (after a sum: the mean).
  void divide_by_copies(Tensor& t) const;
};

// The copies of `units`' flat buffers laid out like the parameter store's values and gradients
// (ReplicatedParameters; at ep > 1 the options' expert-data group), from the buckets.
ReplicaCopies replica_copies(ParameterUnits& units);
// The same groups over the optimizer's packed moments (m, v: the segments back to back, no
// padding), from the optimizer's segments.
ReplicaCopies moment_copies(ParameterUnits& units);

}  // namespace myriad::parallel
