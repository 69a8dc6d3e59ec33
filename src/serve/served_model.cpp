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

namespace fs = std::filesystem;

namespace myriad::serve {

ServedModel::ServedModel() = default;
ServedModel::~ServedModel() {
  model.reset();  // before the device it lives on
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

// The model of `served.config` on `device` (cuda: a world of one's GPU) with no gradients.
void place_model(ServedModel& served, const std::string& device) {
  MYRIAD_CHECK(device == "cpu" || device == "cuda", "--device: '" << device << "' is not cpu or cuda");
  const nn::TransformerConfig config = train::transformer_config(served.config.model, served.config.model.vocab_size);
  ops::Placement placement;
  if (device == "cuda") {
    served.groups = std::make_unique<distributed::ProcessGroups>(distributed::ProcessGroups::single());
    served.device = train::make_device_runtime(*served.groups, train::DeviceRuntimeOptions{});
    placement = served.device->placement();
  }
  served.model = std::make_unique<nn::GptModel>(config, nn::ModelSplit{}, true, placement);
  served.model->parameters().drop_flat_grads();  // inference only
}

// The tokenizer the ids mean: `recorded` (a checkpoint's tokenizer.bpe), else the flag, else the
// run config's saved one.
void load_tokenizer(ServedModel& served, const std::string& recorded, const std::string& tokenizer_spec) {
  std::string spec = tokenizer_spec;
  if (!recorded.empty()) {
    spec = "bpe:" + recorded;
  } else if (spec.empty() && !served.config.data.tokenizer.empty()) {
    const TokenizerSpec own = parse_tokenizer_spec(served.config.data.tokenizer);
    if (own.kind == "gpt2" || own.kind == "bpe") spec = served.config.data.tokenizer;
  }
  if (spec.empty()) return;
  const TokenizerSpec parsed = parse_tokenizer_spec(spec);
  served.tokenizer = std::make_unique<data::BpeTokenizer>(data::load_tokenizer(parsed.kind, parsed.argument));
  MYRIAD_CHECK(served.tokenizer->vocab_size() <= served.config.model.vocab_size,
               "--tokenizer: its " << served.tokenizer->vocab_size() << " tokens exceed the model's vocabulary of "
                                   << served.config.model.vocab_size);
}

}  // namespace

ServedModel load_served_checkpoint(const std::string& dir, const std::string& device,
                                   const std::string& tokenizer_spec) {
  ServedModel served;
  served.source = checkpoint_to_load(dir);
  const std::string yaml = train::read_checkpoint_config(served.source);
  served.config = RunConfig::from_yaml_string(yaml, served.source + "/manifest.json config");
  served.name = fs::path(served.source).parent_path().parent_path().filename().string();
  if (served.name.empty() || served.name == "." || served.name == "..")
    served.name = fs::path(served.source).filename().string();
  // The trained values, read on the host.
  nn::GptModel host(train::transformer_config(served.config.model, served.config.model.vocab_size));
  train::CheckpointReader reader(served.source, "");
  train::read_parameter_state(reader, host.parameters(), host.parameters().flat_values(), nullptr, nullptr);
  const DType format = train::compute_format(served.config.training.precision);
  if (format != DType::f32) round_to_format(host.parameters().flat_values(), format);
  place_model(served, device);
  copy(served.model->placement().from_host(host.parameters().flat_values()), served.model->parameters().flat_values());
  if (format != DType::f32) served.model->set_activation_precision(format);
  load_tokenizer(served, reader.tokenizer_file(), tokenizer_spec);
  return served;
}

ServedModel load_served_int8(const std::string& path, const std::string& device, const std::string& tokenizer_spec) {
  ServedModel served;
  served.source = path;
  served.config = RunConfig::from_yaml_string(train::int8_config_yaml(path), path + " config");
  served.name = fs::path(path).stem().string();
  place_model(served, device);
  const train::Int8Weights weights = train::read_int8_weights(path, served.model->parameters());
  train::attach_int8_weights(weights, *served.model);
  load_tokenizer(served, "", tokenizer_spec);
  return served;
}

}  // namespace myriad::serve
