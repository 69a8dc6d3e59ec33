// Checkpoint <-> safetensors: the model built from the config names and places every parameter.
#include "myriad/train/checkpoint/interchange.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "myriad/core/error.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"
#include "myriad/train/engine.h"
#include "myriad/train/checkpoint/safetensors.h"

namespace fs = std::filesystem;

namespace myriad::train {

namespace {

// A model with the parameters of `config` (values are filled by the caller).
nn::GptModel model_of(const RunConfig& config) {
  return nn::GptModel(transformer_config(config.model, config.model.vocab_size));
}

// The source run's config made portable for the file at `output`: the model, data and
// optimisation keys stay; the run's folders become the new run's own (logging.dir
// runs/<output's stem>, checkpoint and cache dirs derived from it) so that training from the
// imported file never writes into the source run's checkpoints; the layout becomes the launch's
// (parallel.dp auto, gradient accumulation derived from the global batch).
RunConfig portable_config(RunConfig config, const std::string& output) {
  config.logging.dir = (fs::path("runs") / fs::path(output).stem()).string();
  config.checkpoint.dir.clear();
  config.checkpoint.resume.clear();
  config.data.cache_dir.clear();
  config.parallel.dp = 0;
  config.training.gradient_accumulation = 0;
  return config;
}

}  // namespace

std::string export_safetensors(const std::string& checkpoint_dir, const std::string& output,
                               const data::AtRest& at_rest) {
  const std::string config_yaml = read_checkpoint_config(checkpoint_dir, at_rest);
  const RunConfig config = RunConfig::from_yaml_string(config_yaml, checkpoint_dir + "/manifest.json config");
  nn::GptModel model = model_of(config);
  CheckpointReader reader(checkpoint_dir, "", at_rest);
  read_parameter_state(reader, model.parameters(), model.parameters().flat_values(), nullptr, nullptr);
  SafetensorsFile file;
  for (nn::Parameter& p : model.parameters().all()) file.tensors.emplace_back(p.name, p.value);
  file.metadata["format"] = "pt";
  file.metadata["producer"] = "myriad";
  file.metadata["step"] = std::to_string(reader.header().step);
  file.metadata["config"] = config_yaml;
  fs::path config_path = fs::path(output).replace_extension(".yaml");
  write_safetensors(output, file, at_rest);
  std::ofstream yaml(config_path);
  yaml << portable_config(config, output).to_yaml();
  yaml.close();
  MYRIAD_CHECK(yaml, "export: cannot write " << config_path.string());
  return config_path.string();
}

std::string import_safetensors(const std::string& input, const std::string& config_yaml_path,
                               const std::string& checkpoint_root, const data::AtRest& at_rest) {
  const RunConfig config = RunConfig::from_yaml_file(config_yaml_path).resolved();
  nn::GptModel model = model_of(config);
  SafetensorsFile file = read_safetensors(input, at_rest);
  std::set<std::string> seen;
  Tensor& flat = model.parameters().flat_values();
  flat.fill(0.0);
  for (auto& [name, tensor] : file.tensors) {
    const nn::Parameter* found = nullptr;
    for (const nn::Parameter& p : model.parameters().all()) {
      if (p.name == name) found = &p;
    }
    MYRIAD_CHECK(found != nullptr, "import: " << input << " holds tensor '" << name << "', which the model of "
                                              << config_yaml_path << " does not have");
    MYRIAD_CHECK(tensor.shape() == found->shape,
                 "import: tensor '" << name << "' in " << input << " has shape " << shape_string(tensor.shape())
                                    << ", the model expects " << shape_string(found->shape));
    seen.insert(name);
  }
  for (const nn::Parameter& p : model.parameters().all()) {
    MYRIAD_CHECK(seen.count(p.name) == 1, "import: " << input << " lacks parameter '" << p.name << "' "
                                                     << shape_string(p.shape) << " of the model of "
                                                     << config_yaml_path);
  }
  for (auto& [name, tensor] : file.tensors) nn::parameter_view(flat, model.parameters().find(name)).copy_from(tensor);
  const std::int64_t n = model.parameters().numel();
  const Tensor zeros = Tensor::zeros({n});  // fresh AdamW moments
  std::vector<CheckpointPiece> pieces = parameter_pieces(model.parameters(), flat, "");
  for (const char* prefix : {kAdamMPrefix, kAdamVPrefix}) {
    std::vector<CheckpointPiece> moments = parameter_pieces(model.parameters(), zeros, prefix);
    pieces.insert(pieces.end(), moments.begin(), moments.end());
  }
  CheckpointHeader header;
  header.config_yaml = config.to_yaml();
  header.model_yaml = model_section_yaml(config);
  header.layout = "imported from " + input;
  header.seed = config.training.seed;
  return save_checkpoint(checkpoint_root, header, pieces, 1, at_rest);
}

}  // namespace myriad::train
