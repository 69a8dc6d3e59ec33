// myriad-serve: serve a trained model over HTTP with the OpenAI completions API (docs/serving.md).
//
//   myriad-serve --checkpoint DIR | --int8 FILE [--device cpu|cuda] [--tokenizer SPEC] [--host 127.0.0.1]
//                [--port 8000] [--model-name NAME] [--block-size 16] [--kv-blocks N]
//                [--max-batch-tokens 512] [--max-sequences 64] [--queue-limit 256]
//                [--http-threads 128] [--drain-seconds 30] [--threads N] [--auth KEYS.json]
//
// --int8 serves a weight-only INT8 export (`myriad convert export --format int8`) with its weights
// kept in INT8. One scheduler thread runs the model (continuous batching, serve/batch_scheduler.h); the HTTP
// threads answer requests (serve/completion_server.h). SIGTERM, SIGINT or SIGUSR1 drains: the server stops
// admitting (503, /ready 503), finishes what is queued and running within --drain-seconds,
// cancels what is left, and exits 0; a second signal stops at once. Bad flags, an unreadable
// checkpoint or a port in use exit 2 with the reason before anything is served.
//
// Under mpirun (N ranks) the model is split over the ranks as tensor parallelism (tp = N): rank 0
// serves HTTP and schedules; the other ranks decode each batch alongside it on their shards
// (serve/decode_group.h) and exit 0 when rank 0 stops. Signals are rank 0's (the others ignore
// them and follow its drain); an error on any rank before serving ends the whole job. OpenMPI's
// mpirun forwards SIGUSR1 to the ranks and leaves the job running, so `kill -USR1 <mpirun>` drains;
// SIGTERM to mpirun ends the job (its ranks are killed after OpenMPI's short kill timeout).
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "myriad/core/cli_numbers.h"
#include "myriad/core/error.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/serve/access_policy.h"
#include "myriad/data/audit_log.h"
#include "myriad/serve/batch_scheduler.h"
#include "myriad/serve/completion_server.h"
#include "myriad/serve/served_model.h"

namespace {

using namespace myriad;

struct Flags {
  std::map<std::string, std::string> values;
  std::string get(const std::string& name, const std::string& fallback) const {
    const auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
};

Flags parse_flags(int argc, char** argv) {
  static const char* const kKnown[] = {
      "--checkpoint",    "--device",    "--tokenizer",        "--host",          "--port",        "--model-name",
      "--block-size",    "--kv-blocks", "--max-batch-tokens", "--max-sequences", "--queue-limit", "--http-threads",
      "--drain-seconds", "--int8",      "--threads",          "--auth"};
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else {
      MYRIAD_CHECK(i + 1 < argc, arg << " needs a value");
      value = argv[++i];
    }
    bool known = false;
    for (const char* k : kKnown) known = known || arg == k;
    MYRIAD_CHECK(known, "unknown flag '" << arg << "' (myriad-serve --checkpoint DIR [--port N] ...; "
                                         << "docs/serving.md lists them)");
    flags.values[arg] = value;
  }
  MYRIAD_CHECK(flags.values.count("--checkpoint") + flags.values.count("--int8") == 1,
               "give one model: --checkpoint DIR or --int8 FILE");
  return flags;
}

// `world`: the ranks of an mpirun launch (null: this process alone).
int run_server(const Flags& flags, const sigset_t& signals, std::unique_ptr<distributed::Communicator> world) {
  const std::string device = flags.get("--device", "cpu"), tokenizer = flags.get("--tokenizer", "");
  MYRIAD_CHECK(flags.values.count("--int8") == 0 || world == nullptr,
               "--int8 serves a whole model in one process; under mpirun serve --checkpoint (split over the ranks)");
  serve::ServedModel served =
      flags.values.count("--int8") != 0
          ? serve::load_served_int8(flags.get("--int8", ""), device, tokenizer)
          : serve::load_served_checkpoint(flags.get("--checkpoint", ""), device, tokenizer, std::move(world));
  if (const std::int64_t threads = tools::parse_int("--threads", flags.get("--threads", "0")); threads > 0)
    omp_set_num_threads(static_cast<int>(threads));  // the model's OpenMP threads (0: OpenMP's default)
  std::unique_ptr<serve::DecodeGroup> group;
  if (distributed::Communicator* control = served.tp_control()) {
    group = std::make_unique<serve::DecodeGroup>(*control);
    if (!group->leader()) {
      std::cout << "myriad-serve: rank " << control->rank() << " of " << control->size()
                << ": decoding its tensor-parallel shard alongside rank 0" << std::endl;
      const std::int64_t steps = group->follow(*served.model);
      std::cout << "myriad-serve: rank " << control->rank() << ": stopped after " << steps << " steps" << std::endl;
      return 0;
    }
  }
  serve::SchedulerOptions options;
  options.block_size = tools::parse_int("--block-size", flags.get("--block-size", "16"));
  options.num_blocks = tools::parse_int("--kv-blocks", flags.get("--kv-blocks", "0"));
  options.max_batch_tokens = tools::parse_int("--max-batch-tokens", flags.get("--max-batch-tokens", "512"));
  options.max_sequences = tools::parse_int("--max-sequences", flags.get("--max-sequences", "64"));
  options.queue_limit = tools::parse_int("--queue-limit", flags.get("--queue-limit", "256"));
  serve::ServeMetrics metrics;
  serve::BatchScheduler scheduler(*served.model, served.tokenizer.get(), options, &metrics, group.get());
  serve::ServerOptions server_options;
  server_options.host = flags.get("--host", "127.0.0.1");
  server_options.port = static_cast<int>(tools::parse_int("--port", flags.get("--port", "8000")));
  server_options.http_threads =
      static_cast<int>(tools::parse_int("--http-threads", flags.get("--http-threads", "128")));
  server_options.model_name = flags.get("--model-name", served.name);
  const double drain_seconds = tools::parse_double("--drain-seconds", flags.get("--drain-seconds", "30"));
  std::unique_ptr<data::AuditLog> audit = data::open_audit_log_near(served.source);  // docs/security.md
  std::unique_ptr<serve::AccessPolicy> access;  // --auth: API keys and roles (docs/security.md)
  if (flags.values.count("--auth") != 0) access = std::make_unique<serve::AccessPolicy>(flags.get("--auth", ""));
  server_options.access = access.get();
  server_options.audit = audit.get();
  const bool from_int8 = flags.values.count("--int8") != 0;
  if (audit) {
    nlohmann::json details = {
        {"name", server_options.model_name}, {"device", device}, {"tp", served.tp()}, {"auth", access != nullptr}};
    if (from_int8) {
      details["source_sha256"] = data::file_sha256(served.source);
    } else {
      details["manifest_sha256"] = data::file_sha256(served.source + "/manifest.json");
    }
    audit->append("model.loaded", served.source, "ok", details);
  }
  // POST /admin/drain: the same drain as a signal (sigwait below takes it).
  server_options.drain = [] { kill(getpid(), SIGUSR1); };
  serve::CompletionServer server(scheduler, served.tokenizer.get(), metrics, server_options);
  const int port = server.bind();
  std::thread engine([&] { scheduler.run(); });
  std::thread http([&] { server.listen(); });
  std::cout << "myriad-serve: listening on http://" << server_options.host << ":" << port << " — model '"
            << server_options.model_name << "' from " << served.source << " on " << flags.get("--device", "cpu") << ", "
            << scheduler.options().num_blocks << " KV blocks of " << scheduler.options().block_size << " positions"
            << (served.tokenizer ? "" : ", no tokenizer (token-id prompts only)")
            << (group ? ", split over " + std::to_string(group->size()) + " ranks (tp)" : std::string())
            << (access ? ", API keys from " + access->path() + " (" + std::to_string(access->keys().size()) + ")"
                       : ", no --auth: every endpoint is open")
            << std::endl;
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::cout << "myriad-serve: signal " << signal_number << ": draining (" << scheduler.queued() << " queued, "
            << scheduler.running() << " running; deadline " << drain_seconds << " s)" << std::endl;
  if (audit) audit->append("server.drain_started", served.source, "ok", {{"signal", signal_number}});
  scheduler.drain();
  // A second signal ends the drain at once.
  std::atomic<bool> hurry{false};
  std::thread second([&] {
    int again = 0;
    sigwait(&signals, &again);
    hurry = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(drain_seconds);
  while (!scheduler.idle() && !hurry && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::int64_t left = scheduler.queued() + scheduler.running();
  scheduler.stop();
  engine.join();
  // Let the HTTP threads write the last events of what finished, then close.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  server.stop();
  http.join();
  pthread_kill(second.native_handle(), SIGTERM);
  second.join();
  std::cout << "myriad-serve: stopped (" << left << " requests cancelled at the deadline)" << std::endl;
  if (audit) audit->append("model.unloaded", served.source, "ok", {{"cancelled", left}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // OpenMP threads that spin between the model's many small parallel regions take the cores the
  // HTTP threads and co-located clients need: latencies of seconds at 25 requests/s on 2 cores
  // (bench_serve). The wait policy is read when the OpenMP runtime loads, so it is set by
  // starting this program again with it (once; an explicit OMP_WAIT_POLICY is kept).
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
  // SIGTERM / SIGINT / SIGUSR1 are taken by sigwait in main; every thread inherits the mask. SIGPIPE: a
  // client that went away is a failed write, not the end of the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Under mpirun: MPI first (the ranks serve together); `abort_channel` ends every rank when one
  // fails (the others may be waiting for it in a collective).
  std::unique_ptr<distributed::MpiRuntime> mpi;
  std::unique_ptr<distributed::Communicator> world, abort_channel;
  std::string failure;
  try {
    if (distributed::MpiRuntime::launched_by_mpi()) {
      mpi = std::make_unique<distributed::MpiRuntime>(&argc, &argv);
      if (mpi->world_size() > 1) {
        world = mpi->world();
        abort_channel = mpi->world();
      }
    }
    return run_server(parse_flags(argc, argv), signals, std::move(world));
  } catch (const myriad::Error& e) {
    failure = e.message();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  std::cerr << "myriad-serve: " << failure << std::endl;
  if (abort_channel) abort_channel->abort(2, "myriad-serve: " + failure);
  return 2;
}
