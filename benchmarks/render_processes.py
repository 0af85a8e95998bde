"""One renderer process vs several, and reusing a GL context vs a fresh one per batch (issue 16).

``Cartpole-Swingup-Pixels`` (``fixed`` camera, no shadows or reflections: the camera terms' default),
rendered with :class:`~robolearn.sim.render.BatchRenderer` by worker processes started with
``multiprocessing`` (``spawn``), each with its own OpenGL context (the backend
:func:`~robolearn.sim.render.select_gl_backend` picks: EGL on Mesa's llvmpipe without a GPU):

* ``1 proc``: one worker renders all N worlds per batch;
* ``2 procs``: two workers each render N/2 worlds of their own env, at the same time (the parent
  starts both on a batch and waits for both: a batch takes as long as the slower);
* ``fresh ctx``: one worker that creates a new ``BatchRenderer`` (context, scene, GPU/CPU buffers) for
  every batch and closes it after, against ``1 proc`` (one context reused for every batch).

Figures are rendered frames/s (worlds x batches / wall time), the best of ``--repeats`` trials, and
frames per CPU-second (the workers' own process time, their GL threads included): on a machine
shared with other jobs the wall-clock ratio also measures the scheduler's fair share (two processes
get about twice the CPU of one against the same background load), while frames per CPU-second
says whether splitting the worlds costs extra work. The configurations are measured side by side: trial ``k`` of every configuration runs before trial
``k + 1`` of any, so slow phases of a loaded machine fall on all of them alike, and the ratios
(``2 procs / 1 proc``, ``fresh / reused``) are taken within one run. llvmpipe itself rasterises with
``LP_NUM_THREADS`` threads (default: one per core), so one process already uses several cores;
``--lp-threads 1`` pins each context to one thread, the setting under which processes alone add
parallelism.

    OMP_NUM_THREADS=1 python benchmarks/render_processes.py --sizes 84 128 --worlds 16 64 256 \\
        --json /work/bench/h4/render_processes.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import time
from multiprocessing.connection import Connection
from typing import Any


def _worker(conn: Connection, size: int, worlds: int, lp_threads: int | None) -> None:
    """Render ``worlds`` worlds at ``size`` on request: ``("reuse", batches)`` with one context,
    ``("fresh", batches)`` with a new context per batch; answers the wall and CPU seconds taken.
    """
    if lp_threads is not None:
        os.environ["LP_NUM_THREADS"] = str(lp_threads)  # before the GL library is loaded
    import torch

    torch.set_num_threads(1)
    from robolearn.envs import BatchedEnv
    from robolearn.sim.render import BatchRenderer
    from robolearn.tasks.classic.pixels import cartpole_swingup_pixels_cfg

    env = BatchedEnv(cartpole_swingup_pixels_cfg(size), worlds, seed=0)
    env.reset()
    env.step(torch.ones(worlds, 1))  # a moved state: the worlds differ
    ids = list(range(worlds))
    renderer = BatchRenderer(env.model, size, size, shadows=False, reflections=False)
    renderer.render(env.sim, ids, "fixed")  # warm-up: first frames allocate the scene's buffers
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            break
        mode, batches = msg
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(batches):
            if mode == "reuse":
                renderer.render(env.sim, ids, "fixed")
            else:
                with BatchRenderer(env.model, size, size, shadows=False, reflections=False) as fresh:
                    fresh.render(env.sim, ids, "fixed")
        conn.send((time.perf_counter() - t0, time.process_time() - c0))
    renderer.close()
    env.close()


class _Pool:
    """Worker processes rendering a share of the worlds each, started on a batch together."""

    def __init__(self, ctx: Any, size: int, shares: list[int], lp_threads: int | None) -> None:
        self.conns, self.procs = [], []
        for share in shares:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, size, share, lp_threads), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            if conn.recv() != "ready":
                raise RuntimeError("render worker failed to start")
        self.worlds = sum(shares)

    def run(self, mode: str, batches: int) -> tuple[float, float]:
        """Frames/s of ``batches`` batches rendered by every worker at once (wall time of the slowest),
        and frames per CPU-second of the workers together.
        """
        t0 = time.perf_counter()
        for conn in self.conns:
            conn.send((mode, batches))
        cpu = sum(conn.recv()[1] for conn in self.conns)
        frames = self.worlds * batches
        return frames / (time.perf_counter() - t0), frames / cpu

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
        for proc in self.procs:
            proc.join(timeout=60)


def measure(size: int, worlds: int, batches: int, fresh_batches: int, repeats: int, lp_threads: int | None) -> dict[str, float]:
    """Best frames/s of each configuration (module doc), trials interleaved."""
    ctx = mp.get_context("spawn")
    one = _Pool(ctx, size, [worlds], lp_threads)
    two = _Pool(ctx, size, [worlds // 2, worlds - worlds // 2], lp_threads)
    best = dict.fromkeys(("one_proc", "two_procs", "fresh_ctx", "one_proc_cpu", "two_procs_cpu", "fresh_ctx_cpu"), 0.0)
    try:
        for _ in range(repeats):
            for key, pool, mode, n in (("one_proc", one, "reuse", batches), ("two_procs", two, "reuse", batches),
                                       ("fresh_ctx", one, "fresh", fresh_batches)):  # fmt: skip
                wall, cpu = pool.run(mode, n)
                best[key] = max(best[key], wall)
                best[f"{key}_cpu"] = max(best[f"{key}_cpu"], cpu)
    finally:
        one.close()
        two.close()
    best["two_over_one"] = best["two_procs"] / best["one_proc"]
    best["two_over_one_cpu"] = best["two_procs_cpu"] / best["one_proc_cpu"]
    best["fresh_over_reuse"] = best["fresh_ctx"] / best["one_proc"]
    return best


def main() -> None:
    """Measure every size x worlds combination, print a Markdown table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[84, 128])
    parser.add_argument("--worlds", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--batches", type=int, default=3, help="batches (all worlds once) per timed trial")
    parser.add_argument("--fresh-batches", type=int, default=2, help="batches per trial with a fresh context each")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lp-threads", type=int, default=None, help="LP_NUM_THREADS of each worker (llvmpipe)")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    from robolearn.sim.render import select_gl_backend

    backend = select_gl_backend()  # chosen here once; the workers inherit MUJOCO_GL
    rows = []
    for size in args.sizes:
        for worlds in args.worlds:
            r = measure(size, worlds, args.batches, args.fresh_batches, args.repeats, args.lp_threads)
            rows.append({"size": size, "worlds": worlds, **r})
            print(f"# {size}x{size} {worlds} worlds: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    lp = os.environ.get("LP_NUM_THREADS") if args.lp_threads is None else str(args.lp_threads)
    print(f"\nframes/s, MUJOCO_GL={backend}, LP_NUM_THREADS={lp or 'default'}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}\n")
    print("| size | worlds | 1 proc | 2 procs | 2 / 1 | 1 proc /CPU-s | 2 procs /CPU-s | 2 / 1 per CPU-s "
          "| fresh ctx per batch | fresh / reused |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['size']} | {row['worlds']} | {row['one_proc']:.0f} | {row['two_procs']:.0f} | "
              f"{row['two_over_one']:.2f} | {row['one_proc_cpu']:.0f} | {row['two_procs_cpu']:.0f} | "
              f"{row['two_over_one_cpu']:.2f} | {row['fresh_ctx']:.0f} | {row['fresh_over_reuse']:.2f} |")
    if args.json is not None:
        meta = {"gl_backend": backend, "lp_num_threads": lp, "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(),
                "batches": args.batches, "fresh_batches": args.fresh_batches, "repeats": args.repeats}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
