// ServeMetrics: counters, histograms and their Prometheus text (serve/serve_metrics.h).
#include "myriad/serve/serve_metrics.h"

#include <algorithm>
#include <sstream>

namespace myriad::serve {

namespace {

std::string number(double v) {
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

const std::vector<double> kLatencyBounds = {0.005, 0.01, 0.02, 0.05, 0.085, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60};
const std::vector<double> kBatchBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[static_cast<std::size_t>(at)];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

ServeMetrics::ServeMetrics()
    : batch_tokens_(kBatchBounds),
      batch_sequences_(kBatchBounds),
      ttft_(kLatencyBounds),
      itl_(kLatencyBounds),
      latency_(kLatencyBounds) {}

void ServeMetrics::request_finished(const std::string& status) {
  std::lock_guard lock(mutex_);
  ++requests_[status];
}

void ServeMetrics::access_refused(int status) {
  std::lock_guard lock(mutex_);
  ++refused_[status];
}

void ServeMetrics::tokens(std::int64_t prompt, std::int64_t generated) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void ServeMetrics::step(std::int64_t batch_tokens, std::int64_t batch_sequences) {
  std::lock_guard lock(mutex_);
  ++steps_;
  batch_tokens_.observe(static_cast<double>(batch_tokens));
  batch_sequences_.observe(static_cast<double>(batch_sequences));
}

void ServeMetrics::time_to_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void ServeMetrics::inter_token_latency(double seconds) {
  std::lock_guard lock(mutex_);
  itl_.observe(seconds);
}

void ServeMetrics::request_latency(double seconds) {
  std::lock_guard lock(mutex_);
  latency_.observe(seconds);
}

void ServeMetrics::preempted() {
  std::lock_guard lock(mutex_);
  ++preemptions_;
}

double ServeMetrics::mean_batch_sequences() const {
  std::lock_guard lock(mutex_);
  return batch_sequences_.count() == 0 ? 0.0 : batch_sequences_.sum() / static_cast<double>(batch_sequences_.count());
}

std::string ServeMetrics::render(const ServeGauges& g) const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "myriad_requests_total", "counter", "Completion requests answered, by HTTP status.");
  for (const auto& [status, n] : requests_)
    out += "myriad_requests_total{status=\"" + status + "\"} " + std::to_string(n) + "\n";
  header(out, "myriad_access_refused_total", "counter",
         "Requests refused by the access policy (--auth): 401 no or a bad key, 403 a role without the "
         "permission, 429 a key's rate limit or the verification budget.");
  for (const auto& [status, n] : refused_)
    out += "myriad_access_refused_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  header(out, "myriad_prompt_tokens_total", "counter", "Prompt tokens admitted.");
  out += "myriad_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  header(out, "myriad_generated_tokens_total", "counter", "Tokens generated.");
  out += "myriad_generated_tokens_total " + std::to_string(generated_tokens_) + "\n";
  header(out, "myriad_steps_total", "counter", "Batched model steps run.");
  out += "myriad_steps_total " + std::to_string(steps_) + "\n";
  header(out, "myriad_preemptions_total", "counter", "Sequences preempted for KV blocks (recomputed on resume).");
  out += "myriad_preemptions_total " + std::to_string(preemptions_) + "\n";
  header(out, "myriad_queue_depth", "gauge", "Requests waiting for admission.");
  out += "myriad_queue_depth " + std::to_string(g.queue_depth) + "\n";
  header(out, "myriad_running_sequences", "gauge", "Requests being generated.");
  out += "myriad_running_sequences " + std::to_string(g.running) + "\n";
  header(out, "myriad_kv_blocks_free", "gauge", "Free KV-cache blocks.");
  out += "myriad_kv_blocks_free " + std::to_string(g.kv_blocks_free) + "\n";
  header(out, "myriad_kv_blocks_total", "gauge", "KV-cache blocks.");
  out += "myriad_kv_blocks_total " + std::to_string(g.kv_blocks_total) + "\n";
  header(out, "myriad_ready", "gauge", "1 when the model is loaded and the queue is below its limit.");
  out += std::string("myriad_ready ") + (g.ready ? "1" : "0") + "\n";
  header(out, "myriad_batch_tokens", "histogram", "Token rows per model step.");
  batch_tokens_.render("myriad_batch_tokens", out);
  header(out, "myriad_batch_sequences", "histogram", "Sequences per model step.");
  batch_sequences_.render("myriad_batch_sequences", out);
  header(out, "myriad_time_to_first_token_seconds", "histogram", "From admission to the first token.");
  ttft_.render("myriad_time_to_first_token_seconds", out);
  header(out, "myriad_inter_token_latency_seconds", "histogram", "Between consecutive tokens of a request.");
  itl_.render("myriad_inter_token_latency_seconds", out);
  header(out, "myriad_request_latency_seconds", "histogram", "From admission to the last token.");
  latency_.render("myriad_request_latency_seconds", out);
  return out;
}

}  // namespace myriad::serve
