// BatchPrefetch — the next step's training batches read in a background thread while this step
// computes, so that a slow source (block-compressed shards decompress a block per window) costs
// no step time.
//
// The batches of step s are a pure function of s (the sampler draws from (seed, step, sample)),
// so reading them early changes nothing: take(s, ...) hands over the batches it prefetched for s,
// or reads them now when it prefetched another step (the first step, a resume, a reload), then
// starts reading s + 1 into its own buffers. Results are copied into the caller's tensors (so
// views of them stay valid). An error of the background read (a corrupt block) is rethrown by
// the take() that wanted those batches. Exactly one read runs at a time; the destructor waits
// for it.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <vector>

#include "myriad/core/tensor.h"

namespace myriad::train {

class BatchPrefetch {
 public:
  // fill(step, ids, targets): the step's micro-batches into tensors shaped like the caller's.
  using Fill = std::function<void(std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets)>;

  // `ids` / `targets`: the caller's tensors, whose shapes the prefetch buffers copy.
  BatchPrefetch(Fill fill, const std::vector<Tensor>& ids, const std::vector<Tensor>& targets);
  ~BatchPrefetch();
  BatchPrefetch(const BatchPrefetch&) = delete;
  BatchPrefetch& operator=(const BatchPrefetch&) = delete;

  // The batches of `step` into ids / targets; returns the seconds spent waiting for or reading
  // them (the step's data wait).
  double take(std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets);
  std::int64_t prefetch_hits() const { return hits_; }

 private:
  void start(std::int64_t step);

  Fill fill_;
  std::vector<Tensor> ids_, targets_;  // the background read's buffers
  std::future<void> pending_;
  std::int64_t pending_step_ = -1;
  std::int64_t hits_ = 0;
};

}  // namespace myriad::train
