"""torch.compile on CPU for PPO: one update (64 HalfCheetah worlds x 24 steps, 5 epochs x 4
minibatches, 256x3 ELU) with eager vs compiled actor/critic modules, interleaved, 5 rounds.

    python benchmarks/ppo_compile.py
"""

import statistics
import sys
import time
from pathlib import Path

import torch

import robolearn
from robolearn.algos import PPO, PPOConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onpolicy import collect  # noqa: E402  (the benchmarks folder is not a package)

torch.set_num_threads(2)
env = robolearn.make("HalfCheetah", 64, seed=0)
def make(compiled):
    torch.manual_seed(0)
    a = PPO(env.obs_dims, env.action_dim, PPOConfig())
    if compiled:
        a.actor = torch.compile(a.actor)
        a.critic = torch.compile(a.critic)
    return a
def rollout_update(a):
    collect(a, env, env.obs, a.cfg.num_steps)
    t = time.perf_counter()
    a.update()
    return time.perf_counter() - t
eager, comp = make(False), make(True)
t0 = time.perf_counter()
rollout_update(comp)
print("compile warmup s", round(time.perf_counter()-t0,1))
rollout_update(eager)
te, tc = [], []
for _ in range(5):
    te.append(rollout_update(eager))
    tc.append(rollout_update(comp))
print("eager update s", round(statistics.median(te),3), "compiled", round(statistics.median(tc),3), "ratio eager/compiled", round(statistics.median([a/b for a,b in zip(te, tc, strict=True)]),2))
