"""What one CUDA kernel launch and one host round trip cost on this device, the floor under small updates.

A SAC or PPO gradient step of 256-wide networks at batch 256 is ~100-200 small kernels: its time on a
GPU is set by the host's launch rate, not by the GPU, unless the step is captured in a CUDA graph.
This times, on ``--device``:

* ``launch``: ``x.add_(1)`` on a one-element tensor, ``--n`` times, then one synchronise (µs per launch);
* ``sync``: ``x.add_(1); x.item()``, ``--n`` times (µs per launch + device-to-host round trip);
* ``graph``: the same ``--n`` adds captured once in a CUDA graph and replayed (µs per add);
* ``mlp``: a forward and backward pass of a 256x256 ReLU MLP on a batch of 256 plus an Adam step,
  eager (ms per step), the shape of one critic update.

    python benchmarks/cuda_launch.py              # on a CUDA machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch


def timed(fn: Callable[[], None], rounds: int, device: torch.device) -> float:
    """Median seconds of ``fn`` over ``rounds`` calls, synchronised before and after each."""
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> int:
    """Time the four cases and print them as JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=2000, help="launches per timed call")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    device = torch.device(args.device)
    x = torch.zeros(1, device=device)

    def launches() -> None:
        for _ in range(args.n):
            x.add_(1)

    def syncs() -> None:
        for _ in range(args.n // 10):
            x.add_(1)
            x.item()

    launches()
    res = {"launch_us": timed(launches, args.rounds, device) / args.n * 1e6,
           "sync_us": timed(syncs, args.rounds, device) / (args.n // 10) * 1e6}
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        launches()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launches()
    graph.replay()
    res["graph_us"] = timed(graph.replay, args.rounds, device) / args.n * 1e6
    net = torch.nn.Sequential(torch.nn.Linear(23, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 1)).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    batch = torch.randn(256, 23, device=device)

    def mlp_steps() -> None:
        for _ in range(50):
            opt.zero_grad(set_to_none=True)
            net(batch).square().mean().backward()
            opt.step()

    mlp_steps()
    res["mlp_step_ms"] = timed(mlp_steps, args.rounds, device) / 50 * 1e3
    res.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(device))
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
