"""``robolearn data collect``: behaviour-policy rollouts written as a robolearn dataset.

The behaviour policy is uniform random or a trained run's deterministic policy with optional
Gaussian noise; episodes come from :func:`robolearn.runners.collect.collect_episodes`. The file
carries its task, provenance and reference returns (D4RL's for the Gymnasium locomotion tasks it
covers, otherwise a measured random-policy return and a given expert return), so every offline
result on it can be a normalised score.

Everything is checked before the first step: every setting's type and range, options this
collection would not use (``noise`` with ``policy=random``, ``ref_episodes`` when the random
reference is known), and the output path. An existing dataset with the same task, collection and
episode count is kept unless ``overwrite=true`` (a recipe of many datasets resumes where it
stopped); any other existing file (a dataset of another task or collection, a file that is not a
dataset) is an error naming the file and what it holds, so a collection never reports a success
it did not have. ``overwrite=true`` replaces only a robolearn dataset.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from pathlib import Path
from typing import Any

import torch

import robolearn
from robolearn.cli.build import flatten_overrides
from robolearn.cli.config import CollectConfig, ConfigError
from robolearn.data import Dataset, DatasetError, DatasetMetadata, d4rl_reference_returns, inspect_robolearn
from robolearn.runners.collect import collect_episodes, noisy_policy, uniform_policy

log = logging.getLogger(__name__)


def reference_returns(cfg: CollectConfig, task: str, make_env: Any) -> tuple[float | None, float | None]:
    """``(random, expert)`` reference returns: given, else D4RL's, else a measured random return."""
    rand, expert = cfg.ref_random, cfg.ref_expert
    try:
        d_rand, d_expert = d4rl_reference_returns(task)
    except KeyError:
        d_rand = d_expert = None
    rand = d_rand if rand is None else rand
    expert = d_expert if expert is None else expert
    if rand is None:
        env = make_env()
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        act = uniform_policy(env.ctrl_low, env.ctrl_high, gen)
        eps = collect_episodes(env, act, cfg.ref_episodes, seed=cfg.seed + 1, progress=False)
        rand = float(torch.stack([e["rewards"].sum() for e in eps]).mean())
        env.close()
    return rand, expert


_COUNTS = {"episodes": 1, "num_envs": 1, "ref_episodes": 1, "seed": 0}
"""Integer settings and their smallest valid value."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_collect_config(cfg: CollectConfig) -> None:
    """Raise :class:`ConfigError` naming the field, its value and what was expected, for every
    setting of ``cfg`` whose type or range cannot work (booleans are not numbers here).
    """
    for name, least in _COUNTS.items():
        value = getattr(cfg, name)
        if not _is_int(value) or value < least:
            raise ConfigError(f"{name}: expected an integer >= {least}, got {value!r}")
    if not _is_real(cfg.noise) or not math.isfinite(cfg.noise) or cfg.noise < 0:
        raise ConfigError(f"noise: expected a finite number >= 0 (a fraction of the half action range), got {cfg.noise!r}")
    for name in ("ref_random", "ref_expert"):
        value = getattr(cfg, name)
        if value is not None and (not _is_real(value) or not math.isfinite(value)):
            raise ConfigError(f"{name}: expected a finite number or null, got {value!r}")
    if cfg.ref_random is not None and cfg.ref_random == cfg.ref_expert:
        raise ConfigError(
            f"ref_expert: equals ref_random ({cfg.ref_random!r}); normalised scores divide by their difference"
        )
    for name in ("task", "out", "collection"):
        value = getattr(cfg, name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{name}: expected a non-empty string or null, got {value!r}")
    if not isinstance(cfg.policy, str) or not cfg.policy.strip():
        raise ConfigError(f"policy: expected 'random' or a run directory, got {cfg.policy!r}")
    if not isinstance(cfg.overwrite, bool):
        raise ConfigError(f"overwrite: expected true or false, got {cfg.overwrite!r}")
    if not isinstance(cfg.task_overrides, dict):
        raise ConfigError(f"task_overrides: expected a mapping, got {cfg.task_overrides!r}")
    try:
        torch.device(cfg.device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"device: {cfg.device!r} is not a torch device ({exc})") from None
    if cfg.policy == "random" and cfg.noise != 0:
        raise ConfigError(
            f"noise: {cfg.noise!r} is not used with policy=random (uniform actions); it perturbs a trained "
            "policy's actions (policy=<run dir>)"
        )


def _check_unused_reference(cfg: CollectConfig, task: str) -> None:
    """``ref_episodes`` only measures a random reference return that is otherwise unknown."""
    default = next(f.default for f in dataclasses.fields(CollectConfig) if f.name == "ref_episodes")
    if cfg.ref_episodes == default:
        return
    if cfg.ref_random is not None:
        source = f"ref_random={cfg.ref_random!r}"
    else:
        try:
            d4rl_reference_returns(task)
        except KeyError:
            return  # measured: ref_episodes is used
        source = f"D4RL's reference returns for {task}"
    raise ConfigError(
        f"ref_episodes: {cfg.ref_episodes} is not used: the random reference return comes from {source}, "
        "so no random episodes are measured"
    )


def check_output(cfg: CollectConfig, out: Path, task: str, collection: str) -> bool:
    """Check ``out`` before any rollout; True when an existing dataset satisfies the request (keep it).

    Raises:
        ConfigError: ``out`` is a directory, sits under a file or an unwritable directory, or exists
            and is not a robolearn dataset, or (without ``overwrite``) holds a dataset of another
            task, collection or size. The message names the file and what it holds.
    """
    if out.is_dir():
        raise ConfigError(f"out: {out} is a directory; give a file path such as {out / (task + '.h5')}")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"out: cannot create {out}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"out: cannot create {out}: no permission to write in {parent}")
    if not out.exists():
        return False
    try:
        info = inspect_robolearn(out)
    except (DatasetError, OSError) as exc:
        raise ConfigError(
            f"out: {exc}; choose another out= or move the file away (overwrite=true replaces only a robolearn dataset)"
        ) from None
    if cfg.overwrite:
        return False
    held = info.metadata
    wanted = {"task": (held.task_id, task), "collection": (held.collection, collection),
              "episodes": (info.episodes, cfg.episodes)}  # fmt: skip
    differ = [f"{k} {have!r} (asked: {want!r})" for k, (have, want) in wanted.items() if have != want]
    if differ:
        raise ConfigError(
            f"out: {out} already holds another dataset: {', '.join(differ)}; choose another out= or pass "
            "overwrite=true to replace it"
        )
    return True


def collect_command(cfg: CollectConfig) -> Path:
    """Collect ``cfg.episodes`` episodes and write them; return the dataset's path.

    Raises:
        ConfigError: a setting, an unused option or the output path is wrong (before any rollout).
    """
    validate_collect_config(cfg)
    policy = None if cfg.policy == "random" else robolearn.load_policy(cfg.policy, device=cfg.device)
    task = cfg.task or (policy.cfg.task if policy is not None else None)
    if task is None:
        raise ConfigError("task: required with policy=random (task=<TaskId>)")
    overrides = dict(flatten_overrides(policy.cfg.task_overrides)) if policy is not None else {}
    overrides.update(flatten_overrides(cfg.task_overrides))
    if policy is not None and policy.cfg.task != task:
        raise ConfigError(f"task: the policy was trained on {policy.cfg.task!r}, not {task!r}")
    _check_unused_reference(cfg, task)
    collection = cfg.collection or (
        "random" if policy is None else f"{policy.cfg.algo_name}-{Path(cfg.policy).name}" + (f"-noise{cfg.noise:g}" if cfg.noise else "")
    )
    out = Path(cfg.out or f"data/{task}-{collection}.h5")
    if check_output(cfg, out, task, collection):
        log.info("%s holds this dataset already; kept (overwrite=true replaces it)", out)
        print(f"kept existing {out} (task {task}, collection {collection}, {cfg.episodes} episodes; overwrite=true replaces it)")
        return out

    def make_env() -> Any:
        try:
            return robolearn.make(task, cfg.num_envs, seed=cfg.seed, device=cfg.device, **overrides)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc

    env = make_env()
    gen = torch.Generator().manual_seed(cfg.seed)
    low, high = env.ctrl_low.double(), env.ctrl_high.double()
    if policy is None:
        act = uniform_policy(low, high, gen)
    else:
        act = noisy_policy(policy.act, low, high, cfg.noise, gen)
    episodes = collect_episodes(env, act, cfg.episodes, seed=cfg.seed)
    env.close()
    rand, expert = reference_returns(cfg, task, make_env)
    returns = torch.stack([e["rewards"].sum() for e in episodes])
    meta = DatasetMetadata(
        task_id=task,
        collection=collection,
        ref_random_return=rand,
        ref_expert_return=expert,
        extra={
            "policy": cfg.policy,
            "noise": cfg.noise,
            "seed": cfg.seed,
            "num_envs": cfg.num_envs,
            "task_overrides": overrides,
            "mean_return": float(returns.mean()),
        },
    )
    ds = Dataset.from_episodes(episodes, meta)
    ds.save(out)
    print(
        f"wrote {out}: {len(ds)} transitions in {ds.num_episodes} episodes, mean return {float(returns.mean()):.1f} "
        f"(random ref {rand if rand is None else round(rand, 1)}, expert ref {expert if expert is None else round(expert, 1)})"
    )
    return out
