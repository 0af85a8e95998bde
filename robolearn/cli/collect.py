"""``robolearn data collect``: behaviour-policy rollouts written as a robolearn dataset.

The behaviour policy is uniform random or a trained run's deterministic policy with optional
Gaussian noise; episodes come from :func:`robolearn.runners.collect.collect_episodes`. The file
carries its task, provenance and reference returns (D4RL's for the Gymnasium locomotion tasks it
covers, otherwise a measured random-policy return and a given expert return), so every offline
result on it can be a normalised score. An existing file is left alone unless ``overwrite=true``:
a recipe that builds many datasets resumes where it stopped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

import robolearn
from robolearn.cli.build import flatten_overrides, load_policy
from robolearn.cli.config import CollectConfig, ConfigError
from robolearn.data import Dataset, DatasetMetadata, d4rl_reference_returns
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


def collect_command(cfg: CollectConfig) -> Path:
    """Collect ``cfg.episodes`` episodes and write them; return the dataset's path."""
    policy = None if cfg.policy == "random" else load_policy(cfg.policy, device=cfg.device)
    task = cfg.task or (policy.cfg.task if policy is not None else None)
    if task is None:
        raise ConfigError("task: required with policy=random (task=<TaskId>)")
    overrides = dict(flatten_overrides(policy.cfg.task_overrides)) if policy is not None else {}
    overrides.update(flatten_overrides(cfg.task_overrides))
    if policy is not None and policy.cfg.task != task:
        raise ConfigError(f"task: the policy was trained on {policy.cfg.task!r}, not {task!r}")
    collection = cfg.collection or (
        "random" if policy is None else f"{policy.cfg.algo_name}-{Path(cfg.policy).name}" + (f"-noise{cfg.noise:g}" if cfg.noise else "")
    )
    out = Path(cfg.out or f"data/{task}-{collection}.h5")
    if out.exists() and not cfg.overwrite:
        log.info("%s exists; kept (overwrite=true replaces it)", out)
        print(f"kept existing {out}")
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
