// Key tables of the checkpoint, logging, sample and security sections.
#include "myriad/config/output_config.h"

namespace myriad {

const std::vector<Field<CheckpointConfig>>& CheckpointConfig::fields() {
  using C = CheckpointConfig;
  static const std::vector<Field<C>> table = {
      make_field("dir", &C::dir, "checkpoint directory; \"\" = <logging.dir>/checkpoints"),
      make_field("every", &C::every, "steps between checkpoints; 0 = only at the end", {.check = at_least(0)}),
      make_field("keep", &C::keep, "newest checkpoints kept on disk", {.check = at_least(1)}),
      make_field(
          "resume", &C::resume,
          "\"\" = fresh start; auto = the newest intact checkpoint in dir if there is one (a damaged newer one is "
          "skipped with a warning naming it); else a checkpoint path"),
      make_field("async", &C::async,
                 "periodic saves snapshot the state to host memory and write it in a background thread while "
                 "training continues (the final and preemption saves wait)"),
  };
  return table;
}

void CheckpointConfig::validate() const { validate_fields(*this); }

const std::vector<Field<LoggingConfig>>& LoggingConfig::fields() {
  using L = LoggingConfig;
  static const std::vector<Field<L>> table = {
      make_field("dir", &L::dir, "run directory: logs, metrics, the resolved config, default data/checkpoint dirs",
                 {.check = non_empty()}),
      make_field("every", &L::every, "steps between metric lines", {.check = at_least(1)}),
      make_field("level", &L::level, "log verbosity (spdlog level)",
                 {.allowed = {"trace", "debug", "info", "warn", "error", "critical", "off"}}),
      make_field("jsonl", &L::jsonl, "rank 0 appends every step's metrics to <dir>/metrics.jsonl (docs/metrics.md)"),
      make_field("tensorboard", &L::tensorboard, "rank 0 writes TensorBoard event files under <dir>/tensorboard"),
      make_field("measure_peak", &L::measure_peak,
                 "CPU: measure each rank's fp32 GEMM rate at start-up; the MFU divides by the larger of it "
                 "and the datasheet peak (a contended sample never lowers it). Not used on cuda"),
      make_field("peak_tflops", &L::peak_tflops,
                 "peak FLOP/s per rank in TFLOP/s that the MFU divides by; 0 = the GPU's dense datasheet "
                 "peak for training.precision (a table by compute capability and SM count), or on the CPU "
                 "threads x clock x FMA width",
                 {.check = at_least(0)}),
      make_field("straggler_every", &L::straggler_every,
                 "steps between straggler checks (one small all-gather of per-rank compute time); 0 = off",
                 {.check = at_least(0)}),
      make_field("straggler_margin", &L::straggler_margin,
                 "report a rank whose compute time exceeds the median by more than this fraction",
                 {.check = greater_than(0)}),
  };
  return table;
}

void LoggingConfig::validate() const { validate_fields(*this); }

const std::vector<Field<SampleConfig>>& SampleConfig::fields() {
  using S = SampleConfig;
  static const std::vector<Field<S>> table = {
      make_field("tokens", &S::tokens, "tokens to generate after training; 0 = no sample", {.check = at_least(0)}),
      make_field("temperature", &S::temperature, "softmax temperature", {.check = greater_than(0)}),
      make_field("top_k", &S::top_k, "sample among the k most likely tokens; 0 = the whole vocabulary",
                 {.check = at_least(0)}),
      make_field("prompt", &S::prompt, "text the sample continues; \"\" = start from the end-of-text token"),
  };
  return table;
}

void SampleConfig::validate() const { validate_fields(*this); }

namespace {

// The value of a string of octal digits (checked by the caller).
unsigned octal_value(const std::string& digits) {
  unsigned bits = 0;
  for (char c : digits) bits = bits * 8 + static_cast<unsigned>(c - '0');
  return bits;
}

// An octal umask of at most four digits and 0777: checked at parse time, as the Rules say.
bool is_octal_umask(const std::string& text) {
  return !text.empty() && text.size() <= 4 && text.find_first_not_of("01234567") == std::string::npos &&
         octal_value(text) <= 0777;
}

FieldCheck octal_umask() {
  return {"an octal umask <= 0777 (e.g. 077, 027, 022)", [](const FieldValue& v) {
            const auto* s = std::get_if<std::string>(&v);
            return !s || is_octal_umask(*s);
          }};
}

}  // namespace

const std::vector<Field<SecurityConfig>>& SecurityConfig::fields() {
  using S = SecurityConfig;
  static const std::vector<Field<S>> table = {
      make_field("key_file", &S::key_file,
                 "key file (lines 'key <id> <64 hex digits>' and 'current <id>'; docs/security.md): checkpoints — "
                 "data files, tokenizer, manifest — are written AES-256-GCM encrypted under its current key and "
                 "read with any key it holds; a missing or wrong key stops the run before training. \"\" = the "
                 "file $MYRIAD_KEY_FILE names; neither = written in clear"),
      make_field("encrypt_token_shards", &S::encrypt_token_shards,
                 "true: the run's token cache (data.cache_dir or <run>/data: shards, tokenizer, the temporary "
                 "token files of tokenizing) is written encrypted under the key file's current key, so no token "
                 "id lands on disk in clear (a cache built in clear is rebuilt); needs a key (security.key_file "
                 "or $MYRIAD_KEY_FILE), else the run stops before training. Encrypted shards from myriad-data "
                 "tokenize --encrypt are read with the key whatever this says"),
      make_field("umask", &S::umask,
                 "the process umask (octal) the training driver sets before writing anything: 077 = every "
                 "artefact (run folder, logs, metrics, data cache, checkpoints) readable by the run's owner only "
                 "(files 0600, folders 0700); 027 = also its group; 022 = by everyone",
                 {.check = octal_umask()}),
  };
  return table;
}

void SecurityConfig::validate() const {
  validate_fields(*this);
  MYRIAD_CHECK(is_octal_umask(umask),
               "security.umask: '" << umask << "' is not an octal umask of at most 0777 (e.g. 077, 027, 022)");
}

unsigned SecurityConfig::umask_bits() const { return octal_value(umask); }

}  // namespace myriad
