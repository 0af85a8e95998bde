"""Image datasets in robolearn HDF5 (issue 16): chunking and compression of uint8 frame groups,
random-batch reads through :class:`robolearn.data.formats.HDF5Frames`, and eager vs lazy loading.

The frames are synthetic rendered-style 84x84x3 images: a sky gradient, a MuJoCo-like checker floor
in perspective, a moving cart and pole with flat shading and a soft shadow, and no sensor noise
(offscreen renders have none). ``--noise SIGMA`` adds Gaussian sensor noise of SIGMA grey levels,
for camera-like frames.

Part 1, for every filter (none, lzf, gzip 1/4/6/9) and frames per chunk (1, 4, 16): the file size
and compression ratio, the write rate of ``h5py``'s ``create_dataset``, the read rate of the whole
array, and the mean time of ``--batches`` random batches of ``--batch`` frames read through
``HDF5Frames`` (the file is opened by one untimed read first).

Part 2 (``--memory-frames`` frames in 100-step episodes): ``Dataset.save`` at its defaults (gzip 4,
one frame per chunk), then ``Dataset.load`` eager and with ``lazy_images=True``: load time, the
peak memory ``tracemalloc`` traces for the load plus one sampled batch (NumPy buffers are traced),
and the mean ``Dataset.sample`` time over 10 batches.

    OMP_NUM_THREADS=1 python benchmarks/image_dataset.py --frames 1000 --memory-frames 2000
    OMP_NUM_THREADS=1 python benchmarks/image_dataset.py --noise 2 --skip-memory   # camera-like frames
    OMP_NUM_THREADS=1 python benchmarks/image_dataset.py --quick                   # smoke
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_line  # noqa: E402  (benchmarks/ is not a package)

from robolearn.data import Dataset
from robolearn.data.formats import HDF5Frames

FILTERS: list[tuple[str | None, int | None]] = [(None, None), ("lzf", None), ("gzip", 1), ("gzip", 4), ("gzip", 6), ("gzip", 9)]
"""(compression, gzip level) pairs of part 1."""


def frames(n: int, h: int = 84, w: int = 84, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """``n`` rendered-style uint8 frames ``[n, h, w, 3]`` of a cart-pole (module doc), with
    Gaussian noise of ``noise`` grey levels when it is positive."""
    rng = np.random.default_rng(seed)
    sensor = np.random.default_rng(seed + 1)  # its own stream: the noisy frames show the same motion
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    sky = np.stack([60 + 80 * yy / h, 90 + 90 * yy / h, 160 + 60 * yy / h], -1)
    horizon = h * 0.55
    floor = yy > horizon
    depth = 1.0 / np.maximum(yy - horizon, 1)
    # Checker squares shrink towards the horizon: a perspective floor compresses like a rendered one.
    checker = ((np.floor((xx - w / 2) * depth * 8) + np.floor(depth * 200)) % 2).astype(np.float32)
    shade = 0.6 + 0.4 * (yy - horizon) / (h - horizon)
    base = sky.copy()
    base[floor] = (np.stack([40 + 40 * checker, 60 + 40 * checker, 80 + 40 * checker], -1) * shade[..., None])[floor]
    out = np.empty((n, h, w, 3), np.uint8)
    x, xv, th, thv = 0.0, 0.0, np.pi, 0.0
    for t in range(n):
        # A noisy cart-pole trajectory, so consecutive frames differ as in an episode.
        xv += rng.normal(0, 0.05)
        x = float(np.clip(x + xv * 0.05, -1, 1))
        thv += rng.normal(0, 0.2) - 0.5 * np.sin(th) * 0.1
        th += thv * 0.05
        img = base.copy()
        cx, cy = w / 2 + x * w * 0.3, h * 0.6
        img[((xx - cx) / 14) ** 2 + ((yy - h * 0.72) / 3) ** 2 < 1] *= 0.6  # shadow
        cart = (abs(xx - cx) < 8) & (abs(yy - cy) < 4)
        img[cart] = np.array([200, 120, 60]) * (0.8 + 0.2 * (cy - yy[cart]) / 4)[:, None]
        dx, dy = 25 * np.sin(th), -25 * np.cos(th)
        along = np.clip(((xx - cx) * dx + (yy - cy) * dy) / (dx * dx + dy * dy + 1e-6), 0, 1)
        pole = np.hypot(xx - cx - along * dx, yy - cy - along * dy) < 1.8
        img[pole] = np.array([220, 200, 120]) * (0.85 + 0.15 * along[pole])[:, None]
        if noise > 0:
            img = img + sensor.normal(0, noise, img.shape)
        out[t] = np.clip(img, 0, 255)
    return out


def chunking(imgs: np.ndarray, chunks: list[int], batch: int, batches: int, folder: Path) -> list[dict[str, Any]]:
    """Part 1 (module doc): one row per filter x frames per chunk."""
    n = len(imgs)
    raw = imgs.nbytes
    rng = np.random.default_rng(1)
    idx = [torch.as_tensor(rng.integers(0, n, batch)) for _ in range(batches)]
    rows = []
    for comp, level in FILTERS:
        for k in chunks:
            path = folder / f"{comp}{level}_{k}.h5"
            opts: dict[str, Any] = {} if comp is None else {"compression": comp}
            if level is not None:
                opts["compression_opts"] = level
            t0 = time.perf_counter()
            with h5py.File(path, "w") as f:
                f.create_dataset("x", data=imgs, chunks=(k, *imgs.shape[1:]), **opts)
            t_write = time.perf_counter() - t0
            size = path.stat().st_size
            with h5py.File(path, "r") as f:
                t0 = time.perf_counter()
                back = f["x"][()]
                t_read = time.perf_counter() - t0
            if not np.array_equal(back, imgs):
                raise RuntimeError(f"{comp} {level} chunk {k}: the frames read back differ from those written")
            src = HDF5Frames(path, "x", imgs.shape, k)
            src[idx[0]]  # opens the file outside the timing
            t0 = time.perf_counter()
            for b in idx:
                src[b]
            t_batch = (time.perf_counter() - t0) / len(idx)
            src.close()
            path.unlink()
            name = "none" if comp is None else comp + ("" if level is None else f" {level}")
            rows.append({"filter": name, "chunk": k, "mib": size / 2**20, "ratio": raw / size, "write_mbs": raw / t_write / 1e6,
                         "read_mbs": raw / t_read / 1e6, "batch_ms": t_batch * 1e3})
    return rows


def memory(n: int, batch: int, noise: float, folder: Path) -> dict[str, Any]:
    """Part 2 (module doc): ``Dataset.save`` then eager and lazy ``Dataset.load`` of ``n`` frames."""
    imgs = frames(n, noise=noise)
    term = np.zeros(n, bool)
    term[np.arange(99, n, 100)] = True
    ends = int(term.sum())
    ds = Dataset({"policy": np.zeros((n, 4), np.float32), "image": imgs}, np.zeros((n, 1), np.float32),
                 np.zeros(n, np.float32), term, np.zeros(n, bool),
                 final_observations={"policy": np.zeros((ends, 4), np.float32), "image": imgs[:ends]})
    t0 = time.perf_counter()
    path = Path(ds.save(folder / "m.h5"))
    out: dict[str, Any] = {"frames": n, "raw_mib": imgs.nbytes / 2**20, "save_s": time.perf_counter() - t0,
                           "file_mib": path.stat().st_size / 2**20}
    del ds, imgs
    for lazy in (False, True):
        tracemalloc.start()
        t0 = time.perf_counter()
        back = Dataset.load(path, lazy_images=lazy)
        t_load = time.perf_counter() - t0
        first = back.sample(batch, torch.Generator().manual_seed(0))
        if tuple(first.obs["image"].shape) != (batch, 84, 84, 3):
            raise RuntimeError(f"sample: expected images [{batch}, 84, 84, 3], got {list(first.obs['image'].shape)}")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        t0 = time.perf_counter()
        for s in range(10):
            back.sample(batch, torch.Generator().manual_seed(s))
        out["lazy" if lazy else "eager"] = {"load_ms": t_load * 1e3, "peak_mib": peak / 2**20,
                                            "sample_ms": (time.perf_counter() - t0) / 10 * 1e3}
        del back, first
    path.unlink()
    return out


def machine() -> str:
    """One line: processor, cores, load, versions, commit, threads."""
    return machine_line({"h5py": f"{h5py.__version__} (HDF5 {h5py.version.hdf5_version})", "numpy": np.__version__})


def main() -> None:
    """Run both parts and print them as markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=1000, help="frames of part 1 (default 1000)")
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 4, 16], help="frames per chunk (default 1 4 16)")
    parser.add_argument("--batch", type=int, default=256, help="frames per random batch (default 256)")
    parser.add_argument("--batches", type=int, default=20, help="timed random batches per row (default 20)")
    parser.add_argument("--memory-frames", type=int, default=2000, help="frames of part 2 (default 2000)")
    parser.add_argument("--skip-memory", action="store_true", help="part 1 only")
    parser.add_argument("--noise", type=float, default=0.0, help="sensor noise sigma in grey levels (default 0)")
    parser.add_argument("--quick", action="store_true", help="smoke: 200 frames, chunks 1 16, 3 batches of 64")
    args = parser.parse_args()
    if args.quick:
        args.frames, args.chunks, args.batch, args.batches, args.memory_frames = 200, [1, 16], 64, 3, 400
    torch.set_num_threads(1)
    imgs = frames(args.frames, noise=args.noise)
    print(machine())
    print(f"\n{args.frames} frames {imgs.shape[1]}x{imgs.shape[2]}x{imgs.shape[3]} uint8, sensor noise sigma "
          f"{args.noise:g}, raw {imgs.nbytes / 2**20:.2f} MiB; random batches of {args.batch} (mean of {args.batches})\n")
    print(f"| filter | frames per chunk | size (MiB) | ratio | write (MB/s) | full read (MB/s) | random batch of {args.batch} (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for r in chunking(imgs, args.chunks, args.batch, args.batches, Path(d)):
            print(f"| {r['filter']} | {r['chunk']} | {r['mib']:.2f} | {r['ratio']:.1f} | {r['write_mbs']:.0f} | "
                  f"{r['read_mbs']:.0f} | {r['batch_ms']:.1f} |", flush=True)
        del imgs
        if args.skip_memory:
            return
        m = memory(args.memory_frames, args.batch, args.noise, Path(d))
    print(f"\nDataset.save of {m['frames']} frames (gzip 4, 1 frame per chunk): {m['save_s']:.2f} s, "
          f"{m['file_mib']:.2f} MiB (raw {m['raw_mib']:.1f} MiB)\n")
    print(f"| Dataset.load | load (ms) | peak traced memory, load + 1 batch (MiB) | sample({args.batch}) (ms) |")
    print("|---|---:|---:|---:|")
    for mode in ("eager", "lazy"):
        r = m[mode]
        print(f"| {'lazy_images=True' if mode == 'lazy' else 'eager'} | {r['load_ms']:.0f} | {r['peak_mib']:.1f} | {r['sample_ms']:.1f} |")


if __name__ == "__main__":
    main()
