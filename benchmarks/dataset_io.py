"""Write/load time, file size and memory of a 1M-transition offline dataset (issue 6).

A locomotion-sized dataset (default: HalfCheetah-like, 17 observation numbers, 6 actions; pass
``--obs-dim 27 --action-dim 8`` for Ant-v4-like) of ``--transitions`` steps in 1000-step episodes
(every tenth ends early in a terminal) is written with each compression setting through
:meth:`robolearn.data.Dataset.save` and read back with :meth:`robolearn.data.Dataset.load`.
Observations are random normals by default, the worst case for compression; ``--smooth`` makes
them random walks, closer to real trajectories. Each load runs in a fresh subprocess so its peak
resident memory (``VmHWM``) is its own; the baseline of a process that has only imported
robolearn is subtracted. Also timed: 1000 batches of 256 uniform transitions, 3-step
transitions and 16-step windows, and the returns-to-go of the whole dataset.

    python benchmarks/dataset_io.py [--transitions 1000000] [--obs-dim 17] [--action-dim 6]
                                    [--device cpu] [--threads 1] [--smooth] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robolearn.data import Dataset, DatasetMetadata


def vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def make(n: int, obs_dim: int, action_dim: int, smooth: bool, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    ep_len = 1000
    lengths = []
    while sum(lengths) < n:
        lengths.append(min(ep_len if len(lengths) % 10 else rng.integers(50, ep_len), n - sum(lengths)))
    lengths = np.asarray(lengths)
    ends = np.cumsum(lengths) - 1
    term = np.zeros(n, bool)
    tout = np.zeros(n, bool)
    early = lengths < ep_len
    term[ends[early]] = True
    tout[ends[~early]] = True
    obs = rng.standard_normal((n, obs_dim), dtype=np.float32)
    if smooth:
        obs = np.cumsum(obs * 0.05, axis=0, dtype=np.float32)
    return Dataset(
        obs,
        rng.uniform(-1, 1, (n, action_dim)).astype(np.float32),
        rng.standard_normal(n, dtype=np.float32),
        term,
        tout,
        final_observations=rng.standard_normal((len(lengths), obs_dim), dtype=np.float32),
        metadata=DatasetMetadata(task_id="HalfCheetah-v5", collection="benchmark"),
    )


def tensor_bytes(ds: Dataset) -> int:
    ts = [*ds.observations.values(), *ds.final_observations.values(), *ds.infos.values()]
    ts += [ds.actions, ds.rewards, ds.terminals, ds.timeouts, ds.episode_starts, ds.episode_lengths]
    return sum(t.numel() * t.element_size() for t in ts)


def load_child(path: str, device: str) -> None:
    """Subprocess entry: time one load, report seconds and peak RSS (KiB) as JSON."""
    base = vm_kib("VmHWM")
    t0 = time.perf_counter()
    ds = Dataset.load(path, device=device)
    if ds.device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"load_s": dt, "base_kib": base, "peak_kib": vm_kib("VmHWM"), "n": len(ds)}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--transitions", type=int, default=1_000_000)
    parser.add_argument("--obs-dim", type=int, default=17)
    parser.add_argument("--action-dim", type=int, default=6)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (sampling ops are tiny)"
    )
    parser.add_argument("--smooth", action="store_true", help="random-walk observations (compress better)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--_load", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args._load:
        load_child(args._load, args.device)
        return

    t0 = time.perf_counter()
    ds = make(args.transitions, args.obs_dim, args.action_dim, args.smooth)
    build_s = time.perf_counter() - t0
    results: dict = {
        "transitions": len(ds),
        "episodes": ds.num_episodes,
        "obs_dim": args.obs_dim,
        "action_dim": args.action_dim,
        "observations": "random walk" if args.smooth else "random normal",
        "device": args.device,
        "build_and_validate_s": round(build_s, 3),
        "tensor_mib": round(tensor_bytes(ds) / 2**20, 1),
        "torch_threads": torch.get_num_threads(),
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for compression, level in (("gzip", 4), ("gzip", 1), ("lzf", None), (None, None)):
            path = Path(tmp) / f"d_{compression}_{level}.h5"
            t0 = time.perf_counter()
            ds.save(path, compression=compression, compression_level=level)
            write_s = time.perf_counter() - t0
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--_load",
                    str(path),
                    "--device",
                    args.device,
                    "--threads",
                    str(args.threads),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            child = json.loads(out.stdout.strip().splitlines()[-1])
            run = {
                "compression": f"{compression}-{level}" if level is not None else str(compression),
                "write_s": round(write_s, 3),
                "load_s": round(child["load_s"], 3),
                "file_mib": round(path.stat().st_size / 2**20, 1),
                "load_peak_rss_delta_mib": round((child["peak_kib"] - child["base_kib"]) / 1024, 1),
            }
            results["runs"].append(run)
            print(json.dumps(run), flush=True)

    dev = ds.to(args.device)
    g = torch.Generator(device=args.device).manual_seed(0)
    for name, fn in (
        ("sample_256_x1000_s", lambda: dev.sample(256, g)),
        ("sample_nstep3_256_x1000_s", lambda: dev.sample_nstep(256, 3, 0.99, g)),
        ("windows_h16_256_x1000_s", lambda: dev.sample_windows(256, 16, g)),
    ):
        fn()
        t0 = time.perf_counter()
        for _ in range(1000):
            fn()
        if dev.device.type == "cuda":
            torch.cuda.synchronize()
        results[name] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    dev.returns_to_go(0.99)
    results["returns_to_go_s"] = round(time.perf_counter() - t0, 3)
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
