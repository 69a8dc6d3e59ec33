// DataParallelOptions — what the Engine's config wiring (train/config_wiring.h) settles for data
// parallelism: the ZeRO stage (which ParameterUnits strategy, parameter_units.h), the gradient
// exchange (which GradientExchange, gradient_exchange.h), bucket size, the groups that hold the
// model's other parts, pipelining and the compute format of ZeRO-3 gathers. Plain data; the
// factories make_parameter_units and make_gradient_exchange read it once and refuse combinations
// that do not exist, with the reason.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/dtype.h"
#include "myriad/distributed/communicator.h"
#include "myriad/distributed/compressed_sum.h"
#include "myriad/parallel/local_sgd.h"

namespace myriad::parallel {

// How the replicas' gradients meet (training.sync, training.optimizer, training.gradient_compression).
enum class ExchangeKind {
  exact,        // summed by the buckets' collectives (algorithm: parallel.dp_reduce): ExactReduction
  compressed,   // int8 / top-k codes with error feedback, once per step: CompressedGradients
  onebit_adam,  // exact until freeze_step, then momenta summed as signs: OneBitAdamExchange
  local,        // never reduced; parameters averaged every local_steps: LocalSgdExchange
};

struct GradientExchangeOptions {
  ExchangeKind kind = ExchangeKind::exact;
  distributed::CompressionSpec compression;  // compressed: int8 or topk (onebit_adam uses sign)
  std::int64_t freeze_step = 0;              // onebit_adam: exact optimizer steps first
  LocalSgdOptions local;                     // local: local SGD / DiLoCo (parallel/local_sgd.h)
};

struct DataParallelOptions {
  int zero_stage = 0;
  std::int64_t bucket_elements = 0;  // stages 0/1; 0 = one bucket after the whole backward
  // Groups holding the other parts of the model (tp, pp): the squared gradient norm is summed over
  // them too (each parameter counted once: Parameter::primary). Not owned.
  std::vector<distributed::Communicator*> model_parallel;
  // Pipeline parallel (stages 0/1 only): a unit's gradients are final after the last backward of
  // its chunk, which the caller announces with begin_pipelined_backward(true); its bucket is
  // reduced from then on, overlapping the schedule's cool-down. Buckets holding a unit of
  // `deferred_units` (the tied embedding, summed across the end stages after the schedule) and
  // any bucket not launched yet are reduced by reduce_gradients() in finish_step().
  bool pipelined = false;
  std::vector<int> deferred_units;
  // training.precision at stage 3: each gathered unit is rounded to this format (bf16 / f16) for
  // the model to read, while the shard stays the f32 master (stages 0-2: the Engine's compute copy).
  DType compute_format = DType::f32;
  // Mixture of experts with ep > 1: expert units (ParamUnit::expert) are reduced and sharded over
  // the ranks holding the same experts (`expert_data_parallel`), the stage-0 gradient norm of
  // expert parameters summed over `expert_parallel`. Not owned; null = ep 1.
  distributed::Communicator* expert_data_parallel = nullptr;
  distributed::Communicator* expert_parallel = nullptr;
  // The tp group: gradients of Parameter::tp_partial parameters (MoE layers under tp, each rank's
  // share of the sequences) are summed over it in finish_step(). Not owned; null = tp 1.
  distributed::Communicator* tensor_parallel = nullptr;
  GradientExchangeOptions exchange;
};

}  // namespace myriad::parallel
