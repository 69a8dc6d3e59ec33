"""myriad.operations.sbatch: the batch script's directives and launch line, its bash syntax, the world-size
check naming parallel.*, and the requeue logic run for real in bash with fake srun/scontrol on PATH
(stopped by USR1 -> requeued, preempted by Slurm -> requeued, finished -> not, failed -> not, TERM without a
preemption -> not, no progress -> not). The same script under a live Slurm: tests/python/test_slurm_live.py."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from myriad.operations import sbatch

PLAN = """\
model:
  n_head: 16
  n_embd: 1024
parallel:
  tp: 8
  pp: 2
training:
  steps: 600
  device: cuda
logging:
  dir: runs/big
"""


@pytest.fixture
def plan(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    return str(path)


def render(plan, **fields):
    values = dict(config=plan, nodes=4, gpus_per_node=8)
    values.update(fields)
    return sbatch.render_sbatch(sbatch.SbatchRequest(**values))


def test_directives_and_launch_line(plan):
    text = render(plan, partition="gpu", account="llm", switches=1, switches_wait="2:00:00", cpus_per_task=12,
                  overrides=["training.lr=1e-4"], job_name="gpt")
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    for expected in ["--job-name=gpt", "--nodes=4", "--ntasks-per-node=8", "--gpus-per-node=8", "--cpus-per-task=12",
                     "--exclusive", "--time=24:00:00", "--partition=gpu", "--account=llm", "--switches=1@2:00:00",
                     "--output=./%x-%j.out", "--open-mode=append", "--requeue", "--signal=B:USR1@180"]:
        assert f"#SBATCH {expected}" in directives, expected
    launch = next(line for line in text.splitlines() if line.startswith("LAUNCH=("))
    assert launch.startswith("LAUNCH=(srun --mpi=pmix --distribution=block --gpu-bind=none")
    assert "--cpus-per-task=12" in launch
    assert 'python3 -m myriad.train --config "$CONFIG" --resume auto --set training.lr=1e-4)' in launch
    assert f"CONFIG={plan}" in text
    assert "CHECKPOINT_DIR=runs/big/checkpoints" in text
    assert "TRAINING_STEPS=600" in text
    assert "export OMP_NUM_THREADS=12" in text
    assert "# layout: world 32 = tp 8 x cp 1 x dp 2 x pp 2" in text
    # The directives must come before the first command, or sbatch ignores them.
    first_command = next(k for k, line in enumerate(text.splitlines()) if line and not line.startswith("#"))
    assert max(k for k, line in enumerate(text.splitlines()) if line.startswith("#SBATCH")) < first_command


def test_mpirun_launcher_and_supervisor(plan):
    text = render(plan, launcher="mpirun", restarts=2, environment={"NCCL_DEBUG": "WARN"})
    launch = next(line for line in text.splitlines() if line.startswith("LAUNCH=("))
    assert launch.startswith("LAUNCH=(python3 -m myriad.run --max-restarts 2 --backoff 30 -- mpirun -np 32 "
                             "--map-by ppr:8:node --rank-by slot --bind-to none -x OMP_NUM_THREADS -x PYTHONPATH "
                             "-x NCCL_DEBUG python3 -m myriad.train")
    assert "export NCCL_DEBUG=WARN" in text


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_rendered_script_passes_bash_syntax_check(plan, tmp_path, launcher):
    script = tmp_path / "job.sbatch"
    script.write_text(render(plan, launcher=launcher, setup=["echo set up"], overrides=["sample.prompt=a b c"]))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    if shutil.which("shellcheck"):
        result = subprocess.run(["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


def test_world_size_mismatch_is_refused_naming_parallel_keys(plan, tmp_path):
    with pytest.raises(ValueError, match=r"3 x 8 = 24 ranks: parallel.dp is auto .* tp \* pp \* cp = 8 \* 2 \* 1 = 16"):
        render(plan, nodes=3)  # 24 ranks
    with pytest.raises(ValueError, match=r"4 x 8 = 32 ranks: parallel: dp \* tp \* pp \* cp = 4 \* 8 \* 2 \* 1 = 64"):
        render(plan, overrides=["parallel.dp=4"])
    with pytest.raises(ValueError, match=r"parallel.ep \(4\) must divide parallel.dp \(2\)"):
        render(plan, overrides=["parallel.ep=4"])
    with pytest.raises(ValueError, match=r"parallel.tp: expected an integer, got 'x'"):
        render(plan, overrides=["parallel.tp=x"])
    # An override that repairs the layout is taken: tp 4 x pp 2 on 2 nodes leaves dp 2.
    assert "world 16 = tp 4 x cp 1 x dp 2 x pp 2" in render(plan, nodes=2, overrides=["parallel.tp=4"])


def test_checkpoint_dir_and_steps_follow_the_config(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("checkpoint:\n  dir: /ckpt/run7\n")
    text = sbatch.render_sbatch(sbatch.SbatchRequest(config=str(config), nodes=1, gpus_per_node=2))
    # training.steps unset: the engine's default, read from its own config (no copy here).
    import myriad
    default_steps = myriad.Config.from_string("logging: {}", "defaults")["training.steps"]
    assert "CHECKPOINT_DIR=/ckpt/run7" in text and f"TRAINING_STEPS={default_steps}" in text
    text = sbatch.render_sbatch(sbatch.SbatchRequest(config=str(config), nodes=1, gpus_per_node=2,
                                                     overrides=["training.steps=50", "checkpoint.dir="]))
    assert "CHECKPOINT_DIR=runs/default/checkpoints" in text and "TRAINING_STEPS=50" in text


def test_bad_requests_name_the_field(plan, tmp_path):
    with pytest.raises(ValueError, match="time_limit"):
        render(plan, time_limit="soon")
    with pytest.raises(ValueError, match="signal_lead_s"):
        render(plan, time_limit="2", signal_lead_s=180)  # 2 minutes
    with pytest.raises(ValueError, match="launcher"):
        render(plan, launcher="torchrun")
    with pytest.raises(ValueError, match="job_name"):
        render(plan, job_name="my job")
    with pytest.raises(ValueError, match="missing.yaml' does not exist"):
        render(str(tmp_path / "missing.yaml"))
    assert sbatch.parse_time_limit("1-02:03:04") == 86400 + 2 * 3600 + 3 * 60 + 4
    assert sbatch.parse_time_limit("90") == 90 * 60 and sbatch.parse_time_limit("1:30") == 90


@pytest.mark.parametrize("code,stop,start,end,expected", [
    (0, "USR1", 100, 300, "requeue"),
    (0, "USR1", -1, 300, "requeue"),
    (0, "USR1", 300, 300, "no_progress"),
    (0, "USR1", 300, 600, "finished"),
    (0, "", 300, 600, "finished"),
    (0, "", 100, 300, "unexpected"),
    (0, "TERM", 100, 300, "stopped"),
    (1, "TERM", 100, 300, "stopped"),
    (3, "", 100, 300, "failed"),
    (3, "USR1", 100, 300, "failed"),
    (2, "", -1, -1, "failed"),
])
def test_requeue_decision_table(code, stop, start, end, expected):
    script = sbatch.REQUEUE_DECISION_BASH + f'requeue_decision {code} "{stop}" {start} {end} 600 0\n'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == expected


FAKE_SRUN = """\
#!/bin/bash
# A stand-in for srun: records its arguments, then behaves as FAKE_MODE says.
echo "srun $*" >> "$FAKE_LOG"
save() { mkdir -p "$FAKE_CKPT"; echo "step_$(printf %08d "$1")" > "$FAKE_CKPT/latest"; }
case "$FAKE_MODE" in
  finish) save 600; exit 0 ;;
  fail) save 200; exit 3 ;;
  stop_at_*)  # run until SIGUSR1, then "checkpoint" at that step and exit 0 as the driver does
    trap 'save "${FAKE_MODE#stop_at_}"; echo "srun got USR1" >> "$FAKE_LOG"; exit 0' USR1
    touch "$FAKE_READY"
    while :; do sleep 0.02; done ;;
esac
"""
@pytest.mark.parametrize("code,stop,start,end,expected", [
    (0, "", 100, 300, "preempted"),  # the ranks got SIGTERM from Slurm, checkpointed and exited 0
    (0, "", 300, 300, "preempted"),  # preempted before a new checkpoint: Slurm would requeue it too
    (143, "TERM", 100, 100, "preempted"),
    (0, "", 300, 600, "finished"),  # finished inside the grace time: done
])
def test_a_preempted_run_is_requeued_unless_finished(code, stop, start, end, expected):
    script = sbatch.REQUEUE_DECISION_BASH + f'requeue_decision {code} "{stop}" {start} {end} 600 1\n'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == expected


@pytest.mark.parametrize("preempt,start,expected", [
    ("None", "2026-12-05T10:00:00", "0"),
    ("2026-12-05T10:00:05", "2026-12-05T10:00:00", "1"),
    ("2026-12-05T09:00:00", "2026-12-05T10:00:00", "0"),  # an earlier run's preemption (requeued since)
])
def test_job_preempted_reads_scontrol(tmp_path, preempt, start, expected):
    fake = tmp_path / "scontrol"
    fake.write_text(f'#!/bin/bash\necho "JobId=7 JobState=RUNNING"\necho "   StartTime={start} EndTime=x"\n'
                    f'echo "   PreemptEligibleTime=x PreemptTime={preempt}"\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", SLURM_JOB_ID="7")
    result = subprocess.run(["bash", "-c", sbatch.JOB_PREEMPTED_BASH + "job_preempted\n"], env=env,
                            capture_output=True, text=True, check=True)
    assert result.stdout.strip() == expected


FAKE_SCONTROL = '#!/bin/bash\necho "scontrol $*" >> "$FAKE_LOG"\n'


def run_job(plan, tmp_path, mode, send=None, existing_step=None):
    """Runs the rendered script in tmp_path with fake srun/scontrol; returns (exit code, log lines)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(render(plan))
    checkpoints = tmp_path / "runs" / "big" / "checkpoints"
    if existing_step is not None:
        checkpoints.mkdir(parents=True)
        (checkpoints / "latest").write_text(f"step_{existing_step:08d}\n")
    log, ready = tmp_path / "log", tmp_path / "ready"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID="42", FAKE_MODE=mode,
               FAKE_LOG=str(log), FAKE_CKPT=str(checkpoints), FAKE_READY=str(ready))
    # A session of its own, so that a script that hangs (a failing test) is killed with its fake srun.
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        if send is not None:
            deadline = time.time() + 20
            while not ready.exists() and time.time() < deadline and proc.poll() is None:
                time.sleep(0.01)
            assert ready.exists(), "the fake srun never started"
            proc.send_signal(send)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, log.read_text().splitlines(), out


def test_preempted_job_checkpoints_and_requeues(plan, tmp_path):
    code, log, out = run_job(plan, tmp_path, "stop_at_300", send=signal.SIGUSR1, existing_step=100)
    assert code == 0, out
    assert log[0].startswith("srun --mpi=pmix") and "--resume auto" in log[0]
    assert "srun got USR1" in log  # the batch shell forwarded the signal to the launcher
    assert log[-1] == "scontrol requeue 42", out
    assert "checkpoint step 100 -> 300 of 600: requeue" in out


def test_finished_job_is_not_requeued(plan, tmp_path):
    code, log, out = run_job(plan, tmp_path, "finish")
    assert code == 0, out
    assert not any(line.startswith("scontrol") for line in log)
    assert ": finished" in out


def test_signal_at_the_last_step_does_not_requeue(plan, tmp_path):
    code, log, out = run_job(plan, tmp_path, "stop_at_600", send=signal.SIGUSR1)
    assert code == 0 and not any(line.startswith("scontrol") for line in log), out


def test_failed_job_is_not_requeued_and_keeps_its_exit_code(plan, tmp_path):
    code, log, out = run_job(plan, tmp_path, "fail")
    assert code == 3, out
    assert not any(line.startswith("scontrol requeue") for line in log)


def test_term_is_forwarded_but_requeue_is_left_to_slurm(plan, tmp_path):
    code, log, out = run_job(plan, tmp_path, "stop_at_300", send=signal.SIGTERM)
    assert code == 0, out
    assert "srun got USR1" in log and not any(line.startswith("scontrol requeue") for line in log)
    assert ": stopped" in out


def test_stop_without_progress_is_not_requeued(plan, tmp_path):
    code, log, out = run_job(plan, tmp_path, "stop_at_300", send=signal.SIGUSR1, existing_step=300)
    assert code == 1, out
    assert not any(line.startswith("scontrol requeue") for line in log)
    assert "without a checkpoint newer than step 300" in out


def test_main_prints_the_script_or_an_error(plan, capsys):
    assert sbatch.main(["--config", plan, "--nodes", "4", "--gpus-per-node", "8", "--set", "training.lr=1e-4"]) == 0
    assert "#SBATCH --nodes=4" in capsys.readouterr().out
    assert sbatch.main(["--config", plan, "--nodes", "3", "--gpus-per-node", "8"]) == 2
    assert "= 24 ranks: parallel.dp is auto" in capsys.readouterr().err
