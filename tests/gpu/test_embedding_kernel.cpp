// Embedding kernels against the CPU op on fresh random ids with repeats: the lookup equals the
// table rows exactly, the gradient accumulated onto a random grad_table equals the CPU op's bit
// for bit (both sum each element in token order), a bad id is reported by position (and skipped by
// the backward); argument errors name the launcher (sizes run without a GPU; a short scratch
// needs one: its size is CUB's for the device).
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/embedding.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::DeviceArray;
using testing::expect_error_mentions;

TEST(EmbeddingKernel, LookupAndDeterministicGradientMatchTheCpuOp) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  for (auto [tokens, vocab, channels] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {300, 17, 33}, {4096, 1000, 768}}) {
    Tensor table = Tensor::empty({vocab, channels}), grad_out = Tensor::empty({tokens, channels});
    fill_uniform(table, -1, 1, seed, 1);
    fill_uniform(grad_out, -1, 1, seed, 2);
    Tensor ids = Tensor::empty({tokens}, DType::i32);
    for (std::int64_t n = 0; n < tokens; ++n) {
      ids.data<std::int32_t>()[n] =
          static_cast<std::int32_t>(philox4x32(seed, 3, static_cast<std::uint64_t>(n))[0] % vocab);
    }
    Tensor out = Tensor::empty({tokens, channels}), grad_table = Tensor::empty({vocab, channels});
    fill_uniform(grad_table, -1, 1, seed, 4);
    const std::vector<float> start(grad_table.data<float>(), grad_table.data<float>() + grad_table.numel());
    embedding_forward(EmbeddingArgs{}, ids, table, out);
    embedding_backward(EmbeddingArgs{}, ids, grad_out, grad_table);
    auto host = [](const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); };
    DeviceArray<std::int32_t> dids(
        context, std::vector<std::int32_t>(ids.data<std::int32_t>(), ids.data<std::int32_t>() + tokens));
    DeviceArray<float> dtable(context, host(table)), dgo(context, host(grad_out)), dout(context, tokens * channels);
    DeviceArray<float> dgt(context, start);
    DeviceArray<long long> bad(context, std::vector<long long>{LLONG_MAX});
    const std::int64_t scratch_bytes = cuda::embedding_backward_scratch_bytes(tokens, vocab);
    DeviceArray<unsigned char> scratch(context, scratch_bytes);
    cuda::embedding_forward_f32(dids.get(), dtable.get(), dout.get(), bad.get(), tokens, vocab, channels,
                                context.stream());
    cuda::embedding_backward_f32(dids.get(), dgo.get(), dgt.get(), bad.get(), scratch.get(), scratch_bytes, tokens,
                                 vocab, channels, context.stream());
    const std::vector<float> got_out = dout.download(), got_grad = dgt.download();
    EXPECT_EQ(std::memcmp(got_out.data(), out.data<float>(), out.nbytes()), 0) << "lookup, tokens " << tokens;
    EXPECT_EQ(std::memcmp(got_grad.data(), grad_table.data<float>(), grad_table.nbytes()), 0)
        << "gradient, tokens " << tokens;
    EXPECT_EQ(bad.download()[0], LLONG_MAX);
  }
}

TEST(EmbeddingKernel, ABadIdIsReportedByPosition) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  DeviceArray<std::int32_t> ids(context, std::vector<std::int32_t>{0, 3, 9, -1});
  DeviceArray<float> table(context, std::vector<float>(4 * 2, 1.0f)), out(context, 8);
  DeviceArray<long long> bad(context, std::vector<long long>{LLONG_MAX});
  cuda::embedding_forward_f32(ids.get(), table.get(), out.get(), bad.get(), 4, 4, 2, context.stream());
  EXPECT_EQ(bad.download()[0], 2);
  // The backward skips the bad ids (rows 0 and 3 get their tokens' rows, the rest is untouched).
  DeviceArray<float> grad_out(context, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  DeviceArray<float> grad_table(context, std::vector<float>(4 * 2, 0.5f));
  DeviceArray<long long> bad_backward(context, std::vector<long long>{LLONG_MAX});
  const std::int64_t scratch_bytes = cuda::embedding_backward_scratch_bytes(4, 4);
  DeviceArray<unsigned char> scratch(context, scratch_bytes);
  cuda::embedding_backward_f32(ids.get(), grad_out.get(), grad_table.get(), bad_backward.get(), scratch.get(),
                               scratch_bytes, 4, 4, 2, context.stream());
  EXPECT_EQ(bad_backward.download()[0], 2);
  EXPECT_EQ(grad_table.download(), (std::vector<float>{1.5f, 2.5f, 0.5f, 0.5f, 0.5f, 0.5f, 3.5f, 4.5f}));
}

TEST(EmbeddingKernel, ShortScratchIsRejected) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  DeviceArray<std::int32_t> ids(context, std::vector<std::int32_t>{0, 1, 2});
  DeviceArray<float> grad_out(context, 3 * 2), grad_table(context, 4 * 2);
  DeviceArray<long long> bad(context, std::vector<long long>{LLONG_MAX});
  const std::int64_t scratch_bytes = cuda::embedding_backward_scratch_bytes(3, 4);
  ASSERT_GT(scratch_bytes, 0);
  DeviceArray<unsigned char> scratch(context, scratch_bytes);
  expect_error_mentions(
      [&] {
        cuda::embedding_backward_f32(ids.get(), grad_out.get(), grad_table.get(), bad.get(), scratch.get(),
                                     scratch_bytes - 1, 3, 4, 2, context.stream());
      },
      {"embedding_backward_f32", "scratch holds", "embedding_backward_scratch_bytes"});
}

TEST(EmbeddingKernel, BadSizesAreRejected) {
  expect_error_mentions([] { cuda::embedding_forward_f32(nullptr, nullptr, nullptr, nullptr, 4, 0, 8, nullptr); },
                        {"embedding_forward_f32", "vocab and channels must be >= 1"});
  expect_error_mentions(
      [] { cuda::embedding_backward_f32(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 8, 0, nullptr); },
      {"embedding_backward_f32", "vocab and channels must be >= 1"});
  expect_error_mentions([] { cuda::embedding_backward_scratch_bytes(-1, 8); },
                        {"embedding_backward_scratch_bytes", "tokens must be >= 0"});
}

}  // namespace
}  // namespace myriad
