// The conjugate communication ops of tensor parallelism (Megatron's f / g pairs), for the tp group.
//
// A tensor-parallel layer pair is wrapped by four region ops, each the backward of another:
//   copy_to_tp_region       forward: identity                     backward: all_reduce(grad)
//   reduce_from_tp_region   forward: all_reduce(x)                backward: identity
//   gather_from_tp_region   forward: gather_last_dim(x_local)     backward: slice_last_dim(grad)
//   scatter_to_tp_region    forward: slice_last_dim(x)            backward: gather_last_dim(grad_local)
// A column-parallel linear (weight rows = output features split over tp) takes
// copy_to_tp_region(x) and yields a local slice of the output features; a row-parallel linear
// (weight columns = input features split) consumes that slice and ends with
// reduce_from_tp_region. The split is contiguous: rank r holds features [r*F/tp, (r+1)*F/tp).
// All tensors are contiguous CPU f32, rows first: (N, F_local) and (N, F_local * tp).
//
// Sequence parallelism replaces the first pair at the region boundaries (Megatron's g / g-bar):
//   gather_from_sequence_region      forward: all_gather(rows)       backward: reduce_scatter(grad)
//   reduce_scatter_to_sequence_region forward: reduce_scatter(x)     backward: all_gather(grad rows)
// where `rows` are this rank's [r N/tp, (r+1) N/tp) token rows of the (N, C) activation.
#pragma once

#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"

namespace myriad::parallel {

// full[:, r*F_local:(r+1)*F_local] <- local of rank r (one all-gather plus a local transpose).
void gather_last_dim(distributed::Communicator& tp, const Tensor& local, Tensor& full);
// local <- full[:, rank*F_local:(rank+1)*F_local].
void slice_last_dim(const Tensor& full, int rank, Tensor& local);

// Stream-ordered (Communicator::*_on_stream): on a GPU the host does not wait inside the step.
inline void copy_to_tp_region_backward(distributed::Communicator& tp, Tensor& grad) { tp.all_reduce_on_stream(grad); }
inline void reduce_from_tp_region_forward(distributed::Communicator& tp, Tensor& x) { tp.all_reduce_on_stream(x); }

// Each backward is its pair's other forward (an all-gather's is a reduce-scatter and the reverse):
// TensorParallelRegions (tensor_parallel_regions.h) calls these two in both directions.
inline void gather_from_sequence_region_forward(distributed::Communicator& tp, const Tensor& rows, Tensor& full) {
  tp.all_gather_on_stream(rows, full);
}
inline void reduce_scatter_to_sequence_region_forward(distributed::Communicator& tp, const Tensor& partial,
                                                      Tensor& rows) {
  tp.reduce_scatter_on_stream(partial, rows);
}

}  // namespace myriad::parallel
