// Engine: checkpoints (sharded save, background save, load under any layout) and generation.
#include <cstring>

#include "myriad/distributed/scalar_reduce.h"
#include "myriad/nn/generate.h"
#include "myriad/ops/elementwise.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/checkpoint/checkpoint_folder.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"
#include "myriad/train/checkpoint/distributed_checkpoint.h"
#include "myriad/train/engine.h"

namespace myriad::train {

std::string Engine::save(bool background) {
  // Every rank that owns a distinct part of the state writes it to its own file: at ZeRO >= 1
  // each dp rank its shard (nothing is gathered), at ZeRO 0 the dp rank 0 of each (tp, pp) part.
  // The part is first copied into a host snapshot training does not touch; rank 0 writes the
  // manifest once every file is complete — now, or in background threads (one per rank, on the
  // checkpoint communicator) while training goes on. The snapshot buffers are reused, so a write
  // still reading them must finish first.
  distributed::Communicator& world = groups_->world();
  distributed::run_on_every_rank(world, "previous background checkpoint write", [&] { async_writer_.wait(); });
  const bool writer = writes_checkpoint(), dense_writer = writes_dense_state();
  auto pieces = std::make_shared<std::vector<CheckpointPiece>>();
  data_parallel_->consolidate_replicas();  // local SGD: every replica holds the state written below
  if (writer) {
    data_parallel_->snapshot_owned(snapshot_);
    const nn::ParameterStore& store = model_->parameters();
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
  CheckpointHeader header;
  header.step = step_;
  header.config_yaml = config_.to_yaml();
  header.model_yaml = model_section_yaml(config_);
  const ParallelConfig& p = config_.parallel;
  header.layout = "dp " + std::to_string(p.dp) + (p.ep > 1 ? " (ep " + std::to_string(p.ep) + ")" : "") + " x tp " +
                  std::to_string(p.tp) + " x pp " + std::to_string(p.pp) +
                  (p.sequence_parallel && p.tp > 1 ? " (sequence parallel)" : "") + ", zero_stage " +
                  std::to_string(p.zero_stage);
  header.seed = config_.training.seed;
  header.samples_consumed =
      step_ * config_.training.micro_batch * config_.training.gradient_accumulation * config_.parallel.dp;
  header.optimizer_steps = data_parallel_->optimizer().steps_taken();
  if (loss_scaler_) {
    header.loss_scale = loss_scaler_->scale();
    header.loss_scale_finite_steps = loss_scaler_->finite_steps();
  }
  const std::string dir = config_.checkpoint.dir;
  const int keep = config_.checkpoint.keep;
  distributed::run_on_rank0(world, "checkpoint directory", [&] { begin_checkpoint(dir, step_); });
  std::string path = checkpoint_path(dir, step_);  // not const: moved out by the return
  auto job = [this, dir, keep, header, pieces, writer] {
    write_checkpoint_collectively(*checkpoint_comm_, dir, header, writer ? pieces.get() : nullptr, keep);
  };
  if (background) {
    async_writer_.submit(path, job);
    log_->info("checkpoint: step {} snapshot taken, writing {} in the background", step_, path);
  } else {
    job();
    log_->info("checkpoint: step {} saved to {}", step_, path);
  }
  return path;
}

void Engine::check_fresh_run_folder() {
  // A run that starts from step 0 must not write into another run's checkpoints: its own would
  // be mixed with them (retention, `latest`). Checked once, before the first step of an engine
  // that did not resume.
  if (resumed_ || fresh_run_checked_) return;
  fresh_run_checked_ = true;
  distributed::run_on_rank0(groups_->world(), "checkpoint folder check", [&] {
    const std::string conflict = fresh_run_conflict(config_.checkpoint.dir);
    MYRIAD_CHECK(conflict.empty(), conflict);
  });
}

std::string Engine::wait_for_save() {
  std::string path;
  distributed::run_on_every_rank(groups_->world(), "background checkpoint write", [&] { path = async_writer_.wait(); });
  return path;
}

void Engine::snapshot_serial(parallel::FullState& out) {
  parallel::FullState local;
  data_parallel_->snapshot_full(local);  // every rank: the tp/pp sums below need all
  const std::int64_t n = serial_layout_->serial_numel();
  if (!out.values.defined() || out.values.numel() != n) out.values = Tensor::zeros({n});
  std::memset(out.values.raw_data(), 0, out.values.nbytes());
  distributed::Communicator& ep = group(distributed::Axis::ep);
  serial_layout_->to_serial(local.values, out.values, /*experts_only=*/ep.rank() != 0);
  if (tp().size() > 1) tp().all_reduce(out.values);
  if (pp().size() > 1) pp().all_reduce(out.values);
  if (ep.size() > 1) ep.all_reduce(out.values);
}

void Engine::load(const std::string& checkpoint_dir) {
  std::string path = checkpoint_dir;
  if (path == "auto") {
    const ResumePoint point = find_resume_point(config_.checkpoint.dir);
    if (point.path.empty()) {
      log_->info("resume auto: no checkpoint in {}, starting fresh", config_.checkpoint.dir);
      return;
    }
    if (!point.note.empty()) log_->warn("resume auto: {}", point.note);
    path = point.path;
  }
  // Every rank reads its own part into staging buffers; only when every rank succeeded does any
  // rank touch its training state (nothing is half-loaded, on any rank).
  const std::int64_t n = model_->parameters().numel();
  parallel::FullState staged{Tensor::zeros({n}), Tensor::zeros({n}), Tensor::zeros({n})};
  parallel::LocalSgd* local_sgd = data_parallel_->local_sgd();
  Tensor outer_momentum = local_sgd ? Tensor::zeros({n}) : Tensor();
  bool has_outer_momentum = false;
  CheckpointHeader header;
  distributed::run_on_every_rank(groups_->world(), "checkpoint load", [&] {
    CheckpointReader reader(path, model_section_yaml(config_));
    read_parameter_state(reader, model_->parameters(), staged.values, &staged.m, &staged.v);
    const nn::Parameter& first = model_->parameters()[0];
    has_outer_momentum = local_sgd && reader.has(kOuterMomentumPrefix + first.name);
    if (has_outer_momentum) read_prefixed_state(reader, model_->parameters(), kOuterMomentumPrefix, outer_momentum);
    header = reader.header();
  });
  data_parallel_->load_full(staged.values, staged.m, staged.v);
  if (local_sgd) {
    if (has_outer_momentum) {
      local_sgd->outer_momentum().copy_from(outer_momentum);
    } else {
      log_->info("checkpoint: {} holds no local-SGD outer momentum (a training.sync every_step run): it starts at 0",
                 path);
    }
  }
  refresh_compute_weights();
  step_ = header.step;
  data_parallel_->optimizer().set_steps_taken(header.optimizer_steps >= 0 ? header.optimizer_steps : header.step);
  if (loss_scaler_ && header.loss_scale > 0) loss_scaler_->restore(header.loss_scale, header.loss_scale_finite_steps);
  resumed_ = true;
  log_->info("checkpoint: resumed from {} at step {}", path, step_);
}

std::string Engine::generate(const std::string& prompt, std::int64_t max_new_tokens, float temperature,
                             std::int64_t top_k, std::uint64_t seed) {
  MYRIAD_CHECK(data_.tokenizer != nullptr,
               "generate: this run has no tokenizer (data given as shards only); "
               "set data.tokenizer to gpt2:<dir> or bpe:<file>");
  const data::BpeTokenizer& tok = *data_.tokenizer;
  std::vector<std::int32_t> ids = tok.encode(prompt);
  ids.insert(ids.begin(), tok.eot_id());
  nn::GenerateArgs args;
  args.max_new_tokens = max_new_tokens;
  args.temperature = temperature;
  args.top_k = top_k;
  args.seed = seed;
  const std::vector<std::int32_t> out = generate_ids(ids, args).ids;
  // Document boundaries (end-of-text tokens) are shown as a separator line.
  std::string text = prompt;
  std::vector<std::int32_t> piece;
  for (std::int32_t id : out) {
    if (id == tok.eot_id()) {
      text += tok.decode(piece) + "\n---\n";
      piece.clear();
    } else {
      piece.push_back(id);
    }
  }
  return text + tok.decode(piece);
}

}  // namespace myriad::train
