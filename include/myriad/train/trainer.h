// Trainer — the step loop of one rank: step() runs one optimizer step over the global batch
// (every micro-batch through the rank's pipeline schedule, the loss normalised by the valid
// tokens of the whole global batch, gradients reduced over dp during the last backward, the
// tied embedding's halves summed between the end stages, clipping and the update), evaluate()
// the validation loss; the update, the non-finite guard and the executors are shared with the
// research step (research_step.h).
//
// Invariants: the batch of step s is StepData's (a function of the seed and s) and the update is
// apply_update's, so step() at s and the research step's forward + backward + optimizer_step on
// train_batch(s) are the same computation bit for bit. State it owns: the schedule, the step
// executor, the metrics collector, the non-finite counter; the model, DataParallel and the step
// counter are the RankState's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "myriad/nn/fp8_scaling.h"
#include "myriad/optim/lr_schedule.h"
#include "myriad/parallel/pipeline_executor.h"
#include "myriad/train/cpu_gemm_tuning.h"
#include "myriad/train/data/step_data.h"
#include "myriad/train/metrics/memory_report.h"
#include "myriad/train/metrics/step_metrics.h"
#include "myriad/train/metrics/step_metrics_collector.h"
#include "myriad/train/micro_batch_graph.h"
#include "myriad/train/rank_state.h"

namespace myriad::train {

// An executor of this rank's pipeline schedule over `micro_batches` micro-batches, wired to
// DataParallel (its observers start each micro-batch's reduction unless *held_back is true).
std::unique_ptr<parallel::PipelineExecutor> make_step_executor(RankState& state, int micro_batches,
                                                               const bool* held_back = nullptr);

class Trainer {
 public:
  // `state`, `data` and `cpu_gemm` (training.cpu_gemm's plan; null: none) outlive the trainer.
  Trainer(RankState& state, StepData& data, CpuGemmTuning* cpu_gemm = nullptr);

  StepMetrics step();
  double evaluate();  // mean validation loss over training.eval_batches micro-batches

  // Parts shared with the research step.
  nn::LossSum forward_loss(const Tensor& ids, const Tensor& targets) { return pipeline_->forward_only(ids, targets); }
  // The executor for `micro_batches` micro-batches (the step's, or one made for that count).
  parallel::PipelineExecutor& executor_for(int micro_batches);
  // While true the observers hold the data-parallel reduction back (a research backward(sync=false)).
  void hold_back_reduction(bool held) { held_back_ = held; }
  // After a backward pass through the schedule: sync = the tied embedding's halves summed and the
  // gradients reduced over dp (finish_step), else only the reductions in flight retired.
  void finish_backward_pass(bool sync);
  // The before-update hook, clipping and the update at lr, the loss scaler, the compute copy, the
  // FP8 scales; the step counter + 1.
  optim::OptimizerStepStats apply_update(float lr, double loss_scale);
  // training.precision fp8: the tensors clipped at the last update's step (-1: not fp8).
  int fp8_saturated() const { return fp8_saturated_; }
  // training.max_nonfinite_steps: throws when too many steps in a row were not finite.
  void check_finite_progress(const StepMetrics& metrics, double loss_scale);

  Recompute recompute() const { return recompute_; }
  const optim::LrSchedule& schedule() const { return schedule_; }
  void set_schedule(const optim::LrSchedule& schedule);
  void set_before_update(std::function<void()> hook) { before_update_ = std::move(hook); }
  MemoryReport memory_report() const;
  double flops_per_token() const { return flops_per_token_; }
  const StepMetricsCollector& metrics() const { return *metrics_; }
  // training.cuda_graphs: the micro-batch graph of the step executor (nullptr when off).
  const MicroBatchGraph* micro_batch_graph() const { return graph_.get(); }
  void set_compute_delay_for_testing(double seconds) { compute_delay_ = seconds; }
  CpuGemmTuning* cpu_gemm() { return cpu_gemm_; }  // training.cpu_gemm's plan (null: none)

 private:
  void sync_tied_embedding();
  void end_fp8_step(nn::Fp8Scaling& fp8);

  RankState& state_;
  StepData& data_;
  CpuGemmTuning* cpu_gemm_;
  optim::LrSchedule schedule_;
  Recompute recompute_ = Recompute::none;
  double flops_per_token_ = 0.0;      // GptModel::flops_per_token at training.seq_len
  nn::ActivationMemory activations_;  // fixed for the run (model, B, T, recompute)
  bool held_back_ = false;
  std::unique_ptr<parallel::PipelineExecutor> pipeline_;                        // the step's: this rank's schedule
  std::map<int, std::unique_ptr<parallel::PipelineExecutor>> other_executors_;  // other micro-batch counts
  std::unique_ptr<StepMetricsCollector> metrics_;  // comm, throughput, memory, stragglers, metrics files
  std::unique_ptr<MicroBatchGraph> graph_;         // training.cuda_graphs, where the layout allows
  std::function<void()> before_update_;
  Tensor peer_embedding_grad_;  // pp > 1, tied: the other end's embedding gradient
  int nonfinite_steps_in_a_row_ = 0;
  int fp8_saturated_ = -1;  // training.precision fp8: tensors clipped at the last update's step (-1: not fp8)
  double compute_delay_ = 0.0;
};

}  // namespace myriad::train
