"""Paired robolearn-vs-raw-physics check for HalfCheetah (no Gymnasium processes).

Alternates 200 robolearn steps with 200 raw ``mujoco.batch`` steps (same model, decimation and
threads) for 12 rounds at each N and prints the median ratio raw time / robolearn time with the
per-round range. Episode counters are staggered so partial resets happen at their steady rate.

    python benchmarks/paired_check.py [--sizes 64 256] [--rounds 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from mujoco.batch import Batch

import robolearn


def paired(n: int, rounds: int, steps: int = 200) -> tuple[float, float, float, float, float]:
    env = robolearn.make("HalfCheetah", n, seed=0)
    env.episode_length[:] = torch.randint(0, env.max_episode_length, (n,))
    actions = [torch.rand(n, env.action_dim) * 2 - 1 for _ in range(64)]
    batch = Batch(env.model, n, nthread=min(os.cpu_count() or 1, n))
    qpos, qvel, ctrl = batch.bind("qpos"), batch.bind("qvel"), batch.bind("ctrl")
    controls = [a.double().numpy() for a in actions]
    ratios, rl_us, raw_us = [], [], []
    for r in range(rounds):
        if r % 3 == 0:  # raw physics replays states from the task's own trajectories
            qpos[:] = env.sim.qpos.numpy()
            qvel[:] = env.sim.qvel.numpy()
        t0 = time.perf_counter()
        for i in range(steps):
            env.step(actions[i % 64])
        t_rl = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(steps):
            ctrl[:] = controls[i % 64]
            batch.step(nstep=env.cfg.decimation)
        t_raw = time.perf_counter() - t0
        ratios.append(t_raw / t_rl)
        rl_us.append(t_rl / steps * 1e6)
        raw_us.append(t_raw / steps * 1e6)
    return statistics.median(ratios), min(ratios), max(ratios), statistics.median(rl_us), statistics.median(raw_us)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| N | robolearn/raw (median) | range | robolearn us/step | raw us/step |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        med, lo, hi, rl, raw = paired(n, args.rounds)
        print(f"| {n} | {med:.2f} | {lo:.2f}-{hi:.2f} | {rl:.0f} | {raw:.0f} |")


if __name__ == "__main__":
    main()
