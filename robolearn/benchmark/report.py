"""The benchmark's results page: ``RESULTS.md`` and one PNG of learning curves per entry, from the run
directories that ``robolearn benchmark run`` wrote.

Input layout (the issue 17 contract): ``<out>/<entry id>/<lib>/seed<S>/`` is a run directory of any
library (``config.json``, ``metrics.csv`` with ``env_steps``, ``eval/return`` and ``time/train_s``,
and ``summary.json`` once the run finished its budget); ``<out>/table.json`` is the resolved table
and ``<out>/runs.jsonl`` one line per finished run (its load average among others).

Only finished runs (``summary.json`` with ``env_steps`` at least the entry's budget) enter the
statistics: an unfinished run's last evaluation is not a final return. Missing and unfinished runs
are listed under their entry, and the seed count says how many made it ("2/3"). So is a finished run
that ``stale`` (given by ``robolearn benchmark report``: the run's ``config.json`` against what the
table's command gives it now, :func:`robolearn.benchmark.schedule.recipe_differences`) says another
recipe made: two recipes never share a row.

What the page reports per entry and library:

- the IQM of the final evaluation returns over seeds with a 95% stratified-bootstrap interval
  (rliable, through :mod:`robolearn.analysis.compare`; fixed seed, so the page is reproducible);
- per return threshold, the env steps and the training seconds (``time/train_s``: evaluation
  excluded) at the first evaluation reaching it: the median over seeds, a seed that never reached it
  counting as never (so the median is "not reached" once half the seeds or more missed), with
  "k/n reached";
- env steps per training second (the median of the summaries' rates);
- on the robolearn row, the ratio of SB3's time to robolearn's at each threshold (SB3 at its best:
  the SB3 configuration that reached that threshold soonest; a lower bound from SB3's whole
  training time where none reached it) and the verdict on the issue's target: robolearn reaches
  every threshold that either side reached at least 3x sooner, and its final IQM is no lower than
  the SB3 configuration with the higher final IQM (see :func:`_verdict`);
- under each entry, why: every time ratio taken apart into SB3's env steps over robolearn's and its
  training seconds per env step over robolearn's (exactly their product), and each library's
  training seconds per env step in the second half of its runs split into collection and updates,
  from their ``time/update_s`` column or, for runs that predate it, from the runs of a
  ``robolearn benchmark profile`` folder (the profile, :func:`_why`); and each library's final IQM
  beside the IQM of each seed's mean evaluation over the last quarter of its budget and of its best
  evaluation, which tells a lower plateau from a last evaluation caught in a swing.

Nothing of the report depends on the clock: the same run directories and repository give
byte-identical markdown.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.analysis.compare import Estimate, bootstrap_interval, iqm, new_figure, png_bytes, write_files
from robolearn.analysis.runs import Group, RunCurve, common_grid, load_run, score_matrix
from robolearn.benchmark.schedule import provenance
from robolearn.utils.config import read_json_object

log = logging.getLogger(__name__)

ROBOLEARN = "robolearn"
"""The lib id of robolearn's own runs; every other lib starting with ``sb3`` is an SB3 configuration."""
TARGET_SPEEDUP = 3.0
"""The issue's target: robolearn reaches each threshold at least this many times sooner than SB3."""
CURVE_POINTS = 50
"""Grid size of a curve whose runs were evaluated at different steps (always so in seconds)."""
CONFIDENCE = 0.95
"""Coverage of every interval on the page."""


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One finished run, as read from its directory."""

    seed: int
    """The run's seed."""
    path: Path
    """Its directory."""
    steps: np.ndarray
    """Env steps of its evaluations, increasing."""
    seconds: np.ndarray
    """Training seconds (``time/train_s``) at those evaluations."""
    returns: np.ndarray
    """The evaluation returns."""
    steps_per_s: float
    """Env steps per training second over the whole run (its summary)."""
    split: tuple[float, float, float] | None = None
    """Env steps, training seconds and update seconds over the second half of the run (:func:`_split`);
    ``None`` where the run did not record ``time/update_s`` (runs made before it was logged)."""


@dataclasses.dataclass(frozen=True)
class Reach:
    """When a library's seeds first reached one return threshold."""

    threshold: float
    """The return threshold."""
    steps: float
    """Median env steps over the seeds (``inf``: half the seeds or more never reached it)."""
    seconds: float
    """Median training seconds, likewise."""
    reached: int
    """Seeds that reached it."""
    runs: int
    """Seeds counted."""


@dataclasses.dataclass
class LibResult:
    """One library's (or SB3 configuration's) results on one entry."""

    lib: str
    """The lib id (``robolearn``, ``sb3_default``, ``sb3_zoo``)."""
    runs: list[RunResult]
    """Its finished runs, by seed."""
    expected: int
    """Seeds the table asks for."""
    final: Estimate | None
    """IQM of the final returns with its interval; ``None`` without a finished run."""
    reach: list[Reach]
    """One per threshold of the entry."""
    steps_per_s: float
    """Median env steps per training second (``nan`` without a finished run)."""
    notes: list[str]
    """Missing, unfinished, failed, unreadable or stale runs (one line each, for the page)."""
    failed: int
    """Seeds without a finished run whose last attempt failed (a non-zero exit status in
    ``runs.jsonl`` other than an interrupt's)."""
    stale: int
    """Finished seeds left out of the statistics: made by another recipe (``stale``)."""
    unreadable: int = 0
    """Seeds whose run says it finished but whose files cannot be read (left out of the statistics)."""

    @property
    def reportable(self) -> bool:
        """Whether there is anything to show: a finished run, a failed attempt, a stale run or an
        unreadable one (a library with only missing, unfinished or interrupted seeds is one still to run).
        """
        return bool(self.runs) or self.failed > 0 or self.stale > 0 or self.unreadable > 0


# -- the table ------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """A table (:class:`robolearn.benchmark.table.Table`, another dataclass, or the dict of
    ``table.json``) as plain dicts and lists, so the report reads one shape: the table's YAML keys.
    """
    # to_dict first: it spells fields as the YAML does (Table's zoo_reference.mean_return is "return").
    if callable(getattr(value, "to_dict", None)):
        return _plain(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _require(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise ValueError(f"{where}: no {key!r} (expected the keys of configs/benchmark/<name>.yaml)")
    return mapping[key]


def _entry_libs(entry: Mapping[str, Any], libs: Sequence[str]) -> list[str]:
    """The table's libs this entry runs: ``sb3_zoo`` only where the Zoo has hyperparameters."""
    zoo = (entry.get("sb3") or {}).get("zoo")
    return [lib for lib in libs if lib != "sb3_zoo" or zoo]


# -- reading runs ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _NotCounted:
    """A seed without a finished run to count, and why."""

    unfinished: bool
    """Its folder holds a run short of the budget (or without a summary yet); else missing or unreadable."""
    note: str
    """The note for the page (``seed <S>: ...``)."""
    unreadable: bool = False
    """Its folder holds a run that says it finished but whose files cannot be read."""


def _read_run(path: Path, seed: int, budget: int) -> RunResult | _NotCounted:
    """The finished run in ``path``, or why it does not count."""
    rel = f"seed {seed}"
    if not path.is_dir():
        return _NotCounted(False, f"{rel}: missing")
    summary_path = path / "summary.json"
    if not summary_path.is_file():
        return _NotCounted(True, f"{rel}: unfinished (no summary.json yet)")
    try:
        summary = read_json_object(summary_path)
        done = float(summary.get("env_steps", 0))
        if done < budget:
            return _NotCounted(True, f"{rel}: unfinished ({done:,.0f} of {budget:,} env steps)")
        curve = load_run(path, "eval/return", x="env_steps")
        clock = load_run(path, "time/train_s", x="env_steps")
    except (ValueError, OSError) as exc:
        return _NotCounted(False, f"{rel}: unreadable ({exc})", unreadable=True)
    # SB3 runs may log time/train_s on other rows than the evaluations; where it shares the row (as
    # robolearn's runner writes it) the interpolation returns it exactly.
    seconds = np.interp(curve.steps, clock.steps, clock.values)
    train_s = float(summary.get("train_time_s", math.nan))
    rate = summary.get("env_steps_per_s")
    steps_per_s = float(rate) if rate is not None else done / train_s if train_s > 0 else math.nan
    return RunResult(seed, path, curve.steps, seconds, curve.values, steps_per_s, _split(path))


def _split(path: Path) -> tuple[float, float, float] | None:
    """(env steps, training seconds, update seconds) between the first ``metrics.csv`` row at or past
    half the run's last env step and its last row: the run's steady state, past any warm-up (SAC's
    random steps) and start-up; ``None`` without ``time/update_s`` or two such rows.
    """
    rows = []
    try:
        with (path / "metrics.csv").open(newline="") as fh:
            for row in csv.DictReader(fh):
                try:
                    rows.append((float(row["env_steps"]), float(row["time/train_s"]), float(row["time/update_s"])))
                except (KeyError, TypeError, ValueError):  # no such column, or not on this row
                    continue
    except OSError:
        return None
    rows = [r for r in rows if all(math.isfinite(v) for v in r)]
    if len(rows) < 2:
        return None
    last = rows[-1]
    first = next(r for r in rows if r[0] >= last[0] / 2)
    if first is last:
        first = rows[-2]
    steps, train, update = (b - a for a, b in zip(first, last, strict=True))
    return (steps, train, update) if steps > 0 and train > 0 else None


def _reach(runs: Sequence[RunResult], threshold: float) -> Reach:
    steps, seconds = [], []
    for run in runs:
        hit = np.flatnonzero(run.returns >= threshold)
        steps.append(float(run.steps[hit[0]]) if hit.size else math.inf)
        seconds.append(float(run.seconds[hit[0]]) if hit.size else math.inf)
    reached = sum(math.isfinite(s) for s in steps)
    if not runs:
        return Reach(threshold, math.nan, math.nan, 0, 0)
    return Reach(threshold, float(np.median(steps)), float(np.median(seconds)), reached, len(runs))


def _last_exits(out: Path) -> dict[tuple[str, str, int], int]:
    """``(entry, lib, seed)`` -> the exit status of its latest subprocess in ``runs.jsonl``."""
    exits = {}
    for row in _runs_rows(out):
        try:
            exits[str(row["entry"]), str(row["lib"]), int(row["seed"])] = int(row["returncode"])
        except (KeyError, TypeError, ValueError):
            continue
    return exits


StaleCheck = Callable[[Path], "str | None"]
"""Given a finished run's directory, how its recipe differs from the table's now (``key: was X, now
Y``; ``None``: the same recipe, or not checked)."""


def _lib_result(
    out: Path, entry: Mapping[str, Any], lib: str, seeds: Sequence[int], reps: int, seed: int,
    exits: Mapping[tuple[str, str, int], int] | None = None, stale: StaleCheck | None = None,
) -> LibResult:
    budget = int(_require(entry, "env_steps", f"entry {entry.get('id')!r}"))
    runs: list[RunResult] = []
    notes: list[str] = []
    failed = stale_runs = unreadable = 0
    for s in seeds:
        path = out / str(entry["id"]) / lib / f"seed{s}"
        got = _read_run(path, int(s), budget)
        if isinstance(got, _NotCounted):
            note = got.note
            unreadable += got.unreadable
            # A run that crashed (diverged, out of memory...) is not a run still under way: say so,
            # since leaving it out of the statistics favours the library whose bad seeds crash.
            code = (exits or {}).get((str(entry["id"]), lib, int(s)))
            if code is not None and code != 0 and got.unfinished:
                interrupted = code in (130, -2)
                what = "interrupted" if interrupted else "failed"
                failed += 0 if interrupted else 1
                note += f"; its last attempt {what} (exit status {code}, see {entry['id']}/{lib}/{path.name}/benchmark.log)"
            notes.append(note)
            continue
        differences = stale(path) if stale is not None else None
        if differences:
            stale_runs += 1
            notes.append(f"seed {s}: stale: made by another recipe ({differences}); rerun with "
                          "`benchmark run ... rerun_stale=true`")
        else:
            runs.append(got)
    final = None
    if runs:
        finals = np.array([[run.returns[-1]] for run in runs])
        point, low, high = bootstrap_interval(lib, finals, iqm, reps, seed, CONFIDENCE)
        final = Estimate(float(point[0]), float(low[0]), float(high[0]))
    thresholds = [float(t) for t in entry.get("thresholds") or []]
    rate = float(np.median([run.steps_per_s for run in runs])) if runs else math.nan
    return LibResult(lib, runs, len(seeds), final, [_reach(runs, t) for t in thresholds], rate, notes,
                     failed=failed, stale=stale_runs, unreadable=unreadable)


def _sb3_best(results: Sequence[LibResult]) -> LibResult | None:
    """The SB3 configuration with the higher final IQM (the first on a tie)."""
    sb3 = [r for r in results if r.lib.startswith("sb3") and r.final is not None]
    return max(sb3, key=lambda r: r.final.value) if sb3 else None  # type: ignore[union-attr]


def _train_seconds(result: LibResult) -> float:
    """Median training seconds of a library's finished runs (their last evaluation's ``time/train_s``)."""
    return float(np.median([run.seconds[-1] for run in result.runs])) if result.runs else math.nan


def _fastest(sb3: Sequence[LibResult], index: int) -> LibResult:
    """The SB3 configuration that reached threshold ``index`` soonest (among equals, both never,
    the better final IQM): the opponent of robolearn's time there.
    """
    return min(sb3, key=lambda r: (r.reach[index].seconds, -r.final.value if r.final else math.inf))


def _verdict(ours: LibResult, results: Sequence[LibResult]) -> tuple[list[str], str, str]:
    """The time-ratio cells (one per threshold), the verdict of the issue's target, and
    ``" (vs <lib>)"`` when one SB3 configuration was the opponent at every threshold.

    SB3 at its best is the hardest opponent for each claim: per threshold the SB3 configuration
    that reached it soonest, for the final return the one with the higher final IQM. A threshold
    robolearn reached and no SB3 configuration did counts only if SB3's whole training time (the
    shortest median over its configurations) is already 3x robolearn's time to it: SB3 might have
    reached it just after its budget. A comparison on fewer seeds than the table asks for says so.
    """
    sb3 = [r for r in results if r.lib.startswith("sb3") and r.runs]
    best = _sb3_best(sb3)
    if ours.final is None or best is None or best.final is None:
        return ["n/a"] * len(ours.reach), "n/a", ""
    cells: list[str] = []
    opponents: list[str | None] = []
    judged: list[bool] = []
    for i, mine in enumerate(ours.reach):
        fastest = _fastest(sb3, i)
        a, b = mine.seconds, fastest.reach[i].seconds
        opponents.append(fastest.lib if math.isfinite(b) else None)
        if math.isfinite(a) and math.isfinite(b):
            ratio = b / a if a > 0 else math.inf
            cells.append(f"{ratio:.1f}x")
            judged.append(ratio >= TARGET_SPEEDUP)
        elif math.isfinite(a):
            # Not reached within SB3's budget: its time to it is at least its whole training time.
            bound = min(_train_seconds(r) for r in sb3) / a if a > 0 else math.inf
            cells.append(f"SB3 not reached (≥ {bound:.1f}x)")
            judged.append(bound >= TARGET_SPEEDUP)
        elif math.isfinite(b):
            cells.append("robolearn not reached")
            judged.append(False)
        else:
            cells.append("neither reached")
    named = sorted({lib for lib in opponents if lib is not None})
    if len(named) > 1:
        cells = [f"{c} (vs {lib})" if lib else c for c, lib in zip(cells, opponents, strict=True)]
    against = f" (vs {named[0] if named else best.lib})" if len(named) <= 1 else ""
    if not judged:
        verdict = "n/a"
    else:
        verdict = "met" if all(judged) and ours.final.value >= best.final.value else "missed"
    short = [f"{r.lib} {len(r.runs)}/{r.expected}" for r in (ours, *sb3) if len(r.runs) < r.expected]
    if short and verdict != "n/a":
        verdict += f", incomplete ({', '.join(short)} seeds)"
    return cells, verdict, against


# -- why: the time ratio taken apart, and where the training seconds go ----------------------------
def _why(
    ours: LibResult | None, results: Sequence[LibResult],
    profiled: Mapping[str, list[tuple[float, float, float]]] | None = None,
) -> list[str]:
    """The page's explanation of each time ratio: SB3's time over robolearn's to a threshold is
    exactly (SB3's env steps to it over robolearn's) x (SB3's training seconds per env step there over
    robolearn's), medians over seeds; so a miss reads as sample efficiency, speed per env step, or
    both. Then each library's training seconds per env step in the second half of its runs (past any
    warm-up), split into collection (acting, physics, storing) and updates: the profile, from the
    table's runs where they recorded ``time/update_s``, else from ``profiled`` (lib -> the splits of
    its ``benchmark profile`` runs). Between the two, each library's final IQM beside its late and
    best evaluations (:func:`_final_breakdown`), which is what a final-return verdict rests on.
    """
    lines: list[str] = []
    sb3 = [r for r in results if r.lib.startswith("sb3") and r.runs]
    if ours is not None and ours.runs and sb3:
        for i, mine in enumerate(ours.reach):
            opponent = _fastest(sb3, i)
            other, lib = opponent.reach[i], opponent.lib
            if not (math.isfinite(mine.seconds) and math.isfinite(other.seconds)) or min(mine.steps, mine.seconds) <= 0:
                continue
            steps_ratio = other.steps / mine.steps
            mine_us, other_us = 1e6 * mine.seconds / mine.steps, 1e6 * other.seconds / other.steps
            lines.append(
                f"≥{_thr(mine.threshold)}, {lib} / robolearn = {other.seconds / mine.seconds:.2f}x: "
                f"{steps_ratio:.2f}x the env steps ({_steps(other.steps)} vs {_steps(mine.steps)}) "
                f"x {other_us / mine_us:.2f}x the training seconds per env step "
                f"({_us(other_us)} vs {_us(mine_us)})"
            )
    if ours is not None and ours.runs and sb3:
        finals = [f"{r.lib} {' / '.join(_ret(v) for v in _final_breakdown(r.runs))}" for r in results if r.runs]
        lines.append(
            "final return, IQM over seeds of the last evaluation / the mean of each seed's evaluations in the "
            "last quarter of its budget / each seed's best evaluation: " + "; ".join(finals)
        )
    parts = []
    for result in results:
        splits = [run.split for run in result.runs if run.split is not None]
        source = ""
        if not splits and profiled is not None:
            splits, source = profiled.get(result.lib, []), " (profile run)"
        if not splits:
            continue
        collect = float(np.median([1e6 * (t - u) / n for n, t, u in splits]))
        update = float(np.median([1e6 * u / n for n, t, u in splits]))
        share = float(np.median([u / t for _, t, u in splits]))
        parts.append(f"{result.lib}{source} {_us(collect)} collecting + {_us(update)} updating ({share:.0%} updates)")
    if parts:
        lines.append("training seconds per env step, second half of each run, median over seeds: " + "; ".join(parts))
    return lines


LATE_SHARE = 0.25
"""The last part of a run's budget whose evaluations the page averages (the final return's context)."""


def _final_breakdown(runs: Sequence[RunResult]) -> tuple[float, float, float]:
    """IQM over seeds of the final evaluation, of the mean of the evaluations in the last quarter of
    each run (env steps at or past ``1 - LATE_SHARE`` of its last), and of each run's best evaluation.

    The target compares the first; the other two say whether a final below SB3's is a lower plateau
    (all three low) or a last evaluation caught in a swing (the late mean and the best well above it).
    """
    late = [float(run.returns[run.steps >= (1.0 - LATE_SHARE) * run.steps[-1]].mean()) for run in runs]
    columns = np.array([[run.returns[-1] for run in runs], late, [run.returns.max() for run in runs]]).T
    return tuple(float(v) for v in iqm(columns))  # type: ignore[return-value]


def _profiled(profile: Path, entry: str) -> dict[str, list[tuple[float, float, float]]]:
    """Lib -> the second-half splits of the finished runs of ``entry`` in a profile folder."""
    found: dict[str, list[tuple[float, float, float]]] = {}
    folder = profile / entry
    if not folder.is_dir():
        return found
    for lib_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        for run in sorted(lib_dir.glob("seed*")):
            # A finished run only (a summary), and not one set aside (seed<S>.stale-..., .short-...).
            if run.name[4:].isdigit() and (run / "summary.json").is_file():
                split = _split(run)
                if split is not None:
                    found.setdefault(lib_dir.name, []).append(split)
    return found


def _us(value: float) -> str:
    """Microseconds, as the page writes them."""
    return f"{value:,.0f} µs" if value >= 10 else f"{value:.1f} µs"


# -- curves ---------------------------------------------------------------------------------------
def _curve(runs: Sequence[RunResult], x: str, name: str, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(grid, IQM, low, high) of the runs' returns against env steps or training seconds."""
    curves = [
        RunCurve(run.path, {}, x, run.steps if x == "env_steps" else run.seconds, run.returns) for run in runs
    ]
    group = Group(name, tuple(curves))
    if x == "env_steps":
        grid = common_grid([group], CURVE_POINTS).steps
        scores = score_matrix(group, grid, "last")
    else:
        # Seconds never coincide between runs, and the runs of one budget end at different times: an
        # even grid from the latest first evaluation to the latest end, a finished run holding its
        # final return after its end (what it delivers from then on). Clipping to the fastest seed
        # would cut every library's curve short of its final return.
        lo = max(float(c.steps[0]) for c in curves)
        hi = max(float(c.steps[-1]) for c in curves)
        grid = np.linspace(lo, hi, CURVE_POINTS) if hi > lo else np.array([lo])
        scores = np.stack([c.values[np.searchsorted(c.steps, grid, side="right") - 1] for c in curves])
    point, low, high = bootstrap_interval(name, scores, iqm, reps, seed, CONFIDENCE)
    return grid, point, low, high


def _entry_png(entry: Mapping[str, Any], results: Sequence[LibResult], reps: int, seed: int) -> bytes:
    fig = new_figure(11.0, 4.2)
    axes = fig.subplots(1, 2, sharey=True)
    for index, result in enumerate(results):
        if not result.runs:
            continue
        label = f"{result.lib} ({len(result.runs)}/{result.expected} seeds)"
        for ax, x in zip(axes, ("env_steps", "time/train_s"), strict=True):
            grid, point, low, high = _curve(result.runs, x, result.lib, reps, seed)
            color = f"C{index}"  # one colour per lib on both panels and every entry's figure
            ax.plot(grid, point, color=color, label=label, marker="." if grid.size < 30 else None)
            ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
    for threshold in entry.get("thresholds") or []:
        for ax in axes:
            ax.axhline(float(threshold), color="grey", linestyle=":", linewidth=1)
    axes[0].set_xlabel("env steps")
    axes[1].set_xlabel("training seconds (evaluation excluded)")
    axes[0].set_ylabel("IQM eval return")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    if any(r.runs for r in results):
        axes[0].legend(fontsize="small")
    fig.suptitle(f"{entry['id']}: {entry.get('task')} {str(entry.get('algo', '')).upper()}, "
                 f"IQM with {CONFIDENCE:.0%} bootstrap CI")
    return png_bytes(fig)


# -- the header -----------------------------------------------------------------------------------
def _recorded(configs: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[str]:
    """The distinct values the runs recorded under any of ``keys`` (sorted)."""
    return sorted({str(c[k]) for c in configs for k in keys if c.get(k) not in (None, "")})


LOAD_KEYS: dict[str, str] = {"load_before": "when runs started", "load_after": "when runs ended"}
"""The load-average fields of ``runs.jsonl`` (robolearn.benchmark.schedule's ``RunRecord``) and how the page says them."""


def _load_line(out: Path) -> str | None:
    """From ``runs.jsonl``: the 1-minute load averages when runs started and ended, the run
    wall-clock in total and the span of start times (recorded times, so the page stays reproducible).
    """
    path = out / "runs.jsonl"
    if not path.is_file():
        return None
    loads: dict[str, list[float]] = {}
    walls: list[float] = []
    started: list[str] = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s, line %d: not JSON; left out", path, n)
            continue
        if not isinstance(row, dict):
            continue
        for key, value in row.items():
            # [1, 5, 15]-minute loads as os.getloadavg gives them; a plain number is read as the 1-minute one.
            first = value[0] if isinstance(value, list) and value else value
            if key in LOAD_KEYS and isinstance(first, (int, float)):
                loads.setdefault(key, []).append(float(first))
        if isinstance(row.get("wall_s"), (int, float)):
            walls.append(float(row["wall_s"]))
        if isinstance(row.get("started"), str):
            started.append(row["started"])
    parts = [
        f"1-minute load average {LOAD_KEYS[key]}: median {np.median(loads[key]):.2f}, "
        f"min {min(loads[key]):.2f}, max {max(loads[key]):.2f} over {len(loads[key])} runs"
        for key in LOAD_KEYS if key in loads
    ]
    if walls:
        parts.append(f"{sum(walls) / 3600:.2f} h of run wall-clock in total over {len(walls)} runs")
    if started:
        parts.append(f"runs started from {min(started)} to {max(started)}")
    return "; ".join(parts) or None


VERSION_NAMES: dict[str, str] = {
    "python": "Python", "torch": "torch", "mujoco": "mujoco", "stable_baselines3": "Stable-Baselines3",
    "robolearn": "robolearn",
}
"""The ``versions`` keys of ``runs.jsonl`` (robolearn.benchmark.schedule's ``provenance``) and their names on the page."""


def _runs_rows(out: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``<out>/runs.jsonl`` (lines that are not are skipped)."""
    path = out / "runs.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _cpu_cores(machine: Mapping[str, Any]) -> str:
    """``"<cpu>, <n> logical cores"`` of a ``runs.jsonl`` row's ``machine``."""
    cores = machine.get("logical_cores")
    return f"{machine.get('cpu') or 'unknown CPU'}, {cores if cores is not None else '?'} logical cores"


def _machine(row: Mapping[str, Any]) -> str | None:
    machine = row.get("machine")
    if not isinstance(machine, Mapping):
        return None
    return f"{_cpu_cores(machine)}, {machine.get('platform') or 'unknown platform'}"


def _hardware(row: Mapping[str, Any]) -> str | None:
    """The CPU and its logical cores a ``runs.jsonl`` row ran on: what sets a run's seconds (the
    platform string, a kernel build, does not).
    """
    machine = row.get("machine")
    if not isinstance(machine, Mapping) or not machine.get("cpu"):
        return None
    return _cpu_cores(machine)


def _run_hardware(out: Path) -> dict[tuple[str, str, int], set[str]]:
    """``(entry, lib, seed)`` -> the hardware of the attempts that made the run now in its folder:
    its last fresh start and the resumes after it (a run resumed on another machine has two). An
    earlier attempt (a run set aside as stale or short, a failed start) made nothing the page reads.
    """
    found: dict[tuple[str, str, int], set[str]] = {}
    for row in _runs_rows(out):
        hardware = _hardware(row)
        try:
            key = (str(row["entry"]), str(row["lib"]), int(row["seed"]))
        except (KeyError, TypeError, ValueError):
            continue
        if row.get("state") == "fresh":
            found[key] = set()
        if hardware:
            found.setdefault(key, set()).add(hardware)
    return found


def _machines_of(entry: str, results: Sequence[LibResult],
                 hardware: Mapping[tuple[str, str, int], set[str]]) -> dict[str, list[str]]:
    """Hardware -> the runs of one entry's counted results that ran on it (``"<lib> seed <S>"``):
    the libraries' seconds compare only where there is one key.
    """
    where: dict[str, list[str]] = {}
    for result in results:
        for run in result.runs:
            for machine in sorted(hardware.get((entry, result.lib, run.seed), ())):
                where.setdefault(machine, []).append(f"{result.lib} seed {run.seed}")
    return where


def _header(table: Mapping[str, Any], out: Path, configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's header: commit, machine and versions as the runs recorded them (``runs.jsonl``;
    every distinct value when runs differ), the page's own environment only where nothing was recorded.
    """
    rows = _runs_rows(out)
    here: dict[str, Any] = {}  # the page's own environment, read only for what the runs did not record
    generated = "not recorded by the runs: where this page was generated"

    def _here() -> dict[str, Any]:
        if not here:
            here.update(provenance())
        return here

    commits = sorted({
        f"`{str(r['git_commit'])[:12]}`" + (" (with uncommitted changes)" if r.get("git_dirty") else "")
        for r in rows if r.get("git_commit")
    } | {f"`{str(c)[:12]}`" for c in _recorded(configs, ("git_commit", "commit"))})
    if commits:
        commit = ", ".join(commits) + " (recorded by the runs)"
    else:
        head = _here()["git_commit"]
        commit = (f"`{head[:12]}` (not recorded by the runs: the repository's HEAD when this page was generated)"
                  if head else "unknown (not recorded by the runs)")
    machines = sorted({m for m in map(_machine, rows) if m})
    machine = ("; ".join(machines) + " (recorded by the runs)") if machines else f"{_machine(_here())} ({generated})"
    recorded = [r["versions"] for r in rows if isinstance(r.get("versions"), Mapping)]
    suffix = "recorded by the runs" if recorded else generated
    sb3 = _recorded(configs, ("sb3_version",))
    parts = []
    for key, name in VERSION_NAMES.items():
        values = {str(v[key]) for v in recorded or [_here()["versions"]] if v.get(key)}
        if key == "stable_baselines3" and sb3:
            values = (values | set(sb3)) if recorded else set(sb3)  # what the SB3 runs recorded wins
        parts.append(f"{name} {', '.join(sorted(values)) if values else 'not recorded'}")
    versions = ", ".join(parts) + f" ({suffix})"
    lines = [
        f"# Benchmark results: {table.get('name', 'table')}",
        "",
        f"- Commit: {commit}",
        f"- Machine: {machine}",
        f"- Versions: {versions}",
        f"- Seeds: {', '.join(str(s) for s in table.get('seeds') or [])}; "
        f"libraries: {', '.join(str(lib) for lib in table.get('libs') or [])}",
        # The reader needs what a number measures before the numbers: how returns and seconds were taken.
        "- Protocol: every (entry, library, seed) is one run with one torch thread and one MuJoCo thread, "
        "interleaved (seed-major, the libraries' order rotated by seed), an entry's runs on one machine "
        "(an entry whose runs ran on more than one says so, and its verdict carries it; where the page's "
        "runs used more than one CPU, each entry names its own). "
        "Returns are undiscounted episode returns in the task's reward units: the deterministic policy's "
        f"mean over {table.get('eval_episodes', '?')} evaluation worlds, one episode each (robolearn at its "
        "recipe's evaluation cadence, SB3 every entry's `eval_every` env steps with its VecNormalize "
        "statistics frozen). Training seconds and env steps/s (env steps over training seconds, median over "
        "seeds) exclude evaluation; env steps count every world's steps.",
    ]
    load = _load_line(out)
    if load:
        lines.append(f"- Load: {load}")
    return lines


# -- formatting -----------------------------------------------------------------------------------
def _ret(value: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.1f}"


def _thr(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,g}"


def _steps(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    return f"{value:,.0f}"


def _secs(value: float) -> str:
    return f"{value:,.0f} s" if value >= 100 else f"{value:.1f} s"


def _reach_cell(reach: Sequence[Reach], which: str) -> str:
    cells = []
    for r in reach:
        if r.runs == 0:
            cells.append(f"≥{_thr(r.threshold)}: n/a (no finished run)")
            continue
        value = r.steps if which == "steps" else r.seconds
        shown = (_steps(value) if which == "steps" else _secs(value)) if math.isfinite(value) else "not reached"
        cells.append(f"≥{_thr(r.threshold)}: {shown} ({r.reached}/{r.runs})")
    return "<br>".join(cells) or "—"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _zoo_cell(entry: Mapping[str, Any], ours: LibResult | None) -> str:
    ref = entry.get("zoo_reference")
    if not ref or ref.get("return") is None:
        return "—"
    ret = float(ref["return"])
    cell = f"{_ret(ret)} @ {_steps(float(ref.get('env_steps') or 0))}"
    # The third target: at least the Zoo's return at the same budget, or the gap stated.
    if ours is not None and ours.final is not None and ref.get("env_steps") == entry.get("env_steps"):
        gap = ours.final.value - ret
        cell += f" (robolearn {'+' if gap >= 0 else '−'}{_ret(abs(gap))})"
    return cell


def _relative(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()


# -- the page -------------------------------------------------------------------------------------
def write_report(
    table: Any,
    out_dir: Path | str,
    results_md: Path | str,
    figures_dir: Path | str,
    *,
    reps: int = 2000,
    seed: int = 0,
    stale: StaleCheck | None = None,
    profile: Path | str | None = None,
) -> Path:
    """Write ``results_md`` and one ``<entry id>.png`` per entry into ``figures_dir`` from the run
    directories under ``out_dir`` (see the module docstring).

    Args:
        table: the resolved table: the ``Table`` of :mod:`robolearn.benchmark.table`, any dataclass
            or mapping with the YAML's keys, or ``None`` to read ``<out_dir>/table.json``.
        out_dir: the benchmark's output folder (``<out>/<entry id>/<lib>/seed<S>/``).
        results_md: the markdown file to write (``RESULTS.md``).
        figures_dir: the folder of the PNG figures; RESULTS.md links them by relative paths.
        reps: bootstrap resamples per interval.
        seed: seed of every bootstrap (the page is reproducible).
        stale: tells a finished run made by another recipe than the table's now (left out of the
            statistics, listed under its entry); ``None``: no run is checked.
        profile: the out folder of ``robolearn benchmark profile``: its finished runs give the
            collection/update split of a library whose table runs did not record one.

    Returns:
        The path of the markdown file.

    Raises:
        FileNotFoundError: ``out_dir`` does not exist, or ``table`` is ``None`` and there is no
            ``table.json``.
        ValueError: the table lacks ``entries`` or an entry lacks ``id`` or ``env_steps``.
        ImportError: rliable is missing.
    """
    out = Path(out_dir)
    if not out.is_dir():
        raise FileNotFoundError(f"out={out}: no such benchmark output folder")
    if table is None:
        spec: Any = read_json_object(out / "table.json")
    else:
        spec = _plain(table)
    if not isinstance(spec, Mapping):
        raise ValueError(f"table: expected a Table or a mapping of the table's YAML keys, got {type(table).__name__}")
    entries = _require(spec, "entries", "table")
    seeds = [int(s) for s in spec.get("seeds") or []]
    libs = [str(lib) for lib in spec.get("libs") or [ROBOLEARN]]
    md_path, fig_dir = Path(results_md), Path(figures_dir)

    per_entry: list[tuple[Mapping[str, Any], list[LibResult]]] = []
    exits = _last_exits(out)
    hardware = _run_hardware(out)
    for entry in entries:
        _require(entry, "id", "table entry")
        results = [_lib_result(out, entry, lib, seeds, reps, seed, exits, stale) for lib in _entry_libs(entry, libs)]
        per_entry.append((entry, results))
    configs = [read_json_object(run.path / "config.json") for _, results in per_entry
               for r in results for run in r.runs]
    # An entry with nothing to show for any library (no finished run, failed attempt or stale run) is
    # one name in a "not run yet" line, not rows of n/a and an empty figure: a table in progress stays readable.
    pending = [str(entry["id"]) for entry, results in per_entry if not any(r.reportable for r in results)]
    per_entry = [(entry, results) for entry, results in per_entry if any(r.reportable for r in results)]
    finished = sum(len(r.runs) for _, results in per_entry for r in results)
    planned = sum(r.expected for _, results in per_entry for r in results) + sum(
        len(seeds) * len(_entry_libs(entry, libs)) for entry in entries if str(entry["id"]) in pending)

    # Render everything in memory first: a failure writes nothing, and figures land whole.
    figures = {f"{entry['id']}.png": _entry_png(entry, results, reps, seed) for entry, results in per_entry}
    md_path.parent.mkdir(parents=True, exist_ok=True)
    fig_dir.mkdir(parents=True, exist_ok=True)
    link_dir = _relative(fig_dir, md_path.parent)

    lines = _header(spec, out, configs)
    lines += [
        "",
        "## Summary",
        "",
        f"Finished runs: {finished} of {planned}."
        + (f" Not run yet (no finished run of any library): {', '.join(pending)}." if pending else ""),
        "",
        f"Final = the last evaluation of a finished run; IQM over seeds with a {CONFIDENCE:.0%} "
        f"stratified-bootstrap interval ({reps} resamples, seed {seed}). To threshold: the first "
        "evaluation at or above it, median over seeds (a seed that never reached it counts as never), "
        "and seeds reached / seeds finished; seconds are training seconds (evaluation excluded). "
        "SB3 best / robolearn: the ratio of training seconds to each threshold, against the SB3 "
        "configuration that reached it soonest; where no SB3 configuration reached it, a lower bound: "
        "SB3's training seconds for its whole budget over robolearn's. Target: every threshold either "
        f"side reached, reached by robolearn ≥ {TARGET_SPEEDUP:g}x sooner (a lower bound counts only "
        "if it is that), and a final IQM no lower than the SB3 configuration with the higher final "
        "IQM; a verdict on fewer seeds than the table's says which are missing. Figures: IQM "
        "return against env steps and against training seconds; in seconds, a run that finished "
        "holds its final return until the slowest seed of its library finishes. Why (under each entry): "
        "each time ratio is exactly SB3's env steps to the threshold over robolearn's times SB3's training "
        "seconds per env step there over robolearn's; then each library's final IQM beside the IQM of each "
        "seed's mean evaluation over the last quarter of its budget and of its best evaluation (a lower "
        "plateau, or a last evaluation caught in a swing); then each library's seconds per env step in the "
        "second half of its runs, collecting (acting, physics, storing) and updating, from the runs' "
        "`time/update_s`, or marked \"(profile run)\" from `robolearn benchmark profile` runs (seed 0, a "
        "part of the budget) where the table's runs predate that column.",
        "",
        "| entry | lib | seeds | final IQM [95% CI] | env steps to threshold | training s to threshold "
        "| env steps/s | SB3 best / robolearn time | target | Zoo published |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    machines = {str(entry["id"]): _machines_of(str(entry["id"]), results, hardware) for entry, results in per_entry}
    page_machines = {m for ran_on in machines.values() for m in ran_on}
    for entry, results in per_entry:
        ours = next((r for r in results if r.lib == ROBOLEARN), None)
        for result in results:
            final = (f"{_ret(result.final.value)} [{_ret(result.final.low)}, {_ret(result.final.high)}]"
                     if result.final is not None else "n/a")
            rate = f"{result.steps_per_s:,.0f}" if math.isfinite(result.steps_per_s) else "n/a"
            ratio = verdict = zoo = ""
            if result is ours:
                cells, verdict, against = _verdict(ours, results)
                ran_on = machines[str(entry["id"])]
                if len(ran_on) > 1 and verdict != "n/a":
                    # A ratio of seconds across two CPUs measures the CPUs as well as the libraries.
                    verdict += f", runs on {len(ran_on)} machines"
                ratio = "<br>".join(f"≥{_thr(r.threshold)}: {c}" for r, c in zip(ours.reach, cells, strict=True))
                ratio = (ratio or "—") + against
                zoo = _zoo_cell(entry, ours)
            lines.append(
                f"| {_md(str(entry['id']))} | {result.lib} | {len(result.runs)}/{result.expected} | {final} "
                f"| {_reach_cell(result.reach, 'steps')} | {_reach_cell(result.reach, 'seconds')} | {rate} "
                f"| {ratio} | {verdict} | {zoo} |"
            )
    for entry, results in per_entry:
        name = f"{entry['id']}.png"
        lines += [
            "",
            f"## {entry['id']}",
            "",
            f"{entry.get('task')}, {str(entry.get('algo', '')).upper()}, {int(entry['env_steps']):,} env steps"
            + (f", recipe `configs/experiment/{entry['experiment']}.yaml`" if entry.get("experiment") else "")
            + ".",
            "",
            f"![{entry['id']} learning curves]({link_dir}/{name})",
        ]
        sb3 = entry.get("sb3") or {}
        facts = []
        trained = (f"Gymnasium's {sb3['gymnasium']}" if sb3.get("gymnasium")
                   else f"robolearn's {entry.get('task')} through the SB3 adapter")
        if "default" in sb3:
            facts.append(f"sb3_default: SB3's defaults with {json.dumps(sb3.get('default') or {}, sort_keys=True)}, "
                         f"{sb3.get('n_envs', 1)} env(s) of {trained}")
        zoo = sb3.get("zoo")
        if zoo:
            facts.append(f"sb3_zoo: {_md(str(zoo.get('source', 'source not stated')))}, {zoo.get('n_envs', 1)} env(s) "
                         f"of {trained}")
        ref = entry.get("zoo_reference")
        if ref:
            facts.append(f"Zoo published return {_ret(float(ref.get('return', math.nan)))} at "
                         f"{int(ref.get('env_steps') or 0):,} env steps: {_md(str(ref.get('source', 'source not stated')))}")
        facts += [f"{r.lib} {note}" for r in results for note in r.notes]
        ran_on = machines[str(entry["id"])]
        if len(ran_on) == 1 and len(page_machines) > 1:
            # The header lists every CPU the page's runs used; the reader needs to know which one
            # this entry's seconds come from, to compare them with another entry's.
            facts.append(f"ran on {_md(next(iter(ran_on)))}: all its runs")
        if len(ran_on) > 1:
            facts.append("ran on more than one machine, so its seconds compare machines as well as libraries: "
                         + "; ".join(f"{_md(m)}: {', '.join(runs)}" for m, runs in sorted(ran_on.items())))
        if facts:
            lines += [""] + [f"- {fact}" for fact in facts]
        profiled = _profiled(Path(profile), str(entry["id"])) if profile is not None else None
        why = _why(next((r for r in results if r.lib == ROBOLEARN), None), results, profiled)
        if why:
            lines += ["", "Why (the time ratios taken apart; the final return beside each seed's late and best "
                      "evaluations; the profile of the training seconds):", ""]
            lines += [f"- {line}" for line in why]

    write_files(fig_dir, figures)
    write_files(md_path.parent, {md_path.name: ("\n".join(lines) + "\n").encode()})
    return md_path


__all__ = ["CONFIDENCE", "TARGET_SPEEDUP", "LibResult", "Reach", "RunResult", "StaleCheck", "write_report"]
