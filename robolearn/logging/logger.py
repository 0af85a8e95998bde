"""One logger facade for a run: TensorBoard scalars, ``metrics.csv``, a progress bar, optional W&B.

A runner builds one :class:`Logger` per run directory and calls :meth:`Logger.log` with whatever
its algorithm returned, tensors included. Tensor values are brought to the host in one transfer
per device per call, so the training loop decides when the (single) host sync happens: at the
logging interval, never per step.

``metrics.csv`` layout: the first column is ``step``, then one column per metric key in the order
the keys first appeared. A key that appears later (evaluation metrics after the first evaluation,
say) widens the table: the file is rewritten once with the new header, through a temporary file
and ``os.replace``, so readers never see a half-written table, and rows logged before the key
existed hold an empty cell there, as do rows that simply omit a key. Rewrites happen only when the
key set grows, which in a run is a handful of times. Re-opening an existing ``metrics.csv`` (a
resumed run) continues its columns; a torn last row left by a crash is dropped first.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from tqdm import tqdm

log = logging.getLogger(__name__)

STEP_COLUMN = "step"
"""Name of the first ``metrics.csv`` column: the ``step`` passed to :meth:`Logger.log`."""


def _to_floats(metrics: Mapping[str, float | torch.Tensor]) -> dict[str, float]:
    """Return ``metrics`` as Python floats, moving all tensors of one device in a single transfer."""
    out: dict[str, float] = {}
    by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"metrics: keys must be non-empty strings, got {key!r}")
        if key == STEP_COLUMN:
            raise ValueError(f"metrics: {STEP_COLUMN!r} is reserved for the step column; pass it as step=")
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(f"metrics[{key!r}]: expected a scalar tensor, got shape {tuple(value.shape)}")
            by_device.setdefault(value.device, []).append((key, value))
        else:
            try:
                out[key] = float(value)
            except (TypeError, ValueError) as err:
                raise ValueError(f"metrics[{key!r}]: expected a number or scalar tensor, got {value!r}") from err
    for items in by_device.values():
        # float64 keeps integer counters (env steps) exact past 2**24; one stack + one copy per
        # device is the only host sync of the call.
        stacked = torch.stack([t.detach().reshape(()).to(torch.float64) for _, t in items])
        for (key, _), number in zip(items, stacked.cpu().tolist(), strict=True):
            out[key] = number
    # Keep the caller's key order (it decides the column order in metrics.csv).
    return {key: out[key] for key in metrics}


class _CsvSink:
    """``metrics.csv`` with columns that grow as new keys appear (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] = [STEP_COLUMN]
        if path.exists() and path.stat().st_size > 0:
            self._drop_torn_row()
            with path.open(newline="") as f:
                header = next(csv.reader(f), None)
            if not header or header[0] != STEP_COLUMN:
                raise ValueError(f"{path}: not a robolearn metrics.csv (first column is not {STEP_COLUMN!r})")
            self.columns = header
            self.file = path.open("a", newline="")
        else:
            self.file = path.open("w", newline="")
            self._write_row(self.columns)

    def _drop_torn_row(self) -> None:
        """Cut a last row that a crash left without its newline, so appends start on a new line."""
        with self.path.open("rb+") as f:
            data = f.read()
            if data.endswith(b"\n"):
                return
            keep = data.rfind(b"\n") + 1
            log.warning("%s: dropping a torn last row (%d bytes) left by an interrupted write", self.path,
                        len(data) - keep)
            f.truncate(keep)

    def _write_row(self, row: Sequence[object]) -> None:
        """Write one row in a single call, so a crash tears at most that row."""
        buf = io.StringIO()
        csv.writer(buf).writerow(row)
        self.file.write(buf.getvalue())

    def write(self, step: int, values: Mapping[str, float]) -> None:
        """Append one row, widening the table first when ``values`` has keys not yet in it."""
        new = [key for key in values if key not in self.columns]
        if new:
            self._widen(new)
        row: list[object] = [step]
        for column in self.columns[1:]:
            value = values.get(column)
            # repr round-trips floats exactly; an absent key leaves its cell empty.
            row.append("" if value is None else repr(value))
        self._write_row(row)
        self.file.flush()

    def _widen(self, new: list[str]) -> None:
        """Rewrite the file with ``new`` columns added at the end, atomically."""
        self.file.close()
        columns = self.columns + new
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            with self.path.open(newline="") as src, tmp.open("w", newline="") as dst:
                reader = csv.reader(src)
                next(reader, None)  # the old header
                writer = csv.writer(dst)
                writer.writerow(columns)
                pad = [""] * len(new)
                for row in reader:
                    writer.writerow(row + pad)
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
            self.file = self.path.open("a", newline="")
        self.columns = columns

    def close(self) -> None:
        """Close the file (rows are flushed as they are written)."""
        self.file.close()


class Logger:
    """Send scalar metrics of a run to TensorBoard, ``metrics.csv``, a progress bar and W&B.

    Files go under ``run_dir``: TensorBoard event files in ``run_dir/tb``, the table in
    ``run_dir/metrics.csv``, W&B's files in ``run_dir/wandb``. Use it as a context manager, or call
    :meth:`close` when the run ends.

    Args:
        run_dir: the run's folder, created if missing.
        tensorboard: write TensorBoard event files.
        csv: write ``metrics.csv``.
        console: show a tqdm progress bar (steps, steps/s, ETA and the ``progress_keys`` values).
        wandb: ``True`` or a mapping of ``wandb.init`` keyword arguments to log to Weights & Biases
            too. Off by default; when on, W&B runs offline unless ``mode`` or ``WANDB_MODE`` says
            otherwise, and a missing ``wandb`` package logs a warning instead of failing.
        total: the run's length in steps, for the bar's ETA; ``None`` shows no ETA.
        progress_keys: metric keys whose latest value the bar shows.
        unit: what a step is, shown by the bar (``env_steps``, ``grad_steps``).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        tensorboard: bool = True,
        csv: bool = True,
        console: bool = True,
        wandb: bool | Mapping[str, Any] = False,
        total: int | None = None,
        progress_keys: Sequence[str] = ("train/return", "eval/return"),
        unit: str = "step",
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.progress_keys = tuple(progress_keys)
        self._postfix: dict[str, float] = {}
        self._closed = False
        self._writer: Any = None
        self._csv: _CsvSink | None = None
        self._bar: tqdm | None = None
        self._wandb_run: Any = None
        try:
            if tensorboard:
                # Imported here: it pulls in the tensorboard package, which users of the other
                # sinks need not pay for.
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(log_dir=str(self.run_dir / "tb"))
            if csv:
                self._csv = _CsvSink(self.run_dir / "metrics.csv")
            if wandb:
                self._wandb_run = self._start_wandb({} if wandb is True else dict(wandb))
            if console:
                # Redirected output (CI logs) gets an occasional line rather than a redraw every 0.1 s.
                interactive = sys.stderr.isatty()
                self._bar = tqdm(total=total, unit=unit, unit_scale=True, dynamic_ncols=True,
                                 mininterval=0.1 if interactive else 30.0, file=sys.stderr)
        except BaseException:
            self.close()
            raise
        log.info("logging to %s", self.run_dir)

    def _start_wandb(self, kwargs: dict[str, Any]) -> Any:
        """Start a W&B run in ``run_dir``, or return ``None`` with a warning if wandb is missing."""
        try:
            import wandb
        except ImportError:
            log.warning("wandb=True but the wandb package is not installed; skipping W&B logging")
            return None
        kwargs.setdefault("dir", str(self.run_dir))
        kwargs.setdefault("name", self.run_dir.name)
        # Offline unless asked otherwise: a run must never block on, or leak to, the network by default.
        kwargs.setdefault("mode", os.environ.get("WANDB_MODE", "offline"))
        return wandb.init(**kwargs)

    def log(self, metrics: Mapping[str, float | torch.Tensor], step: int) -> dict[str, float]:
        """Record ``metrics`` at ``step`` in every sink and return them as floats.

        Tensors must hold one element; they are copied to the host together (one sync per
        device). Keys like ``"train/loss_actor"`` become TensorBoard tags and CSV columns as given.
        """
        if self._closed:
            raise RuntimeError(f"Logger for {self.run_dir} is closed")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected a non-negative int, got {step!r}")
        values = _to_floats(metrics)
        if self._writer is not None:
            wall = time.time()
            for key, value in values.items():
                self._writer.add_scalar(key, value, step, walltime=wall)
        if self._csv is not None:
            self._csv.write(step, values)
        if self._wandb_run is not None:
            self._wandb_run.log(values, step=step)
        shown = {key: values[key] for key in self.progress_keys if key in values}
        self.progress(step, **shown)
        return values

    def progress(self, step: int, **postfix: float) -> None:
        """Move the progress bar to ``step`` and show ``postfix`` values (kept until replaced)."""
        if self._bar is None:
            return
        self._postfix.update({key: float(value) for key, value in postfix.items()})
        # tqdm derives steps/s and the ETA from the increments it sees.
        if step > self._bar.n:
            self._bar.update(step - self._bar.n)
        if postfix:
            self._bar.set_postfix({key: f"{value:.4g}" if math.isfinite(value) else str(value)
                                   for key, value in self._postfix.items()}, refresh=False)

    def flush(self) -> None:
        """Push buffered TensorBoard events to disk (CSV rows are flushed as they are written)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close every sink; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        if self._csv is not None:
            self._csv.close()
        if self._wandb_run is not None:
            self._wandb_run.finish()
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Logger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
