// ServedModel — what `myriad serve` loads: the whole model with its trained values on the chosen
// device, the tokenizer its ids mean, and the name the API reports.
//
// load_served_checkpoint(dir): a checkpoint folder (manifest.json), or a run's checkpoint folder
// whose newest complete checkpoint is taken (what `--resume auto` would take). The model is built
// from the config recorded in the manifest, whatever layout wrote it (the reader assembles every
// parameter), in f32 — or in the run's 16-bit compute format when it trained in one (weights
// rounded to it, GEMM operands in it), as Engine.generate computes. The tokenizer is the one the
// checkpoint records (tokenizer.bpe), else `tokenizer_spec` (gpt2:<dir> | bpe:<file>), else the
// run config's data.tokenizer when it names saved files (gpt2: / bpe:), else none (token-id
// prompts only). device "cuda" places the model on the first GPU (a build without CUDA
// or a machine without a GPU is refused naming --device). The served model holds no gradients.
// Damage is an error naming the file.
//
// Tensor-parallel serving: given `world` (the ranks serving together, e.g. MPI's world under
// mpirun), the model is split over them as tensor parallelism (tp = their number, without
// sequence parallelism; heads, key/value heads, MLP width and the padded vocabulary must split
// evenly, else an error naming the parameter), each rank reading its shard of the checkpoint
// whatever layout wrote it; on cuda each rank takes its node-local GPU and the group's tensors
// travel over NCCL. tp_control() is then the group's host communicator (serve/decode_group.h).
#pragma once

#include <memory>
#include <string>

#include "myriad/config/run_config.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/nn/gpt_model.h"

namespace myriad::train {
class DeviceRuntime;
struct ModelParallelism;
}  // namespace myriad::train
namespace myriad::distributed {
class Communicator;
class ProcessGroups;
}  // namespace myriad::distributed

namespace myriad::serve {

struct ServedModel {
  ServedModel();
  ~ServedModel();
  ServedModel(ServedModel&&) noexcept;
  ServedModel& operator=(ServedModel&&) noexcept;

  RunConfig config;    // the run's resolved config
  std::string source;  // the checkpoint (or file) loaded
  std::string name;    // the model id of the API
  std::unique_ptr<data::BpeTokenizer> tokenizer;
  // Device placement (declared before the model, which it outlives).
  std::unique_ptr<distributed::ProcessGroups> groups;
  std::unique_ptr<train::DeviceRuntime> device;
  std::unique_ptr<train::ModelParallelism> parallelism;  // tp > 1: the regions the model's split points at
  std::unique_ptr<nn::GptModel> model;

  int tp() const;
  distributed::Communicator* tp_control() const;  // the tp group's host communicator; null at tp 1
};

ServedModel load_served_checkpoint(const std::string& dir, const std::string& device, const std::string& tokenizer_spec,
                                   std::unique_ptr<distributed::Communicator> world = nullptr);
// A weight-only INT8 export (train/int8_weights.h): the model of the config in its metadata keeps
// its int8 weights in INT8 (no f32 copy: resident memory shrinks); the tokenizer from
// `tokenizer_spec`, else the config's saved one (gpt2: / bpe:), else none.
ServedModel load_served_int8(const std::string& path, const std::string& device, const std::string& tokenizer_spec);

}  // namespace myriad::serve
