// NCCL status text for MYRIAD_NCCL_CHECK when myriad is built without NCCL: the check still
// throws with the numeric code; there is no library to describe it.
#include "myriad/cuda/check.h"

namespace myriad::cuda::detail {

const char* nccl_status_string(int /*status*/) { return "myriad was built without NCCL"; }

}  // namespace myriad::cuda::detail
