"""Quadruped-Flat with PPO on this CPU (issue 13): velocity tracking after a stated budget, and
what randomisation buys through the sim2sim gate.

For each seed, PPO (``configs/experiment/quadruped_flat.yaml``, through the ``robolearn train``
code path) trains once on ``Quadruped-Flat`` (friction and payload draws, pushes: "dr") and once
on ``Quadruped-Flat-NoDR`` ("plain"), for the same number of env steps. Every final policy is then
judged on the plain task with one evaluation seed:

* tracking: 32 worlds, one 20 s episode each, commands drawn as in training (redrawn every 10 s):
  the mean planar velocity error ``|v_xy - c_xy|`` (trunk frame, m/s) over the steps each world
  was alive, the mean per-step ``track_lin_vel_xy`` kernel ``exp(-|err|^2 / 0.25)`` (1 = perfect),
  the same for the yaw rate, and the fraction of worlds that fell;
* the sim2sim gate (``robolearn.cli.sim2sim.run_gate``) under shifted dynamics: heavier bodies,
  slippery feet, weaker motors, latency, a halved timestep; a condition passes at 0.7 x the plain
  policy's nominal return of that seed (the same bar for both variants).

    python benchmarks/quadruped_flat.py [--seeds 0 1 2] [--steps 3000000] [--variants plain dr]
        [--phase all|train|eval] [--out runs/quadruped_flat] [--json out.json]

``--phase train`` only trains (two processes, one per variant, use both cores); ``--phase eval``
judges runs already in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import robolearn
from robolearn.cli.build import flatten_overrides, load_policy
from robolearn.cli.config import Perturbation
from robolearn.cli.sim2sim import run_gate

TASKS = {"plain": "Quadruped-Flat-NoDR", "dr": "Quadruped-Flat"}
"""Training task of each variant."""
EVAL_TASK = "Quadruped-Flat-NoDR"
"""Every policy is judged here: the robot, not randomised."""

CONDITIONS: dict[str, Perturbation] = {
    "heavy_x1.3": Perturbation(fields={"mass": 1.3}),
    "heavy_x1.6": Perturbation(fields={"mass": 1.6}),
    "slippery_x0.5": Perturbation(fields={"friction": 0.5}),
    "slippery_x0.3": Perturbation(fields={"friction": 0.3}),
    "weak_motor_x0.6": Perturbation(fields={"motor_strength": 0.6}),
    "latency_1": Perturbation(action_delay=1),
    "latency_2_obs_1": Perturbation(action_delay=2, obs_delay=1),
    "half_timestep": Perturbation(timestep_scale=0.5),
}
"""Shifted conditions of the plain task."""


def train(task: str, seed: int, steps: int, run_dir: Path) -> float:
    """One PPO run of the quadruped recipe (in this process); returns its wall-clock seconds."""
    from robolearn.cli.commands import train_job

    args = [
        "experiment=quadruped_flat",
        f"task={task}",
        f"seed={seed}",
        f"total_env_steps={steps}",
        f"run_dir={run_dir}",
        "runner.console=false",
        "runner.overwrite=true",
    ]
    start = time.perf_counter()
    train_job(args)
    return time.perf_counter() - start


@torch.inference_mode()
def tracking(run_dir: Path | None, seed: int, worlds: int = 32) -> dict[str, float]:
    """Velocity-tracking figures of the run's final policy on :data:`EVAL_TASK` (see the module
    doc); ``run_dir=None`` judges the zero action (stand in the default pose), the floor to beat.
    """
    from robolearn.tasks.legged import mdp as legged

    if run_dir is None:
        overrides: dict[str, Any] = {}

        def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
            return torch.zeros(worlds, 12)
    else:
        policy = load_policy(run_dir)
        overrides, act = flatten_overrides(policy.cfg.task_overrides), policy.act
    # Without the command curriculum: the task's own command ranges (the curriculum's start).
    env = robolearn.make(EVAL_TASK, worlds, seed=seed, nthread=1, curriculum={}, **overrides)
    obs, _ = env.reset()
    alive = torch.ones(worlds, dtype=torch.bool)
    err_sum = torch.zeros(worlds, dtype=torch.float64)
    kern_sum = torch.zeros(worlds, dtype=torch.float64)
    yaw_sum = torch.zeros(worlds, dtype=torch.float64)
    steps = torch.zeros(worlds, dtype=torch.float64)
    for _ in range(env.max_episode_length):
        obs, _, terminated, truncated, _ = env.step(act(obs))
        live = alive & ~terminated & ~truncated
        cmd = env.command_manager.values["base_velocity"]
        err = torch.linalg.vector_norm(legged.base_lin_vel(env)[:, :2] - cmd[:, :2], dim=1)
        err_sum += err * live
        kern_sum += torch.exp(-err * err / 0.25) * live
        yaw_sum += legged.track_ang_vel_z(env) * live
        steps += live
        alive &= ~terminated & ~truncated
        if not bool(alive.any()):
            break
    fell = float((steps < env.max_episode_length - 1).double().mean())
    n = steps.clamp(min=1)
    env.close()
    return {
        "lin_vel_error": float((err_sum / n).mean()),
        "track_lin_vel": float((kern_sum / n).mean()),
        "track_yaw_rate": float((yaw_sum / n).mean()),
        "fell": fell,
    }


def gate(run_dir: Path, seed: int, bar: float | None, episodes: int) -> dict[str, Any]:
    """The run's final policy through :data:`CONDITIONS` on :data:`EVAL_TASK`; ``bar`` is the
    return a condition must reach (default 0.7 x this policy's own nominal).
    """
    from dataclasses import replace

    policy = load_policy(run_dir)
    overrides = flatten_overrides(policy.cfg.task_overrides)

    def make_env(extra: dict[str, Any]):
        return robolearn.make(EVAL_TASK, 8, seed=seed, nthread=1, curriculum={}, **{**overrides, **extra})

    conditions = CONDITIONS if bar is None else {k: replace(p, min_return=bar) for k, p in CONDITIONS.items()}
    rows = run_gate(make_env, policy.act, conditions, episodes=episodes, seed=seed, min_ratio=0.7)
    return {r.name: {"mean": r.mean_return, "passed": r.passed} for r in rows}


def fmt(values: list[float], digits: int = 2) -> str:
    """``mean (v1, v2, ...)``."""
    return f"{statistics.mean(values):.{digits}f} ({', '.join(f'{v:.{digits}f}' for v in values)})"


def main() -> None:
    """Train and/or judge, and print the markdown tables."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=3_000_000)
    p.add_argument("--variants", nargs="+", default=["plain", "dr"], choices=sorted(TASKS))
    p.add_argument("--phase", default="all", choices=["all", "train", "eval"])
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--eval-seed", type=int, default=4242)
    p.add_argument("--out", type=Path, default=Path("runs/quadruped_flat"))
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.phase in ("all", "train"):
        for seed in args.seeds:
            for variant in args.variants:
                run = args.out / variant / f"seed{seed}"
                print(f"[{time.strftime('%H:%M:%S')}] training {TASKS[variant]} seed {seed}", file=sys.stderr, flush=True)
                secs = train(TASKS[variant], seed, args.steps, run)
                (run / "wall_clock_s.txt").write_text(f"{secs:.1f}\n")
    if args.phase == "train":
        return
    results: dict[str, dict[int, dict[str, Any]]] = {v: {} for v in args.variants}
    for seed in args.seeds:
        bar = None
        for variant in sorted(args.variants, key=lambda v: v != "plain"):  # plain first: it sets the bar
            run = args.out / variant / f"seed{seed}"
            print(f"[{time.strftime('%H:%M:%S')}] judging {variant} seed {seed}", file=sys.stderr, flush=True)
            row: dict[str, Any] = {"tracking": tracking(run, args.eval_seed)}
            row["gate"] = gate(run, args.eval_seed, bar, args.episodes)
            if variant == "plain":
                bar = 0.7 * row["gate"]["nominal"]["mean"]
            clock = run / "wall_clock_s.txt"
            row["train_s"] = float(clock.read_text()) if clock.is_file() else float("nan")
            results[variant][seed] = row
    seeds = args.seeds
    print(f"# Quadruped-Flat PPO: seeds {seeds}, {args.steps} env steps per run\n")
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}, "
        f"robolearn {robolearn.__version__}; mean training wall-clock per run: "
        + ", ".join(f"{v} {statistics.mean(results[v][s]['train_s'] for s in seeds):.0f} s" for v in args.variants)
        + "\n"
    )
    print("| variant | lin. vel. error (m/s) | track_lin_vel kernel | track_yaw kernel | fell |")
    print("|---|---|---|---|---|")
    stand = tracking(None, args.eval_seed)
    print(
        f"| zero action (stand) | {stand['lin_vel_error']:.2f} | {stand['track_lin_vel']:.2f} | "
        f"{stand['track_yaw_rate']:.2f} | {stand['fell']:.2f} |"
    )
    for v in args.variants:
        t = [results[v][s]["tracking"] for s in seeds]
        print(
            f"| {v} | {fmt([x['lin_vel_error'] for x in t])} | {fmt([x['track_lin_vel'] for x in t])} | "
            f"{fmt([x['track_yaw_rate'] for x in t])} | {fmt([x['fell'] for x in t])} |"
        )
    print("\n| condition | " + " | ".join(f"{v}: mean return (per seed) | {v} passes" for v in args.variants) + " |")
    print("|---|" + "---|---:|" * len(args.variants))
    for name in ["nominal", *CONDITIONS]:
        cells = []
        for v in args.variants:
            vals = [results[v][s]["gate"][name]["mean"] for s in seeds]
            passes = sum(results[v][s]["gate"][name]["passed"] for s in seeds)
            cells += [fmt(vals), f"{passes}/{len(vals)}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
