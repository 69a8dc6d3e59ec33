// Enumerated config values and their spellings in YAML.
//
// Each enum's enumerators are numbered 0..N-1 in the order of ChoiceTraits<E>::names, which holds
// the strings a config file uses (core/choice.h: matched without regard to case, printed as
// listed). The enums the layers below act on too (Recompute, PipelineSchedule, LrScheduleKind)
// live in core/step_modes.h, so the config and the layers share one enum per concept; the ones
// here are read only by the config and the wiring in train. The field registry (field.h) uses
// the same tables to parse, print, validate and document a key.
#pragma once

#include <array>
#include <string_view>

#include "myriad/core/choice.h"
#include "myriad/core/step_modes.h"

namespace myriad {

enum class Architecture { gpt2, llama, moe };                 // model family: see ModelConfig
enum class BlockFamily { llama, gpt2 };                       // the dense family an MoE model's blocks follow
enum class RouterScoring { softmax, sigmoid };                // MoE router scores
enum class AttentionLayout { dense, block_sparse };           // model.attention.kind
enum class Precision { fp32, bf16, fp16, fp8 };               // compute precision (master weights stay fp32)
enum class ComputeDevice { cpu, cuda };                       // where the model computes (training.device)
enum class OptimizerKind { adamw, onebit_adam };              // training.optimizer
enum class GradientCompression { none, int8, topk };          // training.gradient_compression (AdamW)
enum class SyncMode { every_step, local };                    // training.sync
enum class DpReduce { automatic, ring, tree, hierarchical };  // parallel.dp_reduce: the gradient reduction's algorithm
enum class CpuGemmChoice { fixed, measured };                 // training.cpu_gemm: how each CPU GEMM's route is chosen

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
struct ChoiceTraits<Precision> {
  static constexpr std::array<std::string_view, 4> names{"fp32", "bf16", "fp16", "fp8"};
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
template <>
struct ChoiceTraits<CpuGemmChoice> {
  static constexpr std::array<std::string_view, 2> names{"fixed", "measured"};
};

}  // namespace myriad
