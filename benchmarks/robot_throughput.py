"""Env throughput of the robot tasks against raw batched physics of the same model (issue 13).

    python benchmarks/robot_throughput.py [--tasks Quadrotor-Hover Quadruped-Flat] [--sizes 64 256 1024 4096]
        [--threads 1] [--seconds 6] [--rounds 6] [--json /work/bench/robot_throughput.json]

Method: the issue-2 benchmark's (``benchmarks/sim_throughput.py``, whose runners this reuses):
``robolearn`` is ``robolearn.make(task, N)`` with every manager (observation groups including the
privileged one, rewards, terminations, randomisation at resets, the curriculum), stepped with
uniform random float32 actions, episode counters staggered; ``raw`` is ``mujoco.batch.Batch`` of
the task's compiled model, only ``qpos``/``qvel``/``ctrl`` bound, replaying states and controls
recorded from a robolearn rollout. Both interleaved in ``--rounds`` slices with the order rotated,
a rate the median over rounds and the ratio the median of the per-round ratios. The target is
robolearn >= 0.8x raw. A task not registered yet (``Quadruped-Flat`` until its family lands) is
skipped with a message.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys

import torch

import robolearn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_throughput import RawRunner, RobolearnRunner, action_pool, measure, paired_ratio, prepare  # noqa: E402


def main() -> None:
    """Time every task at every size; print a table; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["Quadrotor-Hover", "Quadruped-Flat"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--threads", type=int, default=1, help="MuJoCo threads for both (torch gets 1)")
    parser.add_argument("--seconds", type=float, default=6.0, help="timed seconds per method and size")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json", default="/work/bench/robot_throughput.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    known = set(robolearn.list_tasks())
    rows = []
    load_before = os.getloadavg()[0]
    for task in args.tasks:
        if task not in known:
            print(f"{task}: not registered (yet); skipped", file=sys.stderr)
            continue
        setup = prepare(task, args.threads, seed=0)
        for n in args.sizes:
            runners = {
                "robolearn": RobolearnRunner(task, n, args.threads, action_pool(setup.low, setup.high, n, 0), 0),
                "raw": RawRunner(setup.model, setup.decimation, n, args.threads, setup.recording),
            }
            rates = measure(runners, args.seconds, args.rounds, warmup=0.5)
            for r in runners.values():
                r.close()
            row = {
                "task": task,
                "worlds": n,
                "robolearn_steps_per_s": statistics.median(rates["robolearn"]),
                "raw_steps_per_s": statistics.median(rates["raw"]),
                "ratio": paired_ratio(rates["robolearn"], rates["raw"]),
                "rounds": rates,
            }
            rows.append(row)
            print(f"{task} N={n}: robolearn {row['robolearn_steps_per_s']:,.0f}/s, raw {row['raw_steps_per_s']:,.0f}/s, "
                  f"ratio {row['ratio']:.2f}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]
    print(f"\nEnv steps/s, robolearn vs raw batched physics ({args.threads} MuJoCo thread(s), torch 1 thread)\n")
    print("| task | worlds | robolearn | raw | robolearn / raw |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['worlds']} | {r['robolearn_steps_per_s']:,.0f} | {r['raw_steps_per_s']:,.0f} | "
              f"{r['ratio']:.2f} |")
    print(f"\nload average (1 min) before {load_before:.2f}, after {load_after:.2f}")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"args": vars(args), "rows": rows, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                   "load_before": load_before, "load_after": load_after}}, f, indent=1)
    print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
