"""Inference latency of exported chunk samplers at batch 1 (issue 14, BENCHMARKS.md "Expressive policies").

Each configuration is a ``ChunkModel`` at the learners' default size (``robolearn.algos.gbc``:
MLP backbone 256x256x256, U-Net channels (64, 128), horizon H = 16, execute k = 8, 2 observation
frames, 100 diffusion steps) over HalfCheetah's 17-D observation and 6-D action, exported with
``robolearn.export.export_chunk_policy`` (sampler steps baked in, the noise an input) and loaded by
the deploy side (``load_exported``: ONNX Runtime, one intra-op thread, sequential). Rows: rectified
flow (Euler) and DDPM sampled by DDIM at 1, 4 and 10 steps, the one-step head (a flow in one step:
the graph a distilled head exports), on the MLP and, unless ``--no-unet``, the U-Net.

Two figures per row, all rows measured in one process, interleaved in rounds so that each sees the
same machine load:

* **plan**: one sampler call, ``policy(obs [1, 2*17], noise [1, 16, 6])``;
* **control step**: the deploy runtime's chunk step (``DeployRuntime._chunk_action``: push the frame
  into the ``ChunkExecutor``, plan when it asks with noise from the seeded generator, pop the
  action) -- a *pop* step (no plan) and a *plan* step are reported apart, and the mean over steps
  is the amortised per-action cost, ``(plan + (k - 1) pop) / k``, beside ``plan / k + pop``.

    OMP_NUM_THREADS=1 python benchmarks/generative_latency.py [--calls 1000] [--no-unet]
        [--json out.json] [--md out.md]

Weights are untrained (latency does not depend on them). Percentiles are over single calls timed
with ``perf_counter_ns`` (wall clock). Each call is also timed in the calling thread's CPU time
(``thread_time_ns``; ONNX Runtime with one intra-op thread computes in the caller's thread): on a
shared machine the wall-clock tail is mostly time spent preempted, which CPU time leaves out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import robolearn
from robolearn.export import export_chunk_policy
from robolearn.nn.generative import ChunkModel, ChunkModelSpec, ChunkSampler
from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployRuntime
from robolearn.sim2real.deploy.safety import SafetyConfig
from robolearn.sim2real.robots.base import RobotFeatures
from robolearn.spec.chunking import ChunkSpec

sys.path.insert(0, str(Path(__file__).parent))
from deploy_latency import BenchRobot  # noqa: E402  (the in-memory robot of the deploy benchmark)

HORIZON, EXECUTE, HISTORY = 16, 8, 2
"""The GBC learners' default chunking (robolearn/algos/gbc/config.py)."""


def configurations(unet: bool) -> list[tuple[str, str, str, int]]:
    """``(label, model, backbone, steps)`` of every row."""
    rows = []
    for backbone in ("mlp", "unet") if unet else ("mlp",):
        for model in ("flow", "diffusion"):
            for steps in (1, 4, 10):
                name = "flow (Euler)" if model == "flow" else "diffusion (DDIM)"
                rows.append((f"{name} {backbone} {steps} step{'s' if steps > 1 else ''}", model, backbone, steps))
        rows.append((f"one-step head {backbone}", "flow", backbone, 1))
    return rows


def build(spec: dict, model: str, backbone: str, steps: int, folder: Path, one_step: bool) -> DeployRuntime:
    """Export one sampler and build a deploy runtime on the in-memory robot around it."""
    obs_dim = int(np.prod(spec["observations"]["policy"]["shape"]))
    torch.manual_seed(0)
    m = ChunkModel(ChunkModelSpec(model, obs_dim, spec["action_dim"], horizon=HORIZON, obs_history=HISTORY,
                                  backbone=backbone), -1.0, 1.0)
    export_chunk_policy(ChunkSampler(m, steps), ChunkSpec(HORIZON, EXECUTE, HISTORY), spec, folder, ("onnx",),
                        one_step=one_step, parity_draws=2, parity_samples=4)
    policy = load_exported(folder)
    joints = tuple(spec["joint_order"])
    features = RobotFeatures("bench", tuple(spec["qpos_joints"]), joints, "torque", float(spec["control_rate_hz"]),
                             tuple((-np.inf, np.inf) for _ in joints), tuple(30.0 for _ in joints),
                             tuple(1.0 for _ in joints), tuple(0.0 for _ in joints))
    return DeployRuntime(policy, BenchRobot(features), SafetyConfig(ramp_s=0.0), record=False, seed=0)


def stats(ns: list[int]) -> dict[str, float]:
    """p50/p99/mean in microseconds."""
    a = np.asarray(ns, dtype=np.float64) / 1e3
    return {"p50_us": round(float(np.percentile(a, 50)), 1), "p99_us": round(float(np.percentile(a, 99)), 1),
            "mean_us": round(float(a.mean()), 1), "n": int(a.size)}


def measure(rows: list[tuple[str, str, str, int]], runtimes: list[DeployRuntime], calls: int, block: int) -> list[dict[str, Any]]:
    """Plan and control-step timings of every row, interleaved in rounds of ``block`` calls."""
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    plan_cpu: list[list[int]] = [[] for _ in rows]
    step_cpu: list[list[int]] = [[] for _ in rows]
    plans: list[list[int]] = [[] for _ in rows]
    pops: list[list[int]] = [[] for _ in rows]
    plan_steps: list[list[int]] = [[] for _ in rows]
    frames, conds, noises = [], [], []
    for rt in runtimes:
        reading = rt.robot.read()
        frames.append(rt.adapter(reading, rt.last_action))
        conds.append(np.repeat(frames[-1], HISTORY, axis=1))
        noises.append(rt.draw_noise())
    calls_fn: list[Callable[[], np.ndarray]] = [
        (lambda rt=rt, c=c, n=n: rt.policy(c, n)) for rt, c, n in zip(runtimes, conds, noises, strict=True)
    ]
    for fn, rt, frame in zip(calls_fn, runtimes, frames, strict=True):  # warm-up
        for _ in range(20):
            fn()
            rt._chunk_action(frame)
    for _ in range(max(1, calls // block)):
        for i, (fn, rt, frame) in enumerate(zip(calls_fn, runtimes, frames, strict=True)):
            for _ in range(block):
                c, t = cpu(), clock()
                fn()
                plans[i].append(clock() - t)
                plan_cpu[i].append(cpu() - c)
            # The same number of control steps: EXECUTE of them make one plan.
            for _ in range(block):
                before = rt.plans
                c, t = cpu(), clock()
                rt._chunk_action(frame)
                dt = clock() - t
                step_cpu[i].append(cpu() - c)
                (plan_steps[i] if rt.plans != before else pops[i]).append(dt)
    out = []
    for i, (label, model, backbone, steps) in enumerate(rows):
        plan, pop, ps = stats(plans[i]), stats(pops[i]), stats(plan_steps[i])
        steps_all = pops[i] + plan_steps[i]
        out.append({
            "row": label, "model": model, "backbone": backbone, "steps": steps, "execute": EXECUTE,
            "plan": plan, "pop_step": pop, "plan_step": ps,
            "per_action_mean_us": round(float(np.mean(steps_all)) / 1e3, 1),
            "per_action_formula_us": round(plan["p50_us"] / EXECUTE + pop["p50_us"], 1),
            "control_step_p99_us": stats(steps_all)["p99_us"],
            "plan_cpu": stats(plan_cpu[i]),
            "per_action_cpu_mean_us": round(float(np.mean(step_cpu[i])) / 1e3, 1),
        })
    return out


def machine() -> dict[str, Any]:
    """Where it ran: cores, load, versions, commit."""
    import onnxruntime

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, check=False).stdout.strip()
    except OSError:
        commit = "unknown"
    return {"nproc": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "processor": platform.processor() or platform.machine(), "python": platform.python_version(),
            "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "robolearn": robolearn.__version__
            if hasattr(robolearn, "__version__") else "", "commit": commit,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")}


def markdown(results: list[dict[str, Any]], info: dict[str, Any], command: str) -> str:
    """The results as a markdown table with the command and the machine."""
    lines = [
        f"Command: `{command}`",
        "",
        f"Machine: {info['nproc']} cores ({info['processor']}), load average {info['load_average']} at the end; "
        f"Python {info['python']}, torch {info['torch']}, ONNX Runtime {info['onnxruntime']} (1 thread), "
        f"commit {info['commit']}. H = {HORIZON}, k = {EXECUTE}, {HISTORY} frames, HalfCheetah 17-D obs / 6-D action.",
        "",
        "| sampler | plan p50 / p99 (us) | plan CPU p50 / p99 (us) | pop step p50 / p99 (us) | plan step p50 (us) | per action: mean / plan/k + pop (us) | per action CPU mean (us) | control step p99 (us) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['row']} | {r['plan']['p50_us']} / {r['plan']['p99_us']} | {r['plan_cpu']['p50_us']} / "
            f"{r['plan_cpu']['p99_us']} | {r['pop_step']['p50_us']} / {r['pop_step']['p99_us']} | "
            f"{r['plan_step']['p50_us']} | {r['per_action_mean_us']} / {r['per_action_formula_us']} | "
            f"{r['per_action_cpu_mean_us']} | {r['control_step_p99_us']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    """Export every row, time them side by side, print (and optionally write) JSON and markdown."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="plan calls (and control steps) per row")
    parser.add_argument("--block", type=int, default=40, help="calls per row per round (a multiple of k)")
    parser.add_argument("--no-unet", action="store_true", help="MLP backbone only")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--md", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in ("onnxscript", "onnx_ir", "torch.onnx"):
        import logging

        logging.getLogger(name).setLevel(logging.ERROR)
    spec = robolearn.make("HalfCheetah", 1, seed=0).policy_spec()
    rows = configurations(not args.no_unet)
    with tempfile.TemporaryDirectory() as tmp:
        runtimes = [build(spec, model, backbone, steps, Path(tmp) / f"r{i}", label.startswith("one-step"))
                    for i, (label, model, backbone, steps) in enumerate(rows)]
        results = measure(rows, runtimes, args.calls, args.block)
    info = machine()
    command = "OMP_NUM_THREADS=1 python benchmarks/generative_latency.py " + " ".join(sys.argv[1:])
    doc = {"command": command.strip(), "machine": info, "horizon": HORIZON, "execute": EXECUTE, "obs_history": HISTORY,
           "results": results}
    text = json.dumps(doc, indent=2)
    print(text)
    print(markdown(results, info, command.strip()))
    if args.json:
        args.json.write_text(text + "\n")
    if args.md:
        args.md.write_text(markdown(results, info, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
