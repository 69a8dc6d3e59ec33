// Enumerated config values and their spellings in YAML.
//
// Each enum's enumerators are numbered 0..N-1 in the order of ChoiceTraits<E>::names, which holds
// the exact strings a config file uses. choice_name / parse_choice convert both ways; the field
// registry (field.h) uses the same table to parse, print, validate and document the key.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace myriad {

enum class Architecture { gpt2, llama };                  // model family: see ModelConfig
enum class PipelineSchedule { one_f_one_b, gpipe, interleaved };
enum class LrSchedule { cosine, linear, constant };       // decay after warmup
enum class Precision { fp32, bf16, fp16 };                // compute precision (master weights stay fp32)
enum class Recompute { none, selective, full };           // activation recomputation in backward
enum class ComputeDevice { cpu, cuda };                    // where the model computes (training.device)

template <typename E> struct ChoiceTraits;
template <> struct ChoiceTraits<Architecture> {
  static constexpr std::array<std::string_view, 2> names{"gpt2", "llama"};
};
template <> struct ChoiceTraits<PipelineSchedule> {
  static constexpr std::array<std::string_view, 3> names{"1f1b", "gpipe", "interleaved"};
};
template <> struct ChoiceTraits<LrSchedule> {
  static constexpr std::array<std::string_view, 3> names{"cosine", "linear", "constant"};
};
template <> struct ChoiceTraits<Precision> {
  static constexpr std::array<std::string_view, 3> names{"fp32", "bf16", "fp16"};
};
template <> struct ChoiceTraits<Recompute> {
  static constexpr std::array<std::string_view, 3> names{"none", "selective", "full"};
};
template <> struct ChoiceTraits<ComputeDevice> {
  static constexpr std::array<std::string_view, 2> names{"cpu", "cuda"};
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
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace myriad
