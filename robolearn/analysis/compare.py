"""Compare methods over seeds: interquartile-mean curves with stratified-bootstrap intervals, a
table at fixed steps, final scores, probability of improvement, and the report files.

The statistics are those of Agarwal et al., "Deep RL at the Edge of the Statistical Precipice"
(NeurIPS 2021), computed with their library, ``rliable`` (``pip install 'robolearn[compare]'``):
the interquartile mean (IQM: the mean of the middle 50% of the runs' scores, robust to an outlier
seed yet less noisy than the median), percentile intervals from rliable's stratified bootstrap over
runs (each method and each step resampled on its own: curve intervals are pointwise), and the probability of improvement P(X > Y), the chance that a run of X scores
higher than a run of Y (ties count half; the Mann-Whitney U statistic over all run pairs).

Every interval starts from the seed afresh, so a result depends only on the seed and its own
method's runs: adding a method to a comparison leaves the others' intervals as they were. rliable
draws its resampling indices from NumPy's global generator (its ``random_state`` argument reaches
only arch's own draws), so each bootstrap seeds that generator and restores its state afterwards.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from robolearn.analysis.runs import Align, Group, common_grid, score_matrix

log = logging.getLogger(__name__)

CURVES_PNG = "iqm_curves.png"
"""The IQM-curve plot's file name in the output folder."""
POI_PNG = "probability_of_improvement.png"
"""The probability-of-improvement plot's file name (written when there are two methods or more)."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its confidence interval."""

    value: float
    """The statistic on the runs as they are."""
    low: float
    """Lower end of the bootstrap interval."""
    high: float
    """Upper end of the bootstrap interval."""


@dataclass
class MethodResult:
    """One method's statistics."""

    name: str
    """The method's label."""
    runs: list[str]
    """Its run directories (one per seed)."""
    curve: list[Estimate]
    """IQM at every grid step."""
    at: list[Estimate]
    """IQM at the table's steps."""
    final: dict[str, Estimate]
    """``iqm``, ``mean`` and ``median`` of the scores at the final step."""


@dataclass
class PairResult:
    """Probability that a run of ``x`` scores higher than a run of ``y`` at the final step."""

    x: str
    """The first method."""
    y: str
    """The second method."""
    poi: Estimate
    """P(x > y) with its interval; P(y > x) is 1 - P(x > y)."""


@dataclass
class Comparison:
    """Everything a comparison computed: what ``comparison.json`` holds."""

    metric: str
    """The compared ``metrics.csv`` column."""
    unit: str
    """What a step counts."""
    align: str
    """How curves were read between evaluations (``last`` or ``linear``)."""
    reps: int
    """Bootstrap resamples per interval."""
    seed: int
    """Seed of every bootstrap."""
    confidence: float
    """Coverage of the intervals."""
    grid: list[float]
    """Steps of the curves."""
    at: list[float]
    """Steps of the table."""
    final_step: float
    """The step the final scores and the probabilities of improvement are read at."""
    methods: list[MethodResult]
    """Per-method statistics, in the order the methods were given."""
    pairs: list[PairResult]
    """P(X > Y) for every pair of methods, X before Y in the method order."""
    notes: list[str] = field(default_factory=list)
    """What a reader must know (runs clipped to the shortest, methods of one run)."""
    library: str = ""
    """The statistics library and its version."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready mapping (floats as numbers, non-finite ones as ``null``)."""
        return _finite_or_none(asdict(self))


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value


def rliable_library() -> ModuleType:
    """``rliable.library``, the bootstrap.

    Raises:
        ImportError: rliable is not installed or does not import (the message says how to fix it).
    """
    try:
        from rliable import library
    except ImportError as exc:
        raise ImportError(
            f"robolearn compare needs rliable ({exc}); install it with: pip install 'robolearn[compare]'"
        ) from None
    except TypeError as exc:  # arch < 8 (rliable's pin) breaks at import under pandas 3
        raise ImportError(
            f"rliable failed to import ({exc}); its arch dependency needs pandas < 3: "
            "pip install 'robolearn[compare]'"
        ) from None
    return library


def iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean over axis 0 (runs) of ``scores`` ``[runs, ...]``: the mean of what is left
    after cutting ``floor(runs / 4)`` of the lowest and of the highest scores.

    rliable's ``aggregate_iqm`` (scipy's ``trim_mean`` at 0.25) column by column, in plain NumPy:
    the bootstrap calls it once per resample, and scipy's per-call overhead (about 1 ms) would
    dominate a comparison. tests/test_compare.py checks the two agree.
    """
    scores = np.sort(np.asarray(scores, dtype=np.float64), axis=0)
    cut = int(0.25 * scores.shape[0])
    return scores[cut:scores.shape[0] - cut].mean(axis=0)


def poi(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) of final scores ``x [runs_x, 1]`` and ``y [runs_y, 1]``: the fraction of run pairs
    where x's run scores higher, ties counting half (the Mann-Whitney U statistic over
    ``runs_x * runs_y``).

    rliable's ``probability_of_improvement`` for one task, in plain NumPy (scipy's
    ``mannwhitneyu`` costs about 1 ms a call, once per resample and pair); the tests check both agree.
    """
    a, b = np.asarray(x, dtype=np.float64)[:, 0], np.asarray(y, dtype=np.float64)[:, 0]
    greater = (a[:, None] > b[None, :]).mean()
    ties = (a[:, None] == b[None, :]).mean()
    return float(greater + 0.5 * ties)


@contextmanager
def _seeded(seed: int) -> Iterator[np.random.RandomState]:
    """NumPy's global generator seeded with ``seed`` (restored on exit), and a ``RandomState(seed)``
    for arch; arch's FutureWarning about ``RandomState`` (rliable passes one on) is silenced.
    """
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield np.random.RandomState(seed)
    finally:
        np.random.set_state(saved)


def _bootstrap(
    name: str, scores: np.ndarray, func: Callable[[np.ndarray], np.ndarray], reps: int, seed: int,
    confidence: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(point, low, high) of ``func`` over rliable's stratified bootstrap of ``scores`` ``[runs, K]``
    (one task; the runs of every column are resampled independently, so intervals are pointwise).
    """
    library = rliable_library()
    with _seeded(seed) as state:
        point, interval = library.get_interval_estimates(
            {name: scores[:, None, :]}, lambda s: func(s[:, 0, :]), reps=reps,
            confidence_interval_size=confidence, random_state=state,
        )
    return np.asarray(point[name]), np.asarray(interval[name][0]), np.asarray(interval[name][1])


def bootstrap_interval(
    name: str, scores: np.ndarray, func: Callable[[np.ndarray], np.ndarray], reps: int, seed: int,
    confidence: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(point, low, high) of ``func`` (e.g. :func:`iqm`) over rliable's stratified bootstrap of
    ``scores`` ``[runs, K]``, seeded by ``seed``: the intervals :func:`compare` reports, for other
    pages (robolearn.benchmark.report) that need the same statistic.
    """
    return _bootstrap(name, scores, func, reps, seed, confidence)


def probability_of_improvement(
    x: np.ndarray, y: np.ndarray, reps: int, seed: int, confidence: float
) -> Estimate:
    """P(a run of ``x`` scores above a run of ``y``) with its interval, from final scores ``[runs]``
    each (:func:`poi`; rliable's bootstrap resamples the runs of each method independently).
    """
    library = rliable_library()
    with _seeded(seed) as state:
        point, interval = library.get_interval_estimates(
            {"P(X > Y)": [x[:, None], y[:, None]]}, poi, reps=reps,
            confidence_interval_size=confidence, random_state=state,
        )
    low, high = np.asarray(interval["P(X > Y)"]).reshape(2)
    return Estimate(float(point["P(X > Y)"]), float(low), float(high))


def default_at(grid: np.ndarray) -> list[float]:
    """The table's default steps: the grid steps nearest to a quarter, half and three quarters of
    the final step, and the final step (25k, 50k, 75k, 100k for evaluations every 5k up to 100k).
    """
    grid = np.asarray(grid, dtype=np.float64)
    picks = [grid[np.argmin(np.abs(grid - q * grid[-1]))] for q in (0.25, 0.5, 0.75, 1.0)]
    return sorted({float(s) for s in picks})


def compare(
    groups: Sequence[Group],
    metric: str,
    *,
    at: Sequence[float] | None = None,
    align: Align = "last",
    points: int = 50,
    reps: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Comparison:
    """Compute the comparison of ``groups`` (see the module docstring); writes nothing.

    Args:
        groups: the methods and their runs (:func:`robolearn.analysis.runs.make_groups`).
        metric: the compared column, for the record.
        at: steps of the table; ``None``: :func:`default_at` of the grid. Each must lie in the
            steps every run covers.
        align: read curves between evaluations as the ``last`` value or ``linear``ly.
        points: grid size when the runs were not all evaluated at the same steps.
        reps: bootstrap resamples per interval.
        seed: seed of every bootstrap.
        confidence: coverage of the intervals, in (0, 1).

    Raises:
        ValueError: a setting out of range or a table step outside the common range.
        ImportError: rliable is missing.
    """
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"--reps: expected an integer >= 1, got {reps!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: expected a number in (0, 1), got {confidence!r}")
    if not groups:
        raise ValueError("no methods to compare")
    empty = [g.name for g in groups if not g.runs]
    if empty:
        raise ValueError(f"group {empty[0]!r}: no runs (each method needs at least one run)")
    rliable_library()  # fail before any work when the library is missing
    grid = common_grid(groups, points)
    lo, hi = float(grid.steps[0]), float(grid.steps[-1])
    table = default_at(grid.steps) if at is None else sorted({float(s) for s in at})
    outside = [s for s in table if not lo <= s <= hi]
    if outside:
        raise ValueError(f"--at: step {outside[0]:g} is outside the {grid.unit} range every run covers, {lo:g}..{hi:g}")
    notes = list(grid.notes)
    single = [g.name for g in groups if len(g.runs) == 1]
    if single:
        notes.append(f"one run only (its interval is a point, not an uncertainty): {', '.join(single)}")
    # One bootstrap per method over every step the curve and the table need, each step once, so a
    # step in both (the final one) gets one interval; the final step is the last column.
    steps = sorted({*map(float, grid.steps), *table})
    column = {s: i for i, s in enumerate(steps)}

    def stats(s: np.ndarray) -> np.ndarray:
        final = s[:, -1]
        return np.concatenate([iqm(s), [np.mean(final), np.median(final)]])

    methods, finals = [], []
    for group in groups:
        scores = score_matrix(group, np.asarray(steps), align)
        point, low, high = _bootstrap(group.name, scores, stats, reps, seed, confidence)
        est = [Estimate(float(p), float(a), float(b)) for p, a, b in zip(point, low, high, strict=True)]
        methods.append(MethodResult(
            name=group.name,
            runs=[str(run.path) for run in group.runs],
            curve=[est[column[float(s)]] for s in grid.steps],
            at=[est[column[s]] for s in table],
            final={"iqm": est[column[hi]], "mean": est[-2], "median": est[-1]},
        ))
        finals.append(scores[:, -1])
    pairs = [
        PairResult(groups[i].name, groups[j].name, probability_of_improvement(finals[i], finals[j], reps, seed, confidence))
        for i in range(len(groups)) for j in range(i + 1, len(groups))
    ]
    return Comparison(
        metric=metric, unit=grid.unit, align=align, reps=reps, seed=seed, confidence=confidence,
        grid=[float(s) for s in grid.steps], at=table, final_step=hi, methods=methods, pairs=pairs,
        notes=notes, library=f"rliable {metadata.version('rliable')}",
    )


# -- the report ------------------------------------------------------------------------------------
def _num(value: float) -> str:
    """A score for a table: thousands separated above 1000, three significant figures below 1."""
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _step(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,g}"


def _cell(est: Estimate) -> str:
    return f"{_num(est.value)} [{_num(est.low)}, {_num(est.high)}]"


def _prob(est: Estimate) -> str:
    return f"{est.value:.2f} [{est.low:.2f}, {est.high:.2f}]"


def _md(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result: Comparison) -> str:
    """``comparison.md``: tables ready to paste into BENCHMARKS.md."""
    pct = f"{result.confidence:.0%}"
    read = "the last evaluation at or before each step" if result.align == "last" else "linear interpolation"
    lines = [
        f"### `{result.metric}`: IQM [{pct} CI] over runs",
        "",
        f"Steps count {result.unit}; curves read as {read}; {pct} stratified-bootstrap percentile "
        f"intervals, {result.reps} resamples, seed {result.seed} ({result.library}).",
        "",
        "| method | runs | " + " | ".join(
            _step(s) + (" (final)" if s == result.final_step else "") for s in result.at) + " |",
        "|---|---:|" + "---:|" * len(result.at),
    ]
    for m in result.methods:
        lines.append(f"| {_md(m.name)} | {len(m.runs)} | " + " | ".join(_cell(e) for e in m.at) + " |")
    lines += [
        "",
        f"Final scores at {_step(result.final_step)} {result.unit}:",
        "",
        "| method | runs | IQM | mean | median |",
        "|---|---:|---:|---:|---:|",
    ]
    for m in result.methods:
        lines.append(f"| {_md(m.name)} | {len(m.runs)} | " + " | ".join(
            _cell(m.final[k]) for k in ("iqm", "mean", "median")) + " |")
    if result.pairs:
        lines += [
            "",
            f"Probability of improvement at {_step(result.final_step)} {result.unit} "
            "(P(X > Y): a run of X scores above a run of Y, ties half; P(Y > X) = 1 - P(X > Y)):",
            "",
            f"| X | Y | P(X > Y) [{pct} CI] |",
            "|---|---|---:|",
        ]
        lines += [f"| {_md(p.x)} | {_md(p.y)} | {_prob(p.poi)} |" for p in result.pairs]
    lines += ["", "Runs:", ""]
    lines += [f"- {_md(m.name)}: " + ", ".join(f"`{r}`" for r in m.runs) for m in result.methods]
    if result.notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def _figure(width: float, height: float) -> Any:
    # The Agg canvas is bound to the figure directly (as robolearn.logging.plots does): pyplot's
    # global backend is left alone and no display is needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def new_figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` (inches) on its own Agg canvas, as this module's figures are drawn:
    no pyplot state, no display needed.
    """
    return _figure(width, height)


def png_bytes(fig: Any) -> bytes:
    """``fig`` rendered as PNG bytes."""
    return _png(fig)


def curves_png(result: Comparison) -> bytes:
    """The IQM curves with their shaded intervals, as PNG bytes."""
    fig = _figure(7.0, 4.4)
    ax = fig.add_subplot()
    for m in result.methods:
        value = [e.value for e in m.curve]
        line = ax.plot(result.grid, value, label=f"{m.name} ({len(m.runs)} runs)",
                       marker="." if len(result.grid) < 30 else None)[0]
        ax.fill_between(result.grid, [e.low for e in m.curve], [e.high for e in m.curve],
                        color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(result.unit)
    ax.set_ylabel(f"IQM {result.metric}")
    ax.set_title(f"IQM {result.metric}, {result.confidence:.0%} stratified-bootstrap CI")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _png(fig)


def poi_png(result: Comparison) -> bytes:
    """Every pair's P(X > Y) as a point with its interval, as PNG bytes."""
    fig = _figure(7.0, 1.2 + 0.45 * len(result.pairs))
    ax = fig.add_subplot()
    ys = np.arange(len(result.pairs))[::-1]
    for y, pair in zip(ys, result.pairs, strict=True):
        ax.plot([pair.poi.low, pair.poi.high], [y, y], color="C0", linewidth=6, alpha=0.4, solid_capstyle="butt")
        ax.plot([pair.poi.value], [y], "o", color="C0")
    ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(ys, [f"P({p.x} > {p.y})" for p in result.pairs], fontsize="small")
    ax.set_xlim(-0.03, 1.03)  # a point at 0 or 1 stays whole
    ax.set_xlabel(f"probability of improvement at {_step(result.final_step)} {result.unit}")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def report_files(result: Comparison) -> dict[str, bytes]:
    """Every output file's name and bytes, rendered in memory so that nothing is written on a failure."""
    files = {
        "comparison.md": markdown(result).encode(),
        "comparison.json": (json.dumps(result.to_json(), indent=2) + "\n").encode(),
        CURVES_PNG: curves_png(result),
    }
    if result.pairs:
        files[POI_PNG] = poi_png(result)
    return files


def write_files(out: Path, files: dict[str, bytes]) -> list[Path]:
    """Write ``files`` into the folder ``out``, each through a temporary file and ``os.replace``
    (a reader never sees half a file; a file of an earlier comparison is replaced whole).
    """
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        target = out / name
        tmp = out / f".{name}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        written.append(target)
    return written


__all__ = [
    "CURVES_PNG",
    "POI_PNG",
    "Comparison",
    "Estimate",
    "MethodResult",
    "PairResult",
    "bootstrap_interval",
    "compare",
    "curves_png",
    "default_at",
    "iqm",
    "markdown",
    "new_figure",
    "png_bytes",
    "poi_png",
    "probability_of_improvement",
    "report_files",
    "poi",
    "rliable_library",
    "write_files",
]
