// MemoryReport — the memory one rank's training holds, by role: the Engine's report, from the host
// DataParallel's ZeRO accounting (training.device cuda as well: the model and optimizer on the CUDA backend).
#pragma once

#include <cstdint>

namespace myriad::train {

struct MemoryReport {
  std::int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;
  std::int64_t activation_bytes = 0;   // saved between forward and backward (one micro-batch; the device: every slot)
  std::int64_t scratch_bytes = 0;      // shared buffers (the device: also the cuBLASLt workspace)
  std::int64_t comm_buffer_bytes = 0;  // peak transient ZeRO buffers (gathered units, unit gradients)
};

}  // namespace myriad::train
