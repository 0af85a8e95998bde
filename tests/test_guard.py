"""The divergence guard, for every registered algorithm under its own runner: an update that
produces a non-finite loss or a non-finite parameter is undone (the weights are those before it)
and counted; a clean update afterwards goes through."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.algos.registry import ALGORITHMS
from robolearn.data import Dataset
from robolearn.runners import OfflineRunner, OffPolicyRunner, OnPolicyRunner, RunnerConfig
from robolearn.runners.collect import collect_episodes, uniform_policy

SMALL = {
    "actor_hidden": (16,), "critic_hidden": (16,), "value_hidden": (16,), "num_steps": 8, "num_mini_batches": 2,
    "batch_size": 16, "learning_starts": 8, "hidden_dim": 16, "feature_dim": 8, "cnn_channels": 4, "update_every": 1,
}
"""Tiny networks and batches (each applied where the algorithm's config has the field)."""


@pytest.fixture(scope="module")
def cartpole_data() -> Dataset:
    env = robolearn.make("Cartpole-Balance", 4, seed=0, episode_length=20)
    act = uniform_policy(env.ctrl_low.double(), env.ctrl_high.double(), torch.Generator().manual_seed(0))
    return Dataset.from_episodes(collect_episodes(env, act, 4, seed=0, progress=False))


PIXEL_ALGOS = {"drqv2"}
"""Learners from pixels: their runner steps the pixel cart-pole at 16x16 instead of the state one."""


def _env(name: str) -> robolearn.envs.BatchedEnv:
    if name in PIXEL_ALGOS:
        size = {"observations__image__terms__rgb__params__width": 16, "observations__image__terms__rgb__params__height": 16}
        return robolearn.make("Cartpole-Swingup-Pixels", 4, seed=1, episode_length=20, **size)
    return robolearn.make("Cartpole-Balance", 4, seed=1, episode_length=20)


def _runner(name: str, run_dir: Path, data: Dataset):
    spec = ALGORITHMS[name]
    names = {f.name for f in dataclasses.fields(spec.config)}
    cfg = spec.config(**{k: v for k, v in SMALL.items() if k in names})
    env = _env(name)
    agent = spec.build(cfg, env.obs_dims, env.action_dim, action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)
    rcfg = RunnerConfig(total_env_steps=10_000, steps_per_iteration=4, video=False, console=False, tensorboard=False)
    kind = spec.runners[0]
    if kind == "on_policy":
        return OnPolicyRunner(env, agent, rcfg, run_dir)
    if kind == "off_policy":
        return OffPolicyRunner(env, agent, rcfg, run_dir)
    assert kind == "offline", kind
    return OfflineRunner(data, agent, rcfg, run_dir, eval_env=env, total_grad_steps=100)


def _iterate(runner) -> dict[str, torch.Tensor]:
    obs = runner.env.obs if runner.env is not None else {}
    return runner._iterate(obs)[1]


def _weights(agent) -> list[torch.Tensor]:
    return [p.detach().clone() for p in agent.parameters()]


@pytest.mark.parametrize("poison", ["loss", "parameter"])
# A distillation student needs a trained teacher to build its runner: tests/test_distill.py runs
# this same check on DistillRunner.
@pytest.mark.parametrize("name", sorted(n for n, s in ALGORITHMS.items() if s.runners[0] != "distill"))
def test_a_non_finite_update_is_skipped_and_undone(name, poison, tmp_path, cartpole_data):
    runner = _runner(name, tmp_path / name, cartpole_data)
    agent = runner.agent
    _iterate(runner)  # one clean iteration first (SAC fills its buffer past learning_starts)
    assert runner.skipped_updates == 0
    real_update = agent.update
    before: list[torch.Tensor] = []

    def poisoned(*args, **kwargs):
        if not before:  # the weights as the (first) update of the iteration finds them
            before.extend(_weights(agent))
        stats = real_update(*args, **kwargs)  # a real update, then corrupted as an exploding one would be
        if poison == "loss":
            stats = {**stats, next(iter(stats)): torch.tensor(float("nan"))}
        else:
            with torch.no_grad():
                agent.parameters()[0].view(-1)[0] = float("inf")
        return stats

    agent.update = poisoned
    stats = _iterate(runner)
    assert runner.skipped_updates == 1 and runner.bad_updates == 1
    after = _weights(agent)
    assert len(after) == len(before) > 0
    for b, a in zip(before, after, strict=True):
        assert torch.equal(a, b), "the weights are those before the bad update"
    assert all(float(v) == 0.0 for v in stats.values())

    agent.update = real_update
    _iterate(runner)
    assert runner.bad_updates == 0 and runner.skipped_updates == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, _weights(agent), strict=True)), "a clean update learns"
