"""myriad.Config's generic key access (python/bindings/config.cpp over config/config_keys.h): every
key reads as cfg["section.key"] from the C++ field tables, writes take the checks of a --set
override, unknown keys raise KeyError naming the closest key, and no key has a hand-written
property any more."""
import pytest
import yaml

import myriad
from myriad.config_values import model_in_use

TEXT = """\
model: {architecture: llama, vocab_size: 1000, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 64, context_length: 32}
training: {micro_batch: 2, steps: 5, lr: 1.0e-3, schedule: linear, recompute: selective}
parallel: {pp_schedule: gpipe}
logging: {dir: runs/keys}
"""


@pytest.fixture
def cfg():
    return myriad.Config.from_string(TEXT, "keys.yaml")


def test_every_key_of_to_dict_round_trips_through_getitem(cfg):
    values = cfg.to_dict()
    flat = [f"{section}.{key}" for section, keys in values.items() for key in keys]
    assert flat == cfg.keys() == list(cfg)
    assert list(values) == ["model", "parallel", "training", "data", "checkpoint", "logging", "sample", "security"]
    text = cfg.to_yaml()
    for section, keys in values.items():
        for key, value in keys.items():
            path = f"{section}.{key}"
            assert path in cfg
            assert cfg[path] == value, path
            assert type(cfg[path]) is type(value), path
            cfg[path] = value  # writing back what was read changes nothing
    assert cfg.to_yaml() == text


def test_a_copy_is_independent_of_its_original(cfg):
    import copy

    before = cfg.to_yaml()
    for duplicate in (cfg.copy(), copy.copy(cfg)):
        assert duplicate.to_yaml() == before
        duplicate.set("training.lr=0.5")
        duplicate["parallel.pp_schedule"] = "1f1b"
        assert duplicate["training.lr"] == 0.5 and duplicate["parallel.pp_schedule"] == "1f1b"
    assert cfg.to_yaml() == before and cfg["training.lr"] == 1.0e-3


def test_values_are_python_values_and_match_the_yaml(cfg):
    assert cfg["training.micro_batch"] == 2
    assert cfg["training.lr"] == 1e-3
    assert cfg["training.schedule"] == "linear" and cfg["training.recompute"] == "selective"
    assert cfg["parallel.pp_schedule"] == "gpipe"
    assert cfg["parallel.sequence_parallel"] is False
    assert cfg["model.bias"] is None  # auto
    assert isinstance(cfg["training.no_decay"], list) and all(isinstance(x, str) for x in cfg["training.no_decay"])
    assert cfg["training.batch_size"] == cfg["training.global_batch_size"]  # an alias reads its key
    stored = yaml.safe_load(cfg.to_yaml())
    for section, keys in cfg.to_dict().items():
        for key, value in keys.items():
            if value is not None:
                assert stored[section][key] == value, f"{section}.{key}"


def test_resolved_and_derived_values_come_from_the_engine_rules(cfg):
    assert cfg["checkpoint.dir"] == "" and cfg["model.ffn_hidden"] == 0
    resolved = cfg.resolved()
    assert resolved["checkpoint.dir"] == "runs/keys/checkpoints"
    assert resolved["model.ffn_hidden"] == 192  # round_up(8 * 64 / 3, 64) for llama
    assert resolved["model.bias"] is False and resolved["training.seq_len"] == 32
    assert cfg.derived() == {"model.family": "llama", "model.padded_vocab_size": 1024, "model.head_dim": 16,
                             "model.moe_top_k": 0, "model.expert_ffn": 192, "model.moe_capacity_factor": 1.25}
    m = model_in_use(cfg)
    assert m["n_kv_head"] == 2 and m["padded_vocab_size"] == 1024 and m["attention.kind"] == "dense"


def test_unknown_keys_raise_key_error_naming_the_closest(cfg):
    with pytest.raises(KeyError, match=r"unknown key 'training\.stepz' \(did you mean 'steps'\?\)"):
        cfg["training.stepz"]
    with pytest.raises(KeyError, match=r"unknown section 'trainin' \(did you mean 'training'\?\)"):
        cfg["trainin.steps"]
    with pytest.raises(KeyError, match="section.key"):
        cfg["steps"] = 3
    assert "training.steps" in cfg and "training.batch_size" in cfg
    assert "training.stepz" not in cfg and "steps" not in cfg and "model.padded_vocab_size" not in cfg


def test_setting_a_key_validates_like_set(cfg):
    cfg["training.steps"] = 7
    cfg["training.lr"] = 1  # an int for a float key
    cfg["model.architecture"] = "GPT2"  # choices match without regard to case
    cfg["model.bias"] = True
    cfg["training.no_decay"] = ["norm"]
    assert (cfg["training.steps"], cfg["training.lr"], cfg["model.architecture"]) == (7, 1.0, "gpt2")
    assert cfg["model.bias"] is True and cfg["training.no_decay"] == ["norm"]
    cfg["model.bias"] = None
    assert cfg["model.bias"] is None
    before = cfg.to_yaml()
    with pytest.raises(myriad.Error, match=r"training\.micro_batch: must be >= 1, got 0"):
        cfg["training.micro_batch"] = 0
    with pytest.raises(myriad.Error, match=r"training\.lr: expected float, got a string \('fast'\)"):
        cfg["training.lr"] = "fast"
    with pytest.raises(myriad.Error, match=r"model\.architecture: must be one of gpt2, llama, moe, got 'gpt3'"):
        cfg["model.architecture"] = "gpt3"
    with pytest.raises(myriad.Error, match=r"training\.steps: expected int, got a boolean"):
        cfg["training.steps"] = True
    with pytest.raises(TypeError, match="expected None, bool, int, float, str or a list of str"):
        cfg["training.steps"] = object()
    assert cfg.to_yaml() == before  # failed writes change nothing
    cfg.set("training.steps=9")  # the text form of the same write
    assert cfg["training.steps"] == 9


def test_no_hand_written_config_properties_remain(cfg):
    for name in ("logging_dir", "logging_every", "logging_level", "steps", "eval_every", "checkpoint_every",
                 "checkpoint_async", "checkpoint_dir", "resume", "sample", "seed", "data_tokenizer", "model"):
        assert not hasattr(cfg, name), name
