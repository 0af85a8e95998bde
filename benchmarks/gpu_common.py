"""Shared pieces of the GPU benchmarks (issue 15): where it ran, device-correct timing, env making.

The benchmarks folder is not a package: the ``gpu_*.py`` scripts put this folder on ``sys.path``
and import this module. Nothing here needs a GPU; on ``--device cpu`` every function works the
same way, which is how ``tests/test_gpu_benchmarks.py`` runs the scripts end to end.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent

# Published throughput of the anchors (issue 15), env steps/s with random actions: Isaac Lab on an
# RTX 4090. Only Cartpole has a world count attached to it (4,096); the Humanoid-class figure is
# quoted for a walking robot, shown beside our Humanoid at every N.
ANCHORS: dict[str, tuple[float, int | None, str]] = {
    "Cartpole-Balance": (1.1e6, 4096, "Isaac Lab, RTX 4090, Cartpole, 4,096 envs"),
    "Humanoid": (94e3, None, "Isaac Lab, RTX 4090, Humanoid-class walking robot"),
}


def log(msg: str) -> None:
    """Progress to stderr (the markdown tables go to stdout)."""
    print(msg, file=sys.stderr, flush=True)


def _version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``absent``."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _commit() -> str:
    """Short commit of the checkout, ``+dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        # A copy of the tree without .git (the device machine gets a working tree, maybe no history).
        return os.environ.get("ROBOLEARN_COMMIT", "unknown")
    return head + ("+dirty" if dirty else "")


def machine_info(device: str) -> dict[str, Any]:
    """Where and with what it ran: accelerator, cores, versions of every library the benchmarks use, commit."""
    dev = torch.device(device)
    info: dict[str, Any] = {
        "device": str(dev),
        "accelerator": "none (CPU)",
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda or "none",
        "commit": _commit(),
        "load": round(os.getloadavg()[0], 2),
    }
    if dev.type == "cuda" and torch.cuda.is_available():
        prop = torch.cuda.get_device_properties(dev)
        info["accelerator"] = f"{prop.name} ({prop.total_memory / 2**30:.0f} GiB)"
    for dist in ("robolearn", "mujoco", "mujoco-warp", "warp-lang", "rsl-rl-lib", "stable-baselines3"):
        info[dist] = _version(dist)
    return info


def print_machine(info: dict[str, Any], command: Sequence[str]) -> None:
    """The machine and versions as a markdown paragraph, with the exact command."""
    print(f"\n`{' '.join(command)}`\n")
    print("| " + " | ".join(info) + " |")
    print("|" + "---|" * len(info))
    print("| " + " | ".join(str(v) for v in info.values()) + " |")


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A markdown table under a ``###`` title."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def sync(device: torch.device) -> None:
    """Wait for every queued kernel of ``device`` (a no-op on the CPU).

    ``torch.cuda.synchronize`` is a device-wide barrier, so it also waits for work that Warp queued
    on its own stream: a timer read after it measures the work, not the launch.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds for one call of ``fn``, synchronised before and after so queued work is counted once."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def paired(methods: dict[str, Callable[[], Any]], rounds: int, device: torch.device,
           warmup: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each method per round, interleaved with the order rotated every round.

    ``warmup`` untimed calls of each method first (CUDA context, cuBLAS handles, Warp kernel
    compilation, caching allocator growth), so the rounds time the steady state.
    """
    names = list(methods)
    for name in names:
        for _ in range(warmup):
            methods[name]()
    sync(device)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            times[name].append(timed(methods[name], device))
        log(f"  round {r + 1}/{rounds}: " + "  ".join(f"{n} {times[n][-1] * 1e3:.1f} ms" for n in names))
    return times


def summary(times: dict[str, list[float]], work: float, ref: str) -> dict[str, dict[str, Any]]:
    """Per method: median rate (``work`` units per call), spread, and the median per-round ratio
    ``time(method) / time(ref)`` with its range (the reference's speed-up over that method)."""
    out: dict[str, dict[str, Any]] = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        row: dict[str, Any] = {"rate": work / med, "spread": (max(ts) - min(ts)) / med, "seconds": ts}
        if name != ref:
            ratios = [t / t_ref for t, t_ref in zip(ts, times[ref], strict=True)]
            row["speedup"] = statistics.median(ratios)
            row["speedup_range"] = (min(ratios), max(ratios))
        out[name] = row
    return out


def fmt_rate(rate: float) -> str:
    """A rate with a k or M suffix."""
    if rate >= 1e6:
        return f"{rate / 1e6:.2f}M"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f}k"
    return f"{rate:.0f}"


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--backend``, ``--quick``, ``--json``, ``--threads`` (every GPU script has them)."""
    parser.add_argument("--device", default="cuda", help="torch device of env and learners (default cuda)")
    parser.add_argument("--backend", default="warp",
                        help="simulation backend of the robolearn env (default warp; mujoco is the CPU batch)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a CPU smoke run of the whole script in seconds (no figures)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads and MuJoCo nthread (default: all cores on cuda, 1 with --quick)")
    parser.add_argument("--json", help="write every measurement here")


def setup(args: argparse.Namespace) -> torch.device:
    """Check the device, set the thread count; returns the device."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available here (torch {torch.__version__}); "
                         "use --device cpu (with --backend mujoco for the CPU batch) for a smoke run")
    if args.threads is None:
        args.threads = 1 if args.quick else (os.cpu_count() or 1)
    torch.set_num_threads(args.threads)
    return device


def make_env(task: str, num_envs: int, backend: str, device: torch.device | str, seed: int = 0,
             nthread: int | None = None, graph_capture: bool | None = None, **overrides: Any) -> Any:
    """``robolearn.make`` with the backend and device; ``nthread`` only for the MuJoCo CPU batch.

    ``graph_capture`` (Warp only, through ``sim_options``): ``None`` keeps the backend's default
    (Warp records its step as a CUDA graph on CUDA), ``True``/``False`` asks for it explicitly, so
    a captured and an uncaptured column really differ. Asking a backend without graph capture for
    it is a ValueError naming the backend.
    """
    import robolearn

    kwargs: dict[str, Any] = {"backend": backend, "device": device, "seed": seed}
    if backend in ("mujoco", "reference") and nthread is not None:
        kwargs["nthread"] = nthread
    if graph_capture and backend != "warp":
        raise ValueError(f"graph_capture: backend {backend!r} has no graph capture (backend 'warp' has)")
    if graph_capture is not None and backend == "warp":
        kwargs["sim_options"] = {"graph_capture": bool(graph_capture)}
    return robolearn.make(task, num_envs, **kwargs, **overrides)


def unsupported(task: str, backend: str) -> str | None:
    """Why ``backend`` cannot run ``task`` (the Warp backend's ``UNSUPPORTED_TASKS``), else ``None``."""
    if backend != "warp":
        return None
    try:
        from robolearn.sim import warp_backend
    except ImportError as exc:  # warp not installed: every task is out, with the reason
        return f"warp backend not importable: {exc}"
    table: dict[str, str] = getattr(warp_backend, "UNSUPPORTED_TASKS", {})
    return table.get(task)


def parse_sets(pairs: Sequence[str], cfg_cls: type, base: dict[str, Any]) -> Any:
    """A config dataclass from ``base`` plus ``key=value`` overrides (values as Python literals).

    Lets a GPU run switch on options of the learners (``torch.compile``, CUDA graphs) that land
    after this script, without editing it; an unknown key names the known ones.
    """
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    kwargs = dict(base)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in fields:
            raise SystemExit(f"--set {pair!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(fields))}")
        try:
            kwargs[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            kwargs[key] = raw  # a bare string such as schedule=fixed
    return cfg_cls(**kwargs)


def write_json(path: str | None, doc: dict[str, Any]) -> None:
    """Save ``doc`` (tuples become lists) when a path was given."""
    if path:
        Path(path).write_text(json.dumps(doc, indent=1, default=str))
