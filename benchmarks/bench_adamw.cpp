// bench_adamw: the CPU AdamW pass (ops/adamw.h) over a GPT-2-sized parameter buffer, with the
// compute copies training.precision bf16 / fp16 keeps (ops/adamw.h "Compute copies"): the update
// alone (the baseline), the update writing the rounded f32 and 16-bit copies in its own pass (ZeRO
// 0), and the update followed by the refresh the other stages run (round_to_format, then a copy
// into the 16-bit buffer). Checks first that the fused copies equal the refreshed ones bit for bit;
// times each row as the median of repeated calls and prints ms, GB/s of the bytes each pass must
// move (read p, g, m, v; write p, m, v, and the copies) and the ratio to the baseline.
// Usage: bench_adamw [--elements N]   (default 31 M: GPT-2 124M's parameters / 4)
#include <cstdio>
#include <cstring>
#include <string>

#include "harness.h"
#include "myriad/core/philox.h"
#include "myriad/ops/adamw.h"
#include "myriad/ops/elementwise.h"

using namespace myriad;

static int run(int argc, char** argv) {
  std::int64_t n = 31'000'000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--elements") == 0 && i + 1 < argc) {
      n = std::stoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_adamw [--elements N]\n");
      return 2;
    }
  }
  bench::print_header("bench_adamw", argc, argv);
  Tensor p = Tensor::empty({n}), g = Tensor::empty({n}), m = Tensor::zeros({n}), v = Tensor::zeros({n});
  fill_uniform(p, -0.1f, 0.1f, 1, 0);
  fill_uniform(g, -1e-3f, 1e-3f, 1, 1);
  AdamWArgs args{.lr = 6e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 10};
  for (DType format : {DType::bf16, DType::f16}) {
    // Correctness first: the fused copies are the refreshed ones, bit for bit.
    Tensor p1 = p.clone(), m1 = m.clone(), v1 = v.clone(), p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
    Tensor rounded = Tensor::empty({n}), narrow = Tensor::empty({n}, format);
    adamw_update(args, p1, g, m1, v1, AdamWCopies{.format = format, .rounded = rounded, .narrow = narrow});
    adamw_update(args, p2, g, m2, v2, AdamWCopies{});
    Tensor refreshed = p2.clone();
    round_to_format(refreshed, format);
    Tensor narrow2 = Tensor::empty({n}, format);
    copy(refreshed, narrow2);
    if (std::memcmp(p1.raw_data(), p2.raw_data(), p1.nbytes()) != 0 ||
        std::memcmp(rounded.raw_data(), refreshed.raw_data(), rounded.nbytes()) != 0 ||
        std::memcmp(narrow.raw_data(), narrow2.raw_data(), narrow.nbytes()) != 0) {
      std::fprintf(stderr, "bench_adamw: the fused %s copies differ from the refreshed ones\n",
                   std::string(dtype_name(format)).c_str());
      return 1;
    }
  }
  const double f32_pass = 7.0 * 4.0 * static_cast<double>(n);  // p, g, m, v read; p, m, v written
  std::printf("\n%lld elements\n\n| pass | ms | GB/s | vs update alone |\n|---|---|---|---|\n",
              static_cast<long long>(n));
  const bench::Timing alone = bench::time_it([&] { adamw_update(args, p, g, m, v, AdamWCopies{}); });
  std::printf("| update alone | %.1f | %.1f | 1.00x |\n", alone.median_s * 1e3, f32_pass / alone.median_s / 1e9);
  for (DType format : {DType::bf16, DType::f16}) {
    const std::string name(dtype_name(format));
    Tensor rounded = Tensor::empty({n}), narrow = Tensor::empty({n}, format);
    const double copy_bytes = f32_pass + 6.0 * static_cast<double>(n);  // + the f32 and 16-bit copies
    const bench::Timing fused = bench::time_it(
        [&] { adamw_update(args, p, g, m, v, AdamWCopies{.format = format, .rounded = rounded, .narrow = narrow}); });
    const bench::Timing refresh = bench::time_it([&] {
      adamw_update(args, p, g, m, v, AdamWCopies{});
      copy(p, rounded);
      round_to_format(rounded, format);
      copy(rounded, narrow);
    });
    std::printf("| update writing the %s copies (one pass) | %.1f | %.1f | %.2fx |\n", name.c_str(),
                fused.median_s * 1e3, copy_bytes / fused.median_s / 1e9, fused.median_s / alone.median_s);
    std::printf("| update, then the %s refresh | %.1f | %.1f | %.2fx |\n", name.c_str(), refresh.median_s * 1e3,
                copy_bytes / refresh.median_s / 1e9, refresh.median_s / alone.median_s);
  }
  return 0;
}

int main(int argc, char** argv) {
  return myriad::bench::run_reporting_errors("bench_adamw", [&] { return run(argc, argv); });
}
