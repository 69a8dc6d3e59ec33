// embedding against a naive float64 lookup; its backward against central finite differences
// of that lookup, accumulation (+=) into the table gradient, bit-identical results across
// thread counts, and the errors for out-of-range ids and mismatched shapes / dtypes.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <initializer_list>
#include <ostream>
#include <string>

#include "myriad/ops/embedding.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::ThreadCountGuard;
using testing::to_f64;

// out[i, c] = table[ids[i], c] for flat ids (n entries) and a row-major (V, C) table.
std::vector<double> reference_embedding(const std::vector<std::int32_t>& ids, const std::vector<double>& table,
                                        std::int64_t channels) {
  std::vector<double> out(ids.size() * channels);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::int64_t c = 0; c < channels; ++c) out[i * channels + c] = table[ids[i] * channels + c];
  return out;
}

std::vector<std::int32_t> embedding_ids(const Tensor& ids) {
  Tensor dense = ids.contiguous();
  const std::int32_t* p = dense.data<std::int32_t>();
  return std::vector<std::int32_t>(p, p + dense.numel());
}

Shape with_channels(Shape shape, std::int64_t channels) {
  shape.push_back(channels);
  return shape;
}

struct EmbeddingCase {
  Shape ids_shape;
  std::int64_t vocab, channels;
};

void PrintTo(const EmbeddingCase& c, std::ostream* os) {
  *os << "ids " << shape_string(c.ids_shape) << " V=" << c.vocab << " C=" << c.channels;
}

class EmbeddingReference : public ::testing::TestWithParam<EmbeddingCase> {};

TEST_P(EmbeddingReference, ForwardAndBackwardMatchFloat64) {
  const EmbeddingCase c = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor ids = testing::random_ids(c.ids_shape, static_cast<std::int32_t>(c.vocab), seed, 0);
  Tensor table = testing::random_tensor({c.vocab, c.channels}, seed, 1);
  const Shape out_shape = with_channels(c.ids_shape, c.channels);
  Tensor out = Tensor::empty(out_shape);
  embedding_forward(EmbeddingArgs{}, ids, table, out);
  const std::vector<std::int32_t> idv = embedding_ids(ids);
  // A lookup is an exact copy.
  testing::expect_close(out, reference_embedding(idv, to_f64(table), c.channels), 0, 0, "embedding forward");

  // L = sum(out * r): d L / d table by central differences of the float64 lookup.
  Tensor r = testing::random_tensor(out_shape, seed, 2);
  const std::vector<double> rv = to_f64(r);
  auto loss = [&](const std::vector<double>& t) { return testing::dot(reference_embedding(idv, t, c.channels), rv); };
  const std::vector<double> expected = testing::numerical_gradient(loss, to_f64(table));
  Tensor grad_table = Tensor::zeros({c.vocab, c.channels});
  embedding_backward(EmbeddingArgs{}, ids, r, grad_table);
  testing::expect_close(grad_table, expected, 1e-6, 1e-6, "grad_table");

  // The table is a parameter: a second backward adds the same gradient again.
  std::vector<double> once = to_f64(grad_table);
  embedding_backward(EmbeddingArgs{}, ids, r, grad_table);
  for (double& g : once) g *= 2.0;
  testing::expect_close(grad_table, once, 1e-6, 1e-6, "grad_table after two backwards");
}

// Small vocabularies force repeated ids; C = 70 and 130 cover a partial 64-column chunk.
INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingReference,
                         ::testing::Values(EmbeddingCase{{7}, 11, 5}, EmbeddingCase{{2, 5}, 3, 70},
                                           EmbeddingCase{{3, 1, 4}, 50, 130}, EmbeddingCase{{}, 4, 3},
                                           EmbeddingCase{{1}, 1, 1}, EmbeddingCase{{0}, 6, 4}));

TEST(Embedding, StridedIdsAndTable) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor ids = testing::random_ids({6, 4}, 9, seed, 0).transpose(0, 1);    // (4, 6), not contiguous
  Tensor table = testing::random_tensor({5, 9}, seed, 1).transpose(0, 1);  // (9, 5), not contiguous
  Tensor out = Tensor::empty({4, 6, 5});
  embedding_forward(EmbeddingArgs{}, ids, table, out);
  testing::expect_close(out, reference_embedding(embedding_ids(ids), to_f64(table), 5), 0, 0, "strided forward");
}

TEST(Embedding, LargeBackwardIsThreadCountIndependentAndMatchesFloat64) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t tokens = 4096, vocab = 37, channels = 200;  // ~110 tokens per id; 4 column chunks
  Tensor ids = testing::random_ids({2, tokens / 2}, vocab, seed, 0);
  Tensor table = testing::random_tensor({vocab, channels}, seed, 1);
  Tensor grad_out = testing::random_tensor({2, tokens / 2, channels}, seed, 2);
  Tensor out = Tensor::empty({2, tokens / 2, channels});
  embedding_forward(EmbeddingArgs{}, ids, table, out);
  const std::vector<std::int32_t> idv = embedding_ids(ids);
  testing::expect_close(out, reference_embedding(idv, to_f64(table), channels), 0, 0, "large forward");

  std::vector<double> expected(vocab * channels, 0.0);
  const std::vector<double> go = to_f64(grad_out);
  for (std::int64_t i = 0; i < tokens; ++i)
    for (std::int64_t c = 0; c < channels; ++c) expected[idv[i] * channels + c] += go[i * channels + c];

  ThreadCountGuard guard;
  Tensor first;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    omp_set_num_threads(threads);
    Tensor grad_table = Tensor::zeros({vocab, channels});
    embedding_backward(EmbeddingArgs{}, ids, grad_out, grad_table);
    // ~110 f32 additions of terms in [-1, 1] per element: rounding ~ sqrt(110) * ulp(10) / 2 ~ 5e-6.
    testing::expect_close(grad_table, expected, 3e-5, 1e-5, "large grad_table");
    if (!first.defined()) {
      first = grad_table;
    } else {
      EXPECT_EQ(std::memcmp(first.raw_data(), grad_table.raw_data(), first.nbytes()), 0)
          << "grad_table differs bitwise from the 1-thread result";
    }
  }
}

TEST(Embedding, OutOfRangeIdNamesOpIdPositionAndVocab) {
  Tensor table = Tensor::zeros({11, 4});
  Tensor ids = Tensor::zeros({2, 5}, DType::i32);
  Tensor out = Tensor::full({2, 5, 4}, 7.0);
  ids.set({1, 2}, 11.0);
  expect_error_naming([&] { embedding_forward(EmbeddingArgs{}, ids, table, out); },
                      {"embedding_forward", "id 11", "[1, 2]", "flat index 7", "V = 11"});
  testing::expect_close(out, std::vector<double>(40, 7.0), 0, 0, "out untouched after a bad id");
  ids.set({1, 2}, 0.0);
  ids.set({0, 3}, -1.0);
  expect_error_naming([&] { embedding_forward(EmbeddingArgs{}, ids, table, out); }, {"id -1", "[0, 3]", "V = 11"});
  Tensor grad_out = Tensor::zeros({2, 5, 4}), grad_table = Tensor::zeros({11, 4});
  expect_error_naming([&] { embedding_backward(EmbeddingArgs{}, ids, grad_out, grad_table); },
                      {"embedding_backward", "id -1", "[0, 3]", "V = 11"});
}

// A vocabulary shard: the whole table's lookup split over two shards (ids mapped to each shard's
// rows, -1 elsewhere) sums to the unsharded lookup; each shard's gradient is its rows of the
// whole table's; an id at or above the shard's rows is still refused.
TEST(Embedding, VocabShardsSumToTheWholeLookup) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t V = 13, C = 6, split = 5;
  Tensor ids = testing::random_ids({3, 4}, static_cast<std::int32_t>(V), seed, 0);
  Tensor table = testing::random_tensor({V, C}, seed, 1), g = testing::random_tensor({3, 4, C}, seed, 2);
  const std::vector<std::int32_t> idv = embedding_ids(ids);
  const std::vector<double> whole = reference_embedding(idv, to_f64(table), C);
  std::vector<double> sum(whole.size(), 0.0), expected_grad(V * C, 0.0);
  const std::vector<double> gv = to_f64(g);
  for (std::size_t i = 0; i < idv.size(); ++i)
    for (std::int64_t c = 0; c < C; ++c) expected_grad[idv[i] * C + c] += gv[i * C + c];
  for (auto [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, split}, {split, V}}) {
    Tensor local_ids = Tensor::empty({3, 4}, DType::i32);
    for (std::size_t i = 0; i < idv.size(); ++i) {
      local_ids.data<std::int32_t>()[i] =
          idv[i] >= begin && idv[i] < end ? static_cast<std::int32_t>(idv[i] - begin) : -1;
    }
    Tensor rows = table.slice(0, begin, end).contiguous(), out = Tensor::full({3, 4, C}, 9.0);
    embedding_forward(EmbeddingArgs{.vocab_shard = true}, local_ids, rows, out);
    const std::vector<double> part = to_f64(out);
    for (std::size_t i = 0; i < idv.size(); ++i) {
      const bool here = idv[i] >= begin && idv[i] < end;
      for (std::int64_t c = 0; c < C; ++c) {
        EXPECT_EQ(part[i * C + c], here ? whole[i * C + c] : 0.0) << "shard [" << begin << ", " << end << ") row " << i;
        sum[i * C + c] += part[i * C + c];
      }
    }
    Tensor grad = Tensor::zeros({end - begin, C});
    embedding_backward(EmbeddingArgs{.vocab_shard = true}, local_ids, g, grad);
    testing::expect_close(grad, std::vector<double>(expected_grad.begin() + begin * C, expected_grad.begin() + end * C),
                          1e-6, 1e-6, "shard gradient rows");
  }
  testing::expect_close(sum, whole, 0, 0, "shards summed");
  Tensor bad = Tensor::zeros({1}, DType::i32), out = Tensor::empty({1, C});
  bad.set({0}, static_cast<double>(split));
  expect_error_naming(
      [&] { embedding_forward(EmbeddingArgs{.vocab_shard = true}, bad, table.slice(0, 0, split), out); },
      {"embedding_forward", "id 5", "V = 5"});
}

TEST(Embedding, MismatchesNameTheOpAndShapes) {
  Tensor ids = Tensor::zeros({2, 5}, DType::i32), table = Tensor::zeros({11, 4});
  Tensor bad_out = Tensor::zeros({2, 5, 3});
  expect_error_naming([&] { embedding_forward(EmbeddingArgs{}, ids, table, bad_out); },
                      {"embedding_forward", "out", "[2, 5, 3]", "[2, 5, 4]"});
  Tensor out = Tensor::zeros({2, 5, 4});
  Tensor float_ids = Tensor::zeros({2, 5});
  expect_error_naming([&] { embedding_forward(EmbeddingArgs{}, float_ids, table, out); },
                      {"embedding_forward", "ids", "f32", "i32", "[2, 5]"});
  Tensor flat_table = Tensor::zeros({44});
  expect_error_naming([&] { embedding_forward(EmbeddingArgs{}, ids, flat_table, out); },
                      {"embedding_forward", "table", "[44]"});
  Tensor grad_table = Tensor::zeros({11, 4}), bad_grad_out = Tensor::zeros({5, 2, 4});
  expect_error_naming([&] { embedding_backward(EmbeddingArgs{}, ids, bad_grad_out, grad_table); },
                      {"embedding_backward", "grad_out", "[5, 2, 4]", "[2, 5, 4]"});
  Tensor int_grad_table = Tensor::zeros({11, 4}, DType::i32);
  expect_error_naming([&] { embedding_backward(EmbeddingArgs{}, ids, out, int_grad_table); },
                      {"embedding_backward", "grad_table", "i32", "[11, 4]"});
  Tensor strided_grad_table = Tensor::zeros({4, 11}).transpose(0, 1);
  expect_error_naming([&] { embedding_backward(EmbeddingArgs{}, ids, out, strided_grad_table); },
                      {"embedding_backward", "grad_table", "contiguous", "[11, 4]"});
}

}  // namespace
}  // namespace myriad
