"""scripts/check_layers.py: the repository's include graph has no upward edge and no cycle, and
the script does catch one (a communication source including a parallel-layer header, planted in
a copy)."""
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layers.py"


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def test_the_repository_has_no_upward_include():
    result = run(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "none upward, no cycle" in result.stdout


def test_a_planted_upward_include_is_named_with_its_file_and_line(tmp_path):
    for folder in ("include", "src", "kernels"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    source = tmp_path / "src" / "distributed" / "communicator.cpp"
    source.write_text('#include "myriad/parallel/zero_layout.h"\n' + source.read_text())
    result = run(tmp_path)
    assert result.returncode == 1
    assert "src/distributed/communicator.cpp:1: distributed includes parallel" in result.stdout
    assert "cycle: " in result.stdout  # distributed -> parallel -> distributed

