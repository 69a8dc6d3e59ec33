// ServeMetrics — the serving counters and latency histograms, rendered in the Prometheus text
// exposition format (version 0.0.4) for GET /metrics.
//
// Counters only grow; histograms have fixed upper bounds (seconds, or tokens for batch sizes) and
// cumulative buckets as Prometheus expects (`le`, +Inf, _sum, _count). Gauges (queue depth,
// running sequences, free KV blocks) are read from a callback at render time. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace myriad::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "name_bucket{le=...} n" lines, _sum and _count.
  void render(const std::string& name, std::string& out) const;
  std::int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::int64_t> counts_;  // per bound, not cumulative; last = above every bound
  double sum_ = 0.0;
  std::int64_t count_ = 0;
};

struct ServeGauges {
  std::int64_t queue_depth = 0, running = 0, kv_blocks_free = 0, kv_blocks_total = 0;
  bool ready = false;
};

class ServeMetrics {
 public:
  ServeMetrics();
  void request_finished(const std::string& status);  // "200", "400", "429", ...
  void tokens(std::int64_t prompt, std::int64_t generated);
  void step(std::int64_t batch_tokens, std::int64_t batch_sequences);
  void time_to_first_token(double seconds);
  void inter_token_latency(double seconds);
  void request_latency(double seconds);
  void preempted();
  void access_refused(int status);  // 401, 403 or 429 from the access policy
  std::string render(const ServeGauges& gauges) const;
  // Mean sequences per step since start (benchmarks).
  double mean_batch_sequences() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::int64_t> requests_;  // by status
  std::map<int, std::int64_t> refused_;           // access refusals by status
  std::int64_t prompt_tokens_ = 0, generated_tokens_ = 0, steps_ = 0, preemptions_ = 0;
  Histogram batch_tokens_, batch_sequences_, ttft_, itl_, latency_;
};

}  // namespace myriad::serve
