// Loading a checkpoint for serving (serve/served_model.h).
#include "myriad/serve/served_model.h"

#include <filesystem>

#include "myriad/core/error.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/ops/elementwise.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"
#include "myriad/train/config_wiring.h"
#include "myriad/train/device_runtime.h"
#include "myriad/train/int8_weights.h"
#include "myriad/train/model_parallelism.h"

namespace fs = std::filesystem;

namespace myriad::serve {

ServedModel::ServedModel() = default;
ServedModel::~ServedModel() {
  model.reset();  // before the device it lives on and the regions it points at
  parallelism.reset();
  device.reset();
}
ServedModel::ServedModel(ServedModel&&) noexcept = default;
ServedModel& ServedModel::operator=(ServedModel&&) noexcept = default;

namespace {

std::string checkpoint_to_load(const std::string& dir) {
  MYRIAD_CHECK(fs::is_directory(dir), "--checkpoint: " << dir << " is not a folder");
  if (fs::exists(fs::path(dir) / "manifest.json")) return dir;
  const std::string newest = train::latest_checkpoint(dir);
  MYRIAD_CHECK(!newest.empty(), "--checkpoint: " << dir << " holds no complete checkpoint (no manifest.json in it "
                                                 << "or in a step folder)");
  return newest;
}

}  // namespace

namespace {

// The model of `served.config` on `device` (cuda: this rank's GPU) with no gradients, split over
// `world`'s ranks as tensor parallelism when there are several.
void place_model(ServedModel& served, const std::string& device, std::unique_ptr<distributed::Communicator> world) {
  MYRIAD_CHECK(device == "cpu" || device == "cuda", "--device: '" << device << "' is not cpu or cuda");
  const nn::TransformerConfig config = train::transformer_config(served.config.model, served.config.model.vocab_size);
  const int tp = world ? world->size() : 1;
  if (tp > 1) {
    served.groups = std::make_unique<distributed::ProcessGroups>(distributed::GridShape{.tp = tp}, std::move(world));
  } else if (device == "cuda") {
    served.groups = std::make_unique<distributed::ProcessGroups>(distributed::ProcessGroups::single());
  }
  ops::Placement placement;
  if (device == "cuda") {
    served.device = train::make_device_runtime(*served.groups, train::DeviceRuntimeOptions{});
    placement = served.device->placement();
  }
  nn::ModelSplit split;
  if (tp > 1) {  // the layout of serving: tp over every rank, nothing else, no sequence parallelism
    RunConfig layout = served.config;
    layout.parallel = ParallelConfig{};
    layout.parallel.tp = tp;
    using distributed::Axis;
    auto carrier = [&](Axis axis) -> distributed::Communicator& {
      return served.device ? served.device->group(axis) : served.groups->group(axis);
    };
    try {
      served.parallelism = std::make_unique<train::ModelParallelism>(train::make_model_parallelism(
          layout, config, carrier(Axis::tp), carrier(Axis::ep), carrier(Axis::cp), /*pp_stage=*/0));
      split = served.parallelism->split;
      served.model = std::make_unique<nn::GptModel>(config, split, true, placement);
    } catch (const Error& e) {
      throw Error("tensor-parallel serving over " + std::to_string(tp) + " ranks: " + e.message(), e.file().c_str(),
                  e.line());
    }
  } else {
    served.model = std::make_unique<nn::GptModel>(config, split, true, placement);
  }
  served.model->parameters().drop_flat_grads();  // inference only
}

// The tokenizer the ids mean: `recorded` (a checkpoint's tokenizer.bpe), else the flag, else the
// run config's saved one.
void load_tokenizer(ServedModel& served, const std::string& recorded, const std::string& tokenizer_spec,
                    const data::AtRest& at_rest) {
  std::string spec = tokenizer_spec;
  if (!recorded.empty()) {
    spec = "bpe:" + recorded;
  } else if (spec.empty() && !served.config.data.tokenizer.empty()) {
    const TokenizerSpec own = parse_tokenizer_spec(served.config.data.tokenizer);
    if (own.kind == "gpt2" || own.kind == "bpe") spec = served.config.data.tokenizer;
  }
  if (spec.empty()) return;
  const TokenizerSpec parsed = parse_tokenizer_spec(spec);
  served.tokenizer = std::make_unique<data::BpeTokenizer>(data::load_tokenizer(parsed.kind, parsed.argument, at_rest));
  MYRIAD_CHECK(served.tokenizer->vocab_size() <= served.config.model.vocab_size,
               "--tokenizer: its " << served.tokenizer->vocab_size() << " tokens exceed the model's vocabulary of "
                                   << served.config.model.vocab_size);
}

}  // namespace

int ServedModel::tp() const { return model ? model->split().tp_size() : 1; }

distributed::Communicator* ServedModel::tp_control() const {
  return tp() > 1 ? &groups->group(distributed::Axis::tp) : nullptr;
}

ServedModel load_served_checkpoint(const std::string& dir, const std::string& device, const std::string& tokenizer_spec,
                                   std::unique_ptr<distributed::Communicator> world) {
  ServedModel served;
  served.source = checkpoint_to_load(dir);
  const data::AtRest at_rest = data::AtRest::from_key_file("");  // $MYRIAD_KEY_FILE for encrypted checkpoints
  const std::string yaml = train::read_checkpoint_config(served.source, at_rest);
  served.config = RunConfig::from_yaml_string(yaml, served.source + "/manifest.json config");
  served.name = fs::path(served.source).parent_path().parent_path().filename().string();
  if (served.name.empty() || served.name == "." || served.name == "..")
    served.name = fs::path(served.source).filename().string();
  place_model(served, device, std::move(world));
  // The trained values of this rank's parameters, read on the host (into the model itself there).
  std::unique_ptr<nn::GptModel> staging;
  nn::GptModel* target = served.model.get();
  if (!served.model->placement().on_host()) {
    staging = std::make_unique<nn::GptModel>(served.model->config(), served.model->split());
    target = staging.get();
  }
  train::CheckpointReader reader(served.source, "", at_rest);
  train::read_parameter_state(reader, target->parameters(), target->parameters().flat_values(), nullptr, nullptr);
  const DType format = train::compute_format(served.config.training.precision);
  if (format != DType::f32) round_to_format(target->parameters().flat_values(), format);
  if (staging)
    copy(served.model->placement().from_host(staging->parameters().flat_values()),
         served.model->parameters().flat_values());
  if (format != DType::f32) served.model->set_activation_precision(format);
  load_tokenizer(served, reader.tokenizer_file(), tokenizer_spec, at_rest);
  return served;
}

ServedModel load_served_int8(const std::string& path, const std::string& device, const std::string& tokenizer_spec) {
  ServedModel served;
  served.source = path;
  const data::AtRest at_rest = data::AtRest::from_key_file("");  // $MYRIAD_KEY_FILE for an encrypted export
  served.config = RunConfig::from_yaml_string(train::int8_config_yaml(path, at_rest), path + " config");
  served.name = fs::path(path).stem().string();
  place_model(served, device, nullptr);
  const train::Int8Weights weights = train::read_int8_weights(path, served.model->parameters(), at_rest);
  train::attach_int8_weights(weights, *served.model);
  load_tokenizer(served, "", tokenizer_spec, at_rest);
  return served;
}

}  // namespace myriad::serve
