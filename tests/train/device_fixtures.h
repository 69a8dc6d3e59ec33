// Fixtures of the train layer's device tests (training.device cuda): whether a CUDA device is
// visible (always, on the emulated CUDA layer; never in a build without CUDA) and the tiny
// fixture model with a head dimension the flash kernels take (C 128, 2 heads of 64).
#pragma once

#include <string>

#include "engine_fixtures.h"
#if MYRIAD_TESTS_HAVE_CUDA
#include "myriad/cuda/device_context.h"
#endif

namespace myriad::train::fixtures {

inline bool gpu_visible() {
#if MYRIAD_TESTS_HAVE_CUDA
  return cuda::cuda_device_count_or_zero() > 0;
#else
  return false;
#endif
}

// tiny_config with C 128 and 2 heads, 8 steps, computing on `device`.
inline RunConfig tiny_device_config(const fs::path& dir, const std::string& corpus, ComputeDevice device) {
  RunConfig c = tiny_config(dir, corpus);
  c.model.n_embd = 128;
  c.model.n_head = 2;
  c.training.steps = 8;
  c.training.device = device;
  return c;
}

}  // namespace myriad::train::fixtures
