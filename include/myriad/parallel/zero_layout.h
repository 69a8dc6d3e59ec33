// ZeroLayout — how the flat parameter/gradient buffer is split into communication buckets and
// into this rank's ZeRO shard. Pure arithmetic over the model's parameter units; no MPI.
//
// Buckets are contiguous ranges of the flat buffer made of whole units, formed in backward order
// (last unit first) by closing a bucket once it holds >= bucket_elements (0 = one bucket with
// everything, i.e. no bucketing), and wherever units change kind: a bucket holds dense units or
// expert units (ParamUnit::expert), never both — expert gradients are reduced over the ranks
// holding the same experts, and such a bucket is sharded over `expert_parts` owners (this rank is
// `expert_index`) instead of `parts`. Bucket b spans [begin, end); with `parts` shard owners, rank
// `index` owns chunk_range(end - begin, parts, index) of it (shifted by begin). The shard buffer
// of a rank is its chunks of all buckets back to back in bucket order (shard_offset), so the
// optimizer state of the rank is exactly its shard. parts = 1 (no sharding) owns everything.
// Segments cut the owned chunks at parameter boundaries (padding between parameters belongs to
// no parameter and is never updated), giving the optimizer whole-or-partial parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/nn/unit_hooks.h"

namespace myriad::parallel {

struct ZeroBucket {
  std::int64_t begin = 0, end = 0;    // flat element range
  int first_unit = 0, last_unit = 0;  // units [first_unit, last_unit]
  bool expert = false;                // expert units: reduced and sharded over the expert-data group
  int parts = 1;                      // shard owners of this bucket
  distributed::ChunkRange owned;      // this rank's chunk, absolute flat positions
  std::int64_t shard_offset = 0;      // where `owned` starts in the shard buffer
  std::int64_t size() const { return end - begin; }
};

struct ParamSpan {
  std::int64_t offset = 0, numel = 0;  // flat position and element count of one parameter
};

struct ZeroSegment {
  std::size_t param = 0;            // index into the parameter list
  std::int64_t begin = 0, end = 0;  // flat range (inside the parameter and the owned chunk)
  std::int64_t shard_position = 0;  // position of `begin` in the shard buffer
  bool expert = false;              // in an expert bucket (ZeroBucket::expert)
};

class ZeroLayout {
 public:
  // expert_parts 0: expert buckets are sharded like dense ones.
  ZeroLayout(const std::vector<nn::ParamUnit>& units, std::int64_t bucket_elements, int parts, int index,
             int expert_parts = 0, int expert_index = 0);

  const std::vector<ZeroBucket>& buckets() const { return buckets_; }
  int bucket_of_unit(int unit) const { return bucket_of_unit_.at(static_cast<std::size_t>(unit)); }
  std::int64_t shard_elements() const { return shard_elements_; }
  std::int64_t total_elements() const { return total_; }
  int parts() const { return parts_; }  // of the dense buckets (>= any expert bucket's)
  int index() const { return index_; }
  std::vector<ZeroSegment> segments(const std::vector<ParamSpan>& params) const;

 private:
  std::vector<ZeroBucket> buckets_;
  std::vector<int> bucket_of_unit_;
  std::int64_t shard_elements_ = 0, total_ = 0;
  int parts_ = 1, index_ = 0;
};

}  // namespace myriad::parallel
