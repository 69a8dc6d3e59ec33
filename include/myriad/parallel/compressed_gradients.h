// CompressedGradients — error-feedback gradient compression (training.gradient_compression:
// int8 | topk): the bucket reductions are off, and finish_step exchanges the whole gradient
// buffer once through distributed::CompressedSum (int8 with a scale per 256 elements, or the
// largest topk_ratio of each chunk as (index, value) pairs), each rank's and each chunk owner's
// compression error carried into the next step. Every rank decodes the same bytes, so the
// replicas stay bitwise identical; the optimizer then steps as with exact gradients. Where the
// parameters live: on a device the codes are kernels and the exchanges NCCL's, with no host wait.
#pragma once

#include "myriad/distributed/compressed_sum.h"
#include "myriad/parallel/gradient_exchange.h"

namespace myriad::parallel {

class CompressedGradients final : public GradientExchange {
 public:
  // `units`: ReplicatedParameters (make_gradient_exchange checks), on the host or a device.
  CompressedGradients(ParameterUnits& units, const distributed::CompressionSpec& spec);

  const char* name() const override { return distributed::compression_name(spec_.kind); }
  bool reduces_exactly() const override { return false; }
  void finish_step() override;
  optim::OptimizerStepStats optimizer_step(float lr, float unscale) override { return units_.exact_step(lr, unscale); }

 private:
  ParameterUnits& units_;
  distributed::CompressionSpec spec_;
  distributed::CompressedSum sum_;
};

}  // namespace myriad::parallel
