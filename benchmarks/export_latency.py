"""Batch-1 latency of an exported policy: eager PyTorch vs TorchScript vs ONNX Runtime (issue 3).

The policy is a PPO actor with its observation normaliser folded in (``obs -> action``, 17 -> 6
for HalfCheetah, 256x256x256 ELU), exported by :func:`robolearn.export.export_policy` (which also
checks parity). The normaliser is given non-trivial statistics first. Each call is one
observation in, one action out, as in a robot's control loop: eager runs under
``torch.inference_mode``, TorchScript under ``torch.no_grad``, ONNX Runtime on the CPU provider
with numpy in and out. The calls are timed one by one in blocks of ``--block`` calls per method,
the methods interleaved and their order rotated per block; median and p99 are over all calls.

    python benchmarks/export_latency.py [--calls 2000] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

import robolearn
from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.export import export_policy


def build_policy() -> tuple[nn.Module, dict, int]:
    """A PPO actor with its normaliser, as ``nn.Sequential(normaliser, actor)`` on the CPU in eval mode."""
    env = robolearn.make("HalfCheetah", 64, seed=0)
    spec = env.policy_spec()
    torch.manual_seed(0)
    agent = PPO(env.obs_dims, env.action_dim, PPOConfig())
    obs = env.obs
    for _ in range(50):  # real statistics in the normaliser
        agent.act(obs)
        obs = env.step(torch.rand(64, env.action_dim) * 2 - 1)[0]
    env.close()
    policy = nn.Sequential(agent.actor_normalizer, agent.actor).cpu().eval()
    return policy, spec, int(env.obs_dims["policy"])


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per method")
    parser.add_argument("--block", type=int, default=100, help="calls per method before switching")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls per method first")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads and ORT intra-op threads"
    )
    parser.add_argument("--json", help="save the per-call times here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    policy, spec, obs_dim = build_policy()
    tmp = Path(tempfile.mkdtemp(prefix="export_latency_"))
    manifest = export_policy(policy, spec, tmp)
    scripted = torch.jit.load(str(tmp / manifest["files"]["torchscript"]["path"]))
    scripted.eval()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(
        str(tmp / manifest["files"]["onnx"]["path"]), sess_options=opts, providers=["CPUExecutionProvider"]
    )

    gen = torch.Generator().manual_seed(1)
    pool = [torch.randn(1, obs_dim, generator=gen) for _ in range(64)]
    pool_np = [x.numpy() for x in pool]

    def eager(i: int) -> None:
        with torch.inference_mode():
            policy(pool[i % 64])

    def torchscript(i: int) -> None:
        with torch.no_grad():
            scripted(pool[i % 64])

    def onnxruntime(i: int) -> None:
        session.run(None, {"obs": pool_np[i % 64]})

    methods: dict[str, Callable[[int], None]] = {
        "eager": eager,
        "torchscript": torchscript,
        "onnxruntime": onnxruntime,
    }
    # parity at batch 1 through the same call paths
    with torch.inference_mode():
        ref = policy(pool[0]).numpy()
    with torch.no_grad():
        ts_err = float(np.abs(scripted(pool[0]).numpy() - ref).max())
    ort_err = float(np.abs(session.run(None, {"obs": pool_np[0]})[0] - ref).max())
    print(f"parity at batch 1: torchscript {ts_err:.2g}, onnxruntime {ort_err:.2g}", file=sys.stderr)

    names = list(methods)
    for name in names:
        for i in range(args.warmup):
            methods[name](i)
    times: dict[str, list[float]] = {n: [] for n in names}
    for b in range(max(1, args.calls // args.block)):
        order = names[b % len(names) :] + names[: b % len(names)]
        for name in order:
            fn, ts = methods[name], times[name]
            for i in range(args.block):
                t0 = time.perf_counter()
                fn(i)
                ts.append(time.perf_counter() - t0)

    print(f"\n### Batch-1 policy latency ({args.threads} thread(s), {len(times['eager'])} calls each)\n")
    print("| runtime | median µs | p99 µs | mean µs | speed-up vs eager (median) |")
    print("|---|---:|---:|---:|---:|")
    eager_med = statistics.median(times["eager"])
    for name in names:
        ts = times[name]
        med = statistics.median(ts)
        print(
            f"| {name} | {med * 1e6:.1f} | {percentile(ts, 99) * 1e6:.1f} | {statistics.fmean(ts) * 1e6:.1f} "
            f"| {eager_med / med:.2f}× |"
        )
    print(f"\ntorch {torch.__version__}, onnxruntime {ort.__version__}, files in {tmp}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "times_s": times}, f)


if __name__ == "__main__":
    main()
