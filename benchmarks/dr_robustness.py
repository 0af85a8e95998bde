"""What domain randomisation buys (issue 5): PPO trained with and without it, judged by the sim2sim gate.

For each seed, one PPO run on the plain task and one on a randomised variant (same recipe, same
budget, trained in this process through the ``robolearn train`` code path); then every final
policy goes through the same sim2sim conditions on the plain task, with the same evaluation seed.
Reported: per condition, the mean return of each variant over seeds (and per seed), and how many
seeds pass the gate's threshold (0.7 x the plain policy's nominal return of that seed, so both
variants face the same bar).

Variants (``--dr-task``): ``Cartpole-Balance-DR`` (the registered example: moderate physics
ranges plus pushes, sensor noise and latency), or ``wide`` (registered here as
``Cartpole-Balance-WideDR``: only physics, but wide: pole and cart mass x U(0.5, 4), motor
strength x U(0.25, 1.2) — the ranges the shifted conditions below fall into).

    python benchmarks/dr_robustness.py [--task Cartpole-Balance] [--dr-task wide|Cartpole-Balance-DR]
        [--seeds 0 1 2] [--steps 400000] [--out runs/dr_robustness] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import robolearn
from robolearn.cli.build import flatten_overrides, load_policy
from robolearn.cli.config import Perturbation
from robolearn.cli.sim2sim import run_gate

CONDITIONS: dict[str, Perturbation] = {
    "heavy_x2": Perturbation(fields={"mass": 2.0}),
    "heavy_x3": Perturbation(fields={"mass": 3.0}),
    "heavy_x4": Perturbation(fields={"mass": 4.0}),
    "weak_motor_x0.5": Perturbation(fields={"motor_strength": 0.5}),
    "weak_motor_x0.3": Perturbation(fields={"motor_strength": 0.3}),
    "heavy_x3_weak_x0.5": Perturbation(fields={"mass": 3.0, "motor_strength": 0.5}),
    "latency_4": Perturbation(action_delay=4),
    "latency_3_obs_2": Perturbation(action_delay=3, obs_delay=2),
    "half_timestep": Perturbation(timestep_scale=0.5),
}
"""Shifted conditions of the plain task."""


def register_wide() -> str:
    """Register ``Cartpole-Balance-WideDR`` (wide physics randomisation only) in this process."""
    from robolearn.envs import EventTerm
    from robolearn.envs.registry import _REGISTRY, register
    from robolearn.sim2real.randomization import randomize_field, randomize_motor_strength
    from robolearn.tasks.classic.cartpole import cartpole_balance_cfg

    name = "Cartpole-Balance-WideDR"
    if name in _REGISTRY:
        return name

    def cfg():
        c = cartpole_balance_cfg()
        c.events = {
            # Payloads from half to four times the nominal mass, cart and pole alike, per episode.
            "mass": EventTerm(randomize_field, mode="reset", params={"field": "mass", "range": (0.5, 4.0)}),
            # Motors from a quarter of their force to 20% more, per episode.
            "motor": EventTerm(randomize_motor_strength, mode="reset", params={"range": (0.25, 1.2)}),
        }
        return c

    register(name, cfg, "Cartpole-Balance with wide mass and motor randomisation (benchmark only)")
    return name


def train(task: str, seed: int, steps: int, run_dir: Path) -> float:
    """One PPO run with the Cartpole recipe (in this process); returns its wall-clock seconds."""
    from robolearn.cli.commands import train_job

    args = [
        "experiment=cartpole_ppo",
        f"task={task}",
        f"seed={seed}",
        f"total_env_steps={steps}",
        f"run_dir={run_dir}",
        "runner.video=false",
        "runner.console=false",
    ]
    start = time.perf_counter()
    train_job(args)
    return time.perf_counter() - start


def gate(run_dir: Path, eval_task: str, episodes: int, seed: int, bar: float | None = None) -> dict[str, Any]:
    """The run's final policy through :data:`CONDITIONS` on ``eval_task`` (the plain task);
    ``bar`` is the return a condition must reach (default 0.7 x this policy's own nominal).
    """
    policy = load_policy(run_dir)
    overrides = flatten_overrides(policy.cfg.task_overrides)

    def make_env(extra: dict[str, Any]):
        return robolearn.make(eval_task, 8, seed=seed, nthread=1, **{**overrides, **extra})

    conditions = CONDITIONS if bar is None else {k: replace(p, min_return=bar) for k, p in CONDITIONS.items()}
    rows = run_gate(make_env, policy.act, conditions, episodes=episodes, seed=seed, min_ratio=0.7)
    return {r.name: {"mean": r.mean_return, "passed": r.passed} for r in rows}


def main() -> None:
    """Train, gate, and print the markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="Cartpole-Balance")
    p.add_argument("--dr-task", default="wide", help="a registered task id, or 'wide'")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=400_000)
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--eval-seed", type=int, default=4242)
    p.add_argument("--out", type=Path, default=Path("runs/dr_robustness"))
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.dr_task == "wide":
        args.dr_task = register_wide()
    results: dict[str, dict[int, dict[str, Any]]] = {"plain": {}, "dr": {}}
    times: dict[str, list[float]] = {"plain": [], "dr": []}
    for seed in args.seeds:
        for variant, task in (("plain", args.task), ("dr", args.dr_task)):
            run = args.out / variant / f"seed{seed}"
            print(f"[{time.strftime('%H:%M:%S')}] training {task} seed {seed}", file=sys.stderr, flush=True)
            times[variant].append(train(task, seed, args.steps, run))
        # Both variants are judged on the plain task (the robot is not randomised) against the
        # same bar: 0.7 x the plain policy's nominal return.
        results["plain"][seed] = gate(args.out / "plain" / f"seed{seed}", args.task, args.episodes, args.eval_seed)
        bar = 0.7 * results["plain"][seed]["nominal"]["mean"]
        for variant in ("plain", "dr"):
            results[variant][seed] = gate(args.out / variant / f"seed{seed}", args.task, args.episodes, args.eval_seed, bar)
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
