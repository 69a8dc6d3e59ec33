// bench_train_step: one whole training step of nn::GptModel (zero_grads + forward_backward +
// AdamW step) against the CPU GEMM's sgemm (ops/cpu_gemm.h) measured in the same run, plus the step's memory.
//
// Configs: GPT-2 124M (V 50257, L 12, H 12, C 768, block 1024) at B=4 x T=64 and B=4 x T=256,
// and the tiny model of configs/gpt2_tiny.yaml (V 1024, L 4, H 4, C 128, B=8 x T=128). No data
// pipeline: ids and targets are Philox words modulo V. Model FLOPs per token use the Engine's
// formula (6 * matmul parameters, the tied LM head counted, + 6 * L * T * C for attention).
// Before timing, the warm-up step's loss must be finite and near ln V (random targets, near-uniform
// predictions at initialisation). Memory: the Engine's accounting (parameters, gradients, AdamW
// m and v, saved activations, scratch) against the process's peak RSS over the timed steps.
// Usage: OMP_NUM_THREADS=2 bench_train_step [--quick] [--recompute none|selective|full]
//          [--config FILE.yaml] [--layers N] [--heads N] [--embd N] [--batch N] [--seq N] [--help]
// A shape option or --config times one case of that shape instead (train_step_options.h): the
// config file's model at training.micro_batch x seq_len, the options overriding it; without a
// file they start from GPT-2 124M at B=4, T=64. The warm-up loss check then allows for the
// logit spread of wide models (init_std^2 * C).
//
// Under mpirun with N > 1 ranks it measures data parallelism instead (data_parallel_table):
// every rank trains one replica (DataParallel, ZeRO 0) and the table compares gradient bucket
// sizes — 0 = one all-reduce after the whole backward (no overlap) against buckets reduced
// while backward runs — by step time and the communication time the step waited for (exposed):
//   mpirun -np 2 --oversubscribe --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS=1 bench_train_step
//
// --reference torch [--python PATH] adds PyTorch eager's step at the same shapes (train_step_torch.py,
// default and fused AdamW) in rounds alternated with myriad's, and the ratios (exit 3 without torch).
// PyTorch's model is the case's architecture (torch_transformer.py); its parameter count must equal
// myriad's (vocabulary unpadded) or no ratio is printed (exit 3); MoE and block-sparse models, which
// it does not have, are refused before anything runs (exit 2).
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <filesystem>
#include <optional>

#include "harness.h"
#include "machine_profile.h"
#include "myriad/ops/cpu_gemm.h"
#include "train_step_options.h"
#include "myriad/core/philox.h"
#include "myriad/core/tensor.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/parallel/data_parallel.h"
#include "myriad/train/metrics/metrics_writer.h"

using namespace myriad;
using namespace myriad::bench;

namespace {

struct StepCase {
  std::string name;
  nn::TransformerConfig model;
  std::int64_t B, T;
};

struct CaseResult {
  Timing timing;
  double zero_s = 0, forward_backward_s = 0, optimizer_s = 0;  // medians of each phase over the timed steps
  double flops_per_step = 0;
  double initial_loss = 0, final_loss = 0;
  std::int64_t params = 0;
  nn::ActivationMemory activations;
  std::size_t rss_before_model = 0, rss_after_warmup = 0, peak_rss = 0;
  bool peak_valid = false;
  std::vector<double> step_s, sgemm_after_step;  // each timed step, and the sgemm GFLOP/s probed right after it
  // --cpu-gemm measured: the plan's timing and the fixed rule's steps, alternated with step_s's.
  std::vector<double> fixed_step_s;
  std::size_t plan_shapes = 0;
  double plan_measure_s = 0;
  std::string plan_summary;
  // The median over the timed steps of (model GFLOP/s of the step) / (sgemm GFLOP/s probed after it).
  double alternated_ratio() const {
    std::vector<double> ratios;
    for (std::size_t i = 0; i < step_s.size(); ++i)
      ratios.push_back(flops_per_step / step_s[i] / 1e9 / sgemm_after_step[i]);
    return median(ratios);
  }
};

Tensor random_ids(std::int64_t B, std::int64_t T, std::int64_t vocab, std::uint64_t stream) {
  Tensor ids = Tensor::empty({B, T}, DType::i32);
  std::int32_t* p = ids.data<std::int32_t>();
  for (std::int64_t i = 0; i < B * T; ++i) {
    p[i] = static_cast<std::int32_t>(philox4x32(2024, stream, static_cast<std::uint64_t>(i))[0] % vocab);
  }
  return ids;
}

// 1024^3 sgemm through the CPU GEMM the step runs on (ops/cpu_gemm.h), on buffers of its own.
class SgemmProbe {
 public:
  SgemmProbe() : a_(Tensor::empty({kN, kN})), b_(Tensor::empty({kN, kN})), c_(Tensor::empty({kN, kN})) {
    fill_uniform(a_, -1, 1, 7, 0);
    fill_uniform(b_, -1, 1, 7, 1);
  }
  // GFLOP/s: the median of `calls` sgemms (>= 1 s when min_total_s says so) after `warmup` calls.
  double gflops(int warmup, int calls, double min_total_s) {
    Timing t = time_it(
        [&] {
          cpu::sgemm(false, false, kN, kN, kN, 1.0f, a_.data<float>(), kN, b_.data<float>(), kN, 0.0f, c_.data<float>(),
                     kN);
          do_not_optimize(c_.data<float>());
        },
        warmup, calls, min_total_s);
    return 2.0 * kN * kN * kN / t.median_s / 1e9;
  }

 private:
  static constexpr int kN = 1024;
  Tensor a_, b_, c_;
};

double sgemm_gflops() { return SgemmProbe().gflops(2, 10, 1.0); }

// The most a step's model GFLOP/s can be, as a fraction of `sgemm_gflops`: every model FLOP at that
// rate, plus the two passes no GEMM hides, as measured — zero_grads and the optimizer step (norm and
// AdamW), which run at the memory bandwidth (their GB/s against a triad's in the table's notes).
double step_ceiling(const CaseResult& r, double sgemm_gflops) {
  const double gemm_s = r.flops_per_step / (sgemm_gflops * 1e9);
  return gemm_s / (gemm_s + r.zero_s + r.optimizer_s);
}

// Builds the model and optimizer, runs one warm-up step (checked), then times >= 3 steps with
// the peak RSS reset just before the first timed one.
CaseResult run_case(const StepCase& c, Recompute mode, int min_steps, CpuGemmChoice cpu_gemm) {
  CaseResult r;
  r.rss_before_model = current_rss_bytes();
  nn::GptModel model(c.model);
  model.initialize(1337);
  optim::AdamWOptimizer optimizer(model.parameters(), optim::AdamWConfig{});
  const Tensor ids = random_ids(c.B, c.T, c.model.vocab_size, 1);
  const Tensor targets = random_ids(c.B, c.T, c.model.vocab_size, 2);
  const float loss_scale = 1.0f / static_cast<float>(c.B * c.T);
  double last_loss = 0;
  std::vector<double> zero_s, forward_backward_s, optimizer_s;
  auto step = [&] {
    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point a, clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    const clock::time_point t0 = clock::now();
    model.parameters().zero_grads();
    const clock::time_point t1 = clock::now();
    last_loss = model.forward_backward(ids, targets, loss_scale, mode).sum / static_cast<double>(c.B * c.T);
    const clock::time_point t2 = clock::now();
    optim::OptimizerStepStats stats = optimizer.step(6e-4f);
    const clock::time_point t3 = clock::now();
    MYRIAD_CHECK(!stats.skipped, c.name << ": non-finite gradient norm " << stats.grad_norm);
    zero_s.push_back(seconds(t0, t1));
    forward_backward_s.push_back(seconds(t1, t2));
    optimizer_s.push_back(seconds(t2, t3));
  };
  std::shared_ptr<const cpu::GemmPlan> plan;  // --cpu-gemm measured: from the warm-up step's shapes
  if (cpu_gemm == CpuGemmChoice::measured) {
    std::vector<cpu::GemmShape> shapes;
    {
      cpu::GemmShapeRecording recording;
      step();
      shapes = recording.shapes();
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<cpu::GemmShapeTiming> timings = cpu::time_gemm_routes(shapes, 3);
    r.plan_measure_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.plan_shapes = shapes.size();
    r.plan_summary = cpu::describe(cpu::pass_times(timings));
    plan = std::make_shared<const cpu::GemmPlan>(cpu::fastest_routes(timings));
  } else {
    step();
  }
  r.initial_loss = last_loss;
  zero_s.clear();
  forward_backward_s.clear();
  optimizer_s.clear();
  // Logits at initialisation have std s ~ init_std * sqrt(C) (<= 0.6 for the default cases), which
  // raises the loss by ~s^2 / 2 over ln V: within max(0.5, s^2) of ln V.
  const double uniform = std::log(static_cast<double>(c.model.vocab_size));
  const double spread = static_cast<double>(c.model.init_std) * c.model.init_std * static_cast<double>(c.model.n_embd);
  MYRIAD_CHECK(std::isfinite(r.initial_loss) && std::fabs(r.initial_loss - uniform) < std::max(0.5, spread),
               c.name << ": warm-up loss " << r.initial_loss << " is not near ln V = " << uniform);
  r.rss_after_warmup = current_rss_bytes();
  r.peak_valid = reset_peak_rss();
  // Each timed step is followed by a short 1024^3 sgemm probe (one warm-up, 5 timed calls), so a
  // drift of the machine's speed hits the step and the GEMM rate it is compared with alike.
  SgemmProbe probe;
  double total_s = 0;
  const std::size_t fewest = static_cast<std::size_t>(min_steps), most = std::max<std::size_t>(fewest, 50);
  // --cpu-gemm measured: a step on the fixed rule beside each timed (plan) step, before it on even
  // rounds and after it on odd ones, so neither always follows the sgemm probe; its phases are
  // not kept.
  auto fixed_rule_step = [&] {
    cpu::set_gemm_plan(nullptr);
    const auto fixed_start = std::chrono::steady_clock::now();
    step();
    r.fixed_step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - fixed_start).count());
    zero_s.pop_back();
    forward_backward_s.pop_back();
    optimizer_s.pop_back();
    cpu::set_gemm_plan(plan);
  };
  while (r.step_s.size() < fewest || (total_s < 1.0 && r.step_s.size() < most)) {
    const bool fixed_first = r.step_s.size() % 2 == 0;
    if (plan != nullptr && fixed_first) fixed_rule_step();
    const auto start = std::chrono::steady_clock::now();
    step();
    r.step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    total_s += r.step_s.back();
    if (plan != nullptr && !fixed_first) fixed_rule_step();
    r.sgemm_after_step.push_back(probe.gflops(1, 5, 0.0));
  }
  cpu::set_gemm_plan(nullptr);
  r.timing =
      Timing{median(r.step_s), *std::min_element(r.step_s.begin(), r.step_s.end()), static_cast<int>(r.step_s.size())};
  r.peak_rss = peak_rss_bytes();
  r.final_loss = last_loss;
  r.zero_s = median(zero_s);
  r.forward_backward_s = median(forward_backward_s);
  r.optimizer_s = median(optimizer_s);
  MYRIAD_CHECK(std::isfinite(r.final_loss), c.name << ": loss became " << r.final_loss);
  r.flops_per_step = model.flops_per_token(c.T) * static_cast<double>(c.B * c.T);
  r.params = model.parameters().numel();
  r.activations = model.activation_memory(c.B, c.T, mode);
  return r;
}

// PyTorch eager's step at a case's shape (train_step_torch.py run by `python`): median ms over
// `steps` timed steps and the reference model's parameter count, or the reason it could not run.
struct TorchStep {
  double median_ms = 0;
  std::int64_t params = 0;
  std::string version, error;
};

// Why PyTorch's reference (torch_transformer.py: dense GPT-2 / LLaMA-style blocks) cannot stand for
// this case's model, or "" when it can.
std::string torch_reference_gap(const StepCase& c) {
  if (c.model.moe.enabled()) {
    return "its model has a mixture of experts (model.num_experts " + std::to_string(c.model.moe.num_experts) +
           "), which the PyTorch reference does not model";
  }
  if (c.model.attention.block_sparse()) {
    return "its attention is block-sparse (model.attention.kind block_sparse), which the PyTorch reference does not "
           "model";
  }
  return "";
}

// The parameters of the case's model with the vocabulary unpadded, as the PyTorch reference has it:
// myriad's embedding (and an untied LM head) carry padded_vocab_size() rows.
std::int64_t unpadded_params(const StepCase& c, std::int64_t params) {
  const std::int64_t padding = c.model.padded_vocab_size() - c.model.vocab_size;
  return params - padding * c.model.n_embd * (c.model.tie_embeddings ? 1 : 2);
}

std::string torch_step_command(const std::string& python, const StepCase& c, const char* adamw, int steps) {
  const nn::TransformerConfig& m = c.model;
  std::ostringstream command;
  command << "'" << python << "' '" << MYRIAD_TORCH_STEP_SCRIPT << "' --vocab " << m.vocab_size << " --layers "
          << m.n_layer << " --heads " << m.n_head << " --kv-heads " << m.n_kv_head << " --embd " << m.n_embd
          << " --ffn " << m.ffn_hidden << " --block " << m.context_length << " --norm "
          << (m.norm == nn::NormKind::rmsnorm ? "rmsnorm" : "layernorm") << " --mlp "
          << (m.mlp == nn::MlpKind::swiglu ? "swiglu" : "gelu") << " --positions "
          << (m.positions == nn::PositionKind::rope ? "rope" : "learned") << " --bias " << (m.bias ? 1 : 0) << " --tie "
          << (m.tie_embeddings ? 1 : 0) << " --norm-eps " << m.norm_eps << " --rope-theta " << m.rope_theta
          << " --init-std " << m.init_std << " --batch " << c.B << " --seq " << c.T << " --steps " << steps
          << " --adamw " << adamw << " 2>&1";
  return command.str();
}

TorchStep torch_step(const std::string& python, const StepCase& c, const char* adamw, int steps) {
  const std::string command = torch_step_command(python, c, adamw, steps);
  TorchStep out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    out.error = "popen failed";
    return out;
  }
  std::string text;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) text += buffer;
  const int status = pclose(pipe);
  const std::size_t key = text.rfind("\"median_ms\": ");
  const std::size_t params = text.rfind("\"params\": ");
  if (status != 0 || key == std::string::npos || params == std::string::npos) {
    out.error = "`" + command + "` exited " + std::to_string(status) + ": " + text.substr(0, 300);
    return out;
  }
  out.median_ms = std::strtod(text.c_str() + key + 13, nullptr);
  out.params = std::strtoll(text.c_str() + params + 10, nullptr, 10);
  if (const std::size_t v = text.rfind("\"torch\": \""); v != std::string::npos) {
    out.version = text.substr(v + 10, text.find('"', v + 10) - (v + 10));
  }
  return out;
}

// --reference torch: for each case, `rounds` rounds (3; 1 with --quick) of myriad's step then PyTorch's with its
// default and its fused AdamW (alternated, so drifts of the machine's speed hit all three alike);
// medians over the rounds and the ratios.
int reference_table(const std::vector<StepCase>& cases, Recompute mode, const std::string& python, bool quick,
                    int min_steps, CpuGemmChoice cpu_gemm) {
  const int rounds = quick ? 1 : 3, torch_steps = quick ? 2 : 3;
  Table table({"config", "B", "T", "myriad ms/step", "torch default AdamW ms", "torch fused AdamW ms",
               "torch default / myriad", "torch fused / myriad", "rounds"});
  std::string version;
  for (const StepCase& c : cases) {
    std::vector<double> mine, plain, fused;
    for (int round = 0; round < rounds; ++round) {
      const CaseResult r = run_case(c, mode, min_steps, cpu_gemm);  // measured: the plan's steps
      mine.push_back(r.timing.median_s * 1e3);
      for (const char* kind : {"default", "fused"}) {
        const TorchStep t = torch_step(python, c, kind, torch_steps);
        if (!t.error.empty()) {
          std::cout << "- reference torch unavailable: " << t.error << "\n";
          return 3;
        }
        // The same architecture by construction, checked: a reference with other parameters is
        // another model, and its ratio would mean nothing.
        if (t.params != unpadded_params(c, r.params)) {
          std::cout << "- --reference torch: the PyTorch model of " << c.name << " has " << t.params
                    << " parameters, myriad's " << unpadded_params(c, r.params)
                    << " (vocabulary unpadded): not the same model, so no ratio (`"
                    << torch_step_command(python, c, kind, torch_steps) << "`)\n";
          return 3;
        }
        version = t.version;
        (std::strcmp(kind, "fused") == 0 ? fused : plain).push_back(t.median_ms);
      }
    }
    const double m = median(mine), p = median(plain), f = median(fused);
    table.add_row({c.name, std::to_string(c.B), std::to_string(c.T), fmt(m, 1), fmt(p, 1), fmt(f, 1),
                   fmt(p / m, 2) + "x", fmt(f / m, 2) + "x", std::to_string(rounds)});
  }
  std::cout << "\n## Against PyTorch eager (torch " << version << ", " << MYRIAD_TORCH_STEP_SCRIPT << ")\n\n";
  table.print();
  std::cout << "\n- each round: myriad's step (median of >= " << min_steps
            << " after a warm-up), then PyTorch's with its default "
               "AdamW, then with fused AdamW (median of "
            << torch_steps << " after a warm-up), in a fresh process each; the table shows the medians over " << rounds
            << " rounds; PyTorch uses torch.get_num_threads() threads (OMP_NUM_THREADS)\n";
  if (mode != Recompute::none) {
    std::cout << "- myriad's step recomputes activations (--recompute " << choice_name(mode)
              << "), PyTorch's keeps them all: the ratios include what recompute costs\n";
  }
  return 0;
}

}  // namespace

// The per-step logging work of the engine: reading the process memory, serialising every
// metric to a JSONL line, writing the TensorBoard scalars, flushing; median seconds per step.
double logging_seconds_per_step() {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("myriad_bench_logging_" + std::to_string(::getpid()));
  std::vector<double> samples;
  {
    train::MetricsWriter writer(dir.string(), true, true);
    train::StepMetrics m;
    m.loss = 3.5;
    m.seconds = 0.1;
    m.stragglers.clear();
    for (int i = 0; i < 300; ++i) {
      const auto start = std::chrono::steady_clock::now();
      m.step = i + 1;
      m.memory.rss_current = static_cast<std::int64_t>(current_rss_bytes());
      m.memory.rss_peak = static_cast<std::int64_t>(peak_rss_bytes());
      writer.write(m);
      samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::filesystem::remove_all(dir);
  return median(samples);
}

struct DataParallelResult {
  double step_s = 0, exposed_s = 0, busy_s = 0;
  std::int64_t bytes = 0;
  std::size_t buckets = 0;
};

// One replica per rank; medians over the timed steps, then the mean over ranks.
DataParallelResult run_data_parallel(distributed::Communicator& world, const StepCase& c, double bucket_mb, int steps) {
  nn::GptModel model(c.model);
  model.initialize(1337);
  parallel::DataParallelOptions options;
  options.bucket_elements = static_cast<std::int64_t>(bucket_mb * 1048576.0 / 4.0);
  parallel::DataParallel dp(model, world, options, optim::AdamWConfig{});
  Tensor ids = random_ids(c.B, c.T, c.model.vocab_size, 2 * world.rank());
  Tensor targets = random_ids(c.B, c.T, c.model.vocab_size, 2 * world.rank() + 1);
  std::vector<double> step_s, exposed_s, busy_s;
  std::int64_t bytes = 0;
  for (int s = -1; s < steps; ++s) {  // s = -1: warm-up
    world.barrier();
    const distributed::CommOpStats before = world.stats().total();
    const auto start = std::chrono::steady_clock::now();
    dp.zero_grads();
    dp.begin_micro_batch(true);
    model.forward_backward(ids, targets, 1.0f / static_cast<float>(c.B * c.T * world.size()), Recompute::none);
    dp.finish_backward();
    dp.optimizer_step(1e-4f);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const distributed::CommOpStats after = world.stats().total();
    if (s < 0) continue;
    step_s.push_back(elapsed);
    exposed_s.push_back(after.wait_seconds - before.wait_seconds);
    busy_s.push_back(after.seconds - before.seconds);
    bytes = after.bytes_sent - before.bytes_sent;
  }
  DataParallelResult r;
  const double n = world.size();
  r.step_s = distributed::sum_over_ranks(world, median(step_s)) / n;
  r.exposed_s = distributed::sum_over_ranks(world, median(exposed_s)) / n;
  r.busy_s = distributed::sum_over_ranks(world, median(busy_s)) / n;
  r.bytes = bytes;
  r.buckets = dp.layout().buckets().size();
  return r;
}

int data_parallel_table(distributed::MpiRuntime& runtime, bool quick, int argc, char** argv) {
  std::unique_ptr<distributed::Communicator> world = runtime.world();
  const bool root = world->rank() == 0;
  if (root) {
    print_header("bench_train_step (data parallel): exposed gradient communication, bucketed vs one reduction", argc,
                 argv);
  }
  StepCase c{"gpt2 L6 C256", nn::TransformerConfig::gpt2(4096, 6, 8, 256, 128), 4, 128};
  const int steps = quick ? 3 : 7;
  std::vector<double> buckets_mb = {0.0, 1.0, 4.0, 16.0};
  Table table({"bucket", "buckets", "ms/step", "exposed comm ms", "exposed / step", "comm busy ms (issue->done)",
               "MB sent/rank/step", "analytic MB"});
  double psi_bytes = 0;
  {
    nn::GptModel probe(c.model);
    psi_bytes = 4.0 * static_cast<double>(probe.parameters().numel());
  }
  const double n = world->size();
  for (double mb : buckets_mb) {
    DataParallelResult r = run_data_parallel(*world, c, mb, steps);
    table.add_row({mb == 0 ? "off (one after backward)" : fmt(mb, 0) + " MiB", std::to_string(r.buckets),
                   fmt(r.step_s * 1e3, 1), fmt(r.exposed_s * 1e3, 1), percent(r.exposed_s / r.step_s),
                   fmt(r.busy_s * 1e3, 1), fmt(r.bytes / 1e6, 2), fmt(2.0 * (n - 1) / n * psi_bytes / 1e6, 2)});
  }
  if (root) {
    std::cout << "- model " << c.name << " (" << fmt(psi_bytes / 4e6, 2) << "M parameters), B=" << c.B << " T=" << c.T
              << " per rank, " << world->size() << " ranks (dp), ZeRO 0, ring all-reduce on a communication thread\n"
              << "- medians over " << steps
              << " steps, mean over ranks; exposed = time the step waited for "
                 "communication (wait()), including the small scalar reductions of the optimizer step\n\n";
    table.print();
  }
  return 0;
}

int main(int argc, char** argv) {
  std::optional<distributed::MpiRuntime> runtime;
  if (distributed::MpiRuntime::launched_by_mpi()) runtime.emplace();
  if (runtime && runtime->world_size() > 1) {
    // Data parallelism times its own fixed model: --quick is the one option it takes, and any
    // other is refused rather than dropped (every rank sees the same argv, so all exit alike).
    bool quick_dp = false;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--quick") == 0) {
        quick_dp = true;
        continue;
      }
      if (runtime->world_rank() == 0) {
        std::cerr << "bench_train_step: under mpirun (" << runtime->world_size()
                  << " ranks) it times data parallelism on its own model and takes only --quick; '" << argv[i]
                  << "' applies to the single-process run (without mpirun)\n";
      }
      return 2;
    }
    return data_parallel_table(*runtime, quick_dp, argc, argv);
  }
  TrainStepOptions options;
  std::vector<StepCase> cases;
  std::string shape_note;
  try {
    options = parse_train_step_options(argc, argv);
    if (options.help) {
      std::cout << train_step_usage();
      return 0;
    }
    if (options.custom_shape()) {
      TrainStepShape shape = resolve_train_step_shape(options);
      cases.push_back({shape.name, shape.model, shape.B, shape.T});
      shape_note = shape.note;
      const std::string gap = torch_reference_gap(cases.back());
      MYRIAD_CHECK(options.reference != "torch" || gap.empty(),
                   "--reference torch: no reference for " << shape.name << ": " << gap);
    }
  } catch (const Error& e) {
    std::cerr << "bench_train_step: " << e.message() << "\n";
    return 2;
  }
  const bool quick = options.quick;
  const bool custom = options.custom_shape();
  const Recompute mode = options.recompute;
  print_header("bench_train_step: GPT training step (zero_grads + forward/backward + AdamW) vs the CPU GEMM", argc,
               argv);

  if (!custom) {
    cases.push_back({"gpt2_tiny", nn::TransformerConfig::gpt2(1024, 4, 4, 128, 128), 8, 128});
    if (!quick) {
      nn::TransformerConfig gpt2_small = nn::TransformerConfig::gpt2(50257, 12, 12, 768, 1024);
      cases.push_back({"GPT-2 124M", gpt2_small, 4, 64});
      cases.push_back({"GPT-2 124M", gpt2_small, 4, 256});
    }
  } else {
    std::cout << "- shape from the command line" << (options.config_path.empty() ? "" : " and " + options.config_path)
              << ": " << cases[0].name << ", V " << cases[0].model.vocab_size << ", B=" << cases[0].B
              << " T=" << cases[0].T << (shape_note.empty() ? "" : " (" + shape_note + ")") << "\n";
  }

  // The memory bandwidth the optimizer's passes run at (arrays well past a last-level cache).
  const StreamRates stream = measure_stream(256.0 * 1048576.0, 5);
  const double sgemm_before = sgemm_gflops();
  std::cout << "- sgemm 1024x1024x1024 (" << cpu::gemm_library_description(cpu::gemm_library())
            << ") before the steps: " << fmt(sgemm_before) << " GFLOP/s\n";
  std::cout << "- recompute: " << choice_name(mode) << "\n";
  std::cout << "- CPU GEMM routes: " << choice_name(options.cpu_gemm)
            << (options.cpu_gemm == CpuGemmChoice::measured
                    ? " (each case's warm-up GEMM shapes timed on every route, best of 3; the timed steps alternate "
                      "between that plan and the fixed rule; the tables below show the plan's steps)"
                    : " (the library's rule)")
            << "\n\n"
            << std::flush;

  std::vector<CaseResult> results;
  results.reserve(cases.size());
  for (const StepCase& c : cases) results.push_back(run_case(c, mode, options.steps, options.cpu_gemm));

  const double sgemm_after = sgemm_gflops();
  const double sgemm = 0.5 * (sgemm_before + sgemm_after);
  double sgemm_best = std::max(sgemm_before, sgemm_after);  // the best rate of every probe of the run
  for (const CaseResult& r : results) {
    for (double rate : r.sgemm_after_step) sgemm_best = std::max(sgemm_best, rate);
  }

  Table speed({"config", "B", "T", "params", "GFLOP/step", "ms/step (median)", "ms/step (min)", "steps", "tokens/s",
               "model GFLOP/s", "model / sgemm", "model / sgemm (alternated)", "model / best sgemm", "zero_grads ms",
               "fwd+bwd ms", "AdamW ms", "AdamW GB/s", "ceiling / best sgemm", "loss first -> last"});
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const StepCase& c = cases[i];
    const CaseResult& r = results[i];
    const double tokens = static_cast<double>(c.B * c.T);
    const double gflops = r.flops_per_step / r.timing.median_s / 1e9;
    speed.add_row({c.name, std::to_string(c.B), std::to_string(c.T), fmt(r.params / 1e6, 2) + "M",
                   fmt(r.flops_per_step / 1e9, 1), fmt(r.timing.median_s * 1e3, 1), fmt(r.timing.min_s * 1e3, 1),
                   std::to_string(r.timing.repeats), fmt(tokens / r.timing.median_s, 0), fmt(gflops, 1),
                   percent(gflops / sgemm), percent(r.alternated_ratio()), percent(gflops / sgemm_best),
                   fmt(r.zero_s * 1e3, 1), fmt(r.forward_backward_s * 1e3, 1), fmt(r.optimizer_s * 1e3, 1),
                   fmt(32.0 * static_cast<double>(r.params) / r.optimizer_s / 1e9, 1),
                   percent(step_ceiling(r, sgemm_best)), fmt(r.initial_loss, 3) + " -> " + fmt(r.final_loss, 3)});
  }
  speed.print();
  std::cout << "\n- sgemm 1024x1024x1024 after the steps: " << fmt(sgemm_after)
            << " GFLOP/s; 'model / sgemm' uses the mean " << fmt(sgemm)
            << " GFLOP/s of before and after; 'model / sgemm (alternated)' is the median over the timed steps of "
               "each step's rate over a 1024^3 sgemm probe (median of 5 calls) run right after it; 'model / best "
               "sgemm' uses the highest rate of every sgemm measured in the run, "
            << fmt(sgemm_best) << " GFLOP/s\n"
            << "- phase columns: medians of each phase over the timed steps (fwd+bwd includes the LM head and loss); "
               "AdamW GB/s: the 32 bytes per parameter the optimizer phase must move (the gradient read for the "
               "norm; then parameter, gradient, m and v read and parameter, m and v written) over its time\n"
            << "- ceiling / best sgemm: the most 'model / best sgemm' can be with every model FLOP at the best sgemm "
               "rate, zero_grads and AdamW as measured, every other op free. Those two run at the memory bandwidth: "
               "a triad measured before the steps moved "
            << fmt(stream.triad_bytes_per_s / 1e9, 1) << " GB/s as STREAM counts it (3 arrays), "
            << fmt(stream.triad_bytes_per_s * 4.0 / 3.0 / 1e9, 1)
            << " GB/s with the written array's read for ownership (256 MiB arrays); AdamW reads every array it "
               "writes\n"
            << "- model FLOPs/step = B*T * (6 * matmul weights (+ V*C for the tied LM head) + 6*L*T*C) "
               "(GptModel::flops_per_token); time = median over >= "
            << options.steps << " steps (--steps) after 1 warm-up step\n\n";

  Table memory({"config", "B", "T", "params", "grads", "AdamW m+v", "activations saved", "scratch", "accounted",
                "RSS before model", "peak RSS (steps)", "peak / accounted", "(peak - before) / accounted"});
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const StepCase& c = cases[i];
    const CaseResult& r = results[i];
    const double p = static_cast<double>(r.params) * 4;
    const double accounted = 4 * p + static_cast<double>(r.activations.saved_bytes + r.activations.scratch_bytes);
    const bool valid = r.peak_valid && r.peak_rss > 0;
    memory.add_row(
        {c.name, std::to_string(c.B), std::to_string(c.T), bytes_human(p), bytes_human(p), bytes_human(2 * p),
         bytes_human(static_cast<double>(r.activations.saved_bytes)),
         bytes_human(static_cast<double>(r.activations.scratch_bytes)), bytes_human(accounted),
         bytes_human(static_cast<double>(r.rss_before_model)),
         valid ? bytes_human(static_cast<double>(r.peak_rss)) : "n/a",
         valid ? fmt(static_cast<double>(r.peak_rss) / accounted, 2) + "x" : "n/a",
         valid ? fmt((static_cast<double>(r.peak_rss) - static_cast<double>(r.rss_before_model)) / accounted, 2) + "x"
               : "n/a"});
  }
  if (options.cpu_gemm == CpuGemmChoice::measured) {
    Table plans({"config", "B", "T", "shapes", "timing s", "plan ms/step", "fixed rule ms/step", "fixed / plan",
                 "routes and one pass over the shapes"});
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const CaseResult& r = results[i];
      const double fixed = median(r.fixed_step_s);
      plans.add_row({cases[i].name, std::to_string(cases[i].B), std::to_string(cases[i].T),
                     std::to_string(r.plan_shapes), fmt(r.plan_measure_s, 1), fmt(r.timing.median_s * 1e3, 1),
                     fmt(fixed * 1e3, 1), fmt(fixed / r.timing.median_s, 3) + "x", r.plan_summary});
    }
    std::cout << "## The measured CPU GEMM plan against the fixed rule (steps alternated, medians)\n\n";
    plans.print();
    std::cout << "\n";
  }
  memory.print();
  std::cout << "\n- accounted = 4 x 4 bytes x params (values, grads, AdamW m, v) + activation_memory(B, T, "
            << choice_name(mode)
            << ").saved_bytes + scratch_bytes; peak RSS = VmHWM of the whole process (including memory an earlier row\n"
               "  freed but the allocator kept: 'RSS before model'), reset after the warm-up step"
            << (results.empty() || results[0].peak_valid ? "" : " (reset failed: /proc/self/clear_refs not writable)")
            << "\n";

  const double logging_s = logging_seconds_per_step();
  std::cout << "\n- logging per step (RSS reads + metrics.jsonl line + TensorBoard scalars, flushed; median of 300): "
            << fmt(logging_s * 1e6, 1) << " us = ";
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::cout << (i ? ", " : "") << percent(logging_s / results[i].timing.median_s, 3) << " of the " << cases[i].name
              << " B=" << cases[i].B << " T=" << cases[i].T << " step";
  }
  std::cout << " (bar < 2%: " << (logging_s < 0.02 * results[0].timing.median_s ? "met" : "MISSED") << ")\n";

  if (options.reference == "torch") {
    const int code = reference_table(cases, mode, options.python, quick, options.steps, options.cpu_gemm);
    if (code != 0) return code;
  }
  if (!quick && !custom) {
    const CaseResult& r = results[1];  // GPT-2 124M, B=4, T=64
    const double gflops = r.flops_per_step / r.timing.median_s / 1e9;
    const double ratio = gflops / sgemm, ratio_best = gflops / sgemm_best;
    const double accounted = 16.0 * static_cast<double>(r.params) +
                             static_cast<double>(r.activations.saved_bytes + r.activations.scratch_bytes);
    std::cout << "- bar (GPT-2 124M, B=4, T=64): step >= 50% of sgemm (goal 65%): " << percent(ratio)
              << " of the mean, " << percent(ratio_best) << " of the best -> "
              << (ratio_best >= 0.5 ? "met"
                  : ratio >= 0.5    ? "met on the mean only"
                                    : "MISSED")
              << "; peak RSS <= 1.3x accounted: "
              << (r.peak_valid ? fmt(static_cast<double>(r.peak_rss) / accounted, 2) + "x -> " +
                                     (static_cast<double>(r.peak_rss) <= 1.3 * accounted ? "met" : "MISSED")
                               : std::string("n/a"))
              << "\n";
  }
  return 0;
}
