// checked_host_tokens: one pass over the host copy (host_tokens.h).
#include "myriad/nn/host_tokens.h"

#include <string>

#include "myriad/core/error.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

Tensor checked_host_tokens(const char* op, const char* what, const Tensor& tokens, std::int64_t limit,
                           std::optional<std::int32_t> ignore) {
  MYRIAD_CHECK(tokens.dtype() == DType::i32, op << ": " << what << " must be i32, got " << tokens.describe());
  const Tensor host = ops::placement_of(tokens, what).to_host(tokens).contiguous();
  const std::int32_t* t = host.data<std::int32_t>();
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    MYRIAD_CHECK((ignore && t[i] == *ignore) || (t[i] >= 0 && t[i] < limit),
                 op << ": " << what << " " << t[i] << " at flat position " << i << " is outside the vocabulary [0, "
                    << limit << ")"
                    << (ignore ? " and is not the ignore index " + std::to_string(*ignore) : std::string()));
  }
  return host;
}

}  // namespace myriad::nn
