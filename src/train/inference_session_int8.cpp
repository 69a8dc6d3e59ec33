// InferenceSession::load_int8 — serving a weight-only INT8 export (train/int8_weights.h: the file
// is matched to the model on every rank before anything changes, then attached). Afterwards the
// model holds the int8 weights and no f32 copy of them, no gradients and no optimizer moments:
// inference only.
#include "myriad/core/error.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/train/inference_session.h"
#include "myriad/train/int8_weights.h"

namespace myriad::train {

void InferenceSession::load_int8(const std::string& path) {
  const RunConfig& config = state_.config;
  nn::GptModel& model = *state_.model;
  MYRIAD_CHECK(!serves_int8_, "load_int8: " << path << ": this engine serves an INT8 export already (its f32 "
                                            << "weights are gone); load another export in a new engine");
  MYRIAD_CHECK(!state_.model_parallel() && config.parallel.cp == 1 && state_.data_parallel->zero_stage() < 3,
               "load_int8: " << path << " needs the whole model on every rank (parallel.tp, pp, ep and cp 1, "
                             << "parallel.zero_stage below 3)");
  MYRIAD_CHECK(state_.compute_format == DType::f32,
               "load_int8: training.precision must be fp32 (INT8 weights compute with f32 activations)");
  Int8Weights weights;
  distributed::run_on_every_rank(state_.groups->world(), "INT8 load",
                                 [&] { weights = read_int8_weights(path, model.parameters()); });
  // Inference only from here: the f32 copies of the int8 weights, the gradients and the
  // optimizer's moments go (refuse_training guards the calls that would need them).
  state_.data_parallel->optimizer().release_state();
  attach_int8_weights(weights, model);
  serves_int8_ = true;
  state_.log->info("load_int8: {} (group size {}): inference only", path,
                   weights.group_size == 0 ? "per row" : std::to_string(weights.group_size));
}

}  // namespace myriad::train
