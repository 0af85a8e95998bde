"""Learning-curve plots from a run's ``metrics.csv``, drawn headless and written atomically."""

from __future__ import annotations

import csv
import logging
import math
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def _read_columns(path: Path, names: Sequence[str]) -> dict[str, list[str]]:
    """Return the cells of ``names`` in the CSV at ``path``, raising if one is not a column."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        available = list(reader.fieldnames or [])
        for name in names:
            if name not in available:
                raise ValueError(f"{path}: no column {name!r}; available columns: {available}")
        columns: dict[str, list[str]] = {name: [] for name in names}
        for row in reader:
            for name in names:
                # A short row (none should exist, but a hand-edited file may) reads as empty cells.
                columns[name].append(row.get(name) or "")
    return columns


def plot_learning_curve(
    metrics_csv: str | os.PathLike[str],
    out_png: str | os.PathLike[str],
    x: str = "env_steps",
    y: str | Sequence[str] = ("eval/return",),
    *,
    title: str | None = None,
    skip_missing: bool = False,
) -> Path:
    """Plot columns ``y`` of ``metrics_csv`` against column ``x`` into the PNG ``out_png``.

    Rows where ``x`` or a ``y`` cell is empty (the metric was not logged that step) are skipped
    for that curve, so sparse evaluation metrics plot as lines through their own points.

    Args:
        metrics_csv: a table written by :class:`~robolearn.logging.Logger` (or any CSV with a header).
        out_png: the image to write; its folder is created, an existing file replaced atomically.
        x: the column on the horizontal axis.
        y: one column or several, each drawn as a line with a legend entry.
        title: the plot title; defaults to the name of the folder holding ``metrics_csv``.
        skip_missing: draw the ``y`` columns that exist and leave out the others (a short run
            whose training episodes never ended has ``eval/return`` but no ``train/return``);
            it is still an error when none of them exists.

    Returns:
        ``out_png`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: ``x`` or a ``y`` is not a column (the message lists those available), or a
            cell is not a number.
    """
    source = Path(metrics_csv)
    target = Path(out_png)
    ys = [y] if isinstance(y, str) else list(y)
    if not ys:
        raise ValueError("y: expected at least one column name")
    if skip_missing:
        with source.open(newline="") as f:
            header = next(csv.reader(f), [])
        present = [name for name in ys if name in header]
        if not present:
            raise ValueError(f"{source}: none of the columns {ys} exists yet; available columns: {header}")
        ys = present
    columns = _read_columns(source, [x, *ys])

    # Imported here so that importing robolearn.logging does not load matplotlib; the Agg canvas
    # is bound to the figure directly, which leaves pyplot's global backend alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for name in ys:
        points: list[tuple[float, float]] = []
        for row, (xs, vs) in enumerate(zip(columns[x], columns[name], strict=True), start=2):
            if not xs or not vs:
                continue
            try:
                points.append((float(xs), float(vs)))
            except ValueError as err:
                raise ValueError(f"{source}, line {row}: {x}={xs!r}, {name}={vs!r} is not a number") from err
        if not points:
            log.warning("%s: column %r has no values yet; its curve is empty", source, name)
        # A diverged run logs inf/nan; dropping those keeps the axis scaled to the real values.
        finite = [(px, py) for px, py in points if math.isfinite(py)]
        ax.plot([p[0] for p in finite], [p[1] for p in finite], label=name, marker="." if len(finite) < 50 else None)
    ax.set_xlabel(x)
    ax.set_ylabel(ys[0] if len(ys) == 1 else "value")
    ax.set_title(title if title is not None else source.resolve().parent.name)
    ax.grid(True, alpha=0.3)
    if len(ys) > 1:
        ax.legend()

    target.parent.mkdir(parents=True, exist_ok=True)
    # Same folder as the target, so os.replace is atomic: a viewer never sees a half-written PNG.
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
