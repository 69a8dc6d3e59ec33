// CompressedSum — the sum over a group of one f32 buffer per rank, sent compressed, with error
// feedback on both sides (1-bit Adam's momentum, int8 / top-k gradient compression).
//
// With P ranks, the buffer of n elements is split by the chunk rule (chunk_range(n, P, p)); rank
// p is the "server" of chunk p. One sum(x):
//   worker  y = x + e_w; each chunk p of y is encoded, e_w = y - decode(encode(y)) (what the
//           code lost is added to the next call's input); chunk p goes to rank p (all_to_all_v).
//   server  z = sum over ranks of the decoded chunks + e_s; encode(z), e_s = z - decode(...);
//           the encoded chunk goes to every rank (all_to_all_v), which decodes it into x.
// Every rank decodes the same bytes, so every rank ends with bitwise identical x.
// Codes (a segment = one chunk; blocks never span chunks):
//   sign  blocks of 64: an f32 scale = mean |y| of the block (the scale that minimises the
//         squared error of scale * sign(y)) and one bit per element: 1.5 bits per element, 1/21
//         of f32 (blocks of 1024 cost 1.03 bits but trained the tiny model visibly worse: a
//         block then spans tensors of different scales).
//   int8  blocks of 256: an f32 scale = max |y| / 127 and round(y / scale) as int8: 8.125 bits.
//   topk  the k = ceil(ratio * n) largest |y| of the segment as (i32 index, f32 value) pairs,
//         ties to the lower index; the rest are 0 (and carried by the error).
// Bytes each rank sends per call: sum over the P - 1 other ranks of the encoded size of their
// chunk, plus (P - 1) times its own encoded chunk — against a ring all-reduce's 2 S (P-1)/P.
// The error buffers are this rank's state (error_state() for checkpoints); P = 1 still encodes
// (the same arithmetic, no messages). Host f32 only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

enum class Compression { sign, int8, topk };
const char* compression_name(Compression kind);

struct CompressionSpec {
  Compression kind = Compression::sign;
  double topk_ratio = 0.01;  // topk: fraction of each chunk's elements sent, in (0, 1]
};

// Bytes of the code of a segment of `elements` floats.
std::int64_t encoded_bytes(const CompressionSpec& spec, std::int64_t elements);
// Encodes y[0, n) into `code` (encoded_bytes(spec, n) bytes) and writes what the code decodes
// to into `decoded` (may be y itself).
void encode(const CompressionSpec& spec, const float* y, std::int64_t n, std::byte* code, float* decoded);
// decoded[0, n) (+)= the values of `code`.
void decode(const CompressionSpec& spec, const std::byte* code, std::int64_t n, float* decoded, bool accumulate);

class CompressedSum {
 public:
  // Collective calls of sum() must use buffers of `elements` floats on every rank.
  CompressedSum(Communicator& group, std::int64_t elements, CompressionSpec spec);

  void sum(Tensor& x);  // x <- the decoded compressed sum over the group (in place); collective
  // Bytes one sum() sends from this rank (the closed form above).
  std::int64_t bytes_sent_per_call() const;
  const CompressionSpec& spec() const { return spec_; }
  // Worker error (n floats) and server error (this rank's chunk).
  Tensor& worker_error() { return worker_error_; }
  Tensor& server_error() { return server_error_; }

 private:
  Communicator& group_;
  std::int64_t n_;
  CompressionSpec spec_;
  std::vector<std::int64_t> chunk_bytes_;  // encoded bytes of each rank's chunk
  Tensor worker_error_, server_error_;
  Tensor scratch_;  // f32, n: decoded values
  // i8 code buffers: worker -> servers (every chunk), at this server (its chunk from every rank),
  // server -> workers (its chunk, once per rank), at this worker (every chunk).
  Tensor to_servers_, at_server_, from_server_, at_worker_;
};

}  // namespace myriad::distributed
