// RunConfig — a whole run's configuration, parsed once at the edge from YAML.
//
// Sections: model, parallel, training, data, checkpoint, logging, sample, security (each a struct with a
// field registry, see field.h). Parsing rejects unknown sections and keys, wrong types, bad choices
// and out-of-range values with a myriad::Error naming "file:line", the full key path and what is
// allowed. Checks that involve several keys or the world size are in validate(), which the driver
// calls after applying all overrides. to_yaml() writes every key (derived ones as stored, with the
// value they resolve to as a comment) and reads back to an equal RunConfig.
#pragma once

#include <string>
#include <type_traits>

#include "myriad/config/data_config.h"
#include "myriad/config/model_config.h"
#include "myriad/config/output_config.h"
#include "myriad/config/parallel_config.h"
#include "myriad/config/training_config.h"

namespace myriad {

struct RunConfig {
  ModelConfig model;            // architecture and sizes
  ParallelConfig parallel;      // parallel degrees and pipeline schedule
  TrainingConfig training;      // batch, schedule, optimizer, precision, evaluation
  DataConfig data;              // corpus and tokenizer
  CheckpointConfig checkpoint;  // checkpoint directory, frequency, resume
  LoggingConfig logging;        // run directory and log level
  SampleConfig sample;          // text generation after training
  SecurityConfig security;      // encryption at rest

  // Parses a YAML file / text. Missing sections and keys keep their defaults. Refused: an empty
  // text (no section: almost always a wrong file, which would train the default model), more
  // than one YAML document, a path that is a directory. `source_name` names the text in error
  // messages ("<file>:<line>: ...").
  static RunConfig from_yaml_file(const std::string& path);
  static RunConfig from_yaml_string(const std::string& text, const std::string& source_name);

  // Applies "section.key=value" (an alias may name the key), parsing value with the key's type:
  // training.lr=3e-4, model.n_layer=2, parallel.sequence_parallel=true, model.bias=auto,
  // training.no_decay=[norm,bias] (or norm,bias; empty = []), data.path=/corpus (taken verbatim).
  // Surrounding whitespace of key and value is ignored.
  void apply_override(const std::string& key_equals_value);

  // Every per-section check, then the cross-section ones: degrees multiply to world_size; heads,
  // kv heads, ffn width and padded vocab divisible by tp; n_layer by pp * virtual_stages; the batch
  // identity global_batch_size == micro_batch * gradient_accumulation * dp; seq_len <= context_length
  // (and divisible by 2*cp, by tp with sequence parallelism); the tokenizer fits the vocabulary.
  void validate(int world_size = 1) const;

  // A copy for a job of `world_size` processes: parallel.dp auto (0) becomes world_size / (tp * pp
  // * cp); throws naming the numbers when that does not divide. Drivers call it once, before
  // building the process groups.
  RunConfig for_world(int world_size) const;

  // A copy with every derived value filled in (ffn_hidden, n_kv_head, tie_embeddings, bias,
  // seq_len, global_batch_size, gradient_accumulation, min_lr, tokenizer, cache and checkpoint
  // dirs). Never throws; values that cannot be derived (inconsistent batch) stay 0; dp auto counts
  // as 1 (call for_world() first). Call validate()
  // first to get an error instead.
  RunConfig resolved() const;

  // YAML with every section and key in registry order; round-trips through from_yaml_string.
  std::string to_yaml() const;

  bool operator==(const RunConfig&) const = default;
};

// Calls fn(section) for each section of `config`, in file order (model first, security last).
// Section structs expose kSection, kSectionMeaning and fields().
template <typename Config, typename Fn>
void for_each_section(Config& config, Fn&& fn) {
  fn(config.model);
  fn(config.parallel);
  fn(config.training);
  fn(config.data);
  fn(config.checkpoint);
  fn(config.logging);
  fn(config.sample);
  fn(config.security);
}

// The section of type S in `config` (e.g. section_of<TrainingConfig>(c) is c.training).
template <typename S, typename Config>
auto& section_of(Config& config) {
  std::conditional_t<std::is_const_v<Config>, const S*, S*> found = nullptr;
  for_each_section(config, [&](auto& section) {
    if constexpr (std::is_same_v<std::decay_t<decltype(section)>, S>) found = &section;
  });
  return *found;
}

// The names of the sections, "model, parallel, ..., sample".
std::string describe_sections();

// The generated key reference of docs/config.md (a Markdown table per section, from the field
// registries): tests check that the document contains exactly this text.
std::string config_reference_markdown();

}  // namespace myriad
