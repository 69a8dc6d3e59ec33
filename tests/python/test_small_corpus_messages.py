"""A corpus that cannot train says so in the config's terms: an empty data.path folder names
data.path and what it may hold; a corpus too small for one sequence names the split, its token
count, training.seq_len + 1 and what to change (not the sampler's internals)."""
import pytest

import myriad

YAML = """\
model: {{n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 300, context_length: 32}}
training: {{steps: 1, micro_batch: 1, seq_len: 32}}
data: {{path: {path}, tokenizer: "train:300"}}
logging: {{dir: {run}, measure_peak: false, level: warn}}
"""


def engine_error(tmp_path, path):
    config = myriad.Config.from_string(YAML.format(path=path, run=tmp_path / "run"), "t.yaml")
    with pytest.raises(myriad.Error) as refusal:
        myriad.Engine(config)
    return str(refusal.value)


def test_an_empty_corpus_folder_names_data_path(tmp_path):
    (tmp_path / "corpus").mkdir()
    message = engine_error(tmp_path, tmp_path / "corpus")
    assert f"data.path '{tmp_path / 'corpus'}' holds no corpus files" in message
    assert "token shards" in message


def test_a_corpus_too_small_for_one_sequence_says_what_to_change(tmp_path):
    corpus = tmp_path / "small.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 6)
    message = engine_error(tmp_path, corpus)
    assert "split of" in message and "fewer than one sequence of training.seq_len + 1 = 33" in message
    assert "lower training.seq_len" in message and "EvalSampler" not in message
