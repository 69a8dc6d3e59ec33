"""training.cpu_gemm measured as a user runs it: python/train.py under mpirun with two ranks. The
first run times its GEMM shapes after step 1 and writes the machine's route cache; a second fresh
run into another folder takes every route from that cache (none timed) and prints the same losses
bit for bit; after the newest checkpoint is deleted, `--resume auto` installs the older
checkpoint's plan (none timed) and repeats the first run's last steps bit for bit."""
import json
import re
import shutil

from test_distributed_driver import driver, mpirun, pytestmark, tiny  # noqa: F401 (pytest fixture and mark)


def train_losses(log_dir):
    """{step: loss} of metrics.jsonl's train records (a resumed run's records replace the older ones)."""
    losses = {}
    for line in open(log_dir / "metrics.jsonl"):
        record = json.loads(line)
        if record["kind"] == "train":
            losses[record["step"]] = record["loss"]
    return losses


def test_measured_runs_share_the_machine_cache_and_resume_bit_for_bit(tiny):  # noqa: F811 (the fixture)
    config, root = tiny
    cache = root / "gemm_cache"

    def run(name, *extra):
        command = (f"MYRIAD_CPU_GEMM_CACHE={cache} " +
                   driver(config, f"--log_dir {root / name} --set parallel.dp=2 --set training.cpu_gemm=measured "
                                  f"--set checkpoint.every=4 " + " ".join(extra)))
        result, _ = mpirun(2, command)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output
        return output

    first = run("first")
    timed = re.search(r"CPU GEMMs after step 1: (\d+) shapes here: 0 from the run's plan, 0 from the machine's route "
                      r"cache \((\S+)\), \1 timed", first)
    assert timed, first
    assert list((cache / "cpu_gemm").glob("*.plan")) == [cache / "cpu_gemm" / timed.group(2).split("/")[-1]]
    manifest = json.loads((root / "first" / "checkpoints" / "step_00000008" / "manifest.json").read_text())
    assert manifest["cpu_gemm_plan"].count("\n") >= int(timed.group(1))

    second = run("second")
    assert re.search(r"CPU GEMMs after step 1: (\d+) shapes here: 0 from the run's plan, \1 from the machine's route "
                     r"cache \(.*\), none timed", second), second
    straight = train_losses(root / "first")
    assert train_losses(root / "second") == straight and len(straight) == 8

    shutil.rmtree(root / "first" / "checkpoints" / "step_00000008")
    resumed = run("first", "--resume auto")
    assert re.search(r"CPU GEMMs: the measured plan of \S+step_00000004 \(\d+ shapes\)", resumed), resumed
    assert re.search(r"CPU GEMMs after step 5: (\d+) shapes here: \1 from the run's plan, .*none timed",
                     resumed), resumed
    assert train_losses(root / "first") == straight
