"""What domain randomisation buys (issue 5): PPO trained with and without it, judged by the sim2sim gate.

For each seed, one PPO run on the plain task and one on its randomised variant (same recipe,
same budget), both through ``robolearn train``; then every final policy goes through the same
sim2sim conditions (shifted dynamics outside the training ranges, added latency), with the same
evaluation seed. Reported: per condition, the mean return of each variant over seeds (and the
per-seed values), and how many seeds pass the gate's threshold (0.7 x that run's own nominal
return, as in ``configs/sim2sim.yaml``).

    python benchmarks/dr_robustness.py [--task Cartpole-Balance] [--dr-task Cartpole-Balance-DR]
        [--seeds 0 1 2] [--steps 400000] [--out runs/dr_robustness] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import robolearn
from robolearn.cli.build import flatten_overrides, load_policy
from robolearn.cli.config import Perturbation
from robolearn.cli.sim2sim import run_gate

CONDITIONS: dict[str, Perturbation] = {
    "heavy_x2": Perturbation(fields={"mass": 2.0}),
    "light_x0.5": Perturbation(fields={"mass": 0.5}),
    "weak_motor_x0.5": Perturbation(fields={"motor_strength": 0.5}),
    "damped_x5": Perturbation(fields={"damping": 5.0}),
    "latency_2": Perturbation(action_delay=2),
    "latency_3_obs_1": Perturbation(action_delay=3, obs_delay=1),
    "half_timestep": Perturbation(timestep_scale=0.5),
}
"""Shifted conditions, all beyond the randomised variant's training ranges."""


def train(task: str, seed: int, steps: int, run_dir: Path) -> float:
    """One PPO run with the Cartpole recipe; returns its wall-clock seconds."""
    exe = Path(sys.executable).with_name("robolearn")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "robolearn.cli.main"]
    args = [
        "train",
        "experiment=cartpole_ppo",
        f"task={task}",
        f"seed={seed}",
        f"total_env_steps={steps}",
        f"run_dir={run_dir}",
        "runner.video=false",
    ]
    start = time.perf_counter()
    subprocess.run([*cmd, *args], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True)
    return time.perf_counter() - start


def gate(run_dir: Path, eval_task: str, episodes: int, seed: int) -> dict[str, Any]:
    """The run's final policy through :data:`CONDITIONS` on ``eval_task`` (the plain task)."""
    policy = load_policy(run_dir)
    overrides = flatten_overrides(policy.cfg.task_overrides)

    def make_env(extra: dict[str, Any]):
        return robolearn.make(eval_task, 8, seed=seed, nthread=1, **{**overrides, **extra})

    rows = run_gate(make_env, policy.act, CONDITIONS, episodes=episodes, seed=seed, min_ratio=0.7)
    return {r.name: {"mean": r.mean_return, "passed": r.passed} for r in rows}


def main() -> None:
    """Train, gate, and print the markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="Cartpole-Balance")
    p.add_argument("--dr-task", default="Cartpole-Balance-DR")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=400_000)
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--eval-seed", type=int, default=4242)
    p.add_argument("--out", type=Path, default=Path("runs/dr_robustness"))
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    results: dict[str, dict[int, dict[str, Any]]] = {"plain": {}, "dr": {}}
    times: dict[str, list[float]] = {"plain": [], "dr": []}
    for seed in args.seeds:
        for variant, task in (("plain", args.task), ("dr", args.dr_task)):
            run = args.out / variant / f"seed{seed}"
            print(f"[{time.strftime('%H:%M:%S')}] training {task} seed {seed}", file=sys.stderr, flush=True)
            times[variant].append(train(task, seed, args.steps, run))
            # Both variants are judged on the plain task: the robot is not randomised.
            results[variant][seed] = gate(run, args.task, args.episodes, args.eval_seed)
    names = ["nominal", *CONDITIONS]
    print(f"# DR robustness: {args.task} vs {args.dr_task}, seeds {args.seeds}, {args.steps} env steps each\n")
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}, "
        f"robolearn {robolearn.__version__}; training wall-clock plain {statistics.mean(times['plain']):.0f} s, "
        f"DR {statistics.mean(times['dr']):.0f} s (mean per run)\n"
    )
    print("| condition | plain: mean return (per seed) | plain passes | DR: mean return (per seed) | DR passes |")
    print("|---|---|---:|---|---:|")
    for name in names:
        cells = []
        for variant in ("plain", "dr"):
            vals = [results[variant][s][name]["mean"] for s in args.seeds]
            passes = sum(results[variant][s][name]["passed"] for s in args.seeds)
            cells += [f"{statistics.mean(vals):.0f} ({', '.join(f'{v:.0f}' for v in vals)})", f"{passes}/{len(vals)}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "train_seconds": times}, indent=2))


if __name__ == "__main__":
    main()
