"""One training run's configuration, as written to and read back from ``<run>/config.json``.

:func:`train_config_from_dict` is the single gate every training setting passes: the algorithm is
looked up in :mod:`robolearn.algos.registry`, each section is built by
:func:`robolearn.utils.config.to_dataclass` (unknown keys named, types checked), and the settings
of the run itself are checked for range and for use — an option the chosen algorithm does not read
(``dataset=`` for an online learner) is an error, not silently ignored.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robolearn.algos import registry
from robolearn.runners.base import RunnerConfig
from robolearn.runners.distributed import check_config as check_distributed
from robolearn.runners.o2o import O2OConfig
from robolearn.utils.config import ConfigError, lists, read_json_object, to_dataclass

INJECTED: dict[str, dict[str, str]] = {
    "algo": {"seed": "seed"},
    "runner": {"total_env_steps": "total_env_steps"},
}
"""Section fields filled from a top-level key (section -> field -> top-level key)."""

DEFAULT_GRAD_STEPS = 1_000_000
"""Gradient steps of an offline run when ``total_grad_steps`` is not given."""


@dataclass
class TrainConfig:
    """One training run: task, sizes, seeds, and the algorithm's and runner's configs."""

    task: str
    """Registered task id."""
    algo: Any
    """The algorithm's config dataclass; its type says which algorithm (``robolearn.algos.registry``)."""
    runner: RunnerConfig
    """The training loop's config."""
    task_overrides: dict[str, Any] = field(default_factory=dict)
    """Task config overrides passed to ``robolearn.make`` (nested mappings become ``a__b`` keys)."""
    seed: int = 0
    """Seed of the training env, network init and algorithm generators."""
    num_envs: int = 64
    """Training worlds."""
    eval_num_envs: int = 8
    """Evaluation worlds; 0 disables evaluation (offline runs evaluate in at least one world)."""
    total_env_steps: int = 1_000_000
    """Environment steps of an online run."""
    device: str = "cpu"
    """Torch device of envs and learner."""
    backend: str = "mujoco"
    """Simulation backend: ``mujoco`` (CPU batch), ``reference`` or ``warp`` (MuJoCo Warp)."""
    sim_options: dict[str, Any] = field(default_factory=dict)
    """Further arguments of the backend, e.g. ``sim_options.graph_capture=true`` (Warp on CUDA: the
    physics substeps as one CUDA graph) or ``sim_options.nconmax=...``; an unknown one is an error."""
    run_dir: str = "runs"
    """Where the run is written."""
    resume: str | None = None
    """A run directory to continue from its latest checkpoint."""
    overwrite: bool = False
    """Replace a run directory that already holds another run (by default that is an error); the
    same as ``runner.overwrite=true``."""
    torch_threads: int | None = None
    """Torch intra-op threads of the training process; ``None``: torch's default (every core), right
    on an idle machine; 1 per process when several share a loaded one."""
    sim_threads: int | None = None
    """MuJoCo threads stepping the worlds of each env (the CPU backend's ``nthread``); ``None``: every
    core, right on an idle machine; 1 per process when several share one (``robolearn benchmark``
    gives every run one thread for torch and one for the physics, as the SB3 side has)."""
    dataset: str | None = None
    """Offline algorithms only: the dataset file (robolearn or D4RL HDF5) or ``minari:<dataset id>``."""
    total_grad_steps: int | None = None
    """Offline algorithms only: gradient steps of the run (default 1,000,000)."""
    normalize_obs: bool | None = None
    """Offline algorithms only: normalise observations with the dataset's mean and std (default
    true, as CORL)."""
    distributed: bool = False
    """Data-parallel training over the processes ``torchrun`` starts (:mod:`robolearn.runners.distributed`,
    PPO and SAC): each rank steps ``num_envs`` worlds of its own with its own seed, the gradients are
    averaged over the ranks, rank 0 logs, evaluates and checkpoints. ``total_env_steps`` counts the
    steps of all ranks."""
    o2o: O2OConfig | None = None
    """Offline-to-online fine-tuning (:mod:`robolearn.runners.o2o`): an offline phase on
    ``dataset`` (``total_grad_steps``; 0 or a pre-trained ``o2o.checkpoint`` skip it), a warm-up and
    ``total_env_steps`` of online learning by ``algo``. ``None``: the algorithm's own runner."""

    @property
    def algo_name(self) -> str:
        """The registry name of :attr:`algo`'s type."""
        return registry.spec_of(self.algo).name

    @property
    def offline(self) -> bool:
        """Whether the run learns from :attr:`dataset` only (an offline algorithm outside ``o2o``)."""
        return self.o2o is None and registry.spec_of(self.algo).offline


OFFLINE_ONLY = ("dataset", "total_grad_steps", "normalize_obs")
"""Run settings only an offline algorithm reads."""


def train_config_from_dict(mapping: Mapping[str, Any]) -> TrainConfig:
    """A checked :class:`TrainConfig` from the composed (or a run's saved ``config.json``) mapping.

    ``algo.name`` picks the algorithm; the top-level ``seed`` and ``total_env_steps`` fill
    ``algo.seed`` (where the config has one) and ``runner.total_env_steps``.

    Raises:
        ConfigError: an unknown algorithm, key or type; a value out of range; an option the
            algorithm does not use; a missing dataset for an offline algorithm.
    """
    top = dict(mapping)
    algo = dict(top.pop("algo", None) or {})
    runner = dict(top.pop("runner", None) or {})
    name = algo.pop("name", "ppo")
    try:
        spec = registry.get(str(name))
    except KeyError as exc:
        raise ConfigError(exc.args[0]) from None
    for section, values, cls in (("algo", algo, spec.config), ("runner", runner, RunnerConfig)):
        known = {f.name for f in dataclasses.fields(cls)}
        for key, source in INJECTED[section].items():
            if key in values:
                raise ConfigError(f"{section}.{key}: set it with the top-level {source}=")
            if key in known and source in top:
                values[key] = top[source]
    top["algo"] = to_dataclass(spec.config, algo, "algo")
    top["runner"] = to_dataclass(RunnerConfig, runner, "runner")
    o2o = top.pop("o2o", None)
    cfg = to_dataclass(TrainConfig, top)
    if o2o is not None:
        cfg.o2o = _o2o_config(o2o, spec)
    if cfg.overwrite:  # the top-level spelling of runner.overwrite
        cfg.runner.overwrite = True
    _check_ranges(cfg)
    if cfg.distributed:
        check_distributed(cfg)
    if cfg.o2o is not None:
        _check_o2o(cfg, spec)
        return cfg
    if spec.offline:
        if not cfg.dataset:
            raise ConfigError(f"dataset: algo={spec.name} learns offline and needs dataset=<file or minari:id>")
        if cfg.total_grad_steps is None:
            cfg.total_grad_steps = DEFAULT_GRAD_STEPS
        if cfg.normalize_obs is None:
            cfg.normalize_obs = True
    else:
        used = [k for k in OFFLINE_ONLY if getattr(cfg, k) is not None]
        if used:
            raise ConfigError(
                f"{used[0]}: algo={spec.name} learns online and does not read {', '.join(used)}; "
                f"remove it, or pick an offline algorithm ({', '.join(n for n, s in registry.ALGORITHMS.items() if s.offline)})"
            )
    return cfg


def _o2o_config(section: Any, spec: registry.AlgoSpec) -> O2OConfig:
    """The ``o2o`` section: its pre-training learner (an algorithm section) built like ``algo``."""
    if not isinstance(section, Mapping):
        raise ConfigError(f"o2o: expected a mapping of offline-to-online settings, got {section!r}")
    values = dict(section)
    pretrain = values.pop("pretrain", None)
    cfg = to_dataclass(O2OConfig, values, "o2o")
    if pretrain is not None:
        if not isinstance(pretrain, Mapping) or "name" not in pretrain:
            raise ConfigError(f"o2o.pretrain: expected an algorithm section with a name (e.g. {{name: calql}}), got {pretrain!r}")
        fields = dict(pretrain)
        try:
            pre = registry.get(str(fields.pop("name")))
        except KeyError as exc:
            raise ConfigError(f"o2o.pretrain.name: {exc.args[0].removeprefix('algo: ')}") from None
        if "offline" not in pre.runners:
            offline = ", ".join(n for n, s in registry.ALGORITHMS.items() if "offline" in s.runners)
            raise ConfigError(f"o2o.pretrain.name: {pre.name} does not learn from a dataset; valid choices: {offline}")
        cfg.pretrain = to_dataclass(pre.config, fields, "o2o.pretrain")
    return cfg


def _check_o2o(cfg: TrainConfig, spec: registry.AlgoSpec) -> None:
    """An offline-to-online run: a learner that can fine-tune, a dataset where one is read, and the
    offline phase's defaults.
    """
    o2o = cfg.o2o
    assert o2o is not None
    if "offline_to_online" not in spec.runners:
        able = ", ".join(n for n, s in registry.ALGORITHMS.items() if "offline_to_online" in s.runners)
        raise ConfigError(f"algo: {spec.name} cannot learn online from a replay (o2o); valid choices: {able}")
    if o2o.checkpoint is not None:
        if cfg.total_grad_steps:
            raise ConfigError(
                f"total_grad_steps: the run starts from the pre-trained o2o.checkpoint; an offline phase "
                f"({cfg.total_grad_steps} gradient steps) is not run as well: remove one of them"
            )
        cfg.total_grad_steps = 0
    elif cfg.total_grad_steps is None:
        pretrains = o2o.pretrain is not None or spec.offline
        cfg.total_grad_steps = DEFAULT_GRAD_STEPS if pretrains else 0
    if cfg.total_grad_steps and o2o.pretrain is None and "offline" not in spec.runners:
        raise ConfigError(
            f"o2o.pretrain: an offline phase ({cfg.total_grad_steps} gradient steps) needs a learner that "
            f"learns from data; algo={spec.name} does not: set o2o.pretrain (e.g. {{name: calql}}) or total_grad_steps=0"
        )
    if (cfg.total_grad_steps or o2o.offline_ratio > 0) and not cfg.dataset:
        raise ConfigError(
            "dataset: an offline phase or o2o.offline_ratio > 0 reads a dataset; set dataset=<file or minari:id>"
        )
    if o2o.warmup_steps > cfg.total_env_steps:
        raise ConfigError(
            f"o2o.warmup_steps: expected at most total_env_steps ({cfg.total_env_steps}) (the warm-up is part "
            f"of the online budget), got {o2o.warmup_steps}"
        )
    starts = getattr(cfg.algo, "learning_starts", 0)
    if (cfg.total_grad_steps or o2o.checkpoint) and starts:
        raise ConfigError(
            f"algo.learning_starts: a pre-trained learner acts with its own policy from the first online step "
            f"(its warm-up is o2o.warmup_steps), so random actions until learning_starts would discard it; "
            f"expected 0, got {starts}"
        )
    if cfg.normalize_obs is None:
        cfg.normalize_obs = True


def _check_ranges(cfg: TrainConfig) -> None:
    """Counts of the run itself: integers in range (types were checked by ``to_dataclass``)."""
    for key, low in (("num_envs", 1), ("total_env_steps", 1), ("eval_num_envs", 0)):
        if getattr(cfg, key) < low:
            raise ConfigError(f"{key}: expected an integer >= {low}, got {getattr(cfg, key)}")
    least = 0 if cfg.o2o is not None else 1  # an offline-to-online run may skip its offline phase
    if cfg.total_grad_steps is not None and cfg.total_grad_steps < least:
        raise ConfigError(f"total_grad_steps: expected an integer >= {least}, got {cfg.total_grad_steps}")
    if cfg.torch_threads is not None and cfg.torch_threads < 1:
        raise ConfigError(f"torch_threads: expected an integer >= 1 (or null for torch's default), got {cfg.torch_threads}")
    if cfg.sim_threads is not None and cfg.sim_threads < 1:
        raise ConfigError(f"sim_threads: expected an integer >= 1 (or null for every core), got {cfg.sim_threads}")
    if cfg.seed < 0:
        raise ConfigError(f"seed: expected an integer >= 0, got {cfg.seed}")


def train_config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The mapping :func:`train_config_from_dict` reads back (written as the run's ``config.json``)."""
    out = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in ("algo", "runner", "o2o")}
    if cfg.o2o is not None:
        o2o = {f.name: getattr(cfg.o2o, f.name) for f in dataclasses.fields(cfg.o2o)}
        if cfg.o2o.pretrain is not None:
            o2o["pretrain"] = {"name": registry.spec_of(cfg.o2o.pretrain).name, **dataclasses.asdict(cfg.o2o.pretrain)}
        out["o2o"] = o2o
    algo = {"name": cfg.algo_name, **dataclasses.asdict(cfg.algo)}
    runner = dataclasses.asdict(cfg.runner)
    for section, values in (("algo", algo), ("runner", runner)):
        for key in INJECTED[section]:
            values.pop(key, None)
    out["algo"], out["runner"] = algo, runner
    return lists(out)


LEGACY_OFFLINE_DEFAULTS: dict[str, Any] = {"dataset": None, "total_grad_steps": 1_000_000, "normalize_obs": True}
"""What robolearn 0.1 wrote into every run's ``config.json``, online runs included."""


def saved_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw mapping of ``run_dir/config.json``, brought up to the current layout.

    Runs written by robolearn 0.1 record the offline-only settings at their defaults for online
    algorithms too; those are dropped here, so old runs still evaluate, export and resume.

    Raises:
        FileNotFoundError: ``run_dir`` holds no ``config.json``.
        ConfigError: the file is not a JSON object (the file is named).
    """
    data = read_json_object(Path(run_dir) / "config.json", f"is {run_dir} a robolearn run directory?")
    algo = data.get("algo")
    name = algo.get("name", "ppo") if isinstance(algo, Mapping) else None
    if name in registry.ALGORITHMS and not registry.get(name).offline:
        for key, legacy in LEGACY_OFFLINE_DEFAULTS.items():
            if key in data and data[key] == legacy:
                del data[key]
    return data


def read_train_config(run_dir: str | os.PathLike[str]) -> TrainConfig:
    """The :class:`TrainConfig` saved in ``run_dir/config.json`` (see :func:`saved_config`).

    Raises:
        FileNotFoundError: ``run_dir`` holds no ``config.json``.
        ConfigError: the file is not valid JSON or not a valid config (the file is named).
    """
    data = saved_config(run_dir)
    try:
        return train_config_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{Path(run_dir) / 'config.json'}: {exc}") from None


__all__ = [
    "DEFAULT_GRAD_STEPS",
    "INJECTED",
    "OFFLINE_ONLY",
    "TrainConfig",
    "read_train_config",
    "saved_config",
    "train_config_from_dict",
    "train_config_to_dict",
]
