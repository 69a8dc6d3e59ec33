// bench_train_step's options (benchmarks/train_step_options.cpp): every option parsed in both
// spellings (--reference torch and its --python included), unknown / valueless / malformed options refused naming the
// option, and the shape a config file plus overrides resolve to (context grown to --seq, inconsistent heads refused).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "myriad/core/error.h"
#include "train_step_options.h"

namespace myriad::bench {
namespace {

TrainStepOptions parse(std::vector<const char*> args) {
  args.insert(args.begin(), "bench_train_step");
  return parse_train_step_options(static_cast<int>(args.size()), args.data());
}

std::string error_of(std::vector<const char*> args) {
  try {
    parse(std::move(args));
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(TrainStepOptions, NoOptionsKeepTheDefaultCases) {
  const TrainStepOptions o = parse({});
  EXPECT_FALSE(o.custom_shape());
  EXPECT_FALSE(o.quick);
  EXPECT_FALSE(o.help);
  EXPECT_EQ(o.recompute, Recompute::none);
  EXPECT_FALSE(parse({"--quick", "--recompute", "full"}).custom_shape());
  EXPECT_EQ(parse({"--recompute=selective"}).recompute, Recompute::selective);
  EXPECT_TRUE(parse({"--help"}).help);
}

TEST(TrainStepOptions, ShapeOptionsInBothSpellings) {
  const TrainStepOptions o =
      parse({"--layers", "2", "--heads=4", "--embd", "64", "--batch=3", "--seq", "32", "--config", "x.yaml"});
  EXPECT_TRUE(o.custom_shape());
  EXPECT_EQ(o.layers, 2);
  EXPECT_EQ(o.heads, 4);
  EXPECT_EQ(o.embd, 64);
  EXPECT_EQ(o.batch, 3);
  EXPECT_EQ(o.seq, 32);
  EXPECT_EQ(o.config_path, "x.yaml");
  EXPECT_TRUE(parse({"--seq", "16"}).custom_shape());
}

TEST(TrainStepOptions, BadOptionsAreRefusedNamingTheOption) {
  EXPECT_NE(error_of({"--layer", "2"}).find("unknown option '--layer'"), std::string::npos);
  EXPECT_NE(error_of({"--quick=1"}).find("--quick takes no value"), std::string::npos);
  EXPECT_NE(error_of({"--heads"}).find("option --heads needs a value"), std::string::npos);
  for (const char* bad : {"0", "-3", "12x", "", "1e3", "99999999999"}) {
    EXPECT_NE(error_of({"--embd", bad}).find("option --embd: expected a positive integer"), std::string::npos) << bad;
  }
  EXPECT_NE(error_of({"--recompute", "some"}).find("option --recompute"), std::string::npos);
  EXPECT_EQ(error_of({"--batch", "7"}), "");
  EXPECT_NE(error_of({"--steps", "0"}).find("option --steps: expected a positive integer"), std::string::npos);
}

TEST(TrainStepOptions, StepsSetTheFewestTimedStepsWithoutChangingTheCases) {
  EXPECT_EQ(parse({}).steps, 3);
  const TrainStepOptions o = parse({"--steps=9"});
  EXPECT_EQ(o.steps, 9);
  EXPECT_FALSE(o.custom_shape());
  EXPECT_EQ(parse({"--steps", "12", "--batch", "2"}).steps, 12);
}

TEST(TrainStepOptions, ReferenceTorchAndItsInterpreter) {
  const TrainStepOptions plain = parse({});
  EXPECT_EQ(plain.reference, "");
  EXPECT_EQ(plain.python, "python3");
  const TrainStepOptions o = parse({"--reference", "torch", "--python=/opt/venv/bin/python"});
  EXPECT_EQ(o.reference, "torch");
  EXPECT_EQ(o.python, "/opt/venv/bin/python");
  EXPECT_FALSE(o.custom_shape());
  EXPECT_NE(error_of({"--reference", "jax"}).find("option --reference: expected 'torch', got 'jax'"),
            std::string::npos);
  EXPECT_NE(error_of({"--python="}).find("option --python"), std::string::npos);
}

TEST(TrainStepOptions, CpuGemmFixedOrMeasured) {
  EXPECT_EQ(parse({}).cpu_gemm, CpuGemmChoice::fixed);
  EXPECT_EQ(parse({"--cpu-gemm", "measured"}).cpu_gemm, CpuGemmChoice::measured);
  EXPECT_EQ(parse({"--cpu-gemm=fixed"}).cpu_gemm, CpuGemmChoice::fixed);
  EXPECT_FALSE(parse({"--cpu-gemm", "measured"}).custom_shape());
  EXPECT_NE(error_of({"--cpu-gemm", "fastest"}).find("option --cpu-gemm"), std::string::npos);
  // Without a config file there is no file's choice to report as not applied.
  EXPECT_EQ(resolve_train_step_shape(parse({"--layers", "2", "--cpu-gemm", "measured", "--recompute", "full"})).note,
            "");
}

TEST(TrainStepOptions, DefaultShapeIsGpt2SmallAtTheBarBatch) {
  const TrainStepShape s = resolve_train_step_shape(parse({"--layers", "2"}));
  EXPECT_EQ(s.model.n_layer, 2);
  EXPECT_EQ(s.model.n_head, 12);
  EXPECT_EQ(s.model.n_embd, 768);
  EXPECT_EQ(s.model.vocab_size, 50257);
  EXPECT_EQ(s.B, 4);
  EXPECT_EQ(s.T, 64);
  EXPECT_EQ(s.note, "");
}

TEST(TrainStepOptions, ConfigFileThenCommandLineOverrides) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("myriad_train_step_options_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(file);
    out << "model:\n  vocab_size: 512\n  n_layer: 3\n  n_head: 4\n  n_embd: 64\n  context_length: 32\n"
           "training:\n  micro_batch: 5\n  seq_len: 16\n";
  }
  const std::string path = file.string();
  const TrainStepShape from_file = resolve_train_step_shape(parse({"--config", path.c_str()}));
  EXPECT_EQ(from_file.model.n_layer, 3);
  EXPECT_EQ(from_file.model.n_head, 4);
  EXPECT_EQ(from_file.model.n_embd, 64);
  EXPECT_EQ(from_file.model.vocab_size, 512);
  EXPECT_EQ(from_file.B, 5);
  EXPECT_EQ(from_file.T, 16);

  const TrainStepShape overridden =
      resolve_train_step_shape(parse({"--config", path.c_str(), "--heads", "8", "--batch", "2", "--seq", "48"}));
  EXPECT_EQ(overridden.model.n_layer, 3);
  EXPECT_EQ(overridden.model.n_head, 8);
  EXPECT_EQ(overridden.B, 2);
  EXPECT_EQ(overridden.T, 48);
  EXPECT_EQ(overridden.model.context_length, 48);
  EXPECT_NE(overridden.note.find("grown to --seq 48"), std::string::npos);

  EXPECT_THROW(resolve_train_step_shape(parse({"--config", path.c_str(), "--heads", "5"})), Error);  // 64 % 5
  std::filesystem::remove(file);
  EXPECT_THROW(resolve_train_step_shape(parse({"--config", path.c_str()})), Error);  // no such file
}

}  // namespace
}  // namespace myriad::bench
