"""Paired robolearn-vs-raw-physics check for HalfCheetah at N = 64 and 256 (no Gymnasium processes).

Alternates 200 robolearn steps with 200 raw mujoco.batch steps for 12 rounds and prints the median
ratio raw time / robolearn time, with the per-round range.
"""
import statistics
import time

import torch
from mujoco.batch import Batch

import robolearn

torch.set_num_threads(1)
for N in [64, 256]:
    env = robolearn.make("HalfCheetah", N, seed=0)
    env.episode_length[:] = torch.randint(0, 1000, (N,))
    acts = [torch.rand(N, 6) * 2 - 1 for _ in range(64)]
    b = Batch(env.model, N, nthread=2); q = b.bind("qpos"); v = b.bind("qvel"); c = b.bind("ctrl")
    q[:] = env.sim.qpos.numpy(); v[:] = env.sim.qvel.numpy()
    ua = [a.double().numpy() for a in acts]
    ratios = []
    for r in range(12):
        t = time.perf_counter()
        for i in range(200): env.step(acts[i % 64])
        te = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(200):
            c[:] = ua[i % 64]; b.step(nstep=5)
        tr = time.perf_counter() - t
        if r % 3 == 0: q[:] = env.sim.qpos.numpy(); v[:] = env.sim.qvel.numpy()
        ratios.append(tr / te)
    print(N, "rl/raw median", round(statistics.median(ratios), 3), "range", round(min(ratios),3), round(max(ratios),3), "rl us/step", round(te/200*1e6), "raw", round(tr/200*1e6))
