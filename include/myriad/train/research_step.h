// ResearchStep — the research API's training step in parts over the caller's batches (docs/
// python.md): forward(), backward(), optimizer_step(), evaluate_on(), the batch step() would take,
// and the owned optimizer state.
//
// Invariants: forward + backward + optimizer_step on the rows train_batch(s) gives each rank is
// step() at s bit for bit — the same micro-batches run through the Trainer's executors with the
// same loss normalisation (1 / the global batch's valid targets), reduction and update. Every
// call is collective over the job; each returns the same value on every rank. A batch or a
// reduction in progress does not survive a whole step() (discard()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "myriad/train/data/step_data.h"
#include "myriad/train/owned_slice.h"
#include "myriad/train/rank_state.h"
#include "myriad/train/trainer.h"

namespace myriad::train {

class ResearchStep {
 public:
  // `state`, `trainer` and `data` outlive this.
  ResearchStep(RankState& state, Trainer& trainer, StepData& data) : state_(state), trainer_(trainer), data_(data) {}

  double forward(const Tensor& ids, const Tensor& targets);
  double evaluate_on(const Tensor& ids, const Tensor& targets);
  void backward(double scale, bool sync);
  void zero_grad();
  StepMetrics optimizer_step(std::optional<double> lr);
  std::pair<Tensor, Tensor> train_batch(std::int64_t step) const;
  std::vector<OwnedSlice> owned_slices();
  void discard();  // a whole step() begins: the batch and reduction in progress are dropped

 private:
  // Tokens inside the vocabulary, targets too or the ignore index; the same rows on every tp, pp
  // and cp rank of a replica (a collective check). `what` names the call in errors.
  void check_caller_rows(const char* what, const Tensor& host_ids, const Tensor& host_targets);
  // The caller's rows as micro-batches (cp: this rank's chunks), checked.
  void split_caller_batch(const Tensor& ids, const Tensor& targets);
  const nn::ContextParallel& context() const;

  RankState& state_;
  Trainer& trainer_;
  StepData& data_;
  // The last forward()'s micro-batches and global valid targets; whether the gradients were
  // reduced already; the loss sum / tokens of forward()s since the last update.
  std::vector<Tensor> ids_, targets_;
  std::int64_t valid_ = 0;
  bool reduced_ = false;
  double loss_sum_ = 0.0;
  std::int64_t loss_tokens_ = 0;
};

}  // namespace myriad::train
