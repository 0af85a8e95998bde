"""Env steps/s with random actions on the GPU backend, N = 1,024 ... 16,384 worlds (issue 15).

For every task and world count N: ``robolearn.make(task, N, backend=..., device=...)``, then
``--warmup`` untimed steps (Warp kernel compilation, CUDA-graph capture, allocator growth), then
``--rounds`` rounds of ``--steps`` steps of ``env.step(uniform(-1, 1) actions)``, each round timed
between two ``torch.cuda.synchronize()`` calls (a device-wide barrier: Warp's stream is waited on
too). The rate is ``N * steps / median round``. One env step is the task's ``decimation`` physics
steps plus the managers (observations, rewards, terminations, resets by index of done worlds).

Side by side in the same run:

* the backend's CUDA-graph step (``graph_capture=True``) where it offers one (``--graph-capture``);
* the CPU batch (``backend="mujoco"`` on all cores) at the same N, fewer steps (``--cpu-steps``),
  so the GPU/CPU ratio comes from one machine and one run;
* the anchors' published figures (Isaac Lab on an RTX 4090: Cartpole 1.1M steps/s at 4,096 envs,
  Humanoid-class ~94k steps/s), as a column; they come from another machine and another stack.

A cell that fails (task unsupported by the backend, out of memory) prints its reason and the run
goes on.

    python benchmarks/gpu_env_throughput.py                        # H100/H200: all tasks, all N
    python benchmarks/gpu_env_throughput.py --quick --device cpu --backend mujoco   # CPU smoke run
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import (  # noqa: E402  (the benchmarks folder is not a package)
    ANCHORS,
    add_common_args,
    fmt_rate,
    log,
    machine_info,
    make_env,
    print_machine,
    print_table,
    setup,
    sync,
    timed,
    unsupported,
    write_json,
)

TASKS = ["Cartpole-Balance", "HalfCheetah", "Ant", "Humanoid", "Quadruped-Flat", "Quadrotor-Hover"]
SIZES = [1024, 2048, 4096, 8192, 16384]
COLUMNS = ["task", "N", "decimation", "steps/s", "graph-captured steps/s", "CPU batch steps/s",
           "GPU / CPU", "anchor (published)", "best / anchor"]


def measure(task: str, n: int, backend: str, device: torch.device, args: argparse.Namespace,
            steps: int, warmup: int, rounds: int, graph_capture: bool | None = None) -> dict[str, Any]:
    """Env steps/s of ``n`` worlds of ``task``: median over ``rounds`` rounds of ``steps`` steps after
    ``warmup`` untimed ones; or the reason it could not run."""
    why = unsupported(task, backend)
    if why is not None:
        return {"error": f"unsupported: {why}"}
    env = None
    try:
        env = make_env(task, n, backend, device, seed=0, nthread=args.threads, graph_capture=graph_capture)
        gen = torch.Generator(device=device).manual_seed(0)
        shape = (env.num_envs, env.action_dim)

        def run(k: int) -> None:
            for _ in range(k):
                # Drawn on the device inside the loop, as a policy's sample would be: no host copy.
                env.step(torch.rand(shape, generator=gen, device=device) * 2.0 - 1.0)

        run(warmup)
        sync(device)
        secs = [timed(lambda: run(steps), device) for _ in range(rounds)]
        med = statistics.median(secs)
        return {"rate": n * steps / med, "decimation": env.cfg.decimation, "seconds": secs,
                "spread": (max(secs) - min(secs)) / med}
    except (RuntimeError, ValueError, TypeError, MemoryError) as exc:
        # One cell out (unknown keyword graph_capture, CUDA OOM, Warp limits): report it, go on.
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
    finally:
        if env is not None:
            env.close()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _cell(res: dict[str, Any] | None) -> str:
    """A rate, or the error, or a dash when not measured."""
    if res is None:
        return "—"
    if "error" in res:
        return f"not run ({res['error']})"
    return f"{fmt_rate(res['rate'])} (±{res['spread'] / 2:.0%})"


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, measure every (task, N), print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--sizes", nargs="+", type=int, default=None, help=f"world counts (default {SIZES})")
    parser.add_argument("--steps", type=int, default=None, help="timed env steps per round (default 200)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 50)")
    parser.add_argument("--graph-capture", choices=["auto", "on", "off"], default="auto",
                        help="also time the backend's CUDA-graph step (auto: on cuda with warp)")
    parser.add_argument("--cpu-steps", type=int, default=None,
                        help="timed steps per round of the CPU batch column (default 20; 0: no CPU column)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.sizes = args.sizes or ([4, 8] if quick else SIZES)
    args.steps = args.steps or (3 if quick else 200)
    args.rounds = args.rounds or (2 if quick else 5)
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 50)
    cpu_steps = args.cpu_steps if args.cpu_steps is not None else (2 if quick else 20)
    device = setup(args)
    graph = args.graph_capture == "on" or (args.graph_capture == "auto" and device.type == "cuda"
                                           and args.backend == "warp")
    # The CPU column is the same measurement when the main one already is the CPU batch.
    cpu_column = cpu_steps > 0 and not (args.backend == "mujoco" and device.type == "cpu")
    info = machine_info(args.device)
    log(f"{info}")

    results: list[dict[str, Any]] = []
    rows = []
    for task in args.tasks:
        for n in args.sizes:
            log(f"{task} N={n}")
            # With a graph column, the main one is the uncaptured step (Warp captures by default on CUDA).
            main_res = measure(task, n, args.backend, device, args, args.steps, args.warmup, args.rounds,
                               graph_capture=False if graph else None)
            graph_res = (measure(task, n, args.backend, device, args, args.steps, args.warmup, args.rounds,
                                 graph_capture=True) if graph else None)
            # The CPU batch has nothing to compile or capture: 2 warm-up steps, 3 rounds at most.
            cpu_res = (measure(task, n, "mujoco", torch.device("cpu"), args, cpu_steps, 2, min(args.rounds, 3))
                       if cpu_column else None)
            best = max((r["rate"] for r in (main_res, graph_res) if r and "rate" in r), default=math.nan)
            ratio = (f"{best / cpu_res['rate']:.1f}×" if cpu_res and "rate" in cpu_res and math.isfinite(best)
                     else "—")
            anchor_rate, anchor_n, anchor_src = ANCHORS.get(task, (math.nan, None, ""))
            show_anchor = math.isfinite(anchor_rate) and (anchor_n is None or anchor_n == n)
            rows.append([
                task, n, main_res.get("decimation", "—"), _cell(main_res), _cell(graph_res), _cell(cpu_res), ratio,
                f"{fmt_rate(anchor_rate)} ({anchor_src})" if show_anchor else "—",
                f"{best / anchor_rate:.2f}×" if show_anchor and math.isfinite(best) else "—",
            ])
            results.append({"task": task, "N": n, "main": main_res, "graph": graph_res, "cpu": cpu_res})

    print_machine(info, ["python", *sys.argv])
    title = (f"Env steps/s, random actions: robolearn backend={args.backend} on {args.device}"
             f" ({args.steps} steps x {args.rounds} rounds, median ± half range)")
    if quick:
        title += " — QUICK SMOKE RUN, not a measurement"
    print_table(title, COLUMNS, rows)
    write_json(args.json, {"machine": info, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
