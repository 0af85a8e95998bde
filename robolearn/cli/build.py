"""Envs, agents, runners and loaded policies from a :class:`~robolearn.cli.config.TrainConfig`.

The training command and :func:`robolearn.load_policy` share these, so a run directory's
``config.json`` rebuilds exactly the agent that wrote its checkpoints. No Hydra in here.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

import robolearn
from robolearn.algos import (
    BC,
    CQL,
    IQL,
    PPO,
    SAC,
    TD3BC,
    BCConfig,
    CQLConfig,
    IQLConfig,
    PPOConfig,
    SACConfig,
    TD3BCConfig,
)
from robolearn.cli.config import ConfigError, TrainConfig, train_config_from_dict
from robolearn.envs import BatchedEnv
from robolearn.runners import CheckpointManager, OnPolicyRunner, load_checkpoint

EVAL_SEED_OFFSET = 10_000
"""The evaluation env of a training run is seeded ``seed + EVAL_SEED_OFFSET``."""


def flatten_overrides(overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested task overrides as ``robolearn.make`` keywords: ``{"a": {"b": 1}}`` -> ``{"a__b": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        name = f"{prefix}__{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten_overrides(value, name))
        else:
            flat[name] = value
    return flat


def build_env(cfg: TrainConfig, num_envs: int, seed: int, device: str | None = None) -> BatchedEnv:
    """``num_envs`` worlds of the run's task with its overrides, seeded ``seed``."""
    return robolearn.make(
        cfg.task,
        num_envs,
        seed=seed,
        device=device or cfg.device,
        backend=cfg.backend,
        **flatten_overrides(cfg.task_overrides),
    )


AGENTS: dict[type, type] = {
    SACConfig: SAC,
    BCConfig: BC,
    TD3BCConfig: TD3BC,
    IQLConfig: IQL,
    CQLConfig: CQL,
}
"""The agent class of each off-policy and offline config (Cal-QL is CQL's calibrated variant)."""


def build_agent(cfg: TrainConfig, env: BatchedEnv, device: str | None = None) -> Any:
    """A freshly initialised agent of the run's algorithm for ``env``'s spaces (seeded by ``cfg.seed``)."""
    device = device or cfg.device
    torch.manual_seed(cfg.seed)  # network init
    if isinstance(cfg.algo, PPOConfig):
        return PPO(env.obs_dims, env.action_dim, cfg.algo, device=device)
    cls = next(agent for config, agent in AGENTS.items() if isinstance(cfg.algo, config))
    return cls(
        env.obs_dims,
        env.action_dim,
        cfg.algo,
        action_low=env.ctrl_low,
        action_high=env.ctrl_high,
        device=device,
        seed=cfg.seed,
    )


def load_dataset(cfg: TrainConfig, env: BatchedEnv) -> Any:
    """The run's dataset on its device, checked against ``env``'s task (dimensions, task id).

    ``minari:<id>`` reads a local Minari dataset; a file with a D4RL layout (``observations`` at the
    top) goes through the D4RL reader, anything else through the robolearn reader.
    """
    import h5py

    from robolearn.data import DatasetError, read_d4rl, read_minari, read_robolearn

    path = str(cfg.dataset)
    expect = {"expect_obs_dim": env.obs_dims["policy"], "expect_action_dim": env.action_dim}
    try:
        if path.startswith("minari:"):
            return read_minari(path[len("minari:") :], device=cfg.device, **expect)
        if not Path(path).is_file():
            raise FileNotFoundError(f"dataset: {path} does not exist")
        with h5py.File(path, "r") as fh:
            d4rl = "observations" in fh and isinstance(fh["observations"], h5py.Dataset)
        if d4rl:
            return read_d4rl(path, device=cfg.device, **expect)
        return read_robolearn(path, device=cfg.device, task_id=cfg.task, **expect)
    except DatasetError as exc:
        raise ConfigError(f"dataset: {exc}") from exc


def offline_reference(cfg: TrainConfig, dataset: Any) -> Any:
    """Reference returns for normalised scores: the dataset's own, else D4RL's for its task family."""
    from robolearn.data import d4rl_reference_returns
    from robolearn.runners.offline import ReferenceReturns

    meta = dataset.metadata
    if meta.ref_random_return is not None and meta.ref_expert_return is not None:
        if meta.ref_random_return == meta.ref_expert_return:
            return None  # no spread to normalise by (a task whose random policy scores like the expert)
        return ReferenceReturns(meta.ref_random_return, meta.ref_expert_return)
    try:
        return ReferenceReturns(*d4rl_reference_returns(cfg.task))
    except KeyError:
        return None


def runner_class(cfg: TrainConfig) -> type:
    """The loop that trains an online ``cfg.algo``: on-policy for PPO, off-policy for SAC."""
    if isinstance(cfg.algo, PPOConfig):
        return OnPolicyRunner
    try:
        from robolearn.runners.off_policy import OffPolicyRunner
    except ImportError as exc:
        raise ConfigError(f"algo={cfg.algo_name} needs robolearn.runners.off_policy.OffPolicyRunner: {exc}") from exc
    return OffPolicyRunner


def read_train_config(run_dir: str | os.PathLike[str]) -> TrainConfig:
    """The :class:`TrainConfig` saved in ``run_dir/config.json``."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a robolearn run directory?")
    return train_config_from_dict(json.loads(path.read_text()))


class _SquashedMean(nn.Module):
    """``obs -> actor.act_deterministic(obs)`` as a module (the deployable policy of SAC and the
    offline learners).
    """

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The squashed mean action."""
        return self.actor.act_deterministic(obs)


class _Normalized(nn.Module):
    """``obs -> policy((obs - mean) / std)``: an offline learner's fixed dataset statistics folded in."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, policy: nn.Module) -> None:
        super().__init__()
        self.register_buffer("mean", mean.detach().clone())
        self.register_buffer("std", std.detach().clone())
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's action for raw observations."""
        return self.policy((obs - self.mean) / self.std)


def policy_module(agent: Any) -> nn.Module:
    """The deterministic ``obs[B, D] -> action[B, A]`` module (normalisation included), a CPU copy in eval mode."""
    if isinstance(agent, PPO):
        module: nn.Module = nn.Sequential(agent.actor_normalizer, agent.actor)
    else:  # every other actor (tanh-Gaussian or deterministic) acts through act_deterministic
        module = _SquashedMean(agent.actor)
    stats = getattr(getattr(agent, "obs_norm", None), "stats", {})
    if agent.actor_group in stats:
        mean, std = stats[agent.actor_group]
        module = _Normalized(mean, std, module)
    return copy.deepcopy(module).cpu().eval()


class LoadedPolicy:
    """A trained run's deterministic policy: :meth:`act` on observation dicts, plus its spec and config."""

    def __init__(self, agent: Any, cfg: TrainConfig, spec: dict[str, Any], checkpoint: Path) -> None:
        self.agent = agent
        """The rebuilt agent with the checkpoint's weights."""
        self.cfg = cfg
        """The run's training config."""
        self.spec = spec
        """The run's ``policy_spec.json`` (what each observation and action number means)."""
        self.checkpoint = checkpoint
        """The checkpoint file the weights came from."""

    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic actions ``[N, A]`` for an observation dict (as ``env.obs``)."""
        with torch.inference_mode():
            return self.agent.act_inference(obs)

    def module(self) -> nn.Module:
        """The policy as a plain ``obs -> action`` module on the CPU (what export traces)."""
        return policy_module(self.agent)


def load_policy(run_dir: str | os.PathLike[str], device: str = "cpu") -> LoadedPolicy:
    """Rebuild a run's agent from its ``config.json`` and load its latest checkpoint."""
    run = Path(run_dir)
    cfg = read_train_config(run)
    path = CheckpointManager(run, keep=None).latest()
    if path is None:
        raise FileNotFoundError(f"no checkpoint in {run / 'checkpoints'}")
    state = load_checkpoint(path, map_location=device)
    env = build_env(cfg, 1, seed=0, device=device)
    try:
        agent = build_agent(cfg, env, device=device)
    finally:
        env.close()
    agent.load_state_dict(state["agent"])
    spec_path = run / "policy_spec.json"
    spec = json.loads(spec_path.read_text()) if spec_path.is_file() else {}
    return LoadedPolicy(agent, cfg, spec, path)
