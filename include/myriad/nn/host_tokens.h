// Token ids or targets on the host, checked against the vocabulary before they reach an op: the
// one check behind the model's inputs, the serial and the vocabulary-parallel embedding and loss
// (so a device op need not read a bad-index flag back, which would make the host wait).
#pragma once

#include <cstdint>
#include <optional>

#include "myriad/core/tensor.h"

namespace myriad::nn {

// `tokens` (i32, any shape, host or device) as a contiguous host tensor whose every value lies in
// [0, limit) or equals `ignore` when given; else myriad::Error
// "<op>: <what> <value> at flat position <i> is outside the vocabulary [0, <limit>)".
Tensor checked_host_tokens(const char* op, const char* what, const Tensor& tokens, std::int64_t limit,
                           std::optional<std::int32_t> ignore = std::nullopt);

}  // namespace myriad::nn
