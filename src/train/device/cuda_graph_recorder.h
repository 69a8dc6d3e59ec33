// The CUDA implementation of train::GraphRecorder (device_runtime.h): a cuda::PooledStreamGraph on
// a DeviceContext's stream. Private to train/device.
#pragma once

#include <memory>

#include "myriad/cuda/device_context.h"
#include "myriad/train/device_runtime.h"

namespace myriad::train {

std::unique_ptr<GraphRecorder> make_cuda_graph_recorder(cuda::DeviceContext& context);

}  // namespace myriad::train
