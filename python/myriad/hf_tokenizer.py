"""Which tokenizer a run imported from a Hugging Face folder uses (`import --format hf`).

The imported embeddings only mean something under the tokenizer the model was trained with, so the
choice is never silent. choose_tokenizer() returns the `data.tokenizer` spec and a one-line note:
- an explicit spec (--tokenizer) is recorded as given;
- GPT-2 files in the folder (encoder.json + vocab.bpe, or vocab.json + merges.txt) give
  gpt2:<folder>, as before;
- a tokenizer.json alone is converted when it is GPT-2-style byte-level BPE (model.type BPE, a
  ByteLevel pre-tokenizer with GPT-2's regex and no prefix space, no normalizer, no byte_fallback,
  no non-special added tokens, an "<|endoftext|>" token): encoder.json + vocab.bpe are written to
  `out_dir`, loaded back with myriad's tokenizer (and, when the `tokenizers` library is there,
  checked to encode a probe text to the same ids) and recorded as gpt2:<out_dir> (bpe:<file> when
  model.vocab_size is under GPT-2's 50257, which the gpt2: option requires);
- any other tokenizer.json, half a GPT-2 pair, or no tokenizer at all is refused (HfError) naming
  the file and the reason.
Invariant: a converted tokenizer has ids 0..N-1 with N <= the model's vocab_size, and encodes
ordinary text to the ids the original tokenizer gives (special tokens inside text are plain text,
as everywhere in myriad).
"""
import json
import os
import shutil
import tempfile

from . import _myriad

END_OF_TEXT = "<|endoftext|>"
# src/config/run_config.cpp: data.tokenizer gpt2:<dir> requires model.vocab_size >= GPT-2's size.
_GPT2_VOCAB = 50257
_PROBE_TEXT = ("Hello world, the cat's 12345 apples  didn't fall.\n\n\tTabs\r\n"
               "ünïcödé Ωμέγα 日本語のテキスト 🙂 end ")


class TokenizerError(ValueError):
    """A folder's tokenizer that cannot be used; the message names the file and the reason."""


def byte_to_unicode():
    """GPT-2's reversible map from each byte to a printable character (the byte-level alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping, shifted = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + shifted)
            shifted += 1
    return mapping


def choose_tokenizer(hf_dir, out_dir, model_vocab, explicit=None):
    """(data.tokenizer spec, note for imported.yaml) for the folder `hf_dir`; see the file comment."""
    if explicit:
        return explicit, f"data.tokenizer from --tokenizer {explicit}"
    pair = _gpt2_pair(hf_dir)
    if pair:
        return f"gpt2:{os.path.abspath(hf_dir)}", f"data.tokenizer: {' + '.join(pair)} of {os.path.abspath(hf_dir)}"
    path = os.path.join(hf_dir, "tokenizer.json")
    if os.path.exists(path):
        spec = convert_tokenizer_json(path, out_dir, model_vocab)
        return spec, f"data.tokenizer: {os.path.abspath(path)} converted to {spec}"
    raise TokenizerError(
        f"import --format hf: {hf_dir} has no tokenizer (tokenizer.json, vocab.json + merges.txt or encoder.json + "
        "vocab.bpe); training would learn a new BPE whose ids mean other strings under the imported embeddings. "
        "Pass --tokenizer gpt2:<dir> or bpe:<file> naming the model's tokenizer, or --tokenizer train:<V> to learn "
        "a new one knowingly")


def _gpt2_pair(hf_dir):
    """The GPT-2 file pair the folder holds (names), None when it holds neither file of either pair."""
    for vocab, merges in (("encoder.json", "vocab.bpe"), ("vocab.json", "merges.txt")):
        has = [os.path.exists(os.path.join(hf_dir, n)) for n in (vocab, merges)]
        if all(has):
            return vocab, merges
        if any(has):
            present, missing = (vocab, merges) if has[0] else (merges, vocab)
            raise TokenizerError(f"import --format hf: {hf_dir} has {present} but no {missing}; a GPT-2 tokenizer "
                                 "needs both")
    return None


def convert_tokenizer_json(path, out_dir, model_vocab):
    """Converts a byte-level BPE tokenizer.json into `out_dir`; returns the data.tokenizer spec."""
    spec = _read_json(path)
    _check_byte_level_bpe(path, spec)
    vocab = _vocabulary(path, spec)
    merges = _merges(path, spec["model"].get("merges"))
    _require(len(vocab) <= model_vocab, path, f"{len(vocab)} tokens, more than the model's vocab_size {model_vocab} "
             "(config.json): ids past the embedding rows")
    with tempfile.TemporaryDirectory() as staging:
        _write_gpt2_pair(staging, vocab, merges)
        tokenizer = _load_converted(path, staging)
        _require(tokenizer.vocab_size == len(vocab), path, f"converted to {tokenizer.vocab_size} tokens, "
                 f"expected {len(vocab)}")
        _check_same_ids(path, tokenizer)
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        shutil.copytree(staging, out_dir)
    out_dir = os.path.abspath(out_dir)
    if model_vocab >= _GPT2_VOCAB:
        return f"gpt2:{out_dir}"
    tokenizer.save(os.path.join(out_dir, "tokenizer.bpe"))
    return f"bpe:{os.path.join(out_dir, 'tokenizer.bpe')}"


def _require(condition, path, reason):
    if not condition:
        raise TokenizerError(f"{path}: {reason}")


def _refuse_kind(path, what):
    raise TokenizerError(f"{path}: {what} is not GPT-2-style byte-level BPE; myriad reads byte-level BPE only — "
                         "convert it, or pass --tokenizer gpt2:<dir>|bpe:<file>")


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerError(f"{path}: unreadable ({e})") from None
    _require(isinstance(spec, dict) and isinstance(spec.get("model"), dict), path, "no 'model' object")
    return spec


def _check_byte_level_bpe(path, spec):
    """Refuses, naming the key, whatever would make myriad's GPT-2 BPE give other ids."""
    model = spec["model"]
    if model.get("type") != "BPE":
        _refuse_kind(path, f"model.type {model.get('type')}")
    if model.get("byte_fallback"):
        _refuse_kind(path, "model.byte_fallback true (sentencepiece-style byte fallback)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        _require(not model.get(key), path, f"model.{key} '{model.get(key)}' is not supported")
    _require(model.get("dropout") in (None, 0, 0.0), path, f"model.dropout {model.get('dropout')} (BPE dropout) "
             "is not supported")
    _require(not model.get("ignore_merges"), path, "model.ignore_merges true gives other ids than GPT-2's merges")
    if spec.get("normalizer"):
        _refuse_kind(path, f"normalizer {_kind(spec['normalizer'])}")
    _check_pre_tokenizer(path, spec.get("pre_tokenizer"))
    decoder = spec.get("decoder")
    if decoder and _type(decoder) != "ByteLevel":
        _refuse_kind(path, f"decoder {_kind(decoder)}")
    post = spec.get("post_processor")
    _require(not post or _type(post) == "ByteLevel", path, f"post_processor {_kind(post)} adds tokens to every "
             "sequence; myriad's tokenizer adds none")


def _type(component):
    return component.get("type") if isinstance(component, dict) else None


def _kind(component):
    """'Sequence(NFC, Lowercase)' style name of a tokenizers component."""
    if not isinstance(component, dict):
        return repr(component)
    inner = [c for key in ("pretokenizers", "normalizers", "decoders", "processors") for c in component.get(key, [])]
    return component.get("type", "?") + (f"({', '.join(_kind(c) for c in inner)})" if inner else "")


def _check_pre_tokenizer(path, pre):
    if _type(pre) != "ByteLevel":
        _refuse_kind(path, f"pre_tokenizer {_kind(pre)}" + (" (sentencepiece-style)" if "Metaspace" in _kind(pre)
                                                             else ""))
    _require(pre.get("use_regex", True), path, "pre_tokenizer ByteLevel with use_regex false does not split text "
             "as GPT-2 does")
    _require(not pre.get("add_prefix_space", False), path, "pre_tokenizer ByteLevel add_prefix_space true "
             "(myriad's tokenizer adds no space in front of the text)")


def _vocabulary(path, spec):
    """Token string -> id: model.vocab plus the special added tokens, ids 0..N-1."""
    vocab = spec["model"].get("vocab")
    _require(isinstance(vocab, dict) and vocab, path, "model.vocab is not a non-empty object of token -> id")
    _require(all(isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()), path,
             "model.vocab holds an id that is not an integer")
    vocab, used = dict(vocab), set(vocab.values())
    alphabet = byte_to_unicode()
    for token in spec.get("added_tokens") or []:
        content, token_id = token.get("content"), token.get("id")
        _require(isinstance(content, str) and isinstance(token_id, int), path, f"added_tokens entry {token!r} lacks "
                 "a string content or an integer id")
        _require(token.get("special", False), path, f"added token '{content}' (id {token_id}) is not special: "
                 "Hugging Face matches it inside ordinary text, myriad's byte-level BPE cannot")
        key = "".join(alphabet[b] for b in content.encode("utf-8"))
        _require(vocab.get(key, token_id) == token_id, path, f"added token '{content}' has id {token_id}, "
                 f"model.vocab gives it {vocab.get(key)}")
        _require(key in vocab or token_id not in used, path, f"added token '{content}' reuses id {token_id} of "
                 "another token")
        vocab[key] = token_id
        used.add(token_id)
    _require(END_OF_TEXT in vocab, path, f"no '{END_OF_TEXT}' token; myriad's GPT-2 tokenizer needs it as its "
             "end-of-text id")
    ids = sorted(vocab.values())
    _require(ids == list(range(len(ids))), path, f"token ids are not 0..{len(ids) - 1} (myriad needs them dense)")
    missing = [b for b, c in alphabet.items() if c not in vocab]
    _require(not missing, path, f"lacks the byte token(s) {missing[:8]} of the byte-level alphabet")
    return vocab


def _merges(path, merges):
    """model.merges as (left, right) pairs: "left right" strings or [left, right] lists."""
    _require(isinstance(merges, list), path, "model.merges is not a list")
    pairs = []
    for rank, merge in enumerate(merges):
        parts = merge.split(" ") if isinstance(merge, str) else merge
        _require(isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, str) and p and p.split() == [p]
                                                                     for p in parts),
                 path, f"model.merges[{rank}] {merge!r} is not a pair of byte-level tokens")
        pairs.append(parts)
    return pairs


def _write_gpt2_pair(folder, vocab, merges):
    with open(os.path.join(folder, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{left} {right}\n" for left, right in merges))


def _load_converted(path, folder):
    try:
        return _myriad.BpeTokenizer.load_gpt2(os.path.join(folder, "encoder.json"), os.path.join(folder, "vocab.bpe"))
    except _myriad.Error as e:
        raise TokenizerError(f"{path}: not a byte-level BPE myriad can read: {e}") from None


def _check_same_ids(path, tokenizer):
    """With the `tokenizers` library at hand, the original and the converted encode a probe alike."""
    try:
        import tokenizers
    except ImportError:
        return
    try:
        theirs = tokenizers.Tokenizer.from_file(path).encode(_PROBE_TEXT, add_special_tokens=False).ids
    except Exception as e:  # noqa: BLE001 — the library's own reason, reported with the file
        raise TokenizerError(f"{path}: the tokenizers library cannot read it ({e})") from None
    ours = tokenizer.encode(_PROBE_TEXT)
    _require(theirs == ours, path, f"the converted tokenizer encodes {_PROBE_TEXT!r} to other ids than tokenizers does "
             f"({ours[:12]} vs {theirs[:12]})")
