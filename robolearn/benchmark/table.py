"""Benchmark tables: ``configs/benchmark/<name>.yaml`` read into frozen dataclasses and checked whole.

:func:`load_table` reads a table by name (``smoke`` is ``configs/benchmark/smoke.yaml`` of the
installed ``robolearn.configs``) or by path and checks everything a run needs before any run starts:
unknown keys (named, with the valid ones), types and ranges, unique entry ids, known algorithms and
libraries, registered tasks, existing experiment files whose task and algorithm agree with the entry.
Every error is a :class:`TableError` naming the file, the field, the value and what was expected.

The spec (issue 17's contract)::

    name: mujoco-cpu
    seeds: [0, 1, 2]
    libs: [robolearn, sb3_default, sb3_zoo]
    eval_episodes: 10
    entries:
      - id: hopper_ppo
        task: Hopper
        algo: ppo
        experiment: hopper_ppo
        env_steps: 1000000
        eval_every: 50000
        thresholds: [1000, 2500]
        sb3: {n_envs: 1, default: {}, zoo: {source: ..., n_envs: 1, normalize: true, kwargs: {...}}}
        zoo_reference: {return: 2410.1, env_steps: 1000000, source: ...}

:meth:`Table.to_dict` gives the same mapping back (what ``<out>/table.json`` holds) and
:func:`table_from_dict` reads it again.

The benchmark also reads robolearn's recipes (``configs/experiment/<name>.yaml``) without Hydra (this
package may not import it): :func:`read_recipe` (the file as written), :func:`recipe_algo` (the
algorithm it picks) and :func:`recipe_task_overrides` (the MDP the SB3 side must train, as Hydra
composes it). Numbers are read as OmegaConf reads them (``3e-4`` and ``1e6`` are floats, not the
strings of PyYAML's YAML 1.1 rules). Whether a finished run is stale is decided against the whole
config Hydra composes (:mod:`robolearn.benchmark.schedule`), not here.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from robolearn.utils.config import ConfigError, to_dataclass

ALGOS: tuple[str, ...] = ("ppo", "sac")
"""Algorithms a table entry may name (both libraries have them)."""
LIBS: tuple[str, ...] = ("robolearn", "sb3_default", "sb3_zoo")
"""Library ids: robolearn's recipe, SB3 at its defaults, SB3 with the RL Zoo's hyperparameters."""
SB3_LIBS: tuple[str, ...] = ("sb3_default", "sb3_zoo")
"""The libraries run by :mod:`robolearn.benchmark.sb3_run`."""
ID_PATTERN = re.compile(r"[a-z0-9_]+")
"""What an entry id may be: it names a folder of the output directory."""


class TableError(ConfigError):
    """A benchmark table that cannot run; the message names the file, the field, the value and what was expected."""


@dataclasses.dataclass(frozen=True)
class ZooHyperparams:
    """The RL Zoo's hyperparameters for an entry's task (the ``sb3_zoo`` library's runs)."""

    source: str
    """Where they come from: file, task and commit or URL of rl-baselines3-zoo."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """SB3 constructor kwargs; the Zoo's spelling (``lin_3e-4``, ``policy_kwargs`` strings) is allowed."""
    n_envs: int = 1
    """SB3's training envs (the Zoo's ``n_envs``): Gymnasium envs or adapter worlds (:attr:`SB3Side.gymnasium`)."""
    normalize: bool = False
    """Wrap the env in VecNormalize, as the Zoo does for this task."""

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise ValueError("source: expected where the hyperparameters come from (file, task, commit/URL), got ''")
        if self.n_envs < 1:
            raise ValueError(f"n_envs: expected an integer >= 1, got {self.n_envs}")


@dataclasses.dataclass(frozen=True)
class SB3Side:
    """How an entry runs on Stable-Baselines3."""

    n_envs: int = 1
    """SB3's training envs at its defaults (SB3's own default is one env): Gymnasium envs or adapter worlds."""
    default: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Kwargs over SB3's defaults for the ``sb3_default`` runs (empty: SB3's defaults exactly)."""
    zoo: ZooHyperparams | None = None
    """The Zoo's hyperparameters, or ``None`` when the Zoo has none for the task (no ``sb3_zoo`` runs)."""
    gymnasium: str | None = None
    """The Gymnasium env both SB3 configurations train on (``DummyVecEnv`` of ``n_envs``, SB3's usual
    and fastest setup) where the entry's task reproduces it step for step
    (``robolearn.envs.registry.GYMNASIUM_TWINS``) and the recipe overrides nothing of the task;
    ``None``: they train through the SB3 adapter over robolearn's task. Evaluation is robolearn's
    either way (the same MDP)."""

    def __post_init__(self) -> None:
        if self.n_envs < 1:
            raise ValueError(f"n_envs: expected an integer >= 1, got {self.n_envs}")
        if self.gymnasium is not None and (not isinstance(self.gymnasium, str) or not self.gymnasium.strip()):
            raise ValueError(f"gymnasium: expected a Gymnasium env id (e.g. 'Hopper-v5') or null, got {self.gymnasium!r}")


@dataclasses.dataclass(frozen=True)
class ZooReference:
    """The RL Zoo's published result for the matching Gymnasium task, quoted on the results page."""

    mean_return: float
    """The published mean return (``return`` in the YAML)."""
    env_steps: int
    """The budget it was reached at."""
    source: str
    """Where it is published."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One row of a table: a task and algorithm, trained by each library for the same budget."""

    id: str
    """Unique within the table, ``[a-z0-9_]+``: runs live under ``<out>/<id>/``."""
    task: str
    """A registered task id."""
    algo: str
    """``ppo`` or ``sac``."""
    experiment: str
    """robolearn's recipe, ``configs/experiment/<experiment>.yaml``."""
    env_steps: int
    """Budget of every library's runs (robolearn gets ``total_env_steps=<env_steps>``)."""
    eval_every: int
    """SB3 side: env steps between evaluations (the recipe's cadence)."""
    thresholds: tuple[float, ...] = ()
    """Eval returns; the report gives the env steps and seconds to the first evaluation at or above each."""
    sb3: SB3Side = dataclasses.field(default_factory=SB3Side)
    """The SB3 side of the entry."""
    zoo_reference: ZooReference | None = None
    """The Zoo's published return, or ``None``."""

    def __post_init__(self) -> None:
        if not ID_PATTERN.fullmatch(self.id):
            raise ValueError(f"id: expected lower-case letters, digits and '_' (it names a folder), got {self.id!r}")
        if self.algo not in ALGOS:
            raise ValueError(f"algo: expected one of {', '.join(ALGOS)}, got {self.algo!r}")
        if not self.experiment or "/" in self.experiment:
            raise ValueError(f"experiment: expected the name of a configs/experiment/<name>.yaml, got {self.experiment!r}")
        if self.env_steps < 1:
            raise ValueError(f"env_steps: expected an integer >= 1, got {self.env_steps}")
        if self.eval_every < 1:
            raise ValueError(f"eval_every: expected an integer >= 1, got {self.eval_every}")
        bad = [t for t in self.thresholds if not math.isfinite(t)]
        if bad:
            raise ValueError(f"thresholds: expected finite numbers, got {bad[0]!r}")

    def libs(self, libs: Sequence[str]) -> tuple[str, ...]:
        """The libraries of ``libs`` this entry runs with (``sb3_zoo`` only where the Zoo has hyperparameters)."""
        return tuple(lib for lib in libs if lib != "sb3_zoo" or self.sb3.zoo is not None)

    def to_dict(self) -> dict[str, Any]:
        """The entry as its YAML mapping (``zoo_reference.return`` spelt as in the table)."""
        out = dataclasses.asdict(self)
        out["thresholds"] = list(self.thresholds)
        if self.zoo_reference is not None:
            ref = out["zoo_reference"]
            out["zoo_reference"] = {"return": ref["mean_return"], "env_steps": ref["env_steps"], "source": ref["source"]}
        return out


@dataclasses.dataclass(frozen=True)
class Table:
    """A benchmark table: entries run by each library for each seed."""

    name: str
    """The table's name (the results page's heading)."""
    seeds: tuple[int, ...]
    """Seeds of every (entry, library)."""
    entries: tuple[Entry, ...]
    """The rows, in the order they run and are reported."""
    libs: tuple[str, ...] = LIBS
    """Libraries compared, from :data:`LIBS`."""
    eval_episodes: int = 10
    """SB3 side: evaluation worlds, one episode each (like robolearn's ``eval_num_envs``)."""
    source: str = ""
    """The file the table was read from (not part of its content)."""

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ValueError("name: expected the table's name, got ''")
        if not self.seeds:
            raise ValueError("seeds: expected at least one seed, got []")
        if any(s < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: expected distinct integers >= 0, got {list(self.seeds)}")
        if not self.libs:
            raise ValueError(f"libs: expected at least one of {', '.join(LIBS)}, got []")
        unknown = [lib for lib in self.libs if lib not in LIBS]
        if unknown:
            raise ValueError(f"libs: expected names from {', '.join(LIBS)}, got {unknown[0]!r}")
        if len(set(self.libs)) != len(self.libs):
            raise ValueError(f"libs: expected each library once, got {list(self.libs)}")
        if self.eval_episodes < 1:
            raise ValueError(f"eval_episodes: expected an integer >= 1, got {self.eval_episodes}")
        if not self.entries:
            raise ValueError("entries: expected at least one entry, got []")
        seen: set[str] = set()
        for i, entry in enumerate(self.entries):
            if entry.id in seen:
                raise ValueError(f"entries[{i}].id: expected a unique id, got {entry.id!r} a second time")
            seen.add(entry.id)

    def entry(self, entry_id: str) -> Entry:
        """The entry with id ``entry_id``.

        Raises:
            KeyError: no such entry (the known ids are named).
        """
        for entry in self.entries:
            if entry.id == entry_id:
                return entry
        raise KeyError(f"no entry {entry_id!r} in table {self.name!r}; its entries: {', '.join(self.ids)}")

    @property
    def ids(self) -> tuple[str, ...]:
        """The entry ids, in table order."""
        return tuple(e.id for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        """The table as its YAML mapping (what ``<out>/table.json`` holds); :func:`table_from_dict` reads it back."""
        return {
            "name": self.name,
            "seeds": list(self.seeds),
            "libs": list(self.libs),
            "eval_episodes": self.eval_episodes,
            "entries": [e.to_dict() for e in self.entries],
        }


TOP_KEYS = tuple(f.name for f in dataclasses.fields(Table) if f.name != "source")
"""Keys of a table file."""


def tables_dir() -> Path:
    """``configs/benchmark`` of the installed ``robolearn.configs`` package."""
    return Path(str(importlib.resources.files("robolearn.configs"))) / "benchmark"


def experiments_dir() -> Path:
    """``configs/experiment`` of the installed ``robolearn.configs`` package (robolearn's recipes)."""
    return Path(str(importlib.resources.files("robolearn.configs"))) / "experiment"


def table_names() -> list[str]:
    """The tables shipped in ``configs/benchmark``."""
    return sorted(p.stem for p in tables_dir().glob("*.yaml"))


def resolve_table_path(name_or_path: str | Path) -> Path:
    """The file of a table given by name (``smoke``) or path (``my/table.yaml``).

    Raises:
        TableError: neither a shipped table nor an existing file (the shipped names are listed).
    """
    text = str(name_or_path)
    path = Path(text)
    if path.is_file():
        return path
    if "/" not in text and not text.endswith((".yaml", ".yml")):
        shipped = tables_dir() / f"{text}.yaml"
        if shipped.is_file():
            return shipped
    raise TableError(
        f"table={text}: expected the name of a table in {tables_dir()} ({', '.join(table_names()) or 'none'}) "
        "or the path of a table file"
    )


def load_table(name_or_path: str | Path, check_tasks: bool = True) -> Table:
    """Read and check a benchmark table by name or path (see the module doc).

    Args:
        name_or_path: a shipped table's name (``configs/benchmark/<name>.yaml``) or a file's path.
        check_tasks: look every entry's task up in the task registry (loads the task families).

    Raises:
        TableError: the file is missing or unreadable, or any field is wrong (named, with its value
            and what was expected).
    """
    path = resolve_table_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TableError(f"{path}: cannot be read as YAML ({exc})") from None
    return table_from_dict(data, source=str(path), check_files=True, check_tasks=check_tasks)


def table_from_dict(
    data: Any, source: str = "<table>", check_files: bool = True, check_tasks: bool = False
) -> Table:
    """A :class:`Table` from its mapping (a table file's content, or ``<out>/table.json``).

    Args:
        data: the mapping.
        source: where it comes from (prefixes every message; kept as :attr:`Table.source`).
        check_files: check that each entry's experiment file exists and names the entry's task and algorithm.
        check_tasks: check that each entry's task is registered.

    Raises:
        TableError: a field is wrong (``<source>: <field>: expected ..., got ...``).
    """
    try:
        table = _parse(data)
        if check_files:
            for i, entry in enumerate(table.entries):
                _check_experiment(entry, f"entries[{i}] ({entry.id})")
        if check_tasks:
            _check_tasks(table)
    except ConfigError as exc:
        raise TableError(f"{source}: {exc}") from None
    return dataclasses.replace(table, source=source)


def _parse(data: Any) -> Table:
    """The table's fields checked by type (:func:`to_dataclass`) and range (the ``__post_init__`` checks)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a mapping with keys {', '.join(TOP_KEYS)}, got {type(data).__name__}")
    raw = dict(data)
    entries = raw.pop("entries", None)
    if not isinstance(entries, list):
        raise ConfigError(f"entries: expected a list of entries, got {entries!r}")
    parsed = tuple(_parse_entry(e, i) for i, e in enumerate(entries))
    for key in ("seeds", "libs"):
        if key in raw and not isinstance(raw[key], list):  # a single value would pass as a str's characters
            raise ConfigError(f"{key}: expected a list, got {raw[key]!r}")
    if "source" in raw:
        raise ConfigError(f"source: not a table field; valid fields: {', '.join(TOP_KEYS)}")
    return to_dataclass(Table, {**raw, "entries": parsed})


def _parse_entry(data: Any, index: int) -> Entry:
    """Entry ``index`` of the table, its ``zoo_reference`` spelt with ``return`` as in the spec."""
    where = f"entries[{index}]"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping (id, task, algo, experiment, ...), got {data!r}")
    raw = dict(data)
    if isinstance(raw.get("id"), str):
        where += f" ({raw['id']})"
    if "thresholds" in raw and not isinstance(raw["thresholds"], list):
        raise ConfigError(f"{where}.thresholds: expected a list of numbers, got {raw['thresholds']!r}")
    sb3 = raw.get("sb3")
    if isinstance(sb3, Mapping) and isinstance(sb3.get("zoo"), Mapping):
        # Converted here: behind ``ZooHyperparams | None`` a missing or wrong field would only read
        # "expected ZooHyperparams | None".
        raw["sb3"] = {**sb3, "zoo": to_dataclass(ZooHyperparams, sb3["zoo"], f"{where}.sb3.zoo")}
    if "zoo_reference" in raw:
        raw["zoo_reference"] = _parse_reference(raw["zoo_reference"], f"{where}.zoo_reference")
    return to_dataclass(Entry, raw, where)


def _parse_reference(data: Any, where: str) -> ZooReference | None:
    """A ``zoo_reference`` block (``return``, ``env_steps``, ``source``) or ``None``."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping (return, env_steps, source) or null, got {data!r}")
    keys = ("return", "env_steps", "source")
    unknown = [k for k in data if k not in keys]
    if unknown:
        raise ConfigError(f"{where}: field {unknown[0]!r} is not in a Zoo reference; valid fields: {', '.join(keys)}")
    missing = [k for k in keys if k not in data]
    if missing:
        raise ConfigError(f"{where}: missing field(s) {', '.join(missing)}")
    value = data["return"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}.return: expected a number, got {value!r}")
    steps = data["env_steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"{where}.env_steps: expected an integer >= 1, got {steps!r}")
    if not isinstance(data["source"], str) or not data["source"].strip():
        raise ConfigError(f"{where}.source: expected where the return is published, got {data['source']!r}")
    return ZooReference(float(value), steps, data["source"])


def _check_experiment(entry: Entry, where: str) -> None:
    """The entry's experiment file exists and, where it says, trains the entry's task with its algorithm."""
    path = experiments_dir() / f"{entry.experiment}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in experiments_dir().glob("*.yaml")))
        raise ConfigError(f"{where}.experiment: expected a recipe in {experiments_dir()}, got {entry.experiment!r} "
                          f"({path.name} does not exist; known: {known})")
    try:
        recipe = read_recipe(entry.experiment)
    except TableError as exc:
        raise ConfigError(f"{where}.experiment: {exc}") from None
    # A mismatch here would compare robolearn on another task or algorithm than the SB3 side.
    task = recipe.get("task")
    if task is not None and task != entry.task:
        raise ConfigError(f"{where}.task: expected the task of experiment {entry.experiment} ({task!r}), got {entry.task!r}")
    algo = recipe_algo(recipe)
    if algo is not None and algo != entry.algo:
        raise ConfigError(f"{where}.algo: expected the algorithm of experiment {entry.experiment} ({algo!r}), got {entry.algo!r}")


PACKAGE_HEADER = re.compile(r"^#\s*@package\s+(\S+)\s*$")
"""A Hydra package header line (``# @package _global_``)."""


class RecipeLoader(yaml.SafeLoader):
    """YAML read as OmegaConf (so Hydra) reads a recipe: ``3e-4``, ``1e6`` and ``-2E+2`` are floats.

    PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent, so it reads ``3e-4``
    as the string ``'3e-4'``; ``robolearn train`` gets ``0.0003`` from the same line.
    """


# Tried after SafeLoader's own int and float patterns (implicit resolvers are tried in order).
RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_recipe(experiment: str) -> dict[str, Any]:
    """``configs/experiment/<experiment>.yaml`` as written, read as Hydra reads it (:class:`RecipeLoader`:
    ``3e-4`` is a float); an empty file is ``{}``. No defaults are composed and no package applied.

    Raises:
        TableError: the file is missing, cannot be read as YAML, or is not a mapping.
    """
    return _load_recipe(experiment)[0]


def _load_recipe(experiment: str) -> tuple[dict[str, Any], str, str]:
    """:func:`read_recipe`, the file's text and the recipe's name for messages."""
    path = experiments_dir() / f"{experiment}.yaml"
    where = f"experiment {experiment} ({path})"
    try:
        text = path.read_text()
        recipe = yaml.load(text, Loader=RecipeLoader) or {}  # noqa: S506 - a SafeLoader subclass
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TableError(f"{where}: cannot be read as YAML ({exc})") from None
    if not isinstance(recipe, Mapping):
        raise TableError(f"{where}: expected a mapping of config keys, got {type(recipe).__name__}")
    return dict(recipe), text, where


def _read_recipe(experiment: str) -> tuple[Mapping[str, Any], str, str]:
    """A recipe's mapping, its Hydra package (``_global_`` or ``experiment``) and its name for messages.

    Raises:
        TableError: the recipe is missing or unreadable, names another package, or pulls in another recipe.
    """
    recipe, text, where = _load_recipe(experiment)
    package = "experiment"  # Hydra's default package of a config group's file
    for line in text.splitlines():
        if not line.startswith("#"):
            break  # the header is the leading comment block
        match = PACKAGE_HEADER.match(line.strip())
        if match:
            package = match.group(1)
    if package not in ("_global_", "experiment"):
        raise TableError(f"{where}: expected '# @package _global_' or no package header, got {package!r}")
    for item in recipe.get("defaults") or []:
        names = [str(k) for k in item] if isinstance(item, Mapping) else [str(item)]
        if any("experiment" in name for name in names):
            raise TableError(f"{where}: defaults entry {item!r} pulls in another recipe; the benchmark reads "
                             "the recipe file itself (inline them)")
    return recipe, package, where


def recipe_task_overrides(experiment: str) -> dict[str, Any]:
    """The ``task_overrides`` a recipe gives ``robolearn train`` (``{}`` when it sets none).

    Read from ``configs/experiment/<experiment>.yaml`` as Hydra composes it, without Hydra (this
    package may not import it): a ``# @package _global_`` file sets the root's ``task_overrides``;
    a file without that header lands under ``experiment.`` and sets none. What this reader cannot
    follow (another package, a defaults entry pulling in more recipes, an interpolation) is refused,
    so the SB3 side never trains another MDP than robolearn's by accident.

    Raises:
        TableError: the recipe is missing or unreadable, or uses what the reader cannot follow.
    """
    recipe, package, where = _read_recipe(experiment)
    overrides = recipe.get("task_overrides") if package == "_global_" else None
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise TableError(f"{where}: task_overrides: expected a mapping of task config fields, got {overrides!r}")
    if "${" in json.dumps(overrides, default=str):
        raise TableError(f"{where}: task_overrides: interpolations (${{...}}) are not supported here, got {overrides!r}")
    return json.loads(json.dumps(overrides))  # plain dicts, lists and scalars


def _algo_choice(item: Any) -> str | None:
    """The algorithm a ``defaults`` entry picks (``override /algo: sac``), else ``None``."""
    if isinstance(item, Mapping):
        for key, value in item.items():
            if str(key).split()[-1].strip("/") == "algo":
                return str(value)
    return None


def recipe_algo(recipe: Mapping[str, Any]) -> str | None:
    """The algorithm a recipe's mapping (:func:`read_recipe`) picks in its ``defaults`` list
    (``- override /algo: sac``, ``- algo: ppo``); ``None`` when it picks none (``robolearn train``'s
    default algorithm then applies).
    """
    for item in recipe.get("defaults") or []:
        algo = _algo_choice(item)
        if algo is not None:
            return algo
    return None


def _check_tasks(table: Table) -> None:
    """Every entry's task is registered (the task families load here, on first use), and an SB3 side
    on Gymnasium names the env the task reproduces.
    """
    from robolearn.envs.registry import GYMNASIUM_TWINS, list_tasks

    known = list_tasks()
    for i, entry in enumerate(table.entries):
        if entry.task not in known:
            raise ConfigError(
                f"entries[{i}] ({entry.id}).task: expected a registered task ({', '.join(known)}), got {entry.task!r}"
            )
        gym_id = entry.sb3.gymnasium
        if gym_id is not None and gym_id != GYMNASIUM_TWINS.get(entry.task):
            twin = GYMNASIUM_TWINS.get(entry.task)
            expected = (f"{twin!r} (the Gymnasium env {entry.task} reproduces) or null" if twin else
                        f"null ({entry.task} reproduces no Gymnasium env; tasks that do: "
                        f"{', '.join(f'{k} -> {v}' for k, v in sorted(GYMNASIUM_TWINS.items()))})")
            raise ConfigError(f"entries[{i}] ({entry.id}).sb3.gymnasium: expected {expected}, got {gym_id!r}")


PROFILE_MARGIN = 4000
"""Env steps a profile run of an off-policy entry takes past twice its longest warm-up (so the second
half of the run, which the report's profile reads, is all updating)."""
PROFILE_ROWS = 8
"""Evaluations (SB3's ``metrics.csv`` rows) per profile run: rows to take the second half from."""


def profile_table(table: Table, fraction: float, warmups: Mapping[str, int] | None = None) -> Table:
    """The short table ``robolearn benchmark profile`` runs: every entry at ``fraction`` of its budget
    (at least twice the entry's longest warm-up plus :data:`PROFILE_MARGIN` env steps, at most its
    budget), evaluated :data:`PROFILE_ROWS` times, named ``<name>-profile``. The report's profile
    reads the second half of each run, steady state past any warm-up.

    Args:
        table: the table to profile.
        fraction: the part of each budget to run, in (0, 1].
        warmups: entry id -> the longest ``learning_starts`` of its libraries (off-policy entries);
            absent: none.

    Raises:
        TableError: ``fraction`` outside (0, 1].
    """
    if not (0.0 < fraction <= 1.0) or not math.isfinite(fraction):
        raise TableError(f"fraction: expected a number in (0, 1], got {fraction!r}")
    entries = []
    for entry in table.entries:
        warmup = int((warmups or {}).get(entry.id, 0))
        wanted = math.ceil(fraction * entry.env_steps)
        if warmup > 0:
            wanted = max(wanted, 2 * warmup + PROFILE_MARGIN)
        steps = min(entry.env_steps, wanted)
        entries.append(dataclasses.replace(entry, env_steps=steps, eval_every=max(1, steps // PROFILE_ROWS)))
    return dataclasses.replace(table, name=f"{table.name}-profile", entries=tuple(entries))


__all__ = [
    "ALGOS",
    "LIBS",
    "SB3_LIBS",
    "Entry",
    "SB3Side",
    "Table",
    "TableError",
    "ZooHyperparams",
    "profile_table",
    "ZooReference",
    "RecipeLoader",
    "load_table",
    "read_recipe",
    "recipe_algo",
    "recipe_task_overrides",
    "resolve_table_path",
    "table_from_dict",
    "table_names",
]
