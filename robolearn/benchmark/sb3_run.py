"""One Stable-Baselines3 run of the benchmark table: ``python -m robolearn.benchmark.sb3_run``.

Trains ``stable_baselines3.PPO`` or ``SAC`` on a robolearn task through
:class:`robolearn.envs.sb3_adapter.RobolearnSB3VecEnv` (one torch thread, MuJoCo single-threaded),
or with ``--gymnasium <id>`` on the Gymnasium env that task reproduces step for step
(``robolearn.envs.registry.GYMNASIUM_TWINS``; a ``DummyVecEnv`` of Monitor-wrapped envs, as
SB3's ``make_vec_env`` builds it: SB3's own and, with one env, its faster way, since a batched env
pays torch's per-operation overhead on every step of its one world; ``benchmarks/sb3_env_overhead.py``),
and writes a robolearn run directory, so the table's report and ``robolearn compare`` read SB3 runs
as they read robolearn's:

* ``config.json``: ``{"algo": {"name": ...}, "lib", "task", "seed", "sb3_kwargs", "sb3_version",
  "n_envs", "gymnasium", ...}``, written once, before training;
* ``metrics.csv``: one row per evaluation, columns ``step`` (= ``env_steps``), ``env_steps``,
  ``eval/return``, ``eval/return_std``, ``eval/episode_length``, ``train/return`` (mean of SB3's
  last 100 training episodes), ``time/train_s``, ``time/update_s`` (the part of ``time/train_s``
  outside SB3's ``collect_rollouts``: its ``train()``, as robolearn's runners log it) and
  ``time/env_steps_per_s``;
* ``summary.json``, written last, once the budget is reached (``env_steps``, ``train_time_s``,
  ``final_eval_return``, ``best_eval_return``, ...).

Evaluation follows robolearn's runner (``BaseRunner.evaluate`` with the eval env of ``robolearn
train``): a separate env of ``--eval-episodes`` worlds seeded ``10000 + seed``, built without the
task's curriculum and reset with that seed at every evaluation (the same start states each time),
the deterministic policy (SB3's ``predict(deterministic=True)``), the first full episode of every
world, the mean return of the task's own reward. With ``VecNormalize`` the policy sees
observations normalised with the training statistics, frozen; rewards are never normalised there.
Evaluations happen at the first rollout boundary at or past every ``--eval-every`` env steps (PPO:
after an update; SAC: between ``train_freq`` collections) and at the end; their time, and the
checkpoint's, is left out of ``time/train_s``.

The task is the robolearn recipe's MDP: ``--task-overrides`` (the recipe's ``task_overrides``,
which the benchmark's schedule reads from ``configs/experiment/<name>.yaml``) configures both the
training env and the evaluation env, as ``robolearn train`` builds its own; they are recorded in
``config.json``.

SAC's replay buffer: SB3's default ``buffer_size`` (1,000,000) allocates, and checkpoints, a buffer
far larger than a short budget can fill (about 200 MB for Hopper at any budget). When the
hyperparameters do not set ``buffer_size``, the run uses ``min(1,000,000, budget + the last
collection's overshoot)`` (:func:`replay_capacity`): the buffer never fills, so sampling (uniform
over the stored transitions) is what it would be with the default, and the value used is recorded in
``config.json`` (``replay_buffer_size``). A resume to a raised budget grows a capped buffer first.

At every evaluation the run is checkpointed atomically in ``<out>/sb3_checkpoint/`` (``model.zip``,
the replay buffer for SAC, the ``VecNormalize`` statistics, ``state.json`` with the counters and a
copy of ``metrics.csv``). Started again on a directory holding a checkpoint and no finished
``summary.json``, the run resumes from it: ``metrics.csv`` is restored to the checkpoint's rows
(rows of an evaluation after it are dropped), the training seconds continue, and training goes on
to the budget. Random number streams are not checkpointed, and the training worlds start new
episodes, so a resumed run is not bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import platform
import shutil
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robolearn.benchmark.sb3_zoo import ZooError, sb3_class, translate
from robolearn.envs.batched_env import BatchedEnv
from robolearn.envs.registry import list_tasks, make
from robolearn.logging.logger import Logger
from robolearn.utils.config import flatten_overrides

EVAL_SEED_OFFSET = 10_000
"""The evaluation env of seed ``s`` is seeded ``EVAL_SEED_OFFSET + s``, as ``robolearn train`` seeds its own."""

LIBS: tuple[str, ...] = ("sb3_default", "sb3_zoo")
"""The SB3 library ids of the benchmark table."""

CHECKPOINT = "sb3_checkpoint"
"""The checkpoint folder inside the run directory."""

RUN_FILES: tuple[str, ...] = ("config.json", "metrics.csv", "summary.json")
"""The files this runner writes at the top of a run directory (removed before a fresh start)."""

SB3_DEFAULT_BUFFER_SIZE = 1_000_000
"""SB3 SAC's default ``buffer_size``: the cap of a replay buffer the hyperparameters leave unset."""

BLOCK_KEYS: frozenset[str] = frozenset({"kwargs", "n_envs", "normalize", "source"})
"""Keys of a table's ``sb3.zoo`` block, accepted whole as ``--kwargs``."""


class RunError(ValueError):
    """Bad flags or a run directory that does not fit the run asked for."""


@dataclass
class RunSpec:
    """What one SB3 run is, checked (see :func:`parse_args`)."""

    task: str
    algo: str
    lib: str
    seed: int
    env_steps: int
    eval_every: int
    eval_episodes: int
    out: Path
    kwargs: dict[str, Any]
    """SB3 constructor arguments, translated (schedules as callables)."""
    described: dict[str, Any]
    """The hyperparameters as given (JSON), for ``config.json``."""
    n_envs: int
    normalize: dict[str, Any] | None
    """``VecNormalize`` arguments, or ``None``."""
    zoo_n_timesteps: float | None = None
    source: str | None = None
    task_overrides: dict[str, Any] = field(default_factory=dict)
    """The recipe's task config overrides (nested as in ``configs/experiment/*.yaml``)."""
    gymnasium: str | None = None
    """The Gymnasium env trained on (the task's twin), or ``None``: the SB3 adapter over robolearn's task."""
    replay_buffer_size: int | None = None
    """SAC: the replay buffer's capacity used (set when the model is built; ``None`` for PPO)."""

    def config(self) -> dict[str, Any]:
        """``config.json`` of the run."""
        import stable_baselines3

        return {
            "algo": {"name": self.algo},
            "lib": self.lib,
            "task": self.task,
            "seed": self.seed,
            "sb3_kwargs": self.described,
            "sb3_version": stable_baselines3.__version__,
            "n_envs": self.n_envs,
            "normalize": self.normalize,
            "task_overrides": self.task_overrides,
            "gymnasium": self.gymnasium,
            "replay_buffer_size": self.replay_buffer_size,
            "total_env_steps": self.env_steps,
            "eval_every": self.eval_every,
            "eval_num_envs": self.eval_episodes,
            "zoo_n_timesteps": self.zoo_n_timesteps,
            "source": self.source,
            "torch_threads": 1,
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "numpy": np.__version__,
            },
        }


@dataclass
class Counters:
    """What a checkpoint carries besides the model (``state.json``)."""

    env_steps: int = 0
    train_s: float = 0.0
    collect_s: float = 0.0
    """The part of ``train_s`` inside SB3's ``collect_rollouts`` (acting, physics, storing, and PPO's
    GAE); the rest is ``train()``, the update. ``nan``: resumed from a checkpoint that did not count it."""
    eval_s: float = 0.0
    evaluations: int = 0
    next_eval: int = 0
    best_eval: float = -math.inf
    last_eval: float = math.nan
    replay_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# -- flags -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The command-line flags (the contract of the benchmark's scheduler)."""
    p = argparse.ArgumentParser(
        prog="python -m robolearn.benchmark.sb3_run",
        description="Train SB3 PPO/SAC on a robolearn task and write a robolearn run directory.",
    )
    p.add_argument("--task", required=True, help="registered robolearn task id")
    p.add_argument("--algo", required=True, help="ppo | sac")
    p.add_argument("--lib", required=True, help="sb3_default | sb3_zoo (recorded in config.json)")
    p.add_argument("--seed", required=True, type=int)
    p.add_argument("--env-steps", required=True, type=int, help="training budget in env steps")
    p.add_argument("--eval-every", required=True, type=int, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=10, help="evaluation worlds, one episode each")
    p.add_argument("--out", required=True, help="the run directory")
    p.add_argument("--kwargs", default="{}", help="JSON: SB3/Zoo hyperparameters, or a table's zoo block")
    p.add_argument("--n-envs", type=int, default=None, help="training worlds (default: the block's, else 1)")
    p.add_argument("--normalize", action="store_true", help="VecNormalize observations and rewards (as the Zoo)")
    p.add_argument("--task-overrides", default="{}",
                   help="JSON: task config overrides for the training and evaluation envs (a recipe's task_overrides)")
    p.add_argument("--gymnasium", default=None,
                   help="train on this Gymnasium env (the one the task reproduces, e.g. Hopper-v5) instead of the adapter")
    return p


def parse_args(argv: Sequence[str] | None = None) -> RunSpec:
    """Parse and check the flags; nothing is written.

    Raises:
        RunError: a value out of range, an unknown task, algorithm or library, ``--kwargs`` that
            is not a JSON object, or hyperparameters the translation rejects (named in the message).
        SystemExit: a missing or malformed flag (argparse's own message).
    """
    a = build_parser().parse_args(argv)
    if a.algo not in ("ppo", "sac"):
        raise RunError(f"--algo: expected ppo or sac, got {a.algo!r}")
    if a.lib not in LIBS:
        raise RunError(f"--lib: expected one of {', '.join(LIBS)}, got {a.lib!r}")
    for flag, value, low in (
        ("--seed", a.seed, 0), ("--env-steps", a.env_steps, 1), ("--eval-every", a.eval_every, 1),
        ("--eval-episodes", a.eval_episodes, 1),
    ):
        if value < low:
            raise RunError(f"{flag}: expected an integer >= {low}, got {value}")
    if a.n_envs is not None and a.n_envs < 1:
        raise RunError(f"--n-envs: expected an integer >= 1, got {a.n_envs}")
    tasks = list_tasks()
    if a.task not in tasks:
        raise RunError(f"--task: unknown task {a.task!r}; known tasks: {', '.join(tasks)}")
    try:
        raw = json.loads(a.kwargs)
    except json.JSONDecodeError as err:
        raise RunError(f"--kwargs: not JSON ({err.msg} at character {err.pos}): {a.kwargs!r}") from err
    if not isinstance(raw, dict):
        raise RunError(f"--kwargs: expected a JSON object, got {raw!r}")
    task_overrides = _task_overrides(a.task, a.task_overrides)
    if a.gymnasium is not None:
        from robolearn.envs.registry import GYMNASIUM_TWINS

        twin = GYMNASIUM_TWINS.get(a.task)
        if a.gymnasium != twin:
            expected = f"{twin!r}, the Gymnasium env {a.task} reproduces" if twin else f"none: {a.task} reproduces no Gymnasium env"
            raise RunError(f"--gymnasium: expected {expected}, got {a.gymnasium!r}")
        if task_overrides:
            raise RunError(f"--gymnasium: {a.gymnasium} is {a.task} as registered; --task-overrides "
                           f"{json.dumps(task_overrides, sort_keys=True)} make another MDP (train through the adapter)")
    source = None
    if "kwargs" in raw:  # a table's whole zoo block: {source, n_envs, normalize, kwargs}
        unknown = set(raw) - BLOCK_KEYS
        if unknown:
            raise RunError(f"--kwargs: a zoo block has keys among {sorted(BLOCK_KEYS)}, got also {sorted(unknown)}")
        source = raw.get("source")
        block = dict(raw["kwargs"] or {})
        for key in ("n_envs", "normalize"):
            if key in raw:
                if key in block and block[key] != raw[key]:
                    raise RunError(f"--kwargs: {key} is {raw[key]!r} in the block and {block[key]!r} in its kwargs")
                block[key] = raw[key]
    else:
        block = raw
    try:
        tr = translate(a.algo, block, "--kwargs")
    except ZooError as err:
        raise RunError(str(err)) from err
    if a.n_envs is not None and tr.n_envs is not None and a.n_envs != tr.n_envs:
        raise RunError(f"--n-envs: {a.n_envs} contradicts the hyperparameters' n_envs {tr.n_envs}")
    n_envs = a.n_envs or tr.n_envs or 1
    normalize = tr.normalize
    if a.normalize and normalize is None:
        gamma = block.get("gamma")
        normalize = {} if gamma is None else {"gamma": float(gamma)}
    return RunSpec(
        task=a.task, algo=a.algo, lib=a.lib, seed=a.seed, env_steps=a.env_steps, eval_every=a.eval_every,
        eval_episodes=a.eval_episodes, out=Path(a.out), kwargs=tr.kwargs, described=tr.described, n_envs=n_envs,
        normalize=normalize, zoo_n_timesteps=tr.n_timesteps, source=source, task_overrides=task_overrides,
        gymnasium=a.gymnasium,
    )


def _task_overrides(task: str, text: str) -> dict[str, Any]:
    """``--task-overrides`` parsed and tried on the task's config (so a bad key fails before anything runs)."""
    from robolearn.envs.registry import task_cfg

    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as err:
        raise RunError(f"--task-overrides: not JSON ({err.msg} at character {err.pos}): {text!r}") from err
    if not isinstance(overrides, dict):
        raise RunError(f"--task-overrides: expected a JSON object of task config fields, got {overrides!r}")
    try:
        task_cfg(task, **flatten_overrides(overrides))
    except (ValueError, TypeError) as err:
        raise RunError(f"--task-overrides: {err}") from err
    return overrides




def replay_capacity(spec: RunSpec, max_episode_length: int) -> int:
    """SAC's replay capacity when the hyperparameters leave ``buffer_size`` unset: SB3's default,
    capped at what the run can store: the budget plus the last collection's overshoot (SB3 checks
    the budget between ``train_freq`` collections of ``n_envs`` worlds each), a multiple of
    ``n_envs`` (SB3 keeps ``buffer_size // n_envs`` rows of ``n_envs`` transitions).
    """
    freq = spec.kwargs.get("train_freq", 1)
    count, unit = (freq[0], freq[1]) if isinstance(freq, (list, tuple)) else (freq, "step")
    per_world = int(count) * (int(max_episode_length) if unit == "episode" else 1)
    need = spec.env_steps + spec.n_envs * per_world
    rows = -(-need // spec.n_envs)  # ceil
    return min(SB3_DEFAULT_BUFFER_SIZE, rows * spec.n_envs)


# -- evaluation ----------------------------------------------------------------------------------
def evaluate(model: Any, norm: Any, env: BatchedEnv) -> dict[str, float]:
    """The deterministic policy's first episode in every world of ``env`` (reset with its seed).

    Mirrors ``robolearn.runners.rollout`` with ``episodes=None``: at most ``max_episode_length``
    steps, each world's return summed until it first terminates or truncates.
    """
    obs, _ = env.reset(seed=env.seed)
    n = env.num_envs
    total = torch.zeros(n, dtype=torch.float64)
    length = torch.zeros(n, dtype=torch.int64)
    alive = torch.ones(n, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(int(env.max_episode_length)):
            x = obs["policy"].detach().cpu().numpy().astype(np.float64)
            if norm is not None:
                x = norm.normalize_obs(x)  # frozen: normalize_obs reads the statistics, never updates them
            action, _ = model.predict(x, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(torch.as_tensor(np.asarray(action), dtype=torch.float32))
            total += reward.detach().cpu().double() * alive
            length += alive.long()
            alive &= ~(terminated | truncated).cpu()
            if not bool(alive.any()):
                break
    return {
        "eval/return": float(total.mean()),
        "eval/return_std": float(total.std()) if n > 1 else 0.0,
        "eval/episode_length": float(length.double().mean()),
    }


# -- the run ---------------------------------------------------------------------------------------
class SB3Run:
    """Model, envs, logger and counters of one run; :meth:`train` runs it to the budget."""

    def __init__(self, spec: RunSpec, resume: bool) -> None:
        """Build the envs and the model (fresh, or loaded from the checkpoint when ``resume``)."""
        from stable_baselines3.common.vec_env import VecNormalize

        from robolearn.envs.sb3_adapter import RobolearnSB3VecEnv

        self.spec = spec
        self.ckpt = spec.out / CHECKPOINT
        self.counters = Counters(next_eval=spec.eval_every)
        # The recipe's MDP on both envs; evaluation without the curriculum, as robolearn train builds it.
        overrides = flatten_overrides(spec.task_overrides)
        venv: Any
        if spec.gymnasium is not None:
            from stable_baselines3.common.env_util import make_vec_env

            # Env i seeded seed + i; each wrapped in Monitor, so SB3 logs its episodes as it does the adapter's.
            venv = make_vec_env(spec.gymnasium, n_envs=spec.n_envs, seed=spec.seed)
        else:
            venv = RobolearnSB3VecEnv(env=make(spec.task, spec.n_envs, seed=spec.seed, nthread=1, **overrides))
        self.eval_env = make(spec.task, spec.eval_episodes, seed=EVAL_SEED_OFFSET + spec.seed, nthread=1,
                             **{**overrides, "curriculum": {}})
        kwargs = dict(spec.kwargs)
        if spec.algo == "sac":
            if "buffer_size" not in kwargs:
                # The evaluation env is the training task's MDP (its twin, on Gymnasium): the same time limit.
                kwargs["buffer_size"] = replay_capacity(spec, int(self.eval_env.max_episode_length))
            spec.replay_buffer_size = int(kwargs["buffer_size"])
        self.norm: Any = None
        cls = sb3_class(spec.algo)
        if resume:
            self.counters = _read_counters(self.ckpt / "state.json")
            if spec.normalize is not None:
                venv = self.norm = VecNormalize.load(str(self.ckpt / "vecnormalize.pkl"), venv)
                self.norm.training = True
            self.model = cls.load(str(self.ckpt / "model.zip"), env=venv, device="cpu", print_system_info=False)
            # SB3 saves its last training observation; these worlds are new, so start new episodes.
            self.model._last_obs = None
            if spec.algo == "sac":
                self.model.load_replay_buffer(str(self.ckpt / "replay_buffer.pkl"))
                if self.model.replay_buffer.size() != self.counters.replay_size:
                    raise RunError(
                        f"{self.ckpt}: the replay buffer holds {self.model.replay_buffer.size()} transitions, "
                        f"state.json says {self.counters.replay_size}"
                    )
                # A budget raised since: a capped buffer grows to the new cap (never shrinks).
                if "buffer_size" not in spec.kwargs:
                    grow_replay_buffer(self.model.replay_buffer, spec.replay_buffer_size or 0)
                spec.replay_buffer_size = _capacity(self.model.replay_buffer)
        else:
            if spec.normalize is not None:
                venv = self.norm = VecNormalize(venv, **spec.normalize)
            self.model = cls("MlpPolicy", venv, seed=spec.seed, device="cpu", verbose=0, **kwargs)
        self.venv = venv
        self.logger: Logger | None = None
        self._segment = 0.0
        self._collect_start = 0.0

    # the clock: training seconds accumulate between evaluations only
    def _pause(self) -> None:
        self.counters.train_s += time.perf_counter() - self._segment

    def _resume_clock(self) -> None:
        self._segment = time.perf_counter()

    def train(self) -> dict[str, Any]:
        """Train to the budget with evaluations and checkpoints; write and return the summary."""
        from stable_baselines3.common.callbacks import BaseCallback

        run = self

        class _AtRolloutStart(BaseCallback):
            """Evaluates (and checkpoints) at the first rollout start at or past the next evaluation."""

            def _on_step(self) -> bool:
                return True

            def _on_rollout_start(self) -> None:
                if self.model.num_timesteps >= run.counters.next_eval:
                    run._pause()
                    run.evaluation()
                    run._resume_clock()
                run._collect_start = time.perf_counter()

            def _on_rollout_end(self) -> None:
                run.counters.collect_s += time.perf_counter() - run._collect_start

        spec = self.spec
        self.logger = Logger(spec.out, tensorboard=False, csv=True, console=False)
        try:
            remaining = spec.env_steps - int(self.model.num_timesteps)
            if remaining > 0:
                self._resume_clock()
                # One learn call for the whole (remaining) budget: SB3's schedules see the progress of
                # the whole run (with reset_num_timesteps=False the total is num_timesteps + remaining).
                self.model.learn(total_timesteps=remaining, callback=_AtRolloutStart(), reset_num_timesteps=False)
                self._pause()
            if self.counters.env_steps < int(self.model.num_timesteps) or self.counters.evaluations == 0:
                self.evaluation()
        finally:
            self.logger.close()
        summary = self.summary()
        _write_json(spec.out / "summary.json", summary)
        return summary

    def evaluation(self) -> None:
        """Evaluate, log a ``metrics.csv`` row and checkpoint (none of it counted as training)."""
        assert self.logger is not None
        c, spec = self.counters, self.spec
        t0 = time.perf_counter()
        c.env_steps = int(self.model.num_timesteps)
        metrics = evaluate(self.model, self.norm, self.eval_env)
        c.evaluations += 1
        c.last_eval = metrics["eval/return"]
        c.best_eval = max(c.best_eval, c.last_eval)
        c.next_eval = (c.env_steps // spec.eval_every + 1) * spec.eval_every
        episodes = self.model.ep_info_buffer
        if episodes:
            metrics["train/return"] = float(np.mean([ep["r"] for ep in episodes]))
        metrics["env_steps"] = float(c.env_steps)
        metrics["time/train_s"] = c.train_s
        if math.isfinite(c.collect_s):
            # As robolearn's runner logs it: the update's part of the training seconds (the profile).
            metrics["time/update_s"] = c.train_s - c.collect_s
        metrics["time/env_steps_per_s"] = c.env_steps / max(c.train_s, 1e-9)
        self.logger.log(metrics, step=c.env_steps)
        c.eval_s += time.perf_counter() - t0
        self.checkpoint()

    def checkpoint(self) -> None:
        """Write ``sb3_checkpoint/`` whole into a temporary folder, then swap it in."""
        out = self.spec.out
        tmp, old = out / f".{CHECKPOINT}.tmp", out / f".{CHECKPOINT}.old"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        self.model.save(str(tmp / "model.zip"))
        if self.norm is not None:
            self.norm.save(str(tmp / "vecnormalize.pkl"))
        if self.spec.algo == "sac":
            self.model.save_replay_buffer(str(tmp / "replay_buffer.pkl"))
            self.counters.replay_size = int(self.model.replay_buffer.size())
        shutil.copyfile(out / "metrics.csv", tmp / "metrics.csv")
        _write_json(tmp / "state.json", _counters_json(self.counters))
        # A crash between the two renames leaves .old and no checkpoint: _recover_checkpoint puts it back.
        if self.ckpt.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.ckpt, old)
        os.replace(tmp, self.ckpt)
        shutil.rmtree(old, ignore_errors=True)

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s content."""
        c = self.counters
        return {
            "final_eval_return": c.last_eval,
            "best_eval_return": c.best_eval if math.isfinite(c.best_eval) else math.nan,
            "env_steps": c.env_steps,
            "train_time_s": c.train_s,
            "update_time_s": c.train_s - c.collect_s if math.isfinite(c.collect_s) else None,
            "eval_time_s": c.eval_s,
            "env_steps_per_s": c.env_steps / max(c.train_s, 1e-9),
            "evaluations": c.evaluations,
            "lib": self.spec.lib,
        }

    def close(self) -> None:
        """Release the envs."""
        self.venv.close()
        self.eval_env.close()


REPLAY_ARRAYS: tuple[str, ...] = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
"""The per-row arrays of SB3's ``ReplayBuffer`` (``[buffer_size, n_envs, ...]``)."""


def _capacity(buffer: Any) -> int:
    """Transitions ``buffer`` holds when full."""
    return int(buffer.buffer_size) * int(buffer.n_envs)


def grow_replay_buffer(buffer: Any, capacity: int) -> None:
    """Enlarge SB3's ``ReplayBuffer`` in place to ``capacity`` transitions (kept rows unchanged).

    Raises:
        RunError: the buffer already wrapped (its oldest transitions are gone: a larger one would
            not be the run the cap promised).
    """
    rows = capacity // int(buffer.n_envs)
    if rows <= int(buffer.buffer_size):
        return
    if buffer.full:
        raise RunError(f"the replay buffer of {buffer.buffer_size} rows is full; it cannot grow to {rows} rows")
    for name in REPLAY_ARRAYS:
        old = getattr(buffer, name, None)
        if old is None:  # next_observations with optimize_memory_usage
            continue
        new = np.zeros((rows, *old.shape[1:]), dtype=old.dtype)
        new[: old.shape[0]] = old
        setattr(buffer, name, new)
    buffer.buffer_size = rows


def _counters_json(c: Counters) -> dict[str, Any]:
    return {
        "env_steps": c.env_steps, "train_s": c.train_s, "eval_s": c.eval_s, "evaluations": c.evaluations,
        "collect_s": c.collect_s if math.isfinite(c.collect_s) else None,
        "next_eval": c.next_eval, "best_eval": c.best_eval if math.isfinite(c.best_eval) else None,
        "last_eval": c.last_eval if math.isfinite(c.last_eval) else None, "replay_size": c.replay_size,
    }


def _read_counters(path: Path) -> Counters:
    d = json.loads(path.read_text())
    return Counters(
        env_steps=int(d["env_steps"]), train_s=float(d["train_s"]), eval_s=float(d["eval_s"]),
        evaluations=int(d["evaluations"]), next_eval=int(d["next_eval"]),
        best_eval=-math.inf if d["best_eval"] is None else float(d["best_eval"]),
        last_eval=math.nan if d["last_eval"] is None else float(d["last_eval"]),
        replay_size=d.get("replay_size"),
        # Checkpoints written before the split was counted: the run's profile is unknown, not zero.
        collect_s=math.nan if d.get("collect_s") is None else float(d["collect_s"]),
    )


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Indented JSON written atomically (NaN and infinities as JSON's ``NaN``, as robolearn's runner)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


UNREADABLE_CHECKPOINT: tuple[type[BaseException], ...] = (
    OSError, ValueError, KeyError, TypeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, RuntimeError,
)
"""What loading a torn or corrupted checkpoint raises (JSON and Unicode errors are ValueErrors)."""


# -- the run directory -----------------------------------------------------------------------------
def _recover_checkpoint(out: Path) -> None:
    """Put back a checkpoint a crash left as ``.sb3_checkpoint.old`` mid-swap; drop a torn ``.tmp``."""
    old = out / f".{CHECKPOINT}.old"
    if old.is_dir() and not (out / CHECKPOINT).exists():
        os.replace(old, out / CHECKPOINT)
    shutil.rmtree(out / f".{CHECKPOINT}.tmp", ignore_errors=True)


def run_state(spec: RunSpec) -> str:
    """``done``, ``resume`` or ``fresh`` for ``spec.out`` (nothing is changed).

    Raises:
        RunError: the directory's ``config.json`` describes another run.
    """
    out = spec.out
    if out.exists() and not out.is_dir():
        raise RunError(f"--out: {out} exists and is not a directory")
    summary = out / "summary.json"
    ckpt_dir = out / CHECKPOINT
    has_ckpt = (ckpt_dir / "state.json").is_file() or (out / f".{CHECKPOINT}.old" / "state.json").is_file()
    if summary.is_file():
        try:
            done = json.loads(summary.read_text())
            steps = int(done.get("env_steps", 0)) if isinstance(done, dict) else 0
        except (OSError, ValueError, TypeError):  # a torn or edited summary is no summary (the schedule reads it so too)
            steps = 0
        if steps >= spec.env_steps:
            return "done"
    if has_ckpt:
        config = out / "config.json"
        if config.is_file():
            have = json.loads(config.read_text())
            want = spec.config()
            have.setdefault("task_overrides", {})  # runs from before the flag trained the registered task
            have.setdefault("gymnasium", None)  # ... through the adapter
            for key in ("algo", "lib", "task", "seed", "sb3_kwargs", "n_envs", "normalize", "task_overrides",
                        "gymnasium"):
                if have.get(key) != json.loads(json.dumps(want[key])):
                    raise RunError(
                        f"--out: {out} holds a checkpoint of another run ({key} is {have.get(key)!r} there, "
                        f"{want[key]!r} here); use another directory or remove it"
                    )
        return "resume"
    return "fresh"


def run(spec: RunSpec) -> dict[str, Any]:
    """Train (or resume, or skip a finished run) and return the summary."""
    torch.set_num_threads(1)
    state = run_state(spec)
    if state == "done":
        return json.loads((spec.out / "summary.json").read_text())
    if state == "fresh":
        try:  # built before anything is written, so hyperparameters SB3 rejects leave no trace
            session = SB3Run(spec, resume=False)
        except (AssertionError, TypeError, ValueError) as err:
            raise RunError(f"--kwargs: stable_baselines3.{spec.algo.upper()} rejected {spec.described}: {err}") from err
        spec.out.mkdir(parents=True, exist_ok=True)
        for name in RUN_FILES:  # partial files of a run that died before its first checkpoint
            (spec.out / name).unlink(missing_ok=True)
        _write_json(spec.out / "config.json", spec.config())
    else:
        _recover_checkpoint(spec.out)
        (spec.out / "summary.json").unlink(missing_ok=True)  # a shorter budget's summary: not this run's
        shutil.copyfile(spec.out / CHECKPOINT / "metrics.csv", spec.out / ".metrics.csv.restore")
        os.replace(spec.out / ".metrics.csv.restore", spec.out / "metrics.csv")
        try:
            session = SB3Run(spec, resume=True)
        except UNREADABLE_CHECKPOINT as err:
            raise RunError(
                f"--out: the checkpoint in {spec.out / CHECKPOINT} cannot be read ({type(err).__name__}: {err}); "
                f"remove {spec.out} to train this run afresh"
            ) from err
        # The budget and (SAC) the replay capacity of this session; the rest is the run's, checked above.
        config_path = spec.out / "config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else spec.config()
        config.update(total_env_steps=spec.env_steps, replay_buffer_size=spec.replay_buffer_size)
        _write_json(config_path, config)
    try:
        return session.train()
    finally:
        session.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 when the run finished (or was already done), 2 on bad input, 130 when interrupted
    (Ctrl-C, or the SIGINT ``robolearn benchmark`` forwards): the run keeps its last checkpoint, and the
    same command resumes from it, as a robolearn run does.
    """
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    spec = None
    try:
        spec = parse_args(argv)
        t0 = time.perf_counter()
        summary = run(spec)
    except RunError as err:
        sys.stderr.write(f"sb3_run: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        # SB3's learn() has no stop hook: the interrupt lands wherever it is (a rollout, a backward), so
        # the progress since the last evaluation's checkpoint is dropped; that checkpoint is whole
        # (written to a temporary folder and swapped in), so the same command resumes from it.
        where = spec.out / CHECKPOINT if spec is not None else "its run directory"
        sys.stderr.write(f"sb3_run: interrupted; the same command resumes from the last checkpoint ({where})\n")
        return 130
    sys.stdout.write(
        f"sb3_run: {spec.lib} {spec.algo} {spec.task} seed {spec.seed}: {summary['env_steps']} env steps, "
        f"final eval {summary['final_eval_return']:.1f} (best {summary['best_eval_return']:.1f}), "
        f"train {summary['train_time_s']:.1f} s, {time.perf_counter() - t0:.1f} s this session -> {spec.out}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
