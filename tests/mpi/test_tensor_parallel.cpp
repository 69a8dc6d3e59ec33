// Tensor-parallel building blocks under mpiexec (tp = world size), each against the serial op on
// the full tensors (regenerated identically on every rank from one seed): vocabulary-parallel
// cross-entropy and embedding with a vocabulary not divisible by tp (padding columns get no
// probability and no gradient), the last-dimension gather/slice, the sequence-parallel gather
// overlapped with its consumer and the reduce-scatter fed by its producer (rings of send / recv),
// and a column-parallel then row-parallel MLP whose outputs and every gradient equal the serial MLP's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "mpi_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/parallel/tensor_parallel_region.h"
#include "myriad/parallel/tensor_parallel_regions.h"
#include "myriad/parallel/vocab_parallel.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/embedding.h"

namespace myriad::distributed {
namespace {

Tensor random(const Shape& shape, std::uint64_t stream, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape);
  fill_uniform(t, -scale, scale, 2024, stream);
  return t;
}

Tensor columns(const Tensor& full, std::int64_t begin, std::int64_t end) {
  return full.slice(1, begin, end).contiguous();
}

void expect_close(const Tensor& actual, const Tensor& expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const Tensor a = actual.contiguous(), e = expected.contiguous();
  double worst = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double diff = std::abs(static_cast<double>(a.data<float>()[i]) - e.data<float>()[i]);
    worst = std::max(worst, diff / (1.0 + std::abs(static_cast<double>(e.data<float>()[i]))));
  }
  EXPECT_LT(worst, tol) << what << " on rank " << myriad::testing::world_rank();
}

TEST(TensorParallel, VocabParallelCrossEntropyEqualsSerial) {
  auto tp = myriad::testing::make_world("tp");
  const int parts = tp->size(), rank = tp->rank();
  const std::int64_t n = 37, vocab = 101;
  const std::int64_t local = (vocab + parts - 1) / parts, padded = local * parts;
  Tensor full = random({n, padded}, 1, 4.0f);
  Tensor targets = Tensor::empty({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i)
    targets.data<std::int32_t>()[i] = i % 7 == 3 ? -100 : static_cast<std::int32_t>((i * 37) % vocab);
  // Serial reference on the real vocabulary.
  Tensor real = columns(full, 0, vocab);
  Tensor losses = Tensor::empty({n}), lse = Tensor::empty({n}), grad = Tensor::empty({n, vocab});
  Tensor grad_losses = random({n}, 2);
  cross_entropy_forward(CrossEntropyArgs{}, real, targets, losses, lse);
  cross_entropy_backward(CrossEntropyArgs{}, real, targets, lse, grad_losses, grad);
  // Parallel.
  parallel::VocabShard shard{rank * local, vocab};
  const std::int64_t real_here = shard.real_columns(local);  // the last shard ends at the real vocabulary
  ASSERT_EQ(real_here, std::clamp<std::int64_t>(vocab - rank * local, 0, local));
  Tensor mine = columns(full, rank * local, rank * local + real_here);
  Tensor p_losses = Tensor::empty({n}), p_lse = Tensor::empty({n}), p_grad = Tensor::empty({n, real_here});
  parallel::vocab_parallel_cross_entropy_forward(*tp, shard, mine, targets, -100, p_losses, p_lse);
  parallel::vocab_parallel_cross_entropy_backward(shard, mine, targets, -100, p_lse, grad_losses, p_grad);
  expect_close(p_losses, losses, 1e-5, "losses");
  expect_close(p_lse, lse, 1e-5, "lse");
  expect_close(p_grad, columns(grad, rank * local, rank * local + real_here), 1e-5, "grad_logits of the shard");
}

TEST(TensorParallel, VocabParallelEmbeddingEqualsSerial) {
  auto tp = myriad::testing::make_world("tp");
  const int parts = tp->size(), rank = tp->rank();
  const std::int64_t n = 29, vocab = 53, c = 12;
  const std::int64_t local = (vocab + parts - 1) / parts;
  Tensor table = random({local * parts, c}, 3);
  Tensor ids = Tensor::empty({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) ids.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 11 + 5) % vocab);
  Tensor out = Tensor::empty({n, c}), grad_out = random({n, c}, 4), grad_table = Tensor::zeros({local * parts, c});
  embedding_forward(EmbeddingArgs{}, ids, table, out);
  embedding_backward(EmbeddingArgs{}, ids, grad_out, grad_table);
  parallel::VocabShard shard{rank * local, vocab};
  Tensor mine = table.slice(0, rank * local, (rank + 1) * local).contiguous();
  Tensor p_out = Tensor::empty({n, c}), p_grad = Tensor::zeros({local, c});
  parallel::vocab_parallel_embedding_forward(*tp, shard, ids, mine, p_out);
  parallel::vocab_parallel_embedding_backward(shard, ids, grad_out, p_grad);
  expect_close(p_out, out, 0.0 + 1e-7, "embedding output");
  expect_close(p_grad, grad_table.slice(0, rank * local, (rank + 1) * local), 1e-6, "embedding grad rows");
}

TEST(TensorParallel, GatherAndSliceLastDimAreInverse) {
  auto tp = myriad::testing::make_world("tp");
  const int parts = tp->size(), rank = tp->rank();
  Tensor full = random({5, 3 * parts}, 5);
  Tensor mine = Tensor::empty({5, 3});
  parallel::slice_last_dim(full, rank, mine);
  Tensor gathered = Tensor::empty({5, 3 * parts});
  parallel::gather_last_dim(*tp, mine, gathered);
  expect_close(gathered, full, 0.0 + 1e-12, "gather(slice(x))");
}

// The sequence-parallel gather overlapped with its consumer: full equals the plain all-gather bit
// for bit, and the consumer sees every rank's block of rows exactly once — this rank's first, then
// the ring order r - 1, r - 2, ... — each already in place when it is called.
TEST(TensorParallel, OverlappedGatherConsumesEveryBlockOnceInRingOrder) {
  auto tp = myriad::testing::make_world("tp");
  const int parts = tp->size(), rank = tp->rank();
  const nn::TransformerConfig model = nn::TransformerConfig::gpt2(64, 1, 2, 8, 16);
  parallel::TensorParallelRegions regions(*tp, true, model);
  const std::int64_t n = 3, C = 8;
  const Tensor all = random({parts * n, C}, 9);
  const Tensor mine = all.slice(0, rank * n, (rank + 1) * n).contiguous().view({1, n, C});
  Tensor full = Tensor::full({parts, n, C}, -7.0);
  std::vector<std::int64_t> order;
  regions.gather_rows_overlapped(mine, full, [&](std::int64_t begin, std::int64_t end) {
    ASSERT_EQ(end - begin, n);
    ASSERT_EQ(begin % n, 0);
    order.push_back(begin / n);
    expect_close(full.view({parts * n, C}).slice(0, begin, end), all.slice(0, begin, end), 1e-12,
                 "a block handed to the consumer");
  });
  expect_close(full.view({parts * n, C}), all, 1e-12, "the gathered rows");
  ASSERT_EQ(static_cast<int>(order.size()), parts);
  for (int step = 0; step < parts; ++step)
    EXPECT_EQ(order[static_cast<std::size_t>(step)], (rank - step + parts) % parts);
}

// The sequence-parallel reduce-scatter fed by its producer (a ring): each rank's rows equal the
// float64 sum over ranks of every rank's partial product of them, and the producer is asked for
// every block exactly once, in ring order r - 1, r - 2, ..., ending with the rank's own block,
// writing (`=`) into what it is handed — pre-filled with garbage here.
TEST(TensorParallel, OverlappedReduceScatterProducesEveryBlockOnceInRingOrder) {
  auto tp = myriad::testing::make_world("tp");
  const int parts = tp->size(), rank = tp->rank();
  const nn::TransformerConfig model = nn::TransformerConfig::gpt2(64, 1, 2, 8, 16);
  parallel::TensorParallelRegions regions(*tp, true, model);
  const std::int64_t n = 3, C = 8;
  auto partial_of = [&](int r) { return random({parts * n, C}, 20 + static_cast<std::uint64_t>(r)); };
  const Tensor mine = partial_of(rank);
  Tensor full = Tensor::full({parts, n, C}, 1e30), rows = Tensor::full({1, n, C}, -3.0);
  std::vector<std::int64_t> order;
  regions.reduce_to_rows_overlapped(full, rows, [&](std::int64_t begin, std::int64_t end, Tensor& out) {
    ASSERT_EQ(end - begin, n);
    ASSERT_EQ(begin % n, 0);
    ASSERT_EQ(out.shape(), (Shape{n, C}));
    order.push_back(begin / n);
    fill_uniform(out, 1e20f, 2e20f, 77, 1);  // garbage the producer must overwrite
    copy(mine.slice(0, begin, end), out);
  });
  std::vector<double> sums(static_cast<std::size_t>(n * C), 0.0);
  for (int r = 0; r < parts; ++r) {
    const Tensor theirs = partial_of(r).slice(0, rank * n, (rank + 1) * n).contiguous();
    for (std::int64_t i = 0; i < n * C; ++i) sums[static_cast<std::size_t>(i)] += theirs.data<float>()[i];
  }
  Tensor expected = Tensor::empty({n, C});
  for (std::int64_t i = 0; i < n * C; ++i)
    expected.data<float>()[i] = static_cast<float>(sums[static_cast<std::size_t>(i)]);
  expect_close(rows.view({n, C}), expected, 1e-6, "the reduced rows");
  ASSERT_EQ(static_cast<int>(order.size()), parts);
  for (int step = 0; step < parts; ++step)
    EXPECT_EQ(order[static_cast<std::size_t>(step)], ((rank - 1 - step) % parts + parts) % parts);
}

// Without sequence parallelism the reduction is all-reduces of two row blocks, the first's in
// flight while the second is produced: every rank's rows equal the float64 sum of all ranks' partial
// products, produced once per block in row order.
TEST(TensorParallel, OverlappedAllReduceProducesTwoBlocksInOrder) {
  auto tp = myriad::testing::make_world("tp");
  const int parts = tp->size();
  const nn::TransformerConfig model = nn::TransformerConfig::gpt2(64, 1, 2, 8, 16);
  parallel::TensorParallelRegions regions(*tp, false, model);
  const std::int64_t N = 7, C = 8;
  auto partial_of = [&](int r) { return random({N, C}, 40 + static_cast<std::uint64_t>(r)); };
  const Tensor mine = partial_of(tp->rank());
  Tensor full = Tensor::full({1, N, C}, 1e30);
  std::vector<std::pair<std::int64_t, std::int64_t>> blocks;
  regions.reduce_to_rows_overlapped(full, full, [&](std::int64_t begin, std::int64_t end, Tensor& out) {
    blocks.emplace_back(begin, end);
    copy(mine.slice(0, begin, end), out);
  });
  ASSERT_EQ(blocks, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 3}, {3, 7}}));
  std::vector<double> sums(static_cast<std::size_t>(N * C), 0.0);
  for (int r = 0; r < parts; ++r) {
    const Tensor theirs = partial_of(r);
    for (std::int64_t i = 0; i < N * C; ++i) sums[static_cast<std::size_t>(i)] += theirs.data<float>()[i];
  }
  Tensor expected = Tensor::empty({N, C});
  for (std::int64_t i = 0; i < N * C; ++i)
    expected.data<float>()[i] = static_cast<float>(sums[static_cast<std::size_t>(i)]);
  expect_close(full.view({N, C}), expected, 1e-6, "the all-reduced rows");
}

TEST(TensorParallel, ColumnThenRowParallelMlpEqualsSerial) {
  auto tp = myriad::testing::make_world("tp");
  const int parts = tp->size(), rank = tp->rank();
  const std::int64_t n = 24, c = 16, f = 8 * parts, fl = 8;
  Tensor x = random({n, c}, 6), w1 = random({f, c}, 7, 0.3f), w2 = random({c, f}, 8, 0.3f), dy = random({n, c}, 9);
  // Serial: y = gelu(x W1^T) W2^T.
  Tensor h = Tensor::empty({n, f}), a = Tensor::empty({n, f}), y = Tensor::empty({n, c});
  nn::linear_forward(x, w1, Tensor(), h);
  gelu_forward(GeluArgs{}, h, a);
  nn::linear_forward(a, w2, Tensor(), y);
  Tensor da = Tensor::empty({n, f}), dh = Tensor::empty({n, f}), dx = Tensor::empty({n, c});
  Tensor dw1 = Tensor::zeros({f, c}), dw2 = Tensor::zeros({c, f}), none;
  nn::linear_backward(a, w2, dy, da, false, dw2, none);
  gelu_backward(GeluArgs{}, h, da, dh);
  nn::linear_backward(x, w1, dh, dx, false, dw1, none);
  // Tensor parallel: W1 split by output rows (column-parallel), W2 by input columns (row-parallel).
  Tensor w1_local = w1.slice(0, rank * fl, (rank + 1) * fl).contiguous();
  Tensor w2_local = columns(w2, rank * fl, (rank + 1) * fl);
  Tensor h_l = Tensor::empty({n, fl}), a_l = Tensor::empty({n, fl}), y_p = Tensor::empty({n, c});
  nn::linear_forward(x, w1_local, Tensor(), h_l);  // copy_to_tp_region(x): identity forward
  gelu_forward(GeluArgs{}, h_l, a_l);
  nn::linear_forward(a_l, w2_local, Tensor(), y_p);
  parallel::reduce_from_tp_region_forward(*tp, y_p);
  expect_close(y_p, y, 1e-5, "MLP output");
  Tensor da_l = Tensor::empty({n, fl}), dh_l = Tensor::empty({n, fl}), dx_p = Tensor::empty({n, c});
  Tensor dw1_l = Tensor::zeros({fl, c}), dw2_l = Tensor::zeros({c, fl});
  nn::linear_backward(a_l, w2_local, dy, da_l, false, dw2_l, none);  // reduce_from: identity backward
  gelu_backward(GeluArgs{}, h_l, da_l, dh_l);
  nn::linear_backward(x, w1_local, dh_l, dx_p, false, dw1_l, none);
  parallel::copy_to_tp_region_backward(*tp, dx_p);
  expect_close(dx_p, dx, 1e-5, "grad x");
  expect_close(dw1_l, dw1.slice(0, rank * fl, (rank + 1) * fl), 1e-5, "grad W1 rows");
  expect_close(dw2_l, columns(dw2, rank * fl, (rank + 1) * fl), 1e-5, "grad W2 columns");
}

}  // namespace
}  // namespace myriad::distributed
