// CompressedSum: the two-phase exchange with error feedback over the compression ops (see
// compressed_sum.h). Per call: the workers' CompressedReduceScatter (P encodes, one all_to_all_v,
// P decodes), then one encode, P - 1 copies and one all_to_all_v (servers), P decodes into x — all
// queued where the buffers live.
#include "myriad/distributed/compressed_sum.h"

#include <numeric>

#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"

namespace myriad::distributed {

namespace {
Tensor segment(const Tensor& t, std::int64_t begin, std::int64_t size) { return t.slice(0, begin, begin + size); }
}  // namespace

CompressedSum::CompressedSum(Communicator& group, std::int64_t elements, CompressionSpec spec, ops::Placement placement)
    : group_(group), n_(elements), spec_(spec), workers_(group, elements, spec, placement) {
  const int ranks = group.size();
  for (int p = 0; p < ranks; ++p) chunk_bytes_.push_back(encoded_bytes(spec, chunk_range(n_, ranks, p).size()));
  own_bytes_ = chunk_bytes_[static_cast<std::size_t>(group.rank())];
  const std::int64_t own = chunk_range(n_, ranks, group.rank()).size();
  server_error_ = placement.zeros({own});
  server_sum_ = placement.empty({own});
  const std::int64_t total = std::accumulate(chunk_bytes_.begin(), chunk_bytes_.end(), std::int64_t{0});
  from_server_ = placement.empty({own_bytes_ * ranks}, DType::i8);
  at_worker_ = placement.empty({total}, DType::i8);
}

std::int64_t CompressedSum::bytes_sent_per_call() const {
  return workers_.bytes_sent_per_call() + (group_.size() - 1) * own_bytes_;
}

void CompressedSum::sum(Tensor& x) {
  const int ranks = group_.size();
  const std::int64_t mine = own_bytes_;
  Tensor flat = x.view({n_});
  // Worker: y = x + e_w encoded chunk by chunk (e_w = y - decoded), each chunk to its server,
  // where z = the decoded contributions to the server's chunk summed in rank order.
  workers_.reduce_scatter(flat, server_sum_);
  // Server: y = z + e_s encoded once, e_s = y - decoded; the code is sent to every rank.
  Tensor result = segment(from_server_, 0, mine);
  compress_encode(spec_, server_sum_, server_error_, result);
  for (int p = 1; p < ranks; ++p) {
    Tensor copy_p = segment(from_server_, p * mine, mine);
    copy(result, copy_p);
  }
  const std::vector<std::int64_t> to_everyone(static_cast<std::size_t>(ranks), mine);
  group_.all_to_all_v_async(from_server_, to_everyone, at_worker_, chunk_bytes_)->wait_on_stream();
  std::int64_t at = 0;
  for (int p = 0; p < ranks; ++p) {
    const ChunkRange c = chunk_range(n_, ranks, p);
    Tensor out = segment(flat, c.begin, c.size());
    compress_decode(spec_, segment(at_worker_, at, chunk_bytes_[static_cast<std::size_t>(p)]), out, false);
    at += chunk_bytes_[static_cast<std::size_t>(p)];
  }
}

}  // namespace myriad::distributed
