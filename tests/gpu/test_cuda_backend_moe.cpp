// The CUDA backend against the CPU backend for the mixture-of-experts ops: token routing (gather,
// combine forward / backward with and without weights, K = 1..8, unused slots, padding rows) and
// the grouped matmul (empty groups, bias, grad_x written or accumulated, grad_weight / grad_bias
// accumulated, bf16 and f16 operands) — through the ops' dispatch points; bad routing indices
// reported as the CPU op reports them; the routing decisions (route_tokens and its backward: both
// row layouts, capacity and dropless, softmax and sigmoid scores, context parallel ranks with
// their choice counts). Runs on a GPU and on the emulated CUDA layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_backend_fixture.h"
#include "myriad/ops/grouped_matmul.h"
#include "myriad/ops/moe_routing.h"
#include "myriad/ops/token_routing.h"

namespace myriad {
namespace {

using testing::CudaBackendTest;
using testing::expect_error_mentions;

constexpr double kMoeTolerance = 1e-5;

// slot (N, K): `assigned` random positions name distinct rows of R, the rest -1; source (R): the
// token naming each row, -1 for padding rows.
struct Routing {
  Tensor slot, source;
};

Routing random_routing(std::int64_t tokens, std::int64_t k, std::int64_t rows, std::int64_t assigned,
                       std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> positions(tokens * k), row_ids(rows);
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(row_ids.begin(), row_ids.end(), 0);
  std::shuffle(positions.begin(), positions.end(), rng);
  std::shuffle(row_ids.begin(), row_ids.end(), rng);
  Routing routing{Tensor::full({tokens, k}, -1.0, DType::i32), Tensor::full({rows}, -1.0, DType::i32)};
  for (std::int64_t i = 0; i < assigned; ++i) {
    routing.slot.data<std::int32_t>()[positions[i]] = static_cast<std::int32_t>(row_ids[i]);
    routing.source.data<std::int32_t>()[row_ids[i]] = static_cast<std::int32_t>(positions[i] / k);
  }
  return routing;
}

TEST_F(CudaBackendTest, TokenRoutingMatchesTheCpu) {
  struct Case {
    std::int64_t tokens, k, rows, assigned, channels;
  };
  for (const Case& c : {Case{9, 1, 9, 9, 40}, Case{33, 2, 80, 60, 130}, Case{17, 4, 70, 50, 64},
                        Case{12, 8, 100, 96, 257}, Case{5, 3, 6, 0, 8}}) {
    SCOPED_TRACE(::testing::Message() << "N " << c.tokens << " K " << c.k << " R " << c.rows << " C " << c.channels);
    const Routing routing = random_routing(c.tokens, c.k, c.rows, c.assigned, 7 + c.k);
    const Tensor d_slot = on_device(routing.slot), d_source = on_device(routing.source);
    const Tensor x = random({c.tokens, c.channels}, 1), rows = random({c.rows, c.channels}, 2);
    const Tensor weight = random({c.tokens, c.k}, 3), g = random({c.tokens, c.channels}, 4);

    Tensor gathered = Tensor::empty({c.rows, c.channels}), d_gathered = backend_->empty({c.rows, c.channels});
    gather_rows(x, routing.source, gathered);
    gather_rows(on_device(x), d_source, d_gathered);
    expect_close(d_gathered, gathered, 0.0, "gather_rows");

    for (bool weighted : {true, false}) {
      SCOPED_TRACE(weighted ? "weighted" : "weight undefined");
      const Tensor w = weighted ? weight : Tensor(), d_w = on_device(w);
      Tensor out = Tensor::empty({c.tokens, c.channels}), d_out = backend_->empty({c.tokens, c.channels});
      combine_rows_forward(rows, routing.slot, w, out);
      combine_rows_forward(on_device(rows), d_slot, d_w, d_out);
      expect_close(d_out, out, kMoeTolerance, "combine_rows_forward");

      Tensor grad_rows = Tensor::empty({c.rows, c.channels}), grad_weight = Tensor::empty({c.tokens, c.k});
      Tensor d_grad_rows = backend_->empty({c.rows, c.channels}), d_grad_weight = backend_->empty({c.tokens, c.k});
      combine_rows_backward(rows, routing.slot, w, g, grad_rows, grad_weight);
      combine_rows_backward(on_device(rows), d_slot, d_w, on_device(g), d_grad_rows, d_grad_weight);
      expect_close(d_grad_rows, grad_rows, 0.0, "grad_rows");
      expect_close(d_grad_weight, grad_weight, kMoeTolerance, "grad_weight");
      Tensor skipped, d_rows_only = backend_->empty({c.rows, c.channels});
      combine_rows_backward(Tensor(), d_slot, d_w, on_device(g), d_rows_only, skipped);
      expect_close(d_rows_only, grad_rows, 0.0, "grad_rows without grad_weight");
    }
  }
}

TEST_F(CudaBackendTest, BadRoutingIndicesAreNamedAsOnTheCpu) {
  const Tensor x = random({6, 16}, 1), rows = random({5, 16}, 2);
  Tensor source = Tensor::full({4}, -1.0, DType::i32);
  source.data<std::int32_t>()[3] = 9;
  Tensor d_out = backend_->empty({4, 16});
  expect_error_mentions([&] { gather_rows(on_device(x), on_device(source), d_out); },
                        {"gather_rows", "source index 9", "position 3", "[-1, N) with N = 6"});
  Tensor slot = Tensor::full({3, 2}, -1.0, DType::i32);
  slot.data<std::int32_t>()[0] = 1;
  slot.data<std::int32_t>()[3] = 5;
  Tensor d_combined = backend_->empty({3, 16}), d_grad_rows = backend_->empty({5, 16}), skipped;
  expect_error_mentions([&] { combine_rows_forward(on_device(rows), on_device(slot), Tensor(), d_combined); },
                        {"combine_rows_forward", "row index 5", "[1, 1]", "R = 5"});
  slot.data<std::int32_t>()[3] = -4;
  expect_error_mentions(
      [&] {
        combine_rows_backward(Tensor(), on_device(slot), Tensor(), on_device(random({3, 16}, 3)), d_grad_rows, skipped);
      },
      {"combine_rows_backward", "row index -4", "[1, 1]"});
}

// Every output of route_tokens on both backends: integers equal, floats within a few float64
// ulps of exp / log (then rounded to f32), totals added onto a non-zero start.
TEST_F(CudaBackendTest, RouteTokensAndItsBackwardMatchTheCpu) {
  struct Case {
    std::int64_t tokens, experts, k, seq_len, capacity;
    bool padded, sigmoid, normalize;
    std::int64_t context_ranks = 1, context_rank = 0;
  };
  for (const Case& c :
       {Case{24, 4, 2, 6, 2, true, false, true}, Case{24, 4, 2, 6, 2, false, false, true},
        Case{64, 8, 2, 16, -1, false, false, true}, Case{40, 16, 4, 8, 3, true, true, false},
        Case{30, 6, 1, 10, 0, true, false, true}, Case{300, 64, 8, 100, 20, true, true, true},
        Case{0, 4, 2, 4, 1, true, false, true}, Case{24, 4, 2, 6, 5, true, false, true, 2, 1},
        Case{48, 8, 2, 8, 6, false, true, true, 4, 2}, Case{32, 6, 2, 8, -1, false, false, true, 2, 0}}) {
    SCOPED_TRACE(::testing::Message() << "N " << c.tokens << " E " << c.experts << " k " << c.k << " T " << c.seq_len
                                      << " capacity " << c.capacity << (c.padded ? " padded" : " compact")
                                      << (c.sigmoid ? " sigmoid" : " softmax") << " cp rank " << c.context_rank
                                      << " of " << c.context_ranks);
    const RouteArgs args{.top_k = c.k,
                         .seq_len = c.seq_len,
                         .capacity = c.capacity,
                         .sigmoid = c.sigmoid,
                         .normalize_top_k = c.normalize,
                         .padded = c.padded,
                         .context_ranks = c.context_ranks,
                         .context_rank = c.context_rank};
    const std::int64_t N = c.tokens, E = c.experts, k = c.k, R = routed_rows(args, N, E);
    Tensor logits = random({N, E}, 30 + E);
    for (std::int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] *= 3.0f;
    // Context parallel: this rank's choice counts on both backends, the other ranks' made up.
    Tensor context, d_context;
    if (c.context_ranks > 1) {
      const std::int64_t B = N / c.seq_len, per_rank = B * 2 * E;
      Tensor mine = Tensor::empty({B, 2, E}, DType::i64), d_mine = backend_->empty({B, 2, E}, DType::i64);
      count_route_choices(args, logits, mine);
      count_route_choices(args, on_device(logits), d_mine);
      const Tensor got = backend_->copy_to_host(d_mine);
      EXPECT_EQ(std::memcmp(got.raw_data(), mine.raw_data(), mine.nbytes()), 0) << "count_route_choices";
      context = Tensor::empty({c.context_ranks, B, 2, E}, DType::i64);
      std::mt19937 made_up(7);
      for (std::int64_t i = 0; i < context.numel(); ++i) {
        context.data<std::int64_t>()[i] = i / per_rank == c.context_rank
                                              ? mine.data<std::int64_t>()[i % per_rank]
                                              : static_cast<std::int64_t>(made_up() % (c.seq_len / 2 + 1));
      }
      d_context = on_device(context);
    }
    const Tensor start = random({E + 3}, 31);
    Tensor start_f64 = Tensor::empty({E + 3}, DType::f64);
    for (std::int64_t i = 0; i < E + 3; ++i) start_f64.data<double>()[i] = start.data<float>()[i];
    auto outputs = [&](auto make) {
      return RoutedTokens{.expert = make(Shape{N, k}, DType::i32),
                          .weight = make(Shape{N, k}, DType::f32),
                          .slot = make(Shape{N, k}, DType::i32),
                          .source = make(Shape{R}, DType::i32),
                          .counts = make(Shape{E}, DType::i64),
                          .totals = make(Shape{E + 3}, DType::f64)};
    };
    RoutedTokens host = outputs([](const Shape& shape, DType type) { return Tensor::empty(shape, type); });
    RoutedTokens device = outputs([&](const Shape& shape, DType type) { return backend_->empty(shape, type); });
    std::memcpy(host.totals.raw_data(), start_f64.raw_data(), start_f64.nbytes());
    device.totals = on_device(start_f64);
    route_tokens(args, logits, host, context);
    route_tokens(args, on_device(logits), device, d_context);
    auto same_bytes = [&](const Tensor& d, const Tensor& h, const char* what) {
      const Tensor got = backend_->copy_to_host(d);
      EXPECT_EQ(std::memcmp(got.raw_data(), h.raw_data(), h.nbytes()), 0) << what;
    };
    same_bytes(device.expert, host.expert, "expert");
    same_bytes(device.slot, host.slot, "slot");
    same_bytes(device.source, host.source, "source");
    same_bytes(device.counts, host.counts, "counts");
    expect_close(device.weight, host.weight, 1e-6, "weight");
    const Tensor totals = backend_->copy_to_host(device.totals);
    for (std::int64_t i = 0; i < E + 3; ++i) {
      EXPECT_NEAR(totals.data<double>()[i], host.totals.data<double>()[i],
                  1e-9 * (1.0 + std::abs(host.totals.data<double>()[i])))
          << "totals[" << i << "]";
    }
    const Tensor grad_weight = random({N, k}, 32);
    Tensor grad_logits = Tensor::empty({N, E}), d_grad_logits = backend_->empty({N, E});
    route_tokens_backward(args, logits, host.expert, grad_weight, 0.7, 0.3, grad_logits, context);
    route_tokens_backward(args, on_device(logits), device.expert, on_device(grad_weight), 0.7, 0.3, d_grad_logits,
                          d_context);
    expect_close(d_grad_logits, grad_logits, 1e-6, "grad_logits");
    // The scale staged on the device (a recorded graph's loss scale) multiplies both scales in the kernel.
    Tensor staged = Tensor::empty({1});
    staged.data<float>()[0] = 2.0f;
    route_tokens_backward(args, logits, host.expert, grad_weight, 1.4, 0.6, grad_logits, context);
    route_tokens_backward(args, on_device(logits), device.expert, on_device(grad_weight), 0.7, 0.3, d_grad_logits,
                          d_context, on_device(staged));
    expect_close(d_grad_logits, grad_logits, 1e-6, "grad_logits with a staged scale");
  }
}

// Groups of different sizes (dropless routing: cuBLAS's grouped GEMM) and of one size (capacity
// routing: one GEMM per group, nothing uploaded).
TEST_F(CudaBackendTest, GroupedMatmulMatchesTheCpu) {
  const std::int64_t G = 7, K = 72, M = 48;
  for (const bool uneven : {true, false}) {
    SCOPED_TRACE(uneven ? "groups of different sizes" : "groups of one size");
    const std::vector<std::int64_t> offsets = uneven ? std::vector<std::int64_t>{0, 0, 70, 71, 71, 200, 263, 263}
                                                     : std::vector<std::int64_t>{0, 37, 74, 111, 148, 185, 222, 259};
    const std::int64_t R = offsets.back();
    for (DType type : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(dtype_name(type));
      const Tensor x = type == DType::f32 ? random({R, K}, 10) : random({R, K}, 10).to(type);
      const Tensor w = type == DType::f32 ? random({G, M, K}, 11) : random({G, M, K}, 11).to(type);
      const Tensor bias = random({G, M}, 12), g = random({R, M}, 13);
      const Tensor d_x = on_device(x), d_w = on_device(w);
      for (bool with_bias : {true, false}) {
        const Tensor b = with_bias ? bias : Tensor();
        Tensor out = Tensor::empty({R, M}), d_out = backend_->empty({R, M});
        grouped_matmul_forward(GroupedMatmulArgs{}, x, w, b, offsets, out);
        grouped_matmul_forward(GroupedMatmulArgs{}, d_x, d_w, on_device(b), offsets, d_out);
        expect_close(d_out, out, kMoeTolerance, with_bias ? "out with bias" : "out");
      }
      // grad_x written then accumulated; grad_weight and grad_bias accumulate onto prior values.
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate_grad_x" : "grad_x written");
        const GroupedMatmulArgs args{.accumulate_grad_x = accumulate};
        Tensor grad_x = random({R, K}, 14), grad_w = random({G, M, K}, 15), grad_b = random({G, M}, 16);
        Tensor d_grad_x = on_device(grad_x), d_grad_w = on_device(grad_w), d_grad_b = on_device(grad_b);
        grouped_matmul_backward(args, x, w, offsets, g, grad_x, grad_w, grad_b);
        grouped_matmul_backward(args, d_x, d_w, offsets, on_device(g), d_grad_x, d_grad_w, d_grad_b);
        expect_close(d_grad_x, grad_x, kMoeTolerance, "grad_x");
        expect_close(d_grad_w, grad_w, kMoeTolerance, "grad_weight");
        expect_close(d_grad_b, grad_b, kMoeTolerance, "grad_bias");
        if (!uneven) continue;
        // Group 0 is empty: its grad_weight and grad_bias are bit-for-bit what they were.
        const Tensor prior_w = random({G, M, K}, 15), prior_b = random({G, M}, 16);
        const Tensor got_w = backend_->copy_to_host(d_grad_w), got_b = backend_->copy_to_host(d_grad_b);
        EXPECT_EQ(std::memcmp(got_w.raw_data(), prior_w.raw_data(), M * K * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(got_b.raw_data(), prior_b.raw_data(), M * sizeof(float)), 0);
      }
      Tensor skipped, grad_w = Tensor::zeros({G, M, K}), d_grad_w = on_device(grad_w);
      grouped_matmul_backward(GroupedMatmulArgs{}, x, w, offsets, g, skipped, grad_w, skipped);
      grouped_matmul_backward(GroupedMatmulArgs{}, d_x, d_w, offsets, on_device(g), skipped, d_grad_w, skipped);
      expect_close(d_grad_w, grad_w, kMoeTolerance, "grad_weight alone");
    }
  }
}

TEST_F(CudaBackendTest, GroupedMatmulWithNoRowsWritesNothing) {
  const std::vector<std::int64_t> offsets{0, 0, 0};
  const Tensor x = Tensor::empty({0, 8}), w = random({2, 4, 8}, 20);
  Tensor d_out = backend_->empty({0, 4}), d_grad_w = on_device(w), d_grad_x = backend_->empty({0, 8}), skipped;
  grouped_matmul_forward(GroupedMatmulArgs{}, on_device(x), on_device(w), Tensor(), offsets, d_out);
  grouped_matmul_backward(GroupedMatmulArgs{}, on_device(x), on_device(w), offsets, backend_->empty({0, 4}), d_grad_x,
                          d_grad_w, skipped);
  expect_close(d_grad_w, w, 0.0, "grad_weight unchanged");
}

}  // namespace
}  // namespace myriad
