// CompressedGradients: one compressed sum of the full gradient buffer per step (see
// compressed_gradients.h).
#include "myriad/parallel/compressed_gradients.h"

namespace myriad::parallel {

CompressedGradients::CompressedGradients(ParameterUnits& units, const distributed::CompressionSpec& spec)
    : units_(units), spec_(spec), sum_(units.dp(), units.store().flat_grads().numel(), spec, units.placement()) {}

void CompressedGradients::finish_step() {
  Tensor grads = units_.store().flat_grads();
  sum_.sum(grads);
}

}  // namespace myriad::parallel
