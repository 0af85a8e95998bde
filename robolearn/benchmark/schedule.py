"""Running a benchmark table: the runs, their order, their state, and their subprocesses.

Every (entry, library, seed) of a :class:`~robolearn.benchmark.table.Table` is one run with its own
run directory ``<out>/<entry id>/<lib>/seed<S>``. :func:`plan` lists them interleaved: seed-major,
then entries in table order, the libraries rotated by seed, so a slow hour of the machine (another
job, thermal throttling) falls on every library alike and no library always starts first.

:func:`run_state` reads a run directory: **done** (``summary.json`` with ``env_steps`` >= the
budget), **resume** (a checkpoint: robolearn's ``checkpoints/ckpt_*.pt``, SB3's ``sb3_checkpoint/``),
or **fresh** (nothing to keep: partial files are removed before it starts). :func:`run_benchmark`
executes the runs that are not done as subprocesses (``robolearn train`` and
``python -m robolearn.benchmark.sb3_run``), one torch/OpenMP thread each, ``jobs`` at a time, each
one's output in ``<run dir>/benchmark.log``; it appends one line per finished run to
``<out>/runs.jsonl``, with where it ran (:func:`provenance`: CPU, cores, platform, versions, the
robolearn checkout's git commit). A failed run is reported and the others go on. Ctrl-C or SIGTERM asks the
children to stop (they checkpoint); running the same command again resumes them.

``<out>/table.json`` holds the resolved table of the first run; an output folder of another table
is refused unless the new table is a compatible superset of it (same runs, more of them), so runs of
different settings never mix in one folder. ``<out>/.benchmark.lock`` keeps a second ``benchmark
run`` out of a folder while one works in it.

A done or resumable run is **stale** when what made it (its ``config.json``) is not what the table's
command would give it now (:func:`recipe_differences`): a robolearn run whose whole config differs
from what its fresh command composes now (the caller composes it and passes it in, :data:`ComposedConfig`:
``robolearn benchmark`` with Hydra; so a recipe line deleted or a default changed counts too), the keys
the benchmark sets per run (:data:`BENCHMARK_KEYS`) and those that do not change training
(:data:`NOT_TRAINING_KEYS`) aside; an SB3 run whose kwargs, ``n_envs``, ``normalize``, task
overrides or training env (``gymnasium``: Gymnasium's twin of the task, or the adapter) have changed, or one with a ``lin_<x>`` schedule whose budget has changed (SB3's linear
schedules decay over the budget a run starts with: resumed to a raised one, they jump); so is a
robolearn run whose recipe anneals PPO's learning rate (``algo.schedule: linear``) and whose budget
has changed. robolearn's other PPO and SAC recipes have no schedule tied to ``total_env_steps``, so
their runs resume to a raised budget. Skipped or resumed, a stale run would put two recipes on one results page:
:func:`run_benchmark` checks every run of the table and refuses it when a selected run is stale,
listing each and its differences, unless ``rerun_stale`` is set; then each stale run's folder is
renamed ``seed<S>.stale-<UTC time>`` (never deleted; the report reads only ``seed<S>``) and the run
starts fresh. A stale run outside the selection is left as it is, with a warning (the report leaves
it out). A done or resumable run without a readable ``config.json`` (its recipe is unknown) is kept,
with a warning. A run that finished short of a raised budget and has no checkpoint to resume from is
set aside as ``seed<S>.short-<UTC time>`` before it starts again: a finished result is never deleted.
Nor is one whose ``summary.json`` cannot be read (not JSON, or without ``env_steps``: a write cut
short) and that has no checkpoint: set aside as ``seed<S>.unreadable-<UTC time>``, then run fresh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import enum
import json
import logging
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import IO, Any

from robolearn.benchmark.table import (
    SB3_LIBS,
    Entry,
    Table,
    TableError,
    recipe_task_overrides,
    table_from_dict,
)
from robolearn.utils.config import ConfigError, read_json_object

log = logging.getLogger(__name__)

TABLE_FILE = "table.json"
"""The resolved table of an output folder."""
RUNS_FILE = "runs.jsonl"
"""One JSON line per finished run (entry, lib, seed, exit status, wall seconds, load average)."""
LOCK_FILE = ".benchmark.lock"
"""Held by the ``benchmark run`` working in an output folder."""
LOG_FILE = "benchmark.log"
"""A run's subprocess output, in its run directory."""
SB3_CHECKPOINT = "sb3_checkpoint"
"""Folder of an SB3 run's checkpoint (written by :mod:`robolearn.benchmark.sb3_run`)."""
STOPPED_CODES: tuple[int, ...] = (130, -signal.SIGINT, -signal.SIGKILL)
"""Exit statuses of a run stopped by the signals :class:`_Signals` forwards: 130 (robolearn after its
checkpoint; SB3's runner, which keeps its last evaluation's checkpoint), killed by SIGINT (a run interrupted
while still importing, before it can catch it), killed by SIGKILL (the third signal)."""
THREAD_ENV: dict[str, str] = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
"""Environment of every run: one thread each, so ``jobs`` runs share the cores evenly."""


class RunState(enum.Enum):
    """What a run directory holds."""

    DONE = "done"
    """Finished its budget: skipped."""
    RESUME = "resume"
    """A checkpoint to continue from."""
    FRESH = "fresh"
    """Nothing to keep: started from scratch (partial files removed first)."""


@dataclasses.dataclass(frozen=True)
class Run:
    """One (entry, library, seed) of a table and its run directory."""

    entry: Entry
    """The table entry."""
    lib: str
    """The library id (``robolearn``, ``sb3_default``, ``sb3_zoo``)."""
    seed: int
    """The seed."""
    run_dir: Path
    """``<out>/<entry id>/<lib>/seed<S>``."""

    @property
    def name(self) -> str:
        """``<entry id>/<lib>/seed<S>``, the run's name in messages."""
        return f"{self.entry.id}/{self.lib}/seed{self.seed}"


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """A finished subprocess: one line of ``runs.jsonl``."""

    entry: str
    lib: str
    seed: int
    run_dir: str
    state: str
    """The state it started from (``fresh`` or ``resume``)."""
    returncode: int
    """The subprocess's exit status (130: interrupted, after a checkpoint)."""
    wall_s: float
    """Seconds from start to exit."""
    load_before: tuple[float, ...]
    """The machine's 1, 5 and 15 minute load averages when it started."""
    load_after: tuple[float, ...]
    """The same when it ended."""
    started: str
    """UTC start time (ISO 8601)."""
    provenance: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Where it ran: ``machine``, ``versions``, ``git_commit``, ``git_dirty`` (:func:`provenance`)."""
    signalled: bool = False
    """The benchmark passed it a Ctrl-C/SIGTERM (it was asked to stop)."""

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON object."""
        out = dataclasses.asdict(self)
        out["load_before"], out["load_after"] = list(self.load_before), list(self.load_after)
        out.pop("provenance")
        out.update(json.loads(json.dumps(dict(self.provenance))))  # top-level keys of the JSON line
        return out


@dataclasses.dataclass(frozen=True)
class BenchmarkResult:
    """What :func:`run_benchmark` did."""

    planned: list[tuple[Run, RunState]]
    """Every selected run with the state it starts from (all of them for a dry run): the state it had
    before anything ran, fresh for a stale run set aside (``rerun_stale``)."""
    records: list[RunRecord]
    """The runs executed, in the order they ended."""
    interrupted: bool
    """Stopped by SIGINT/SIGTERM before every run ended."""
    stale: list[StaleRun] = dataclasses.field(default_factory=list)
    """Done or resumable runs of another recipe, set aside and rerun (``rerun_stale``; a dry run
    lists those it would set aside)."""
    unknown_recipe: list[Run] = dataclasses.field(default_factory=list)
    """Done or resumable runs without a readable ``config.json``: kept, their recipe unchecked."""
    stale_elsewhere: list[StaleRun] = dataclasses.field(default_factory=list)
    """Stale runs of the table outside the selected ones (``entries``/``libs``/``seeds``): left as
    they are, with a warning (the report leaves them out)."""
    short: list[Run] = dataclasses.field(default_factory=list)
    """Selected runs that finished short of a raised budget without a checkpoint to resume from: set
    aside (``seed<S>.short-<UTC time>``) and run fresh (a dry run lists those it would set aside)."""
    aside: dict[Path, Path] = dataclasses.field(default_factory=dict)
    """Each folder set aside (a stale, short or unreadable run's ``seed<S>``) and where it went; empty
    for a dry run."""
    unreadable: list[Run] = dataclasses.field(default_factory=list)
    """Selected runs whose ``summary.json`` cannot be read (not JSON, or no ``env_steps``) without a
    checkpoint to resume from: set aside (``seed<S>.unreadable-<UTC time>``) and run fresh (a dry run
    lists those it would set aside)."""

    @property
    def stopped(self) -> list[RunRecord]:
        """Runs the interrupt stopped (exit 130, or ended by the SIGINT/SIGKILL the benchmark forwarded):
        not failures, they resume from their last checkpoint.
        """
        # Asked to stop, a child may end with any status: one still importing (before it handles
        # SIGINT) fails its import with 1. What it ended with stays in runs.jsonl.
        return [r for r in self.records
                if self.interrupted and r.returncode != 0 and (r.signalled or r.returncode in STOPPED_CODES)]

    @property
    def failed(self) -> list[RunRecord]:
        """Runs that exited with a non-zero status, other than those the interrupt stopped."""
        stopped = {id(r) for r in self.stopped}
        return [r for r in self.records if r.returncode != 0 and id(r) not in stopped]

    @property
    def exit_status(self) -> int:
        """0 when every executed run succeeded; 130 when interrupted; 1 when a run failed."""
        if self.interrupted:
            return 130
        return 1 if self.failed else 0


Launcher = Callable[[Sequence[str], IO[bytes], Mapping[str, str]], "subprocess.Popen[bytes]"]
"""Starts a run's command with its output going to the log file and its environment; the default
is :func:`launch`. Tests wrap it to count or stand in for launches."""


# -- the runs ---------------------------------------------------------------------------------
ORDERS: tuple[str, ...] = ("seed", "entry")
"""The run orders of :func:`plan`: seed-major (the default) or entry-major."""


def plan(
    table: Table,
    out: Path,
    entries: Sequence[str] | None = None,
    libs: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    order: str = "seed",
) -> list[Run]:
    """The table's runs in execution order, optionally only some entries, libraries and seeds.

    ``order="seed"``: seed-major; within a seed, entries in table order; within an entry, the
    table's libraries rotated by the seed's position in the table (seed 0 of ``[robolearn,
    sb3_default]`` runs robolearn first, seed 1 SB3 first), so runs of the same seed and entry run
    side by side under ``jobs=2`` and neither library always has the quieter machine.
    ``order="entry"``: entry-major, each entry's runs in that same seed-major, rotated order, so an
    entry's libraries and seeds finish together: a table run over several sittings, perhaps on other
    machines, then has each entry's runs from one sitting, and its time ratios compare libraries,
    not machines.

    Raises:
        TableError: a filter names an entry, library or seed the table does not have, or ``order``
            is not one of :data:`ORDERS`.
    """
    if order not in ORDERS:
        raise TableError(f"order={order}: expected one of {', '.join(ORDERS)}, got {order!r}")
    chosen_entries = _subset("entries", entries, table.ids, table)
    chosen_libs = _subset("libs", libs, table.libs, table)
    chosen_seeds = _subset("seeds", seeds, table.seeds, table)
    runs = []
    for k, seed in enumerate(table.seeds):
        if seed not in chosen_seeds:
            continue
        shift = k % len(table.libs)
        rotated = table.libs[shift:] + table.libs[:shift]
        for entry in table.entries:
            if entry.id not in chosen_entries:
                continue
            for lib in entry.libs(rotated):
                if lib in chosen_libs:
                    runs.append(Run(entry, lib, seed, run_dir(out, entry.id, lib, seed)))
    if order == "entry":
        position = {entry_id: i for i, entry_id in enumerate(table.ids)}
        runs.sort(key=lambda run: position[run.entry.id])  # stable: seed-major within each entry
    return runs


def _subset(field: str, chosen: Sequence[Any] | None, available: Sequence[Any], table: Table) -> tuple[Any, ...]:
    """``chosen`` checked against ``available`` (all of them when ``None``)."""
    if chosen is None:
        return tuple(available)
    unknown = [c for c in chosen if c not in available]
    if unknown:
        raise TableError(
            f"{field}={','.join(map(str, chosen))}: expected {field} of table {table.name!r} "
            f"({', '.join(map(str, available))}), got {unknown[0]!r}"
        )
    return tuple(chosen)


def run_dir(out: Path, entry_id: str, lib: str, seed: int) -> Path:
    """The run directory ``<out>/<entry id>/<lib>/seed<S>``."""
    return Path(out) / entry_id / lib / f"seed{seed}"


def summary_env_steps(path: Path) -> int | None:
    """``env_steps`` of ``path/summary.json``; ``None`` if there is no readable summary."""
    try:
        data = json.loads((path / "summary.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    steps = data.get("env_steps") if isinstance(data, dict) else None
    return int(steps) if isinstance(steps, (int, float)) and not isinstance(steps, bool) else None


def has_checkpoint(run: Run) -> bool:
    """Whether the run directory holds a checkpoint its library resumes from."""
    if run.lib in SB3_LIBS:
        # sb3_run swaps its checkpoint in through ``.sb3_checkpoint.old``: a crash mid-swap leaves
        # only that one, which sb3_run puts back on resume (so it is not a fresh run's partial file).
        folders = (run.run_dir / SB3_CHECKPOINT, run.run_dir / f".{SB3_CHECKPOINT}.old")
        return any(f.is_dir() and any(f.iterdir()) for f in folders)
    return any((run.run_dir / "checkpoints").glob("ckpt_*.pt"))


def run_state(run: Run) -> RunState:
    """Done (a summary with the full budget), resume (a checkpoint) or fresh (see the module doc).

    A summary short of the budget (the table's budget was raised) with a checkpoint resumes: the
    run continues to the new budget in the same directory.
    """
    steps = summary_env_steps(run.run_dir)
    if steps is not None and steps >= run.entry.env_steps:
        return RunState.DONE
    return RunState.RESUME if has_checkpoint(run) else RunState.FRESH


def command(run: Run, table: Table, state: RunState) -> list[str]:
    """The subprocess command line of ``run`` starting from ``state`` (fresh or resume)."""
    entry = run.entry
    if run.lib == "robolearn":
        # One torch thread and one MuJoCo thread, as every SB3 run has.
        quiet = ["runner.video=false", "runner.console=false", "runner.tensorboard=false", "torch_threads=1",
                 "sim_threads=1"]
        train = [sys.executable, "-m", "robolearn.cli", "train"]
        if state is RunState.RESUME:
            # The run's config.json fixes the recipe, seed and eval worlds; only the budget and the quiet flags change.
            return [*train, f"resume={run.run_dir}", f"total_env_steps={entry.env_steps}", *quiet]
        return [
            *train, f"experiment={entry.experiment}", f"seed={run.seed}", f"run_dir={run.run_dir}",
            f"total_env_steps={entry.env_steps}",
            # As many evaluation worlds (one episode each) as the SB3 side, whatever the recipe says.
            f"eval_num_envs={table.eval_episodes}", *quiet,
        ]
    # SB3: the same command starts or resumes (sb3_run continues from <out>/sb3_checkpoint itself).
    kwargs, n_envs, normalize = _sb3_block(run)
    cmd = [
        sys.executable, "-m", "robolearn.benchmark.sb3_run",
        "--task", entry.task, "--algo", entry.algo, "--lib", run.lib, "--seed", str(run.seed),
        "--env-steps", str(entry.env_steps), "--eval-every", str(entry.eval_every),
        "--eval-episodes", str(table.eval_episodes), "--out", str(run.run_dir),
        "--kwargs", json.dumps(kwargs, sort_keys=True), "--n-envs", str(n_envs),
    ]
    # The recipe's MDP (robolearn trains the task with its recipe's task_overrides): the same on SB3's side.
    overrides = recipe_task_overrides(entry.experiment)
    if overrides:
        cmd += ["--task-overrides", json.dumps(overrides, sort_keys=True)]
    if entry.sb3.gymnasium is not None:  # trained on the Gymnasium env the task reproduces (SB3's own way)
        cmd += ["--gymnasium", entry.sb3.gymnasium]
    return [*cmd, "--normalize"] if normalize else cmd


# -- stale runs ---------------------------------------------------------------------------------
BENCHMARK_KEYS: frozenset[str] = frozenset({
    "seed", "run_dir", "resume", "total_env_steps", "eval_num_envs", "runner.video", "runner.console",
    "runner.tensorboard", "torch_threads", "sim_threads",
})
"""Settings of a robolearn run that :func:`command` gives per run, whatever the recipe says: a recipe's
value for them is not compared with the run's (see :func:`recipe_differences`)."""
NOT_TRAINING_KEYS: frozenset[str] = frozenset({
    "overwrite", "runner.overwrite", "runner.checkpoint_interval", "runner.keep_checkpoints",
})
"""Settings of a robolearn run that do not change what it learns or the returns it reports, so a run
that differs only in them is not stale: whether an existing run dir may be overwritten, how often
checkpoints are written and how many are kept (a resumed run restarts from the same state either way),
(console, TensorBoard and video output are benchmark keys already). Besides these, every key whose last part starts with ``video``
(``runner.video_size``, ``runner.video_camera``: only the rendered clip changes), in any section
(:func:`not_compared`)."""
WHOLE_KEYS: frozenset[str] = frozenset({"task_overrides", "sim_options"})
"""Mappings of a run's config compared as one value (an override removed matters as much as one changed)."""
STALE_SUFFIX = ".stale-"
"""A stale run's folder set aside is ``seed<S>.stale-<UTC yyyymmddThhmmss>`` (:func:`set_aside_all`)."""
SHORT_SUFFIX = ".short-"
"""A finished run that cannot reach a raised budget (no checkpoint to resume from) is set aside as
``seed<S>.short-<UTC yyyymmddThhmmss>``: it is not stale (its recipe may be the table's), it is a
finished result of a smaller budget, kept rather than deleted before the run starts again."""
UNREADABLE_SUFFIX = ".unreadable-"
"""A run folder whose ``summary.json`` cannot be read (not JSON, or without ``env_steps``) and that has
no checkpoint to resume from is set aside as ``seed<S>.unreadable-<UTC yyyymmddThhmmss>``: whether it
finished is unknown, so it is kept, under a name that says why, before the run starts again."""
_ASIDE_WHY: dict[str, str] = {
    STALE_SUFFIX: "stale",
    SHORT_SUFFIX: "finished short of the raised budget, without a checkpoint",
    UNREADABLE_SUFFIX: "its summary.json cannot be read, and it has no checkpoint",
}
"""Why a folder is set aside, by its suffix (the warning of :func:`set_aside_all`)."""
ComposedConfig = Callable[[Run], Mapping[str, Any]]
"""The whole ``config.json`` a robolearn run would get now from the table's fresh command (what
``robolearn train`` composes: the recipe, its defaults, the algorithm's and runner's defaults), less
the settings added to robolearn after that run was made that keep their default.
``robolearn benchmark`` passes one that composes with Hydra (:func:`robolearn.cli.benchmark.composer`):
this package may not import Hydra, so :func:`run_benchmark` and the stale check take it from their caller.
It is called only for a done or resumable robolearn run with a readable ``config.json``."""
_ABSENT = object()
"""A key a run's ``config.json`` does not have."""


@dataclasses.dataclass(frozen=True)
class Difference:
    """One setting of a run that is not what the table's command would give it now."""

    key: str
    """The setting (``algo.entropy_coef``, ``sb3_kwargs.learning_rate``, ``total_env_steps``)."""
    was: Any
    """The run's value (its ``config.json``)."""
    now: Any
    """The value the table's command would give it now."""
    why: str = ""
    """Why it matters, where that is not obvious."""

    def __str__(self) -> str:
        """``key: was X, now Y`` (values as JSON), then the reason if any."""
        text = f"{self.key}: was {_shown(self.was)}, now {_shown(self.now)}"
        return f"{text} ({self.why})" if self.why else text


@dataclasses.dataclass(frozen=True)
class StaleRun:
    """A done or resumable run made by another recipe than the table's command gives it now."""

    run: Run
    """The run."""
    state: RunState
    """Its state (done or resume)."""
    differences: tuple[Difference, ...]
    """What differs, at least one."""

    def __str__(self) -> str:
        """The run's directory and state, then its differences."""
        return f"{self.run.run_dir} ({self.state.value}): {'; '.join(map(str, self.differences))}"


def _shown(value: Any) -> str:
    """A setting's value in a message: JSON (``0.0003``, ``[256, 256]``, ``"fixed"``, ``null``)."""
    if value is _ABSENT:
        return "not set"
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def same_value(a: Any, b: Any) -> bool:
    """Whether two settings are the same value: ``3e-4`` equals ``0.0003`` and ``1`` equals ``1.0``, a
    tuple equals the list of its items, but ``True`` is not ``1`` (JSON and YAML keep them apart).
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        # Python compares an int with a float exactly (10**400 == 1.0 is False, no overflow); only
        # floats can be NaN, and math.isnan(10**400) would raise OverflowError.
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def read_run_config(path: Path) -> dict[str, Any] | None:
    """``path/config.json`` as a mapping; ``None`` when there is none or it cannot be read as one."""
    try:
        return read_json_object(path / "config.json")
    except (FileNotFoundError, ConfigError):
        return None


def not_compared(key: str) -> bool:
    """Whether dotted ``key`` of a robolearn run's config is left out of the stale comparison: the
    benchmark sets it per run (:data:`BENCHMARK_KEYS`) or it does not change training
    (:data:`NOT_TRAINING_KEYS`, any ``...video*`` key).
    """
    return key in BENCHMARK_KEYS or key in NOT_TRAINING_KEYS or key.rsplit(".", 1)[-1].startswith("video")


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A run's config as dotted keys (``algo.learning_rate``); an empty mapping, a list, a scalar and
    the mappings of :data:`WHOLE_KEYS` are one value each.
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and name not in WHOLE_KEYS:
            out.update(flat_config(value, f"{name}."))
        else:
            out[name] = value
    return out


def _sb3_block(run: Run) -> tuple[dict[str, Any], int, bool]:
    """The kwargs, ``n_envs`` and ``--normalize`` flag :func:`command` gives an SB3 run."""
    entry = run.entry
    if run.lib == "sb3_zoo":
        zoo = entry.sb3.zoo
        if zoo is None:
            raise TableError(f"{run.name}: entry {entry.id} has no sb3.zoo hyperparameters")
        return zoo.kwargs, zoo.n_envs, zoo.normalize
    return entry.sb3.default, entry.sb3.n_envs, False


def sb3_settings(run: Run) -> dict[str, Any]:
    """What ``sb3_run`` records in ``config.json`` from :func:`command`'s flags for ``run``:
    ``sb3_kwargs`` (the kwargs as described, ``lin_<x>`` schedules as text), ``n_envs``,
    ``normalize`` (the ``VecNormalize`` arguments, or ``None``), ``task_overrides`` and
    ``gymnasium`` (the Gymnasium env trained on, or ``None``: the SB3 adapter).

    Mirrors ``robolearn.benchmark.sb3_run.parse_args`` (not imported: it loads the task registry);
    a test holds the two together.

    Raises:
        TableError: kwargs the translation refuses, or a recipe the reader cannot follow.
    """
    from robolearn.benchmark.sb3_zoo import ZooError, translate  # SB3 only when the plan has SB3 runs

    kwargs, n_envs, normalize = _sb3_block(run)
    try:
        tr = translate(run.entry.algo, kwargs, f"{run.name} kwargs")
    except ZooError as exc:
        raise TableError(str(exc)) from None
    norm = tr.normalize
    if normalize and norm is None:  # --normalize: VecNormalize with the block's gamma, as sb3_run does
        gamma = kwargs.get("gamma")
        norm = {} if gamma is None else {"gamma": float(gamma)}
    return json.loads(json.dumps({
        "sb3_kwargs": tr.described, "n_envs": n_envs, "normalize": norm,
        "task_overrides": recipe_task_overrides(run.entry.experiment), "gymnasium": run.entry.sb3.gymnasium,
    }))


SB3Settings = dict[tuple[str, str], dict[str, Any]]
""":func:`sb3_settings` by (entry id, lib), filled during one stale check of one table: an SB3
configuration's seeds share their settings, so each is translated and its recipe read once. Not kept
longer: the table or its recipe files may change between two checks."""


def _sb3_wanted(run: Run, cache: SB3Settings | None) -> dict[str, Any]:
    """:func:`sb3_settings` of ``run``, from ``cache`` when an earlier run of its (entry, lib) put it there."""
    if cache is None:
        return sb3_settings(run)
    key = (run.entry.id, run.lib)
    if key not in cache:
        cache[key] = sb3_settings(run)
    return cache[key]


def _linear_schedules(kwargs: Mapping[str, Any]) -> list[str]:
    """The kwargs written as ``lin_<x>`` (SB3 linear schedules over the run's budget)."""
    return sorted(k for k, v in kwargs.items() if isinstance(v, str) and v.startswith("lin_"))


def recipe_differences(
    run: Run, composed: ComposedConfig, sb3_wanted: SB3Settings | None = None
) -> list[Difference] | None:
    """How ``run``'s ``config.json`` differs from what the table's command would give it now.

    robolearn: the run's whole config against the whole config its fresh command composes now
    (``composed``), key by key both ways, so a recipe line deleted or a default changed (in the
    algorithm's dataclass or ``configs/algo/*.yaml``) is found too; the keys of :func:`not_compared`
    aside, and with ``algo.schedule: linear`` the run's ``total_env_steps`` with the entry's budget.
    SB3: :func:`sb3_settings` with the run's (``sb3_kwargs`` key by key); and with a
    ``lin_<x>`` schedule, the run's ``total_env_steps`` with the entry's budget. A run made before
    sb3_run recorded ``task_overrides`` trained the task as registered (``{}``), one made before it
    recorded ``gymnasium`` through the adapter (``None``).

    ``sb3_wanted`` keeps :func:`sb3_settings` per (entry id, lib) across the runs of one check (the
    seeds of an SB3 configuration share them); ``None``: computed for this run alone.

    Returns:
        The differences (empty: the same recipe), or ``None`` when the run has no readable
        ``config.json`` (its recipe is unknown).

    Raises:
        TableError: kwargs or a recipe that cannot be read (see :func:`sb3_settings`), or a recipe
            ``composed`` cannot compose.
    """
    config = read_run_config(run.run_dir)
    if config is None:
        return None
    diffs: list[Difference] = []
    if run.lib == "robolearn":
        have, want = flat_config(config), flat_config(composed(run))
        for key in sorted(set(have) | set(want)):
            if not_compared(key):
                continue
            was, now = have.get(key, _ABSENT), want.get(key, _ABSENT)
            # config.json leaves out a section that is None (o2o): not set and null are the same.
            if not same_value(None if was is _ABSENT else was, None if now is _ABSENT else now):
                diffs.append(Difference(key, was, now))
        budget = have.get("total_env_steps", _ABSENT)
        if have.get("algo.schedule") == "linear" and not same_value(budget, run.entry.env_steps):
            diffs.append(Difference(
                "total_env_steps", budget, run.entry.env_steps,
                "algo.schedule: linear anneals the learning rate over the budget the run started with: "
                "continued to another budget the rate jumps",
            ))
        return diffs
    want = _sb3_wanted(run, sb3_wanted)
    # Runs made before sb3_run recorded these trained the task as registered, through the adapter.
    have = {**config, "task_overrides": config.get("task_overrides", {}), "gymnasium": config.get("gymnasium")}
    was_kwargs = have.get("sb3_kwargs")
    if isinstance(was_kwargs, Mapping):
        for key in sorted(set(was_kwargs) | set(want["sb3_kwargs"])):
            was, now = was_kwargs.get(key, _ABSENT), want["sb3_kwargs"].get(key, _ABSENT)
            if not same_value(was, now):
                diffs.append(Difference(f"sb3_kwargs.{key}", was, now))
    else:
        diffs.append(Difference("sb3_kwargs", have.get("sb3_kwargs", _ABSENT), want["sb3_kwargs"]))
    for key in ("n_envs", "normalize", "task_overrides", "gymnasium"):
        if not same_value(have.get(key, _ABSENT), want[key]):
            diffs.append(Difference(key, have.get(key, _ABSENT), want[key]))
    schedules = _linear_schedules(want["sb3_kwargs"])
    budget = have.get("total_env_steps", _ABSENT)
    if schedules and not same_value(budget, run.entry.env_steps):
        diffs.append(Difference(
            "total_env_steps", budget, run.entry.env_steps,
            f"{', '.join(f'sb3_kwargs.{k}' for k in schedules)} {'decays' if len(schedules) == 1 else 'decay'} "
            "linearly over the budget the run started with: continued to another budget the schedule jumps",
        ))
    return diffs


def find_stale(
    planned: Sequence[tuple[Run, RunState]], composed: ComposedConfig, sb3_wanted: SB3Settings | None = None
) -> tuple[list[StaleRun], list[Run]]:
    """The stale runs among the done and resumable ones of ``planned``, and those whose recipe is
    unknown (no readable ``config.json``: kept, with a warning). Fresh runs are not compared (nor
    their recipe composed): they start from scratch anyway. ``sb3_wanted``: as in
    :func:`recipe_differences` (default: a new one for this call, shared by ``planned``'s runs).

    Raises:
        TableError: a recipe or kwargs that cannot be read, for a done or resumable run.
    """
    stale, unknown = [], []
    sb3_wanted = {} if sb3_wanted is None else sb3_wanted
    for run, state in planned:
        if state is RunState.FRESH:
            continue  # started from scratch anyway
        diffs = recipe_differences(run, composed, sb3_wanted)
        if diffs is None:
            unknown.append(run)
        elif diffs:
            stale.append(StaleRun(run, state, tuple(diffs)))
    return stale, unknown


def stale_error(stale: Sequence[StaleRun], out: Path) -> TableError:
    """The refusal of a table with stale runs: each run, its differences, and what to do."""
    listed = "\n".join(f"  {s}" for s in stale)
    return TableError(
        f"out={out}: {len(stale)} run(s) were made by another recipe than the table gives them now; skipped or "
        f"resumed, they would mix two recipes on the results page:\n{listed}\n"
        "Move those run folders aside, restore the recipe (configs/experiment/<name>.yaml, the defaults "
        "it composes, the entry's sb3 settings or its budget), or pass rerun_stale=true (each folder is renamed seed<S>.stale-<UTC time> "
        "and the run starts fresh)"
    )


def _aside_target(run: Run, out: Path, when: _dt.datetime, suffix: str, taken: frozenset[Path]) -> Path:
    """Where :func:`set_aside_all` moves ``run``'s folder: ``seed<S><suffix><UTC yyyymmddThhmmss>``
    next to it, with ``-1``, ``-2``, ... when that name exists or is in ``taken``.

    Raises:
        TableError: the run's folder is not inside ``out`` (never move anything outside it), or is
            not a folder.
    """
    path = run.run_dir.resolve()
    if Path(out).resolve() not in path.parents:
        raise TableError(f"{run.name}: {path} is not inside out={out}; the benchmark moves nothing outside its folder")
    if not path.is_dir():
        raise TableError(f"{run.name}: {path} is not a folder; expected the run folder to set aside")
    stamp = when.astimezone(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}{suffix}{stamp}")
    n = 0
    while target.exists() or target in taken:
        n += 1
        target = path.with_name(f"{path.name}{suffix}{stamp}-{n}")
    return target


def set_aside_all(
    moves: Sequence[tuple[Run, str]], out: Path, when: _dt.datetime | None = None
) -> list[Path]:
    """Rename each ``(run, suffix)``'s folder to its :func:`_aside_target`; return the new paths, in order.

    Every target is computed and checked before any folder is renamed, so a folder that cannot be
    set aside leaves all of them where they were. Nothing is deleted.

    Raises:
        TableError: a folder outside ``out``, not a folder, or two moves of one folder.
    """
    when = when or _dt.datetime.now(_dt.timezone.utc)
    sources = [run.run_dir.resolve() for run, _ in moves]
    if len(set(sources)) != len(sources):
        twice = next(p for p in sources if sources.count(p) > 1)
        raise TableError(f"{twice}: asked to set this run folder aside twice")
    targets: list[Path] = []
    for run, suffix in moves:
        targets.append(_aside_target(run, out, when, suffix, frozenset(targets)))
    for (run, suffix), target in zip(moves, targets, strict=True):
        os.rename(run.run_dir.resolve(), target)
        log.warning("%s: %s, set aside as %s; it starts fresh", run.name, _ASIDE_WHY[suffix], target)
    return targets


def _holds_result(run: Run) -> bool:
    """Whether the run folder holds a finished result (a ``summary.json``, readable or not): such a
    folder is set aside (:data:`SHORT_SUFFIX`, :data:`UNREADABLE_SUFFIX`), never cleared, when its run
    must start fresh.
    """
    return (run.run_dir / "summary.json").exists()


def check_sb3_kwargs(table: Table, runs: Sequence[Run]) -> None:
    """Translate the SB3 hyperparameters of every SB3 run in ``runs`` as its runner will.

    A typo in an entry's ``sb3.default`` or ``sb3.zoo.kwargs`` (``n_stepz``) would otherwise stop
    that run only when its turn comes, hours into a table; here it stops the benchmark before
    anything is written or started. So does an ``sb3.gymnasium`` env on an entry whose recipe
    overrides the task (Gymnasium's env is the task as registered, not the recipe's MDP).

    Raises:
        TableError: a block the SB3 runner refuses (the table file, the field and the runner's
            reason), or SB3 runs without stable-baselines3 installed.
    """
    where = f"{table.source}: " if table.source else ""
    for entry in {run.entry.id: run.entry for run in runs if run.lib in SB3_LIBS}.values():
        if entry.sb3.gymnasium is not None:
            overrides = recipe_task_overrides(entry.experiment)
            if overrides:
                # Gymnasium's env is the task as registered; the recipe trains another MDP.
                raise TableError(
                    f"{where}entries[{table.ids.index(entry.id)}] ({entry.id}).sb3.gymnasium: expected null, got "
                    f"{entry.sb3.gymnasium!r}: recipe {entry.experiment} overrides the task ({json.dumps(overrides, sort_keys=True)}), "
                    "so the SB3 side must train on robolearn's task through the adapter"
                )
    blocks = {}
    for run in runs:
        if run.lib == "sb3_default":
            blocks[(run.entry.id, "sb3.default")] = (run.entry.algo, run.entry.sb3.default)
        elif run.lib == "sb3_zoo" and run.entry.sb3.zoo is not None:
            blocks[(run.entry.id, "sb3.zoo.kwargs")] = (run.entry.algo, run.entry.sb3.zoo.kwargs)
    if not blocks:
        return
    from robolearn.benchmark.sb3_zoo import ZooError, translate  # SB3 only when the plan has SB3 runs

    for (entry_id, field), (algo, kwargs) in blocks.items():
        index = table.ids.index(entry_id)
        try:
            translate(algo, kwargs, f"entries[{index}] ({entry_id}).{field}")
        except ZooError as exc:
            raise TableError(f"{where}{exc}") from None
        except ImportError as exc:
            raise TableError(
                f"{where}libs: the plan has SB3 runs but stable-baselines3 cannot be imported ({exc}); "
                "install the sb3 extra (pip install 'robolearn[sb3]') or pass libs=robolearn"
            ) from None


VERSIONED: dict[str, str] = {
    "torch": "torch", "mujoco": "mujoco", "stable_baselines3": "stable-baselines3", "robolearn": "robolearn",
}
"""``versions`` keys of :func:`provenance` and their distributions."""


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def provenance(root: Path | None = None) -> dict[str, Any]:
    """Where the runs run: the machine (CPU model, logical cores, platform), the versions of Python,
    torch, MuJoCo, SB3 and robolearn (the children run this interpreter, so they are theirs), and the
    git commit of the robolearn checkout (``None`` when robolearn is not a git checkout) with whether
    tracked files differ from it.

    Args:
        root: the checkout to read (default: the one this robolearn is imported from).
    """
    root = Path(__file__).resolve().parents[2] if root is None else Path(root)
    top = _git(root, "rev-parse", "--show-toplevel")
    # Only robolearn's own checkout: an installed copy inside some other repository is not a checkout.
    own = top is not None and Path(top).resolve() == root.resolve()
    commit = _git(root, "rev-parse", "HEAD") if own else None
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no")) if commit else None
    return {
        "machine": {"cpu": cpu_model(), "logical_cores": os.cpu_count(), "platform": platform.platform()},
        "versions": {"python": platform.python_version(),
                     **{key: _distribution_version(dist) for key, dist in VERSIONED.items()}},
        "git_commit": commit or None,
        "git_dirty": dirty,
    }


def run_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a run: ``base`` (default: this process's) with one thread per library
    and unbuffered Python output (the log shows progress as it happens).
    """
    env = dict(os.environ if base is None else base)
    env.update(THREAD_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def launch(cmd: Sequence[str], log_file: IO[bytes], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with stdout and stderr into ``log_file``, in a session of its own.

    Its own session: a Ctrl-C in the terminal reaches only the benchmark, which then asks each
    child once to stop (a child seeing the terminal's Ctrl-C too would take the forwarded one as a
    second Ctrl-C and stop without its checkpoint).
    """
    return subprocess.Popen(
        list(cmd), stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env),
        start_new_session=True,
    )


# -- the output folder ------------------------------------------------------------------------
def table_problems(old: Mapping[str, Any], new: Table) -> list[str]:
    """Why ``new`` cannot run into an output folder whose ``table.json`` holds ``old`` (empty: it can).

    ``new`` may add entries, seeds and libraries, raise a budget (done runs then resume to it),
    change what only the report reads (name, thresholds, the Zoo's reference) and an entry's ``sb3``
    block (each SB3 run it changes is then stale: :func:`recipe_differences`); the rest of what decides
    how an existing run trains must be the same.
    """
    try:
        previous = table_from_dict(old, TABLE_FILE, check_files=False)
    except TableError as exc:
        return [f"its {TABLE_FILE} cannot be read as a table ({exc})"]
    problems = []
    missing_seeds = [s for s in previous.seeds if s not in new.seeds]
    if missing_seeds:
        problems.append(f"seeds {missing_seeds} of the folder are not in the new table")
    missing_libs = [lib for lib in previous.libs if lib not in new.libs]
    if missing_libs:
        problems.append(f"libs {missing_libs} of the folder are not in the new table")
    if previous.eval_episodes != new.eval_episodes:
        problems.append(f"eval_episodes was {previous.eval_episodes}, now {new.eval_episodes}")
    for before in previous.entries:
        if before.id not in new.ids:
            problems.append(f"entry {before.id} of the folder is not in the new table")
            continue
        after = new.entry(before.id)
        # Not ``sb3``: a changed SB3 block is the stale guard's, run by run (an SB3 run's config.json
        # records its kwargs, n_envs, normalize and gymnasium), so rerun_stale can redo just the runs it changed.
        for field in ("task", "algo", "experiment", "eval_every"):
            if getattr(before, field) != getattr(after, field):
                problems.append(f"entry {before.id}: {field} was {getattr(before, field)!r}, now {getattr(after, field)!r}")
        if after.env_steps < before.env_steps:
            problems.append(f"entry {before.id}: env_steps was {before.env_steps}, now {after.env_steps} (a budget may only grow)")
    return problems


def check_out(table: Table, out: Path) -> Mapping[str, Any] | None:
    """Check that ``table`` may run into ``out``; return the folder's previous table (``None`` if new).

    Raises:
        TableError: ``out`` holds runs of another table that ``table`` does not extend (the
            differences are listed), or a ``table.json`` that cannot be read.
    """
    if Path(out).exists() and not Path(out).is_dir():
        raise TableError(f"out={out}: is a file; expected a folder (new, or one an earlier `benchmark run` wrote)")
    path = Path(out) / TABLE_FILE
    if not path.exists():
        stray = sorted(p.name for p in Path(out).iterdir() if p.name != LOCK_FILE) if Path(out).is_dir() else []
        if any(e.id in stray for e in table.entries):
            # Run folders without a table.json: not ours to delete or extend.
            raise TableError(
                f"out={out}: holds run folders ({', '.join(s for s in stray if s in table.ids)}) but no {TABLE_FILE}; "
                "pick a new out folder (the benchmark only continues folders it started)"
            )
        if stray:
            # Anything else (a training run directory, a folder of other runs): the benchmark would
            # mix its table.json, runs.jsonl and run folders into files that are not its own.
            shown = ", ".join(stray[:5]) + (", ..." if len(stray) > 5 else "")
            raise TableError(
                f"out={out}: not empty ({shown}) and no {TABLE_FILE}: not the folder of a `benchmark run`; "
                "expected a new or empty folder, or one an earlier `benchmark run` wrote"
            )
        return None
    try:
        old = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TableError(f"out={out}: {path} cannot be read as JSON ({exc})") from None
    problems = table_problems(old, table)
    if problems:
        name = old.get("name") if isinstance(old, dict) else None
        raise TableError(
            f"out={out} holds runs of table {name!r} ({path}) and table {table.name!r} is not a compatible "
            f"superset of it: {'; '.join(problems)}. Use another out folder, or run the folder's own table "
            "(a table may add entries, seeds and libraries and raise budgets, not change existing runs)"
        )
    return old


def write_table(table: Table, out: Path) -> None:
    """Write the resolved table as ``<out>/table.json`` (atomically)."""
    path = Path(out) / TABLE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table.to_dict(), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


@contextlib.contextmanager
def out_lock(out: Path) -> Iterator[Callable[[Sequence[tuple[int, Path]]], None]]:
    """Hold ``<out>/.benchmark.lock`` (``O_EXCL``): a second ``benchmark run`` into ``out`` is refused
    while this one works; a lock of a process that is gone is taken over.

    Yields a function that records the running children (pid, run directory) in the lock file, one
    ``child <pid> <run dir>`` line each: the children run in sessions of their own, so a benchmark
    killed with SIGKILL leaves them running, and the next ``benchmark run`` must not take over the
    folder (delete or resume their run directories) while they still write there.

    Raises:
        TableError: another live process holds the lock, or a dead one left children that still run.
    """
    path = Path(out) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid, children = _read_lock(path)
            if pid > 0 and _alive(pid):
                raise TableError(
                    f"out={out}: another `robolearn benchmark run` (process {pid}) works in this folder; wait for it, "
                    f"or remove {path} if that process is gone"
                ) from None
            orphans = [(child, run) for child, run in children if _runs_in(child, run)]
            if orphans:
                # Left in place: the next attempt checks the same children again.
                listed = ", ".join(f"{run} (process {child})" for child, run in orphans)
                raise TableError(
                    f"out={out}: the `robolearn benchmark run` of process {pid} ended without stopping its runs, "
                    f"which still run: {listed}; wait for them to end, or stop them "
                    f"(kill -INT {' '.join(str(c) for c, _ in orphans)}: they checkpoint), then run again"
                ) from None
            log.warning("%s: taking over the lock of process %d, which no longer runs", path, pid)
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()}\n")
        break
    else:
        raise TableError(f"out={out}: could not acquire {path}")

    def record(children: Sequence[tuple[int, Path]]) -> None:
        lines = [f"{os.getpid()}\n", *(f"child {pid} {run}\n" for pid, run in children)]
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(lines))
        os.replace(tmp, path)  # atomic: the lock file exists throughout

    try:
        yield record
    finally:
        path.unlink(missing_ok=True)


def _read_lock(path: Path) -> tuple[int, list[tuple[int, str]]]:
    """The holder's pid (-1 if unreadable) and the children it recorded in a lock file."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return -1, []
    try:
        pid = int(lines[0].strip()) if lines else -1
    except ValueError:
        pid = -1
    children = []
    for line in lines[1:]:
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "child" and parts[1].isdigit():
            children.append((int(parts[1]), parts[2]))
    return pid, children


def _runs_in(pid: int, run_dir: str) -> bool:
    """Whether process ``pid`` is alive and still the run of ``run_dir`` (not a recycled pid)."""
    if not _alive(pid):
        return False
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return True  # no /proc to tell: an alive pid is taken for the run
    # Whole arguments, not a substring of the command line: seed1's run must not match seed10's
    # (robolearn passes run_dir=<dir> or resume=<dir>, sb3_run --out <dir>).
    return any(arg == run_dir or arg.endswith(f"={run_dir}") for arg in args)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_run_dir(run: Run, out: Path) -> None:
    """Remove a fresh run's partial files: its whole directory, which only the benchmark writes.

    Raises:
        TableError: the folder is outside ``out`` or holds a finished result (:func:`_holds_result`:
            :func:`run_benchmark` sets those aside first; this guard keeps a finished run from rmtree).
    """
    path = run.run_dir.resolve()
    if Path(out).resolve() not in path.parents:  # a guard: never delete outside the output folder
        raise TableError(f"{run.name}: {path} is not inside out={out}; the benchmark deletes nothing outside its folder")
    if _holds_result(run):
        raise TableError(f"{run.name}: {path} holds a summary.json (a finished run); not deleting it")
    if path.exists():
        shutil.rmtree(path)


# -- execution --------------------------------------------------------------------------------
def run_benchmark(
    table: Table,
    out: Path | str,
    *,
    jobs: int = 1,
    entries: Sequence[str] | None = None,
    libs: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    order: str = "seed",
    dry_run: bool = False,
    rerun_stale: bool = False,
    progress: bool = False,
    launcher: Launcher = launch,
    poll_s: float = 0.2,
    composed: ComposedConfig,
) -> BenchmarkResult:
    """Run the table's runs that are not done into ``out`` (see the module doc).

    Args:
        table: the table (:func:`~robolearn.benchmark.table.load_table`).
        out: the output folder.
        jobs: runs at a time.
        entries: run only these entry ids (default: all of the table's).
        libs: run only these libraries (default: the table's).
        seeds: run only these seeds (default: the table's).
        order: ``seed`` (seed-major, the default) or ``entry`` (entry-major: each entry's runs
            together; see :func:`plan`).
        dry_run: only plan: nothing is written or started (stale runs are still refused, or listed
            with ``rerun_stale``).
        rerun_stale: set each stale run's folder aside (renamed ``seed<S>.stale-<UTC time>``) and
            run it fresh, instead of refusing the table.
        progress: show a progress bar over the runs on stderr.
        launcher: starts a run's subprocess (:func:`launch`).
        poll_s: seconds between checks of the running subprocesses.
        composed: the whole config a robolearn run's fresh command composes now (:data:`ComposedConfig`:
            ``robolearn benchmark`` passes :func:`robolearn.cli.benchmark.composer`), to find stale runs.

    Every run of the table is checked for staleness, not only the selected ones: a stale run outside
    ``entries``/``libs``/``seeds`` is left as it is, with a warning (:attr:`BenchmarkResult.stale_elsewhere`).

    Raises:
        TableError: a filter the table does not have, an output folder of another table, one in
            use by another ``benchmark run``, a recipe the benchmark cannot read
            (:func:`~robolearn.benchmark.table.recipe_task_overrides`; for a done or resumable run,
            ``composed``), or selected stale runs without ``rerun_stale`` (:func:`stale_error`);
            nothing has run or been written then.
    """
    if jobs < 1:
        raise TableError(f"jobs={jobs}: expected an integer >= 1")
    out = Path(out)
    runs = plan(table, out, entries, libs, seeds, order)
    check_out(table, out)
    # An unreadable recipe stops the benchmark before any run starts (not when its run is done, on the
    # next call). Only what every SB3 command needs: a recipe is composed or compared only for a done
    # or resumable run (find_stale), so a new folder is never refused for a recipe it cannot compare.
    for experiment in sorted({r.entry.experiment for r in runs if r.lib in SB3_LIBS}):
        recipe_task_overrides(experiment)
    check_sb3_kwargs(table, runs)
    if dry_run:
        planned = [(r, run_state(r)) for r in runs]
        stale, elsewhere, unknown = _checked_stale(table, out, planned, rerun_stale, composed)
        planned = _fresh_if_stale(planned, stale)
        short, unreadable = _finished_fresh(planned, stale)
        return BenchmarkResult(planned, [], False, stale, unknown, elsewhere, short, unreadable=unreadable)
    with out_lock(out) as record_children:
        old = check_out(table, out)  # again under the lock: another process may have written it meanwhile
        planned = [(r, run_state(r)) for r in runs]
        stale, elsewhere, unknown = _checked_stale(table, out, planned, rerun_stale, composed)  # before anything is written
        if old != table.to_dict():
            write_table(table, out)
        planned = _fresh_if_stale(planned, stale)
        short, unreadable = _finished_fresh(planned, stale)
        moves = ([(s.run, STALE_SUFFIX) for s in stale] + [(r, SHORT_SUFFIX) for r in short]
                 + [(r, UNREADABLE_SUFFIX) for r in unreadable])
        # All before any run starts: an interrupt leaves no stale run behind.
        targets = set_aside_all(moves, out)
        aside = {run.run_dir: target for (run, _), target in zip(moves, targets, strict=True)}
        todo = [(r, s) for r, s in planned if s is not RunState.DONE]
        where = provenance() if todo else {}
        records, interrupted = _execute(
            table, out, todo, len(planned), jobs, progress, launcher, poll_s, where, record_children
        )
    return BenchmarkResult(planned, records, interrupted, stale, unknown, elsewhere, short, aside, unreadable)


def _checked_stale(
    table: Table, out: Path, planned: Sequence[tuple[Run, RunState]], rerun_stale: bool,
    composed: ComposedConfig,
) -> tuple[list[StaleRun], list[StaleRun], list[Run]]:
    """The stale runs of ``planned`` (refused unless ``rerun_stale``), the stale runs of the rest of the
    table (warned of, left as they are) and the runs of unknown recipe (warned of).
    """
    sb3_wanted: SB3Settings = {}  # one table, one check: shared by the selected runs and the rest
    stale, unknown = find_stale(planned, composed, sb3_wanted)
    if stale and not rerun_stale:
        raise stale_error(stale, out)
    chosen = {r.run_dir for r, _ in planned}
    elsewhere: list[StaleRun] = []
    unchecked: dict[str, list[str]] = {}  # why -> the runs: a missing recipe stops all its runs alike
    for run in plan(table, out):
        if run.run_dir in chosen or not run.run_dir.is_dir():
            continue
        try:
            found, unreadable = find_stale([(run, run_state(run))], composed, sb3_wanted)
        except (TableError, ImportError) as exc:  # not selected: its recipe (or SB3) cannot stop this call
            unchecked.setdefault(str(exc), []).append(run.name)
            continue
        elsewhere += found
        unknown += unreadable
    for why, names in unchecked.items():
        log.warning("%s: not selected, and cannot be checked for a changed recipe: %s", ", ".join(names), why)
    for item in elsewhere:
        log.warning("%s: stale, not selected so left as it is (the report leaves it out): %s; rerun it with "
                    "`benchmark run ... rerun_stale=true` and a selection that includes it",
                    item.run.name, "; ".join(map(str, item.differences)))
    for run in unknown:
        log.warning("%s: %s has no readable config.json: its recipe is unknown, so it is kept as it is",
                    run.name, run.run_dir)
    return stale, elsewhere, unknown


def _finished_fresh(
    planned: Sequence[tuple[Run, RunState]], stale: Sequence[StaleRun]
) -> tuple[list[Run], list[Run]]:
    """The fresh runs, not stale, whose folder holds a ``summary.json`` (:func:`_holds_result`): those
    whose summary is short of the budget (raised since; no checkpoint to resume from), and those whose
    summary cannot be read. Both are set aside, not cleared: a result is never deleted.
    """
    stale_dirs = {s.run.run_dir for s in stale}
    short: list[Run] = []
    unreadable: list[Run] = []
    for run, state in planned:
        if state is RunState.FRESH and run.run_dir not in stale_dirs and _holds_result(run):
            # one read of the summary per run: a readable one says how far the run got
            (unreadable if summary_env_steps(run.run_dir) is None else short).append(run)
    return short, unreadable


def _fresh_if_stale(planned: Sequence[tuple[Run, RunState]], stale: Sequence[StaleRun]) -> list[tuple[Run, RunState]]:
    """``planned`` with each stale run fresh (its folder set aside)."""
    aside = {s.run.run_dir for s in stale}
    return [(r, RunState.FRESH if r.run_dir in aside else s) for r, s in planned]


@dataclasses.dataclass
class _Active:
    """A running subprocess and what its record needs."""

    run: Run
    state: RunState
    proc: subprocess.Popen[bytes]
    log_file: IO[bytes]
    start: float
    load: tuple[float, ...]
    started: str
    signalled: bool = False


def _execute(
    table: Table,
    out: Path,
    todo: list[tuple[Run, RunState]],
    total: int,
    jobs: int,
    progress: bool,
    launcher: Launcher,
    poll_s: float,
    where: Mapping[str, Any],
    record_children: Callable[[Sequence[tuple[int, Path]]], None] = lambda children: None,
) -> tuple[list[RunRecord], bool]:
    """Run ``todo`` ``jobs`` at a time; return the records and whether a signal stopped it.

    ``record_children`` is told the running children (pid, run directory) whenever they change
    (:func:`out_lock`).
    """
    from tqdm import tqdm

    pending = deque(todo)
    active: list[_Active] = []
    records: list[RunRecord] = []
    env = run_env()
    bar = tqdm(total=total, initial=total - len(todo), desc=f"benchmark {table.name}", unit="run",
               disable=not progress, file=sys.stderr)
    with _Signals() as stop:
        try:
            while active or (pending and not stop.count):
                started = False
                while pending and len(active) < jobs and not stop.count:
                    run, state = pending.popleft()
                    active.append(_start(run, state, table, out, env, launcher))
                    started = True
                if started:
                    record_children([(a.proc.pid, a.run.run_dir) for a in active])
                ended = [a for a in active if a.proc.poll() is not None]
                for item in ended:
                    active.remove(item)
                    record = _finish(item, out, where)
                    records.append(record)
                    bar.update(1)
                    bar.set_postfix_str(f"{record.entry}/{record.lib}/seed{record.seed}: exit {record.returncode}")
                if ended:
                    record_children([(a.proc.pid, a.run.run_dir) for a in active])
                signalled = stop.forward([a.proc for a in active])
                for item in active:
                    item.signalled = item.signalled or item.proc.pid in signalled
                if active:
                    time.sleep(poll_s)
        finally:
            for item in active:  # an exception in here: no child outlives the benchmark
                item.proc.kill()
                item.proc.wait()
                item.log_file.close()
            bar.close()
    return records, stop.count > 0


def _start(run: Run, state: RunState, table: Table, out: Path, env: Mapping[str, str], launcher: Launcher) -> _Active:
    """Prepare the run directory and start the run's subprocess."""
    if state is RunState.FRESH:
        clear_run_dir(run, out)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    cmd = command(run, table, state)
    log_file = open(run.run_dir / LOG_FILE, "ab")  # noqa: SIM115 - closed in _finish, after the process exits
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    log_file.write(f"# {started} {state.value}: {' '.join(cmd)}\n".encode())
    log_file.flush()
    log.info("starting %s (%s)", run.name, state.value)
    load = os.getloadavg()
    start = time.perf_counter()
    try:
        proc = launcher(cmd, log_file, env)
    except BaseException:
        log_file.close()
        raise
    return _Active(run, state, proc, log_file, start, tuple(load), started)


def _finish(item: _Active, out: Path, where: Mapping[str, Any]) -> RunRecord:
    """Record an ended subprocess in ``runs.jsonl``; a failure is logged with its log file."""
    item.log_file.close()
    code = int(item.proc.returncode)
    run = item.run
    record = RunRecord(
        entry=run.entry.id, lib=run.lib, seed=run.seed, run_dir=str(run.run_dir), state=item.state.value,
        returncode=code, wall_s=round(time.perf_counter() - item.start, 3), load_before=item.load,
        load_after=tuple(os.getloadavg()), started=item.started, provenance=where, signalled=item.signalled,
    )
    with open(out / RUNS_FILE, "a") as fh:
        fh.write(json.dumps(record.to_dict(), sort_keys=True) + "\n")
    if code != 0:
        log.error("%s exited with status %d; its output is in %s", run.name, code, run.run_dir / LOG_FILE)
    return record


class _Signals:
    """SIGINT/SIGTERM while running: stop starting runs and ask the children to stop.

    The first signal sends each child one SIGINT (robolearn finishes its iteration and writes a
    checkpoint; SB3 keeps its last evaluation's checkpoint), the second another (stop at once), a
    third kills them. Installed only in the main thread, where Python delivers signals.
    """

    def __init__(self) -> None:
        self.count = 0
        self._sent = 0
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        log.warning("%s: asking the running runs to stop (they checkpoint; run the same command again to resume)",
                    signal.Signals(signum).name)

    def forward(self, procs: Sequence[subprocess.Popen[bytes]]) -> set[int]:
        """Pass the signals received since the last call on to the running children; return their pids."""
        sent: set[int] = set()
        while self._sent < self.count:
            self._sent += 1
            for proc in procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGKILL if self._sent >= 3 else signal.SIGINT)
                        sent.add(proc.pid)
        return sent

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


__all__ = [
    "BENCHMARK_KEYS",
    "NOT_TRAINING_KEYS",
    "BenchmarkResult",
    "ComposedConfig",
    "Difference",
    "Run",
    "RunRecord",
    "RunState",
    "SB3Settings",
    "StaleRun",
    "check_out",
    "check_sb3_kwargs",
    "clear_run_dir",
    "command",
    "cpu_model",
    "find_stale",
    "flat_config",
    "has_checkpoint",
    "launch",
    "not_compared",
    "out_lock",
    "plan",
    "provenance",
    "read_run_config",
    "recipe_differences",
    "run_benchmark",
    "run_dir",
    "run_env",
    "run_state",
    "same_value",
    "sb3_settings",
    "set_aside_all",
    "stale_error",
    "summary_env_steps",
    "table_problems",
    "write_table",
]
