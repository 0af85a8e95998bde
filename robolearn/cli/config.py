"""Composed configuration to dataclasses, once (DESIGN.md, "Configuration").

Hydra composes ``robolearn.configs``; :func:`plain` turns the result into plain containers and the
``*_from_dict`` functions into the dataclasses every component takes. Nothing below ``cli/`` sees a
DictConfig. :func:`to_dataclass` rejects an unknown key by naming it, the dataclass, its valid
fields and the closest match, and checks each value against the field's annotation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from robolearn.algos import registry
from robolearn.runners.train_config import (
    INJECTED,
    TrainConfig,
    read_train_config,
    saved_config,
    train_config_from_dict,
    train_config_to_dict,
)
from robolearn.utils.config import ConfigError, to_dataclass

ALGOS: dict[str, type] = {name: spec.config for name, spec in registry.ALGORITHMS.items()}
"""Algorithm names (``algo=<name>``) and their config dataclasses, from the registry."""
OFFLINE_ALGOS: frozenset[str] = frozenset(name for name, spec in registry.ALGORITHMS.items() if spec.offline)
"""Algorithms that learn from a dataset (``dataset=<file>``, ``total_grad_steps=N``)."""


@dataclass
class EvalConfig:
    """``robolearn eval``: roll out a run's latest checkpoint."""

    run: str
    """The run directory."""
    run_dir: str | None = None
    """Alias of ``run``."""
    episodes: int = 16
    """Episodes to average."""
    num_envs: int = 8
    """Worlds stepped together."""
    seed: int = 12345
    """Seed of the evaluation worlds."""
    device: str = "cpu"
    """Torch device."""
    video: bool = False
    """Write world 0's first episode as ``<run>/eval_cli.mp4``."""
    video_steps: int = 500
    """Most frames of the video."""

    def __post_init__(self) -> None:
        """Reject counts that cannot work, naming the field (a boolean is not a count)."""
        for name, least in (("episodes", 1), ("num_envs", 1), ("video_steps", 1), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{name}: expected an integer >= {least}, got {value!r}")


EXPORT_FORMATS = ("onnx", "torchscript", "all")
"""Values of ``format=``."""


@dataclass
class ExportConfig:
    """``robolearn export``: the deterministic policy as ONNX and/or TorchScript, with a manifest."""

    run: str
    """The run directory."""
    run_dir: str | None = None
    """Alias of ``run``."""
    format: str = "all"
    """One of :data:`EXPORT_FORMATS`."""
    out: str | None = None
    """Output folder; ``None``: ``<run>/export``."""
    sampler_steps: int | None = None
    """Generative (chunked) policies: the sampler's fixed number of denoising steps in the exported
    graph; ``None``: the learner's own ``sample_steps``."""
    one_step: bool = False
    """Generative policies: export the distilled one-step head instead of the multi-step sampler."""

    def __post_init__(self) -> None:
        """Reject an unknown format, listing the valid ones, and a step count below 1."""
        if self.format not in EXPORT_FORMATS:
            raise ConfigError(f"format: unknown {self.format!r}; valid choices: {', '.join(EXPORT_FORMATS)}")
        if self.sampler_steps is not None and self.sampler_steps < 1:
            raise ConfigError(f"sampler_steps: expected a number of steps >= 1 (or null), got {self.sampler_steps}")
        if self.one_step and self.sampler_steps not in (None, 1):
            raise ConfigError(f"sampler_steps: the one-step head takes 1 step, got {self.sampler_steps} with one_step=true")


@dataclass
class CollectConfig:
    """``robolearn data collect``: roll a behaviour policy out and write its episodes as a dataset."""

    task: str | None = None
    """Registered task id; default: the run's task when ``policy`` is a run directory."""
    policy: str = "random"
    """``random`` (uniform actions in the bounds) or a run directory (latest checkpoint, deterministic)."""
    episodes: int = 100
    """Complete episodes to keep."""
    noise: float = 0.0
    """Gaussian action noise as a fraction of the half action range (clipped to the bounds)."""
    num_envs: int = 16
    """Worlds stepped together."""
    seed: int = 0
    """Seed of the worlds and of the noise."""
    out: str | None = None
    """Dataset file; default ``data/<task>-<collection>.h5``."""
    collection: str | None = None
    """Name of the data's provenance in its metadata; default from the policy and the noise."""
    ref_random: float | None = None
    """Random-policy reference return; D4RL's for its tasks, else measured (``ref_episodes``)."""
    ref_expert: float | None = None
    """Expert reference return; D4RL's for its tasks, else unset unless given."""
    ref_episodes: int = 16
    """Episodes of a uniform random policy that measure ``ref_random`` when it is unknown."""
    device: str = "cpu"
    """Torch device."""
    overwrite: bool = False
    """Replace an existing file (by default it is kept, so a recipe of many datasets resumes)."""
    task_overrides: dict[str, Any] = field(default_factory=dict)
    """Task config overrides (nested mappings become ``a__b``)."""

    def __post_init__(self) -> None:
        """Reject counts and noise that cannot work, one field at a time (also when built in code,
        where no type check ran: a boolean is not a count). The command checks the rest
        (``robolearn.cli.collect.validate_collect_config``).
        """
        for name in ("episodes", "num_envs", "ref_episodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: expected an integer >= 1, got {value!r}")
        if isinstance(self.noise, bool) or not isinstance(self.noise, (int, float)) or not 0.0 <= self.noise < math.inf:
            raise ConfigError(f"noise: expected a finite number >= 0 (a fraction of the half action range), got {self.noise!r}")


RECIPE_DATASETS: tuple[str, ...] = ("random", "medium", "medium-replay", "expert", "medium-expert", "diverse")
"""The datasets a recipe can build: D4RL-style ones from trained behaviour runs, and for the
``PointMaze-*`` tasks ``random``, ``expert`` and ``diverse`` from the waypoint planner."""


@dataclass
class RecipeConfig:
    """``robolearn data build``: D4RL-style datasets from behaviour policies trained here."""

    root: str = "data/d4rl_style"
    """Output folder: ``<root>/<task>/<dataset>.h5`` and the behaviour runs in ``<root>/<task>/runs``."""
    tasks: list[str] = field(default_factory=lambda: ["Hopper", "HalfCheetah", "Walker2d"])
    """Registered task ids."""
    algo: str = "sac"
    """Off-policy algorithm of the behaviour runs (its replay buffer is the medium-replay data)."""
    expert_env_steps: int = 1_000_000
    """Training budget of the expert run."""
    medium_env_steps: int = 150_000
    """Training budget of the medium run."""
    transitions: int = 200_000
    """Transitions per rollout dataset (whole episodes, at least this many)."""
    num_envs: int = 8
    """Collection worlds."""
    expert_noise: float = 0.1
    """Gaussian action noise of the medium and expert rollouts, as a fraction of the half range."""
    seed: int = 0
    """Seed of the runs and the rollouts."""
    train_overrides: list[str] = field(default_factory=list)
    """Extra ``robolearn train`` overrides for both behaviour runs."""
    datasets: list[str] = field(default_factory=lambda: list(RECIPE_DATASETS))
    """Which datasets to build."""

    def __post_init__(self) -> None:
        """Reject unknown datasets and algorithms without a replay buffer."""
        bad = [d for d in self.datasets if d not in RECIPE_DATASETS]
        if bad:
            raise ConfigError(f"datasets: unknown {bad}; valid choices: {', '.join(RECIPE_DATASETS)}")
        if self.algo != "sac":
            raise ConfigError(f"algo: the recipe needs an off-policy learner with a replay buffer; valid choices: sac, got {self.algo!r}")
        for key, least in (("expert_env_steps", 1), ("medium_env_steps", 1), ("transitions", 1), ("num_envs", 1), ("seed", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{key}: expected an integer >= {least}, got {value!r}")
        noise = self.expert_noise
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0.0 <= noise < math.inf:
            raise ConfigError(f"expert_noise: expected a finite number >= 0, got {noise!r}")


INTEGRATORS: dict[str, int] = {"Euler": 0, "RK4": 1, "implicit": 2, "implicitfast": 3}
"""MuJoCo integrators by MJCF name (``mjtIntegrator``)."""


@dataclass
class Perturbation:
    """One shifted-dynamics condition of the sim2sim gate; unset fields leave the task as trained."""

    timestep_scale: float = 1.0
    """Physics timestep times this; the decimation is divided by it so the control rate holds."""
    integrator: str | None = None
    """Another integrator: one of :data:`INTEGRATORS`."""
    fields: dict[str, float] = field(default_factory=dict)
    """Model field (friendly or MuJoCo name) to a factor applied to every element (``mass: 1.3``)."""
    action_delay: int = 0
    """Control steps between the policy's action and its application (added latency)."""
    obs_delay: int = 0
    """Control steps by which the policy's observations are stale (added latency)."""
    min_ratio: float | None = None
    """Pass if the mean return is at least this times the nominal one (default: the gate's)."""
    min_return: float | None = None
    """Pass if the mean return is at least this (instead of a ratio)."""

    def __post_init__(self) -> None:
        """Reject values that cannot describe a condition (types and ranges; whether a field factor
        suits the task's model is checked against the model, before any rollout, by the gate).
        """

        def real(value: Any) -> bool:  # a bool is an int to Python: refused, not coerced
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

        if not (real(self.timestep_scale) and self.timestep_scale > 0):
            raise ConfigError(f"timestep_scale: expected a finite positive factor, got {self.timestep_scale!r}")
        if self.integrator is not None and self.integrator not in INTEGRATORS:
            raise ConfigError(f"integrator: unknown {self.integrator!r}; valid choices: {', '.join(INTEGRATORS)}")
        if not isinstance(self.fields, dict):
            raise ConfigError(f"fields: expected a mapping of model field to factor, got {self.fields!r}")
        for name, factor in self.fields.items():
            if not real(factor):
                raise ConfigError(f"fields.{name}: expected a finite number, got {factor!r}")
        for key in ("action_delay", "obs_delay"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{key}: expected an integer >= 0 control steps, got {value!r}")
        if self.min_ratio is not None and not (real(self.min_ratio) and self.min_ratio > 0):
            raise ConfigError(f"min_ratio: expected a finite number > 0, got {self.min_ratio!r}")
        if self.min_return is not None and not real(self.min_return):
            raise ConfigError(f"min_return: expected a finite number, got {self.min_return!r}")


@dataclass
class Sim2SimConfig:
    """``robolearn sim2sim``: evaluate a run's policy under perturbed physics against thresholds."""

    run: str
    """The run directory."""
    run_dir: str | None = None
    """Alias of ``run``."""
    perturbations: dict[str, Any] = field(default_factory=dict)
    """Condition name to :class:`Perturbation` fields."""
    only: list[str] | None = None
    """Evaluate only these perturbations (default: all)."""
    min_ratio: float = 0.7
    """Default pass threshold: mean return >= this times the nominal mean return."""
    episodes: int = 16
    """Episodes per condition."""
    num_envs: int = 8
    """Worlds stepped together."""
    seed: int = 4242
    """Seed of the evaluation worlds (the same for every condition)."""
    device: str = "cpu"
    """Torch device."""
    out: str | None = None
    """Where the JSON report goes; ``None``: ``<run>/sim2sim.json``."""

    def __post_init__(self) -> None:
        """Reject counts and thresholds that cannot work, before anything is loaded or run."""
        for key, least in (("episodes", 1), ("num_envs", 1), ("seed", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{key}: expected an integer >= {least}, got {value!r}")
        ratio = self.min_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < math.inf:
            raise ConfigError(f"min_ratio: expected a finite number > 0, got {ratio!r}")

    def conditions(self) -> dict[str, Perturbation]:
        """The perturbations as dataclasses, checked (unknown keys and bad values named)."""
        names = list(self.perturbations) if self.only is None else list(self.only)
        unknown = [n for n in names if n not in self.perturbations]
        if unknown:
            raise ConfigError(f"only: unknown perturbation(s) {unknown}; defined: {', '.join(self.perturbations)}")
        out: dict[str, Perturbation] = {}
        for n in names:
            where = f"perturbations.{n}"
            try:
                out[n] = to_dataclass(Perturbation, self.perturbations[n] or {}, where)
            except ConfigError as exc:  # a value Perturbation refuses is named without its place: add it
                message = str(exc)
                raise ConfigError(message if message.startswith(where) else f"{where}.{message}") from None
        return out


def plain(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain dicts and lists, interpolations resolved."""
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}


__all__ = [
    "ALGOS",
    "INJECTED",
    "OFFLINE_ALGOS",
    "CollectConfig",
    "ConfigError",
    "EvalConfig",
    "ExportConfig",
    "Perturbation",
    "RecipeConfig",
    "Sim2SimConfig",
    "TrainConfig",
    "plain",
    "read_train_config",
    "saved_config",
    "to_dataclass",
    "train_config_from_dict",
    "train_config_to_dict",
]
