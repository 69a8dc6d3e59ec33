"""myriad.tokenize_corpus from Python: shards whose tokens decode back to the documents."""
import os

import numpy as np

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
