"""Hugging Face interchange (myriad/hf.py, `python -m myriad.convert --format hf`) against the real
`transformers` library: randomly initialised GPT-2 and LLaMA models (padded and unpadded
vocabularies, grouped-query attention, tied and untied heads) give the same logits in both
libraries after import (HF -> myriad) and after export of a trained myriad model (myriad -> HF),
within 1e-5; fused q/k/v and gate/up files import to the same model; a file whose tensor names or
shapes do not match is refused naming them; GPT-2's tokenizer files travel with the export and
encode like myriad's tokenizer.

The test command installs torch and transformers into its venv and sets MYRIAD_REQUIRE_HF=1 so
these tests fail instead of skipping there; elsewhere they skip without transformers."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import myriad
from myriad import hf
from package_under_test import PYTHONPATH, REPO
from tiny_corpus import write_corpus

if os.environ.get("MYRIAD_REQUIRE_HF") == "1":
    import torch  # noqa: F401 — a missing library fails here, loudly
    import transformers
else:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

SHARED_DATA = os.environ.get("MYRIAD_SHARED_DATA", os.path.join(REPO, "..", "shared", "data"))
TOLERANCE = 1e-5
# The models here are saved without a tokenizer, which import refuses unless one is named.
TOKENIZER = "train:280"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


def hf_model(kind, vocab, tie, seed):
    torch.manual_seed(seed)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                         tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                          rms_norm_eps=1e-6, rope_theta=5000.0, tie_word_embeddings=tie,
                                          bos_token_id=0, eos_token_id=0)
        model = transformers.LlamaForCausalLM(config)
    # Random init puts near-zero values in norms and biases: spread them so every tensor matters.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()


def myriad_engine(config_path, corpus, run, checkpoint=None):
    config = myriad.Config.from_file(str(config_path))
    for o in [f"data.path={corpus}", f"data.tokenizer={TOKENIZER}", "training.micro_batch=2", "training.seq_len=32",
              "training.steps=10", "training.lr=1e-2", "training.warmup=0", f"logging.dir={run}/logs",
              f"checkpoint.dir={run}/checkpoints", "logging.level=warn"]:
        config.set(o)
    engine = myriad.Engine(config)
    if checkpoint:
        engine.load(str(checkpoint))
    return engine


def tokens_for(vocab, rng):
    return rng.integers(0, vocab, size=(2, 32))


CASES = [("gpt2", 300, True), ("gpt2", 320, False), ("llama", 300, False), ("llama", 320, True)]


@pytest.mark.parametrize("kind,vocab,tie", CASES)
def test_hf_model_imports_with_equal_logits(kind, vocab, tie, corpus, tmp_path, rng):
    model = hf_model(kind, vocab, tie, seed=int(rng.integers(1 << 30)))
    model.save_pretrained(tmp_path / "hf", safe_serialization=True)
    checkpoint, config = hf.import_hf(str(tmp_path / "hf"), str(tmp_path / "imported"), tokenizer=TOKENIZER)
    engine = myriad_engine(config, corpus, tmp_path / "run", checkpoint)
    tokens = tokens_for(vocab, rng)
    ours, theirs = engine.forward(tokens), hf_logits(model, tokens)
    assert ours.shape == theirs.shape == (2, 32, vocab)
    assert np.abs(ours - theirs).max() <= TOLERANCE
    assert np.abs(theirs).max() > 0.1  # the logits carry the weights' signal: the comparison can fail
    # Training continues from the imported checkpoint.
    losses = [engine.step()["loss"] for _ in range(3)]
    assert all(np.isfinite(losses)) and engine.step_count == 3


@pytest.mark.parametrize("kind,vocab,tie", CASES)
def test_trained_myriad_model_exports_to_transformers_and_back(kind, vocab, tie, corpus, tmp_path, rng):
    # Start from an HF model's architecture, train it in myriad, export, load in transformers.
    hf_model(kind, vocab, tie, seed=1).save_pretrained(tmp_path / "hf", safe_serialization=True)
    _, config = hf.import_hf(str(tmp_path / "hf"), str(tmp_path / "imported"), tokenizer=TOKENIZER)
    engine = myriad_engine(config, corpus, tmp_path / "run")
    for _ in range(3):
        engine.step()
    saved = engine.save()
    files = hf.export_hf(saved, str(tmp_path / "out"))
    assert {os.path.basename(f) for f in files} >= {"model.safetensors", "config.json"}
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).eval()
    assert type(loaded).__name__ == ("GPT2LMHeadModel" if kind == "gpt2" else "LlamaForCausalLM")
    assert loaded.config.tie_word_embeddings == tie
    tokens = tokens_for(vocab, rng)
    ours = engine.forward(tokens)
    assert np.abs(ours - hf_logits(loaded, tokens)).max() <= TOLERANCE
    # ... and back into myriad: the same logits bit for bit (float32 copies throughout).
    checkpoint, config2 = hf.import_hf(str(tmp_path / "out"), str(tmp_path / "back"), tokenizer=TOKENIZER)
    again = myriad_engine(config2, corpus, tmp_path / "run2", checkpoint)
    assert np.array_equal(again.forward(tokens), ours)


def test_trained_gpt2_without_linear_biases_exports_exactly(corpus, tmp_path, rng):
    # model.bias false drops the linear layers' biases; GPT-2's LayerNorms keep theirs and train
    # them, so the export must carry them (it wrote zeros: logits off by 1e-2 after a few steps).
    hf_model("gpt2", 300, True, seed=2).save_pretrained(tmp_path / "hf", safe_serialization=True)
    _, imported = hf.import_hf(str(tmp_path / "hf"), str(tmp_path / "imported"), tokenizer=TOKENIZER)
    config = myriad.Config.from_file(str(imported))
    config.set("model.bias=false")
    (tmp_path / "no_bias.yaml").write_text(config.to_yaml())
    engine = myriad_engine(tmp_path / "no_bias.yaml", corpus, tmp_path / "run")
    for _ in range(3):
        engine.step()
    hf.export_hf(engine.save(), str(tmp_path / "out"))
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).eval()
    tokens = tokens_for(300, rng)
    assert np.abs(engine.forward(tokens) - hf_logits(loaded, tokens)).max() <= TOLERANCE
    ln_bias = loaded.transformer.h[0].ln_1.bias.detach().numpy()
    assert np.abs(ln_bias).max() > 0  # trained LayerNorm biases, not zeros: the comparison can fail
    assert np.abs(loaded.transformer.h[0].attn.c_attn.bias.detach().numpy()).max() == 0


def rewrite(folder, out, change):
    """Copy an HF folder with its tensors changed by change(dict)."""
    os.makedirs(out, exist_ok=True)
    tensors, metadata = myriad.read_safetensors(os.path.join(folder, "model.safetensors"))
    change(tensors)
    myriad.write_safetensors(os.path.join(out, "model.safetensors"), tensors, metadata)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)


def test_fused_qkv_and_gate_up_import_to_the_same_model(corpus, tmp_path, rng):
    model = hf_model("llama", 320, False, seed=3)
    model.save_pretrained(tmp_path / "hf", safe_serialization=True)

    def fuse(t):
        for i in range(2):
            p = f"model.layers.{i}."
            t[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [t.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
            t[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [t.pop(p + "mlp.gate_proj.weight"), t.pop(p + "mlp.up_proj.weight")])

    rewrite(tmp_path / "hf", tmp_path / "fused", fuse)
    tokens = tokens_for(320, rng)
    results = []
    for name in ("hf", "fused"):
        checkpoint, config = hf.import_hf(str(tmp_path / name), str(tmp_path / f"ck_{name}"), tokenizer=TOKENIZER)
        results.append(myriad_engine(config, corpus, tmp_path / f"run_{name}", checkpoint).forward(tokens))
    assert np.array_equal(results[0], results[1])


def test_mismatched_files_are_refused_naming_the_tensors(tmp_path):
    hf_model("gpt2", 300, True, seed=4).save_pretrained(tmp_path / "hf", safe_serialization=True)
    cases = {
        "extra": (lambda t: t.__setitem__("transformer.h.0.attn.extra.weight", np.zeros(3, np.float32)),
                  "transformer.h.0.attn.extra.weight"),
        "missing": (lambda t: t.pop("transformer.h.1.mlp.c_fc.bias"), "lacks tensor 'transformer.h.1.mlp.c_fc.bias'"),
        "shape": (lambda t: t.__setitem__("transformer.ln_f.weight", np.zeros(31, np.float32)),
                  "tensor 'transformer.ln_f.weight' .* has shape \\[31\\]"),
    }
    for name, (change, message) in cases.items():
        rewrite(tmp_path / "hf", tmp_path / name, change)
        with pytest.raises(hf.HfError, match=message):
            hf.import_hf(str(tmp_path / name), str(tmp_path / f"ck_{name}"))
        assert not os.path.exists(tmp_path / f"ck_{name}" / "step_00000000")  # nothing half-written
    # The command line says the same and exits 2.
    result = subprocess.run([sys.executable, "-m", "myriad.convert", "import", "--format", "hf",
                             str(tmp_path / "extra"), str(tmp_path / "ck_cli")],
                            env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "transformer.h.0.attn.extra.weight" in result.stderr
    # A pickle is refused with what to do instead.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"\x80")
    with pytest.raises(hf.HfError, match="pytorch_model.bin"):
        hf.import_hf(str(tmp_path / "bin"), str(tmp_path / "ck_bin"))


def test_unrepresentable_models_are_refused(corpus, tmp_path):
    config = tmp_path / "moe.yaml"
    config.write_text("model: {architecture: moe, vocab_size: 320, n_layer: 1, n_head: 2, n_embd: 32, "
                      "context_length: 32, num_experts: 2}\n")
    engine = myriad_engine(config, corpus, tmp_path / "run")
    with pytest.raises(hf.HfError, match="architecture moe"):
        hf.export_hf(engine.save(), str(tmp_path / "out"))


@pytest.mark.skipif(not os.path.exists(os.path.join(SHARED_DATA, "gpt2", "encoder.json")),
                    reason="GPT-2 tokenizer files not found (MYRIAD_SHARED_DATA)")
def test_gpt2_tokenizer_files_travel_with_the_export(corpus, tmp_path):
    config = tmp_path / "gpt2.yaml"
    config.write_text(f"""model: {{architecture: gpt2, vocab_size: 50257, n_layer: 1, n_head: 2, n_embd: 32, \
context_length: 32}}
data: {{path: {corpus}, tokenizer: "gpt2:{os.path.join(SHARED_DATA, 'gpt2')}"}}
training: {{micro_batch: 2, seq_len: 32, steps: 2}}
logging: {{measure_peak: false, dir: {tmp_path}/logs, level: warn}}
checkpoint: {{dir: {tmp_path}/checkpoints}}
""")
    engine = myriad.Engine(myriad.Config.from_file(str(config)))
    engine.step()
    hf.export_hf(engine.save(), str(tmp_path / "out"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    text = "Hello world, the cat sees a red apple.\n  Numbers 12345 and ünïcödé!"
    assert tokenizer.encode(text) == engine.tokenizer().encode(text)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).eval()
    assert loaded.config.eos_token_id == engine.tokenizer().eot_id == 50256
    ids = np.array([engine.tokenizer().encode(text)[:32]])
    assert np.abs(engine.forward(ids) - hf_logits(loaded, ids)).max() <= TOLERANCE
    # myriad's own tokenizer folder option reads the exported (Hugging Face) file names.
    checkpoint, imported = hf.import_hf(str(tmp_path / "out"), str(tmp_path / "back"), data_path=str(corpus))
    assert f"gpt2:{tmp_path / 'out'}" in open(imported).read()
