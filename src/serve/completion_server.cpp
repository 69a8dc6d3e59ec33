// CompletionServer: routes and request handling (serve/completion_server.h).
#include "myriad/serve/completion_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "myriad/core/error.h"
#include "myriad/serve/completion_api.h"

namespace myriad::serve {

using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(500);
constexpr auto kSynchronousWait = std::chrono::seconds(1);

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& param = {}) {
  res.status = status;
  res.set_content(render_error(message, type, param), "application/json");
}

std::string request_id(std::uint64_t n) {
  return "cmpl-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) + "-" +
         std::to_string(n);
}

}  // namespace

CompletionServer::CompletionServer(BatchScheduler& scheduler, const data::BpeTokenizer* tokenizer,
                                   ServeMetrics& metrics, ServerOptions options)
    : scheduler_(scheduler),
      tokenizer_(tokenizer),
      metrics_(metrics),
      options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      started_(std::chrono::system_clock::now()) {
  const int threads = options_.http_threads;
  MYRIAD_CHECK(threads >= 1, "--http-threads: " << threads << " must be >= 1");
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_timeout(5);
  http_->set_tcp_nodelay(true);
  routes();
}

CompletionServer::~CompletionServer() = default;

int CompletionServer::bind() {
  if (options_.port == 0) {
    const int port = http_->bind_to_any_port(options_.host);
    MYRIAD_CHECK(port > 0, "--host/--port: cannot listen on " << options_.host << " (any port)");
    options_.port = port;
  } else {
    MYRIAD_CHECK(http_->bind_to_port(options_.host, options_.port),
                 "--host/--port: cannot listen on " << options_.host << ":" << options_.port
                                                    << " (in use, or not an address of this machine)");
  }
  return options_.port;
}

void CompletionServer::listen() { http_->listen_after_bind(); }

void CompletionServer::stop() { http_->stop(); }

void CompletionServer::routes() {
  httplib::Server& http = *http_;
  if (options_.access != nullptr) {  // every request passes the access policy first
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const AccessDecision d = options_.access->decide(req.method, req.path, req.get_header_value("Authorization"));
      if (d.status == 200) return httplib::Server::HandlerResponse::Unhandled;
      metrics_.access_refused(d.status);
      if (d.status != 429) audit_refusal(req, d);
      if (d.status == 401) res.set_header("WWW-Authenticate", "Bearer realm=\"myriad-serve\"");
      if (d.status == 429)
        res.set_header("Retry-After", std::to_string(std::max(1, static_cast<int>(std::ceil(d.retry_after)))));
      send_error(res, d.status, d.message,
                 d.status == 401   ? "authentication_error"
                 : d.status == 403 ? "permission_error"
                                   : "rate_limit_error");
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  admin_routes();
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = !scheduler_.draining() && scheduler_.queued() < scheduler_.options().queue_limit;
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "{\"status\":\"ready\"}"
                          : (scheduler_.draining() ? "{\"status\":\"draining\"}" : "{\"status\":\"queue full\"}"),
                    "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(started_.time_since_epoch()).count();
    res.set_content("{\"object\":\"list\",\"data\":[{\"id\":\"" + options_.model_name +
                        "\",\"object\":\"model\",\"created\":" + std::to_string(created) +
                        ",\"owned_by\":\"myriad\"}]}",
                    "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    ServeGauges g;
    g.queue_depth = scheduler_.queued();
    g.running = scheduler_.running();
    g.kv_blocks_free = scheduler_.free_blocks();
    g.kv_blocks_total = scheduler_.options().num_blocks;
    g.ready = !scheduler_.draining() && g.queue_depth < scheduler_.options().queue_limit;
    res.set_content(metrics_.render(g), "text/plain; version=0.0.4");
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    ParsedCompletion parsed;
    try {
      parsed = parse_completion(req.body, tokenizer_);
    } catch (const Error& e) {
      metrics_.request_finished("400");
      return send_error(res, 400, e.message(), "invalid_request_error", error_field(e.message()));
    }
    if (!parsed.model.empty() && parsed.model != options_.model_name) {
      metrics_.request_finished("404");
      return send_error(res, 404,
                        "model: '" + excerpt(parsed.model, 100) + "' is not served here; this server serves '" +
                            options_.model_name + "'",
                        "invalid_request_error", "model");
    }
    auto stream = std::make_shared<RequestStream>();
    const bool with_logprobs = parsed.request.logprobs >= 0;
    BatchScheduler::Admission admission;
    try {
      admission = scheduler_.submit(std::move(parsed.request), stream);
    } catch (const Error& e) {
      metrics_.request_finished("400");
      return send_error(res, 400, e.message(), "invalid_request_error", error_field(e.message()));
    }
    if (admission != BatchScheduler::Admission::accepted) {
      const bool full = admission == BatchScheduler::Admission::queue_full;
      metrics_.request_finished(full ? "429" : "503");
      res.set_header("Retry-After", "1");
      return send_error(res, full ? 429 : 503,
                        full ? "the request queue is full; retry later" : "the server is draining; retry elsewhere",
                        full ? "rate_limit_error" : "service_unavailable");
    }
    const CompletionIdentity who{
        request_id(requests_++),
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
        options_.model_name};
    const data::BpeTokenizer* tokenizer = tokenizer_;
    ServeMetrics* metrics = &metrics_;
    if (parsed.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [stream, who, with_logprobs, tokenizer, metrics](std::size_t, httplib::DataSink& sink) {
            std::vector<TokenEvent> events;
            const bool done = stream->wait_for(kPoll, events);
            std::string out;
            if (!events.empty() || done) {
              const FinishReason reason = done ? stream->reason() : FinishReason::none;
              if (reason == FinishReason::error) {
                out = "data: " +
                      render_error(internal_error_message(who.id, stream->error(), stderr), "server_error", "") +
                      "\n\n";
              } else {
                out = render_chunk(who, events, reason, with_logprobs, tokenizer);
              }
            } else {
              out = ": keep-alive\n\n";  // an SSE comment: notices a departed client
            }
            if (!sink.write(out.data(), out.size())) {
              stream->cancel();
              return false;
            }
            if (done) {
              const std::string last = "data: [DONE]\n\n";
              sink.write(last.data(), last.size());
              sink.done();
              metrics->request_finished(stream->reason() == FinishReason::error ? "500" : "200");
            }
            return true;
          },
          [stream](bool success) {
            if (!success) stream->cancel();
          });
      return;
    }
    // Non-streamed: wait with the status still open, then keep the connection probed.
    std::vector<TokenEvent> events;
    const Clock::time_point until = Clock::now() + kSynchronousWait;
    bool done = false;
    while (!done && Clock::now() < until) done = stream->wait_for(kPoll / 5, events);
    if (done) {
      if (stream->reason() == FinishReason::error) {
        metrics_.request_finished("500");
        return send_error(res, 500, internal_error_message(who.id, stream->error(), stderr), "server_error");
      }
      metrics_.request_finished("200");
      res.set_content(
          render_completion(who, events, stream->reason(), stream->prompt_tokens(), with_logprobs, tokenizer_),
          "application/json");
      return;
    }
    auto gathered = std::make_shared<std::vector<TokenEvent>>(std::move(events));
    res.set_chunked_content_provider(
        "application/json",
        [stream, gathered, who, with_logprobs, tokenizer, metrics](std::size_t, httplib::DataSink& sink) {
          const bool finished = stream->wait_for(kPoll, *gathered);
          if (!finished) {
            if (!sink.write(" ", 1)) {  // whitespace before a JSON value is still valid JSON
              stream->cancel();
              return false;
            }
            return true;
          }
          const FinishReason reason = stream->reason();
          const std::string body =
              reason == FinishReason::error
                  ? render_error(internal_error_message(who.id, stream->error(), stderr), "server_error", "")
                  : render_completion(who, *gathered, reason, stream->prompt_tokens(), with_logprobs, tokenizer);
          sink.write(body.data(), body.size());
          sink.done();
          metrics->request_finished(reason == FinishReason::error ? "500" : "200");
          return true;
        },
        [stream](bool success) {
          if (!success) stream->cancel();
        });
  });
  http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "an unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    metrics_.request_finished("500");
    send_error(res, 500, internal_error_message(request_id(requests_++), what, stderr), "server_error");
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 404 ? "no route " + req.method + " " + excerpt(req.path, 100)
                                                  : "HTTP " + std::to_string(res.status);
    res.set_content(render_error(message, "invalid_request_error", ""), "application/json");
  });
}

void CompletionServer::admin_routes() {
  httplib::Server& http = *http_;
  auto guarded = [this](auto handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      if (options_.access == nullptr) {
        send_error(res, 403, "the /admin endpoints need an access policy (myriad-serve --auth FILE)",
                   "permission_error");
        return;
      }
      handler(req, res);
    };
  };
  http.Post("/admin/drain", guarded([this](const httplib::Request& req, httplib::Response& res) {
              if (!options_.drain) {
                send_error(res, 501, "this server has no drain", "server_error");
                return;
              }
              audit_call(req, "admin.drain", "ok");
              options_.drain();
              res.status = 202;
              res.set_content("{\"status\":\"draining\"}", "application/json");
            }));
  http.Get("/admin/keys", guarded([this](const httplib::Request& req, httplib::Response& res) {
             audit_call(req, "admin.keys_listed", "ok");
             std::string body = "{\"object\":\"list\",\"data\":[";
             bool first = true;
             for (const ApiKeyInfo& key : options_.access->keys()) {
               body += std::string(first ? "" : ",") + "{\"id\":\"" + key.id + "\",\"roles\":[";
               for (std::size_t i = 0; i < key.roles.size(); ++i)
                 body += std::string(i ? "," : "") + "\"" + key.roles[i] + "\"";
               body += "],\"rate_limit_per_second\":" + std::to_string(key.per_second) + "}";
               first = false;
             }
             res.set_content(body + "]}", "application/json");
           }));
  http.Post("/admin/keys/reload", guarded([this](const httplib::Request& req, httplib::Response& res) {
              try {
                options_.access->reload();
              } catch (const Error& e) {
                audit_call(req, "admin.keys_reloaded", "error", e.message());
                throw;  // the exception handler's 500, naming the file
              }
              audit_call(req, "admin.keys_reloaded", "ok");
              res.set_content(
                  "{\"status\":\"reloaded\",\"keys\":" + std::to_string(options_.access->keys().size()) + "}",
                  "application/json");
            }));
}

void CompletionServer::audit_call(const httplib::Request& req, const std::string& action, const std::string& result,
                                  const std::string& detail) {
  if (options_.audit == nullptr) return;
  nlohmann::json details = {{"method", req.method}, {"path", req.path}, {"remote_addr", req.remote_addr}};
  if (!detail.empty()) details["error"] = detail;
  const std::string key_id =
      options_.access ? options_.access->verified_key_id(req.get_header_value("Authorization")) : "";
  options_.audit->append(action, options_.model_name, result, details, key_id);
}

void CompletionServer::audit_refusal(const httplib::Request& req, const AccessDecision& decision) {
  if (options_.audit == nullptr) return;
  std::int64_t suppressed = 0;
  {
    std::lock_guard lock(audit_mutex_);
    const auto now = std::chrono::steady_clock::now();
    refusal_budget_ =
        std::min(20.0, refusal_budget_ + 10.0 * std::chrono::duration<double>(now - refusal_refill_).count());
    refusal_refill_ = now;
    if (refusal_budget_ < 1.0) {
      ++suppressed_;
      return;
    }
    refusal_budget_ -= 1.0;
    suppressed = std::exchange(suppressed_, 0);
  }
  nlohmann::json details = {{"status", decision.status},      {"method", req.method},
                            {"path", excerpt(req.path, 200)}, {"remote_addr", req.remote_addr},
                            {"reason", decision.message},     {"suppressed", suppressed}};
  options_.audit->append("access.denied", options_.model_name, "denied", details, decision.key_id);
}

}  // namespace myriad::serve
