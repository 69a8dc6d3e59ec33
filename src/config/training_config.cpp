// TrainingConfig: its key table and the checks that need only this section.
#include "myriad/config/training_config.h"

#include <algorithm>

#include "myriad/core/error.h"

namespace myriad {

const std::vector<Field<TrainingConfig>>& TrainingConfig::fields() {
  using T = TrainingConfig;
  static const std::vector<Field<T>> table = {
      make_field("global_batch_size", &T::global_batch_size,
                 "sequences per optimizer step; 0 = micro_batch * gradient_accumulation * parallel.dp",
                 {.aliases = {"batch_size"}, .check = at_least(0)}),
      make_field("micro_batch", &T::micro_batch, "sequences per micro-batch per dp rank", {.check = at_least(1)}),
      make_field("gradient_accumulation", &T::gradient_accumulation,
                 "micro-batches per step per dp rank; 0 = global_batch_size / (micro_batch * dp), or 1",
                 {.check = at_least(0)}),
      make_field("seq_len", &T::seq_len,
                 "tokens per sequence T; 0 = model.context_length; at most model.context_length",
                 {.check = at_least(0)}),
      make_field("steps", &T::steps, "optimizer steps", {.check = at_least(1)}),
      make_field("lr", &T::lr, "peak learning rate, reached at the last warmup step", {.check = greater_than(0)}),
      make_field("min_lr", &T::min_lr,
                 "learning rate of the run's last step (the end of the decay); auto = 0.1 * lr; at most lr",
                 {.check = at_least(0)}),
      make_field("warmup_steps", &T::warmup_steps,
                 "linear warmup: step s (0-based) trains at lr * (s + 1) / warmup_steps, so the first step at lr / "
                 "warmup_steps, never at 0; at most steps",
                 {.aliases = {"warmup"}, .check = at_least(0)}),
      make_field("schedule", &T::schedule, "decay from lr (step warmup_steps) to min_lr (the last step, steps - 1)"),
      make_field("weight_decay", &T::weight_decay, "AdamW decoupled weight decay", {.check = at_least(0)}),
      make_field("no_decay", &T::no_decay, "parameter kinds excluded from weight decay",
                 {.allowed = {"norm", "bias", "embedding"}}),
      make_field("beta1", &T::beta1, "AdamW first-moment decay", {.check = in_range(0, 1, true, false)}),
      make_field("beta2", &T::beta2, "AdamW second-moment decay", {.check = in_range(0, 1, true, false)}),
      make_field("adam_eps", &T::adam_eps, "AdamW denominator epsilon", {.check = greater_than(0)}),
      make_field("grad_clip", &T::grad_clip, "clip the global gradient norm to this; 0 = off", {.check = at_least(0)}),
      make_field("optimizer", &T::optimizer,
                 "adamw, or onebit_adam: AdamW for freeze_step steps, then the variance frozen and the momentum "
                 "exchanged as signs with a scale per 64 elements and error feedback (1/21 of the bytes; "
                 "zero_stage 0; with ep > 1 the expert momenta summed over the expert-data group; "
                 "docs/parallelism.md)"),
      make_field("freeze_step", &T::freeze_step,
                 "onebit_adam: exact AdamW steps before the compressed phase; 0 = max(warmup_steps, steps / 5, 1)",
                 {.check = at_least(0)}),
      make_field(
          "gradient_compression", &T::gradient_compression,
          "adamw over dp: none (exact all-reduce), int8 (per-block scale, ~1/4 of the bytes) or topk (the "
          "largest topk_ratio of each chunk), with error feedback on both sides of the exchange; on cpu or cuda, "
          "any zero_stage (1-3: each dense bucket's reduce-scatter compressed, the error kept on the sender); with "
          "ep > 1 the dense gradients compressed, the experts' summed exactly"),
      make_field("topk_ratio", &T::topk_ratio, "gradient_compression topk: fraction of the elements sent; auto = 0.01",
                 {.check = in_range(0, 1, false, true)}),
      make_field("sync", &T::sync,
                 "every_step (gradients all-reduced each step), or local: local SGD / DiLoCo — each dp replica "
                 "takes local_steps AdamW steps on its own data, then the replicas average their parameter "
                 "changes and take an outer Nesterov step (zero_stage 0; with ep > 1 the experts averaged over the "
                 "expert-data group; docs/parallelism.md)"),
      make_field("local_steps", &T::local_steps, "sync local: inner steps between outer steps; 0 = 16",
                 {.check = at_least(0)}),
      make_field("outer_lr", &T::outer_lr,
                 "sync local: outer learning rate; auto = 0.7 (1 with momentum 0 = averaging)",
                 {.check = greater_than(0)}),
      make_field("outer_momentum", &T::outer_momentum, "sync local: outer Nesterov momentum; auto = 0.9",
                 {.check = in_range(0, 1, true, false)}),
      make_field("outer_overlap", &T::outer_overlap,
                 "sync local: run the outer all-reduce during the next inner step and apply the outer step one "
                 "step late (keeping that step's local progress)"),
      make_field("device", &T::device,
                 "where the model computes: cpu, or cuda (the local rank's GPU, one per rank: data parallelism over "
                 "NCCL with any zero_stage, tensor, sequence and pipeline parallelism, dense and MoE models "
                 "(expert parallelism included), gradient compression, 1-bit Adam and local SGD, head dim 64 or 128, "
                 "fp32, bf16 or fp16)"),
      make_field(
          "cuda_graphs", &T::cuda_graphs,
          "cuda: record a micro-batch's forward and backward as a CUDA graph once and replay it for the "
          "micro-batches after (fewer kernel launches from the host); tensor parallelism's NCCL calls and the "
          "data-parallel reductions and ZeRO 3 gathers of a recorded micro-batch are recorded with the pass "
          "(their exposed time inside a replay is not measured), as are context parallelism's ring and "
          "capacity-routed experts' all-to-alls; where a layout or setting rules it out (pp, dropless MoE) the run "
          "says why at start-up and runs without"),
      make_field("cpu_gemm", &T::cpu_gemm,
                 "cpu: how each GEMM picks its route. fixed: the process's library (MYRIAD_CPU_GEMM: oneDNN where it "
                 "loads, else OpenBLAS) with myriad's measured cuts. measured: after the first step every GEMM shape "
                 "that step ran is timed on each route this machine has (OpenBLAS, oneDNN, oneDNN cut per thread) "
                 "and runs on its fastest from then on, shapes the machine's route cache holds taken from it "
                 "($MYRIAD_CPU_GEMM_CACHE, default ~/.cache/myriad; off disables it); the ranks agree on one plan, "
                 "checkpoints keep it and a resume reuses it (the routes differ in the last bits)"),
      make_field("precision", &T::precision,
                 "compute precision; master weights and optimizer states stay fp32. fp8: the transformer blocks' "
                 "dense linear layers on FP8 GEMMs (E4M3 inputs and weights, E5M2 gradients, per-tensor delayed "
                 "scaling), everything else as bf16; cuda needs compute capability 8.9+ (the CPU computes the same "
                 "numbers, for checking)"),
      make_field("fp8_amax_history", &T::fp8_amax_history,
                 "fp8: steps of per-tensor amax history whose largest value sets each scale",
                 {.check = in_range(1, 1024, true, true)}),
      make_field("fp8_margin", &T::fp8_margin,
                 "fp8: powers of two of headroom a scale leaves below the format's largest value",
                 {.check = in_range(0, 16, true, true)}),
      make_field("initial_loss_scale", &T::initial_loss_scale, "fp16: the dynamic loss scale to start from",
                 {.check = greater_than(0)}),
      make_field("loss_scale_window", &T::loss_scale_window,
                 "fp16: finite steps in a row before the loss scale doubles (an overflow halves it and skips the step)",
                 {.check = at_least(1)}),
      make_field("min_loss_scale", &T::min_loss_scale, "fp16: the loss scale never halves below this",
                 {.check = greater_than(0)}),
      make_field("recompute", &T::recompute,
                 "activation recompute in backward: none, selective (attention core) or full (whole block)"),
      make_field("seed", &T::seed, "seed of initialisation and data order (the model has no dropout)",
                 {.check = at_least(0)}),
      make_field(
          "eval_every", &T::eval_every,
          "steps between validation-loss evaluations; 0 = none during training (the final one at the end still runs)",
          {.check = at_least(0)}),
      make_field("eval_batches", &T::eval_batches, "micro-batches per evaluation", {.check = at_least(1)}),
      make_field("max_nonfinite_steps", &T::max_nonfinite_steps,
                 "consecutive non-finite steps (loss or gradient norm nan/inf; an fp16 overflow counts only once the "
                 "loss scale is at min_loss_scale) after which the run stops with an error; 0 = never stop",
                 {.check = at_least(0)}),
  };
  return table;
}

void TrainingConfig::validate() const {
  validate_fields(*this);
  MYRIAD_CHECK(!cuda_graphs || device == ComputeDevice::cuda,
               "training.cuda_graphs records GPU work as CUDA graphs; training.device is "
                   << choice_name(device) << ": set training.device cuda or drop training.cuda_graphs");
  MYRIAD_CHECK(cpu_gemm == CpuGemmChoice::fixed || device == ComputeDevice::cpu,
               "training.cpu_gemm measured times the CPU's GEMMs; training.device is "
                   << choice_name(device) << ": drop training.cpu_gemm or train on the cpu");
  MYRIAD_CHECK(freeze_step == 0 || optimizer == OptimizerKind::onebit_adam,
               "training.freeze_step is set but training.optimizer is " << choice_name(optimizer)
                                                                        << ": it only applies to onebit_adam");
  MYRIAD_CHECK(!topk_ratio || gradient_compression == GradientCompression::topk,
               "training.topk_ratio is set but training.gradient_compression is " << choice_name(gradient_compression)
                                                                                  << ": it only applies to topk");
  MYRIAD_CHECK(optimizer == OptimizerKind::adamw || gradient_compression == GradientCompression::none,
               "training.gradient_compression " << choice_name(gradient_compression)
                                                << " compresses AdamW's gradients; training.optimizer onebit_adam "
                                                   "already compresses its momentum: set gradient_compression none");
  MYRIAD_CHECK(precision == Precision::fp8 ||
                   (fp8_amax_history == TrainingConfig{}.fp8_amax_history && fp8_margin == TrainingConfig{}.fp8_margin),
               "training.fp8_amax_history and training.fp8_margin apply to training.precision fp8; training.precision "
               "is "
                   << choice_name(precision));
  const TrainingConfig defaults;
  MYRIAD_CHECK(precision == Precision::fp16 ||
                   (initial_loss_scale == defaults.initial_loss_scale &&
                    loss_scale_window == defaults.loss_scale_window && min_loss_scale == defaults.min_loss_scale),
               "training.initial_loss_scale, loss_scale_window and min_loss_scale apply to training.precision fp16 "
               "(the dynamic loss scale); training.precision is "
                   << choice_name(precision));
  MYRIAD_CHECK(
      schedule != LrScheduleKind::constant || !min_lr,
      "training.min_lr is the floor a decaying schedule reaches; training.schedule constant keeps training.lr: "
      "drop min_lr or choose cosine or linear");
  const bool local = sync == SyncMode::local;
  MYRIAD_CHECK(local || (local_steps == 0 && !outer_lr && !outer_momentum && !outer_overlap),
               "training.local_steps, outer_lr, outer_momentum and outer_overlap apply to training.sync local; "
               "training.sync is every_step");
  MYRIAD_CHECK(!local || (optimizer == OptimizerKind::adamw && gradient_compression == GradientCompression::none),
               "training.sync local exchanges parameters every local_steps steps; it is not combined with "
               "training.optimizer onebit_adam or gradient_compression");
  MYRIAD_CHECK(freeze_step < steps, "training.freeze_step (" << freeze_step << ") must be below training.steps ("
                                                             << steps << "), or the compressed phase never starts");
  MYRIAD_CHECK(!min_lr || *min_lr <= lr,
               "training.min_lr (" << min_lr.value_or(0.0) << ") must be <= training.lr (" << lr << ")");
  MYRIAD_CHECK(warmup_steps <= steps,
               "training.warmup_steps (" << warmup_steps << ") must be <= training.steps (" << steps << ")");
}

int TrainingConfig::settled_local_steps() const { return local_steps > 0 ? local_steps : 16; }

std::int64_t TrainingConfig::settled_freeze_step() const {
  if (freeze_step > 0) return freeze_step;
  return std::max<std::int64_t>({warmup_steps, steps / 5, 1});
}

}  // namespace myriad
