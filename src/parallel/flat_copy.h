// Copies between flat f32 buffers of the parameter store's layout (internal header of
// parallel/): views of a range, and memcpy split over the OpenMP threads for host buffers (large
// snapshots are bandwidth-bound), or the backend's copy where a buffer lives on a device.
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"

namespace myriad::parallel {

// The f32 elements [begin, end) of a contiguous flat buffer, as a 1-d view.
Tensor flat_view(const Tensor& buffer, std::int64_t begin, std::int64_t end);
// host[0, n) <- `source` (n contiguous floats, on the host or a backend's device).
void copy_to_host(const Tensor& source, float* host);
// `target` (contiguous, on the host or a device) <- `host` (a contiguous host view of its size).
void copy_from_host(const Tensor& host, Tensor& target);
// dst <- src, both contiguous f32 where the state lives.
void copy_floats(const Tensor& src, Tensor& dst);

}  // namespace myriad::parallel
