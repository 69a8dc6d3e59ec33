"""The tokenizer of `import --format hf` (myriad/hf_tokenizer.py), without `transformers`: a folder
whose only tokenizer is a byte-level BPE tokenizer.json (written here by hand from GPT-2's files,
merges as "a b" strings and as [a, b] pairs) imports with that tokenizer and encodes like GPT-2's
encoder.json + vocab.bpe (and like the `tokenizers` library, when it is installed); any other
tokenizer.json, a malformed one, one larger than the embedding, half a GPT-2 pair or no tokenizer at
all is refused naming the file and the reason, and nothing is written."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import myriad
from myriad import hf
from myriad.hf_tokenizer import byte_to_unicode
from package_under_test import PYTHONPATH, REPO
from tiny_corpus import write_corpus

SHARED_DATA = os.environ.get("MYRIAD_SHARED_DATA", os.path.join(REPO, "..", "shared", "data"))
GPT2_DIR = os.path.join(SHARED_DATA, "gpt2")
TEXTS = ["Hello world, the cat's 12345 apples didn't fall.", "  leading spaces\n\n\ttabs and\r\nnewlines   ",
         "ünïcödé Ωμέγα 日本語のテキスト 🙂", "<|endoftext|> is plain text here", ""]

needs_gpt2 = pytest.mark.skipif(not os.path.exists(os.path.join(GPT2_DIR, "encoder.json")),
                                reason=f"GPT-2 tokenizer files not found in {GPT2_DIR} (MYRIAD_SHARED_DATA)")


def llama_folder(folder, vocab, seed=0):
    """A tiny LLaMA model folder (config.json + model.safetensors), no tokenizer files."""
    rng = np.random.default_rng(seed)
    C, F, p = 8, 16, "model.layers.0."
    shapes = {"model.embed_tokens.weight": (vocab, C), "model.norm.weight": (C,),
              p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
              p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C), p + "mlp.down_proj.weight": (C, F)}
    shapes.update({p + f"self_attn.{n}_proj.weight": (C, C) for n in "qkvo"})
    os.makedirs(folder, exist_ok=True)
    tensors = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    myriad.write_safetensors(os.path.join(folder, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "vocab_size": vocab, "hidden_size": C, "intermediate_size": F,
                   "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 32,
                   "tie_word_embeddings": True}, f)
    return folder


def byte_level_spec(vocab, merges, eot_id):
    """What `tokenizers` saves for a GPT-2-style byte-level BPE."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": eot_id, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": True, "special": True}],
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": dict(byte_level),
            "decoder": dict(byte_level),
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": merges}}


def gpt2_spec(merges_as_pairs=False):
    with open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
        merges = [line for line in f.read().split("\n") if line and not line.startswith("#version")]
    return byte_level_spec(vocab, [m.split(" ") for m in merges] if merges_as_pairs else merges, vocab["<|endoftext|>"])


def write_spec(folder, spec):
    path = os.path.join(folder, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    return path


def gpt2_reference():
    return myriad.BpeTokenizer.load_gpt2(os.path.join(GPT2_DIR, "encoder.json"), os.path.join(GPT2_DIR, "vocab.bpe"))


def tokenizer_of(config_path):
    spec = myriad.Config.from_file(str(config_path))["data.tokenizer"]
    kind, where = spec.split(":", 1)
    if kind == "bpe":
        return myriad.BpeTokenizer.load(where)
    return myriad.BpeTokenizer.load_gpt2(os.path.join(where, "encoder.json"), os.path.join(where, "vocab.bpe"))


def assert_refused(tmp_path, folder, *fragments):
    with pytest.raises(hf.HfError) as refusal:
        hf.import_hf(str(folder), str(tmp_path / "ck"))
    for fragment in fragments:
        assert fragment in str(refusal.value)
    assert not os.path.exists(tmp_path / "ck")  # nothing written: no checkpoint, config or tokenizer
    return str(refusal.value)


@needs_gpt2
@pytest.mark.parametrize("merges_as_pairs", [False, True], ids=["merge_strings", "merge_pairs"])
def test_byte_level_tokenizer_json_alone_imports_and_encodes_like_the_gpt2_pair(merges_as_pairs, tmp_path):
    folder = llama_folder(tmp_path / "hf", 50257)
    write_spec(folder, gpt2_spec(merges_as_pairs))
    checkpoint, config = hf.import_hf(str(folder), str(tmp_path / "ck"))
    text = open(config).read()
    assert f'tokenizer: "gpt2:{tmp_path / "ck" / "tokenizer"}"' in text
    assert f"# data.tokenizer: {folder / 'tokenizer.json'} converted to gpt2:" in text
    imported, reference = tokenizer_of(config), gpt2_reference()
    assert imported.vocab_size == reference.vocab_size == 50257 and imported.eot_id == reference.eot_id
    for sample in TEXTS:
        assert imported.encode(sample) == reference.encode(sample)
    assert os.path.isdir(checkpoint)


@needs_gpt2
def test_converted_tokenizer_gives_the_ids_of_the_tokenizers_library(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    folder = llama_folder(tmp_path / "hf", 50257)
    path = write_spec(folder, gpt2_spec())
    _, config = hf.import_hf(str(folder), str(tmp_path / "ck"))
    theirs, ours = tokenizers.Tokenizer.from_file(path), tokenizer_of(config)
    for sample in TEXTS[:-2]:  # not the special token: Hugging Face matches it inside text, myriad does not
        assert ours.encode(sample) == theirs.encode(sample, add_special_tokens=False).ids


def test_small_byte_level_tokenizer_json_is_recorded_as_a_myriad_bpe_file(tmp_path):
    # A vocabulary under GPT-2's 50257: gpt2:<dir> needs model.vocab_size >= 50257, bpe:<file> does not.
    trained = myriad.BpeTokenizer.train(write_corpus(tmp_path / "corpus.txt").read_text(), 300)
    trained.save(str(tmp_path / "trained.bpe"))
    lines = (tmp_path / "trained.bpe").read_text().split("\n")
    n, eot, m = (int(lines[i].split()[1]) for i in (1, 2, 3))
    alphabet = byte_to_unicode()
    names = ["".join(alphabet[b] for b in bytes.fromhex(h)) for h in lines[4:4 + n]]
    merges = [[names[int(i)] for i in line.split()] for line in lines[4 + n:4 + n + m]]
    folder = llama_folder(tmp_path / "hf", 320)
    write_spec(folder, byte_level_spec({name: i for i, name in enumerate(names)}, merges, eot))
    _, config = hf.import_hf(str(folder), str(tmp_path / "ck"))
    assert f'tokenizer: "bpe:{tmp_path / "ck" / "tokenizer" / "tokenizer.bpe"}"' in open(config).read()
    imported = tokenizer_of(config)
    assert imported.vocab_size == 300 and imported.eot_id == eot
    for sample in TEXTS + ["the old man paints the blue house."]:
        assert imported.encode(sample) == trained.encode(sample)


def metaspace(spec):
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    spec["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}


def unigram(spec):
    spec["model"] = {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["▁a", -1.0]], "byte_fallback": False}


def set_key(section, key, value):
    return lambda spec: spec[section].__setitem__(key, value)


REFUSED = {
    "metaspace": (metaspace, "pre_tokenizer Metaspace (sentencepiece-style) is not GPT-2-style byte-level BPE"),
    "unigram": (unigram, "model.type Unigram is not GPT-2-style byte-level BPE"),
    "wordpiece": (set_key("model", "type", "WordPiece"), "model.type WordPiece"),
    "byte_fallback": (set_key("model", "byte_fallback", True), "model.byte_fallback true"),
    "normalizer": (lambda s: s.__setitem__("normalizer", {"type": "Sequence", "normalizers": [{"type": "NFC"}]}),
                   "normalizer Sequence(NFC)"),
    "prefix_space": (set_key("pre_tokenizer", "add_prefix_space", True), "add_prefix_space true"),
    "other_split": (lambda s: s.__setitem__("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}}, {"type": "ByteLevel", "use_regex": False}]}),
                    "pre_tokenizer Sequence(Split, ByteLevel)"),
    "template": (lambda s: s.__setitem__("post_processor", {"type": "TemplateProcessing"}),
                 "post_processor TemplateProcessing adds tokens"),
    "plain_added_token": (lambda s: s["added_tokens"].append({"id": 50257, "content": "  ", "special": False}),
                          "added token '  ' (id 50257) is not special"),
    "no_end_of_text": (lambda s: (s["model"]["vocab"].pop("<|endoftext|>"), s["added_tokens"].clear()),
                       "no '<|endoftext|>' token"),
}


@needs_gpt2
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_tokenizer_json_that_is_not_gpt2_byte_level_bpe_is_refused_naming_file_and_reason(case, tmp_path):
    change, reason = REFUSED[case]
    spec = gpt2_spec()
    change(spec)
    folder = llama_folder(tmp_path / "hf", 50257)
    path = write_spec(folder, spec)
    assert_refused(tmp_path, folder, f"{path}: ", reason)


def test_malformed_tokenizer_json_is_refused_naming_the_file(tmp_path):
    folder = llama_folder(tmp_path / "hf", 320)
    (folder / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {')
    assert_refused(tmp_path, folder, f"{folder / 'tokenizer.json'}: unreadable")
    # The command line says the same and exits 2.
    result = subprocess.run([sys.executable, "-m", "myriad.convert", "import", "--format", "hf", str(folder),
                             str(tmp_path / "ck")], env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and f"{folder / 'tokenizer.json'}: unreadable" in result.stderr


@needs_gpt2
def test_tokenizer_json_larger_than_the_embedding_is_refused_naming_both_numbers(tmp_path):
    folder = llama_folder(tmp_path / "hf", 50000)
    path = write_spec(folder, gpt2_spec())
    assert_refused(tmp_path, folder, f"{path}: 50257 tokens, more than the model's vocab_size 50000")


def test_folder_without_tokenizer_is_refused_unless_one_is_named(tmp_path):
    folder = llama_folder(tmp_path / "hf", 320)
    message = assert_refused(tmp_path, folder, f"{folder} has no tokenizer", "--tokenizer")
    assert "new BPE" in message
    _, config = hf.import_hf(str(folder), str(tmp_path / "ck"), tokenizer="train:300")
    text = open(config).read()
    assert 'tokenizer: "train:300"' in text and "# data.tokenizer from --tokenizer train:300" in text
    # The command line takes the same choice.
    result = subprocess.run([sys.executable, "-m", "myriad.convert", "import", "--format", "hf", str(folder),
                             str(tmp_path / "cli"), "--tokenizer", "train:256"],
                            env=dict(os.environ, PYTHONPATH=PYTHONPATH), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 'tokenizer: "train:256"' in (tmp_path / "cli" / "imported.yaml").read_text()


def test_half_a_gpt2_pair_is_refused_naming_the_missing_file(tmp_path):
    folder = llama_folder(tmp_path / "hf", 320)
    (folder / "vocab.json").write_text("{}")
    assert_refused(tmp_path, folder, "has vocab.json but no merges.txt")


@needs_gpt2
def test_gpt2_pair_is_recorded_as_the_folder_itself(tmp_path):
    folder = llama_folder(tmp_path / "hf", 50257)
    for name, ours in (("vocab.json", "encoder.json"), ("merges.txt", "vocab.bpe")):
        (folder / name).write_bytes(open(os.path.join(GPT2_DIR, ours), "rb").read())
    write_spec(folder, {"model": {"type": "Unigram"}})  # the pair wins, as before tokenizer.json was read
    _, config = hf.import_hf(str(folder), str(tmp_path / "ck"))
    assert f'tokenizer: "gpt2:{folder}"' in open(config).read()
    assert not os.path.exists(tmp_path / "ck" / "tokenizer")
