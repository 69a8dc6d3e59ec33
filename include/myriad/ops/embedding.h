// Embedding: a table lookup, out[..., :] = table[ids[...], :].
//
// Shapes:
//   ids        (ids...)      i32, any shape (typically (B, T)); every id must lie in [0, V)
//   table      (V, C)        f32
//   out        (ids..., C)   f32, contiguous
//   grad_out   (ids..., C)   f32
//   grad_table (V, C)        f32, contiguous
// An id outside [0, V) throws myriad::Error naming the op, the id, its position in ids and V
// (checked before anything is written).
//
// Vocabulary shard (args.vocab_shard, tensor parallelism): the table holds one rank's rows and
// the caller has mapped every id to its row here or to a negative value when another rank's shard
// holds it; negative ids give zero output rows and no gradient. Ids at or above V are still
// errors on the CPU; a device backend does not re-check ids in this mode (the caller checked the
// global ids on the host).
//
// Ids checked by the caller (args.ids_checked): the caller has checked every id on the host, so a
// device backend neither uploads nor reads back its bad-id flag — no wait for the device inside a
// step. The CPU op checks regardless (it costs nothing there).
//
// Gradient contract: the table is a parameter, so embedding_backward accumulates
// grad_table[ids[i], :] += grad_out[i, :] (`+=`); zero it once per optimizer step. The sum for
// each table element runs over the ids in row-major order, whatever the thread count, so the
// result is bit-for-bit deterministic. ids get no gradient.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct EmbeddingArgs {
  bool vocab_shard = false;  // negative ids: rows of another rank's shard (zeros, no gradient)
  bool ids_checked = false;  // the caller checked every id on the host (see above)
};

void embedding_forward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& table, Tensor& out);
void embedding_backward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& grad_out, Tensor& grad_table);

namespace cpu {
void embedding_forward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& table, Tensor& out);
void embedding_backward(const EmbeddingArgs& args, const Tensor& ids, const Tensor& grad_out, Tensor& grad_table);
}  // namespace cpu

}  // namespace myriad
