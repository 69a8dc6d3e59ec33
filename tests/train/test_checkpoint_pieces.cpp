// segment_pieces: a flat element range of a (tensor-parallel sharded) parameter becomes boxes of
// the global tensor whose data are views of the packed buffer. For every range [first, last) of
// a 3-D parameter held as two row ranges of a larger global tensor, writing each piece's data
// into its global box must reproduce exactly the local elements first..last-1 at their global
// positions, and touch nothing else.
#include <gtest/gtest.h>

#include <vector>

#include "myriad/nn/parameter_store.h"
#include "myriad/train/checkpoint/checkpoint.h"

namespace myriad::train {
namespace {

TEST(CheckpointPieces, FlatRangesBecomeExactGlobalBoxes) {
  nn::ParameterStore store;
  // Global (7, 3, 4); this rank holds rows [1, 3) and [5, 6) along dim 0: local (3, 3, 4).
  const std::size_t index =
      store.add_shard("w", {7, 3, 4}, 0, {{1, 3}, {5, 6}}, nn::ParamKind::weight, nn::ParamInit::zeros);
  store.allocate();
  const nn::Parameter& p = store[index];
  const std::int64_t local_n = shape_numel(p.shape), global_n = shape_numel(p.global_shape);
  ASSERT_EQ(local_n, 36);
  // Local element e maps to global: row = [1, 2, 5][e / 12], then the same (j, k).
  const std::int64_t rows[] = {1, 2, 5};
  for (std::int64_t first = 0; first <= local_n; ++first) {
    for (std::int64_t last = first; last <= local_n; ++last) {
      Tensor packed = Tensor::empty({std::max<std::int64_t>(last - first, 1) + 3});
      for (std::int64_t e = 0; e < packed.numel(); ++e) packed.data<float>()[e] = static_cast<float>(1000 + e);
      const std::vector<CheckpointPiece> pieces = segment_pieces(p, first, last, packed, 3, "x/");
      Tensor global = Tensor::zeros({7, 3, 4});
      std::int64_t written = 0;
      for (const CheckpointPiece& piece : pieces) {
        EXPECT_EQ(piece.tensor, "x/w");
        Tensor target = global;
        for (std::size_t d = 0; d < piece.box.size(); ++d) {
          target = target.slice(static_cast<int>(d), piece.box[d].begin, piece.box[d].end);
        }
        target.copy_from(piece.data);
        written += piece.data.numel();
      }
      ASSERT_EQ(written, last - first) << "[" << first << ", " << last << ")";
      for (std::int64_t e = first; e < last; ++e) {
        const std::int64_t g = (rows[e / 12] * 3 + (e % 12) / 4) * 4 + e % 4;
        ASSERT_EQ(global.data<float>()[g], static_cast<float>(1000 + 3 + e - first))
            << "local element " << e << " of [" << first << ", " << last << ")";
      }
      double total = 0;
      for (std::int64_t g = 0; g < global_n; ++g) total += global.data<float>()[g] != 0.0f;
      EXPECT_EQ(total, static_cast<double>(last - first)) << "pieces wrote outside the range";
    }
  }
}

}  // namespace
}  // namespace myriad::train
