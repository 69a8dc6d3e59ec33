"""The research API of myriad.Engine (docs/python.md): forward / backward / optimizer_step over the
caller's batches equal Engine.step() bit for bit (also with accumulation over calls, a changed
schedule and training.cpu_gemm measured), forward's loss and logits agree with a float64 NumPy
cross-entropy, step and gradient hooks see and change what they should, AdamW's moments are readable, generate returns
ids with log-probabilities equal to the logits' log-softmax and honours stop tokens and
truncation, and wrong calls are refused with the reason. Under mpirun (dp with ZeRO 2, tp, pp,
cp, ep with a mixture of experts) each rank passes its replica's rows, the research loop again
equals step() bit for bit and evaluate() on uneven rows per replica equals the serial value."""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import myriad
from package_under_test import PYTHONPATH, REPO
from tiny_corpus import write_corpus

TINY_YAML = """\
model: {{architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}}
training: {{micro_batch: 4, gradient_accumulation: 2, seq_len: 32, steps: 30, lr: 3.0e-3, warmup: 2,
           eval_every: 0, eval_batches: 2}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{dir: {run}/checkpoints}}
logging: {{measure_peak: false, dir: {run}/logs, level: warn}}
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


def make_engine(corpus, run, *overrides):
    config = myriad.Config.from_string(TINY_YAML.format(corpus=corpus, run=run), "tiny.yaml")
    for o in overrides:
        config.set(o)
    return myriad.Engine(config)


def parameters(engine):
    return {name: np.array(t.numpy(), copy=True) for name, t in engine.parameters().items()}


def assert_bitwise_equal(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), f"parameter {name} differs"


def research_step(engine, lr=None):
    tokens, targets = engine.train_batch()
    engine.zero_grad()
    loss = engine.forward(tokens, targets)
    engine.backward()
    return loss, engine.optimizer_step(lr)


def test_researcher_loop_equals_step_bit_for_bit(corpus, tmp_path):
    reference = make_engine(corpus, tmp_path / "a")
    research = make_engine(corpus, tmp_path / "b")
    for step in range(4):
        expected = reference.step()
        loss, got = research_step(research)
        assert loss == expected["loss"] == got["loss"]
        assert got["grad_norm"] == expected["grad_norm"] and got["lr"] == expected["lr"]
        assert got["step"] == expected["step"] == step + 1
    assert_bitwise_equal(parameters(reference), parameters(research))
    # And the parameters moved: the comparison can fail.
    assert not np.array_equal(parameters(research)["wte"], parameters(make_engine(corpus, tmp_path / "c"))["wte"])


def test_researcher_loop_measures_its_cpu_gemm_plan_as_step_does(corpus, tmp_path, monkeypatch, capfd):
    """training.cpu_gemm measured: the research loop records its first step's GEMM shapes and
    installs a plan after it, as step() does; with one machine cache the two engines' plans are the
    same, so the loops stay equal bit for bit while both engines live in one process."""
    monkeypatch.setenv("MYRIAD_CPU_GEMM_CACHE", str(tmp_path / "gemm_cache"))
    reference = make_engine(corpus, tmp_path / "a", "training.cpu_gemm=measured", "logging.level=info")
    research = make_engine(corpus, tmp_path / "b", "training.cpu_gemm=measured", "logging.level=info")
    for step in range(4):
        expected = reference.step()
        loss, got = research_step(research)
        assert loss == expected["loss"] == got["loss"], step
        assert got["grad_norm"] == expected["grad_norm"], step
    assert_bitwise_equal(parameters(reference), parameters(research))
    # step() timed the shapes; the research loop settled its plan from the cache step() wrote.
    settled = [line for line in capfd.readouterr().err.splitlines() if "CPU GEMMs after step 1:" in line]
    assert len(settled) == 2, settled
    assert " timed (" in settled[0] and settled[1].endswith("none timed"), settled
    assert len(list((tmp_path / "gemm_cache" / "cpu_gemm").glob("*.plan"))) == 1


def test_every_pass_of_an_engine_runs_on_its_own_cpu_gemm_plan(corpus, tmp_path, monkeypatch):
    """The CPU GEMM plan in force belongs to the process: after another engine installed one that
    routes every shape elsewhere than the fixed rule, an engine without a plan must still compute on
    the rule in its research forward, logits and evaluations (they ran on the other engine's plan:
    found on a machine whose measured plan put some shapes on OpenBLAS)."""
    cache = tmp_path / "gemm_cache"
    monkeypatch.setenv("MYRIAD_CPU_GEMM_CACHE", str(cache))
    plain = make_engine(corpus, tmp_path / "plain")
    tokens, targets = plain.train_batch()

    passes = {
        "research forward": lambda: plain.forward(tokens, targets),
        "logits": lambda: plain.forward(tokens),
        "evaluate": plain.evaluate,
        "evaluate on rows": lambda: plain.evaluate(tokens, targets),
    }
    before = {name: run() for name, run in passes.items()}
    make_engine(corpus, tmp_path / "a", "training.cpu_gemm=measured").step()  # writes the machine cache
    [plan_file] = list((cache / "cpu_gemm").glob("*.plan"))
    key, *routes = plan_file.read_text().splitlines()
    if " onednn" not in key:
        pytest.skip("oneDNN is not the process's CPU GEMM: every route would be the rule's OpenBLAS")
    # Every shape on OpenBLAS, which the fixed rule (oneDNN) never picks for these shapes.
    plan_file.write_text("\n".join([key] + [line.rsplit(" ", 1)[0] + " openblas" for line in routes]) + "\n")
    other = make_engine(corpus, tmp_path / "b", "training.cpu_gemm=measured")  # alive: its plan stays installed
    for name, run in passes.items():
        other.step()  # the cached plan in force again
        assert np.array_equal(run(), before[name]), name


def test_moe_routing_telemetry_counts_each_token_once(corpus, tmp_path):
    # forward() then backward() runs the batch twice; the routing counts must equal step()'s
    # (they were doubled: tokens_per_expert mean 64 vs 32).
    moe = ["model.architecture=moe", "model.moe_base=gpt2", "model.num_experts=4"]
    reference = make_engine(corpus, tmp_path / "a", *moe)
    research = make_engine(corpus, tmp_path / "b", *moe)
    for _ in range(2):
        expected = reference.step()
        _, got = research_step(research)
        assert got["loss"] == expected["loss"]
        assert got["moe"] and got["moe"] == expected["moe"], (got["moe"], expected["moe"])


def test_custom_lr_and_schedule_changes_equal_step(corpus, tmp_path):
    reference = make_engine(corpus, tmp_path / "a")
    research = make_engine(corpus, tmp_path / "b")
    reference.set_schedule(lr=1e-3, warmup_steps=0, kind="constant")
    for _ in range(2):
        reference.step()
        research_step(research, lr=1e-3)  # an explicit rate equals a constant schedule at that rate
    assert_bitwise_equal(parameters(reference), parameters(research))
    research.set_schedule(lr=2e-3, warmup_steps=0, kind="linear", total_steps=10, min_lr=0.0)
    assert research.schedule == {"lr": pytest.approx(2e-3), "min_lr": 0.0, "warmup_steps": 0, "total_steps": 10,
                                 "kind": "linear"}
    assert research.lr == pytest.approx(2e-3 * (1 - 2 / 9))  # step 2 of a decay over steps 0..9
    metrics = research_step(research)[1]
    assert metrics["lr"] == pytest.approx(2e-3 * (1 - 2 / 9))
    with pytest.raises(myriad.Error, match="min_lr"):
        research.set_schedule(min_lr=1.0)


def test_accumulation_over_calls_equals_step(corpus, tmp_path):
    # Two halves with scale 1/2 each: every token's gradient seed is 0.5 / (N / 2) = 1 / N exactly.
    reference = make_engine(corpus, tmp_path / "a")
    research = make_engine(corpus, tmp_path / "b")
    reference.step()
    tokens, targets = research.train_batch()
    assert tokens.shape == targets.shape == (8, 32) and tokens.dtype == np.int32
    research.zero_grad()
    losses = []
    for half in (slice(0, 4), slice(4, 8)):
        losses.append(research.forward(tokens[half], targets[half]))
        research.backward(scale=0.5, sync=half.start == 4)
    metrics = research.optimizer_step()
    assert metrics["loss"] == pytest.approx(sum(losses) / 2, rel=1e-12)
    assert_bitwise_equal(parameters(reference), parameters(research))


def log_softmax(logits):
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def test_forward_loss_and_logits_match_a_float64_cross_entropy(corpus, tmp_path, rng):
    engine = make_engine(corpus, tmp_path)
    tokens = rng.integers(0, 320, size=(4, 32)).astype(np.int64)  # int64 is accepted
    targets = rng.integers(0, 320, size=(4, 32)).astype(np.int32)
    targets[0, :5] = -100  # the ignore index
    logits = engine.forward(tokens)
    assert logits.shape == (4, 32, 320) and logits.dtype == np.float32
    picked = np.take_along_axis(log_softmax(logits), np.maximum(targets, 0)[..., None], axis=-1)[..., 0]
    expected = -picked[targets >= 0].mean()
    assert engine.forward(tokens, targets) == pytest.approx(expected, rel=1e-5)
    # Shorter sequences and a single row work for logits.
    assert engine.forward(tokens[:1, :7]).shape == (1, 7, 320)


def test_evaluate_on_the_callers_rows(corpus, tmp_path, rng):
    engine = make_engine(corpus, tmp_path)
    tokens = rng.integers(0, 320, size=(5, 17))  # any number of rows and any T <= context
    inputs, targets = tokens[:, :-1], tokens[:, 1:].astype(np.int32)
    next_token = engine.evaluate(tokens)
    assert next_token == engine.evaluate(inputs, targets)
    picked = np.take_along_axis(log_softmax(engine.forward(inputs)), targets[..., None], axis=-1)[..., 0]
    assert next_token == pytest.approx(-picked.mean(), rel=1e-5)
    assert engine.evaluate() > 0  # the validation split, as before
    with pytest.raises(myriad.Error, match="at least 2 columns"):
        engine.evaluate(tokens[:, :1])
    with pytest.raises(myriad.Error, match="no valid target"):
        engine.evaluate(inputs, np.full_like(targets, -100))


def test_hooks_see_and_change_the_update(corpus, tmp_path):
    engine = make_engine(corpus, tmp_path, "training.weight_decay=0")
    seen, steps = {}, []
    engine.add_step_hook(lambda m: steps.append(m["step"]))

    def record(g):
        seen[g.name] = (g.start, g.shape, g.grad.copy())

    record_handle = engine.add_gradient_hook(record)
    metrics = engine.step()
    assert steps == [1]
    assert seen.keys() == engine.parameters().keys()
    for start, shape, grad in seen.values():
        assert start == 0 and grad.size == math.prod(shape) and np.isfinite(grad).all()
    # AdamW after one step: m = (1 - beta1) * clipped gradient, v = (1 - beta2) * its square (beta1 0.9, beta2 0.95).
    state = engine.optimizer_state()
    clip = min(1.0, 1.0 / metrics["grad_norm"])
    for name, (_start, _shape, grad) in seen.items():
        assert state[name]["steps"] == 1 and state[name]["m"].shape == grad.shape
        np.testing.assert_allclose(state[name]["m"], 0.1 * grad * clip, rtol=1e-4, atol=1e-9)
        np.testing.assert_allclose(state[name]["v"], 0.05 * (grad * clip) ** 2, rtol=1e-3, atol=1e-12)
    record_handle.remove()

    def zero(g):
        g.grad[:] = 0

    engine.add_gradient_hook(zero)
    before = parameters(engine)
    research_step(engine)
    assert steps == [1, 2]
    after = parameters(engine)
    # Zero gradients: AdamW moves each weight by lr * m_hat / (sqrt(v_hat) + eps) with the old
    # moments decayed, not by the new gradient — so compare with a run whose hook did nothing.
    plain = make_engine(corpus, tmp_path / "plain", "training.weight_decay=0")
    plain.step()
    plain.step()
    assert any(not np.array_equal(after[n], parameters(plain)[n]) for n in after)
    assert any(not np.array_equal(after[n], before[n]) for n in after)


def test_generate_returns_ids_with_the_models_logprobs(corpus, tmp_path):
    engine = make_engine(corpus, tmp_path)
    for _ in range(3):
        engine.step()
    prompt = [5, 17, 33]
    out = engine.generate(prompt, max_new_tokens=6, temperature=0, details=True)
    assert out["finish_reason"] == "max_new_tokens" and len(out["ids"]) == 6
    assert out["prompt_tokens"] == 3 and out["prompt_tokens_dropped"] == 0 and isinstance(out["text"], str)
    # Greedy: each id is the argmax of the full forward's logits over the tokenizer's ids (ids the
    # data cannot hold are never drawn), its logprob their log-softmax over the whole vocabulary.
    sequence = np.array([prompt + list(out["ids"])], np.int32)
    expected = log_softmax(engine.forward(sequence))[0]
    drawable = engine.tokenizer().vocab_size
    for i, token in enumerate(out["ids"]):
        row = expected[len(prompt) - 1 + i]
        assert token == int(np.argmax(row[:drawable]))
        assert out["logprobs"][i] == pytest.approx(row[token], abs=1e-4)
    # A stop token ends generation at its first occurrence and is returned.
    ids = [int(i) for i in out["ids"]]
    stop = ids[-1]
    stopped = engine.generate(prompt, max_new_tokens=6, temperature=0, stop_tokens=[999, stop], details=True)
    assert list(stopped["ids"]) == ids[:ids.index(stop) + 1] and stopped["finish_reason"] == "stop_token"
    # Sampling: logprobs of sampled ids are <= 0 and reproducible from the seed.
    a = engine.generate(prompt, max_new_tokens=8, temperature=1.0, top_k=0, seed=7, details=True)
    b = engine.generate(prompt, max_new_tokens=8, temperature=1.0, top_k=0, seed=7, details=True)
    assert np.array_equal(a["ids"], b["ids"]) and (a["logprobs"] <= 0).all()
    # A full context ends generation (prompt + new = context_length + 1: the last is not fed back); a
    # longer prompt is refused, or truncated to its end when asked.
    full = engine.generate(list(range(30)), max_new_tokens=10, temperature=0, details=True)
    assert len(full["ids"]) == 3 and full["finish_reason"] == "context_length"
    with pytest.raises(myriad.Error, match="exceeds context_length 32"):
        engine.generate(list(range(40)), max_new_tokens=2, details=True)
    cut = engine.generate(list(range(40)), max_new_tokens=2, temperature=0, truncate=True, details=True)
    assert cut["prompt_tokens"] == 32 and cut["prompt_tokens_dropped"] == 8 and len(cut["ids"]) == 1
    assert list(cut["ids"]) == list(engine.generate(list(range(8, 40)), max_new_tokens=1, temperature=0,
                                                     details=True)["ids"])
    for bad, message in [({"temperature": -1.0}, "temperature"), ({"temperature": float("nan")}, "temperature"),
                         ({"top_k": -1}, "top_k"), ({"max_new_tokens": -1}, "max_new_tokens")]:
        kwargs = dict(max_new_tokens=2, details=True)
        kwargs.update(bad)
        with pytest.raises(myriad.Error, match=message):
            engine.generate(prompt, **kwargs)
    with pytest.raises(myriad.Error, match="outside the vocabulary"):
        engine.generate([400], max_new_tokens=1, details=True)


def test_wrong_calls_are_refused_with_the_reason(corpus, tmp_path):
    engine = make_engine(corpus, tmp_path)
    tokens, targets = engine.train_batch()
    with pytest.raises(myriad.Error, match="call forward"):
        engine.backward()
    with pytest.raises(myriad.Error, match="no reduced gradients"):
        engine.optimizer_step()
    with pytest.raises(myriad.Error, match="multiple of training.micro_batch 4"):
        engine.forward(tokens[:3], targets[:3])
    with pytest.raises(myriad.Error, match="training.seq_len 32"):
        engine.forward(tokens[:, :16], targets[:, :16])
    bad = tokens.copy()
    bad[1, 2] = 999
    with pytest.raises(myriad.Error, match="token 999 at flat position 34"):
        engine.forward(bad, targets)
    with pytest.raises(myriad.Error, match="2-D"):
        engine.forward(tokens[0], targets[0])
    engine.forward(tokens, targets)
    engine.backward()
    with pytest.raises(myriad.Error, match="already reduced"):
        engine.forward(tokens, targets)
        engine.backward()
    with pytest.raises(myriad.Error, match="lr -1"):
        engine.optimizer_step(lr=-1.0)
    engine.optimizer_step()
    assert engine.step_count == 1


MPI_SCRIPT = """
import json, os, sys, numpy as np, myriad
config_path, layout, out = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
runtime = myriad.MpiRuntime()
def engine_for(run):
    config = myriad.Config.from_file(config_path)
    for o in layout + ["logging.dir=" + run + "/logs", "checkpoint.dir=" + run + "/ck"]:
        config.set(o)
    config.validate(2)
    groups = myriad.ProcessGroups(config, runtime)
    return myriad.Engine(config, runtime.rank, "", groups), groups
rank = runtime.rank
rows = np.random.default_rng(5).integers(0, 320, size=(8, 33))
first, = engine_for(out + "/eval")[:1]
mine = (rows[:3] if first.data_parallel_rank == 0 and first.data_parallel_size == 2
        else rows[3:] if first.data_parallel_size == 2 else rows)
evaluated = first.evaluate(mine)
del first
ref, g1 = engine_for(out + "/step")
for _ in range(3):
    ref.step()
expected = {n: np.array(t.numpy(), copy=True) for n, t in ref.parameters().items()}
del ref, g1
eng, g2 = engine_for(out + "/research")
losses = []
for _ in range(3):
    tokens, targets = eng.train_batch()
    eng.zero_grad()
    losses.append(eng.forward(tokens, targets))
    eng.backward()
    eng.optimizer_step()
got = {n: np.array(t.numpy(), copy=True) for n, t in eng.parameters().items()}
same = expected.keys() == got.keys() and all(np.array_equal(expected[n], got[n]) for n in got)
with open(f"{out}/rank{rank}.json", "w") as f:  # a file per rank: mpirun may interleave stdout lines
    json.dump({"replica": [eng.data_parallel_rank, eng.data_parallel_size], "same": bool(same), "losses": losses,
               "evaluate": evaluated}, f)
del eng, g2
"""


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found")
@pytest.mark.parametrize("layout", ["parallel.dp=2,parallel.zero_stage=2", "parallel.tp=2", "parallel.pp=2",
                                    "parallel.cp=2",
                                    "model.architecture=moe,model.moe_base=gpt2,model.num_experts=4,parallel.ep=2"])
def test_research_loop_equals_step_under_mpirun(corpus, tmp_path, layout):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_YAML.format(corpus=corpus, run=tmp_path))
    script = tmp_path / "research.py"
    script.write_text(MPI_SCRIPT)
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1")
    result = subprocess.run(["mpirun", "-np", "2", *root, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1",
                             "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", sys.executable, str(script), str(config),
                             layout, str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert all(r["same"] for r in ranks), ranks  # the research loop equals step() bit for bit
    if layout.startswith("parallel.dp"):
        assert [r["replica"] for r in ranks] == [[0, 2], [1, 2]]
    assert ranks[0]["losses"] == ranks[1]["losses"]  # every rank reports the same (global) losses
    # evaluate() on the caller's rows (at dp 2: 3 rows on one replica, 5 on the other) equals the
    # serial evaluation of all 8 rows by a fresh engine (the same initial parameters).
    rows = np.random.default_rng(5).integers(0, 320, size=(8, 33))
    model_keys = [o for o in layout.split(",") if o.startswith("model.")]  # the same model, one process
    serial = make_engine(corpus, tmp_path / "serial", *model_keys).evaluate(rows)
    values = [r["evaluate"] for r in ranks]
    assert all(v == pytest.approx(serial, rel=1e-5) for v in values)
