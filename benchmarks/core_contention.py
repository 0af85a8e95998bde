"""A table run's training seconds alone and with N copies at once: how much a loaded machine slows a run.

The 16-core projection of the published table (``benchmarks/table_16core_project.py``) found the Zoo's
PPO runs 1.6x slower per env step on the lent 16-core machine than on this workplace's 2-core VM, while
SB3's default PPO and robolearn's runs took about the same time on both. Two causes fit that: the
shared cache and memory bandwidth of 16 busy cores (contention), or the machine's torch build (CUDA
wheels against the CPU-only one here), whose per-operation overhead weighs most on the Zoo's many
small minibatches (32-64 samples, 20 epochs). This runs the same short run of a table entry alone,
then ``N`` copies of it at once (one process per core, one torch thread each, as ``benchmark run
jobs=N`` loads a machine), and reports the training seconds of each (``time/train_s`` of the run's
last evaluation, which excludes evaluation and checkpoints). A ratio near 1 clears contention.

Each run is the table's own command (:func:`robolearn.benchmark.schedule.command`) with the budget
cut to ``--env-steps`` and one evaluation at the end; the copies differ only in their seed.

    python benchmarks/core_contention.py --pairs halfcheetah_ppo:sb3_zoo halfcheetah_ppo:robolearn --copies 16
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from robolearn.benchmark.schedule import Run, RunState, command, run_env
from robolearn.benchmark.table import Entry, Table, load_table


def train_seconds(run_dir: Path) -> float | None:
    """``time/train_s`` of the last row of the run's ``metrics.csv`` (None if it logged none)."""
    metrics = run_dir / "metrics.csv"
    if not metrics.is_file():
        return None
    last = None
    with metrics.open() as f:
        for row in csv.DictReader(f):
            if row.get("time/train_s"):
                last = float(row["time/train_s"])
    return last


def parse_pair(pair: str, table: Table) -> tuple[Entry, str]:
    """``<entry>:<lib>`` as the table's entry and a library it runs; a clear error otherwise."""
    entry_id, _, lib = pair.partition(":")
    try:
        entry = table.entry(entry_id)
    except KeyError as exc:
        raise SystemExit(f"--pairs {pair!r}: {exc.args[0]}") from None
    if lib not in table.libs:
        raise SystemExit(f"--pairs {pair!r}: lib {lib!r} is not one of {list(table.libs)}")
    return entry, lib


def run_copies(
    entry: Entry, lib: str, copies: int, env_steps: int, work: Path, table: Table, phase: str
) -> list[float]:
    """Train ``copies`` short runs of ``entry`` by ``lib`` at once, under ``work/<entry>.<lib>.<phase>``;
    their training seconds."""
    short = dataclasses.replace(entry, env_steps=env_steps, eval_every=env_steps)
    env = run_env()
    procs = []
    for seed in range(copies):
        # "alone" and "x<N>" apart (--copies 1 runs both); a folder left by an earlier call is replaced.
        run_dir = work / f"{entry.id}.{lib}.{phase}" / f"seed{seed}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run = Run(short, lib, seed, run_dir)
        log = (run_dir.parent / f"seed{seed}.log").open("wb")
        procs.append((subprocess.Popen(command(run, table, RunState.FRESH), stdout=log, stderr=subprocess.STDOUT,
                                       env=env), log, run_dir))
    out = []
    for proc, log, run_dir in procs:
        code = proc.wait()
        log.close()
        secs = train_seconds(run_dir)
        if code != 0 or secs is None:
            raise SystemExit(f"{entry.id}:{lib} {phase}: a run failed (exit {code}); see {run_dir.parent}")
        out.append(secs)
    return out


def main() -> int:
    """Alone, then ``--copies`` at once, for every pair; a table and JSON of the training seconds."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", nargs="+", default=["halfcheetah_ppo:sb3_zoo", "halfcheetah_ppo:robolearn"],
                   help="<entry>:<lib> of the table")
    p.add_argument("--copies", type=int, default=os.cpu_count() or 1, help="runs at once in the loaded case")
    p.add_argument("--env-steps", type=int, default=8192, help="each run's budget")
    p.add_argument("--table", default="table")
    p.add_argument("--work", default=None, help="folder of the runs (default: a temporary one)")
    p.add_argument("--json", default=None, help="write the measurements here")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="contention-"))
    table = load_table(args.table)
    pairs = [(pair, *parse_pair(pair, table)) for pair in args.pairs]  # every pair checked before any run
    rows: list[dict[str, Any]] = []
    for pair, entry, lib in pairs:
        t0 = time.monotonic()
        alone = run_copies(entry, lib, 1, args.env_steps, work, table, "alone")
        loaded = run_copies(entry, lib, args.copies, args.env_steps, work, table, f"x{args.copies}")
        rows.append({"pair": pair, "alone_s": alone[0], "loaded_s": loaded,
                     "ratio": statistics.median(loaded) / alone[0], "wall_s": time.monotonic() - t0})
        sys.stderr.write(f"{pair}: alone {alone[0]:.1f} s, x{args.copies} median {statistics.median(loaded):.1f} s\n")
    info = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "env_steps": args.env_steps,
            "copies": args.copies}
    lines = [f"{info}", "", f"| pair | alone (s) | {args.copies} at once, median [min, max] (s) | loaded / alone |",
             "|---|---:|---:|---:|"]
    for r in rows:
        lo = r["loaded_s"]
        lines.append(f"| {r['pair']} | {r['alone_s']:.1f} | {statistics.median(lo):.1f} [{min(lo):.1f}, {max(lo):.1f}] "
                     f"| {r['ratio']:.2f}x |")
    sys.stdout.write("\n".join(lines) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
