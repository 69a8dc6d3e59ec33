// NCCL status text for MYRIAD_NCCL_CHECK (built when NCCL is found).
#include <nccl.h>

#include "myriad/cuda/check.h"

namespace myriad::cuda::detail {

const char* nccl_status_string(int status) { return ncclGetErrorString(static_cast<ncclResult_t>(status)); }

}  // namespace myriad::cuda::detail
