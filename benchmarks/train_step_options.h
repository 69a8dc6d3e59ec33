// TrainStepOptions — bench_train_step's command line, and the one model/batch shape it times when
// a shape is asked for.
//
//   --quick                    the tiny case only (default cases); one --reference round
//   --recompute none|selective|full
//   --config FILE.yaml         a run config: model section and training.micro_batch / seq_len
//   --layers N --heads N --embd N --batch N --seq N
//                              the shape; each overrides the config file (or the default GPT-2
//                              124M shape at B=4, T=64 when no file is given)
//   --steps N                  time at least N steps (default 3; each followed by an sgemm probe)
//   --cpu-gemm fixed|measured  measured: the warm-up step's GEMM shapes timed on every route and
//                              each run on its fastest (training.cpu_gemm measured); the timed steps
//                              alternate between that plan and the fixed rule
//   --reference torch          PyTorch eager's step at the same shapes, alternated (train_step_torch.py)
//   --python PATH              its interpreter (default python3)
//   --help
// Values may also be written --option=value. Any shape option or --config replaces the default
// cases with one case of that shape. Unknown options, missing values and values that are not
// positive integers are refused with a myriad::Error naming the option (the binary exits 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "myriad/config/choices.h"
#include "myriad/nn/transformer_config.h"

namespace myriad::bench {

struct TrainStepOptions {
  bool help = false;
  bool quick = false;
  Recompute recompute = Recompute::none;
  std::string config_path;  // "" = none
  std::optional<int> layers, heads, embd, batch, seq;
  int steps = 3;  // the fewest timed steps (more while under 1 s, up to 50)
  CpuGemmChoice cpu_gemm = CpuGemmChoice::fixed;
  std::string reference;           // "" or "torch"
  std::string python = "python3";  // runs benchmarks/train_step_torch.py for --reference torch

  // Whether one case of a chosen shape replaces the default cases.
  bool custom_shape() const;
};

// Parses argv[1..argc-1]; throws myriad::Error naming the offending option.
TrainStepOptions parse_train_step_options(int argc, const char* const* argv);

// The --help text.
std::string train_step_usage();

struct TrainStepShape {
  std::string name;  // "gpt2_tiny.yaml L4 H4 C128" / "GPT-2 124M shape L12 H12 C768"
  nn::TransformerConfig model;
  std::int64_t B = 0, T = 0;  // batch (sequences), sequence length
  std::string note;           // "" or what was adjusted (a context length grown to --seq)
};

// The config file's model and micro-batch / sequence length (or GPT-2 124M with B=4, T=64), with
// the shape options applied through RunConfig::apply_override; the context length grows to --seq
// when that is longer. Throws myriad::Error for a bad file or an inconsistent shape.
TrainStepShape resolve_train_step_shape(const TrainStepOptions& options);

}  // namespace myriad::bench
