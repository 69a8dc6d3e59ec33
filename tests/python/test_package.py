"""The package the tests run against is the one asked for (package_under_test.py), and an
installed package (`pip install .`) brings its console commands, each of which answers --help
outside the source tree."""
import os
import pathlib
import subprocess
import sys

import pytest

import myriad
from package_under_test import INSTALLED, REPO

COMMANDS = ["myriad-train", "myriad-run", "myriad-plot", "myriad-convert", "myriad-data", "myriad"]


def test_the_package_under_test_is_the_one_asked_for():
    location = pathlib.Path(myriad.__file__).resolve()
    in_tree = pathlib.Path(REPO, "python").resolve() in location.parents
    assert in_tree != INSTALLED, f"myriad imported from {location} (MYRIAD_TEST_INSTALLED={int(INSTALLED)})"


@pytest.mark.skipif(not INSTALLED, reason="console commands exist in an installed package (MYRIAD_TEST_INSTALLED=1)")
@pytest.mark.parametrize("command", COMMANDS)
def test_console_commands_answer_help_outside_the_source_tree(command, tmp_path):
    path = os.path.join(os.path.dirname(sys.executable), command)
    assert os.access(path, os.X_OK), f"{command} is not installed next to {sys.executable}"
    result = subprocess.run([path, "--help"], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=""),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "usage" in (result.stdout + result.stderr).lower()


def test_the_source_tree_script_runs_the_same_driver(tmp_path):
    """python/train.py (the README's launch line) answers through myriad.train, from any folder."""
    result = subprocess.run([sys.executable, os.path.join(REPO, "python", "train.py"), "--help"], cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=""), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "myriad training driver" in result.stdout
