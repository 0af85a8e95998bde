"""Env steps/s: MuJoCo Warp (``backend="warp"``) vs the C batch (``backend="mujoco"``), issue 15.

With ``graph_capture`` (a column of its own) the step's launches are recorded once and replayed
without Python per kernel (a CUDA graph on a GPU, Warp's API capture on the CPU device).

On this CPU Warp runs on its CPU device, which executes each kernel as a serial loop over worlds
and pays a Python launch overhead per kernel (a MuJoCo Warp step is ~100 launches): it is expected
to be far slower than the C batch and is recorded, not a target. With ``--device cuda`` the same
script times Warp on a GPU against the C batch on the host's cores.

For every task and N: build both envs, ``--warmup`` untimed steps (Warp compiles or loads its
kernels there), then steps of uniform random actions until ``--seconds`` have passed (at least
``--min-steps``); the rate is ``N * steps / elapsed``. One torch thread and one physics thread
(``OMP_NUM_THREADS=1``) unless ``--nthread`` says otherwise, so both backends use one core.

    OMP_NUM_THREADS=1 python benchmarks/warp_cpu.py
    OMP_NUM_THREADS=1 python benchmarks/warp_cpu.py --tasks Cartpole-Balance --sizes 16 --seconds 1   # smoke
    python benchmarks/warp_cpu.py --device cuda --sizes 1024 4096 --nthread 16                       # GPU machine
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import robolearn


def rate(task: str, n: int, backend: str, device: str, args: argparse.Namespace, graph_capture: bool = False) -> float:
    """Env steps/s of ``task`` with ``n`` worlds on ``backend`` (Warp: its launches recorded and
    replayed as a graph with ``graph_capture``; explicit, as Warp captures by default on CUDA)."""
    if backend == "warp":
        env = robolearn.make(task, n, backend="warp", device=device, seed=0, sim_options={"graph_capture": graph_capture})
    else:
        env = robolearn.make(task, n, backend=backend, device="cpu", seed=0, nthread=args.nthread)
    dev = env.device
    gen = torch.Generator(device=dev).manual_seed(0)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def act() -> torch.Tensor:
        # Drawn on the env's device: a host tensor copied to a GPU would sync the host each step.
        return torch.rand(n, env.action_dim, generator=gen, device=dev) * 2 - 1

    for _ in range(args.warmup):
        env.step(act())
    sync()
    steps, start = 0, time.perf_counter()
    while steps < args.min_steps or time.perf_counter() - start < args.seconds:
        env.step(act())
        steps += 1
        if dev.type == "cuda" and steps % 50 == 0:
            sync()
    sync()
    return n * steps / (time.perf_counter() - start)


def main() -> None:
    """Print the markdown table of steps/s and ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["Cartpole-Balance", "HalfCheetah"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[16, 64, 256])
    parser.add_argument("--device", default="cpu", help="Warp's device: cpu (default) or cuda[:k]")
    parser.add_argument("--nthread", type=int, default=1, help="physics threads of the C batch (default 1)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per cell (default 5)")
    parser.add_argument("--min-steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, torch threads 1, "
          f"C batch nthread={args.nthread}, Warp device={args.device}, {os.cpu_count()} cores")
    print()
    print(f"| task | N | Warp ({args.device}) steps/s | Warp graph-captured steps/s | C batch steps/s | Warp / C "
          "| captured / C |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for task in args.tasks:
        for n in args.sizes:
            warp = rate(task, n, "warp", args.device, args)
            graph = rate(task, n, "warp", args.device, args, graph_capture=True)
            cpu = rate(task, n, "mujoco", "cpu", args)
            print(f"| {task} | {n} | {warp:,.0f} | {graph:,.0f} | {cpu:,.0f} | {warp / cpu:.3f} | {graph / cpu:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
