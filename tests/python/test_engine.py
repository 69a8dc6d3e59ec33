"""myriad.Config (YAML, overrides, validation, round trip) and myriad.Engine on a tiny corpus:
the loss falls, parameters/gradients are NumPy views of the engine's buffers (no copies),
checkpoints restore parameters, optimizer state and step, generate/memory_report are sane.

The corpus and model are tiny (V 320, 2 layers, C 32, T 32) so every Engine test runs in well
under a second on 2 cores; the model initialisation and data order are fixed by training.seed,
so the loss thresholds below are deterministic, not statistical."""
import math
import os

import numpy as np
import pytest

import myriad
from tiny_corpus import write_corpus

VOCAB = 320

TINY_YAML = """\
model:
  architecture: gpt2
  vocab_size: 320
  n_layer: 2
  n_head: 2
  n_embd: 32
  context_length: 32
training:
  micro_batch: 4
  gradient_accumulation: 2
  seq_len: 32
  steps: 30
  lr: 3.0e-3
  warmup: 0
  eval_every: 10
  eval_batches: 4
data:
  path: {corpus}
  tokenizer: "train:320"
checkpoint:
  dir: {run}/checkpoints
logging:
  dir: {run}/logs
  level: warn
  measure_peak: false
sample:
  tokens: 20
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


@pytest.fixture
def tiny_config(corpus, tmp_path):
    return myriad.Config.from_string(TINY_YAML.format(corpus=corpus, run=tmp_path / "run"), "tiny.yaml")


@pytest.fixture
def engine(tiny_config):
    return myriad.Engine(tiny_config)


# ---------------------------------------------------------------------------------------------
# Config


def test_config_from_string_reads_values(tiny_config, tmp_path):
    assert tiny_config["training.steps"] == 30
    assert tiny_config["training.eval_every"] == 10
    assert tiny_config["checkpoint.every"] == 0
    assert tiny_config["logging.dir"] == str(tmp_path / "run" / "logs")
    assert tiny_config["logging.level"] == "warn"
    assert tiny_config["training.seed"] == 1337  # default kept for keys the text does not give
    assert tiny_config.to_dict()["sample"] == {"tokens": 20, "temperature": 0.8, "top_k": 40, "prompt": ""}
    tiny_config.validate()


def test_config_from_file_equals_from_string(tmp_path, corpus):
    text = TINY_YAML.format(corpus=corpus, run=tmp_path / "run")
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    assert myriad.Config.from_file(str(path)).to_yaml() == myriad.Config.from_string(text).to_yaml()


def test_config_from_file_errors_name_file_and_line(tmp_path):
    with pytest.raises(myriad.Error, match="config file .*no_such.yaml. does not exist"):
        myriad.Config.from_file(str(tmp_path / "no_such.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  n_layer: 2\n  n_layr: 3\n")
    with pytest.raises(myriad.Error, match=r"bad\.yaml:3:.*model\.n_layr.*n_layer"):
        myriad.Config.from_file(str(bad))
    bad.write_text("training:\n  lr: fast\n")
    with pytest.raises(myriad.Error, match=r"bad\.yaml:2: training\.lr: expected a number, got 'fast'"):
        myriad.Config.from_file(str(bad))


def test_config_set_overrides_a_key(tiny_config):
    tiny_config.set("training.steps=7")
    tiny_config.set("  logging.every = 3 ")  # whitespace around key and value is ignored
    tiny_config.set("training.batch_size=8")  # alias of global_batch_size
    tiny_config.set("sample.prompt=a: b # c")  # strings are verbatim
    assert tiny_config["training.steps"] == 7
    assert tiny_config["logging.every"] == 3
    assert tiny_config["sample.prompt"] == "a: b # c"
    assert "  global_batch_size: 8\n" in tiny_config.to_yaml()
    tiny_config.validate()  # 8 == micro_batch 4 * gradient_accumulation 2 * dp 1


def test_config_set_unknown_key_names_it(tiny_config):
    with pytest.raises(myriad.Error, match=r"unknown key 'training\.lrr'.*did you mean 'lr'"):
        tiny_config.set("training.lrr=3e-4")
    with pytest.raises(myriad.Error, match=r"unknown section 'trainin'.*did you mean 'training'"):
        tiny_config.set("trainin.lr=3e-4")
    with pytest.raises(myriad.Error, match=r"training\.lr: expected a number, got 'fast'"):
        tiny_config.set("training.lr=fast")
    with pytest.raises(myriad.Error, match=r"model\.architecture: must be one of gpt2, llama, moe, got 'gpt3'"):
        tiny_config.set("model.architecture=gpt3")
    assert tiny_config["training.steps"] == 30  # failed overrides change nothing visible
    tiny_config.validate()


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.n_head=3", r"model\.n_embd \(32\) must be divisible by model\.n_head \(3\)"),
        ("training.seq_len=64", r"training\.seq_len \(64\) must be <= model\.context_length \(32\)"),
        ("training.batch_size=12", r"training\.global_batch_size \(12\) must equal training\.micro_batch \(4\) \* "
                                   r"training\.gradient_accumulation \(2\) \* parallel\.dp \(1\) = 8"),
        ("training.warmup=31", r"training\.warmup_steps \(31\) must be <= training\.steps \(30\)"),
        ("data.tokenizer=train:400",
         r"data\.tokenizer \(train:400\) trains 400 tokens, more than model\.vocab_size \(320\)"),
    ],
)
def test_config_validate_cross_key_errors(tiny_config, override, message):
    tiny_config.set(override)  # each is fine on its own key; validate() sees the inconsistency
    with pytest.raises(myriad.Error, match=message):
        tiny_config.validate()


def test_config_validate_world_size(tiny_config):
    # An explicit degree is checked against the world as given ...
    tiny_config.set("parallel.dp=1")
    with pytest.raises(myriad.Error, match=r"dp \* tp \* pp \* cp = 1 \* 1 \* 1 \* 1 = 1.*world size is 2"):
        tiny_config.validate(2)
    tiny_config.set("parallel.dp=2")
    tiny_config.set("training.batch_size=16")
    tiny_config.validate(2)
    # ... and auto (0, the default) takes the world's share; a world that does not divide is named.
    tiny_config.set("parallel.dp=0")
    tiny_config.validate(2)
    assert "  dp: 2\n" in tiny_config.to_yaml()
    tiny_config.set("parallel.dp=0")
    tiny_config.set("parallel.tp=2")
    with pytest.raises(myriad.Error, match=r"parallel.dp is auto.*world size 3 is not divisible by tp \* pp \* cp"):
        tiny_config.validate(3)


def test_config_to_yaml_round_trip(tiny_config):
    for override in ["sample.prompt=héllo: \"quoted\" 'x' # not a comment 🙂", "data.path=/a path/with spaces",
                     "training.no_decay=[norm]", "model.bias=false", "training.min_lr=1e-5"]:
        tiny_config.set(override)
    text = tiny_config.to_yaml()
    again = myriad.Config.from_string(text)
    assert again.to_yaml() == text
    assert again["sample.prompt"] == "héllo: \"quoted\" 'x' # not a comment 🙂"
    # The default config and the resolved one round-trip too.
    default = myriad.Config.from_string("model:\n")
    assert myriad.Config.from_string(default.to_yaml()).to_yaml() == default.to_yaml()
    resolved = tiny_config.resolved()
    assert myriad.Config.from_string(resolved.to_yaml()).to_yaml() == resolved.to_yaml()
    assert "  ffn_hidden: 128\n" in resolved.to_yaml()  # 4 * n_embd for gpt2


# ---------------------------------------------------------------------------------------------
# Engine


def test_engine_loss_falls(engine):
    assert engine.tokens_per_step == 4 * 2 * 32
    val_before = engine.evaluate()
    assert abs(val_before - math.log(VOCAB)) < 0.2  # init std 0.02: near-uniform predictions
    losses = []
    for i in range(30):
        m = engine.step()
        assert m["step"] == i + 1 and engine.step_count == i + 1
        assert m["tokens"] == engine.tokens_per_step
        assert math.isfinite(m["loss"]) and not m["skipped"]
        losses.append(m["loss"])
    assert abs(losses[0] - math.log(VOCAB)) < 0.2
    # The grammar is trivially learnable: 30 steps take the loss from ln 320 = 5.77 to about 3.9.
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 1.0, losses
    assert engine.evaluate() < val_before - 1.0


def test_parameters_and_gradients_are_views_without_copies(engine):
    params, grads = engine.parameters(), engine.gradients()
    assert "wte" in params and set(grads) == set(params)
    for name, p in params.items():
        a, b = p.numpy(), engine.parameters()[name].numpy()
        assert a.dtype == np.float32 and a.shape == tuple(p.shape) == grads[name].numpy().shape
        assert np.shares_memory(a, b), name
        assert np.shares_memory(grads[name].numpy(), engine.gradients()[name].numpy()), name
        assert not np.shares_memory(a, grads[name].numpy()), name
    # A gradient view taken before the step shows the step's gradients afterwards.
    wte_grad = grads["wte"].numpy()
    assert not wte_grad.any()
    engine.step()
    assert wte_grad.any()


def test_writing_through_parameter_view_changes_the_model(engine):
    loss = engine.evaluate()
    wte = engine.parameters()["wte"].numpy()
    wte[:] = 0.0
    # Tied embeddings: the LM head is wte, so every logit is 0 and the loss is exactly ln V.
    zeroed = engine.evaluate()
    assert zeroed != loss
    assert abs(zeroed - math.log(VOCAB)) < 1e-5
    # And the optimizer step reads and writes the same buffer.
    engine.step()
    assert wte.any()


def test_parameter_view_keeps_buffer_alive(tiny_config):
    engine = myriad.Engine(tiny_config)
    wpe = engine.parameters()["wpe"].numpy()
    del engine
    wpe[:] = 1.0  # would crash or corrupt memory if the engine's buffer had been freed
    assert wpe.sum() == wpe.size


def test_gradients_after_step_match_reported_grad_norm(engine):
    m = engine.step()
    total = 0.0
    for name, g in engine.gradients().items():
        a = g.numpy().astype(np.float64)
        assert np.all(np.isfinite(a)), name
        assert np.any(a != 0.0), name
        total += float(np.sum(a * a))
    # grad_norm is the global norm before clipping; clipping scales the update, not the buffers.
    assert math.sqrt(total) == pytest.approx(m["grad_norm"], rel=1e-4)


def test_save_load_restores_parameters_and_step(tiny_config):
    a = myriad.Engine(tiny_config)
    for _ in range(5):
        a.step()
    path = a.save()
    assert os.path.isdir(path) and path.endswith("step_00000005")
    b = myriad.Engine(tiny_config)
    wte_view = b.parameters()["wte"].numpy()
    assert not np.array_equal(wte_view, a.parameters()["wte"].numpy())
    b.load(path)
    assert b.step_count == 5
    for name, p in a.parameters().items():
        assert np.array_equal(p.numpy(), b.parameters()[name].numpy()), name
    assert np.array_equal(wte_view, a.parameters()["wte"].numpy())  # loaded in place: old views see it
    # Optimizer moments and the data position came back too: the next step is bit-identical.
    ma, mb = a.step(), b.step()
    assert ma["loss"] == mb["loss"] and ma["grad_norm"] == mb["grad_norm"] and ma["lr"] == mb["lr"]
    for name, p in a.parameters().items():
        assert np.array_equal(p.numpy(), b.parameters()[name].numpy()), name


def test_load_auto_takes_newest_checkpoint(tiny_config):
    a = myriad.Engine(tiny_config)
    a.step()
    a.save()
    a.step()
    a.save()
    b = myriad.Engine(tiny_config)
    b.load("auto")
    assert b.step_count == 2
    with pytest.raises(myriad.Error):
        b.load(os.path.join(os.path.dirname(a.save()), "step_99999999"))


def test_load_rejects_a_checkpoint_of_another_model(tiny_config):
    a = myriad.Engine(tiny_config)
    path = a.save()
    tiny_config.set("model.n_embd=64")
    b = myriad.Engine(tiny_config)
    with pytest.raises(myriad.Error, match=r"(?s)saved for a different model.*n_embd: 32.*n_embd: 64"):
        b.load(path)
    assert b.step_count == 0


def test_generate_continues_the_prompt(engine):
    for _ in range(10):
        engine.step()
    for prompt in ["the cat", "", "héllo 🙂"]:
        text = engine.generate(prompt, 12, 0.8, 40, 7)
        assert isinstance(text, str) and text.startswith(prompt)
        assert len(text) > len(prompt)
        assert engine.generate(prompt, 12, 0.8, 40, 7) == text  # same seed, same text
    assert engine.generate(prompt="a dog", max_new_tokens=0) == "a dog"


def test_generate_returns_str_for_invalid_utf8(engine):
    # An untrained model at high temperature samples lone bytes >= 0x80 (not valid UTF-8): they
    # come back as U+FFFD instead of raising UnicodeDecodeError.
    texts = [engine.generate("x", 100, 2.0, 0, seed) for seed in range(8)]
    assert all(isinstance(t, str) and t.startswith("x") for t in texts)
    assert any("\ufffd" in t for t in texts)


def test_memory_report(engine):
    report = engine.memory_report()
    assert set(report) == {"parameters", "gradients", "optimizer", "activations", "scratch", "comm_buffers"}
    assert report.pop("comm_buffers") == 0  # one process, ZeRO 0: no transient gathers
    assert all(isinstance(v, int) and v > 0 for v in report.values()), report
    n = sum(p.numpy().size for p in engine.parameters().values())
    assert report["parameters"] == 4 * n and report["gradients"] == 4 * n and report["optimizer"] == 8 * n


def test_engine_errors(tiny_config, tmp_path):
    tiny_config.set(f"data.path={tmp_path / 'missing.txt'}")
    with pytest.raises(myriad.Error, match=r"data\.path '.*missing\.txt' does not exist"):
        myriad.Engine(tiny_config)


def test_engine_tokenizer_matches_the_data(engine):
    tok = engine.tokenizer()
    assert tok.vocab_size == VOCAB and tok.eot_id == VOCAB - 1
    assert tok.decode(tok.encode("the cat sees the ball.")) == "the cat sees the ball."
