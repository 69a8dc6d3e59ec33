// bench_train_step's options and the shape they select (see train_step_options.h).
#include "train_step_options.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>

#include "myriad/config/run_config.h"
#include "myriad/core/error.h"
#include "myriad/train/config_wiring.h"
#include "myriad/train/engine.h"

namespace myriad::bench {

namespace {

int positive_int(const std::string& option, const std::string& text) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  MYRIAD_CHECK(
      ec == std::errc() && end == text.data() + text.size() && value > 0 && value <= std::numeric_limits<int>::max(),
      "option " << option << ": expected a positive integer, got '" << text << "'");
  return static_cast<int>(value);
}

}  // namespace

bool TrainStepOptions::custom_shape() const { return !config_path.empty() || layers || heads || embd || batch || seq; }

std::string train_step_usage() {
  return "usage: bench_train_step [--quick] [--recompute none|selective|full] [--config FILE.yaml]\n"
         "                        [--cpu-gemm fixed|measured] [--reference torch [--python PATH]]\n"
         "                        [--layers N] [--heads N] [--embd N] [--batch N] [--seq N] [--steps N]\n"
         "  (no shape option)  GPT-2 tiny (B=8, T=128) and GPT-2 124M at B=4 x T=64 and T=256; --quick: tiny only,\n"
         "                     and one --reference round (else 3)\n"
         "  --config FILE      time one step of the run config's model at training.micro_batch x seq_len\n"
         "  --layers N         transformer blocks (L)          overrides model.n_layer\n"
         "  --heads N          attention heads (H)             overrides model.n_head\n"
         "  --embd N           channels (C)                    overrides model.n_embd\n"
         "  --batch N          sequences per step (B)          overrides training.micro_batch\n"
         "  --seq N            tokens per sequence (T)         overrides training.seq_len (grows the context)\n"
         "  --recompute MODE   activation recompute: none (default), selective or full\n"
         "  --steps N          time at least N steps (default 3; more while under 1 s, up to max(N, 50)): more\n"
         "                     steps steady the medians and the alternated sgemm ratio on a noisy machine\n"
         "  --cpu-gemm MODE    fixed (default): the CPU GEMM's fixed rule; measured: the warm-up step's GEMM shapes\n"
         "                     timed on every route and each run on its fastest (training.cpu_gemm measured), the\n"
         "                     timed steps alternating between that plan and the fixed rule, both reported\n"
         "  --reference torch  also time PyTorch eager's step (default and fused AdamW) at each shape, in rounds\n"
         "                     alternated with myriad's (benchmarks/train_step_torch.py), and print the ratios;\n"
         "                     PyTorch's model is the case's own (GPT-2 or LLaMA-style, its parameter count\n"
         "                     checked against myriad's); a mixture of experts or block-sparse attention is refused\n"
         "  --python PATH      the interpreter that runs it (default: python3; it needs torch)\n"
         "  --help             this text\n"
         "  A shape option without --config starts from GPT-2 124M (V 50257, L 12, H 12, C 768) at B=4, T=64.\n"
         "  Options may be written --option value or --option=value.\n";
}

TrainStepOptions parse_train_step_options(int argc, const char* const* argv) {
  TrainStepOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    std::optional<std::string> inline_value;
    if (const std::size_t eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      MYRIAD_CHECK(i + 1 < argc, "option " << name << " needs a value");
      return argv[++i];
    };
    auto flag = [&] { MYRIAD_CHECK(!inline_value, "option " << name << " takes no value"); };
    if (name == "--help" || name == "-h") {
      flag();
      o.help = true;
    } else if (name == "--quick") {
      flag();
      o.quick = true;
    } else if (name == "--recompute") {
      o.recompute = require_choice<Recompute>(value(), "option --recompute:");
    } else if (name == "--config") {
      o.config_path = value();
      MYRIAD_CHECK(!o.config_path.empty(), "option --config: expected a file name");
    } else if (name == "--layers") {
      o.layers = positive_int(name, value());
    } else if (name == "--heads") {
      o.heads = positive_int(name, value());
    } else if (name == "--embd") {
      o.embd = positive_int(name, value());
    } else if (name == "--batch") {
      o.batch = positive_int(name, value());
    } else if (name == "--seq") {
      o.seq = positive_int(name, value());
    } else if (name == "--steps") {
      o.steps = positive_int(name, value());
    } else if (name == "--cpu-gemm") {
      o.cpu_gemm = require_choice<CpuGemmChoice>(value(), "option --cpu-gemm:");
    } else if (name == "--reference") {
      o.reference = value();
      MYRIAD_CHECK(o.reference == "torch", "option --reference: expected 'torch', got '" << o.reference << "'");
    } else if (name == "--python") {
      o.python = value();
      MYRIAD_CHECK(!o.python.empty(), "option --python: expected an interpreter");
    } else {
      MYRIAD_THROW("unknown option '" << argv[i] << "' (--help lists the options)");
    }
  }
  return o;
}

TrainStepShape resolve_train_step_shape(const TrainStepOptions& o) {
  RunConfig config;
  TrainStepShape shape;
  if (!o.config_path.empty()) {
    config = RunConfig::from_yaml_file(o.config_path);
    shape.name = std::filesystem::path(o.config_path).filename().string();
  } else {  // the bar case of the default table: GPT-2 124M (the model section's defaults), B=4, T=64
    config.training.micro_batch = 4;
    config.training.seq_len = 64;
    shape.name = "GPT-2 124M shape";
  }
  auto set = [&](const std::optional<int>& value, const char* key) {
    if (value) config.apply_override(std::string(key) + "=" + std::to_string(*value));
  };
  set(o.layers, "model.n_layer");
  set(o.heads, "model.n_head");
  set(o.embd, "model.n_embd");
  set(o.batch, "training.micro_batch");
  set(o.seq, "training.seq_len");
  if (o.seq && *o.seq > config.model.context_length) {
    shape.note = "model.context_length " + std::to_string(config.model.context_length) + " grown to --seq " +
                 std::to_string(*o.seq);
    config.model.context_length = *o.seq;
  }
  // What the file says that this benchmark does not apply: it times the float32 CPU step, with
  // --recompute (not training.recompute). Said in the note rather than dropped in silence.
  std::string unused;
  auto add_unused = [&](const std::string& what) { unused += (unused.empty() ? "" : ", ") + what; };
  if (config.training.precision != Precision::fp32)
    add_unused("training.precision " + std::string(choice_name(config.training.precision)));
  if (config.training.device != ComputeDevice::cpu)
    add_unused("training.device " + std::string(choice_name(config.training.device)));
  // A file's recompute / cpu_gemm that the command line's options differ from (no file: nothing to say).
  const bool from_file = !o.config_path.empty();
  if (from_file && config.training.cpu_gemm != o.cpu_gemm)
    add_unused("training.cpu_gemm " + std::string(choice_name(config.training.cpu_gemm)) + " (--cpu-gemm " +
               std::string(choice_name(o.cpu_gemm)) + ")");
  if (from_file && config.training.recompute != o.recompute)
    add_unused("training.recompute " + std::string(choice_name(config.training.recompute)) + " (--recompute " +
               std::string(choice_name(o.recompute)) + ")");
  if (!unused.empty()) {
    shape.note += (shape.note.empty() ? "" : "; ") + std::string("not applied: ") + unused +
                  " — bench_train_step times the float32 CPU step";
  }
  config.model.validate();
  const RunConfig resolved = config.resolved();
  shape.B = resolved.training.micro_batch;
  shape.T = resolved.training.seq_len;
  MYRIAD_CHECK(shape.T > 0 && shape.T <= resolved.model.context_length,
               shape.name << ": training.seq_len " << shape.T << " must be in 1.." << resolved.model.context_length
                          << " (model.context_length)");
  shape.model = train::transformer_config(resolved.model, resolved.model.vocab_size);
  shape.model.validate();
  shape.name += " L" + std::to_string(shape.model.n_layer) + " H" + std::to_string(shape.model.n_head) + " C" +
                std::to_string(shape.model.n_embd);
  return shape;
}

}  // namespace myriad::bench
