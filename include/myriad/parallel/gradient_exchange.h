// GradientExchange — how the data-parallel replicas' gradients meet, one implementation per
// exchange, chosen once by make_gradient_exchange from DataParallelOptions::exchange:
//   ExactReduction       exact sums by the parameter units' bucket collectives (any ZeRO stage),
//                        over the dp communicator whose algorithm — ring, tree or hierarchical —
//                        parallel.dp_reduce settled when the groups were built (process_groups.h)
//   CompressedGradients  ZeRO 0: the bucket reductions replaced by one error-feedback exchange of
//                        the whole (ep > 1: dense) gradient buffer per step as int8 or top-k codes;
//                        ZeRO 1-3: each dense bucket's reduce-scatter compressed, error on the sender
//   OneBitAdamExchange   exact for freeze_step optimizer steps, then no gradient reduction: the
//                        momenta are summed as signs inside the optimizer step (optim/onebit_adam.h)
//   LocalSgdExchange     no gradient reduction: each replica steps on its own, the outer step
//                        every local_steps steps (parallel/local_sgd.h)
// Every exchange keeps the replicas bitwise identical except local SGD between its outer steps
// (every rank decodes the same bytes). The error-feedback buffers are not checkpointed: a resumed
// run starts them at zero. 1-bit Adam and local SGD need ReplicatedParameters (zero_stage 0),
// compression runs at every stage; on the host or a device alike, with any ep (the expert elements over the expert-data
// group: compressed_gradients.h, onebit_adam_exchange.h, local_sgd_exchange.h); make_gradient_exchange refuses anything
// else, naming what the run has.
#pragma once

#include <memory>

#include "myriad/optim/adamw_optimizer.h"
#include "myriad/parallel/data_parallel_options.h"
#include "myriad/parallel/local_sgd.h"
#include "myriad/parallel/parameter_units.h"
#include "myriad/parallel/sharded_state.h"

namespace myriad::parallel {

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;

  virtual const char* name() const = 0;
  // Whether this step's gradients are summed exactly by the parameter units' bucket reductions
  // (the caller then lets the buckets reduce).
  virtual bool reduces_exactly() const = 0;
  // Whether the parameter units' bucket reductions run this step (exact, or compressed
  // reduce-scatters at ZeRO >= 1: compressed_gradients.h).
  virtual bool reduces_in_buckets() const { return reduces_exactly(); }
  // After the step's backward and its bucket reductions: the exchange of the whole gradient buffer.
  virtual void finish_step() {}
  // The optimizer step: the gradient norm, the update and what follows it. `unscale`: 1 / loss scale.
  virtual optim::OptimizerStepStats optimizer_step(float lr, float unscale) = 0;
  // Every replica ends with the same parameters and moments (collective over dp; before a
  // checkpoint). Nothing where the replicas are identical already.
  virtual void consolidate_replicas() {}
  // After the parameter units loaded a full state.
  virtual void after_load() {}
  // Adds the exchange's own checkpointed state to the owned snapshot the units wrote.
  virtual void snapshot_owned(OwnedState&) {}
  virtual LocalSgd* local_sgd() { return nullptr; }

 protected:
  GradientExchange() = default;
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;
};

// The exchange of options.kind over `units` (which it references; they outlive it).
std::unique_ptr<GradientExchange> make_gradient_exchange(const GradientExchangeOptions& options, ParameterUnits& units);

}  // namespace myriad::parallel
