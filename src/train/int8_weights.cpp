// Reading and attaching a weight-only INT8 export (train/int8_weights.h).
#include "myriad/train/int8_weights.h"

#include <set>

#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/train/checkpoint/safetensors.h"

namespace myriad::train {

namespace {

SafetensorsFile read_export(const std::string& path, const data::AtRest& at_rest) {
  SafetensorsFile file = read_safetensors(path, at_rest);
  const auto kind = file.metadata.find("quantization");
  MYRIAD_CHECK(kind != file.metadata.end() && kind->second == "int8-weight-only",
               "load_int8: " << path << " is not a weight-only INT8 export (metadata quantization is '"
                             << (kind == file.metadata.end() ? std::string() : kind->second) << "')");
  return file;
}

}  // namespace

std::string int8_config_yaml(const std::string& path, const data::AtRest& at_rest) {
  const SafetensorsFile file = read_export(path, at_rest);
  const auto config = file.metadata.find("config");
  MYRIAD_CHECK(config != file.metadata.end() && !config->second.empty(),
               "load_int8: " << path << " records no run config in its metadata (export it again with "
                             << "`myriad convert export --format int8`)");
  return config->second;
}

Int8Weights read_int8_weights(const std::string& path, const nn::ParameterStore& store, const data::AtRest& at_rest) {
  SafetensorsFile file = read_export(path, at_rest);
  Int8Weights out;
  out.path = path;
  out.metadata = file.metadata;
  const auto group = file.metadata.find("group_size");
  out.group_size = group == file.metadata.end() ? 0 : std::stoll(group->second);
  for (auto& [name, tensor] : file.tensors) out.tensors[name] = tensor;
  std::set<std::string> used;
  for (const nn::Parameter& p : store.all()) {
    const auto found = out.tensors.find(p.name);
    MYRIAD_CHECK(found != out.tensors.end(),
                 "load_int8: " << path << " lacks parameter '" << p.name << "' " << shape_string(p.shape));
    MYRIAD_CHECK(found->second.shape() == p.shape, "load_int8: tensor '" << p.name << "' in " << path << " has shape "
                                                                         << shape_string(found->second.shape())
                                                                         << ", the model expects "
                                                                         << shape_string(p.shape));
    used.insert(p.name);
    if (found->second.dtype() == DType::i8) {
      const auto scales = out.tensors.find(p.name + ".scales");
      MYRIAD_CHECK(scales != out.tensors.end(),
                   "load_int8: " << path << " holds int8 '" << p.name << "' without '" << p.name << ".scales'");
      MYRIAD_CHECK(p.shape.size() == 2 || p.shape.size() == 3,
                   "load_int8: " << path << " holds '" << p.name << "' as int8, but the parameter is "
                                 << shape_string(p.shape) << " (int8 weights are matrices, or one per expert)");
      Shape expected = p.shape;
      expected.back() = int8_groups(p.shape.back(), out.group_size);
      MYRIAD_CHECK(scales->second.dtype() == DType::f32 && scales->second.shape() == expected,
                   "load_int8: '" << p.name << ".scales' in " << path << " is " << scales->second.describe()
                                  << ", expected f32 " << shape_string(expected) << " (group_size " << out.group_size
                                  << ")");
      used.insert(p.name + ".scales");
    }
  }
  for (const auto& [name, tensor] : out.tensors) {
    MYRIAD_CHECK(used.count(name) == 1, "load_int8: " << path << " holds tensor '" << name
                                                      << "', which the model of this config does not have");
  }
  return out;
}

void attach_int8_weights(const Int8Weights& weights, nn::GptModel& model) {
  for (nn::Parameter& p : model.parameters().all()) {
    const Tensor& t = weights.tensors.at(p.name);
    if (t.dtype() == DType::i8) {
      model.attach_int8(p.name, t, weights.tensors.at(p.name + ".scales"), weights.group_size);
    } else {
      copy(model.parameters().placement().from_host(t), p.value);
    }
  }
  model.release_f32_copies();
}

}  // namespace myriad::train
