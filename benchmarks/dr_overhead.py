"""Throughput cost of randomisation and latency on the batched env (issue 5; target: at most 10%).

Side by side in one process, interleaved in rounds with the order rotated, for each N:

``plain``      ``HalfCheetah`` as registered.
``events``     ``HalfCheetah-DR``'s randomisation events only (masses, friction, damping, motor
               strength at every reset; pushes on a 3-6 s timer); no noise, no delays.
``latency``    ``HalfCheetah-DR``'s sensor noise, observation delay and action delay only.
``jitter``     ``HalfCheetah-DR``'s control-period jitter only (0-1 substep late commands).
``dr_no_jitter`` ``HalfCheetah-DR`` without the control jitter: randomisation plus noise and
               delays plus its privileged group (what the issue's target is about).
``dr``         ``HalfCheetah-DR`` in full.

Actions are random in the bounds; episode counters start staggered so resets (where the events
run) happen inside every timed window at their steady-state rate. A rate is the median over
rounds; a ratio the median of per-round ratios to ``plain``.

    python benchmarks/dr_overhead.py [--sizes 64 256] [--seconds 4] [--rounds 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import mujoco
import torch

import robolearn
from robolearn.envs import BatchedEnv, task_cfg


def variant(name: str):
    """The task config of a variant."""
    if name == "plain":
        return task_cfg("HalfCheetah")
    cfg = task_cfg("HalfCheetah-DR")
    if name == "events":
        cfg.observations = task_cfg("HalfCheetah").observations
        cfg.action_delay = None
        cfg.control_jitter = None
    elif name == "latency":
        cfg.events = {}
        cfg.observations.pop("privileged")
        cfg.control_jitter = None
    elif name == "jitter":
        jitter = cfg.control_jitter
        cfg = task_cfg("HalfCheetah")
        cfg.control_jitter = jitter
    elif name == "dr_no_jitter":
        cfg.control_jitter = None
    return cfg


class Runner:
    """One env of a variant, stepped with a fixed pool of random actions."""

    def __init__(self, name: str, n: int, threads: int, seed: int) -> None:
        self.env = BatchedEnv(variant(name), n, seed=seed, nthread=threads, task_id=name)
        gen = torch.Generator().manual_seed(seed)
        low, high = self.env.ctrl_low.float(), self.env.ctrl_high.float()
        self.actions = [low + (high - low) * torch.rand(n, low.numel(), generator=gen) for _ in range(64)]
        self.env.episode_length[:] = torch.arange(n) * self.env.max_episode_length // n  # staggered ends
        self.t = 0

    def run(self, seconds: float) -> float:
        """Env steps per second over about ``seconds``."""
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(20):
                self.env.step(self.actions[self.t % 64])
                self.t += 1
            steps += 20
        return steps * self.env.num_envs / (time.perf_counter() - start)


def main() -> None:
    """Time the variants and print a markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", type=int, default=[64, 256])
    p.add_argument("--seconds", type=float, default=4.0, help="timed seconds per variant per N (all rounds)")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    robolearn.list_tasks()  # the task families register on first use
    names = ["plain", "events", "latency", "jitter", "dr_no_jitter", "dr"]
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, threads={args.threads}; "
        f"torch {torch.__version__}, mujoco {mujoco.__version__}, robolearn {robolearn.__version__}; "
        f"load at start {os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| N | plain steps/s | events / plain | noise+delays / plain | jitter / plain "
        "| **DR without jitter / plain** | full DR / plain | spread (DR w/o jitter) | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        runners = {k: Runner(k, n, args.threads, args.seed) for k in names}
        for r in runners.values():
            r.run(0.3)  # warm-up
        rates: dict[str, list[float]] = {k: [] for k in names}
        for i in range(args.rounds):
            order = names[i % len(names) :] + names[: i % len(names)]
            for k in order:
                rates[k].append(runners[k].run(args.seconds / args.rounds))
        ratio = {k: [a / b for a, b in zip(rates[k], rates["plain"], strict=True)] for k in names}
        med = {k: statistics.median(v) for k, v in ratio.items()}
        spread = (max(ratio["dr_no_jitter"]) - min(ratio["dr_no_jitter"])) / med["dr_no_jitter"]
        print(
            f"| {n} | {statistics.median(rates['plain']) / 1e3:.1f}k | {med['events']:.3f} | {med['latency']:.3f} "
            f"| {med['jitter']:.3f} | **{med['dr_no_jitter']:.3f}** | {med['dr']:.3f} | {spread:.0%} "
            f"| {os.getloadavg()[0]:.1f} |"
        )


if __name__ == "__main__":
    main()
