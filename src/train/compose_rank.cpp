// compose_rank: the rank's model under its layout, DataParallel and precision state (compose_rank.h).
#include "myriad/train/compose_rank.h"

#include "myriad/train/config_wiring.h"
#include "myriad/train/model_parallelism.h"

namespace myriad::train {

namespace {

// training.precision: the compute copy of the weights the model reads.
void setup_precision(RankState& state) {
  state.compute_format = compute_format(state.config.training.precision);
  if (state.compute_format == DType::f32) return;
  state.model->set_activation_precision(state.compute_format);
  // ZeRO-3: DataParallel rounds each unit it gathers (DataParallelOptions::compute_format).
  if (state.config.parallel.zero_stage == 3) return;
  // The store's flat values stay the fp32 master weights (optimizer, ZeRO, checkpoints); the
  // parameters the model reads point at a copy rounded to the compute format, and the GEMMs read
  // the same values as 16-bit numbers (Parameter::operand). The update writes both in its own
  // pass where it writes every value (ZeRO 0, not local SGD); otherwise they are refreshed after it.
  nn::ParameterStore& store = state.model->parameters();
  state.compute_values = store.placement().zeros({store.numel()});
  state.compute_operands = store.placement().empty({store.numel()}, state.compute_format);
  store.rebind(0, store.numel(), state.compute_values, Tensor());
  store.bind_operands(state.compute_operands);
  state.data_parallel->write_compute_copies(state.compute_format, state.compute_values, state.compute_operands);
  state.refresh_compute_weights();
}

// training.precision fp16: the dynamic loss scaler.
void setup_loss_scaler(RankState& state) {
  LossScalerConfig scaler;
  scaler.initial = state.config.training.initial_loss_scale;
  scaler.window = state.config.training.loss_scale_window;
  scaler.min_scale = state.config.training.min_loss_scale;
  state.loss_scaler = std::make_unique<DynamicLossScaler>(scaler);
}

}  // namespace

void compose_rank(RankState& state, ops::Placement placement, ops::MetaBackend* meta) {
  auto label = [meta](const char* phase) {
    if (meta != nullptr) meta->set_label(phase);
  };
  const nn::TransformerConfig model_config = transformer_config(state.config.model, state.config.model.vocab_size);
  label("model");
  ModelParallelism parallelism =
      make_model_parallelism(state.config, model_config, state.tp(), state.group(distributed::Axis::ep),
                             state.group(distributed::Axis::cp), state.pp().rank());
  state.tensor_parallel = std::move(parallelism.tensor);
  state.expert_parallel = std::move(parallelism.expert);
  state.context_parallel = std::move(parallelism.context);
  state.model = std::make_unique<nn::GptModel>(model_config, parallelism.split, true, placement);
  if (meta == nullptr) state.model->initialize(state.config.training.seed);  // meta tensors hold no values
  if (state.model_parallel()) state.serial_layout = std::make_unique<SerialLayout>(*state.model);
  parallel::DataParallelOptions dp_options = data_parallel_options(state.config);
  dp_options.model_parallel = {&state.tp(), &state.pp()};
  dp_options.tensor_parallel = &state.tp();
  if (state.config.model.ties_embeddings() && state.config.parallel.pp > 1 &&
      (state.model->split().first_stage || state.model->split().last_stage)) {
    // The end stages' halves of the tied embedding are summed after the schedule: its unit's
    // bucket reduces only then (sync_tied_embedding, before finish_step).
    const std::int64_t wte = state.model->parameters().find("wte").offset;
    const std::vector<nn::ParamUnit>& units = state.model->units();
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (units[u].begin <= wte && wte < units[u].end) dp_options.deferred_units.push_back(static_cast<int>(u));
    }
  }
  if (state.config.parallel.ep > 1) {
    dp_options.expert_data_parallel = state.device ? &state.device->expert_data() : &state.groups->expert_data();
    dp_options.expert_parallel = &state.group(distributed::Axis::ep);
  }
  label("data_parallel");
  state.data_parallel = std::make_unique<parallel::DataParallel>(*state.model, state.data_group(), dp_options,
                                                                 adamw_config(state.config.training));
  label("precision");
  setup_precision(state);
  if (state.config.training.precision == Precision::fp16) setup_loss_scaler(state);
  if (state.config.training.precision == Precision::fp8) {
    state.model->enable_fp8(nn::Fp8Recipe{.amax_history = state.config.training.fp8_amax_history,
                                          .margin = static_cast<int>(state.config.training.fp8_margin)});
  }
  label("other");
}

}  // namespace myriad::train
