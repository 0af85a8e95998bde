"""What the SB3 side of the published table pays for running on robolearn's tasks.

Until session 21 the table (issue 17) trained Stable-Baselines3 through ``robolearn.envs.sb3_adapter``
on every task: one robolearn world per SB3 env. An SB3 user would more often train on Gymnasium's own
MuJoCo envs (``gymnasium.make("Hopper-v5")`` in a ``DummyVecEnv``), whose per-step cost is lower: a batched,
device-neutral env pays torch's per-operation overhead on every step, which 64 worlds amortise and
one world does not (which is why the table's MuJoCo entries now train SB3 on Gymnasium's twin,
``sb3.gymnasium``). This measures both, paired in one process (one torch thread, the order
alternated per repetition):

- env only: microseconds per step under uniform random actions;
- SB3 PPO at its defaults (n_steps 2048, 10 epochs of batch 64, 64x64 MLP): training seconds per env
  step split into collection (``collect_rollouts``) and updates, over ``--steps`` env steps.

    python benchmarks/sb3_env_overhead.py --reps 3 --steps 8192 --out /tmp/sb3_env_overhead.json

The tasks compared are those whose Gymnasium v5 env robolearn reproduces (same model, reward and
termination; the table's recipes add no task override for them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_line  # noqa: E402  (benchmarks/ is not a package)

from robolearn.envs.registry import GYMNASIUM_TWINS  # noqa: E402

PAIRS = dict(GYMNASIUM_TWINS)
"""robolearn task id -> the Gymnasium env it reproduces."""


def _adapter(task: str, seed: int) -> Any:
    import robolearn
    from robolearn.envs.sb3_adapter import RobolearnSB3VecEnv

    return RobolearnSB3VecEnv(env=robolearn.make(task, 1, seed=seed, nthread=1))


def _gymnasium(gym_id: str, seed: int) -> Any:
    from stable_baselines3.common.env_util import make_vec_env

    return make_vec_env(gym_id, n_envs=1, seed=seed)  # DummyVecEnv of one Monitor-wrapped env: SB3's usual way


def env_us_per_step(venv: Any, steps: int, seed: int) -> float:
    """Microseconds per ``venv.step`` under uniform random actions."""
    venv.reset()
    rng = np.random.default_rng(seed)
    shape = (venv.num_envs, *venv.action_space.shape)
    start = time.perf_counter()
    for _ in range(steps):
        venv.step(rng.uniform(-1.0, 1.0, shape).astype(np.float32))
    return 1e6 * (time.perf_counter() - start) / steps


def ppo_us_per_step(venv: Any, steps: int, seed: int) -> tuple[float, float]:
    """(collection, update) microseconds per env step of SB3's default PPO over ``steps`` env steps."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        collect = 0.0
        began = 0.0

        def _on_rollout_start(self) -> None:
            self.began = time.perf_counter()

        def _on_rollout_end(self) -> None:
            self.collect += time.perf_counter() - self.began

        def _on_step(self) -> bool:
            return True

    model = PPO("MlpPolicy", venv, seed=seed, device="cpu")
    clock = Clock()
    start = time.perf_counter()
    model.learn(steps, callback=clock)
    total = time.perf_counter() - start
    done = model.num_timesteps
    return 1e6 * clock.collect / done, 1e6 * (total - clock.collect) / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8192, help="env steps of each PPO measurement")
    parser.add_argument("--env-steps", type=int, default=5000, help="steps of each env-only measurement")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for task in args.tasks:
        rows: dict[str, list[tuple[float, float, float]]] = {"robolearn_adapter": [], "gymnasium": []}
        for rep in range(args.reps):
            order = ["robolearn_adapter", "gymnasium"] if rep % 2 == 0 else ["gymnasium", "robolearn_adapter"]
            for side in order:
                make = (lambda s, t=task: _adapter(t, s)) if side == "robolearn_adapter" else (
                    lambda s, g=PAIRS[task]: _gymnasium(g, s))
                env_us = env_us_per_step(make(rep), args.env_steps, rep)
                collect, update = ppo_us_per_step(make(rep), args.steps, rep)
                rows[side].append((env_us, collect, update))
        summary = {}
        for side, values in rows.items():
            summary[side] = {
                "env_us_per_step": statistics.median(v[0] for v in values),
                "ppo_collect_us_per_step": statistics.median(v[1] for v in values),
                "ppo_update_us_per_step": statistics.median(v[2] for v in values),
                "raw": values,
            }
        a, g = summary["robolearn_adapter"], summary["gymnasium"]
        paired = [ra[1] + ra[2] for ra in rows["robolearn_adapter"]], [rg[1] + rg[2] for rg in rows["gymnasium"]]
        summary["ppo_seconds_ratio_adapter_over_gymnasium"] = statistics.median(
            x / y for x, y in zip(*paired, strict=True))
        summary["env_ratio_adapter_over_gymnasium"] = statistics.median(
            ra[0] / rg[0] for ra, rg in zip(rows["robolearn_adapter"], rows["gymnasium"], strict=True))
        results[task] = summary
        print(f"{task}: env {a['env_us_per_step']:.0f} vs {g['env_us_per_step']:.0f} us/step; PPO collect "
              f"{a['ppo_collect_us_per_step']:.0f} vs {g['ppo_collect_us_per_step']:.0f}, update "
              f"{a['ppo_update_us_per_step']:.0f} vs {g['ppo_update_us_per_step']:.0f} us/step; "
              f"PPO seconds adapter/gymnasium {summary['ppo_seconds_ratio_adapter_over_gymnasium']:.2f}x (paired median)")
    import stable_baselines3

    line = machine_line({"stable_baselines3": stable_baselines3.__version__})
    print(line)
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": line, "results": results}, indent=2))


if __name__ == "__main__":
    main()
