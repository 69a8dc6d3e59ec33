// Enumerated config values and their spellings in YAML.
//
// Each enum's enumerators are numbered 0..N-1 in the order of ChoiceTraits<E>::names, which holds
// the strings a config file uses (matched without regard to case: the 1.6T MoE recipe's "MoE" is
// moe; printed as listed). choice_name / parse_choice convert both ways; the field
// registry (field.h) uses the same table to parse, print, validate and document the key.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace myriad {

enum class Architecture { gpt2, llama, moe };        // model family: see ModelConfig
enum class BlockFamily { llama, gpt2 };              // the dense family an MoE model's blocks follow
enum class RouterScoring { softmax, sigmoid };       // MoE router scores
enum class AttentionLayout { dense, block_sparse };  // model.attention.kind
enum class PipelineSchedule { one_f_one_b, gpipe, interleaved };
enum class LrSchedule { cosine, linear, constant };           // decay after warmup
enum class Precision { fp32, bf16, fp16 };                    // compute precision (master weights stay fp32)
enum class Recompute { none, selective, full };               // activation recomputation in backward
enum class ComputeDevice { cpu, cuda };                       // where the model computes (training.device)
enum class OptimizerKind { adamw, onebit_adam };              // training.optimizer
enum class GradientCompression { none, int8, topk };          // training.gradient_compression (AdamW)
enum class SyncMode { every_step, local };                    // training.sync
enum class DpReduce { automatic, ring, tree, hierarchical };  // parallel.dp_reduce: the gradient reduction's algorithm

template <typename E>
struct ChoiceTraits;
template <>
struct ChoiceTraits<Architecture> {
  static constexpr std::array<std::string_view, 3> names{"gpt2", "llama", "moe"};
};
template <>
struct ChoiceTraits<BlockFamily> {
  static constexpr std::array<std::string_view, 2> names{"llama", "gpt2"};
};
template <>
struct ChoiceTraits<RouterScoring> {
  static constexpr std::array<std::string_view, 2> names{"softmax", "sigmoid"};
};
template <>
struct ChoiceTraits<AttentionLayout> {
  static constexpr std::array<std::string_view, 2> names{"dense", "block_sparse"};
};
template <>
struct ChoiceTraits<PipelineSchedule> {
  static constexpr std::array<std::string_view, 3> names{"1f1b", "gpipe", "interleaved"};
};
template <>
struct ChoiceTraits<LrSchedule> {
  static constexpr std::array<std::string_view, 3> names{"cosine", "linear", "constant"};
};
template <>
struct ChoiceTraits<Precision> {
  static constexpr std::array<std::string_view, 3> names{"fp32", "bf16", "fp16"};
};
template <>
struct ChoiceTraits<Recompute> {
  static constexpr std::array<std::string_view, 3> names{"none", "selective", "full"};
};
template <>
struct ChoiceTraits<ComputeDevice> {
  static constexpr std::array<std::string_view, 2> names{"cpu", "cuda"};
};
template <>
struct ChoiceTraits<OptimizerKind> {
  static constexpr std::array<std::string_view, 2> names{"adamw", "onebit_adam"};
};
template <>
struct ChoiceTraits<GradientCompression> {
  static constexpr std::array<std::string_view, 3> names{"none", "int8", "topk"};
};
template <>
struct ChoiceTraits<SyncMode> {
  static constexpr std::array<std::string_view, 2> names{"every_step", "local"};
};
template <>
struct ChoiceTraits<DpReduce> {
  static constexpr std::array<std::string_view, 4> names{"auto", "ring", "tree", "hierarchical"};
};

template <typename E>
std::string_view choice_name(E value) {
  return ChoiceTraits<E>::names.at(static_cast<std::size_t>(value));
}

// The enumerator spelled `name`, or nullopt.
template <typename E>
std::optional<E> parse_choice(std::string_view name) {
  const auto& names = ChoiceTraits<E>::names;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i].size() != name.size()) continue;
    bool same = true;
    for (std::size_t c = 0; c < name.size() && same; ++c) {
      const auto lower = [](char ch) { return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch; };
      same = lower(names[i][c]) == lower(name[c]);
    }
    if (same) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace myriad
