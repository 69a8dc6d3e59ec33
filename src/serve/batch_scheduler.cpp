// BatchScheduler: continuous batching over the paged KV cache (serve/batch_scheduler.h).
#include "myriad/serve/batch_scheduler.h"

#include <algorithm>

#include "myriad/core/error.h"
#include "myriad/nn/sampling.h"

namespace myriad::serve {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

struct BatchScheduler::Sequence {
  std::uint64_t id = 0;
  CompletionRequest request;
  std::shared_ptr<RequestStream> stream;
  std::vector<std::int32_t> tokens;  // the prompt, then every drawn token
  std::int64_t prompt_length = 0;
  std::int64_t cached = 0;  // positions whose keys and values are in the cache
  std::vector<std::int32_t> blocks;
  IncrementalText text;
  Clock::time_point arrival, last_token;
  bool drew_first = false;

  std::int64_t generated() const { return static_cast<std::int64_t>(tokens.size()) - prompt_length; }
  std::int64_t pending() const { return static_cast<std::int64_t>(tokens.size()) - cached; }
};

BatchScheduler::BatchScheduler(const nn::GptModel& model, const data::BpeTokenizer* tokenizer, SchedulerOptions options,
                               ServeMetrics* metrics, DecodeGroup* group)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      group_(group),
      cache_(model.make_paged_kv_cache(
          options.block_size, options.num_blocks > 0
                                  ? options.num_blocks
                                  : options.max_sequences * ((model.config().context_length + options.block_size - 1) /
                                                             options.block_size))),
      pool_(cache_.num_blocks) {
  const std::int64_t context = model.config().context_length;
  MYRIAD_CHECK(options_.max_batch_tokens >= 1 && options_.max_sequences >= 1 && options_.queue_limit >= 1,
               "serve: max_batch_tokens " << options_.max_batch_tokens << ", max_sequences " << options_.max_sequences
                                          << " and queue_limit " << options_.queue_limit << " must be >= 1");
  MYRIAD_CHECK(cache_.num_blocks >= cache_.blocks_for(context),
               "serve: " << cache_.num_blocks << " KV blocks of " << options_.block_size
                         << " positions cannot hold one full context of " << context << " positions (needs "
                         << cache_.blocks_for(context) << ")");
  MYRIAD_CHECK(!model.config().attention.block_sparse(),
               "serve: the model's attention is block-sparse; its selection needs the whole prefix at every "
               "token, which the paged KV cache does not keep (serve a dense model)");
  options_.num_blocks = cache_.num_blocks;
  free_blocks_ = pool_.free_blocks();
  if (group_ != nullptr) group_->announce_cache(cache_.block_size, cache_.num_blocks);
}

BatchScheduler::~BatchScheduler() = default;

BatchScheduler::Admission BatchScheduler::submit(CompletionRequest request, std::shared_ptr<RequestStream> stream) {
  const nn::TransformerConfig& config = model_.config();
  const auto prompt = static_cast<std::int64_t>(request.prompt.size());
  nn::check_generate_args(request.sampling);
  MYRIAD_CHECK(prompt >= 1, "prompt: needs at least one token");
  MYRIAD_CHECK(prompt <= config.context_length,
               "prompt: " << prompt << " tokens exceed the model's context of " << config.context_length << " tokens");
  for (std::int32_t id : request.prompt) {
    MYRIAD_CHECK(id >= 0 && id < config.vocab_size,
                 "prompt: token id " << id << " outside the vocabulary [0, " << config.vocab_size << ")");
  }
  MYRIAD_CHECK(request.stop.empty() || tokenizer_ != nullptr,
               "stop: stop strings need a tokenizer; this server has none (pass token ids as stop tokens)");
  // Ids the tokenizer does not have (a model vocabulary padded above it) are never drawn.
  if (tokenizer_ != nullptr && request.sampling.vocab_limit == 0)
    request.sampling.vocab_limit = tokenizer_->vocab_size();
  auto seq = std::make_unique<Sequence>();
  seq->request = std::move(request);
  seq->stream = std::move(stream);
  seq->tokens = seq->request.prompt;
  seq->prompt_length = prompt;
  seq->text = IncrementalText(seq->request.stop);
  seq->arrival = Clock::now();
  seq->stream->set_prompt_tokens(prompt);
  {
    std::lock_guard lock(inbox_mutex_);
    if (draining_) return Admission::draining;
    if (queued_.load() >= options_.queue_limit) return Admission::queue_full;
    seq->id = next_id_++;
    inbox_.push_back(std::move(seq));
    ++queued_;
  }
  inbox_changed_.notify_all();
  return Admission::accepted;
}

void BatchScheduler::take_submissions() {
  std::lock_guard lock(inbox_mutex_);
  while (!inbox_.empty()) {
    waiting_.push_back(std::move(inbox_.front()));
    inbox_.pop_front();
  }
}

void BatchScheduler::finish(Sequence& seq, FinishReason reason, const std::string& error) {
  if (reason == FinishReason::stop || reason == FinishReason::length) {
    const std::string rest = seq.text.finish();
    if (!rest.empty()) {
      TokenEvent tail;
      tail.token = -1;  // text only: what the stream held back
      tail.text = rest;
      seq.stream->push(std::move(tail));
    }
  }
  pool_.release(seq.blocks);
  seq.stream->finish(reason, error);
  if (metrics_ != nullptr && reason != FinishReason::error) {
    metrics_->tokens(seq.prompt_length, seq.generated());
    if (seq.drew_first) metrics_->request_latency(seconds_between(seq.arrival, Clock::now()));
  }
}

void BatchScheduler::drop_cancelled() {
  auto drop = [&](auto& list) {
    for (auto it = list.begin(); it != list.end();) {
      if ((*it)->stream->cancelled()) {
        finish(**it, FinishReason::cancelled);
        it = list.erase(it);
      } else {
        ++it;
      }
    }
  };
  drop(waiting_);
  drop(running_seqs_);
}

void BatchScheduler::preempt(Sequence& victim) {
  pool_.release(victim.blocks);
  victim.cached = 0;  // its prompt and drawn tokens are recomputed when it resumes
  ++preemptions_;
  if (metrics_ != nullptr) metrics_->preempted();
}

bool BatchScheduler::draw(Sequence& seq, const float* logits) {
  const nn::TransformerConfig& config = model_.config();
  const std::int64_t V = config.vocab_size, position = static_cast<std::int64_t>(seq.tokens.size());
  const nn::GenerateArgs& args = seq.request.sampling;
  const std::int32_t token = nn::sample_token(logits, V, args, static_cast<std::uint64_t>(position));
  TokenEvent event;
  event.token = token;
  if (seq.request.logprobs >= 0) {
    event.logprob = nn::log_probability(logits, V, token);
    event.top_logprobs = nn::top_log_probabilities(logits, V, seq.request.logprobs);
  }
  seq.tokens.push_back(token);
  const bool stop_token = std::find(args.stop_tokens.begin(), args.stop_tokens.end(), token) != args.stop_tokens.end();
  if (tokenizer_ != nullptr && !stop_token) event.text = seq.text.add(tokenizer_->decode({token}));
  const Clock::time_point now = Clock::now();
  if (metrics_ != nullptr) {
    if (!seq.drew_first)
      metrics_->time_to_first_token(seconds_between(seq.arrival, now));
    else
      metrics_->inter_token_latency(seconds_between(seq.last_token, now));
  }
  seq.drew_first = true;
  seq.last_token = now;
  seq.stream->push(std::move(event));
  return stop_token;
}

bool BatchScheduler::step() {
  take_submissions();
  drop_cancelled();
  // Resumed and newly admitted sequences join the running ones (kept in arrival order).
  std::int64_t budget = options_.max_batch_tokens;
  std::vector<Sequence*> batch;
  std::vector<std::int64_t> counts;
  auto youngest_other = [&](const Sequence* self) -> Sequence* {
    for (auto it = running_seqs_.rbegin(); it != running_seqs_.rend(); ++it) {
      if (it->get() != self && !(*it)->blocks.empty()) return it->get();
    }
    return nullptr;
  };
  // Running sequences first, oldest first; a sequence that cannot get blocks preempts the youngest.
  for (std::size_t i = 0; i < running_seqs_.size() && budget > 0; ++i) {
    Sequence& seq = *running_seqs_[i];
    if (static_cast<std::int64_t>(batch.size()) >= options_.max_sequences) break;
    const std::int64_t n = std::min(seq.pending(), budget);
    if (n <= 0) continue;
    const std::int64_t need = cache_.blocks_for(seq.cached + n) - static_cast<std::int64_t>(seq.blocks.size());
    while (need > pool_.free_blocks()) {
      Sequence* victim = youngest_other(&seq);
      // Never preempt a sequence already in this step's batch (it is older, so it came first).
      if (victim == nullptr || std::find(batch.begin(), batch.end(), victim) != batch.end()) break;
      preempt(*victim);
    }
    if (need > pool_.free_blocks()) {  // this sequence is the youngest holding blocks: it waits
      preempt(seq);
      continue;
    }
    pool_.allocate(std::max<std::int64_t>(need, 0), seq.blocks);
    batch.push_back(&seq);
    counts.push_back(n);
    budget -= n;
  }
  // Preempted sequences go back to the front of the queue, oldest first.
  for (auto it = running_seqs_.rbegin(); it != running_seqs_.rend(); ++it) {
    if ((*it)->blocks.empty() && (*it)->cached == 0) waiting_.push_front(std::move(*it));
  }
  std::erase_if(running_seqs_, [](const std::unique_ptr<Sequence>& s) { return s == nullptr; });
  // Admit waiting sequences in order while the budget, the sequence limit and the blocks allow.
  while (!waiting_.empty() && budget > 0 && static_cast<std::int64_t>(batch.size()) < options_.max_sequences) {
    Sequence& seq = *waiting_.front();
    const std::int64_t n = std::min(seq.pending(), budget);
    const std::int64_t need = cache_.blocks_for(n);
    if (need > pool_.free_blocks()) break;
    pool_.allocate(need, seq.blocks);
    batch.push_back(&seq);
    counts.push_back(n);
    budget -= n;
    running_seqs_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  queued_ = static_cast<std::int64_t>(waiting_.size()) + [&] {
    std::lock_guard lock(inbox_mutex_);
    return static_cast<std::int64_t>(inbox_.size());
  }();
  running_ = static_cast<std::int64_t>(running_seqs_.size());
  if (batch.empty()) {
    free_blocks_ = pool_.free_blocks();
    return false;
  }
  std::vector<nn::DecodeSequence> step;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const Sequence& seq = *batch[i];
    const auto begin = seq.tokens.begin() + seq.cached;
    step.push_back(nn::DecodeSequence{
        .tokens = std::vector<std::int32_t>(begin, begin + counts[i]), .start = seq.cached, .blocks = &seq.blocks});
  }
  if (metrics_ != nullptr) metrics_->step(options_.max_batch_tokens - budget, static_cast<std::int64_t>(batch.size()));
  std::vector<Sequence*> done;
  try {
    if (group_ != nullptr) group_->announce(step);  // the followers decode it alongside
    const Tensor logits = model_.decode(step, cache_);
    const std::int64_t V = model_.config().vocab_size;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Sequence& seq = *batch[i];
      seq.cached += counts[i];
      if (seq.pending() > 0) continue;  // a prompt chunk: more of it next step
      const bool stop_token = draw(seq, logits.data<float>() + static_cast<std::int64_t>(i) * V);
      const nn::GenerateArgs& args = seq.request.sampling;
      if (stop_token || seq.text.stopped()) {
        finish(seq, FinishReason::stop);
        done.push_back(&seq);
      } else if (seq.generated() >= args.max_new_tokens ||
                 static_cast<std::int64_t>(seq.tokens.size()) > model_.config().context_length) {
        finish(seq, FinishReason::length);  // the drawn token has no place in the context to be fed back
        done.push_back(&seq);
      }
    }
  } catch (const std::exception& e) {
    for (Sequence* seq : batch) {
      finish(*seq, FinishReason::error, e.what());
      done.push_back(seq);
    }
  }
  std::erase_if(running_seqs_, [&](const std::unique_ptr<Sequence>& s) {
    return std::find(done.begin(), done.end(), s.get()) != done.end();
  });
  running_ = static_cast<std::int64_t>(running_seqs_.size());
  free_blocks_ = pool_.free_blocks();
  return true;
}

void BatchScheduler::run() {
  while (!stopping_) {
    if (!step()) {
      std::unique_lock lock(inbox_mutex_);
      inbox_changed_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_.load() || !inbox_.empty(); });
    }
  }
  // Whatever is left is answered, not abandoned.
  take_submissions();
  for (auto& seq : waiting_) finish(*seq, FinishReason::cancelled, "the server stopped");
  for (auto& seq : running_seqs_) finish(*seq, FinishReason::cancelled, "the server stopped");
  waiting_.clear();
  running_seqs_.clear();
  if (group_ != nullptr) group_->announce_stop();
}

void BatchScheduler::stop() {
  stopping_ = true;
  inbox_changed_.notify_all();
}

void BatchScheduler::drain() {
  std::lock_guard lock(inbox_mutex_);
  draining_ = true;
}

bool BatchScheduler::idle() const { return queued_.load() == 0 && running_.load() == 0; }
std::int64_t BatchScheduler::queued() const { return queued_.load(); }
std::int64_t BatchScheduler::running() const { return running_.load(); }
std::int64_t BatchScheduler::free_blocks() const { return free_blocks_.load(); }

}  // namespace myriad::serve
