"""Overhead of data-parallel PPO on gloo: one PPO update with 1 rank vs 2 ranks (issue 15).

Each rank holds the same per-rank batch (``--num-envs`` x ``--num-steps`` transitions of random
observations and rewards, through the real :class:`robolearn.algos.ppo.PPO` verbs ``act``,
``process``, ``compute_returns``) and runs ``PPO.update`` (``num_epochs x num_minibatches``
gradient steps). With 2 ranks the agent is attached by :func:`robolearn.runners.distributed.attach`:
every backward all-reduces the gradients (one bucket), the KL is averaged per minibatch and the
normalisers average their batch moments on every ``act``. Both groups run on 127.0.0.1 with one
torch thread per process; the 1-rank and 2-rank groups alternate in ``--rounds`` rounds, each timing
``--updates`` updates after one warm-up. Reported per configuration: the median wall time of an
update and of a rollout step (``act`` + ``process``), and the CPU time of the update in the rank's
process (which a loaded machine inflates less than the wall time); the overhead ratio is the
median over rounds of (2-rank time / 1-rank time). The same per-rank batch means a 2-rank update
learns from twice the data in (ideally) the same time.

    python benchmarks/distributed_overhead.py [--rounds 5] [--updates 3] [--obs-dim 48] [--action-dim 12]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import torch


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    """One rank: build PPO, attach it when ``world > 1``, time rollouts and updates, save the timings."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    from robolearn.algos.ppo import PPO, PPOConfig
    from robolearn.runners import distributed
    from robolearn.types import Transition

    distributed.join_group("cpu")
    try:
        hidden = tuple(int(h) for h in args.hidden.split(","))
        cfg = PPOConfig(num_steps=args.num_steps, actor_hidden=hidden, critic_hidden=hidden, seed=rank)
        agent = PPO({"policy": args.obs_dim}, args.action_dim, cfg)
        if world > 1:
            distributed.attach(agent)
        g = torch.Generator().manual_seed(100 + rank)
        n = args.num_envs
        steps, updates, cpu = [], [], []
        for i in range(args.updates + 1):
            obs = {"policy": torch.randn(n, args.obs_dim, generator=g)}
            start = time.perf_counter()
            for _ in range(args.num_steps):
                action = agent.act(obs)
                nxt = {"policy": torch.randn(n, args.obs_dim, generator=g)}
                done = torch.rand(n, generator=g) < 0.01
                agent.process(Transition(obs, action, torch.randn(n, generator=g), nxt, done, torch.zeros_like(done)))
                obs = nxt
            rollout = (time.perf_counter() - start) / args.num_steps
            agent.compute_returns(obs)
            c0, w0 = time.process_time(), time.perf_counter()
            agent.update()
            if i > 0:  # the first is the warm-up
                updates.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
                steps.append(rollout)
        if rank == 0:
            torch.save({"update": updates, "cpu": cpu, "step": steps}, out)
    finally:
        distributed.finish()


def run_group(world: int, args: argparse.Namespace, out: Path) -> dict[str, list[float]]:
    """Start ``world`` ranks, wait (with a timeout), return rank 0's timings."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, args, str(out))) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
        if p.is_alive():
            p.kill()
            raise RuntimeError(f"a {world}-rank group did not finish in 600 s")
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"a {world}-rank group failed: exit codes {[p.exitcode for p in procs]}")
    return torch.load(out)


def main() -> None:
    """Interleave 1-rank and 2-rank groups; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=3, help="timed updates per group (after one warm-up)")
    parser.add_argument("--obs-dim", type=int, default=48)
    parser.add_argument("--action-dim", type=int, default=12)
    parser.add_argument("--num-envs", type=int, default=64, help="worlds per rank")
    parser.add_argument("--num-steps", type=int, default=24, help="rollout steps per update")
    parser.add_argument("--hidden", default="256,256,256")
    parser.add_argument("--tmp", default="/tmp/robolearn_dist_bench")
    args = parser.parse_args()
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for r in range(args.rounds):
        order = (1, 2) if r % 2 == 0 else (2, 1)  # alternate which goes first
        for world in order:
            t = run_group(world, args, Path(args.tmp) / f"w{world}_r{r}.pt")
            results[world].append({k: statistics.median(v) for k, v in t.items()})
    print(f"# distributed overhead: PPO update, gloo on 127.0.0.1, 1 torch thread per rank; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, torch {torch.__version__}")
    print(f"# per rank: {args.num_envs} worlds x {args.num_steps} steps, obs {args.obs_dim}, actions {args.action_dim}, "
          f"MLP {args.hidden}, PPO defaults (5 epochs x 4 minibatches); {args.rounds} rounds x {args.updates} updates")
    print("| ranks | update wall (ms) | update CPU (ms) | rollout step wall (ms) | transitions per update |")
    print("|---|---|---|---|---|")
    for world in (1, 2):
        med = {k: statistics.median(x[k] for x in results[world]) for k in ("update", "cpu", "step")}
        print(f"| {world} | {1e3 * med['update']:.1f} | {1e3 * med['cpu']:.1f} | {1e3 * med['step']:.2f} | "
              f"{world * args.num_envs * args.num_steps} |")
    ratio: dict[str, Any] = {
        k: statistics.median(b[k] / a[k] for a, b in zip(results[1], results[2], strict=True)) for k in ("update", "cpu", "step")
    }
    per_round = ", ".join(f"{b['update'] / a['update']:.2f}" for a, b in zip(results[1], results[2], strict=True))
    print(f"\n2-rank / 1-rank, median over rounds: update wall {ratio['update']:.2f}x, update CPU {ratio['cpu']:.2f}x, "
          f"rollout step {ratio['step']:.2f}x (per-round update wall ratios: {per_round})")


if __name__ == "__main__":
    main()
