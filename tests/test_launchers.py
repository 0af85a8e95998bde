"""Sweeps through Hydra's launcher plugins (``robolearn train -m hydra/launcher=...``), on tiny budgets."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from robolearn.cli.launch import quote, split_launcher
from robolearn.cli.main import main

# Tiny nets, short episodes, 2 PPO updates, no video/progress bar/TensorBoard: about a second a job.
TINY = [
    "task=Cartpole-Balance",
    "num_envs=8",
    "eval_num_envs=2",
    "total_env_steps=256",
    "task_overrides.episode_length=50",
    "algo.num_steps=16",
    "algo.actor_hidden=[32]",
    "algo.critic_hidden=[32]",
    "runner.video=false",
    "runner.console=false",
    "runner.tensorboard=false",
]
RUN_FILES = ("config.json", "policy_spec.json", "metrics.csv", "summary.json")


def _popen_cli(*args: str, cwd: Path) -> tuple[int, int, str, str]:
    """Run the console script in its own process; return (its pid, exit status, stdout, stderr).

    A subprocess, not ``main()`` in the test process: joblib's loky workers and the CLI's logging
    set-up then never touch pytest's captured streams (a full-suite run once lost pytest's stderr
    with the sweep in process).
    """
    exe = Path(sys.executable).with_name("robolearn")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "robolearn.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with subprocess.Popen([*cmd, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        out, err = proc.communicate(timeout=300)
        return proc.pid, proc.returncode, out, err


def _metrics_without_times(run: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    return [{k: v for k, v in r.items() if "time" not in k and "per_s" not in k and "fps" not in k} for r in rows]


def _table(stdout: str) -> dict[str, list[str]]:
    """The summary table's rows by run dir (the lines after the header)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("run_dir") and "final eval return" in line)
    return {line.split()[0]: line.split()[1:] for line in lines[start + 1 :] if line.strip()}


def test_joblib_sweep_runs_jobs_in_parallel_processes_with_the_sequential_results(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    pid, status, out, err = _popen_cli(
        "train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1", "run_dir=sweep", *TINY,
        cwd=tmp_path,
    )
    assert status == 0, err
    # The same run dirs as the sequential sweep, and nothing else: no .hydra/, no <job>.log, no
    # outputs/ or multirun/ in the working directory.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]
    assert sorted(p.name for p in sweep.iterdir()) == ["seed=0", "seed=1"]
    for run in ("seed=0", "seed=1"):
        assert all((sweep / run / name).is_file() for name in RUN_FILES), run
        assert [p.name for p in (sweep / run / "checkpoints").glob("ckpt_*.pt")] == ["ckpt_000256.pt"]
        assert not (sweep / run / ".hydra").exists() and not list((sweep / run).glob("*.log"))
    # Two worker processes (joblib's loky workers; each job returns its pid), neither of them the CLI's.
    workers = {int(p) for p in re.findall(r"sweep/seed=[01] ran in process (\d+)", err)}
    assert len(workers) == 2 and pid not in workers and os.getpid() not in workers, err
    assert "Joblib.Parallel(n_jobs=2" in err
    launched = {run: json.loads((sweep / run / "summary.json").read_text()) for run in ("seed=0", "seed=1")}
    table = _table(out)
    assert set(table) == {"sweep/seed=0", "sweep/seed=1"}
    for run, summary in launched.items():
        assert table[f"sweep/{run}"] == [f"{summary['final_eval_return']:.2f}", "256"]
        assert json.loads((sweep / run / "config.json").read_text())["seed"] == int(run[-1])

    # The sequential sweep (in this process) with the launcher's one torch thread per job: the same numbers.
    monkeypatch.chdir(tmp_path)
    assert main(["train", "-m", "seed=0,1", "torch_threads=1", "run_dir=sequential", *TINY]) == 0
    for run, summary in launched.items():
        expected = json.loads((tmp_path / "sequential" / run / "summary.json").read_text())
        assert summary["final_eval_return"] == expected["final_eval_return"]
        assert _metrics_without_times(sweep / run) == _metrics_without_times(tmp_path / "sequential" / run)
    assert launched["seed=0"]["final_eval_return"] != launched["seed=1"]["final_eval_return"]


def test_submitit_local_runs_a_job_through_submitit(tmp_path):
    pid, status, out, err = _popen_cli(
        "train", "-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5", "seed=3", "run_dir=local", *TINY,
        cwd=tmp_path,
    )
    assert status == 0, err
    run = tmp_path / "local" / "job"  # no swept key: the sequential sweep's single job folder
    assert all((run / name).is_file() for name in RUN_FILES)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 256
    assert _table(out) == {"local/job": [f"{summary['final_eval_return']:.2f}", "256"]}
    # submitit's own files (the pickled job, its result, its stdout/stderr) live under the sweep
    # dir's .submitit/, beside the job folder, not in it.
    submitit = tmp_path / "local" / ".submitit"
    logs = list(submitit.glob("*/*_log.err"))
    assert len(logs) == 1 and "runs in process" in logs[0].read_text()
    assert int(re.search(r"runs in process (\d+)", logs[0].read_text()).group(1)) not in (pid, os.getpid())
    assert sorted(p.name for p in run.iterdir()) == sorted([*RUN_FILES, "checkpoints", "learning_curve.png"])


def test_submitit_slurm_writes_the_sbatch_script_the_user_asked_for(tmp_path):
    """No Slurm here: submitit's SlurmExecutor refuses to start without srun, so its detection is
    told srun exists; sbatch itself is absent (PATH emptied), so submission stops after submitit
    wrote the job array's sbatch script, which is what a cluster would run. In its own process, like
    the other launcher runs (a launcher in pytest's process once lost pytest's stderr)."""
    args = [
        "train", "-m", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu", "hydra.launcher.timeout_min=90",
        "hydra.launcher.gpus_per_node=1", "hydra.launcher.cpus_per_task=4", "hydra.launcher.mem_gb=16",
        "hydra.launcher.array_parallelism=1", "hydra.launcher.qos=high",
        "+hydra.launcher.additional_parameters.mail-type=END", "seed=0,1,2", "run_dir=cluster", *TINY,
    ]
    code = (
        "import sys, submitit.slurm.slurm as s\n"
        "s.SlurmExecutor.affinity = staticmethod(lambda: 1)\n"
        "from robolearn.cli.main import main\n"
        f"raise SystemExit(main({args!r}))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": str(tmp_path / "no-bin")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "hydra/launcher=submitit_slurm: FileNotFoundError" in proc.stderr
    (script,) = (tmp_path / "cluster" / ".submitit").glob(".submission_file_*.sh")
    flags = dict(re.findall(r"^#SBATCH --([\w-]+)=?(.*)$", script.read_text(), flags=re.M))
    assert flags["partition"] == "gpu" and flags["time"] == "90" and flags["gpus-per-node"] == "1"
    assert flags["cpus-per-task"] == "4" and flags["mem"] == "16GB" and flags["qos"] == "high"
    assert flags["ntasks-per-node"] == "1" and flags["nodes"] == "1" and flags["mail-type"] == "END"
    assert flags["array"] == "0-2%1" and flags["job-name"] == "robolearn"
    assert f"{sys.executable} -u -m submitit.core._submit" in script.read_text()
    assert len(list((tmp_path / "cluster" / ".submitit").glob("*.pkl"))) == 3  # one pickled job each
    assert not list((tmp_path / "cluster").glob("seed=*"))  # nothing trained


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["hydra/launcher=jobllib"], "hydra/launcher=jobllib: unknown launcher; expected one of basic, joblib, submitit_local, submitit_slurm"),
        (["hydra/launcher=joblib", "hydra.launcher.n_jobz=2"], "hydra.launcher.n_jobz=2: the joblib launcher has no option 'n_jobz'; its options: backend, batch_size,"),
        (["hydra/launcher=joblib", "hydra.launcher.n_jobs=two"], "hydra.launcher.n_jobs=two: Error merging override"),
        (["hydra/launcher=submitit_slurm", "hydra.launcher.partion=gpu"], "no option 'partion'; its options: account, additional_parameters,"),
        (["hydra.launcher.n_jobs=2"], "pick the launcher too"),
        (["hydra/launcher=joblib", "hydra.sweep.dir=elsewhere"], "hydra.sweep.dir=elsewhere: robolearn fixes Hydra's output settings"),
        (["hydra/launcher=joblib", "algo.lrr=3"], "algo.lrr: field 'lrr' is not in PPOConfig"),
        (["hydra/launcher=submitit_slurm", "distributed=true"], "distributed=true: a launched job is one process"),
    ],
)
def test_a_bad_launcher_or_option_is_one_line_before_anything_trains(args, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "-m", *args, "seed=0,1", "run_dir=bad", *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not (tmp_path / "bad").exists()


def test_a_launcher_without_a_sweep_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "hydra/launcher=joblib", "run_dir=single", *TINY]) == 2
    assert "a launcher runs the jobs of a sweep" in capsys.readouterr().err
    assert not (tmp_path / "single").exists()


def test_a_failed_job_is_reported_and_the_others_results_kept(tmp_path, monkeypatch, capsys):
    # Hydra's basic launcher (in this process, one after the other) runs the same task function.
    monkeypatch.chdir(tmp_path)
    taken = tmp_path / "sweep" / "seed=1"
    taken.mkdir(parents=True)
    (taken / "config.json").write_text(json.dumps({"seed": 7}))  # another run's dir: RunDirError at train time
    assert main(["train", "-m", "hydra/launcher=basic", "seed=0,1,2", "run_dir=sweep", *TINY]) == 1
    captured = capsys.readouterr()
    table = _table(captured.out)
    assert list(table) == ["sweep/seed=0", "sweep/seed=1", "sweep/seed=2"]
    assert table["sweep/seed=1"][0] == "failed:" and "RunDirError" in table["sweep/seed=1"][1]
    for run in ("seed=0", "seed=2"):
        summary = json.loads((tmp_path / "sweep" / run / "summary.json").read_text())
        assert table[f"sweep/{run}"] == [f"{summary['final_eval_return']:.2f}", "256"]
    assert "job sweep/seed=1 failed: RunDirError" in captured.err
    assert json.loads((taken / "config.json").read_text()) == {"seed": 7}  # the other run untouched


def test_split_launcher_and_quote():
    name, hydra_overrides, job = split_launcher(
        ["hydra/launcher=joblib", "hydra.launcher.n_jobs=4", "seed=0,1", "algo=sac", "+x=1"]
    )
    assert name == "joblib"
    assert hydra_overrides == ["hydra/launcher=joblib", "hydra.launcher.n_jobs=4"]
    assert job == ["seed=0,1", "algo=sac", "+x=1"]
    assert split_launcher(["seed=0,1"]) == (None, [], ["seed=0,1"])
    # A run dir holding a sweep's separators (= and ,) and quotes is one value, not a sweep.
    for value in ("runs/x/seed=0,lr=0.1", "it's/a \"dir\"", "back\\slash", "end\\", "x\\'y"):
        (parsed,) = OverridesParser.create().parse_overrides([f"++run_dir={quote(value)}"])
        assert not parsed.is_sweep_override() and parsed.value() == value
