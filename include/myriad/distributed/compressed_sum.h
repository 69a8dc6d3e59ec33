// CompressedSum — the sum over a group of one f32 buffer per rank, sent compressed, with error
// feedback on both sides (1-bit Adam's momentum, int8 / top-k gradient compression).
//
// With P ranks, the buffer of n elements is split by the chunk rule (chunk_range(n, P, p)); rank
// p is the "server" of chunk p. One sum(x):
//   worker  y = x + e_w; each chunk p of y is encoded, e_w = y - decode(encode(y)) (what the
//           code lost is added to the next call's input); chunk p goes to rank p (all_to_all_v)
//           — the CompressedReduceScatter of x (compressed_reduce_scatter.h).
//   server  z = sum over ranks of the decoded chunks (in rank order) + e_s; encode(z),
//           e_s = z - decode(...); the encoded chunk goes to every rank (all_to_all_v), which
//           decodes it into x.
// Every rank decodes the same bytes, so every rank ends with bitwise identical x.
// Codes (ops/compression.h; a segment = one chunk, blocks never span chunks):
//   sign  blocks of 64: an f32 scale = mean |y| of the block (the scale that minimises the
//         squared error of scale * sign(y)) and one bit per element: 1.5 bits per element, 1/21
//         of f32 (blocks of 1024 cost 1.03 bits but trained the tiny model visibly worse: a
//         block then spans tensors of different scales).
//   int8  blocks of 256: an f32 scale = max |y| / 127 and round(y / scale) as int8: 8.125 bits.
//   topk  the k = ceil(ratio * n) largest |y| of the segment as (i32 index, f32 value) pairs,
//         ties to the lower index; the rest are 0 (and carried by the error).
// Bytes each rank sends per call: sum over the P - 1 other ranks of the encoded size of their
// chunk, plus (P - 1) times its own encoded chunk — against a ring all-reduce's 2 S (P-1)/P.
//
// Placement: the buffers live where the placement says (the host, or a backend's device); the
// encode / decode / error arithmetic is the ops of ops/compression.h and the exchanges are the
// group's all_to_all_v, ordered on the stream (CommWork::wait_on_stream) — on a device group
// nothing in sum() waits on the host, and the bytes and results are the host path's. The error
// buffers are this rank's state (not checkpointed); P = 1 still encodes (the same arithmetic, no
// messages).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"
#include "myriad/distributed/compressed_reduce_scatter.h"
#include "myriad/ops/compression.h"
#include "myriad/ops/placement.h"

namespace myriad::distributed {

using myriad::Compression;
using myriad::compression_name;
using myriad::CompressionSpec;
using myriad::encoded_bytes;

class CompressedSum {
 public:
  // Collective calls of sum() must use buffers of `elements` floats on every rank, placed at
  // `placement` (the group must take tensors of that device).
  CompressedSum(Communicator& group, std::int64_t elements, CompressionSpec spec, ops::Placement placement = {});

  void sum(Tensor& x);  // x <- the decoded compressed sum over the group (in place); collective
  // Bytes one sum() sends from this rank (the closed form above).
  std::int64_t bytes_sent_per_call() const;
  const CompressionSpec& spec() const { return spec_; }
  // Worker error (n floats) and server error (this rank's chunk), where the placement puts them.
  Tensor& worker_error() { return workers_.error(); }
  Tensor& server_error() { return server_error_; }

 private:
  Communicator& group_;
  std::int64_t n_;
  CompressionSpec spec_;
  CompressedReduceScatter workers_;        // the worker phase: x + e_w to the servers, summed there
  std::int64_t own_bytes_;                 // encoded bytes of this rank's chunk
  std::vector<std::int64_t> chunk_bytes_;  // encoded bytes of each rank's chunk
  Tensor server_error_;
  Tensor server_sum_;  // f32, this rank's chunk: the decoded contributions summed
  // i8 code buffers: server -> workers (its chunk, once per rank), at this worker (every chunk).
  Tensor from_server_, at_worker_;
};

}  // namespace myriad::distributed
