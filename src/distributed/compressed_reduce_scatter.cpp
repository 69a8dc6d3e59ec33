// CompressedReduceScatter: one encode per chunk, one all_to_all_v, P decodes summed into the
// owner's chunk (see compressed_reduce_scatter.h).
#include "myriad/distributed/compressed_reduce_scatter.h"

#include <numeric>

#include "myriad/core/error.h"

namespace myriad::distributed {

namespace {
Tensor chunk_of(const Tensor& t, std::int64_t begin, std::int64_t size) { return t.slice(0, begin, begin + size); }
}  // namespace

CompressedReduceScatter::CompressedReduceScatter(Communicator& group, std::int64_t elements, CompressionSpec spec,
                                                 ops::Placement placement)
    : group_(group), n_(elements), spec_(spec), placement_(placement) {
  MYRIAD_CHECK(elements >= 0, "CompressedReduceScatter: negative element count " << elements);
  MYRIAD_CHECK(spec.kind != Compression::topk || (spec.topk_ratio > 0.0 && spec.topk_ratio <= 1.0),
               "top-k compression: ratio " << spec.topk_ratio << " outside (0, 1] (training.topk_ratio)");
  const int ranks = group.size();
  for (int p = 0; p < ranks; ++p) chunk_bytes_.push_back(encoded_bytes(spec, chunk_range(n_, ranks, p).size()));
  error_ = placement_.zeros({n_});
  const std::int64_t total = std::accumulate(chunk_bytes_.begin(), chunk_bytes_.end(), std::int64_t{0});
  to_owners_ = placement_.empty({total}, DType::i8);
  at_owner_ = placement_.empty({chunk_bytes_[static_cast<std::size_t>(group.rank())] * ranks}, DType::i8);
}

std::int64_t CompressedReduceScatter::bytes_sent_per_call() const {
  const int me = group_.rank();
  std::int64_t bytes = 0;
  for (int p = 0; p < group_.size(); ++p) {
    if (p != me) bytes += chunk_bytes_[static_cast<std::size_t>(p)];
  }
  return bytes;
}

void CompressedReduceScatter::reduce_scatter(const Tensor& x, Tensor& out) {
  const int me = group_.rank(), ranks = group_.size();
  const ChunkRange own = chunk_range(n_, ranks, me);
  MYRIAD_CHECK(x.dtype() == DType::f32 && x.is_contiguous() && x.device() == placement_.device() && x.numel() == n_ &&
                   out.numel() == own.size() && out.is_contiguous(),
               "CompressedReduceScatter on group '" << group_.name() << "': expected " << n_ << " f32 elements in, "
                                                    << own.size() << " out on " << placement_.device().str() << ", got "
                                                    << x.describe() << " and " << out.describe());
  const std::int64_t mine = chunk_bytes_[static_cast<std::size_t>(me)];
  Tensor flat = x.view({n_});
  std::int64_t at = 0;
  for (int p = 0; p < ranks; ++p) {  // y = x + e, chunk by chunk; e = y - decoded
    const ChunkRange c = chunk_range(n_, ranks, p);
    Tensor code = chunk_of(to_owners_, at, chunk_bytes_[static_cast<std::size_t>(p)]);
    Tensor error = chunk_of(error_, c.begin, c.size());
    compress_encode(spec_, chunk_of(flat, c.begin, c.size()), error, code);
    at += chunk_bytes_[static_cast<std::size_t>(p)];
  }
  const std::vector<std::int64_t> from_senders(static_cast<std::size_t>(ranks), mine);
  group_.all_to_all_v_async(to_owners_, chunk_bytes_, at_owner_, from_senders)->wait_on_stream();
  Tensor sum = out.view({own.size()});
  for (int q = 0; q < ranks; ++q) compress_decode(spec_, chunk_of(at_owner_, q * mine, mine), sum, q > 0);
}

}  // namespace myriad::distributed
