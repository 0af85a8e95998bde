"""The GPU benchmark scripts (issue 15) run end to end on the CPU at tiny sizes and print their tables.

No GPU here: every script runs with ``--quick --device cpu --backend mujoco`` in a subprocess, as
``benchmarks/gpu_suite.sh`` runs it, and the test reads its markdown table and its JSON. The shared
helpers (paired-ratio summary, ``KEY=VALUE`` config overrides) and the rsl_rl adapter are checked
against hand-computed values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))

import gpu_common  # noqa: E402  (the benchmarks folder is not a package)
import gpu_ppo_vs_rslrl  # noqa: E402

from robolearn.algos.ppo import PPOConfig  # noqa: E402

SMOKE = ["--quick", "--device", "cpu", "--backend", "mujoco"]


def _run(script: str, *args: str, tmp_path: Path, timeout: float = 120) -> tuple[str, dict[str, Any]]:
    """Run ``benchmarks/<script>`` with ``args`` and ``--json``; its stdout and the JSON it wrote."""
    out = tmp_path / "out.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GIT_PYTHON_REFRESH": "quiet"}
    proc = subprocess.run([sys.executable, str(BENCH / script), *args, "--json", str(out)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def _table(stdout: str, first_column: str) -> tuple[list[str], list[list[str]]]:
    """The markdown table whose header starts with ``first_column``: (columns, rows)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    cols = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return cols, rows


def _machine_ok(stdout: str) -> None:
    """The machine table names the device, torch and the commit."""
    cols, rows = _table(stdout, "device")
    for key in ("device", "accelerator", "cores", "torch", "commit", "robolearn", "mujoco", "rsl-rl-lib"):
        assert key in cols
    assert rows[0][cols.index("device")] == "cpu"
    assert rows[0][cols.index("torch")] == torch.__version__


# -- the scripts, end to end ---------------------------------------------------------------------
def test_env_throughput_quick(tmp_path: Path) -> None:
    # --graph-capture on: the MuJoCo CPU batch has no CUDA-graph step, so that cell says why and the
    # run goes on (one subprocess for both checks: most of its time is the imports).
    stdout, doc = _run("gpu_env_throughput.py", *SMOKE, "--tasks", "Cartpole-Balance", "Humanoid",
                       "--sizes", "4", "8", "--graph-capture", "on", tmp_path=tmp_path)
    _machine_ok(stdout)
    cols, rows = _table(stdout, "task")
    assert cols == gpu_common_columns("gpu_env_throughput")
    assert [(r[0], r[1]) for r in rows] == [("Cartpole-Balance", "4"), ("Cartpole-Balance", "8"),
                                            ("Humanoid", "4"), ("Humanoid", "8")]
    assert [r[2] for r in rows] == ["1", "1", "5", "5"]  # decimation of each task
    for res in doc["results"]:
        assert res["main"]["rate"] > 0 and len(res["main"]["seconds"]) == 2
        assert "graph_capture" in res["graph"]["error"]
        assert res["cpu"] is None  # the CPU-batch column would repeat the main measurement
    assert all(r[4].startswith("not run (") for r in rows)
    # The Humanoid-class anchor (no world count attached) shows at every N, Cartpole's only at 4,096.
    assert all("94.0k" in r[7] for r in rows[2:]) and all(r[7] == "—" for r in rows[:2])
    assert "QUICK SMOKE RUN" in stdout


def test_ppo_vs_rslrl_quick(tmp_path: Path) -> None:
    stdout, doc = _run("gpu_ppo_vs_rslrl.py", *SMOKE, tmp_path=tmp_path)
    _machine_ok(stdout)
    cols, rows = _table(stdout, "task")
    assert cols == gpu_ppo_vs_rslrl.COLUMNS
    assert [r[:2] for r in rows] == [["HalfCheetah", "robolearn"], ["HalfCheetah", "rsl_rl"],
                                     ["HalfCheetah", "env only"]]
    summ = doc["results"]["HalfCheetah"]["summary"]
    assert set(summ) == {"robolearn", "rsl_rl", "env only"}
    assert summ["rsl_rl"]["speedup"] > 0 and rows[1][5] in ("met", "not met")
    cfg = doc["results"]["HalfCheetah"]["config"]
    assert (cfg["num_envs"], cfg["num_steps"], cfg["epochs"], cfg["minibatches"]) == (8, 4, 1, 2)


@pytest.mark.slow
def test_sac_vs_sb3_quick(tmp_path: Path) -> None:
    import gpu_sac_vs_sb3

    stdout, doc = _run("gpu_sac_vs_sb3.py", *SMOKE, tmp_path=tmp_path)
    _machine_ok(stdout)
    cols, rows = _table(stdout, "task")
    assert cols == gpu_sac_vs_sb3.COLUMNS
    assert [r[1:3] for r in rows] == [["16", "robolearn"], ["16", "sb3"]]
    assert doc["results"]["16"]["sb3"]["speedup"] > 0


@pytest.mark.slow
def test_time_to_threshold_quick(tmp_path: Path) -> None:
    stdout, doc = _run("gpu_time_to_threshold.py", *SMOKE, tmp_path=tmp_path)
    _machine_ok(stdout)
    _, runs = _table(stdout, "task")
    # 2 seeds x 2 paths, the order of the paths alternating from seed to seed.
    assert [(r[1], r[3]) for r in runs[:4]] == [("gpu", "0"), ("cpu", "0"), ("cpu", "1"), ("gpu", "1")]
    assert {r[2] for r in runs[:4] if r[1] == "gpu"} == {"8"} and {r[2] for r in runs[:4] if r[1] == "cpu"} == {"4"}
    # The quick threshold (-1000) is reached at the first evaluation by every run.
    assert all(r["reached"] is not None and len(r["evals"]) == 1 for r in doc["runs"])
    cols, med = _table(stdout.split("Median over seeds")[1], "task")
    assert cols == ["task", "threshold", "gpu path", "cpu path", "CPU / GPU time"]
    assert med[0][2].endswith("(2/2)") and med[0][4].endswith("×")


@pytest.mark.slow
def test_suite_quick(tmp_path: Path) -> None:
    env = {**os.environ, "QUICK": "1", "LOCAL": "1", "PY": sys.executable, "OUT": str(tmp_path),
           "OMP_NUM_THREADS": "1", "ONLY": "throughput sac gputest", "EXTRA_THROUGHPUT": "--tasks HalfCheetah"}
    proc = subprocess.run(["bash", str(BENCH / "gpu_suite.sh")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = (tmp_path / "results.md").read_text()
    assert "## throughput (exit 0" in report and "## sac (exit 0" in report and "## ppo" not in report
    assert json.loads((tmp_path / "throughput.json").read_text())["results"][0]["task"] == "HalfCheetah"


# -- the helpers -----------------------------------------------------------------------------------
def gpu_common_columns(module: str) -> list[str]:
    """The COLUMNS of a benchmark module."""
    return list(__import__(module).COLUMNS)


def test_summary_rates_and_paired_ratios() -> None:
    # Hand-computed: rates from the median seconds; speed-up = median of per-round time ratios.
    res = gpu_common.summary({"ref": [1.0, 2.0, 3.0], "other": [2.0, 2.0, 9.0]}, work=6.0, ref="ref")
    assert res["ref"]["rate"] == pytest.approx(3.0) and res["other"]["rate"] == pytest.approx(3.0)
    assert res["other"]["speedup"] == pytest.approx(2.0)  # ratios 2, 1, 3
    assert res["other"]["speedup_range"] == (pytest.approx(1.0), pytest.approx(3.0))
    assert res["ref"]["spread"] == pytest.approx(1.0) and "speedup" not in res["ref"]


def test_parse_sets_overrides_and_refuses_unknown_keys() -> None:
    cfg = gpu_common.parse_sets(["num_epochs=2", "schedule=fixed", "actor_hidden=(8, 8)"], PPOConfig,
                                {"num_steps": 3})
    assert (cfg.num_steps, cfg.num_epochs, cfg.schedule, cfg.actor_hidden) == (3, 2, "fixed", (8, 8))
    with pytest.raises(SystemExit, match="num_epoch=2.*num_epochs"):
        gpu_common.parse_sets(["num_epoch=2"], PPOConfig, {})


def test_rslrl_adapter_dones_and_time_outs() -> None:
    class Fake:
        num_envs, action_dim, max_episode_length, device, task_id = 3, 2, 10, torch.device("cpu"), "Fake"

        def __init__(self) -> None:
            self.episode_length = torch.zeros(3, dtype=torch.long)
            self.obs = {"policy": torch.zeros(3, 4)}

        def step(self, action: torch.Tensor) -> tuple[Any, ...]:
            obs = {"policy": action.sum(1, keepdim=True).repeat(1, 4)}
            return obs, torch.ones(3), torch.tensor([True, False, False]), torch.tensor([False, True, False]), {}

    env = gpu_ppo_vs_rslrl.make_rsl_env(Fake())
    import rsl_rl.env

    assert isinstance(env, rsl_rl.env.VecEnv) and env.num_actions == 2
    obs, rew, dones, extras = env.step(torch.ones(3, 2))
    assert obs["policy"].shape == (3, 4) and float(obs["policy"][0, 0]) == 2.0
    assert dones.tolist() == [True, True, False] and extras["time_outs"].tolist() == [False, True, False]
    env.episode_length_buf = torch.tensor([1, 2, 3])
    assert env.env.episode_length.tolist() == [1, 2, 3]


def test_rslrl_runner_learns_on_a_robolearn_env() -> None:
    # rsl_rl's runner on the adapter: one iteration changes its actor and consumes the rollout.
    import argparse
    import contextlib
    import io

    import rsl_rl.runners

    torch.manual_seed(0)
    env = gpu_ppo_vs_rslrl.make_rsl_env(gpu_common.make_env("HalfCheetah", 4, "mujoco", "cpu", seed=0, nthread=1))
    cfg = PPOConfig(num_steps=4, num_epochs=1, num_minibatches=2, actor_hidden=(16,), critic_hidden=(16,))
    with contextlib.redirect_stdout(io.StringIO()):
        runner = rsl_rl.runners.OnPolicyRunner(env, gpu_ppo_vs_rslrl.rsl_train_cfg(argparse.Namespace(), cfg),
                                               log_dir=None, device="cpu")
    assert [m.in_features for m in runner.alg.actor.mlp if isinstance(m, torch.nn.Linear)] == [17, 16]
    before = [p.detach().clone() for p in runner.alg.actor.parameters()]
    steps0 = int(env.env.episode_length.sum())
    runner.learn(num_learning_iterations=1)
    assert any(not torch.equal(a, b) for a, b in zip(before, runner.alg.actor.parameters(), strict=True))
    assert int(env.env.episode_length.sum()) == steps0 + 4 * 4
    env.env.close()


def test_make_env_hands_graph_capture_to_warp_and_refuses_it_elsewhere() -> None:
    # The env-throughput table's uncaptured column must really be uncaptured: Warp captures its step
    # by default on CUDA, so make_env passes False explicitly (through sim_options) when asked.
    for flag in (True, False):
        assert gpu_common.make_env("Pendulum-Swingup", 2, "warp", "cpu", graph_capture=flag).sim.graph_capture is flag
    assert gpu_common.make_env("Pendulum-Swingup", 2, "warp", "cpu").sim.graph_capture is False, "the CPU default"
    assert not hasattr(gpu_common.make_env("Pendulum-Swingup", 2, "mujoco", "cpu", graph_capture=False).sim, "_graphs")
    with pytest.raises(ValueError, match="graph_capture: backend 'mujoco' has no graph capture"):
        gpu_common.make_env("Pendulum-Swingup", 2, "mujoco", "cpu", graph_capture=True)
