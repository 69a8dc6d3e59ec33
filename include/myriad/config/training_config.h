// TrainingConfig — the `training:` section: batch, schedule, optimizer, precision, evaluation.
//
// Batch arithmetic: global_batch_size = micro_batch * gradient_accumulation * parallel.dp
// sequences per optimizer step. Give any two of global_batch_size / gradient_accumulation (0 =
// derived) and the third follows; giving both must agree (RunConfig::validate). Values that depend
// on other sections (seq_len from model.context_length, the batch from parallel.dp) are filled in by
// RunConfig::resolved().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "myriad/config/choices.h"
#include "myriad/config/field.h"

namespace myriad {

struct TrainingConfig {
  static constexpr std::string_view kSection = "training";
  static constexpr std::string_view kSectionMeaning = "batch, learning-rate schedule, optimizer, precision, evaluation";

  std::int64_t global_batch_size = 0;  // sequences per optimizer step; 0 = micro_batch * gradient_accumulation * dp
  int micro_batch = 8;                 // sequences per micro-batch per dp rank
  int gradient_accumulation = 0;       // micro-batches per step per dp rank; 0 = derived from global_batch_size (or 1)
  int seq_len = 0;                     // tokens per sequence (T); 0 = model.context_length; at most context_length
  std::int64_t steps = 1000;           // optimizer steps
  double lr = 6e-4;                    // peak learning rate (after warmup)
  std::optional<double> min_lr;        // floor the schedule decays to; unset = 0.1 * lr
  std::int64_t warmup_steps = 0;       // linear warmup from 0 to lr over these steps
  LrScheduleKind schedule = LrScheduleKind::cosine;  // decay from lr to min_lr after warmup: cosine | linear | constant
  double weight_decay = 0.1;                         // AdamW decoupled weight decay
  std::vector<std::string> no_decay = {"norm", "bias"};  // parameter kinds without weight decay (norm, bias, embedding)
  double beta1 = 0.9;                                    // AdamW first-moment decay
  double beta2 = 0.95;                                   // AdamW second-moment decay
  double adam_eps = 1e-8;                                // AdamW denominator epsilon
  double grad_clip = 1.0;                                // clip the global gradient norm to this; 0 = off
  OptimizerKind optimizer = OptimizerKind::adamw;        // adamw | onebit_adam
  std::int64_t freeze_step = 0;                          // onebit_adam: exact Adam steps first; 0 = auto
  GradientCompression gradient_compression = GradientCompression::none;  // adamw: none | int8 | topk
  std::optional<double> topk_ratio;                                      // topk: fraction sent; unset = 0.01
  SyncMode sync = SyncMode::every_step;                                  // every_step | local (local SGD / DiLoCo)
  int local_steps = 0;                                                   // local: inner steps per outer step; 0 = 16
  std::optional<double> outer_lr;                                        // local: outer learning rate; unset = 0.7
  std::optional<double> outer_momentum;                                  // local: outer Nesterov momentum; unset = 0.9
  bool outer_overlap = false;                 // local: overlap the outer all-reduce with the next inner step
  ComputeDevice device = ComputeDevice::cpu;  // cpu | cuda (a GPU per rank, data parallel, dense models)
  bool cuda_graphs = false;                   // cuda: replay each micro-batch's forward + backward as a CUDA graph
  Precision precision = Precision::fp32;      // compute precision: fp32 | bf16 | fp16 (loss scaling) | fp8
  std::int64_t fp8_amax_history = 16;         // fp8: steps of amax history a delayed scale covers
  std::int64_t fp8_margin = 0;                // fp8: powers of two of headroom below the format's largest value
  double initial_loss_scale = 65536.0;        // fp16: the dynamic loss scale to start from
  std::int64_t loss_scale_window = 1000;      // fp16: finite steps in a row before the scale doubles
  double min_loss_scale = 1.0;                // fp16: the scale never halves below this
  Recompute recompute = Recompute::none;      // activation recompute: none | selective (attention) | full (whole block)
  std::uint64_t seed = 1337;                  // seed of initialisation, data order and dropout
  std::int64_t eval_every = 100;              // steps between validation-loss evaluations; 0 = never
  int eval_batches = 8;                       // micro-batches per evaluation
  int max_nonfinite_steps = 10;               // consecutive non-finite steps before the run stops; 0 = never

  // cpu: each GEMM's route — fixed (the library's rule) | measured (per shape, timed after step 1)
  CpuGemmChoice cpu_gemm = CpuGemmChoice::fixed;

  // Per-key checks plus min_lr <= lr and warmup_steps <= steps (the batch is checked by RunConfig).
  void validate() const;
  // onebit_adam's freeze step: freeze_step, or max(warmup_steps, steps / 5, 1).
  std::int64_t settled_freeze_step() const;
  int settled_local_steps() const;  // local_steps, or 16

  static const std::vector<Field<TrainingConfig>>& fields();
  bool operator==(const TrainingConfig&) const = default;
};

}  // namespace myriad
