"""myriad.BpeTokenizer: training a byte-level BPE (round trips on any text, save/load keeps the
ids) and loading OpenAI's GPT-2 files (the ids of encoder.json; the same ids as a float-free
reference implementation of GPT-2's bpe() written here, when the `regex` module is present).

The GPT-2 files and tinyshakespeare live in the shared data folder: $MYRIAD_SHARED_DATA, else
<repo>/../shared/data; the tests that need them skip when it is absent."""
import json
import os
from functools import lru_cache

import pytest

import myriad

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED_DATA = os.environ.get("MYRIAD_SHARED_DATA", os.path.join(REPO, "..", "shared", "data"))
GPT2_DIR = os.path.join(SHARED_DATA, "gpt2")
SHAKESPEARE = os.path.join(SHARED_DATA, "tinyshakespeare.txt")

TRAIN_TEXT = (
    "the quick brown fox jumps over the lazy dog. the dog sleeps; the fox runs away.\n"
    "A tokenizer learns merges from frequent pairs: th, he, the, ' the', ' dog' ...\n"
    "Numbers 12345 and 2024-11-29, tabs\tand  double  spaces, CAPITALS and MiXeD.\n"
) * 20 + "Ünïcödé wörds: café, naïve, Straße, 日本語のテキスト, Ελληνικά, emoji 🙂👍🏽🚀.\n" * 5

ROUND_TRIP_TEXTS = [
    "",
    "the quick brown fox",
    "  leading and trailing spaces  ",
    "line one\nline two\r\n\ttabbed\n\n",
    "punctuation!?... (brackets) [x] {y} 'quotes' \"double\" it's we'll",
    "café naïve Straße Ünïcödé",
    "日本語のテキスト and Ελληνικά and русский",
    "emoji 🙂👍🏽🚀 family 👨‍👩‍👧 flag 🇫🇷",
    "<|endoftext|> is ordinary text here",
    "words never seen in training: xylophone quizzical 9876543210",
]


@pytest.fixture(scope="module")
def trained():
    return myriad.BpeTokenizer.train(TRAIN_TEXT, 300)


def test_train_vocabulary(trained):
    assert trained.vocab_size == 300
    assert trained.eot_id == 299  # added last
    # 43 merges were learned: the training text takes far fewer tokens than bytes.
    assert len(trained.encode(TRAIN_TEXT)) < 0.7 * len(TRAIN_TEXT.encode("utf-8"))
    # Single bytes are ids 0..255 (id = byte value) for text without merges.
    assert trained.encode("\x00\x7f") == [0, 127]


def test_train_is_deterministic(trained):
    again = myriad.BpeTokenizer.train(TRAIN_TEXT, 300)
    for text in ROUND_TRIP_TEXTS:
        assert again.encode(text) == trained.encode(text)


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_train_round_trip(trained, text):
    ids = trained.encode(text)
    assert all(isinstance(i, int) and 0 <= i < trained.vocab_size for i in ids)
    assert trained.eot_id not in ids  # "<|endoftext|>" in the text is not the special token
    assert trained.decode(ids) == text
    assert len(ids) <= len(text.encode("utf-8"))


GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _reference_bpe_train(text, vocab_size):
    """The documented training rule, naively: count adjacent pairs inside the pre-tokenised pieces
    (weighted by piece count), merge the most frequent (ties: smallest (left id, right id))
    everywhere, left to right; a merge whose bytes already are a token reuses that id. Returns
    (token bytes by id, merges as ((left, right), result) in rank order), eot not included."""
    regex = pytest.importorskip("regex")
    pieces = {}
    for piece in regex.findall(GPT2_PATTERN, text):
        word = tuple(piece.encode("utf-8"))
        pieces[word] = pieces.get(word, 0) + 1
    tokens = [bytes([b]) for b in range(256)]
    by_bytes = {t: i for i, t in enumerate(tokens)}
    merges = []
    words = [(list(w), n) for w, n in pieces.items()]
    while len(tokens) < vocab_size - 1:
        counts = {}
        for w, n in words:
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        joined = tokens[best[0]] + tokens[best[1]]
        if joined not in by_bytes:
            by_bytes[joined] = len(tokens)
            tokens.append(joined)
        result = by_bytes[joined]
        merges.append((best, result))
        for w, _ in words:
            i = 0
            while i + 1 < len(w):
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [result]
                i += 1
    return tokens, merges


def _reference_bpe_encode(merges, text):
    """GPT-2's bpe() on ids: merge the lowest-ranked adjacent pair (leftmost) until none is left."""
    regex = pytest.importorskip("regex")
    ranks = {pair: (rank, result) for rank, (pair, result) in enumerate(merges)}
    ids = []
    for piece in regex.findall(GPT2_PATTERN, text):
        w = list(piece.encode("utf-8"))
        while len(w) > 1:
            rank, i = min((ranks.get(pair, (float("inf"), 0))[0], i) for i, pair in enumerate(zip(w, w[1:])))
            if rank == float("inf"):
                break
            w[i:i + 2] = [merges[rank][1]]
        ids.extend(w)
    return ids


def test_train_matches_reference_trainer(trained):
    tokens, merges = _reference_bpe_train(TRAIN_TEXT, 300)
    assert len(tokens) + 1 == trained.vocab_size
    for text in [TRAIN_TEXT] + ROUND_TRIP_TEXTS:
        assert trained.encode(text) == _reference_bpe_encode(merges, text), text


def test_decode_of_a_cut_character_is_replaced(trained):
    ids = trained.encode("€")  # 3 UTF-8 bytes, no merge learned for them
    assert len(ids) == 3
    assert trained.decode(ids[:1]) == "\ufffd"
    assert trained.decode(ids) == "€"


def test_decode_rejects_out_of_range_ids(trained):
    with pytest.raises(myriad.Error, match="300"):
        trained.decode([1, 2, 300])
    with pytest.raises(myriad.Error, match="-1"):
        trained.decode([-1])


def test_save_load_keeps_ids(trained, tmp_path):
    path = str(tmp_path / "tok.bpe")
    trained.save(path)
    with open(path, encoding="ascii") as f:
        assert f.readline() == "myriad-bpe 1\n"
    loaded = myriad.BpeTokenizer.load(path)
    assert loaded.vocab_size == trained.vocab_size and loaded.eot_id == trained.eot_id
    for text in ROUND_TRIP_TEXTS + [TRAIN_TEXT]:
        assert loaded.encode(text) == trained.encode(text)
        assert loaded.decode(loaded.encode(text)) == text


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(myriad.Error, match="no_such.bpe"):
        myriad.BpeTokenizer.load(str(tmp_path / "no_such.bpe"))
    bad = tmp_path / "bad.bpe"
    bad.write_text("not a tokenizer\n")
    with pytest.raises(myriad.Error, match=r"bad\.bpe:1"):
        myriad.BpeTokenizer.load(str(bad))


# ---------------------------------------------------------------------------------------------
# GPT-2


@pytest.fixture(scope="module")
def gpt2():
    if not os.path.isfile(os.path.join(GPT2_DIR, "encoder.json")):
        pytest.skip(f"GPT-2 files not found in {GPT2_DIR} (set MYRIAD_SHARED_DATA)")
    return myriad.BpeTokenizer.load_gpt2(os.path.join(GPT2_DIR, "encoder.json"), os.path.join(GPT2_DIR, "vocab.bpe"))


@pytest.fixture(scope="module")
def encoder():
    with open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def shakespeare():
    if not os.path.isfile(SHAKESPEARE):
        pytest.skip(f"{SHAKESPEARE} not found (set MYRIAD_SHARED_DATA)")
    with open(SHAKESPEARE, encoding="utf-8") as f:
        return f.read(2000)


def test_gpt2_ids_come_from_encoder_json(gpt2, encoder):
    assert gpt2.vocab_size == len(encoder) == 50257
    assert gpt2.eot_id == encoder["<|endoftext|>"]
    assert gpt2.encode("Hello world") == [encoder["Hello"], encoder["Ġworld"]]
    assert gpt2.encode(" world\n") == [encoder["Ġworld"], encoder["Ċ"]]


def test_end_of_text_in_text_is_ordinary_unless_allowed_special(gpt2, encoder):
    text = "one<|endoftext|>two"
    plain = gpt2.encode(text)
    assert encoder["<|endoftext|>"] not in plain and gpt2.decode(plain) == text  # the default: not a boundary
    special = gpt2.encode("one") + [gpt2.eot_id] + gpt2.encode("two")
    for allowed in (True, "all", {"<|endoftext|>"}):
        assert gpt2.encode(text, allowed_special=allowed) == special
    with pytest.raises(ValueError, match="'<|im_start|>' is not a special token"):
        gpt2.encode(text, allowed_special={"<|im_start|>"})
    transformers = pytest.importorskip("transformers")
    # Hugging Face's GPT-2 tokenizer from the same files maps the literal to the one special id.
    hf = transformers.GPT2Tokenizer(os.path.join(GPT2_DIR, "encoder.json"), os.path.join(GPT2_DIR, "vocab.bpe"))
    assert hf.encode(text) == special


def test_gpt2_round_trips_shakespeare(gpt2, shakespeare):
    assert len(shakespeare) == 2000
    ids = gpt2.encode(shakespeare)
    assert gpt2.decode(ids) == shakespeare
    assert len(ids) < len(shakespeare) / 2.5  # English text: well under one token per 2.5 chars
    for text in ROUND_TRIP_TEXTS:
        assert gpt2.decode(gpt2.encode(text)) == text


def _bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable characters."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _reference_gpt2_encoder(encoder):
    """GPT-2's encode: regex pre-tokenisation, then merge the lowest-ranked pair until none."""
    regex = pytest.importorskip("regex")
    pattern = regex.compile(GPT2_PATTERN)
    with open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line and not line.startswith("#version")]
    ranks = {tuple(line.split()): r for r, line in enumerate(lines)}
    byte_map = _bytes_to_unicode()

    @lru_cache(maxsize=None)
    def bpe(piece):
        word = list(piece)
        while len(word) > 1:
            first, second = min(zip(word, word[1:]), key=lambda pair: ranks.get(pair, float("inf")))
            if (first, second) not in ranks:
                break
            merged, i = [], 0
            while i < len(word):  # every occurrence of the best pair, left to right
                if i + 1 < len(word) and word[i] == first and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return [encoder[token] for token in word]

    def encode(text):
        ids = []
        for piece in pattern.findall(text):
            ids.extend(bpe("".join(byte_map[b] for b in piece.encode("utf-8"))))
        return ids

    return encode


def test_gpt2_matches_reference_encoder(gpt2, encoder, shakespeare):
    reference = _reference_gpt2_encoder(encoder)
    extra = [shakespeare, "Hello world", "  spaces\n\n\ttabs   and 123 4567 numbers", "it's we'll I'd"]
    for text in extra + ROUND_TRIP_TEXTS:
        assert gpt2.encode(text) == reference(text), text
