// BatchScheduler — continuous (iteration-level) batching of many requests over one model and a
// paged KV cache: the serving engine.
//
// Requests enter a bounded waiting queue (submit() refuses when it is full or the scheduler is
// draining). Each step() builds one batch for GptModel::decode: every running sequence's pending
// tokens (one drawn token, or the next chunk of its prompt), oldest first, then waiting requests
// admitted in arrival order while the step's token budget (max_batch_tokens), the sequence limit
// and the free KV blocks allow. A running sequence that needs a block when none is free takes one
// from the youngest running sequence, which is preempted: its blocks are freed and it goes back to
// the front of the queue with its prompt and the tokens drawn so far, recomputed when it resumes.
// After the step each sequence whose pending tokens are all in the cache draws its next token with
// its own seed at that position (nn/sampling.h), so its tokens do not depend on the batch or on
// preemption; it finishes on an end-of-text / stop token or stop string ("stop"), at max_tokens or
// a full context ("length"), or when its reader cancels (its blocks are freed at the next step).
// A step whose model call throws fails the requests of that batch (finish error), not the server.
//
// Threads: submit(), drain(), stop() and the counters may be called from any thread; step() and
// run() from the one scheduler thread, which alone touches the model and the cache.
// Tensor-parallel serving: with a DecodeGroup (its leader), the scheduler announces the cache's
// shape when it is made, each batch before its decode, and the end when run() returns, so the
// group's followers decode alongside (serve/decode_group.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "myriad/data/bpe_tokenizer.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/paged_kv_cache.h"
#include "myriad/serve/decode_group.h"
#include "myriad/serve/incremental_text.h"
#include "myriad/serve/request_stream.h"
#include "myriad/serve/serve_metrics.h"

namespace myriad::serve {

struct SchedulerOptions {
  std::int64_t block_size = 16;         // positions per KV block
  std::int64_t num_blocks = 0;          // KV blocks; 0 = max_sequences full contexts
  std::int64_t max_batch_tokens = 512;  // token rows per step (prompt chunks and drawn tokens)
  std::int64_t max_sequences = 64;      // sequences per step
  std::int64_t queue_limit = 256;       // waiting requests; submit() refuses beyond
};

class BatchScheduler {
 public:
  // `model` dense with every layer (split over `group`'s ranks under tp); `tokenizer` may be null
  // (token ids only: no stop strings, no text). Not owned; all outlive the scheduler.
  BatchScheduler(const nn::GptModel& model, const data::BpeTokenizer* tokenizer, SchedulerOptions options,
                 ServeMetrics* metrics = nullptr, DecodeGroup* group = nullptr);
  ~BatchScheduler();

  enum class Admission { accepted, queue_full, draining };
  // Validates against the model (prompt within the context, ids in the vocabulary: throws naming
  // the field) and queues the request; its stream reports the tokens. With a tokenizer, ids above
  // its vocabulary (a padded model vocabulary) are never drawn.
  Admission submit(CompletionRequest request, std::shared_ptr<RequestStream> stream);

  // One iteration: drops cancelled requests, builds and runs a batch, draws tokens. Returns
  // whether anything ran.
  bool step();
  // Steps until stop(); waits while there is nothing to do.
  void run();
  void stop();
  // Stop admitting (submit() answers draining); in-flight and queued requests still finish.
  void drain();
  bool draining() const { return draining_.load(); }
  bool idle() const;  // nothing queued or running

  std::int64_t queued() const;
  std::int64_t running() const;
  std::int64_t free_blocks() const;
  const SchedulerOptions& options() const { return options_; }
  std::int64_t preemptions() const { return preemptions_.load(); }

 private:
  struct Sequence;
  void take_submissions();
  void drop_cancelled();
  void preempt(Sequence& victim);
  void finish(Sequence& seq, FinishReason reason, const std::string& error = {});
  // Draws the sequence's next token and reports it; true when it is a stop token.
  bool draw(Sequence& seq, const float* logits);

  const nn::GptModel& model_;
  const data::BpeTokenizer* tokenizer_;
  SchedulerOptions options_;
  ServeMetrics* metrics_;
  DecodeGroup* group_;
  nn::PagedKvCache cache_;
  nn::KvBlockPool pool_;
  std::uint64_t next_id_ = 0;

  mutable std::mutex inbox_mutex_;
  std::condition_variable inbox_changed_;
  std::deque<std::unique_ptr<Sequence>> inbox_;  // submitted, not yet seen by the scheduler thread
  std::atomic<std::int64_t> queued_{0}, running_{0}, free_blocks_{0}, preemptions_{0};
  std::atomic<bool> draining_{false}, stopping_{false};

  // Scheduler thread only.
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_seqs_;  // in arrival order
};

}  // namespace myriad::serve
