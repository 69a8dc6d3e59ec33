// InferenceSession::load_int8 — serving a weight-only INT8 export (python/myriad/int8.py writes it): every
// tensor of the file is matched to the model before anything changes, then the int8 weights
// attach to the model (linear layers, MoE experts, the token embedding) and the rest become
// parameter values. Afterwards the model holds the int8 weights and no f32 copy of them
// (GptModel::release_f32_copies), no gradients and no optimizer moments: inference only.
//
// File: safetensors with metadata quantization = "int8-weight-only" and group_size; for a
// quantised parameter P, tensor P (I8, P's shape: 2-D, or 3-D (E, out, in) for MoE experts) and
// P.scales (F32, P's shape with the last dimension replaced by its groups); every other parameter
// as F32 under its own name. Nothing else may be in the file.
#include <map>
#include <set>

#include "myriad/core/error.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/train/checkpoint/safetensors.h"
#include "myriad/train/inference_session.h"

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
  SafetensorsFile file;
  std::int64_t group_size = 0;
  std::map<std::string, const Tensor*> by_name;
  distributed::run_on_every_rank(state_.groups->world(), "INT8 load", [&] {
    file = read_safetensors(path);
    const auto kind = file.metadata.find("quantization");
    MYRIAD_CHECK(kind != file.metadata.end() && kind->second == "int8-weight-only",
                 "load_int8: " << path << " is not a weight-only INT8 export (metadata quantization is '"
                               << (kind == file.metadata.end() ? std::string() : kind->second) << "')");
    const auto group = file.metadata.find("group_size");
    group_size = group == file.metadata.end() ? 0 : std::stoll(group->second);
    for (const auto& [name, tensor] : file.tensors) by_name[name] = &tensor;
    std::set<std::string> used;
    for (const nn::Parameter& p : model.parameters().all()) {
      const auto found = by_name.find(p.name);
      MYRIAD_CHECK(found != by_name.end(),
                   "load_int8: " << path << " lacks parameter '" << p.name << "' " << shape_string(p.shape));
      MYRIAD_CHECK(found->second->shape() == p.shape, "load_int8: tensor '"
                                                          << p.name << "' in " << path << " has shape "
                                                          << shape_string(found->second->shape())
                                                          << ", the model expects " << shape_string(p.shape));
      used.insert(p.name);
      if (found->second->dtype() == DType::i8) {
        const auto scales = by_name.find(p.name + ".scales");
        MYRIAD_CHECK(scales != by_name.end(),
                     "load_int8: " << path << " holds int8 '" << p.name << "' without '" << p.name << ".scales'");
        MYRIAD_CHECK(p.shape.size() == 2 || p.shape.size() == 3,
                     "load_int8: " << path << " holds '" << p.name << "' as int8, but the parameter is "
                                   << shape_string(p.shape) << " (int8 weights are matrices, or one per expert)");
        Shape expected = p.shape;
        expected.back() = int8_groups(p.shape.back(), group_size);
        MYRIAD_CHECK(scales->second->dtype() == DType::f32 && scales->second->shape() == expected,
                     "load_int8: '" << p.name << ".scales' in " << path << " is " << scales->second->describe()
                                    << ", expected f32 " << shape_string(expected) << " (group_size " << group_size
                                    << ")");
        used.insert(p.name + ".scales");
      }
    }
    for (const auto& [name, tensor] : file.tensors) {
      MYRIAD_CHECK(used.count(name) == 1, "load_int8: " << path << " holds tensor '" << name
                                                        << "', which the model of this config does not have");
    }
  });
  for (nn::Parameter& p : model.parameters().all()) {
    const Tensor& t = *by_name.at(p.name);
    if (t.dtype() == DType::i8) {
      model.attach_int8(p.name, t, *by_name.at(p.name + ".scales"), group_size);
    } else {
      copy(model.parameters().placement().from_host(t), p.value);
    }
  }
  // Inference only from here: the f32 copies of the int8 weights, the gradients and the
  // optimizer's moments go (refuse_training guards the calls that would need them).
  state_.data_parallel->optimizer().release_state();
  model.release_f32_copies();
  serves_int8_ = true;
  state_.log->info("load_int8: {} (group size {}): inference only", path,
                   group_size == 0 ? "per row" : std::to_string(group_size));
}

}  // namespace myriad::train
