// The model the parallel layer's unit tests build: a GPT-2 of vocabulary 13, 2 layers, 2 heads,
// 8 channels and context 8 — small enough for a group of one to step in microseconds.
#pragma once

#include "myriad/nn/transformer_config.h"

namespace myriad::parallel::test_models {

inline nn::TransformerConfig tiny_gpt2() { return nn::TransformerConfig::gpt2(13, 2, 2, 8, 8); }

}  // namespace myriad::parallel::test_models
