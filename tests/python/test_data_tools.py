"""myriad.tokenize_corpus and myriad.data (the myriad-data tools) from Python: shards whose tokens
decode back to the documents; tokenize equal to the command, bad lines reported, dedup and mix."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import myriad


def read_shard_tokens(path):
    """Token ids of a shard, read with NumPy from the documented 64-byte header layout."""
    raw = open(path, "rb").read()
    assert raw[:8] == b"MYRTOK\0\0"
    dtype_code = int.from_bytes(raw[12:16], "little")
    count = int.from_bytes(raw[24:32], "little")
    tokens = np.frombuffer(raw[64:], dtype=np.uint16 if dtype_code == 0 else np.int32)
    assert tokens.size == count
    return tokens.astype(np.int64)


def test_tokenize_corpus_round_trips(tmp_path):
    docs = [f"fortune number {i}: a penny saved is {i} pennies earned." for i in range(40)]
    corpus = tmp_path / "fortunes"
    corpus.write_text("\n%\n".join(docs) + "\n")
    tok = myriad.BpeTokenizer.train(" ".join(docs), 300)
    out = tmp_path / "shards"
    summary = myriad.tokenize_corpus([str(corpus)], str(out), tok, separator="%", val_fraction=0.1)
    assert summary["documents"] == 40
    assert summary["val_tokens"] > 0 and summary["train_tokens"] > summary["val_tokens"]
    ids = np.concatenate([read_shard_tokens(p) for p in summary["train_shards"] + summary["val_shards"]])
    assert ids.max() < tok.vocab_size
    texts = [t.strip() for t in tok.decode(ids.tolist()).split("<|endoftext|>") if t.strip()]
    assert sorted(texts) == sorted(docs)
    assert all(os.path.exists(p) for p in summary["train_shards"])


# ---- myriad.data: the myriad-data tools from Python ----

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("BUILD_DIR", ROOT / "build")) / "tools" / "myriad-data"


def write_jsonl_corpus(folder):
    folder.mkdir()
    with open(folder / "a.jsonl", "w") as f:
        for i in range(60):
            f.write(json.dumps({"text": f"paragraph {i % 25} says that the river runs past the mill {i % 25} times"})
                    + "\n")
        f.write("this line is not json\n")
    (folder / "b.txt").write_text("a plain text document\nwith two lines\n")
    return folder


def test_data_tokenize_matches_the_command_and_reports_bad_lines(tmp_path):
    corpus = write_jsonl_corpus(tmp_path / "corpus")
    summary = myriad.data.tokenize([str(corpus)], str(tmp_path / "py"), "bytes", val_fraction=0.1, shard_tokens=1000,
                                   compress=True, block_tokens=256, level=3)
    assert summary["input"]["problems"]["not_json"]["count"] == 1
    assert "a.jsonl:61" in summary["input"]["problems"]["not_json"]["examples"][0]
    assert summary["train_documents"] + summary["val_documents"] == 61
    shard = myriad.data.inspect(summary["train_shards"][0]["path"], verify=True)
    assert shard["format"].startswith("zstd blocks of 256") and shard["vocab_size"] == 257
    manifest = json.loads(pathlib.Path(summary["manifest"]).read_text())
    assert manifest["splits"]["train"]["tokens"] == summary["train_tokens"]
    if not CLI.exists():
        pytest.skip(f"{CLI} not built")
    subprocess.run([str(CLI), "tokenize", "--input", str(corpus), "--output", str(tmp_path / "cli"), "--tokenizer",
                    "bytes", "--val-fraction", "0.1", "--shard-tokens", "1000", "--block-tokens", "256", "--level",
                    "3"], check=True, capture_output=True)
    for path in sorted((tmp_path / "py").iterdir()):
        assert path.read_bytes() == (tmp_path / "cli" / path.name).read_bytes(), path.name


def test_data_dedup_and_mix(tmp_path):
    corpus = write_jsonl_corpus(tmp_path / "corpus")
    result = myriad.data.dedup([str(corpus)], str(tmp_path / "dedup"))
    assert result["documents_in"] == 61 and result["documents_out"] == 26  # 25 distinct paragraphs + b.txt
    assert result["exact_duplicates"] == 35 and result["kept"][:25] == [True] * 25
    kept = (tmp_path / "dedup" / "000000_a.jsonl").read_text().splitlines()
    assert len(kept) == 25
    removed = [json.loads(line) for line in open(result["removed"])]  # issue 46, item 16: removals named
    assert len(removed) == 35 and all(r["kind"] == "exact" and r["duplicate_of"] for r in removed)
    myriad.data.tokenize([str(corpus)], str(tmp_path / "one"), "bytes", shard_tokens=10000)
    myriad.data.tokenize([str(tmp_path / "dedup")], str(tmp_path / "two"), "bytes", shard_tokens=10000)
    plan = myriad.data.mix([(str(tmp_path / "one"), 3.0), (str(tmp_path / "two"), 1.0)], steps=50, batch=8,
                           seq_len=16)
    assert plan["exact"] and plan["run_tokens"] == 50 * 8 * 16
    assert sum(s["drawn_tokens"] for s in plan["sources"]) == plan["run_tokens"]
    assert 0.6 < plan["sources"][0]["share"] < 0.9
    assert "weight: 3" in plan["yaml"]
    with pytest.raises(myriad.Error, match="source 1"):
        myriad.data.mix([(str(tmp_path / "one"), 1.0), (str(tmp_path / "nowhere"), 1.0)], steps=1, batch=1, seq_len=4)


def test_dedup_command_keeps_ids_and_names_the_removed_list(tmp_path):
    # Issue 46, item 16: the output had lost every field but "text"; the removals were nowhere.
    if not CLI.exists():
        pytest.skip(f"{CLI} not built")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "the river runs past the mill and the mill turns all day long by the water"
    (corpus / "a.jsonl").write_text(json.dumps({"id": "first", "text": text, "url": "u1"}) + "\n"
                                    + json.dumps({"id": "second", "text": text, "url": "u2"}) + "\n")
    result = subprocess.run([str(CLI), "dedup", "--input", str(corpus), "--output", str(tmp_path / "out")],
                            check=True, capture_output=True, text=True)
    listed = str(tmp_path / "out" / "dedup_removed.jsonl")
    assert f"listed in {listed}" in result.stdout, result.stdout
    kept = [json.loads(line) for line in (tmp_path / "out" / "000000_a.jsonl").read_text().splitlines()]
    assert kept == [{"id": "first", "text": text, "url": "u1"}]
    removed = [json.loads(line) for line in open(listed)]
    assert removed == [{"removed": f"{corpus / 'a.jsonl'}:2", "removed_id": "second",
                        "duplicate_of": f"{corpus / 'a.jsonl'}:1", "duplicate_of_id": "first", "kind": "exact"}]


@pytest.mark.parametrize("subcommand", ["tokenize", "dedup", "mix", "inspect"])
def test_every_subcommand_answers_help_with_the_usage(subcommand):
    # Was: dedup "unknown argument '--help'", inspect an empty table then "cannot open token shard '--help'".
    for flag in ("--help", "-h"):
        result = subprocess.run([str(CLI), subcommand, flag], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("usage: myriad-data tokenize") and f"myriad-data {subcommand}" in result.stdout
        assert "unknown argument" not in result.stderr and "cannot open" not in result.stderr


def tokenized_folder(tmp_path):
    """A folder of several train shards and a val split, with its manifest.json (myriad-data tokenize)."""
    corpus = write_jsonl_corpus(tmp_path / "corpus")
    summary = myriad.data.tokenize([str(corpus)], str(tmp_path / "shards"), "bytes", val_fraction=0.1,
                                   shard_tokens=1000)
    assert len(summary["train_shards"]) >= 3
    return tmp_path / "shards", summary


def verify(folder, *extra):
    return subprocess.run([str(CLI), "inspect", str(folder), "--verify", *extra], capture_output=True, text=True,
                          timeout=60)


def test_inspect_verify_checks_the_folder_against_its_manifest(tmp_path):
    if not CLI.exists():
        pytest.skip(f"{CLI} not built")
    folder, summary = tokenized_folder(tmp_path)
    assert verify(folder).returncode == 0
    second = pathlib.Path(summary["train_shards"][1]["path"]).name
    # A shard the manifest lists, deleted: was "verified" before (issue 46 item 5).
    moved = tmp_path / "moved.bin"
    (folder / second).rename(moved)
    result = verify(folder)
    assert result.returncode == 1 and f"{second}: listed in manifest.json, missing from the folder" in result.stderr
    # Truncated, and corrupt with its size kept.
    data = moved.read_bytes()
    (folder / second).write_bytes(data[:-7])
    assert "(truncated or replaced)" in verify(folder).stderr
    (folder / second).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert "CRC-32 differs" in verify(folder).stderr
    (folder / second).write_bytes(data)
    (folder / "train_000099.bin").write_bytes(data)  # a stray shard of another tokenize
    assert "train_000099.bin: in the folder, not listed" in verify(folder).stderr
    (folder / "train_000099.bin").unlink()
    # No manifest (an interrupted tokenize): refused unless --plain.
    (folder / "manifest.json").unlink()
    result = verify(folder)
    assert result.returncode == 1 and "has no manifest.json" in result.stderr and "--plain" in result.stderr
    assert verify(folder, "--plain").returncode == 0


def test_training_refuses_a_shard_folder_with_a_gap(tmp_path):
    folder, summary = tokenized_folder(tmp_path)
    pathlib.Path(summary["train_shards"][1]["path"]).unlink()
    config = myriad.Config.from_string(
        "model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 300, context_length: 16}\n"
        "training: {steps: 1, micro_batch: 1, seq_len: 16}\n"
        f"data: {{path: {folder}}}\nlogging: {{dir: {tmp_path / 'run'}, measure_peak: false, level: warn}}\n",
        "t.yaml")
    with pytest.raises(myriad.Error, match="disagree with their manifest.json"):
        myriad.Engine(config)


def test_keys_that_would_not_act_on_a_shard_folder_are_refused(tmp_path):
    """Shards given as data.path are used as they are: a validation share, a split rule, a cache
    folder or at-rest encryption of the run's own shards would not act, so each is refused by name."""
    folder, _ = tokenized_folder(tmp_path)
    config = myriad.Config.from_string(
        "model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 300, context_length: 16}\n"
        "training: {steps: 1, micro_batch: 1, seq_len: 16}\n"
        f"data: {{path: {folder}, val_fraction: 0.1, cache_dir: {tmp_path / 'cache'}}}\n"
        f"logging: {{dir: {tmp_path / 'run'}, measure_peak: false, level: warn}}\n", "t.yaml")
    with pytest.raises(myriad.Error, match=r"holds token shards, used as they are .*: data.val_fraction, "
                                           r"data.cache_dir would not act"):
        myriad.Engine(config)


def test_tokenize_and_dedup_are_audited_with_their_output_digests(tmp_path):
    """With an audit key, myriad-data (rank 0) records data.tokenized (the manifest's SHA-256) and
    data.deduplicated (the report's) into ./audit.jsonl, a log `myriad audit verify` accepts."""
    if not CLI.exists():
        pytest.skip(f"{CLI} not built")
    from myriad import audit
    key = tmp_path / "audit.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    env = dict(os.environ, MYRIAD_AUDIT_KEY_FILE=str(key))
    env.pop("MYRIAD_AUDIT_LOG", None)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sees the ball.\n\nthe cat sees the ball.\n\na dog runs by the river.\n" * 20)
    subprocess.run([str(CLI), "tokenize", "--input", str(corpus), "--output", str(tmp_path / "shards"),
                    "--tokenizer", "bytes", "--val-fraction", "0.1"], check=True, capture_output=True, cwd=tmp_path,
                   env=env)
    documents = tmp_path / "documents.jsonl"
    documents.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["the river runs past the mill all day"] * 2
                                 + ["a dog chases the cat around the quiet garden"]))
    subprocess.run([str(CLI), "dedup", "--input", str(documents), "--output", str(tmp_path / "deduped")], check=True,
                   capture_output=True, cwd=tmp_path, env=env)
    log = tmp_path / "audit.jsonl"
    assert audit.verify(log, audit.load_key(key)).ok
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["action"] for r in records] == ["audit.log_created", "data.tokenized", "data.deduplicated"]
    tokenized, deduplicated = records[1], records[2]
    assert tokenized["details"]["manifest_sha256"] == audit.file_digest(tmp_path / "shards" / "manifest.json")
    assert tokenized["details"]["train_tokens"] > 0 and tokenized["target"] == str(tmp_path / "shards")
    assert deduplicated["details"]["report_sha256"] == audit.file_digest(tmp_path / "deduped" / "dedup_report.json")
    assert deduplicated["details"]["documents_in"] > deduplicated["details"]["documents_out"]
