// Owning handles of zstd contexts (internal to src/data): a decompression context freed with
// ZSTD_freeDCtx when its unique_ptr goes.
#pragma once

#include <zstd.h>

#include <memory>

namespace myriad::data {

struct DctxFreer {
  void operator()(ZSTD_DCtx* context) const { ZSTD_freeDCtx(context); }
};
using DctxHandle = std::unique_ptr<ZSTD_DCtx, DctxFreer>;

}  // namespace myriad::data
