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

ServedModel load_served_checkpoint(const std::string& dir, const std::string& device,
                                   const std::string& tokenizer_spec) {
  MYRIAD_CHECK(device == "cpu" || device == "cuda", "--device: '" << device << "' is not cpu or cuda");
  ServedModel served;
  served.source = checkpoint_to_load(dir);
  const std::string yaml = train::read_checkpoint_config(served.source);
  served.config = RunConfig::from_yaml_string(yaml, served.source + "/manifest.json config");
  served.name = fs::path(served.source).parent_path().parent_path().filename().string();
  if (served.name.empty() || served.name == "." || served.name == "..")
    served.name = fs::path(served.source).filename().string();
  const nn::TransformerConfig config = train::transformer_config(served.config.model, served.config.model.vocab_size);
  // The trained values, read on the host.
  auto host = std::make_unique<nn::GptModel>(config);
  train::CheckpointReader reader(served.source, "");
  train::read_parameter_state(reader, host->parameters(), host->parameters().flat_values(), nullptr, nullptr);
  const DType format = train::compute_format(served.config.training.precision);
  if (format != DType::f32) round_to_format(host->parameters().flat_values(), format);
  if (device == "cuda") {
    served.groups = std::make_unique<distributed::ProcessGroups>(distributed::ProcessGroups::single());
    served.device = train::make_device_runtime(*served.groups, train::DeviceRuntimeOptions{});
    served.model = std::make_unique<nn::GptModel>(config, nn::ModelSplit{}, true, served.device->placement());
    copy(served.device->placement().from_host(host->parameters().flat_values()),
         served.model->parameters().flat_values());
  } else {
    served.model = std::move(host);
  }
  if (format != DType::f32) served.model->set_activation_precision(format);
  // The tokenizer the ids mean.
  if (const std::string file = reader.tokenizer_file(); !file.empty()) {
    served.tokenizer = std::make_unique<data::BpeTokenizer>(data::BpeTokenizer::load(file));
  } else if (!tokenizer_spec.empty()) {
    const TokenizerSpec spec = parse_tokenizer_spec(tokenizer_spec);
    served.tokenizer = std::make_unique<data::BpeTokenizer>(data::load_tokenizer(spec.kind, spec.argument));
  } else if (!served.config.data.tokenizer.empty()) {  // the run's own saved tokenizer (gpt2: / bpe:)
    const TokenizerSpec spec = parse_tokenizer_spec(served.config.data.tokenizer);
    if (spec.kind == "gpt2" || spec.kind == "bpe")
      served.tokenizer = std::make_unique<data::BpeTokenizer>(data::load_tokenizer(spec.kind, spec.argument));
  }
  if (served.tokenizer) {
    MYRIAD_CHECK(served.tokenizer->vocab_size() <= config.vocab_size,
                 "--tokenizer: its " << served.tokenizer->vocab_size() << " tokens exceed the model's vocabulary of "
                                     << config.vocab_size);
  }
  return served;
}

}  // namespace myriad::serve
