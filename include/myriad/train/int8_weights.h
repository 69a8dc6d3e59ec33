// Int8Weights — a weight-only INT8 export (python/myriad/int8.py writes it) read and matched
// against a model's parameters; what Engine.load_int8 and `myriad serve --int8` both attach.
//
// File: safetensors with metadata quantization = "int8-weight-only", group_size and the run's
// config; for a quantised parameter P, tensor P (I8, P's shape: 2-D, or 3-D (E, out, in) for MoE
// experts) and P.scales (F32, P's shape with the last dimension replaced by its groups); every
// other parameter as F32 under its own name. Nothing else may be in the file. read_int8_weights
// checks all of that against `store` before anything changes (errors name the file and tensor);
// attach_int8_weights then attaches the int8 weights to the model (linear layers, MoE experts,
// the token embedding), copies the rest into the parameter values, and frees the f32 copies of
// the int8 weights and every gradient (GptModel::release_f32_copies): inference only afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "myriad/core/tensor.h"
#include "myriad/data/at_rest.h"
#include "myriad/nn/gpt_model.h"

namespace myriad::train {

struct Int8Weights {
  std::string path;
  std::int64_t group_size = 0;
  std::map<std::string, std::string> metadata;
  std::map<std::string, Tensor> tensors;  // host tensors by name
};

Int8Weights read_int8_weights(const std::string& path, const nn::ParameterStore& store,
                              const data::AtRest& at_rest = {});
void attach_int8_weights(const Int8Weights& weights, nn::GptModel& model);
// The run config recorded in an export's metadata (YAML); throws naming the file when absent.
std::string int8_config_yaml(const std::string& path, const data::AtRest& at_rest = {});

}  // namespace myriad::train
