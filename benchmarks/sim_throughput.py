"""Simulation throughput (issue 2): robolearn against Gymnasium and raw batched MuJoCo, in one run.

    python benchmarks/sim_throughput.py [--tasks HalfCheetah ...] [--sizes 1 16 64 256]
        [--seconds S] [--rounds R] [--json out.json] [--profile]

Throughput is env steps/s: worlds x control steps per second, a control step being the task's
``decimation`` physics substeps. For every task and every N, side by side in one process:

``robolearn``
    ``robolearn.make(task, N, seed=0, nthread=threads)`` with all its managers, stepped with
    float32 actions (as a policy emits them) drawn uniformly in the action range before timing.
    Episode counters start staggered over the episode length, as in a long training run, so that
    partial resets happen inside every timed window at their steady-state rate.
``raw``
    ``mujoco.batch.Batch(env.model, N, nthread=min(threads, N))`` with only ``qpos``, ``qvel`` and
    ``ctrl`` bound, ``step(nstep=decimation)``, starting from states of the task's own trajectories
    (recorded from a robolearn rollout) and driven by the controls recorded along them; every
    ``RECORD_STEPS`` steps the rows are loaded again. The physical limit: no Python env logic.
``sync``
    ``gymnasium.vector.SyncVectorEnv`` of N ``gymnasium.make(gym_id)`` envs (same-step autoreset,
    the mode robolearn implements), with the same actions; episode counters staggered likewise.
``asyncW``
    ``gymnasium.vector.AsyncVectorEnv`` with at most W worker processes (W = 16 by the issue, and
    W = the core count, since on a small machine 16 processes only add switching). With N <= W
    each process holds one env, as AsyncVectorEnv is meant to be used. With N > W each process
    holds a ``SyncVectorEnv`` of N/W envs, presented to AsyncVectorEnv as one env whose
    observation is a dict of the block's observations, rewards and done flags, so that every
    per-env result returns through AsyncVectorEnv's shared memory and the pipes carry only the
    action block and an acknowledgement (the chunked layout of SB3-style subprocess envs). N must
    divide evenly; otherwise W drops to the largest divisor of N below it.

Robolearn and raw use the same thread count (``--threads``, default: the core count). The tasks
with no Gymnasium counterpart (``GYMNASIUM_IDS``) are timed for robolearn and raw only.

Noise: every method is warmed up, then timed in ``--rounds`` slices of ``--seconds / --rounds``
each, the methods interleaved and their order rotated every round, so that load from other
processes falls on all of them alike. A rate is the median over rounds; a ratio is the median over
rounds of the ratio within a round (paired, so that slow drifts in load cancel).

``--profile`` adds, at ``--profile-size`` worlds, a breakdown of one robolearn step against the
physics underneath it (interleaved as above) and a cProfile listing of robolearn's step.
The contact-force section (``--cf-sizes``) times ``contact_forces=True`` (a probe sensor that makes
MuJoCo compute ``cfrc_ext`` in every substep, and a persistent batch, one MjData per world) against
the default, for robolearn and for raw physics: the probe model in a shared-MjData batch and in a
persistent one, to tell the cost of the probe from the cost of persistence.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import mujoco
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from mujoco.batch import Batch

import robolearn

GYMNASIUM_IDS: dict[str, str] = {"HalfCheetah": "HalfCheetah-v5", "Ant": "Ant-v5", "Humanoid": "Humanoid-v5"}
"""robolearn task -> the Gymnasium env it reproduces; tasks not here get robolearn and raw only."""

TARGET_TASK = "HalfCheetah"
TARGET_MIN_SIZE = 64
TARGET_VS_RAW = 0.8
TARGET_VS_GYM = 3.0

ACTION_POOL = 64  # distinct action batches per N, cycled through while timing
RECORD_WORLDS = 64  # worlds of the rollout that supplies raw physics' states and controls
RECORD_BURN_IN = 100  # control steps before recording, so states are mid-episode
RECORD_STEPS = 200  # recorded control steps: 64 x 200 states

# The derived fields MujocoBackend binds (the batch copies them out after every step); the
# breakdown times a batch with these bound to separate their cost from the Python on top.
BACKEND_DERIVED = ("xpos", "xquat", "cvel", "sensordata", "cfrc_ext")


class Runner(Protocol):
    """One way of stepping N worlds: ``step()`` advances all of them one control step."""

    worlds: int

    def step(self) -> None:
        """Advance every world one control step."""

    def close(self) -> None:
        """Release processes and memory."""


# -- the runners -----------------------------------------------------------------------------
def action_pool(low: np.ndarray, high: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``[ACTION_POOL, n, A]`` float32 actions uniform in ``[low, high]`` (+-1 where unbounded)."""
    lo = np.where(np.isfinite(low), low, -1.0)
    hi = np.where(np.isfinite(high), high, 1.0)
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=(ACTION_POOL, n, lo.size)).astype(np.float32)


class RobolearnRunner:
    """``robolearn.make(task, N)`` with every manager, stepped through its resets."""

    def __init__(
        self, task: str, n: int, threads: int, actions: np.ndarray, seed: int, **overrides: Any
    ) -> None:
        self.worlds = n
        self.env = robolearn.make(task, n, seed=seed, nthread=threads, **overrides)
        self._actions = itertools.cycle(list(torch.from_numpy(actions).unbind(0)))
        offsets = np.random.default_rng(seed).integers(0, self.env.max_episode_length, n)
        self.env.episode_length[:] = torch.from_numpy(offsets)

    def step(self) -> None:
        self.env.step(next(self._actions))

    def close(self) -> None:
        self.env.close()


@dataclass
class Recording:
    """States ``[T, W, ...]`` of a robolearn rollout and the controls applied from them."""

    qpos: np.ndarray
    qvel: np.ndarray
    ctrl: np.ndarray


@dataclass
class TaskSetup:
    """What every section of one task shares: models, control rate, action range, a recording."""

    model: mujoco.MjModel
    model_cf: mujoco.MjModel
    decimation: int
    low: np.ndarray
    high: np.ndarray
    recording: Recording


def prepare(task: str, threads: int, seed: int) -> TaskSetup:
    """Compile the task (with and without the contact-force probe) and record a random rollout."""
    env = robolearn.make(task, RECORD_WORLDS, seed=seed, nthread=threads)
    low, high = env.ctrl_low.numpy(), env.ctrl_high.numpy()
    actions = itertools.cycle(torch.from_numpy(action_pool(low, high, RECORD_WORLDS, seed)).unbind(0))
    for _ in range(RECORD_BURN_IN):
        env.step(next(actions))
    qpos, qvel, ctrl = [], [], []
    for _ in range(RECORD_STEPS):
        qpos.append(env.sim.qpos.numpy().copy())
        qvel.append(env.sim.qvel.numpy().copy())
        env.step(next(actions))
        ctrl.append(env.sim.ctrl.numpy().copy())
    recording = Recording(np.stack(qpos), np.stack(qvel), np.stack(ctrl))
    model_cf = robolearn.make(task, 1, seed=seed, nthread=1, contact_forces=True).model
    return TaskSetup(env.model, model_cf, env.sim.decimation, low, high, recording)


class RawRunner:
    """``mujoco.batch.Batch`` stepping recorded states with recorded controls; nothing else."""

    def __init__(
        self,
        model: mujoco.MjModel,
        decimation: int,
        n: int,
        threads: int,
        recording: Recording,
        extra_binds: tuple[str, ...] = (),
        persistent: bool = False,
    ) -> None:
        self.worlds = n
        self.decimation = decimation
        self.batch = Batch(model, n, nthread=min(threads, n), persistent=persistent)
        self.qpos = self.batch.bind("qpos")
        self.qvel = self.batch.bind("qvel")
        self.ctrl = self.batch.bind("ctrl")
        for name in extra_binds:
            self.batch.bind(name)
        rows = np.arange(n) % recording.qpos.shape[1]
        self.qpos0 = recording.qpos[0, rows]
        self.qvel0 = recording.qvel[0, rows]
        self.ctrls = [np.ascontiguousarray(c[rows]) for c in recording.ctrl]
        self.batch.reset()
        self._t = len(self.ctrls)

    def step(self) -> None:
        t = self._t
        if t == len(self.ctrls):
            self.qpos[:] = self.qpos0
            self.qvel[:] = self.qvel0
            t = 0
        self.ctrl[:] = self.ctrls[t]
        self.batch.step(nstep=self.decimation)
        self._t = t + 1

    def close(self) -> None:
        del self.batch


def _stagger(envs: Any, seed: int) -> None:
    """Start each Gymnasium env's time limit at a random point of its episode."""
    rng = np.random.default_rng(seed)
    for env in envs:
        env.set_wrapper_attr("_elapsed_steps", int(rng.integers(0, env.spec.max_episode_steps)))


class SyncRunner:
    """Gymnasium ``SyncVectorEnv`` of N envs."""

    def __init__(self, gym_id: str, n: int, actions: np.ndarray, seed: int) -> None:
        self.worlds = n
        self.env = SyncVectorEnv([partial(gym.make, gym_id)] * n, autoreset_mode=AutoresetMode.SAME_STEP)
        self.env.reset(seed=seed)
        _stagger(self.env.envs, seed)
        self._actions = itertools.cycle(list(actions))

    def step(self) -> None:
        self.env.step(next(self._actions))

    def close(self) -> None:
        self.env.close()


class BlockEnv(gym.Env):
    """``k`` Gymnasium envs in one worker process, seen by ``AsyncVectorEnv`` as one env.

    The inner ``SyncVectorEnv`` resets its own envs (same step); rewards and done flags ride in the
    observation dict, so they return through shared memory with the observations.
    """

    def __init__(self, gym_id: str, k: int) -> None:
        self.k = k
        self.inner = SyncVectorEnv([partial(gym.make, gym_id)] * k, autoreset_mode=AutoresetMode.SAME_STEP)
        self.observation_space = spaces.Dict(
            {
                "obs": self.inner.observation_space,
                "reward": spaces.Box(-np.inf, np.inf, (k,), np.float64),
                "terminated": spaces.MultiBinary(k),
                "truncated": spaces.MultiBinary(k),
            }
        )
        self.action_space = self.inner.action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        obs, _ = self.inner.reset(seed=None if seed is None else seed * self.k)
        _stagger(self.inner.envs, 0 if seed is None else seed)
        zeros = np.zeros(self.k, dtype=np.int8)
        return {"obs": obs, "reward": np.zeros(self.k), "terminated": zeros, "truncated": zeros}, {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        obs, reward, terminated, truncated, _ = self.inner.step(action)
        return (
            {"obs": obs, "reward": reward, "terminated": terminated, "truncated": truncated},
            0.0,
            False,
            False,
            {},
        )

    def close(self) -> None:
        self.inner.close()


def async_workers(n: int, cap: int) -> int:
    """Worker processes for N envs under a cap: the largest divisor of N that is <= cap."""
    w = min(cap, n)
    while n % w:
        w -= 1
    return w


class AsyncRunner:
    """Gymnasium ``AsyncVectorEnv`` over ``workers`` processes presenting N envs (see module doc)."""

    def __init__(
        self, gym_id: str, n: int, workers: int, actions: np.ndarray, seed: int, context: str
    ) -> None:
        self.worlds = n
        self.workers = workers
        self.k = n // workers
        if self.k == 1:
            fns: list[Callable[[], gym.Env]] = [partial(gym.make, gym_id)] * n
        else:
            fns = [partial(BlockEnv, gym_id, self.k)] * workers
        self.env = AsyncVectorEnv(fns, context=context, autoreset_mode=AutoresetMode.SAME_STEP)
        self.env.reset(seed=seed)
        if self.k == 1:
            limit = gym.spec(gym_id).max_episode_steps or 1
            offsets = np.random.default_rng(seed).integers(0, limit, n)
            self.env.set_attr("_elapsed_steps", [int(x) for x in offsets])
        shaped = actions.reshape(actions.shape[0], workers, self.k, -1) if self.k > 1 else actions
        self._actions = itertools.cycle(list(shaped))

    def step(self) -> None:
        obs, reward, terminated, truncated, _ = self.env.step(next(self._actions))
        if self.k > 1:  # present N envs, as the other runners do
            n = self.worlds
            terminated, truncated = obs["terminated"].reshape(n), obs["truncated"].reshape(n)
            obs, reward = obs["obs"].reshape(n, -1), obs["reward"].reshape(n)
        self.last = (obs, reward, terminated, truncated)

    def close(self) -> None:
        self.env.close()


# -- timing ----------------------------------------------------------------------------------
def run_for(runner: Runner, seconds: float) -> float:
    """Step ``runner`` for about ``seconds``; return env steps per second."""
    step = runner.step
    start = time.perf_counter()
    end = start + seconds
    count = 0
    while True:
        step()
        count += 1
        now = time.perf_counter()
        if now >= end:
            return runner.worlds * count / (now - start)


def measure(runners: dict[str, Runner], seconds: float, rounds: int, warmup: float) -> dict[str, list[float]]:
    """Per-round steps/s of each runner, interleaved, the order rotated every round."""
    for runner in runners.values():
        run_for(runner, warmup)
    names = list(runners)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            rates[name].append(run_for(runners[name], seconds / rounds))
    return rates


def paired_ratio(num: list[float], den: list[float]) -> float:
    """Median over rounds of ``num / den`` within each round."""
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def spread(rates: dict[str, list[float]]) -> float:
    """The widest (max - min) / median over the methods: how noisy this measurement was."""
    return max((max(v) - min(v)) / statistics.median(v) for v in rates.values())


def close_all(runners: dict[str, Runner]) -> None:
    """Close every runner (async ones own processes)."""
    for runner in runners.values():
        runner.close()


# -- one task --------------------------------------------------------------------------------
def bench_task(
    task: str, setup: TaskSetup, args: argparse.Namespace, log: Callable[[str], None]
) -> dict[str, Any]:
    """Time every method at every N for ``task``; return rates and ratios."""
    gym_id = GYMNASIUM_IDS.get(task)
    caps = list(dict.fromkeys(args.async_workers))
    result: dict[str, Any] = {"task": task, "gym_id": gym_id, "decimation": setup.decimation, "sizes": {}}
    for n in args.sizes:
        actions = action_pool(setup.low, setup.high, n, args.seed)
        log(f"{task} N={n}: building")
        runners: dict[str, Runner] = {
            "robolearn": RobolearnRunner(task, n, args.threads, actions, args.seed),
            "raw": RawRunner(setup.model, setup.decimation, n, args.threads, setup.recording),
        }
        workers: dict[str, int] = {}
        if gym_id is not None:
            runners["sync"] = SyncRunner(gym_id, n, actions, args.seed)
            built: dict[int, str] = {}
            for cap in caps:
                w = async_workers(n, cap)
                workers[f"async{cap}"] = w
                if w not in built:  # e.g. at N=1 every cap means one worker: time it once
                    built[w] = f"async{cap}"
                    runners[built[w]] = AsyncRunner(gym_id, n, w, actions, args.seed, args.mp_context)
        try:
            log(f"{task} N={n}: timing {', '.join(runners)}")
            rates = measure(runners, args.seconds, args.rounds, args.warmup)
        finally:
            close_all(runners)
        for name, w in workers.items():  # a cap that mapped onto an already-timed worker count
            first = next(k for k, v in workers.items() if v == w)
            rates.setdefault(name, rates[first])
        result["sizes"][n] = summarize(rates, workers) | {"loadavg": _loadavg()}
    return result


def summarize(rates: dict[str, list[float]], workers: dict[str, int]) -> dict[str, Any]:
    """Medians, paired ratios and the noise of one (task, N) measurement."""
    rl = rates["robolearn"]
    out: dict[str, Any] = {
        "rounds": rates,
        "median": {k: statistics.median(v) for k, v in rates.items()},
        "async_workers": workers,
        "ratio": {"robolearn/raw": paired_ratio(rl, rates["raw"])},
        "spread": spread(rates),
    }
    gym_names = [k for k in rates if k == "sync" or k.startswith("async")]
    if gym_names:
        best = [max(rates[k][i] for k in gym_names) for i in range(len(rl))]
        for k in gym_names:
            out["ratio"][f"robolearn/{k}"] = paired_ratio(rl, rates[k])
        out["ratio"]["robolearn/best_gym"] = paired_ratio(rl, best)
        out["ratio"]["raw/best_gym"] = paired_ratio(rates["raw"], best)
    return out


def bench_contact_forces(
    task: str, setup: TaskSetup, args: argparse.Namespace, log: Callable[[str], None]
) -> dict[str, Any]:
    """Steps/s with ``contact_forces=True`` against the default, robolearn and raw physics."""
    dec, rec, threads = setup.decimation, setup.recording, args.threads
    out: dict[str, Any] = {}
    for n in args.cf_sizes:
        actions = action_pool(setup.low, setup.high, n, args.seed)
        runners: dict[str, Runner] = {
            "robolearn": RobolearnRunner(task, n, threads, actions, args.seed),
            "robolearn+cf": RobolearnRunner(task, n, threads, actions, args.seed, contact_forces=True),
            "raw": RawRunner(setup.model, dec, n, threads, rec),
            "raw+probe": RawRunner(setup.model_cf, dec, n, threads, rec),
            "raw+probe persistent": RawRunner(setup.model_cf, dec, n, threads, rec, persistent=True),
        }
        log(f"{task} contact forces N={n}: timing")
        try:
            rates = measure(runners, args.seconds, args.rounds, args.warmup)
        finally:
            close_all(runners)
        out[n] = {
            "rounds": rates,
            "median": {k: statistics.median(v) for k, v in rates.items()},
            "ratio": {
                "robolearn+cf/robolearn": paired_ratio(rates["robolearn+cf"], rates["robolearn"]),
                "raw+probe/raw": paired_ratio(rates["raw+probe"], rates["raw"]),
                "raw+probe persistent/raw": paired_ratio(rates["raw+probe persistent"], rates["raw"]),
                "robolearn+cf/raw+probe persistent": paired_ratio(
                    rates["robolearn+cf"], rates["raw+probe persistent"]
                ),
            },
            "spread": spread(rates),
            "loadavg": _loadavg(),
        }
    return out


class BackendRunner:
    """Only the backend's ``step(ctrl)`` of a robolearn env: the physics plus its Python wrapper."""

    def __init__(self, task: str, n: int, threads: int, recording: Recording, seed: int) -> None:
        self.worlds = n
        self.env = robolearn.make(task, n, seed=seed, nthread=threads)
        rows = np.arange(n) % recording.qpos.shape[1]
        self.ctrls = itertools.cycle(
            [torch.from_numpy(np.ascontiguousarray(c[rows])) for c in recording.ctrl]
        )

    def step(self) -> None:
        self.env.sim.step(next(self.ctrls))

    def close(self) -> None:
        self.env.close()


def profile_step(
    task: str, setup: TaskSetup, args: argparse.Namespace, log: Callable[[str], None]
) -> dict[str, Any]:
    """Where one robolearn step's time goes relative to raw physics, at ``--profile-size`` worlds."""
    n, dec, rec, threads = args.profile_size, setup.decimation, setup.recording, args.threads
    actions = action_pool(setup.low, setup.high, n, args.seed)
    runners: dict[str, Runner] = {
        "robolearn env.step": RobolearnRunner(task, n, threads, actions, args.seed),
        "backend sim.step": BackendRunner(task, n, threads, rec, args.seed),
        "batch.step, backend's binds": RawRunner(setup.model, dec, n, threads, rec, BACKEND_DERIVED),
        "raw batch.step": RawRunner(setup.model, dec, n, threads, rec),
    }
    log(f"{task} profile N={n}: timing the layers")
    try:
        rates = measure(runners, args.seconds, args.rounds, args.warmup)
        env_runner = runners["robolearn env.step"]
        steps = max(50, int(statistics.median(rates["robolearn env.step"]) / n * 2.0))
        log(f"{task} profile N={n}: cProfile over {steps} steps")
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(steps):
            env_runner.step()
        profiler.disable()
    finally:
        close_all(runners)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(args.profile_lines)
    stats.sort_stats("tottime").print_stats(args.profile_lines)
    us = {k: 1e6 * n / statistics.median(v) for k, v in rates.items()}
    return {
        "size": n,
        "steps_profiled": steps,
        "rounds": rates,
        "us_per_step": us,
        "cprofile": text.getvalue(),
    }


# -- reporting -------------------------------------------------------------------------------
def _loadavg() -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages (other processes competing for the cores)."""
    return os.getloadavg() if hasattr(os, "getloadavg") else None


def _git(*args: str) -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    except OSError:
        return ""
    return out.stdout.strip()


def _git_state() -> str:
    """The commit, and ``+modified`` when the timed code (robolearn/, tasks/) differs from it."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", "robolearn", "tasks")
    return f"{commit}+modified" if dirty else commit


def machine_info(threads: int) -> dict[str, Any]:
    """CPU, cores, load and the versions that matter."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "mujoco": mujoco.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "robolearn": robolearn.__version__,
        "commit": _git_state(),
        "loadavg_start": _loadavg(),
    }


def _k(rate: float) -> str:
    return f"{rate / 1000:.1f}k"


def task_table(result: dict[str, Any], caps: list[int]) -> str:
    """Markdown table of one task's rates and ratios."""
    has_gym = result["gym_id"] is not None
    asyncs = [f"async{c}" for c in dict.fromkeys(caps)]
    head = [
        "N",
        "robolearn",
        "raw",
        "sync",
        *asyncs,
        "rl/raw",
        "rl/sync",
        "rl/async16",
        "rl/best gym",
        "raw/best gym",
    ]
    head += ["spread", "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for n, s in result["sizes"].items():
        med, ratio = s["median"], s["ratio"]
        cells = [str(n), _k(med["robolearn"]), _k(med["raw"])]
        if has_gym:
            cells.append(_k(med["sync"]))
            for a in asyncs:
                cells.append(f"{_k(med[a])} ({s['async_workers'][a]}w)")
            cells.append(f"{ratio['robolearn/raw']:.2f}")
            cells.append(f"{ratio['robolearn/sync']:.2f}")
            cells.append(f"{ratio['robolearn/async16']:.2f}" if "robolearn/async16" in ratio else "n/a")
            cells += [f"{ratio['robolearn/best_gym']:.2f}", f"{ratio['raw/best_gym']:.2f}"]
        else:
            cells += ["n/a"] * (1 + len(asyncs))
            cells += [f"{ratio['robolearn/raw']:.2f}", "n/a", "n/a", "n/a", "n/a"]
        cells += [f"{100 * s['spread']:.0f}%", _load(s)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _load(summary: dict[str, Any]) -> str:
    """The 1-minute load average when a measurement ended, or n/a."""
    load = summary.get("loadavg")
    return "n/a" if load is None else f"{load[0]:.1f}"


def target_verdict(result: dict[str, Any]) -> list[str]:
    """One line per N >= TARGET_MIN_SIZE: met or missed, and by which ratio."""
    lines = []
    for n, s in result["sizes"].items():
        if n < TARGET_MIN_SIZE or "robolearn/best_gym" not in s["ratio"]:
            continue
        vs_raw, vs_gym = s["ratio"]["robolearn/raw"], s["ratio"]["robolearn/best_gym"]
        ok_raw, ok_gym = vs_raw >= TARGET_VS_RAW, vs_gym >= TARGET_VS_GYM
        s["target_met"] = ok_raw and ok_gym
        lines.append(
            f"N={n}: robolearn/raw {vs_raw:.2f} ({'met' if ok_raw else 'MISSED'}, target {TARGET_VS_RAW}); "
            f"robolearn/best gym {vs_gym:.2f} ({'met' if ok_gym else 'MISSED'}, target {TARGET_VS_GYM}); "
            f"ceiling raw/best gym {s['ratio']['raw/best_gym']:.2f}"
        )
    return lines


def cf_table(cf: dict[str, Any]) -> str:
    """Markdown table of the contact-force cost (rates, and each +cf variant over its baseline)."""
    lines = [
        "| N | robolearn | robolearn+cf | rl+cf / rl | raw | raw+probe | raw+probe / raw "
        "| raw+probe persistent | persistent / raw | spread | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, s in cf.items():
        med, ratio = s["median"], s["ratio"]
        cells = [
            str(n),
            _k(med["robolearn"]),
            _k(med["robolearn+cf"]),
            f"{ratio['robolearn+cf/robolearn']:.2f}",
            _k(med["raw"]),
            _k(med["raw+probe"]),
            f"{ratio['raw+probe/raw']:.2f}",
            _k(med["raw+probe persistent"]),
            f"{ratio['raw+probe persistent/raw']:.2f}",
            f"{100 * s['spread']:.0f}%",
            _load(s),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def profile_report(prof: dict[str, Any]) -> str:
    """The layer breakdown in microseconds per step and the cProfile listing."""
    us = prof["us_per_step"]
    raw = us["raw batch.step"]
    lines = [f"Per control step at N={prof['size']} (median over rounds; raw = physics alone):", ""]
    lines += ["| layer | us/step | x raw |", "|---|---:|---:|"]
    for name, value in us.items():
        lines.append(f"| {name} | {value:.0f} | {value / raw:.2f} |")
    lines += [
        "",
        f"cProfile of robolearn's step ({prof['steps_profiled']} steps; by cumulative, then own time):",
        "",
    ]
    lines += ["```", prof["cprofile"].strip(), "```"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    cores = os.cpu_count() or 1
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument(
        "--tasks", nargs="+", default=[TARGET_TASK], help="task ids, or 'all' for every registered task"
    )
    p.add_argument("--sizes", nargs="+", type=int, default=[1, 16, 64, 256], help="numbers of worlds N")
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per method and N (all rounds)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; rates are medians over them")
    p.add_argument("--warmup", type=float, default=0.5, help="untimed seconds per method before the rounds")
    p.add_argument("--threads", type=int, default=cores, help="physics threads of robolearn and raw")
    p.add_argument("--async-workers", nargs="+", type=int, default=[16, cores], help="worker caps of async")
    p.add_argument("--mp-context", default="forkserver", help="multiprocessing start method for async")
    p.add_argument("--cf-sizes", nargs="*", type=int, default=[64, 256], help="N for the contact-force cost")
    p.add_argument("--profile", action="store_true", help="break robolearn's step down against raw physics")
    p.add_argument("--profile-size", type=int, default=64, help="N of the breakdown")
    p.add_argument("--profile-lines", type=int, default=25, help="cProfile lines to keep")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write every number here")
    args = p.parse_args(argv)
    if args.tasks == ["all"]:
        args.tasks = robolearn.list_tasks()
    if min(args.sizes) < 1 or args.rounds < 1 or args.seconds <= 0:
        p.error("sizes must be >= 1, rounds >= 1 and seconds > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print Markdown tables, optionally write JSON."""
    args = parse_args(argv)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    report: dict[str, Any] = {
        "machine": machine_info(args.threads),
        "settings": vars(args) | {"json": str(args.json)},
    }
    report["tasks"] = {}
    m = report["machine"]
    print(
        f"# Simulation throughput\n\n{m['cpu']}, {m['cores']} cores, threads={m['threads']}; Python {m['python']}, "
        f"torch {m['torch']}, mujoco {m['mujoco']}, gymnasium {m['gymnasium']}, numpy {m['numpy']}; "
        f"commit {m['commit']}; load average at start {m['loadavg_start']}\n"
    )
    for task in args.tasks:
        setup = prepare(task, args.threads, args.seed)
        result = bench_task(task, setup, args, log)
        report["tasks"][task] = result
        print(
            f"## {task}" + (f" vs {result['gym_id']}" if result["gym_id"] else " (no Gymnasium counterpart)")
        )
        print("\nenv steps/s, medians over rounds; ratios are medians of per-round ratios\n")
        print(task_table(result, args.async_workers) + "\n")
        if task == TARGET_TASK:
            verdict = target_verdict(result)
            result["target"] = verdict
            print("Target (N >= 64: robolearn >= 0.8x raw and >= 3x the faster Gymnasium vector env):")
            print("\n".join(f"- {line}" for line in verdict or [f"no N >= {TARGET_MIN_SIZE} timed"]) + "\n")
        if args.cf_sizes:
            cf = bench_contact_forces(task, setup, args, log)
            result["contact_forces"] = cf
            print(f"### {task}: contact_forces=True\n\n{cf_table(cf)}\n")
        if args.profile:
            prof = profile_step(task, setup, args, log)
            result["profile"] = prof
            print(f"### {task}: where robolearn's step goes\n\n{profile_report(prof)}\n")
    report["machine"]["loadavg_end"] = _loadavg()
    report["wall_s"] = time.perf_counter() - started
    print(f"load average at end {report['machine']['loadavg_end']}; wall time {report['wall_s']:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1, default=str))
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
