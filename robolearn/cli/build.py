"""Envs, agents, datasets and runners from a :class:`~robolearn.runners.train_config.TrainConfig`.

Algorithms are built through :mod:`robolearn.algos.registry` (the same path
:func:`robolearn.load_policy` takes), so a run directory's ``config.json`` rebuilds exactly the
agent that wrote its checkpoints. No Hydra in here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import robolearn
from robolearn.algos import registry
from robolearn.cli.config import ConfigError, TrainConfig
from robolearn.envs import BatchedEnv
from robolearn.runners import OffPolicyRunner, OnPolicyRunner
from robolearn.runners.policy import LoadedPolicy, load_policy
from robolearn.runners.train_config import read_train_config
from robolearn.utils.config import flatten_overrides

EVAL_SEED_OFFSET = 10_000
"""The evaluation env of a training run is seeded ``seed + EVAL_SEED_OFFSET``."""




def build_env(
    cfg: TrainConfig, num_envs: int, seed: int, device: str | None = None, evaluation: bool = False
) -> BatchedEnv:
    """``num_envs`` worlds of the run's task with its overrides, seeded ``seed``.

    ``evaluation=True`` builds the env without the task's curriculum: the values a task declares
    are the task itself and the curriculum's end point, so reported scores measure the task a user
    asked for, not the easy start a curriculum trains from.
    """
    overrides = flatten_overrides(cfg.task_overrides)
    if evaluation:
        overrides["curriculum"] = {}
    return robolearn.make(
        cfg.task, num_envs, seed=seed, device=device or cfg.device, backend=cfg.backend,
        nthread=cfg.sim_threads, sim_options=cfg.sim_options, **overrides,
    )


def build_agent(cfg: TrainConfig, env: BatchedEnv, device: str | None = None) -> Any:
    """A freshly initialised agent of the run's algorithm for ``env``'s spaces (seeded by ``cfg.seed``)."""
    return registry.spec_of(cfg.algo).build(
        cfg.algo,
        env.obs_dims,
        env.action_dim,
        action_low=env.ctrl_low,
        action_high=env.ctrl_high,
        device=device or cfg.device,
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
        try:
            with h5py.File(path, "r") as fh:
                d4rl = "observations" in fh and isinstance(fh["observations"], h5py.Dataset)
        except OSError as exc:  # h5py's message does not say which file; ours does
            raise ConfigError(f"dataset: {path} is not a readable HDF5 dataset file ({exc})") from None
        if d4rl:
            return read_d4rl(path, device=cfg.device, **expect)
        return read_robolearn(path, device=cfg.device, task_id=cfg.task, **expect)
    except DatasetError as exc:
        raise ConfigError(f"dataset: {exc}") from exc


def read_dataset(cfg: TrainConfig, env: BatchedEnv) -> Any:
    """:func:`load_dataset` with an unreadable file reported as a config error naming ``dataset``."""
    try:
        return load_dataset(cfg, env)
    except OSError as exc:  # h5py's "file signature not found" names neither the file nor the format
        if isinstance(exc, FileNotFoundError):
            raise
        raise ConfigError(f"dataset: {cfg.dataset} cannot be read as an HDF5 dataset ({exc})") from None


def normalize_with(agent: Any, dataset: Any, obs_dims: Mapping[str, int]) -> None:
    """Fix ``agent``'s observation statistics to the dataset's per-group mean and std (std at least 1e-3)."""
    groups = {g: v for g, v in dataset.observations.items() if g in obs_dims}
    mean = {g: v.double().mean(0).float() for g, v in groups.items()}
    std = {g: v.double().std(0).float().clamp_min(1e-3) for g, v in groups.items()}
    agent.set_obs_normalization(mean, std)


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
    """The loop of the algorithm's default runner kind (``robolearn.algos.registry``)."""
    from robolearn.runners.offline import OfflineRunner

    runners: dict[str, type] = {"on_policy": OnPolicyRunner, "off_policy": OffPolicyRunner, "offline": OfflineRunner}
    return runners[registry.spec_of(cfg.algo).runners[0]]


__all__ = [
    "EVAL_SEED_OFFSET",
    "LoadedPolicy",
    "build_agent",
    "build_env",
    "flatten_overrides",
    "load_dataset",
    "normalize_with",
    "read_dataset",
    "load_policy",
    "offline_reference",
    "read_train_config",
    "runner_class",
]
