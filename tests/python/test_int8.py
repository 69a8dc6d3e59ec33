"""Weight-only INT8 (myriad/int8.py, Engine.load_int8, `myriad-convert export --format int8`): a
trained tiny model (GPT-2, LLaMA with its untied embedding, MoE with its experts) exported to
INT8 is about a quarter of its fp32 file and within 1% of its validation loss; an engine serving
the file gives the logits and greedy tokens of the f32 model whose weights are the dequantised
ones (the int8 GEMM path is the same function); it holds no f32 copy of the int8 weights, no
gradients and no optimizer moments, and its memory report says so; per-group scales work;
training calls and foreign or broken files are refused naming the reason."""
import os
import subprocess
import sys

import numpy as np
import pytest

import myriad
from myriad import int8
from package_under_test import PYTHONPATH
from tiny_corpus import write_corpus

TINY_YAML = """\
model: {{architecture: {arch}, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 64, context_length: 32{extra}}}
training: {{micro_batch: 4, gradient_accumulation: 2, seq_len: 32, steps: 40, lr: 3.0e-3, warmup: 0, eval_every: 0,
           eval_batches: 8}}
data: {{path: {corpus}, tokenizer: "train:320"}}
checkpoint: {{dir: {run}/checkpoints}}
logging: {{measure_peak: false, dir: {run}/logs, level: warn}}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """gpt2 (tied head), llama (untied) and moe (LLaMA blocks, 4 experts, top 2) tiny models trained
    40 steps, saved."""
    root = tmp_path_factory.mktemp("int8")
    corpus = write_corpus(root / "corpus.txt")
    out = {}
    for arch in ("gpt2", "llama", "moe"):
        extra = ", moe_base: llama, num_experts: 4, top_k: 2, expert_ffn_hidden: 96" if arch == "moe" else ""
        config = myriad.Config.from_string(TINY_YAML.format(arch=arch, corpus=corpus, run=root / arch, extra=extra))
        engine = myriad.Engine(config)
        for _ in range(40):
            engine.step()
        out[arch] = (config, engine.save(), root)
    return out


def engine_for(config, run):
    config.set(f"logging.dir={run}/logs")
    config.set(f"checkpoint.dir={run}/checkpoints")
    return myriad.Engine(config)


DENSE = {"gpt2": ["attn.qkv.weight", "attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight"],
         "llama": ["attn.qkv.weight", "attn.proj.weight", "mlp.gate.weight", "mlp.up.weight", "mlp.down.weight"],
         "moe": ["attn.qkv.weight", "attn.proj.weight", "moe.experts.gate.weight", "moe.experts.up.weight",
                 "moe.experts.down.weight"]}


@pytest.mark.parametrize("arch", ["gpt2", "llama", "moe"])
def test_int8_file_is_small_and_keeps_the_validation_loss(arch, trained, tmp_path):
    config, checkpoint, _ = trained[arch]
    report = int8.export_int8(checkpoint, str(tmp_path / "model.int8.safetensors"))
    expected = {f"blocks.{layer}.{w}" for layer in range(2) for w in DENSE[arch]}
    expected |= {"wte"} if arch == "gpt2" else {"wte", "lm_head.weight"}  # the embedding, tied or not
    assert set(report["quantized"]) == expected
    kept = {name for names in report["kept_f32"].values() for name in names}
    assert not kept & expected and all(not name.endswith(".weight") or "norm" in name or "ln" in name or
                                       name.endswith("router.weight") for name in kept), kept
    if arch == "moe":
        assert {"blocks.0.moe.router.weight", "blocks.1.moe.router.weight"} <= kept
        tensors, _ = myriad.read_safetensors(report["path"])
        assert tensors["blocks.0.moe.experts.down.weight"].dtype == np.int8
        assert tensors["blocks.0.moe.experts.down.weight.scales"].shape == (4, 64, 1)  # per expert, per channel
    assert report["int8_bytes"] < 0.40 * report["fp32_bytes"]
    assert report["smaller_than_bf16"] > (0.35 if arch == "gpt2" else 0.40), report
    losses = int8.evaluate_int8(checkpoint, report["path"], str(tmp_path / "work"))
    assert abs(losses["relative_change"]) < 0.01, losses
    assert losses["int8"] != losses["fp32"]  # the int8 weights are really used


@pytest.mark.parametrize("arch,group_size", [("gpt2", 0), ("llama", 0), ("llama", 16), ("moe", 0)])
def test_served_int8_equals_the_f32_model_on_dequantised_weights(arch, group_size, trained, tmp_path, rng):
    config, checkpoint, root = trained[arch]
    path = int8.export_int8(checkpoint, str(tmp_path / "m.safetensors"), group_size)["path"]
    served = engine_for(config, tmp_path / "served")
    served.load_int8(path)
    assert served.serves_int8
    reference = engine_for(config, tmp_path / "reference")
    reference.load(checkpoint)
    tensors, metadata = myriad.read_safetensors(path)
    assert metadata["quantization"] == "int8-weight-only" and metadata["group_size"] == str(group_size)
    params = reference.parameters()
    for name in tensors:
        if name.endswith(".scales") or tensors[name].dtype != np.int8:
            continue
        q, scales = tensors[name], tensors[name + ".scales"]  # per expert matrix for 3-D weights
        deq = myriad.ops.dequantize_int8(myriad.from_numpy(q.reshape(-1, q.shape[-1])),
                                         myriad.from_numpy(scales.reshape(-1, scales.shape[-1])), group_size)
        params[name].numpy()[...] = deq.numpy().reshape(q.shape)
    tokens = rng.integers(0, 320, size=(3, 32))
    np.testing.assert_allclose(served.forward(tokens), reference.forward(tokens), rtol=1e-4, atol=1e-4)
    greedy = dict(max_new_tokens=8, temperature=0, details=True)
    assert list(served.generate([1, 2, 3], **greedy)["ids"]) == list(reference.generate([1, 2, 3], **greedy)["ids"])
    t, y = served.train_batch()
    served.forward(t, y)
    with pytest.raises(myriad.Error, match="serves an INT8 export"):
        served.backward()
    with pytest.raises(myriad.Error, match="Engine.step: this engine serves an INT8 export"):
        served.step()


@pytest.mark.parametrize("arch", ["gpt2", "llama", "moe"])
def test_served_int8_holds_no_f32_copy_of_its_int8_weights(arch, trained, tmp_path):
    config, checkpoint, _ = trained[arch]
    path = int8.export_int8(checkpoint, str(tmp_path / "m.safetensors"))["path"]
    tensors, _ = myriad.read_safetensors(path)
    served = engine_for(config, tmp_path / "served")
    f32_report = served.memory_report()
    served.load_int8(path)
    int8_names = {name for name, t in tensors.items() if t.dtype == np.int8}
    held = served.parameters()
    # No int8 weight has an f32 value (the embedding's int8 rows are looked up), and every f32
    # tensor of the file is held as loaded.
    assert set(held) & int8_names == set()
    for name, t in tensors.items():
        if t.dtype != np.int8 and not name.endswith(".scales"):
            np.testing.assert_array_equal(held[name].numpy(), t)
    padded = lambda n: (n + 15) // 16 * 16  # noqa: E731 (the store keeps 64-byte alignment)
    f32_kept = sum(padded(t.size) for name, t in tensors.items() if t.dtype != np.int8 and not name.endswith(".scales"))
    int8_bytes = sum(t.nbytes for name, t in tensors.items() if t.dtype == np.int8 or name.endswith(".scales"))
    report = served.memory_report()
    assert report["parameters"] == 4 * f32_kept + int8_bytes
    assert report["parameters"] < 0.5 * f32_report["parameters"]
    assert report["gradients"] == 0 and report["optimizer"] == 0
    with pytest.raises(myriad.Error, match="holds no gradients"):
        served.gradients()
    with pytest.raises(myriad.Error, match="Engine.save: this engine serves an INT8 export"):
        served.save()
    with pytest.raises(myriad.Error, match="Engine.load: this engine serves an INT8 export"):
        served.load(checkpoint)
    with pytest.raises(myriad.Error, match="serves an INT8 export already"):
        served.load_int8(path)
    assert np.isfinite(served.evaluate())


def test_foreign_and_broken_files_are_refused(trained, tmp_path):
    config, checkpoint, _ = trained["gpt2"]
    plain = str(tmp_path / "plain.safetensors")
    myriad.export_safetensors(checkpoint, plain)
    engine = engine_for(config, tmp_path / "e")
    with pytest.raises(myriad.Error, match="not a weight-only INT8 export"):
        engine.load_int8(plain)
    path = int8.export_int8(checkpoint, str(tmp_path / "m.safetensors"))["path"]
    tensors, metadata = myriad.read_safetensors(path)
    del tensors["blocks.1.attn.proj.weight.scales"]
    myriad.write_safetensors(str(tmp_path / "broken.safetensors"), tensors, metadata)
    with pytest.raises(myriad.Error, match="without 'blocks.1.attn.proj.weight.scales'"):
        engine.load_int8(str(tmp_path / "broken.safetensors"))
    assert not engine.serves_int8  # nothing changed
    # The command line prints the sizes and the losses.
    result = subprocess.run([sys.executable, "-m", "myriad.convert", "export", "--format", "int8", "--evaluate",
                             checkpoint, str(tmp_path / "cli.safetensors")],
                            env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "fp32" in result.stdout and "bf16" in result.stdout and "validation loss: fp32" in result.stdout
