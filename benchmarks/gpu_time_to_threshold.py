"""Wall-clock to a return threshold with PPO: the GPU path against the CPU path (issue 15).

Two paths, both robolearn's PPO driven by its verbs as ``OnPolicyRunner._iterate`` drives them
(``benchmarks/onpolicy.py``), the same recipe (``PPOConfig`` defaults: 256x3 ELU actor and critic,
5 epochs x 4 minibatches, adaptive KL learning rate, observation normalisation; ``--num-steps``
per world per update; ``--set KEY=VALUE`` for the rest), differing only in where they run:

``gpu``
    ``--gpu-envs`` worlds (4,096 by default) of ``--backend`` (warp) on ``--device`` (cuda), the
    learner on the same device.
``cpu``
    robolearn's CPU path: the MuJoCo C batch (``backend="mujoco"``) with its usual world count
    ``--cpu-envs`` on every core, the learner on the CPU.

Each (task, seed) trains both paths one after the other (the order alternates from seed to seed)
until the deterministic policy's evaluation return reaches ``--threshold`` or the training time
reaches ``--max-minutes`` (the cap per run). The clock counts training only (synchronised with
the device before each reading); evaluations run every ``--eval-seconds`` of training time, so
both paths are checked at the same wall-clock resolution, on a separate 16-world CPU env seeded
``10_000 + seed`` (the same start states every time, the same for both paths), one full episode
per world, and are not counted.

Reported per run: the training seconds and env steps at the first evaluation >= threshold, or
"not reached" with the best return; per task and path the median over seeds (a run that did not
reach counts as slower than any that did); the CPU / GPU ratio of the medians.

    python benchmarks/gpu_time_to_threshold.py                   # H100/H200: HalfCheetah and Ant, 3 seeds
    python benchmarks/gpu_time_to_threshold.py --quick --device cpu --backend mujoco   # CPU smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import (  # noqa: E402  (the benchmarks folder is not a package)
    add_common_args,
    fmt_rate,
    log,
    machine_info,
    make_env,
    parse_sets,
    print_machine,
    print_table,
    setup,
    sync,
    write_json,
)
from onpolicy import ppo_iteration  # noqa: E402

from robolearn.algos.ppo import PPO, PPOConfig  # noqa: E402

EVAL_SEED_OFFSET = 10_000
THRESHOLDS = {"HalfCheetah": 3000.0, "Ant": 3000.0}
"""Default return thresholds (``--threshold`` overrides them for every task)."""


@dataclass
class Run:
    """One path, one task, one seed: the evaluation curve and the crossing."""

    task: str
    path: str
    seed: int
    num_envs: int
    evals: list[dict[str, float]] = field(default_factory=list)
    reached: dict[str, float] | None = None
    best_return: float = -math.inf
    env_steps: int = 0
    train_s: float = 0.0
    stop: str = ""


def evaluate(env: Any, agent: PPO, max_steps: int) -> float:
    """Mean return of one deterministic episode per eval world (from the same start states every time)."""
    obs, _ = env.reset(seed=env.seed)
    total = torch.zeros(env.num_envs, dtype=torch.float64)
    alive = torch.ones(env.num_envs, dtype=torch.bool)
    for _ in range(min(env.max_episode_length, max_steps)):
        action = agent.act_inference({k: v.to(agent.device) for k, v in obs.items()}).to(env.device)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += reward.double() * alive
        alive &= ~(terminated | truncated)
        if not bool(alive.any()):
            break
    return float(total.mean())


def run_one(task: str, path: str, seed: int, threshold: float, args: argparse.Namespace,
            gpu_device: torch.device) -> Run:
    """Train one path from ``seed`` until the threshold or the time cap."""
    if path == "gpu":
        device, backend, n = gpu_device, args.backend, args.gpu_envs
    else:
        device, backend, n = torch.device("cpu"), "mujoco", args.cpu_envs
    cfg = parse_sets(args.set, PPOConfig, {"num_steps": args.num_steps, "seed": seed})
    env = make_env(task, n, backend, device, seed=seed, nthread=args.threads)
    eval_env = make_env(task, args.eval_envs, "mujoco", "cpu", seed=EVAL_SEED_OFFSET + seed, nthread=args.threads)
    torch.manual_seed(seed)
    agent = PPO(env.obs_dims, env.action_dim, cfg, device=device)
    run = Run(task, path, seed, n)
    obs = env.obs
    per_update = cfg.num_steps * n
    cap_s = args.max_minutes * 60.0
    while True:
        sync(device)
        t0 = time.perf_counter()
        chunk = 0.0
        # Whole updates until this chunk of training time is spent (or the cap is).
        while chunk < args.eval_seconds and run.train_s + chunk < cap_s:
            obs, _ = ppo_iteration(agent, env, obs, cfg.num_steps)
            run.env_steps += per_update
            sync(device)
            chunk = time.perf_counter() - t0
        run.train_s += chunk
        ret = evaluate(eval_env, agent, args.eval_steps)
        point = {"env_steps": float(run.env_steps), "train_s": run.train_s, "return": ret}
        run.evals.append(point)
        run.best_return = max(run.best_return, ret)
        log(f"  {task} {path} seed {seed}: {run.env_steps / 1e6:7.3f}M steps  train {run.train_s:7.1f} s  "
            f"eval {ret:8.1f}")
        if ret >= threshold:
            run.reached, run.stop = point, f"return >= {threshold:g}"
            break
        if run.train_s >= cap_s:
            run.stop = f"time cap ({args.max_minutes:g} min)"
            break
    env.close()
    eval_env.close()
    if device.type == "cuda":
        del agent, env
        torch.cuda.empty_cache()
    return run


def _median_time(runs: list[Run]) -> float:
    """Median training seconds to the threshold; ``inf`` for a run that did not reach."""
    return statistics.median([r.reached["train_s"] if r.reached else math.inf for r in runs])


def _secs(x: float) -> str:
    return f"{x:.1f} s" if math.isfinite(x) else "not reached"


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run every (task, seed, path), print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--tasks", nargs="+", default=None, help="default: HalfCheetah Ant (quick: HalfCheetah)")
    parser.add_argument("--paths", nargs="+", default=["gpu", "cpu"], choices=["gpu", "cpu"])
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 (quick: 0 1)")
    parser.add_argument("--threshold", type=float, default=None,
                        help=f"eval return to reach, every task (default per task: {THRESHOLDS})")
    parser.add_argument("--gpu-envs", type=int, default=None, help="worlds of the GPU path (default 4096)")
    parser.add_argument("--cpu-envs", type=int, default=None, help="worlds of the CPU path (default 256)")
    parser.add_argument("--num-steps", type=int, default=None, help="rollout steps per world per update (default 24)")
    parser.add_argument("--max-minutes", type=float, default=None, help="training time cap per run (default 5)")
    parser.add_argument("--eval-seconds", type=float, default=None, help="training seconds between evals (default 10)")
    parser.add_argument("--eval-envs", type=int, default=None, help="eval worlds, one episode each (default 16)")
    parser.add_argument("--eval-steps", type=int, default=None, help="cap on eval episode steps (default: full)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra PPOConfig fields (both paths)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.tasks = args.tasks or (["HalfCheetah"] if quick else ["HalfCheetah", "Ant"])
    args.seeds = args.seeds if args.seeds is not None else ([0, 1] if quick else [0, 1, 2])
    args.gpu_envs = args.gpu_envs or (8 if quick else 4096)
    args.cpu_envs = args.cpu_envs or (4 if quick else 256)
    args.num_steps = args.num_steps or (4 if quick else 24)
    args.max_minutes = args.max_minutes or (0.03 if quick else 5.0)
    args.eval_seconds = args.eval_seconds or (0.5 if quick else 10.0)
    args.eval_envs = args.eval_envs or (2 if quick else 16)
    args.eval_steps = args.eval_steps or (50 if quick else 10**9)
    if quick:
        # A threshold every run reaches at its first evaluation: the smoke run exercises the crossing.
        args.threshold = -1000.0 if args.threshold is None else args.threshold
        args.set = ["num_epochs=1", "num_minibatches=2", "actor_hidden=(32, 32)", "critic_hidden=(32, 32)",
                    *args.set]
    device = setup(args)
    info = machine_info(args.device)
    log(f"{info}")

    runs: list[Run] = []
    for task in args.tasks:
        threshold = args.threshold if args.threshold is not None else THRESHOLDS.get(task, 0.0)
        for i, seed in enumerate(args.seeds):
            order = args.paths if i % 2 == 0 else args.paths[::-1]
            for path in order:
                runs.append(run_one(task, path, seed, threshold, args, device))

    print_machine(info, ["python", *sys.argv])
    suffix = " — QUICK SMOKE RUN, not a measurement" if quick else ""
    print_table(
        f"PPO time to the return threshold, per run (cap {args.max_minutes:g} min of training){suffix}",
        ["task", "path", "worlds", "seed", "train time to threshold", "env steps then", "best eval return",
         "env steps/s", "stop"],
        [[r.task, r.path, r.num_envs, r.seed, _secs(r.reached["train_s"]) if r.reached else "not reached",
          f"{int(r.reached['env_steps']):,}" if r.reached else "—", f"{r.best_return:.0f}",
          fmt_rate(r.env_steps / max(r.train_s, 1e-9)), r.stop] for r in runs],
    )
    rows = []
    for task in args.tasks:
        threshold = args.threshold if args.threshold is not None else THRESHOLDS.get(task, 0.0)
        med = {p: _median_time([r for r in runs if r.task == task and r.path == p]) for p in args.paths}
        reached = {p: sum(1 for r in runs if r.task == task and r.path == p and r.reached) for p in args.paths}
        ratio = "—"
        if "gpu" in med and "cpu" in med and math.isfinite(med["gpu"]):
            ratio = f"{med['cpu'] / med['gpu']:.1f}×" if math.isfinite(med["cpu"]) else "> cap / GPU time"
        rows.append([task, f"{threshold:g}", *(f"{_secs(med[p])} ({reached[p]}/{len(args.seeds)})" for p in args.paths),
                     ratio])
    print_table(f"Median over seeds (runs reaching){suffix}",
                ["task", "threshold", *(f"{p} path" for p in args.paths), "CPU / GPU time"], rows)
    write_json(args.json, {"machine": info, "args": vars(args), "runs": [r.__dict__ for r in runs]})


if __name__ == "__main__":
    main()
