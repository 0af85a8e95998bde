"""Composed configuration to dataclasses, once (DESIGN.md, "Configuration").

Hydra composes ``robolearn.configs``; :func:`plain` turns the result into plain containers and the
``*_from_dict`` functions into the dataclasses every component takes. Nothing below ``cli/`` sees a
DictConfig. :func:`to_dataclass` rejects an unknown key by naming it, the dataclass, its valid
fields and the closest match, and checks each value against the field's annotation.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from robolearn.algos.bc.config import BCConfig
from robolearn.algos.cql.config import CalQLConfig, CQLConfig
from robolearn.algos.iql.config import IQLConfig
from robolearn.algos.ppo.config import PPOConfig
from robolearn.algos.sac.config import SACConfig
from robolearn.algos.td3bc.config import TD3BCConfig
from robolearn.runners import RunnerConfig

T = TypeVar("T")

ALGOS: dict[str, type] = {
    "ppo": PPOConfig,
    "sac": SACConfig,
    "bc": BCConfig,
    "td3bc": TD3BCConfig,
    "iql": IQLConfig,
    "cql": CQLConfig,
    "calql": CalQLConfig,
}
"""Algorithm names (``algo=<name>``) and their config dataclasses."""
OFFLINE_ALGOS: frozenset[str] = frozenset({"bc", "td3bc", "iql", "cql", "calql"})
"""Algorithms that learn from a dataset (``dataset=<file>``, ``total_grad_steps=N``)."""
AlgoConfig = PPOConfig | SACConfig | BCConfig | TD3BCConfig | IQLConfig | CQLConfig | CalQLConfig
"""Any algorithm's config."""

INJECTED: dict[str, dict[str, str]] = {
    "algo": {"seed": "seed"},
    "runner": {"total_env_steps": "total_env_steps"},
}
"""Section fields filled from a top-level key (section -> field -> top-level key)."""


class ConfigError(ValueError):
    """A configuration value or key that cannot work; the message names the field and the choices."""


@dataclass
class TrainConfig:
    """One training run: task, sizes, seeds, and the algorithm's and runner's configs."""

    task: str
    """Registered task id."""
    algo: AlgoConfig
    """The algorithm's config; its type says which algorithm."""
    runner: RunnerConfig
    """The training loop's config."""
    task_overrides: dict[str, Any] = field(default_factory=dict)
    """Task config overrides passed to ``robolearn.make`` (nested mappings become ``a__b`` keys)."""
    seed: int = 0
    """Seed of the training env, network init and algorithm generators."""
    num_envs: int = 64
    """Training worlds."""
    eval_num_envs: int = 8
    """Evaluation worlds; 0 disables evaluation."""
    total_env_steps: int = 1_000_000
    """Environment steps of the run."""
    device: str = "cpu"
    """Torch device of envs and learner."""
    backend: str = "mujoco"
    """Simulation backend."""
    run_dir: str = "runs"
    """Where the run is written."""
    resume: str | None = None
    """A run directory to continue from its latest checkpoint."""
    dataset: str | None = None
    """Offline algorithms: the dataset file (robolearn or D4RL HDF5) or ``minari:<dataset id>``."""
    total_grad_steps: int = 1_000_000
    """Offline algorithms: gradient steps of the run."""
    normalize_obs: bool = True
    """Offline algorithms: normalise observations with the dataset's mean and std (as CORL)."""

    @property
    def algo_name(self) -> str:
        """Key of :data:`ALGOS` that names :attr:`algo`'s type (the most derived match)."""
        return next(name for name, cls in ALGOS.items() if type(self.algo) is cls)

    @property
    def offline(self) -> bool:
        """Whether the algorithm learns from :attr:`dataset`."""
        return self.algo_name in OFFLINE_ALGOS


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

    def __post_init__(self) -> None:
        """Reject an unknown format, listing the valid ones."""
        if self.format not in EXPORT_FORMATS:
            raise ConfigError(f"format: unknown {self.format!r}; valid choices: {', '.join(EXPORT_FORMATS)}")


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
        """Reject counts and noise that cannot work."""
        if self.episodes < 1 or self.num_envs < 1 or self.ref_episodes < 1:
            raise ConfigError(
                f"episodes, num_envs and ref_episodes must be >= 1, got {self.episodes}, {self.num_envs}, {self.ref_episodes}"
            )
        if self.noise < 0:
            raise ConfigError(f"noise: expected >= 0, got {self.noise}")


RECIPE_DATASETS: tuple[str, ...] = ("random", "medium", "medium-replay", "expert", "medium-expert")
"""The D4RL-style datasets a recipe can build."""


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
        for key in ("expert_env_steps", "medium_env_steps", "transitions", "num_envs"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}: expected an integer >= 1, got {getattr(self, key)}")


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
        """Reject values that cannot describe a condition."""
        if not self.timestep_scale > 0:
            raise ConfigError(f"timestep_scale: expected a positive factor, got {self.timestep_scale}")
        if self.integrator is not None and self.integrator not in INTEGRATORS:
            raise ConfigError(f"integrator: unknown {self.integrator!r}; valid choices: {', '.join(INTEGRATORS)}")
        if self.action_delay < 0 or self.obs_delay < 0:
            raise ConfigError(f"action_delay/obs_delay: expected >= 0 control steps, got {self.action_delay}/{self.obs_delay}")


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

    def conditions(self) -> dict[str, Perturbation]:
        """The perturbations as dataclasses, checked (unknown keys and bad values named)."""
        names = list(self.perturbations) if self.only is None else list(self.only)
        unknown = [n for n in names if n not in self.perturbations]
        if unknown:
            raise ConfigError(f"only: unknown perturbation(s) {unknown}; defined: {', '.join(self.perturbations)}")
        return {n: to_dataclass(Perturbation, self.perturbations[n] or {}, f"perturbations.{n}") for n in names}


def plain(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain dicts and lists, interpolations resolved."""
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}


def to_dataclass(cls: type[T], mapping: Mapping[str, Any], path: str = "") -> T:
    """Build dataclass ``cls`` from ``mapping``, checking every key and value.

    Args:
        cls: the dataclass.
        mapping: field values; missing fields keep their defaults.
        path: dotted location of ``mapping`` in the whole config, for messages (``algo``).

    Raises:
        ConfigError: an unknown key (named, with the valid fields and the closest match), a value
            of the wrong type, a missing required field, or a value ``__post_init__`` rejects.
    """
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{path or cls.__name__}: expected a mapping of {cls.__name__} fields, got {mapping!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in mapping.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{where}: field {key!r} is not in {cls.__name__}{hint}; valid fields: {', '.join(fields)}"
            )
        kwargs[key] = _convert(hints[key], value, where)
    missing = [
        n for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{path or cls.__name__}: missing required field(s) {', '.join(missing)} of {cls.__name__}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc


def _convert(annotation: Any, value: Any, where: str) -> Any:
    """``value`` checked against ``annotation``; lists become tuples where a tuple is expected."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(annotation):
            try:
                return _convert(option, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {_name(annotation)}, got {value!r}")
    if annotation is type(None):
        if value is None:
            return None
    elif annotation is Any:
        return value
    elif annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)):
            args = typing.get_args(annotation)
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
            if len(args) == len(value):
                return tuple(_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    elif origin is dict or annotation is dict:
        if isinstance(value, Mapping):
            return dict(value)
    elif dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):  # type: ignore[arg-type]
            return value
        if isinstance(value, Mapping):
            return to_dataclass(annotation, value, where)  # type: ignore[arg-type]
    else:
        return value  # an annotation this checker does not know: the dataclass validates
    raise ConfigError(f"{where}: expected {_name(annotation)}, got {value!r}")


def _name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def train_config_from_dict(mapping: Mapping[str, Any]) -> TrainConfig:
    """A :class:`TrainConfig` from the composed (or a run's saved ``config.json``) mapping.

    ``algo.name`` picks the algorithm's dataclass; the top-level ``seed`` and ``total_env_steps``
    fill ``algo.seed`` (where the config has one) and ``runner.total_env_steps``.
    """
    top = dict(mapping)
    algo = dict(top.pop("algo", None) or {})
    runner = dict(top.pop("runner", None) or {})
    name = algo.pop("name", "ppo")
    if name not in ALGOS:
        raise ConfigError(f"algo: unknown algorithm {name!r}; valid choices: {', '.join(ALGOS)}")
    algo_cls = ALGOS[name]
    for section, values, cls in (("algo", algo, algo_cls), ("runner", runner, RunnerConfig)):
        known = {f.name for f in dataclasses.fields(cls)}
        for key, source in INJECTED[section].items():
            if key in values:
                raise ConfigError(f"{section}.{key}: set it with the top-level {source}=")
            if key in known and source in top:
                values[key] = top[source]
    top["algo"] = to_dataclass(algo_cls, algo, "algo")
    top["runner"] = to_dataclass(RunnerConfig, runner, "runner")
    cfg = to_dataclass(TrainConfig, top)
    for key in ("num_envs", "total_env_steps", "total_grad_steps"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"{key}: expected an integer >= 1, got {getattr(cfg, key)}")
    if cfg.offline and not cfg.dataset:
        raise ConfigError(f"dataset: algo={cfg.algo_name} learns offline and needs dataset=<file>")
    if cfg.eval_num_envs < 0:
        raise ConfigError(f"eval_num_envs: expected an integer >= 0, got {cfg.eval_num_envs}")
    return cfg


def train_config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The mapping :func:`train_config_from_dict` reads back (written as the run's ``config.json``)."""
    out = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in ("algo", "runner")}
    algo = {"name": cfg.algo_name, **dataclasses.asdict(cfg.algo)}
    runner = dataclasses.asdict(cfg.runner)
    for section, values in (("algo", algo), ("runner", runner)):
        for key in INJECTED[section]:
            values.pop(key, None)
    out["algo"], out["runner"] = algo, runner
    return _lists(out)


def _lists(value: Any) -> Any:
    """Tuples as lists, recursively (JSON and OmegaConf both speak lists)."""
    if isinstance(value, Mapping):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value
