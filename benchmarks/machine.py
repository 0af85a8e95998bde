"""One line saying where a benchmark ran: processor, cores, load, versions, commit, threads.

Imported by the benchmarks that sit beside it (``from machine import machine_line``; the folder is
not a package, and a benchmark is run as ``python benchmarks/<name>.py``, which puts it on the path).
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch


def machine_line(versions: dict[str, str] | None = None) -> str:
    """Processor, cores, load average, Python, torch and ``versions``, the commit and the thread settings."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, check=False).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    libs = "".join(f", {name} {version}" for name, version in (versions or {}).items())
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load}; Python "
            f"{platform.python_version()}, torch {torch.__version__}{libs}; commit {commit}; OMP_NUM_THREADS="
            f"{os.environ.get('OMP_NUM_THREADS', '(unset)')}, torch threads {torch.get_num_threads()}")


def call_times(fn: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn``, after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times
