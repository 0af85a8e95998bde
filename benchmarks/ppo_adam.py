"""PPO's update on the CPU with the fused Adam (robolearn's default there) against the per-tensor one.

Paired in one process, one torch thread, the two optimisers alternating; each rep collects one
rollout of Cartpole-Swingup and times ``agent.update()`` on it. Two network sizes: 64x64 tanh with
10 epochs x 32 minibatches of 64 per 8 x 256 steps (SB3's PPO update ratio) and robolearn's default
256x256x256 ELU with 5 x 4 minibatches of 512 per 64 x 32 steps.

    python benchmarks/ppo_adam.py --reps 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import robolearn
from robolearn.algos import PPO, PPOConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onpolicy import collect  # noqa: E402  (the benchmarks folder is not a package)

SHAPES = {
    "64x64, 10x32 minibatches of 64": dict(
        num_envs=8, cfg=dict(num_steps=256, num_epochs=10, num_minibatches=32, actor_hidden=(64, 64),
                             critic_hidden=(64, 64), activation="tanh", normalize_obs=False)),
    "256x256x256, 5x4 minibatches of 512": dict(num_envs=64, cfg=dict(num_steps=32)),
}


def _timed_updates(shape: dict, fused: bool, reps: int) -> list[float]:
    """Seconds of ``reps`` updates of one agent whose Adam is fused or the per-tensor one."""
    env = robolearn.make("Cartpole-Swingup", shape["num_envs"], seed=0)
    agent = PPO(env.obs_dims, env.action_dim, PPOConfig(seed=0, **shape["cfg"]))
    if not fused:
        # The same parameters and lr tensor, stepped one tensor at a time.
        agent.optimizer = torch.optim.Adam(agent.optimizer.param_groups[0]["params"], lr=agent.learning_rate,
                                           foreach=False)
    obs, _ = env.reset(seed=0)
    times = []
    for _ in range(reps + 1):  # the first update warms up
        obs = collect(agent, env, obs, agent.cfg.num_steps)
        start = time.perf_counter()
        agent.update()
        times.append(time.perf_counter() - start)
    return times[1:]


def main() -> None:
    """Run the pairs and print one JSON line per network size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6, help="updates per optimiser and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the optimisers' order alternating")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, shape in SHAPES.items():
        per = {True: [], False: []}
        for round_ in range(args.rounds):
            for fused in ((True, False) if round_ % 2 == 0 else (False, True)):
                per[fused].append(statistics.median(_timed_updates(shape, fused, args.reps)))
        fused_s, default_s = statistics.median(per[True]), statistics.median(per[False])
        print(json.dumps({"shape": name, "update_s_fused": round(fused_s, 4), "update_s_per_tensor": round(default_s, 4),
                          "per_tensor_over_fused": round(default_s / fused_s, 3), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
