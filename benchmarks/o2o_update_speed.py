"""Gradient steps/s of the offline-to-online learners at a network width (BENCHMARKS.md, the
CPU-sized protocol): SAC with 10 and 2 critics, Cal-QL with 10 and 2 critics, IQL; batch 256,
6-D observations and 2-D actions (the maze's), one torch thread, a fixed random batch.

    python benchmarks/o2o_update_speed.py --width 64 [--steps 30] [--cql-n-actions 10]
"""

from __future__ import annotations

import argparse
import time

import torch

from robolearn.algos import SAC, SACConfig
from robolearn.algos.cql import CQL, CalQLConfig
from robolearn.algos.iql import IQL, IQLConfig
from robolearn.types import Batch


def main() -> int:
    """Time each learner's update and print updates/s."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cql-n-actions", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    b, o, a, h = 256, 6, 2, (args.width, args.width)
    batch = Batch(obs={"policy": torch.randn(b, o)}, action=torch.rand(b, a) * 2 - 1, reward=torch.randn(b),
                  next_obs={"policy": torch.randn(b, o)}, terminated=torch.zeros(b, dtype=torch.bool),
                  truncated=torch.zeros(b, dtype=torch.bool), extras={"mc_return": torch.randn(b)})
    n = args.cql_n_actions
    agents = {
        "sac, 10 critics (2 per target)": SAC({"policy": o}, a, SACConfig(num_critics=10, num_target_subset=2, layer_norm=True,
                                                                     learning_starts=0, actor_hidden=h, critic_hidden=h)),
        "sac, 2 critics": SAC({"policy": o}, a, SACConfig(learning_starts=0, actor_hidden=h, critic_hidden=h)),
        f"calql, 10 critics, n_actions {n}": CQL({"policy": o}, a, CalQLConfig(num_critics=10, layer_norm=True, actor_hidden=h,
                                                                             critic_hidden=h, cql_n_actions=n)),
        f"calql, 2 critics, n_actions {n}": CQL({"policy": o}, a, CalQLConfig(actor_hidden=h, critic_hidden=h, cql_n_actions=n)),
        "iql": IQL({"policy": o}, a, IQLConfig(actor_hidden=h, critic_hidden=h, value_hidden=h)),
    }
    print(f"width {args.width}, batch {b}, one thread")
    for name, agent in agents.items():
        for _ in range(3):
            agent.update(batch)
        start = time.perf_counter()
        for _ in range(args.steps):
            agent.update(batch)
        print(f"{name:36} {args.steps / (time.perf_counter() - start):8.1f} updates/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
