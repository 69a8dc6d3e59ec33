// Python bindings of the training engine and the tokenizer (the run config is bound in
// config.cpp).
//
// Engine: step / evaluate / save / load / generate; parameters and gradients as NumPy views
// (no copies: the arrays share the engine's flat buffers and keep them alive). The engine runs
// with the GIL released so other Python threads (progress bars) keep running.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <optional>

#include "bindings.h"
#include "myriad/config/run_config.h"
#include "myriad/core/logging.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/tokenize_corpus.h"
#include "myriad/train/checkpoint/checkpoint_folder.h"
#include "myriad/ops/placement.h"
#include "myriad/train/engine.h"
#include "myriad/train/model_parallelism.h"
#include "myriad/train/checkpoint/interchange.h"
#include "myriad/train/checkpoint/safetensors.h"
#include "myriad/nn/generate.h"
#include "myriad/optim/lr_schedule.h"

namespace py = pybind11;

namespace myriad::python {

namespace {

// The step's metrics as a dict with exactly the metrics.jsonl schema (docs/metrics.md).
py::object metrics_dict(const train::StepMetrics& m) {
  return py::module_::import("json").attr("loads")(train::step_metrics_json(m));
}

// A (rows, T) integer array as an int32 host tensor (a copy); `what` names it in errors.
Tensor token_tensor(const py::object& array, const char* what) {
  py::array given = py::array::ensure(array);
  MYRIAD_CHECK(given && (given.dtype().kind() == 'i' || given.dtype().kind() == 'u'),
               "Engine: " << what << " must be an integer array (rows, T)");
  MYRIAD_CHECK(given.ndim() == 2, "Engine: " << what << " must be 2-D (rows, T), got " << given.ndim() << " dims");
  auto ints = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(given);
  Tensor t = Tensor::empty({given.shape(0), given.shape(1)}, DType::i32);
  auto* out = t.data<std::int32_t>();
  const std::int64_t* in = ints.data();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    MYRIAD_CHECK(in[i] >= INT32_MIN && in[i] <= INT32_MAX,
                 "Engine: " << what << " value " << in[i] << " is not an int32");
    out[i] = static_cast<std::int32_t>(in[i]);
  }
  return t;
}

// A host NumPy array of a tensor: a view of host memory, a copy of device memory.
py::object host_array(const Tensor& t, const char* what) {
  return py::cast(ops::placement_of(t, what).to_host(t)).attr("numpy")();
}

nn::GenerateArgs generate_args(std::int64_t max_new_tokens, float temperature, std::int64_t top_k, std::uint64_t seed,
                               const std::vector<std::int32_t>& stop_tokens, bool truncate) {
  nn::GenerateArgs args;
  args.max_new_tokens = max_new_tokens;
  args.temperature = temperature;
  args.top_k = top_k;
  args.seed = seed;
  args.stop_tokens = stop_tokens;
  args.truncate_prompt = truncate;
  return args;
}

}  // namespace

void bind_train(py::module_& m) {
  py::class_<train::Engine>(m, "Engine", "One rank's model, optimizer, data and step loop")
      .def(py::init(
               [](const RunConfig& config, int rank, const std::string& log_file, distributed::ProcessGroups* groups) {
                 py::gil_scoped_release release;  // construction is collective over the groups
                 return std::make_unique<train::Engine>(config, make_rank_logger(rank, config.logging.level, log_file),
                                                        groups);
               }),
           py::arg("config"), py::arg("rank") = 0, py::arg("log_file") = "", py::arg("groups") = nullptr,
           py::keep_alive<1, 5>())
      .def(
          "step",
          [](train::Engine& e) {
            train::StepMetrics metrics;
            {
              py::gil_scoped_release release;
              metrics = e.step();
            }
            return metrics_dict(metrics);
          },
          "one optimizer step over the global batch; returns its metrics")
      .def(
          "evaluate",
          [](train::Engine& e, const py::object& tokens, const py::object& targets) {
            if (tokens.is_none()) {
              MYRIAD_CHECK(targets.is_none(), "Engine.evaluate: targets without tokens");
              py::gil_scoped_release release;
              return e.evaluate();
            }
            Tensor ids = token_tensor(tokens, "tokens"), t;
            if (targets.is_none()) {  // next-token prediction over the rows: inputs [:-1], targets [1:]
              MYRIAD_CHECK(ids.size(1) >= 2,
                           "Engine.evaluate: tokens without targets need at least 2 columns "
                           "(inputs are [:, :-1], targets [:, 1:]), got "
                               << shape_string(ids.shape()));
              t = ids.slice(1, 1, ids.size(1)).contiguous();
              ids = ids.slice(1, 0, ids.size(1) - 1).contiguous();
            } else {
              t = token_tensor(targets, "targets");
            }
            py::gil_scoped_release release;
            return e.evaluate_on(ids, t);
          },
          py::arg("tokens") = py::none(), py::arg("targets") = py::none(),
          "mean loss: over training.eval_batches of the validation split (no arguments); over the caller's rows "
          "(tokens (rows, T + 1): next-token prediction; or tokens and targets (rows, T)); collective, each rank "
          "passes its replica's rows")
      .def("save", &train::Engine::save, py::arg("background") = false, py::call_guard<py::gil_scoped_release>(),
           "collective checkpoint at the current step; background: write a snapshot in a thread (rank 0)")
      .def("wait_for_save", &train::Engine::wait_for_save, py::call_guard<py::gil_scoped_release>(),
           "wait for a background checkpoint write; returns its path and rethrows its error")
      .def("load", &train::Engine::load, py::arg("checkpoint_dir"), py::call_guard<py::gil_scoped_release>())
      .def("load_int8", &train::Engine::load_int8, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
           "serve a weight-only INT8 export (myriad-convert export --format int8): evaluate, forward (logits) and "
           "generate compute from its int8 weights; training is refused afterwards")
      .def_property_readonly("serves_int8", &train::Engine::serves_int8)
      .def(
          "generate",
          [](train::Engine& e, const py::object& prompt, std::int64_t max_new_tokens, float temperature,
             std::int64_t top_k, std::uint64_t seed, const std::vector<std::int32_t>& stop_tokens, bool truncate,
             bool details) -> py::object {
            if (py::isinstance<py::str>(prompt) && stop_tokens.empty() && !truncate && !details) {
              std::string text;
              {
                py::gil_scoped_release release;
                text = e.generate(prompt.cast<std::string>(), max_new_tokens, temperature, top_k, seed);
              }
              // Sampled byte-level tokens need not form valid UTF-8 (a multi-byte character cut
              // in the middle): decode with replacement, as BpeTokenizer.decode does.
              return py::bytes(text).attr("decode")("utf-8", "replace");
            }
            std::vector<std::int32_t> ids;
            if (py::isinstance<py::str>(prompt)) {  // text: the tokenizer's ids after an end-of-text token
              MYRIAD_CHECK(e.tokenizer() != nullptr, "generate: this run has no tokenizer; pass token ids");
              ids = e.tokenizer()->encode(prompt.cast<std::string>());
              ids.insert(ids.begin(), e.tokenizer()->eot_id());
            } else {
              ids = prompt.cast<std::vector<std::int32_t>>();
            }
            const nn::GenerateArgs args =
                generate_args(max_new_tokens, temperature, top_k, seed, stop_tokens, truncate);
            nn::Generation g;
            {
              py::gil_scoped_release release;
              g = e.generate_ids(ids, args);
            }
            py::dict d;
            d["ids"] = py::array_t<std::int32_t>(static_cast<py::ssize_t>(g.ids.size()), g.ids.data());
            d["logprobs"] = py::array_t<float>(static_cast<py::ssize_t>(g.logprobs.size()), g.logprobs.data());
            d["finish_reason"] = g.finish_reason;
            d["prompt_tokens"] = g.prompt_used;
            d["prompt_tokens_dropped"] = static_cast<std::int64_t>(ids.size()) - g.prompt_used;
            if (e.tokenizer() != nullptr) {
              d["text"] = py::bytes(e.tokenizer()->decode(g.ids)).attr("decode")("utf-8", "replace");
            }
            return std::move(d);
          },
          py::arg("prompt"), py::arg("max_new_tokens"), py::arg("temperature") = 0.8f, py::arg("top_k") = 40,
          py::arg("seed") = 0, py::arg("stop_tokens") = std::vector<std::int32_t>{}, py::arg("truncate") = false,
          py::arg("details") = false,
          "prompt (text, or a list of token ids) -> with a text prompt and no other option, the prompt followed "
          "by the sampled continuation (invalid UTF-8 shown as U+FFFD); otherwise a dict: ids, logprobs (log p "
          "of each id under the model), finish_reason (stop_token / max_new_tokens / context_length), "
          "prompt_tokens, prompt_tokens_dropped (truncate=True keeps a too long prompt's end), text (with a "
          "tokenizer). Collective.")
      .def(
          "forward",
          [](train::Engine& e, const py::object& tokens, const py::object& targets) -> py::object {
            const Tensor ids = token_tensor(tokens, "tokens");
            if (targets.is_none()) {
              Tensor logits;
              {
                py::gil_scoped_release release;
                logits = e.forward_logits(ids);
              }
              return py::cast(logits).attr("numpy")();
            }
            const Tensor t = token_tensor(targets, "targets");
            double loss = 0.0;
            {
              py::gil_scoped_release release;
              loss = e.forward(ids, t);
            }
            return py::float_(loss);
          },
          py::arg("tokens"), py::arg("targets") = py::none(),
          "tokens (rows, T) -> logits (rows, T, vocab) as NumPy; with targets: this rank's rows of the global "
          "batch (rows a multiple of training.micro_batch, T = training.seq_len) -> the mean loss over the "
          "global batch, kept for backward(). Collective")
      .def("backward", &train::Engine::backward, py::arg("scale") = 1.0, py::arg("sync") = true,
           py::call_guard<py::gil_scoped_release>(),
           "accumulate the gradients of scale x the last forward's loss; sync=False defers the data-parallel "
           "reduction to a later backward. Collective")
      .def("zero_grad", &train::Engine::zero_grad, py::call_guard<py::gil_scoped_release>())
      .def(
          "optimizer_step",
          [](train::Engine& e, std::optional<double> lr) {
            train::StepMetrics metrics;
            {
              py::gil_scoped_release release;
              metrics = e.optimizer_step(lr);
            }
            return metrics_dict(metrics);
          },
          py::arg("lr") = py::none(),
          "the update from the reduced gradients at lr (None = the schedule's); returns the step's metrics")
      .def(
          "train_batch",
          [](train::Engine& e, std::optional<std::int64_t> step) {
            std::pair<Tensor, Tensor> batch;
            {
              py::gil_scoped_release release;
              batch = e.train_batch(step.value_or(e.step_count()));
            }
            return py::make_tuple(py::cast(batch.first).attr("numpy")(), py::cast(batch.second).attr("numpy")());
          },
          py::arg("step") = py::none(),
          "(tokens, targets): the rows of a step's global batch this rank trains on (default: the next step's)")
      .def_property_readonly(
          "lr", [](const train::Engine& e) { return e.schedule().lr_at(e.step_count()); },
          "the schedule's learning rate for the next step")
      .def_property_readonly("schedule",
                             [](const train::Engine& e) {
                               const optim::LrSchedule& s = e.schedule();
                               py::dict d;
                               d["lr"] = s.lr;
                               d["min_lr"] = s.min_lr;
                               d["warmup_steps"] = s.warmup_steps;
                               d["total_steps"] = s.total_steps;
                               d["kind"] = std::string(choice_name(s.kind));
                               return d;
                             })
      .def(
          "set_schedule",
          [](train::Engine& e, std::optional<double> lr, std::optional<double> min_lr,
             std::optional<std::int64_t> warmup_steps, std::optional<std::int64_t> total_steps,
             std::optional<std::string> kind) {
            optim::LrSchedule s = e.schedule();
            if (lr) s.lr = static_cast<float>(*lr);
            if (min_lr) s.min_lr = static_cast<float>(*min_lr);
            if (warmup_steps) s.warmup_steps = *warmup_steps;
            if (total_steps) s.total_steps = *total_steps;
            if (kind) s.kind = require_choice<LrScheduleKind>(*kind, "schedule kind");
            e.set_schedule(s);
          },
          py::arg("lr") = py::none(), py::arg("min_lr") = py::none(), py::arg("warmup_steps") = py::none(),
          py::arg("total_steps") = py::none(), py::arg("kind") = py::none(),
          "change the learning-rate schedule for the following steps (keys not given keep their values)")
      .def(
          "optimizer_state",
          [](train::Engine& e) {
            py::dict d;
            for (const train::Engine::OwnedSlice& s : e.owned_slices()) {
              py::dict entry;
              entry["shape"] = s.shape;
              entry["start"] = s.start;
              entry["m"] = host_array(s.m, "optimizer state");
              entry["v"] = host_array(s.v, "optimizer state");
              entry["steps"] = e.optimizer().steps_taken();
              d[py::str(s.name)] = entry;
            }
            return d;
          },
          "name -> {shape, start, m, v, steps}: AdamW's moments of this rank's owned part of each parameter "
          "(flat, from element `start`; whole parameters at ZeRO 0); views on the host, copies from a GPU")
      .def(
          "_set_gradient_dispatch",
          [](train::Engine& e, py::object dispatch) {
            if (dispatch.is_none()) {
              e.set_before_update(nullptr);
              return;
            }
            // Called with the GIL released (inside the step): takes it, hands the owned gradients to
            // Python as writable arrays, and writes device copies back.
            e.set_before_update([&e, dispatch = std::make_shared<py::object>(std::move(dispatch))] {
              py::gil_scoped_acquire gil;
              py::list slices;
              std::vector<std::pair<Tensor, Tensor>> write_back;  // (device grad, host copy)
              for (const train::Engine::OwnedSlice& s : e.owned_slices()) {
                const ops::Placement placement = ops::placement_of(s.grad, "gradient");
                Tensor host = placement.on_host() ? s.grad : placement.to_host(s.grad);
                if (!placement.on_host()) write_back.emplace_back(s.grad, host);
                slices.append(py::make_tuple(s.name, s.start, s.shape, py::cast(host).attr("numpy")()));
              }
              (*dispatch)(slices);
              for (auto& [device, host] : write_back) {
                ops::Backend& backend = *ops::placement_of(device, "gradient").backend;
                backend.copy(backend.copy_from_host(host), device);
              }
            });
          },
          py::arg("dispatch"), "internal: myriad.Engine's gradient hooks")
      .def_property_readonly(
          "data_parallel_rank", [](train::Engine& e) { return e.groups().group(distributed::Axis::dp).rank(); },
          "this rank's replica: which rows of the global batch it passes (train_batch)")
      .def_property_readonly("data_parallel_size",
                             [](train::Engine& e) { return e.groups().group(distributed::Axis::dp).size(); })
      .def_property_readonly("step_count", &train::Engine::step_count)
      .def_property_readonly("tokens_per_step", &train::Engine::tokens_per_step)
      .def_property_readonly("flops_per_token", &train::Engine::flops_per_token)
      .def_property_readonly(
          "peak_flops",
          [](const train::Engine& e) {
            py::dict d;
            d["measured"] = e.peak_flops().measured;
            d["datasheet"] = e.peak_flops().datasheet;
            d["datasheet_source"] = e.peak_flops().datasheet_source;
            d["mfu_peak"] = e.peak_flops().mfu_peak;
            d["mfu_source"] = e.peak_flops().mfu_source;
            return d;
          },
          "per-rank peak FLOP/s: measured (host GEMM at start-up), datasheet, and mfu_peak, what MFU divides by")
      .def_property_readonly("metrics_path", &train::Engine::metrics_path, "metrics.jsonl ('' off rank 0)")
      .def("set_compute_delay_for_testing", &train::Engine::set_compute_delay_for_testing, py::arg("seconds"),
           "sleep this long in every step's compute phase (simulates a slow rank)")
      .def("memory_report",
           [](const train::Engine& e) {
             train::MemoryReport r = e.memory_report();
             py::dict d;
             d["parameters"] = r.parameter_bytes;
             d["gradients"] = r.gradient_bytes;
             d["optimizer"] = r.optimizer_bytes;
             d["activations"] = r.activation_bytes;
             d["scratch"] = r.scratch_bytes;
             d["comm_buffers"] = r.comm_buffer_bytes;
             return d;
           })
      .def(
          "parameters",
          [](train::Engine& e) {
            py::dict d;
            for (nn::Parameter& p : e.model().parameters().all()) {
              MYRIAD_CHECK(p.value.defined() || p.int8_values.defined(),
                           "Engine.parameters(): parameter '" << p.name << "' is sharded (ZeRO stage 3) and not "
                                                              << "resident on this rank; save a checkpoint for the "
                                                              << "full tensors");
              if (!p.value.defined()) continue;  // INT8 serving: held as int8 only (the export has it)
              d[py::str(p.name)] = ops::placement_of(p.value, "parameter").to_host(p.value);
            }
            return d;
          },
          "name -> Tensor view of each parameter (Tensor.numpy() gives a NumPy view; with training.device "
          "cuda a host copy); an engine serving INT8 (load_int8) leaves out the weights it holds as int8 only")
      .def(
          "gradients",
          [](train::Engine& e) {
            MYRIAD_CHECK(!e.serves_int8(), "Engine.gradients(): this engine serves an INT8 export (load_int8) and "
                                               << "holds no gradients");
            py::dict d;
            for (nn::Parameter& p : e.model().parameters().all()) {
              MYRIAD_CHECK(p.grad.defined(), "Engine.gradients(): the gradient of '"
                                                 << p.name << "' is sharded (ZeRO stage 2/3) and not resident on "
                                                 << "this rank");
              d[py::str(p.name)] = ops::placement_of(p.grad, "gradient").to_host(p.grad);
            }
            return d;
          },
          "name -> Tensor view of each gradient (as left by the last step; with training.device cuda a host "
          "copy)")
      .def("tokenizer", [](const train::Engine& e) -> py::object {
        if (e.tokenizer() == nullptr) return py::none();
        return py::cast(*e.tokenizer());
      });

  py::class_<data::BpeTokenizer>(m, "BpeTokenizer", "Byte-level BPE (GPT-2 compatible)")
      .def_static("load_gpt2", &data::BpeTokenizer::load_gpt2, py::arg("encoder_json"), py::arg("vocab_bpe"))
      .def_static(
          "load",
          [](const std::string& path, const std::string& key_file) {
            return data::BpeTokenizer::load(path, data::AtRest::from_key_file(key_file));
          },
          py::arg("path"), py::arg("key_file") = "",
          "a saved tokenizer (clear, or encrypted: key_file, default $MYRIAD_KEY_FILE)")
      .def_static(
          "train", [](const std::string& text, std::int32_t vocab) { return data::BpeTokenizer::train(text, vocab); },
          py::arg("text"), py::arg("vocab_size"))
      .def(
          "save", [](const data::BpeTokenizer& t, const std::string& path) { t.save(path); }, py::arg("path"))
      .def(
          "encode",
          [](const data::BpeTokenizer& t, const std::string& text, const py::object& allowed_special) {
            // allowed_special: False (default: "<|endoftext|>" is ordinary text), True / "all", or a
            // set of special tokens — the only one is "<|endoftext|>" (tiktoken's spelling).
            bool special = false;
            if (py::isinstance<py::str>(allowed_special)) {
              const std::string which = allowed_special.cast<std::string>();
              if (which != "all") throw py::value_error("allowed_special: '" + which + "' is not 'all' or a set");
              special = true;
            } else if (py::isinstance<py::bool_>(allowed_special)) {
              special = allowed_special.cast<bool>();
            } else {
              for (const py::handle& name : allowed_special) {
                const std::string token = name.cast<std::string>();
                if (token != "<|endoftext|>")
                  throw py::value_error("allowed_special: '" + token +
                                        "' is not a special token of this tokenizer (its only one is <|endoftext|>)");
                special = true;
              }
            }
            return special ? t.encode_allowing_special(text) : t.encode(text);
          },
          py::arg("text"), py::arg("allowed_special") = false,
          "token ids of text; with allowed_special (True, 'all' or {'<|endoftext|>'}) a literal <|endoftext|> "
          "becomes the end-of-text id, else it is ordinary text")
      .def("decode",
           [](const data::BpeTokenizer& t, const std::vector<std::int32_t>& ids) {
             std::string bytes = t.decode(ids);
             return py::bytes(bytes).attr("decode")("utf-8", "replace");
           })
      .def_property_readonly("vocab_size", &data::BpeTokenizer::vocab_size)
      .def_property_readonly("eot_id", &data::BpeTokenizer::eot_id);

  m.def(
      "dry_run",
      [](const RunConfig& config, int world_size, int rank) {
        train::DryRunReport r;
        {
          py::gil_scoped_release release;
          r = train::Engine::dry_run(config, world_size, rank);
        }
        py::dict d;
        d["rank"] = r.rank;
        d["world_size"] = r.world_size;
        d["role"] = r.role;
        d["tp_rank"] = r.tp_rank;
        d["cp_rank"] = r.cp_rank;
        d["ep_rank"] = r.ep_rank;
        d["dp_rank"] = r.dp_rank;
        d["pp_stage"] = r.pp_stage;
        d["parameter_elements"] = r.parameter_elements;
        d["shard_elements"] = r.shard_elements;
        d["optimizer_elements"] = r.optimizer_elements;
        d["master_weight_bytes"] = r.master_weight_bytes;
        d["compute_weight_bytes"] = r.compute_weight_bytes;
        d["gradient_bytes"] = r.gradient_bytes;
        d["optimizer_bytes"] = r.optimizer_bytes;
        d["activation_bytes"] = r.activation_bytes;
        d["activation_slots"] = r.activation_slots;
        d["total_bytes"] = r.total_bytes;
        d["peak_bytes"] = r.peak_bytes;
        d["flops_per_token"] = r.flops_per_token;
        return d;
      },
      py::arg("config"), py::arg("world_size"), py::arg("rank") = 0,
      "rank `rank`'s part of the config's layout for `world_size` ranks built on the meta device (shapes, no "
      "memory): the bytes it would hold by role (docs/planning.md, Dry run)");
  m.def(
      "parameter_layout",
      [](const RunConfig& config, int world_size, int rank) {
        const train::RankParameterLayout layout = train::rank_parameter_layout(config, world_size, rank);
        py::list parameters, units;
        for (const auto& p : layout.parameters) {
          parameters.append(py::make_tuple(p.name, p.numel, p.offset, p.expert, p.primary));
        }
        for (const auto& u : layout.units) units.append(py::make_tuple(u.name, u.begin, u.end, u.expert));
        py::dict d;
        d["role"] = layout.role;
        d["tp_rank"] = layout.tp_rank;
        d["cp_rank"] = layout.cp_rank;
        d["ep_rank"] = layout.ep_rank;
        d["dp_rank"] = layout.dp_rank;
        d["pp_stage"] = layout.pp_stage;
        d["parameters"] = parameters;
        d["units"] = units;
        d["chunks"] = layout.chunks;
        d["total"] = layout.total;
        return d;
      },
      py::arg("config"), py::arg("world_size"), py::arg("rank") = 0,
      "rank `rank`'s flat parameter buffer as the engine lays it out under the shard plan (nothing "
      "allocated): parameters (name, numel, offset, expert, primary) in order, gradient units (name, begin, "
      "end, expert), the layers of each pipeline chunk, total elements");
  m.def(
      "stage_layers",
      [](int n_layer, int pp, int virtual_stages, const std::vector<std::string>& pp_layers) {
        ParallelConfig p;
        p.pp = pp;
        p.virtual_stages = virtual_stages;
        p.pp_layers = pp_layers;
        return p.stage_layers(n_layer);
      },
      py::arg("n_layer"), py::arg("pp"), py::arg("virtual_stages") = 1,
      py::arg("pp_layers") = std::vector<std::string>{},
      "layers per global pipeline stage (ParallelConfig::stage_layers): parallel.pp_layers, else an even split");
  // key_file "": $MYRIAD_KEY_FILE's keys when it is set (files written encrypted), else clear.
  m.def(
      "export_safetensors",
      [](const std::string& checkpoint_dir, const std::string& output, const std::string& key_file) {
        return train::export_safetensors(checkpoint_dir, output, data::AtRest::from_key_file(key_file));
      },
      py::arg("checkpoint_dir"), py::arg("output"), py::arg("key_file") = "", py::call_guard<py::gil_scoped_release>(),
      "checkpoint -> one safetensors file of full parameters (+ the config beside it); returns the config path. "
      "key_file (default $MYRIAD_KEY_FILE): read an encrypted checkpoint, write the export encrypted");
  m.def(
      "import_safetensors",
      [](const std::string& input, const std::string& config, const std::string& root, const std::string& key_file) {
        return train::import_safetensors(input, config, root, data::AtRest::from_key_file(key_file));
      },
      py::arg("input"), py::arg("config"), py::arg("checkpoint_root"), py::arg("key_file") = "",
      py::call_guard<py::gil_scoped_release>(),
      "safetensors + run config -> a step-0 checkpoint under checkpoint_root; returns its path. key_file (default "
      "$MYRIAD_KEY_FILE): read an encrypted file, write the checkpoint encrypted");
  m.def(
      "rewrap_file",
      [](const std::string& path, const std::string& key_file) {
        return data::rewrap(path, data::KeyRing::load(key_file));
      },
      py::arg("path"), py::arg("key_file"), py::call_guard<py::gil_scoped_release>(),
      "an encrypted file's data key rewrapped under key_file's current key (unwrapped with the key its header "
      "names, which key_file must hold); the ciphertext is copied unchanged. Returns the key id it had");
  m.def(
      "decrypt_file",
      [](const std::string& path, const std::string& out, const std::string& key_file) {
        return data::decrypt_file(path, out, data::KeyRing::load(key_file));
      },
      py::arg("path"), py::arg("out"), py::arg("key_file"), py::call_guard<py::gil_scoped_release>(),
      "the plaintext of an encrypted file written to out (authenticated chunk by chunk; temporary + rename); "
      "returns its size");
  m.def(
      "encrypted_file_key_id",
      [](const std::string& path) -> py::object {
        if (!data::is_encrypted_file(path)) return py::none();
        return py::str(data::encrypted_file_key_id(path));
      },
      py::arg("path"), "the key id an encrypted myriad file names; None for a file in clear");

  m.def(
      "read_safetensors",
      [](const std::string& path, const std::string& key_file) {
        train::SafetensorsFile file;
        {
          py::gil_scoped_release release;
          file = train::read_safetensors(path, data::AtRest::from_key_file(key_file));
        }
        py::dict tensors;
        for (const auto& [name, tensor] : file.tensors) tensors[py::str(name)] = py::cast(tensor).attr("numpy")();
        return py::make_tuple(tensors, file.metadata);
      },
      py::arg("path"), py::arg("key_file") = "",
      "a .safetensors file (clear, or encrypted: key_file, default $MYRIAD_KEY_FILE) -> ({name: array} in file "
      "order, {metadata}); F16 / BF16 widen to float32, I8 stays int8; every offset and size is checked, errors "
      "name the file and tensor");
  m.def(
      "write_safetensors",
      [](const std::string& path, const py::dict& tensors, const std::map<std::string, std::string>& metadata,
         const std::string& key_file) {
        train::SafetensorsFile file;
        file.metadata = metadata;
        for (const auto& [name, value] : tensors) {
          const std::string key = py::str(name).cast<std::string>();
          if (py::isinstance<py::array_t<std::int8_t>>(value)) {  // weight-only INT8 exports keep int8
            auto array = py::array_t<std::int8_t, py::array::c_style | py::array::forcecast>::ensure(value);
            Tensor t = Tensor::empty(Shape(array.shape(), array.shape() + array.ndim()), DType::i8);
            std::copy(array.data(), array.data() + array.size(), t.data<std::int8_t>());
            file.tensors.emplace_back(key, t);
            continue;
          }
          auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(value);
          MYRIAD_CHECK(array, "write_safetensors: tensor '" << key << "' is not convertible to a float32 array");
          Shape shape(array.shape(), array.shape() + array.ndim());
          Tensor t = Tensor::empty(shape);
          std::copy(array.data(), array.data() + array.size(), t.data<float>());
          file.tensors.emplace_back(key, t);
        }
        py::gil_scoped_release release;
        train::write_safetensors(path, file, data::AtRest::from_key_file(key_file));
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{},
      py::arg("key_file") = "",
      "{name: array} (int8 arrays as I8, everything else as float32, in dict order) + {metadata} -> a .safetensors "
      "file, encrypted when key_file (default $MYRIAD_KEY_FILE) gives keys");

  m.def("fresh_run_conflict", &train::fresh_run_conflict, py::arg("checkpoint_dir"),
        "'' when a run from step 0 may write checkpoints into checkpoint_dir, else why not (another run's "
        "checkpoints are there)");

  m.def(
      "tokenize_corpus",
      [](const std::vector<std::string>& inputs, const std::string& output_dir, const data::BpeTokenizer& tokenizer,
         const std::string& separator, double val_fraction, const std::string& val_split,
         const std::vector<std::string>& extensions, std::int64_t shard_tokens) {
        data::TokenizeOptions options;
        options.inputs = inputs;
        options.output_dir = output_dir;
        options.separator = separator;
        options.val_fraction = val_fraction;
        options.val_split = data::parse_val_split(val_split);
        options.extensions = extensions;
        options.shard_tokens = shard_tokens;
        data::TokenizeSummary summary;
        {
          py::gil_scoped_release release;
          summary = data::tokenize_corpus(
              options, [&tokenizer](std::string_view text) { return tokenizer.encode(text); }, tokenizer.eot_id(),
              static_cast<std::uint32_t>(tokenizer.vocab_size()));
        }
        py::dict d;
        d["files"] = summary.files;
        d["documents"] = summary.documents;
        d["bytes"] = summary.bytes;
        d["train_tokens"] = summary.train_tokens;
        d["val_tokens"] = summary.val_tokens;
        d["train_shards"] = summary.train_shards;
        d["val_shards"] = summary.val_shards;
        return d;
      },
      py::arg("inputs"), py::arg("output_dir"), py::arg("tokenizer"), py::arg("separator") = "",
      py::arg("val_fraction") = 0.05, py::arg("val_split") = "documents",
      py::arg("extensions") = std::vector<std::string>{}, py::arg("shard_tokens") = 100'000'000,
      "Text files / folders -> train_*.bin and val_*.bin token shards (parallel, deterministic); returns a summary");
}

}  // namespace myriad::python
