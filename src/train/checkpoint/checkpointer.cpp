// Checkpointer: sharded save, background save, load under any layout (train/checkpoint/checkpointer.h).
#include "myriad/train/checkpoint/checkpointer.h"

#include <utility>
#include <vector>

#include "myriad/distributed/scalar_reduce.h"
#include "myriad/ops/elementwise.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/checkpoint/checkpoint_folder.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"
#include "myriad/train/checkpoint/checkpoint_tokenizer.h"
#include "myriad/train/checkpoint/distributed_checkpoint.h"
#include "myriad/train/config_wiring.h"

namespace myriad::train {

Checkpointer::Checkpointer(RankState& state, const data::BpeTokenizer* tokenizer, CpuGemmTuning* cpu_gemm)
    : state_(state), tokenizer_(tokenizer), cpu_gemm_(cpu_gemm) {
  if (tokenizer_ != nullptr) {
    tokenizer_header_.tokenizer_fingerprint = tokenizer_fingerprint(*tokenizer_);
    tokenizer_header_.tokenizer_vocab_size = tokenizer_->vocab_size();
  }
  // Background saves reuse one host snapshot: take it once now so that the first periodic save
  // does not stall training on the page faults of a fresh multi-GiB buffer.
  const RunConfig& config = state_.config;
  if (config.checkpoint.async && config.checkpoint.every > 0 && writes_checkpoint()) {
    state_.data_parallel->snapshot_owned(snapshot_);
  }
  distributed::Communicator& world = state_.groups->world();
  comm_ = world.split(0, world.rank(), "checkpoint");  // background writes talk only here
}

Checkpointer::~Checkpointer() = default;

bool Checkpointer::writes_dense_state() {
  return state_.data_group().rank() == 0 || state_.data_parallel->zero_stage() >= 1;
}

bool Checkpointer::writes_checkpoint() {
  return writes_dense_state() || (state_.config.parallel.ep > 1 && state_.groups->expert_data().rank() == 0);
}

std::string Checkpointer::save(bool background) {
  const RunConfig& config = state_.config;
  // Every rank that owns a distinct part of the state writes it to its own file: at ZeRO >= 1
  // each dp rank its shard (nothing is gathered), at ZeRO 0 the dp rank 0 of each (tp, pp) part.
  // The part is first copied into a host snapshot training does not touch; rank 0 writes the
  // manifest once every file is complete — now, or in background threads (one per rank, on the
  // checkpoint communicator) while training goes on. The snapshot buffers are reused, so a write
  // still reading them must finish first.
  distributed::Communicator& world = state_.groups->world();
  distributed::run_on_every_rank(world, "previous background checkpoint write", [&] { writer_.wait(); });
  const bool writer = writes_checkpoint(), dense_writer = writes_dense_state();
  auto pieces = std::make_shared<std::vector<CheckpointPiece>>();
  state_.data_parallel->consolidate_replicas();  // local SGD: every replica holds the state written below
  if (writer) {
    state_.data_parallel->snapshot_owned(snapshot_);
    const nn::ParameterStore& store = state_.model->parameters();
    for (const parallel::ZeroSegment& segment : snapshot_.segments) {
      const nn::Parameter& p = store[segment.param];
      if (!p.primary || (!dense_writer && !p.expert)) continue;
      for (auto [packed, prefix] : {std::pair{&snapshot_.values, ""}, std::pair{&snapshot_.m, kAdamMPrefix},
                                    std::pair{&snapshot_.v, kAdamVPrefix}}) {
        std::vector<CheckpointPiece> more = segment_pieces(p, segment.begin - p.offset, segment.end - p.offset, *packed,
                                                           segment.shard_position, prefix);
        pieces->insert(pieces->end(), more.begin(), more.end());
      }
      if (snapshot_.outer_momentum.defined()) {
        std::vector<CheckpointPiece> more =
            segment_pieces(p, segment.begin - p.offset, segment.end - p.offset, snapshot_.outer_momentum,
                           segment.shard_position, kOuterMomentumPrefix);
        pieces->insert(pieces->end(), more.begin(), more.end());
      }
    }
  }
  if (const nn::Fp8Scaling* fp8 = state_.model->fp8_scaling(); fp8 != nullptr && world.rank() == 0) {
    // The same on every rank (reduced at every step's end): world rank 0's copy is the one written.
    Tensor fp8_state = fp8->state();
    pieces->push_back({kFp8ScalingTensor, fp8_state.shape(), {{0, fp8_state.numel()}}, fp8_state});
  }
  CheckpointHeader header;
  header.step = state_.step;
  header.config_yaml = config.to_yaml();
  header.model_yaml = model_section_yaml(config);
  const ParallelConfig& p = config.parallel;
  header.layout = "dp " + std::to_string(p.dp) + (p.ep > 1 ? " (ep " + std::to_string(p.ep) + ")" : "") + " x tp " +
                  std::to_string(p.tp) + " x pp " + std::to_string(p.pp) +
                  (p.sequence_parallel && p.tp > 1 ? " (sequence parallel)" : "") + ", zero_stage " +
                  std::to_string(p.zero_stage);
  header.seed = config.training.seed;
  header.samples_consumed =
      state_.step * config.training.micro_batch * config.training.gradient_accumulation * config.parallel.dp;
  header.optimizer_steps = state_.data_parallel->optimizer().steps_taken();
  if (state_.loss_scaler) {
    header.loss_scale = state_.loss_scaler->scale();
    header.loss_scale_finite_steps = state_.loss_scaler->finite_steps();
  }
  header.tokenizer_fingerprint = tokenizer_header_.tokenizer_fingerprint;
  header.tokenizer_vocab_size = tokenizer_header_.tokenizer_vocab_size;
  if (cpu_gemm_ != nullptr) header.cpu_gemm_plan = cpu_gemm_->plan_text();
  const std::string dir = config.checkpoint.dir;
  const int keep = config.checkpoint.keep;
  distributed::run_on_rank0(world, "checkpoint directory", [&] {
    const std::string tmp = begin_checkpoint(dir, state_.step);
    // The tokenizer goes in first: the manifest, written last, records it.
    if (tokenizer_ != nullptr) write_checkpoint_tokenizer(tmp, *tokenizer_, state_.at_rest, header);
  });
  std::string path = checkpoint_path(dir, state_.step);  // not const: moved out by the return
  auto job = [this, dir, keep, header, pieces, writer] {
    write_checkpoint_collectively(*comm_, dir, header, writer ? pieces.get() : nullptr, keep, state_.at_rest);
  };
  if (background) {
    writer_.submit(path, job);
    state_.log->info("checkpoint: step {} snapshot taken, writing {} in the background", state_.step, path);
  } else {
    job();
    state_.log->info("checkpoint: step {} saved to {}", state_.step, path);
  }
  return path;
}

void Checkpointer::check_fresh_run_folder() {
  // A run that starts from step 0 must not write into another run's checkpoints: its own would
  // be mixed with them (retention, `latest`). Checked once, before the first step of an engine
  // that did not resume.
  if (resumed_ || fresh_run_checked_) return;
  fresh_run_checked_ = true;
  distributed::run_on_rank0(state_.groups->world(), "checkpoint folder check", [&] {
    const std::string conflict = fresh_run_conflict(state_.config.checkpoint.dir);
    MYRIAD_CHECK(conflict.empty(), conflict);
  });
}

std::string Checkpointer::wait_for_save() {
  std::string path;
  distributed::run_on_every_rank(state_.groups->world(), "background checkpoint write", [&] { path = writer_.wait(); });
  return path;
}

void Checkpointer::load(const std::string& checkpoint_dir) {
  const RunConfig& config = state_.config;
  distributed::Communicator& world = state_.groups->world();
  std::string path = checkpoint_dir;
  if (path == "auto") {
    // Rank 0 takes the newest intact checkpoint (every checksum read once: a damaged newest one
    // is passed over, named, and left in place); every rank then takes its step.
    std::int64_t chosen = 0;  // step + 1; 0 = none
    distributed::run_on_rank0(world, "resume auto", [&] {
      const ResumePoint point = find_resume_point(
          config.checkpoint.dir, [&](const std::string& dir) { return checkpoint_damage(dir, state_.at_rest); });
      if (!point.note.empty()) state_.log->warn("resume auto: {}", point.note);
      chosen = point.path.empty() ? 0 : point.step + 1;
    });
    chosen = distributed::sum_over_ranks(world, world.rank() == 0 ? chosen : std::int64_t{0});
    if (chosen == 0) {
      state_.log->info("resume auto: no checkpoint in {}, starting fresh", config.checkpoint.dir);
      return;
    }
    path = checkpoint_path(config.checkpoint.dir, chosen - 1);
  }
  // Every rank reads its own part into staging buffers; only when every rank succeeded does any
  // rank touch its training state (nothing is half-loaded, on any rank).
  const std::int64_t n = state_.model->parameters().numel();
  parallel::FullState staged{Tensor::zeros({n}), Tensor::zeros({n}), Tensor::zeros({n})};
  parallel::LocalSgd* local_sgd = state_.data_parallel->local_sgd();
  Tensor outer_momentum = local_sgd ? Tensor::zeros({n}) : Tensor();
  bool has_outer_momentum = false;
  CheckpointHeader header;
  cpu::GemmPlan saved_plan;  // training.cpu_gemm measured: the checkpoint's plan (empty: none)
  bool tokenizer_unchecked = false;
  nn::Fp8Scaling* fp8 = state_.model->fp8_scaling();
  Tensor fp8_state;
  distributed::run_on_every_rank(world, "checkpoint load", [&] {
    CheckpointReader reader(path, model_section_yaml(config), state_.at_rest);
    // Its embeddings mean the token ids of its tokenizer: another one is refused before anything changes.
    const std::string mismatch = tokenizer_mismatch(path, reader.header(), tokenizer_, config.data.tokenizer);
    MYRIAD_CHECK(mismatch.empty(), mismatch);
    tokenizer_unchecked = tokenizer_ != nullptr && reader.header().tokenizer_fingerprint.empty();
    read_parameter_state(reader, state_.model->parameters(), staged.values, &staged.m, &staged.v);
    const nn::Parameter& first = state_.model->parameters()[0];
    has_outer_momentum = local_sgd && reader.has(kOuterMomentumPrefix + first.name);
    if (has_outer_momentum)
      read_prefixed_state(reader, state_.model->parameters(), kOuterMomentumPrefix, outer_momentum);
    if (fp8 != nullptr && reader.has(kFp8ScalingTensor)) {
      fp8_state = fp8->state();  // the shape this run's recipe and model expect
      if (reader.global_shape(kFp8ScalingTensor) == fp8_state.shape()) {
        reader.read_whole(kFp8ScalingTensor, fp8_state);
      } else {
        fp8_state = Tensor();  // another training.fp8_amax_history: started over below
      }
    }
    header = reader.header();
    // A damaged plan is refused here, naming the manifest, before any state changes.
    saved_plan = cpu::GemmPlan::from_text(header.cpu_gemm_plan, path + "/manifest.json's cpu_gemm_plan");
  });
  if (fp8 != nullptr && fp8_state.defined()) {
    fp8->load_state(fp8_state);
  } else if (fp8 != nullptr) {
    state_.log->info(
        "checkpoint: {} holds no FP8 scaling state of this run's shape (saved without training.precision fp8, or "
        "with another training.fp8_amax_history): the scales start over, just in time",
        path);
  }
  state_.data_parallel->load_full(staged.values, staged.m, staged.v);
  if (local_sgd) {
    if (has_outer_momentum) {
      copy(state_.model->parameters().placement().from_host(outer_momentum), local_sgd->outer_momentum());
    } else {
      state_.log->info(
          "checkpoint: {} holds no local-SGD outer momentum (a training.sync every_step run): it starts at 0", path);
    }
  }
  if (tokenizer_unchecked) {
    state_.log->info(
        "checkpoint: {} records no tokenizer (saved before checkpoints kept theirs): its token ids are "
        "assumed to be this run's",
        path);
  }
  state_.refresh_compute_weights();
  state_.step = header.step;
  state_.data_parallel->optimizer().set_steps_taken(header.optimizer_steps >= 0 ? header.optimizer_steps : header.step);
  if (state_.loss_scaler && header.loss_scale > 0)
    state_.loss_scaler->restore(header.loss_scale, header.loss_scale_finite_steps);
  if (cpu_gemm_ != nullptr) cpu_gemm_->restore(saved_plan, path);
  resumed_ = true;
  state_.log->info("checkpoint: resumed from {} at step {}", path, state_.step);
}

}  // namespace myriad::train
