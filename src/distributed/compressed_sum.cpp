// CompressedSum: the two-phase exchange with error feedback over the compression ops (see
// compressed_sum.h). Per call: P encodes and one all_to_all_v (workers), P decodes, one encode, P - 1
// copies and one all_to_all_v (servers), P decodes into x — all queued where the buffers live.
#include "myriad/distributed/compressed_sum.h"

#include <numeric>

#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"

namespace myriad::distributed {

namespace {
Tensor segment(const Tensor& t, std::int64_t begin, std::int64_t size) { return t.slice(0, begin, begin + size); }
}  // namespace

CompressedSum::CompressedSum(Communicator& group, std::int64_t elements, CompressionSpec spec, ops::Placement placement)
    : group_(group), n_(elements), spec_(spec), placement_(placement) {
  MYRIAD_CHECK(elements >= 0, "CompressedSum: negative element count " << elements);
  MYRIAD_CHECK(spec.kind != Compression::topk || (spec.topk_ratio > 0.0 && spec.topk_ratio <= 1.0),
               "top-k compression: ratio " << spec.topk_ratio << " outside (0, 1] (training.topk_ratio)");
  const int ranks = group.size();
  for (int p = 0; p < ranks; ++p) chunk_bytes_.push_back(encoded_bytes(spec, chunk_range(n_, ranks, p).size()));
  const std::int64_t own = chunk_range(n_, ranks, group.rank()).size();
  worker_error_ = placement_.zeros({n_});
  server_error_ = placement_.zeros({own});
  server_sum_ = placement_.empty({own});
  const std::int64_t total = std::accumulate(chunk_bytes_.begin(), chunk_bytes_.end(), std::int64_t{0});
  const std::int64_t mine = chunk_bytes_[static_cast<std::size_t>(group.rank())];
  to_servers_ = placement_.empty({total}, DType::i8);
  at_server_ = placement_.empty({mine * ranks}, DType::i8);
  from_server_ = placement_.empty({mine * ranks}, DType::i8);
  at_worker_ = placement_.empty({total}, DType::i8);
}

std::int64_t CompressedSum::bytes_sent_per_call() const {
  const int me = group_.rank(), ranks = group_.size();
  std::int64_t bytes = 0;
  for (int p = 0; p < ranks; ++p) {
    if (p != me) bytes += chunk_bytes_[static_cast<std::size_t>(p)] + chunk_bytes_[static_cast<std::size_t>(me)];
  }
  return bytes;
}

void CompressedSum::sum(Tensor& x) {
  MYRIAD_CHECK(x.dtype() == DType::f32 && x.is_contiguous() && x.device() == placement_.device() && x.numel() == n_,
               "CompressedSum on group '" << group_.name() << "': expected " << n_ << " contiguous f32 elements on "
                                          << placement_.device().str() << ", got " << x.describe());
  const int me = group_.rank(), ranks = group_.size();
  const std::int64_t mine = chunk_bytes_[static_cast<std::size_t>(me)];
  Tensor flat = x.view({n_});
  // Worker: y = x + e_w, encoded chunk by chunk; e_w = y - decoded.
  std::int64_t at = 0;
  for (int p = 0; p < ranks; ++p) {
    const ChunkRange c = chunk_range(n_, ranks, p);
    Tensor code = segment(to_servers_, at, chunk_bytes_[static_cast<std::size_t>(p)]);
    Tensor error = segment(worker_error_, c.begin, c.size());
    compress_encode(spec_, segment(flat, c.begin, c.size()), error, code);
    at += chunk_bytes_[static_cast<std::size_t>(p)];
  }
  const std::vector<std::int64_t> from_workers(static_cast<std::size_t>(ranks), mine);
  group_.all_to_all_v_async(to_servers_, chunk_bytes_, at_server_, from_workers)->wait_on_stream();
  // Server: z = the decoded contributions to my chunk summed in rank order; y = z + e_s encoded
  // once, e_s = y - decoded; the code is sent to every rank.
  for (int q = 0; q < ranks; ++q) compress_decode(spec_, segment(at_server_, q * mine, mine), server_sum_, q > 0);
  Tensor result = segment(from_server_, 0, mine);
  compress_encode(spec_, server_sum_, server_error_, result);
  for (int p = 1; p < ranks; ++p) {
    Tensor copy_p = segment(from_server_, p * mine, mine);
    copy(result, copy_p);
  }
  const std::vector<std::int64_t> to_everyone(static_cast<std::size_t>(ranks), mine);
  group_.all_to_all_v_async(from_server_, to_everyone, at_worker_, chunk_bytes_)->wait_on_stream();
  at = 0;
  for (int p = 0; p < ranks; ++p) {
    const ChunkRange c = chunk_range(n_, ranks, p);
    Tensor out = segment(flat, c.begin, c.size());
    compress_decode(spec_, segment(at_worker_, at, chunk_bytes_[static_cast<std::size_t>(p)]), out, false);
    at += chunk_bytes_[static_cast<std::size_t>(p)];
  }
}

}  // namespace myriad::distributed
