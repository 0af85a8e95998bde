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

``--profile STEPS`` instead profiles ``STEPS`` steps of ``plain`` and ``dr_no_jitter`` at each N with
cProfile and prints the top functions by cumulative time, in microseconds per env step (inflated
by the profiler's per-call cost, so compare the two columns, not against the timed rates).
``--sections STEPS`` times sections of the step (physics, observations, events, resets ...) in
CPU time of the stepping thread (``time.thread_time``: time the process waits for a core on a
loaded machine is not counted), ``STEPS`` per round and variant, interleaved over ``--rounds``.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import os
import platform
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

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

    def steps(self, count: int) -> None:
        """Step ``count`` times."""
        for _ in range(count):
            self.env.step(self.actions[self.t % 64])
            self.t += 1

    def run(self, seconds: float) -> float:
        """Env steps per second over about ``seconds``."""
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(20):
                self.env.step(self.actions[self.t % 64])
                self.t += 1
            steps += 20
        return steps * self.env.num_envs / (time.perf_counter() - start)


def _label(key: tuple[str, int, str]) -> str:
    """``module:line(function)`` of a pstats key (built-ins as pstats names them)."""
    path, line, func = key
    if path == "~":
        return func
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
    if "site-packages" in path:
        path = path.split("site-packages" + os.sep, 1)[1]
    elif path.startswith(root + os.sep):
        path = os.path.relpath(path, root)
    return f"{path.replace(os.sep, '/')}:{line}({func})"


def profile(n: int, threads: int, seed: int, steps: int, top: int) -> None:
    """Print the ``top`` functions of ``dr_no_jitter`` by cumulative time per step, beside ``plain``'s."""
    per_step: dict[str, dict[str, tuple[float, float]]] = {}
    for name in ("plain", "dr_no_jitter"):
        runner = Runner(name, n, threads, seed)
        runner.steps(50)  # warm-up: streams' blocks, plans of the reset draws
        prof = cProfile.Profile()
        prof.enable()
        runner.steps(steps)
        prof.disable()
        stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        per_step[name] = {_label(k): (v[1] / steps, v[3] / steps * 1e6) for k, v in stats.items()}
    dr, plain = per_step["dr_no_jitter"], per_step["plain"]
    print(f"\nN = {n}, {steps} steps each under cProfile: cumulative microseconds per env step\n")
    print("| function | calls/step | DR w/o jitter us/step | plain us/step |")
    print("|---|---:|---:|---:|")
    for label, (calls, cum) in sorted(dr.items(), key=lambda kv: -kv[1][1])[:top]:
        other = plain.get(label)
        print(f"| `{label}` | {calls:.2f} | {cum:.0f} | {'' if other is None else f'{other[1]:.0f}'} |")


SECTIONS = (
    ("physics", "sim", "step"),
    ("observations (incl. reset rows)", "observation_manager", "compute"),
    ("interval events", "event_manager", "step"),
    ("resets (incl. reset events)", "", "_reset_worlds"),
    ("reset events", "event_manager", "apply"),
    ("reward", "reward_manager", "compute"),
    ("action check", "", "_check_action"),
    ("action delay", "", "action_delay"),
)
"""``(label, attribute of the env holding it or "" for the env, method)`` of each timed section."""


def _timed(totals: dict[str, float], label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` adding its CPU time to ``totals[label]``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[label] = totals.get(label, 0.0) + time.thread_time() - start

    return wrapper


def sections(n: int, threads: int, seed: int, steps: int, rounds: int) -> None:
    """Print CPU microseconds per step of each section for ``plain``, ``events``, ``latency`` and ``dr_no_jitter``."""
    names = ["plain", "events", "latency", "dr_no_jitter"]
    runners, totals = {}, {}
    for name in names:
        runner, acc = Runner(name, n, threads, seed), {}
        env = runner.env
        for label, owner, method in SECTIONS:
            obj = getattr(env, owner) if owner else env
            if getattr(obj, method, None) is not None:
                setattr(obj, method, _timed(acc, label, getattr(obj, method)))
        env.step = _timed(acc, "total", env.step)  # type: ignore[method-assign]
        runner.steps(50)
        acc.clear()
        runners[name], totals[name] = runner, acc
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            runners[name].steps(steps)
    per = {name: {k: v / (steps * rounds) * 1e6 for k, v in totals[name].items()} for name in names}
    print(f"\nN = {n}: CPU microseconds per env step ({rounds} rounds x {steps} steps per variant)\n")
    print("| section | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for label in ["total", *(s[0] for s in SECTIONS)]:
        print(f"| {label} | " + " | ".join(f"{per[name].get(label, 0.0):.0f}" for name in names) + " |")
    print("| ratio to plain (total) | " + " | ".join(f"{per['plain']['total'] / per[name]['total']:.3f}" for name in names) + " |")


def main() -> None:
    """Time the variants and print a markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", type=int, default=[64, 256])
    p.add_argument("--seconds", type=float, default=4.0, help="timed seconds per variant per N (all rounds)")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", type=int, default=0, metavar="STEPS", help="profile instead of timing (see above)")
    p.add_argument("--top", type=int, default=25, help="functions listed by --profile")
    p.add_argument("--sections", type=int, default=0, metavar="STEPS", help="time sections instead (see above)")
    args = p.parse_args()
    torch.set_num_threads(1)
    robolearn.list_tasks()  # the task families register on first use
    if args.profile:
        for n in args.sizes:
            profile(n, args.threads, args.seed, args.profile, args.top)
        return
    if args.sections:
        for n in args.sizes:
            sections(n, args.threads, args.seed, args.sections, args.rounds)
        return
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
