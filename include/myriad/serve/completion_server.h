// CompletionServer — the HTTP front of `myriad serve` (cpp-httplib): the OpenAI completions
// endpoint over a BatchScheduler, model listing, health, readiness and Prometheus metrics.
//
//   POST /v1/completions  completion_api.h's body; 200 with the completion (or server-sent events
//                         with "stream": true); 400 naming the field; 404 for another model id;
//                         429 with Retry-After when the queue is full; 503 with Retry-After while
//                         draining; 500 when the model fails mid-request (non-streamed).
//   GET  /v1/models       the one served model.      GET /health   200 while the process serves.
//   GET  /ready           200 when the model is loaded, not draining and the queue is below its
//                         limit, else 503 (load balancers and Kubernetes take it out of rotation).
//   GET  /metrics         serve_metrics.h's text.
//   POST /admin/drain     starts the drain (ServerOptions::drain), 202; GET /admin/keys the key ids,
//                         roles and rate limits; POST /admin/keys/reload re-reads the key file.
//                         Only with an access policy (403 without one: nobody may drain an open server).
// With ServerOptions::access every request first passes the policy (serve/access_policy.h): 401
// with WWW-Authenticate, 403, or 429 with Retry-After, as OpenAI-style error bodies.
// A streaming client that goes away is noticed at the next write (events, or a keep-alive comment
// every 0.5 s) and its request cancelled, freeing its KV blocks; a non-streamed request waits up
// to 1 s for its answer with the status still open, then streams its JSON body chunked with
// whitespace heartbeats (valid JSON) so that a departed client is noticed the same way. Handler
// exceptions become 500 JSON errors; the server goes on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "myriad/serve/access_policy.h"
#include "myriad/data/audit_log.h"
#include "myriad/serve/batch_scheduler.h"
#include "myriad/serve/serve_metrics.h"

namespace httplib {
class Server;
struct Request;
}  // namespace httplib

namespace myriad::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0 = any free port (bind() returns it)
  int http_threads = 128;  // connections served at once (a streaming request holds one)
  std::string model_name;  // the model id the API reports
  std::size_t max_body_bytes = 1 << 20;
  AccessPolicy* access = nullptr;  // not owned; null = every endpoint open, /admin refused
  std::function<void()> drain;     // what POST /admin/drain starts (the program's drain)
  // Not owned; null = no records. The server appends access.denied (401/403; at most 10 a second,
  // the rest counted in the next one's details.suppressed), admin.drain, admin.keys_listed and
  // admin.keys_reloaded, each with the caller's key id.
  data::AuditLog* audit = nullptr;
};

class CompletionServer {
 public:
  CompletionServer(BatchScheduler& scheduler, const data::BpeTokenizer* tokenizer, ServeMetrics& metrics,
                   ServerOptions options);
  ~CompletionServer();
  // Binds the listening socket (throws naming host:port when it cannot); returns the port.
  int bind();
  // Serves until stop(); call bind() first.
  void listen();
  void stop();

 private:
  void routes();
  void admin_routes();
  // An audit record of an admin call (no-op without a log); `result` ok or error.
  void audit_call(const httplib::Request& req, const std::string& action, const std::string& result,
                  const std::string& detail = {});
  void audit_refusal(const httplib::Request& req, const AccessDecision& decision);
  BatchScheduler& scheduler_;
  const data::BpeTokenizer* tokenizer_;
  ServeMetrics& metrics_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::chrono::system_clock::time_point started_;
  std::atomic<std::uint64_t> requests_{0};  // completion ids
  std::mutex audit_mutex_;                  // the refusal records' budget
  double refusal_budget_ = 20;
  std::chrono::steady_clock::time_point refusal_refill_ = std::chrono::steady_clock::now();
  std::int64_t suppressed_ = 0;
};

}  // namespace myriad::serve
