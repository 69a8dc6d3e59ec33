// make_device_runtime in a build without the CUDA backend: training.device cuda is an error that
// says how to get a build with it (see train/device_runtime.h).
#include "myriad/core/error.h"
#include "myriad/train/device_runtime.h"

namespace myriad::train {

std::unique_ptr<DeviceRuntime> make_device_runtime(distributed::ProcessGroups&, const DeviceRuntimeOptions&) {
  MYRIAD_THROW(
      "training.device cuda: this build of myriad has no CUDA backend (nvcc was not found at configure "
      "time, or MYRIAD_ENABLE_CUDA=OFF); install the CUDA toolkit and rebuild, or use training.device cpu");
}

}  // namespace myriad::train
