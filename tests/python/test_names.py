"""Deleted names stay deleted: no tracked file (the CHANGELOG, which records history, aside) uses
the old namespace `myriad::dist`, a path under the deleted `dist/` folders, or words a reader of
this repository cannot resolve ("GPU window", "seed documents", the deleted "device trainer" and
"GPU twin"), and the widths and files the shard plan and the Engine's parts replaced; the
concrete names are `myriad::distributed`, `distributed/...`, "the GPU check"
(scripts/gpu_check.sh), "the cluster-training recipe" and "the 1.6T MoE recipe"
(docs/architecture.md). The scan does catch a planted use."""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# (what, pattern): each pattern names one deleted thing.
DELETED = [
    ("namespace myriad::dist", re.compile(r"myriad::dist\b(?!ributed)")),
    ("namespace dist::", re.compile(r"(?<![\w:.])dist::")),
    ("folder dist/", re.compile(r"(?<![\w/.-])dist/")),
    ("'GPU window'", re.compile(r"gpu[ _]?window", re.IGNORECASE)),
    ("'seed document(s)'", re.compile(r"seed[ _]?documents?(?![a-z])", re.IGNORECASE)),
    ("'device trainer'", re.compile(r"device[ _]?trainer", re.IGNORECASE)),
    ("'the seed's' (a design document)", re.compile(r"\bthe seed's", re.IGNORECASE)),
    ("'GPU twin'", re.compile(r"gpu[ _]?twins?(?![a-z])", re.IGNORECASE)),
    # The shard plan and the Engine's parts replaced these (docs/shard_plan.md, docs/architecture.md).
    ("TransformerConfig::local_*(tp) widths", re.compile(r"\blocal_(heads|kv_heads|ffn|qkv_width)\(")),
    ("Engine::model_split", re.compile(r"\bEngine::model_split\b|\bmodel_split\(model_config\)")),
    ("file engine_research.cpp", re.compile(r"\bengine_research\.cpp\b")),
]
EXEMPT = {"CHANGELOG.md", "tests/python/test_names.py"}


def tracked_files():
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [line for line in out.splitlines() if line not in EXEMPT]


def uses_of_deleted_names(root, names):
    found = []
    for name in names:
        path = root / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in DELETED:
                if pattern.search(line):
                    found.append(f"{name}:{number}: {what}: {line.strip()}")
    return found


def test_no_tracked_file_uses_a_deleted_name():
    found = uses_of_deleted_names(ROOT, tracked_files())
    assert not found, "deleted names in use:\n" + "\n".join(found)


def test_a_planted_deleted_name_is_found_with_its_file_and_line(tmp_path):
    planted = tmp_path / "src" / "x.cpp"
    planted.parent.mkdir()
    planted.write_text("// fine\nusing myriad::dist::Communicator;  // dist/communicator.h\n// the GPU window\n")
    found = uses_of_deleted_names(tmp_path, ["src/x.cpp"])
    assert [entry.split(": ")[0] for entry in found] == ["src/x.cpp:2", "src/x.cpp:2", "src/x.cpp:3"]
    clean = tmp_path / "ok.cpp"
    clean.write_text("namespace myriad::distributed {}  // distributed/communicator.h, build/dist/x, dist_rank\n")
    assert uses_of_deleted_names(tmp_path, ["ok.cpp"]) == []
