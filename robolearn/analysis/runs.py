"""Run directories as learning curves: reading ``metrics.csv``, grouping runs into methods, and
putting every run on one step grid.

A run directory is what a training runner writes: ``config.json`` (the resolved config) and
``metrics.csv`` (column ``step``, then one column per metric; see :mod:`robolearn.logging.logger`).
A run's step unit is the ``*_steps`` column that equals ``step`` on every row (``env_steps``
online, ``grad_steps`` offline), so runs counted in different units are never put on one axis.

Runs are grouped into methods, each group's runs being its seeds: by explicit ``name=dir,dir``
groups, by the values of chosen config keys, or by default by a label made of the algorithm's name
and the config keys whose values differ between the runs (the seed, paths and logging settings
left out). Curves are sampled on one grid with the last value at or before each grid step (what
the run had measured by then) or by linear interpolation between evaluations.
"""

from __future__ import annotations

import csv
import difflib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from robolearn.logging.logger import STEP_COLUMN
from robolearn.utils.config import read_json_object

log = logging.getLogger(__name__)

Align = Literal["last", "linear"]
"""How a curve is read between its evaluations: the last value logged, or linear interpolation."""

RUN_MARKERS: tuple[str, ...] = ("config.json", "metrics.csv")
"""The files every run directory holds."""

LABEL_IGNORED: frozenset[str] = frozenset({
    "seed", "run_dir", "resume", "overwrite", "torch_threads", "device",
    # The length of a run is not its method: a longer run of the same method is clipped, not split off.
    "total_env_steps", "total_grad_steps", "runner.total_env_steps",
    "runner.overwrite", "runner.console", "runner.tensorboard", "runner.video", "runner.video_size",
    "runner.video_camera", "runner.keep_checkpoints", "runner.checkpoint_interval",
})
"""Config keys that never tell two methods apart: seeds, paths, machines, logging and run length."""


@dataclass(frozen=True)
class RunCurve:
    """One run's metric against its steps, as read from its directory."""

    path: Path
    """The run directory."""
    config: dict[str, Any]
    """Its ``config.json``."""
    unit: str
    """The step axis' column (``env_steps``, ``grad_steps``, or the one chosen with ``x=``)."""
    steps: np.ndarray
    """Steps at which the metric was logged, increasing, float64."""
    values: np.ndarray
    """The metric at those steps, float64, finite."""


@dataclass(frozen=True)
class Group:
    """A method: a name and the runs (seeds) that belong to it."""

    name: str
    """The method's label in tables and plots."""
    runs: tuple[RunCurve, ...]
    """Its runs, in the order given."""


@dataclass
class Grid:
    """The common step grid of a comparison and what aligning the runs onto it took."""

    steps: np.ndarray
    """Grid steps, increasing."""
    unit: str
    """What a step counts."""
    notes: list[str] = field(default_factory=list)
    """What a reader of the results must know (runs clipped to the shortest)."""


def expand_run_dirs(path: Path) -> list[Path]:
    """``path`` itself if it is a run directory, else the run directories directly inside it (a
    ``train -m`` sweep folder), sorted by name.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is neither a run directory nor a folder of run directories.
    """
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run directory")
    if _is_run_dir(path):
        return [path]
    inside = sorted(p for p in path.iterdir() if p.is_dir() and _is_run_dir(p)) if path.is_dir() else []
    if not inside:
        raise ValueError(
            f"{path}: not a run directory (it needs {' and '.join(RUN_MARKERS)}) and holds none; "
            "pass the folders a training run wrote (run_dir=...)"
        )
    return inside


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and all((path / name).is_file() for name in RUN_MARKERS)


def load_run(
    path: Path, metric: str, *, x: str | None = None, phase: str | None = None
) -> RunCurve:
    """Read ``metric`` against the step axis from the run directory ``path``.

    Args:
        path: a run directory (``config.json`` and ``metrics.csv``).
        metric: the ``metrics.csv`` column to compare (``eval/return``).
        x: the column of the step axis; ``None``: ``step``, named after the ``*_steps`` column
            that equals it.
        phase: keep only the rows whose ``phase`` cell is this value (text or the same number).

    Raises:
        ValueError: the metric, ``x`` or ``phase`` column is missing (the available columns are
            listed), a cell is not a number, or the metric was never logged.
        ConfigError: ``config.json`` is not a JSON object.
    """
    if not _is_run_dir(path):
        raise ValueError(f"{path}: not a run directory (it needs {' and '.join(RUN_MARKERS)})")
    config = read_json_object(path / "config.json")
    table = path / "metrics.csv"
    with table.open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    if not header or header[0] != STEP_COLUMN:
        raise ValueError(f"{table}: not a robolearn metrics.csv (its first column is not {STEP_COLUMN!r})")
    for what, column in (("--metric", metric), ("--x", x), ("--phase", "phase" if phase is not None else None)):
        if column is not None and column not in header:
            close = difflib.get_close_matches(column, header, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{what}: {table} has no column {column!r}{hint}; available: {', '.join(header[1:])}")
    if phase is not None:
        rows = [row for row in rows if _same_cell(row.get("phase") or "", phase)]
    axis = x if x is not None else STEP_COLUMN
    steps, values = _numbers(rows, axis, metric, table)
    if steps.size == 0:
        where = f" in phase {phase!r}" if phase is not None else ""
        raise ValueError(f"{table}: {metric!r} was never logged{where}; nothing to compare")
    unit = x if x is not None else _unit(rows, header, table)
    return RunCurve(path, config, unit, steps, values)


def _same_cell(cell: str, wanted: str) -> bool:
    """Whether a ``phase`` cell is ``wanted``: as text, or as the same number (cells are floats)."""
    if cell == wanted:
        return True
    try:
        return float(cell) == float(wanted)
    except ValueError:
        return False


def _numbers(rows: list[dict[str, str]], axis: str, metric: str, table: Path) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the rows where both cells are filled; non-finite values dropped, with a warning."""
    points: list[tuple[float, float]] = []
    dropped = 0
    for line, row in enumerate(rows, start=2):
        xs, vs = row.get(axis) or "", row.get(metric) or ""
        if not xs or not vs:
            continue  # the metric was not logged this row (evaluations are sparse)
        try:
            px, pv = float(xs), float(vs)
        except ValueError:
            raise ValueError(f"{table}, line {line}: {axis}={xs!r}, {metric}={vs!r} is not a number") from None
        if not math.isfinite(pv):
            dropped += 1
            continue
        points.append((px, pv))
    if dropped:
        # A diverged evaluation logs inf/nan; it would turn every statistic of its step into nan.
        log.warning("%s: %d non-finite %s value(s) left out", table, dropped, metric)
    in_order = [p[0] for p in points]
    if any(b < a for a, b in zip(in_order, in_order[1:], strict=False)):
        raise ValueError(
            f"{table}: {axis} goes back for {metric!r}; keep one phase with --phase or pick another --x"
        )
    # An axis that stands still over several rows (env_steps through an offline-to-online run's
    # offline phase) is read at the last of them: the state that phase handed on.
    last: dict[float, float] = {}
    for x, v in points:
        last[x] = v
    steps = np.array(list(last), dtype=np.float64)
    values = np.array(list(last.values()), dtype=np.float64)
    return steps, values


def _unit(rows: list[dict[str, str]], header: list[str], table: Path) -> str:
    """The ``*_steps`` column equal to ``step`` on every row where it is filled; else ``step``."""
    for column in header[1:]:
        if not column.endswith("_steps"):
            continue
        pairs = [(row.get(STEP_COLUMN) or "", row.get(column) or "") for row in rows]
        filled = [(s, c) for s, c in pairs if s and c]
        try:
            if filled and all(float(s) == float(c) for s, c in filled):
                return column
        except ValueError:
            continue
    log.warning("%s: no *_steps column equals %r; its steps are counted as %r", table, STEP_COLUMN, STEP_COLUMN)
    return STEP_COLUMN


def parse_group_args(args: Sequence[str]) -> list[tuple[str | None, list[Path]]]:
    """Split command-line arguments into ``(name, run dirs)``: ``name=dir1,dir2`` is a named group,
    a path (an existing one wins over the ``=`` reading, as ``seed=0`` sweep folders) one run or a
    sweep folder with no name yet.

    Raises:
        ValueError: an empty name or run list in ``name=dirs``.
        FileNotFoundError: a path that does not exist.
    """
    out: list[tuple[str | None, list[Path]]] = []
    for arg in args:
        path = Path(arg)
        name, _, dirs = arg.partition("=")
        # A name holds no "/": runs/sweep/seed=0 that does not exist is a missing path, not a group.
        if "=" in arg and not path.exists() and "/" not in name:
            paths = [Path(d) for d in dirs.split(",") if d]
            if not name or not paths:
                raise ValueError(f"{arg!r}: expected NAME=RUN_DIR[,RUN_DIR...] with a name and at least one run")
            out.append((name, [p for d in paths for p in expand_run_dirs(d)]))
        else:
            out.append((None, expand_run_dirs(path)))
    return out


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config mappings as dotted keys (``{"algo": {"lr": 1}}`` -> ``{"algo.lr": 1}``)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _text(value: Any) -> str:
    """A config value as it reads in a label (lists and mappings as compact JSON)."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def label_runs(runs: Sequence[RunCurve], group_by: Sequence[str] | None = None) -> list[str]:
    """A method label per run: ``key=value`` of the ``group_by`` keys, or by default the algorithm's
    name and the config keys whose values differ between ``runs`` (:data:`LABEL_IGNORED` left out).

    Raises:
        ValueError: a ``group_by`` key missing from a run's config (the run and close keys named).
    """
    flat = [flatten(run.config) for run in runs]
    if group_by:
        labels = []
        for run, keys in zip(runs, flat, strict=True):
            for key in group_by:
                if key not in keys:
                    close = difflib.get_close_matches(key, list(keys), n=3)
                    hint = f"; close keys: {', '.join(close)}" if close else ""
                    raise ValueError(f"--group-by: {run.path / 'config.json'} has no key {key!r}{hint}")
            labels.append(" ".join(f"{key}={_text(keys[key])}" for key in group_by))
        return labels
    every = sorted({key for keys in flat for key in keys} - LABEL_IGNORED - {"algo.name"})
    missing = object()
    differing = [key for key in every if len({_text(keys.get(key, missing)) for keys in flat}) > 1]
    labels = []
    for keys in flat:
        parts = [_text(keys["algo.name"])] if "algo.name" in keys else []
        parts += [f"{key}={_text(keys[key])}" for key in differing if key in keys]
        labels.append(" ".join(parts) or "runs")
    return labels


def make_groups(
    specs: Sequence[tuple[str | None, Sequence[Path]]],
    metric: str,
    *,
    group_by: Sequence[str] | None = None,
    x: str | None = None,
    phase: str | None = None,
) -> list[Group]:
    """Load every run and group them into methods (see the module docstring), in first-seen order.

    Named groups keep their names; unnamed runs are labelled by :func:`label_runs` (together, so
    the keys that differ between them name the methods).

    Raises:
        ValueError: no runs, an empty group, a run given twice, a group name given twice, runs
            counted in different step units, or any error of :func:`load_run` / :func:`label_runs`.
    """
    if not specs:
        raise ValueError("no runs given: pass run directories, sweep folders or NAME=DIR,DIR groups")
    seen: dict[Path, str] = {}
    for name, paths in specs:
        if not paths:
            raise ValueError(f"group {name!r}: no runs (each method needs at least one run)")
        for p in paths:
            key = p.resolve()
            if key in seen:
                raise ValueError(f"{p}: given twice (first as {seen[key]}); a run belongs to one group")
            seen[key] = str(p)
    loaded = [(name, [load_run(p, metric, x=x, phase=phase) for p in paths]) for name, paths in specs]
    units = {run.unit: run.path for _, runs in loaded for run in runs}
    if len(units) > 1:
        which = ", ".join(f"{unit} ({path})" for unit, path in units.items())
        raise ValueError(f"runs count steps in different units: {which}; compare runs of one unit, or pick one axis with --x")
    unnamed = [run for name, runs in loaded if name is None for run in runs]
    derived = label_runs(unnamed, group_by) if unnamed else []
    named = [name for name, _ in loaded if name is not None]
    for i, name in enumerate(named):
        if name in named[:i] or name in derived:
            other = "another NAME=... group" if name in named[:i] else "the label of other runs given"
            raise ValueError(f"group name {name!r} is also {other}; give each method its own name")
    labels = iter(derived)
    members: dict[str, list[RunCurve]] = {}
    for name, runs in loaded:
        for run in runs:
            members.setdefault(name if name is not None else next(labels), []).append(run)
    return [Group(name, tuple(runs)) for name, runs in members.items()]


def common_grid(groups: Sequence[Group], points: int = 50) -> Grid:
    """The step grid every run is read on: from the latest first step to the earliest last step.

    When every run was evaluated at the same steps, the grid is those steps; otherwise ``points``
    evenly spaced steps. Runs that go on past the shortest are clipped to it (said in the notes).

    Raises:
        ValueError: the runs share no step range, or ``points`` < 2.
    """
    if points < 2:
        raise ValueError(f"--points: expected an integer >= 2, got {points}")
    runs = [run for group in groups for run in group.runs]
    unit = runs[0].unit
    lo = max(float(run.steps[0]) for run in runs)
    hi = min(float(run.steps[-1]) for run in runs)
    if lo > hi:
        first = max(runs, key=lambda r: r.steps[0])
        last = min(runs, key=lambda r: r.steps[-1])
        raise ValueError(
            f"the runs share no {unit} range: {first.path} starts at {lo:g}, {last.path} ends at {hi:g}"
        )
    notes: list[str] = []
    longer = [run for run in runs if run.steps[-1] > hi]
    if longer:
        shortest = min(runs, key=lambda r: r.steps[-1])
        notes.append(
            f"runs clipped to the shortest ({shortest.path} ends at {hi:g} {unit}): "
            + ", ".join(f"{run.path} ({run.steps[-1]:g})" for run in longer)
        )
        log.warning("%s", notes[-1])
    first_steps = runs[0].steps
    if all(np.array_equal(run.steps, first_steps) for run in runs):
        steps = first_steps[(first_steps >= lo) & (first_steps <= hi)]
    else:
        steps = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    return Grid(np.asarray(steps, dtype=np.float64), unit, notes)


def sample(run: RunCurve, steps: np.ndarray, align: Align = "last") -> np.ndarray:
    """``run``'s metric at ``steps`` (inside its logged range): the last value logged at or before
    each step, or the linear interpolation between the two evaluations around it.

    Raises:
        ValueError: a step outside the run's range, or an unknown ``align``.
    """
    steps = np.asarray(steps, dtype=np.float64)
    if steps.size and (steps.min() < run.steps[0] or steps.max() > run.steps[-1]):
        raise ValueError(f"{run.path}: steps {steps.min():g}..{steps.max():g} fall outside its range "
                         f"{run.steps[0]:g}..{run.steps[-1]:g} {run.unit}")
    if align == "linear":
        return np.interp(steps, run.steps, run.values)
    if align == "last":
        return run.values[np.searchsorted(run.steps, steps, side="right") - 1]
    raise ValueError(f"--align: expected 'last' or 'linear', got {align!r}")


def score_matrix(group: Group, steps: np.ndarray, align: Align = "last") -> np.ndarray:
    """The group's runs sampled at ``steps``: an array ``[runs, steps]``."""
    return np.stack([sample(run, steps, align) for run in group.runs])


__all__ = [
    "LABEL_IGNORED",
    "Align",
    "Grid",
    "Group",
    "RunCurve",
    "common_grid",
    "expand_run_dirs",
    "flatten",
    "label_runs",
    "load_run",
    "make_groups",
    "parse_group_args",
    "sample",
    "score_matrix",
]
