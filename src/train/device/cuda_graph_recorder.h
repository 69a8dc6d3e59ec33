// The CUDA implementation of train::GraphRecorder (device_runtime.h): a cuda::StreamGraph
// recorded on a DeviceContext's stream, its allocations from a private pool of the context's
// caching allocator. Private to train/device.
#pragma once

#include <memory>

#include "myriad/cuda/device_context.h"
#include "myriad/train/device_runtime.h"

namespace myriad::train {

std::unique_ptr<GraphRecorder> make_cuda_graph_recorder(cuda::DeviceContext& context);

}  // namespace myriad::train
