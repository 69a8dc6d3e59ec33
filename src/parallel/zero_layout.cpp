// ZeroLayout: buckets in backward order, owned chunks, shard offsets, parameter segments.
#include "myriad/parallel/zero_layout.h"

#include <algorithm>

#include "myriad/core/error.h"

namespace myriad::parallel {

ZeroLayout::ZeroLayout(const std::vector<nn::ParamUnit>& units, std::int64_t bucket_elements, int parts, int index,
                       int expert_parts, int expert_index)
    : parts_(parts), index_(index) {
  if (expert_parts == 0) {
    expert_parts = parts;
    expert_index = index;
  }
  MYRIAD_CHECK(expert_parts >= 1 && expert_index >= 0 && expert_index < expert_parts,
               "ZeroLayout: expert shard index " << expert_index << " is outside [0, " << expert_parts << ")");
  MYRIAD_CHECK(!units.empty(), "ZeroLayout: the model has no parameter units");
  MYRIAD_CHECK(parts >= 1 && index >= 0 && index < parts,
               "ZeroLayout: shard index " << index << " is outside [0, " << parts << ")");
  MYRIAD_CHECK(bucket_elements >= 0, "ZeroLayout: bucket size " << bucket_elements << " must be >= 0");
  for (std::size_t u = 1; u < units.size(); ++u) {
    MYRIAD_CHECK(units[u].begin == units[u - 1].end,
                 "ZeroLayout: unit '" << units[u].name << "' starts at " << units[u].begin << ", not where '"
                                      << units[u - 1].name << "' ends (" << units[u - 1].end << ")");
  }
  total_ = units.back().end - units.front().begin;
  bucket_of_unit_.assign(units.size(), -1);
  int last = static_cast<int>(units.size()) - 1;
  for (int u = last; u >= 0; --u) {
    const std::int64_t span = units[static_cast<std::size_t>(last)].end - units[static_cast<std::size_t>(u)].begin;
    // A bucket holds units of one kind (dense or expert): they reduce over different groups.
    const bool kind_changes =
        u > 0 && units[static_cast<std::size_t>(u - 1)].expert != units[static_cast<std::size_t>(u)].expert;
    const bool close = u == 0 || kind_changes || (bucket_elements > 0 && span >= bucket_elements);
    if (!close) continue;
    ZeroBucket b;
    b.first_unit = u;
    b.last_unit = last;
    b.begin = units[static_cast<std::size_t>(u)].begin;
    b.end = units[static_cast<std::size_t>(last)].end;
    b.expert = units[static_cast<std::size_t>(u)].expert;
    b.parts = b.expert ? expert_parts : parts;
    distributed::ChunkRange local = distributed::chunk_range(b.size(), b.parts, b.expert ? expert_index : index);
    b.owned = distributed::ChunkRange{b.begin + local.begin, b.begin + local.end};
    b.shard_offset = shard_elements_;
    shard_elements_ += local.size();
    for (int v = u; v <= last; ++v) bucket_of_unit_[static_cast<std::size_t>(v)] = static_cast<int>(buckets_.size());
    buckets_.push_back(b);
    last = u - 1;
  }
}

std::vector<ZeroSegment> ZeroLayout::segments(const std::vector<ParamSpan>& params) const {
  std::vector<ZeroSegment> out;
  for (const ZeroBucket& b : buckets_) {
    for (std::size_t p = 0; p < params.size(); ++p) {
      const std::int64_t begin = std::max(b.owned.begin, params[p].offset);
      const std::int64_t end = std::min(b.owned.end, params[p].offset + params[p].numel);
      if (begin >= end) continue;
      out.push_back(ZeroSegment{p, begin, end, b.shard_offset + (begin - b.owned.begin), b.expert});
    }
  }
  return out;
}

}  // namespace myriad::parallel
