// Token routing ops (mixture of experts): moving token rows into expert order and back.
//
//   gather_rows(x, source, out)      out[r, :] = x[source[r], :]; source[r] = -1 gives a zero row
//   combine_rows_forward(rows, slot, weight, out)
//                                    out[t, :] = sum over j with slot[t, j] >= 0 of
//                                                weight[t, j] * rows[slot[t, j], :]
//                                    (weight undefined = every weight 1)
//   combine_rows_backward(rows, slot, weight, grad_out, grad_rows, grad_weight)
//                                    grad_rows[slot[t, j], :] = weight[t, j] * grad_out[t, :];
//                                    rows that no slot names get zeros;
//                                    grad_weight[t, j] = <grad_out[t, :], rows[slot[t, j], :]>,
//                                    0 where slot[t, j] = -1 (skipped when grad_weight undefined)
// The gradient of gather_rows is combine_rows_forward(grad_out, slot, {}, grad_x) with `slot` the
// inverse map (each token's rows), which is how the MoE layer uses them: one map per direction.
//
// Shapes: x (N, C), out of gather (R, C), source (R) i32 in [-1, N); rows (R, C), slot (N, K) i32
// in [-1, R), weight (N, K) f32, out of combine (N, C). Every row index appears at most once in
// `slot` (a row belongs to one token and one choice); the CPU op checks it, a device backend
// trusts the caller. Indices outside their range throw naming the op, the index and its position
// (checked before anything is written on the CPU; a device backend flags them in its kernels and
// reports them after a wait for its stream, as embedding does, its outputs then unspecified).
// Indices from route_tokens (args.indices_checked): in range and each row named once by
// construction, so a device backend neither flags nor reads back (no host wait inside a step).
// All tensors contiguous, float tensors f32; every output is written (`=`), these ops have no
// parameters. In combine_rows_backward `rows` is read only for grad_weight and may be undefined
// when grad_weight is. Sums over j run in increasing j: the results are bit-for-bit deterministic.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct RowIndexArgs {
  bool indices_checked = false;  // source / slot come from route_tokens on this device (see above)
};

void gather_rows(const Tensor& x, const Tensor& source, Tensor& out, const RowIndexArgs& args = {});
void combine_rows_forward(const Tensor& rows, const Tensor& slot, const Tensor& weight, Tensor& out,
                          const RowIndexArgs& args = {});
void combine_rows_backward(const Tensor& rows, const Tensor& slot, const Tensor& weight, const Tensor& grad_out,
                           Tensor& grad_rows, Tensor& grad_weight, const RowIndexArgs& args = {});

namespace cpu {
void gather_rows(const Tensor& x, const Tensor& source, Tensor& out);
void combine_rows_forward(const Tensor& rows, const Tensor& slot, const Tensor& weight, Tensor& out);
void combine_rows_backward(const Tensor& rows, const Tensor& slot, const Tensor& weight, const Tensor& grad_out,
                           Tensor& grad_rows, Tensor& grad_weight);
}  // namespace cpu

}  // namespace myriad
