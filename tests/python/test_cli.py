"""The `myriad` command (python/myriad/cli.py) as users call it: its help lists every subcommand,
each subcommand answers with its own usage, `myriad train` is the training driver, an unknown
subcommand names the valid ones, and `myriad data` runs the C++ myriad-data program — found in
the documented order — with the arguments given and passes its exit code through.

Run as `sys.executable -m myriad.cli` against the package under test (package_under_test.py: the
source tree with PYTHONPATH=python, or the installed package with PYTHONPATH empty)."""
import os
import stat
import subprocess
import sys
import sysconfig

import pytest

from myriad import cli, run
from package_under_test import DRIVER, PYTHONPATH

SUBCOMMANDS = ["train", "run", "data", "convert", "plot", "plan", "goodput", "sbatch", "cluster-sim", "audit", "keys",
               "serve"]


def myriad(args, tmp_path, **env):
    """`myriad ARGS` in a fresh folder; env entries set to None are removed."""
    environ = dict(os.environ, PYTHONPATH=PYTHONPATH)
    environ.pop(cli.DATA_PROGRAM_ENV, None)
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return subprocess.run([sys.executable, "-m", "myriad.cli", *args], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=120)


def fake_program(folder, exit_code=0, body=""):
    """An executable `myriad-data` in `folder` that writes its arguments, one a line, to args.txt
    beside it and exits with `exit_code`."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(str(folder), "myriad-data")
    record = os.path.join(str(folder), "args.txt")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > '{record}'\n{body}exit {exit_code}\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path, record


def test_help_lists_every_subcommand_with_one_line_each(tmp_path):
    result = myriad(["--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    listed = [line.split()[0] for line in lines if line.startswith("  ") and line.strip()]
    assert listed == SUBCOMMANDS, result.stdout
    assert list(cli.COMMANDS) == SUBCOMMANDS
    # The old console commands are named as aliases.
    for alias in ("myriad-train", "myriad-run", "myriad-plot", "myriad-convert", "myriad-data"):
        assert alias in result.stdout


def test_no_subcommand_prints_the_usage_and_fails(tmp_path):
    result = myriad([], tmp_path)
    assert result.returncode == 2
    assert "usage: myriad <command>" in result.stdout


@pytest.mark.parametrize("command, own_text", [
    ("train", "myriad training driver"),
    ("run", "Supervised launch"),
    ("convert", "checkpoint <-> safetensors"),
    ("plot", "PNG charts of a myriad run"),
    ("plan", "will it fit, how fast, which layout"),
    ("goodput", "--mtbf-hours"),
    ("sbatch", "--gpus-per-node"),
    ("cluster-sim", "--policies"),
])
def test_each_subcommand_answers_help_with_its_own_usage(command, own_text, tmp_path):
    result = myriad([command, "--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: "), result.stdout
    assert own_text in result.stdout, result.stdout


def test_train_usage_names_the_subcommand(tmp_path):
    result = myriad(["train", "--help"], tmp_path)
    assert result.stdout.startswith("usage: myriad train "), result.stdout


def test_myriad_train_is_the_training_driver(tmp_path):
    """Same arguments, same answer as the driver (python/train.py, or myriad-train when installed)."""
    args = ["--config", str(tmp_path / "missing.yaml"), "--model_type", "gpt2"]
    driver = subprocess.run([sys.executable, DRIVER, *args], cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=PYTHONPATH), capture_output=True, text=True, timeout=120)
    result = myriad(["train", *args], tmp_path)
    assert driver.returncode == 2, driver.stderr
    assert (result.returncode, result.stdout, result.stderr) == (driver.returncode, driver.stdout, driver.stderr)
    assert "--model_type does not apply" in result.stderr


def test_an_unknown_subcommand_fails_naming_the_valid_ones(tmp_path):
    result = myriad(["deploy"], tmp_path)
    assert result.returncode != 0
    assert "unknown command 'deploy'" in result.stderr
    for name in SUBCOMMANDS:
        assert name in result.stderr


def test_data_runs_the_program_with_the_arguments_and_passes_its_exit_code(tmp_path):
    program, record = fake_program(tmp_path / "bin", exit_code=7)
    args = ["inspect", "data/shard 0.bin", "--verify", "--x=1"]
    result = myriad(["data", *args], tmp_path, **{cli.DATA_PROGRAM_ENV: program})
    assert result.returncode == 7, result.stderr
    with open(record) as f:
        assert f.read().splitlines() == args


def test_data_exit_code_zero_and_output_pass_through(tmp_path):
    program, record = fake_program(tmp_path / "bin", exit_code=0, body="echo tokenized 42\n")
    result = myriad(["data", "tokenize"], tmp_path, **{cli.DATA_PROGRAM_ENV: program})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "tokenized 42\n"


def test_data_ended_by_a_signal_exits_128_plus_the_signal(tmp_path):
    program, _ = fake_program(tmp_path / "bin", body="kill -TERM $$\n")
    result = myriad(["data"], tmp_path, **{cli.DATA_PROGRAM_ENV: program})
    assert result.returncode == 128 + 15


def test_data_found_on_path(tmp_path):
    beside = [os.path.join(os.path.dirname(sys.executable), "myriad-data")]
    beside.append(os.path.join(sysconfig.get_path("scripts"), "myriad-data"))
    if any(os.access(p, os.X_OK) for p in beside):
        pytest.skip("a myriad-data next to the interpreter comes before PATH (installed package)")
    _, record = fake_program(tmp_path / "bin", exit_code=3)
    result = myriad(["data", "mix", "--steps", "4"], tmp_path,
                    PATH=str(tmp_path / "bin") + os.pathsep + os.environ.get("PATH", ""))
    assert result.returncode == 3, result.stderr
    with open(record) as f:
        assert f.read().splitlines() == ["mix", "--steps", "4"]


def test_data_program_not_found_names_where_it_looked(tmp_path):
    missing = str(tmp_path / "nowhere" / "myriad-data")
    result = myriad(["data", "inspect", "x"], tmp_path, **{cli.DATA_PROGRAM_ENV: missing})
    assert result.returncode != 0
    assert "myriad-data was not found" in result.stderr and missing in result.stderr


def test_data_program_lookup_order(tmp_path):
    """$MYRIAD_DATA_PROGRAM, then the interpreter's folder and the scripts folder, then PATH, then
    the source tree's build/tools/myriad-data; not found: None and every place looked at."""
    explicit, _ = fake_program(tmp_path / "explicit")
    beside, _ = fake_program(tmp_path / "venv" / "bin")
    scripts, _ = fake_program(tmp_path / "scripts")
    on_path, _ = fake_program(tmp_path / "path")
    tree, _ = fake_program(tmp_path / "build" / "tools")
    interpreter = str(tmp_path / "venv" / "bin" / "python3")
    empty = str(tmp_path / "empty")
    os.makedirs(empty)

    def find(environ, executable=interpreter, scripts_dir=str(tmp_path / "scripts"), source_tree=tree):
        return cli.find_data_program(environ=environ, executable=executable, scripts_dir=scripts_dir,
                                     source_tree_program=source_tree)[0]

    path_env = {"PATH": str(tmp_path / "path")}
    assert find(dict(path_env, **{cli.DATA_PROGRAM_ENV: explicit})) == explicit
    assert find(path_env) == beside
    assert find(path_env, executable=str(tmp_path / "empty" / "python3")) == scripts
    assert find(path_env, executable=str(tmp_path / "empty" / "python3"), scripts_dir=empty) == on_path
    assert find({"PATH": empty}, executable=str(tmp_path / "empty" / "python3"), scripts_dir=empty) == tree
    program, looked = cli.find_data_program(environ={"PATH": empty}, executable=str(tmp_path / "empty" / "python3"),
                                            scripts_dir=empty, source_tree_program=str(tmp_path / "no" / "myriad-data"))
    assert program is None
    assert looked == [os.path.join(empty, "myriad-data"), f"PATH ({empty})", str(tmp_path / "no" / "myriad-data")]


def test_the_supervisor_adds_resume_to_myriad_train():
    command = ["mpirun", "-np", "2", "myriad", "train", "--config", "c.yaml"]
    assert run.with_resume(command) == command + ["--resume", "auto"]
    module = ["mpirun", "-np", "2", sys.executable, "-m", "myriad.cli", "train", "--config", "c.yaml"]
    assert run.with_resume(module) == module + ["--resume", "auto"]
    assert run.with_resume(["myriad", "plan", "--config", "c.yaml"]) == ["myriad", "plan", "--config", "c.yaml"]
    assert run.with_resume(command + ["--resume", "none"]) == command + ["--resume", "none"]
