"""ReinFlow vs DPPO on the sparse-success PointMaze-Fork: BC pre-training on noisy planner demos, then
online fine-tuning; success and return before/after at 1 and 4 denoising steps, and the env steps and
wall-clock each method needs to reach a success level.

    python benchmarks/reinflow.py run --method reinflow --steps 4 --seed 0 --out /work/bench/reinflow
    python benchmarks/reinflow.py run --method dppo --steps 4 --seed 0 --out /work/bench/reinflow
    python benchmarks/reinflow.py report --out /work/bench/reinflow
    python benchmarks/reinflow.py timing --out /work/bench/reinflow

Every run is one process on one torch thread (a 2-core machine shared with other jobs); ``run``
writes ``<out>/run_<method>_K<steps>_s<seed>.json`` (the evaluation curve: env steps, seconds, success,
return), ``report`` aggregates them (IQM over seeds, 95% percentile-bootstrap intervals) into
``<out>/report.md``. Pre-trained models are cached per (kind, seed) in ``<out>/pretrain_*.pt``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

import robolearn
from robolearn.algos.reinflow import DPPOConfig, ReinFlow, ReinFlowConfig
from robolearn.analysis.compare import iqm
from robolearn.nn.generative import ChunkModel, ChunkModelSpec
from robolearn.runners.rollout import rollout
from robolearn.tasks.navigation.planner import ForkPlanner
from robolearn.tasks.navigation.point_maze import maze

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onpolicy import ppo_iteration  # noqa: E402  (the benchmarks folder is not a package)

TASK = "PointMaze-Fork"
LEVELS = (0.5, 0.7, 0.9)
"""Success levels whose first crossing is timed."""


def collect_demos(num_worlds: int, noise: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One episode per world of the Fork planner with action noise ``noise``: (obs, actions)."""
    env = robolearn.make(TASK, num_worlds, seed=seed)
    planner = ForkPlanner(maze("Fork"), num_worlds, noise=noise, generator=torch.Generator().manual_seed(seed))
    obs, _ = env.reset(seed=seed)
    xs, acts = [], []
    for _ in range(env.max_episode_length):
        a = planner(obs)
        xs.append(obs["policy"].float())
        acts.append(a.float())
        obs, *_ = env.step(a)
    return torch.cat(xs), torch.cat(acts)


def pretrain(kind: str, seed: int, out: Path, args: argparse.Namespace) -> tuple[Path, float]:
    """A BC chunk model (``flow`` or ``diffusion``), cached; returns its checkpoint file and seconds."""
    path = out / f"pretrain_{kind}_s{seed}.pt"
    meta = out / f"pretrain_{kind}_s{seed}.json"
    if path.is_file() and meta.is_file():
        return path, json.loads(meta.read_text())["seconds"]
    t0 = time.perf_counter()
    obs, act = collect_demos(args.demo_worlds, args.demo_noise, 100 + seed)
    torch.manual_seed(seed)
    spec = ChunkModelSpec(kind, obs.shape[1], act.shape[1], horizon=1, hidden=(128, 128, 128), diffusion_steps=args.diffusion_steps)
    model = ChunkModel(spec, -1.0, 1.0)
    model.set_normalization(obs.mean(0), obs.std(0))
    opt = torch.optim.Adam(model.net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(args.bc_steps_diffusion if kind == "diffusion" else args.bc_steps):
        idx = torch.randint(obs.shape[0], (256,), generator=gen)
        loss = model.loss(obs[idx], act[idx].unsqueeze(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(model.checkpoint(), path)
    seconds = time.perf_counter() - t0
    meta.write_text(json.dumps({"seconds": seconds, "final_loss": float(loss.detach()), "demos": int(obs.shape[0])}))
    return path, seconds


def evaluate(agent: ReinFlow, env: object, seed: int) -> tuple[float, float]:
    """Success rate and mean return of one episode per eval world (noise-free chain)."""
    res = rollout(env, agent.act_inference, seed=seed).summary()
    return res.get("success_rate", math.nan), res["return"]


def run(args: argparse.Namespace) -> None:
    """One fine-tuning run; writes its JSON curve."""
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kind = "diffusion" if args.method == "dppo" else "flow"
    ckpt, pre_seconds = pretrain(kind, args.seed, out, args)
    common = dict(init_from=str(ckpt), steps=args.steps, num_steps=args.num_steps, num_epochs=args.epochs,
                  num_minibatches=args.minibatches, critic_hidden=(128, 128), actor_learning_rate=args.actor_lr,
                  critic_learning_rate=1e-3, clip_param=args.clip, gamma=0.99, lam=0.95,
                  critic_warmup_iterations=args.warmup, seed=args.seed,
                  eval_noise=args.eval_noise, bc_coef=args.bc_coef)
    if args.method == "dppo":
        cfg: ReinFlowConfig = DPPOConfig(min_std=args.dppo_std, **common)
    else:
        cfg = ReinFlowConfig(min_std=args.min_std, max_std=args.max_std, **common)
    env = robolearn.make(TASK, args.num_envs, seed=args.seed)
    eval_env = robolearn.make(TASK, args.eval_worlds, seed=10_000 + args.seed)
    torch.manual_seed(args.seed)
    agent = ReinFlow(env.obs_dims, env.action_dim, cfg, action_low=env.ctrl_low, action_high=env.ctrl_high)
    success, ret = evaluate(agent, eval_env, 10_000 + args.seed)
    curve = [{"env_steps": 0, "seconds": 0.0, "success": success, "return": ret}]
    print(f"{args.method} K={args.steps} seed={args.seed}: before success={success:.3f} return={ret:.1f}", flush=True)
    obs, _ = env.reset(seed=args.seed)
    steps, train_seconds, it = 0, 0.0, 0
    while steps < args.env_steps:
        t0 = time.perf_counter()
        obs, stats = ppo_iteration(agent, env, obs, cfg.num_steps)
        train_seconds += time.perf_counter() - t0  # evaluation excluded from the wall-clock
        steps += cfg.num_steps * env.num_envs
        it += 1
        if it % args.eval_every == 0 or steps >= args.env_steps:
            success, ret = evaluate(agent, eval_env, 10_000 + args.seed)
            curve.append({"env_steps": steps, "seconds": train_seconds, "success": success, "return": ret,
                          "kl": float(stats["kl"]), "noise_std": float(stats["noise_std"])})
            print(f"  it {it} steps {steps} t {train_seconds:.0f}s success={success:.3f} return={ret:.1f} "
                  f"kl={float(stats['kl']):.4f} clip={float(stats['clip_fraction']):.2f} std={float(stats['noise_std']):.3f}",
                  flush=True)
    result = {"method": args.method, "steps": args.steps, "seed": args.seed, "pretrain_seconds": pre_seconds,
              "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(cfg).items()},
              "args": vars(args), "curve": curve, "loadavg": os.getloadavg()}
    (out / f"run_{args.method}_K{args.steps}_s{args.seed}.json").write_text(json.dumps(result, indent=1))


def timing(args: argparse.Namespace) -> None:
    """Seconds per 1k env steps of one training iteration (rollout + update) of each method, measured
    interleaved in one process (rounds alternate the methods, so machine load hits them alike)."""
    torch.set_num_threads(1)
    out = Path(args.out)
    variants = [("reinflow", 1), ("reinflow", 4), ("dppo", 4), ("dppo", 10)]
    env = robolearn.make(TASK, args.num_envs, seed=0)
    agents = {}
    for method, k in variants:
        kind = "diffusion" if method == "dppo" else "flow"
        ckpt, _ = pretrain(kind, 0, out, args)
        cls = DPPOConfig if method == "dppo" else ReinFlowConfig
        cfg = cls(init_from=str(ckpt), steps=k, num_steps=args.num_steps, critic_hidden=(128, 128))
        agents[(method, k)] = ReinFlow(env.obs_dims, env.action_dim, cfg)
    times: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    obs, _ = env.reset(seed=0)
    for _ in range(args.rounds):
        for v in variants:
            agent = agents[v]
            t0 = time.perf_counter()
            obs, _ = ppo_iteration(agent, env, obs, args.num_steps)
            times[v].append((time.perf_counter() - t0) / (args.num_steps * env.num_envs) * 1000)
    lines = ["| method | K | s per 1k env steps (median of rounds) | rounds |", "|---|---|---|---|"]
    for (method, k), ts in times.items():
        lines.append(f"| {method} | {k} | {np.median(ts):.2f} | {len(ts)} |")
    lines.append(f"\nload average during the measurement: {os.getloadavg()}")
    (out / "timing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def bootstrap_iqm(x: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """IQM of ``x`` over runs and its 95% percentile-bootstrap interval (runs resampled)."""
    x = np.asarray(x, dtype=np.float64)
    rng = np.random.default_rng(seed)
    boots = np.array([iqm(x[rng.integers(0, len(x), len(x))]) for _ in range(reps)])
    return float(iqm(x)), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def first_crossing(curve: list[dict], level: float, key: str) -> float:
    """``key`` (env_steps or seconds) of the first evaluation with success >= ``level`` (inf: never)."""
    for point in curve:
        if point["success"] >= level:
            return float(point[key])
    return math.inf


def report(args: argparse.Namespace) -> None:
    """Aggregate every run JSON in ``--out`` into ``report.md``."""
    out = Path(args.out)
    runs: dict[tuple[str, int], list[dict]] = {}
    for f in sorted(out.glob("run_*.json")):
        r = json.loads(f.read_text())
        runs.setdefault((r["method"], r["steps"]), []).append(r)
    lines = ["| method | K | seeds | env steps | success before | success after (last eval) | success after (mean of last 3 evals) "
             "| return before | return after (mean of last 3 evals) |", "|---|---|---|---|---|---|---|---|---|"]

    def cell(v: np.ndarray) -> str:
        p, lo, hi = bootstrap_iqm(v)
        return f"{p:.2f} [{lo:.2f}, {hi:.2f}]"

    def last3(r: dict, key: str) -> float:
        return float(np.mean([c[key] for c in r["curve"][-3:]]))

    for (method, k), rs in sorted(runs.items()):
        sb = np.array([r["curve"][0]["success"] for r in rs])
        sa = np.array([r["curve"][-1]["success"] for r in rs])
        s3 = np.array([last3(r, "success") for r in rs])
        rb = np.array([r["curve"][0]["return"] for r in rs])
        r3 = np.array([last3(r, "return") for r in rs])
        steps = rs[0]["curve"][-1]["env_steps"]
        lines.append(f"| {method} | {k} | {len(rs)} | {steps} | {cell(sb)} | {cell(sa)} | {cell(s3)} | {cell(rb)} | {cell(r3)} |")
    lines += ["", "Per seed, success before -> last eval: " + "; ".join(
        f"{m} K={k}: " + ", ".join(f"{r['curve'][0]['success']:.2f}->{r['curve'][-1]['success']:.2f}" for r in rs)
        for (m, k), rs in sorted(runs.items()))]
    lines += ["", "Env steps / training seconds to the first evaluation at or above a success level, over the seeds "
              "whose pre-trained policy started below it (median; `inf`: never reached; per-seed values in brackets):", "",
              "| method | K | level | seeds below | env steps | seconds | seconds per 1k env steps (all seeds) |",
              "|---|---|---|---|---|---|---|"]
    for (method, k), rs in sorted(runs.items()):
        per_k = np.median([r["curve"][-1]["seconds"] / max(r["curve"][-1]["env_steps"], 1) * 1000 for r in rs])
        for level in LEVELS:
            below = [r for r in rs if r["curve"][0]["success"] < level]
            if not below:
                lines.append(f"| {method} | {k} | {level} | 0 | - | - | {per_k:.2f} |")
                continue
            es = [first_crossing(r["curve"], level, "env_steps") for r in below]
            ts = [first_crossing(r["curve"], level, "seconds") for r in below]
            lines.append(f"| {method} | {k} | {level} | {len(below)} | {np.median(es):.0f} "
                         f"{[int(e) if e < math.inf else 'inf' for e in es]} | {np.median(ts):.0f} "
                         f"{[round(t) if t < math.inf else 'inf' for t in ts]} | {per_k:.2f} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    """Command line (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("run", "report", "timing"))
    p.add_argument("--rounds", type=int, default=5, help="timing: rounds of one iteration per method")
    p.add_argument("--out", default="/work/bench/reinflow")
    p.add_argument("--method", choices=("reinflow", "dppo"), default="reinflow")
    p.add_argument("--steps", type=int, default=4, help="denoising steps K")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env-steps", type=int, default=80_000)
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=50, help="rollout length per world")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--actor-lr", type=float, default=1e-4)
    p.add_argument("--clip", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=3, help="critic-only updates at the start")
    p.add_argument("--min-std", type=float, default=0.08)
    p.add_argument("--max-std", type=float, default=0.16)
    p.add_argument("--dppo-std", type=float, default=0.1)
    p.add_argument("--eval-worlds", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--demo-worlds", type=int, default=4)
    p.add_argument("--demo-noise", type=float, default=0.5)
    p.add_argument("--bc-steps", type=int, default=1500, help="BC gradient steps of the flow")
    p.add_argument("--bc-steps-diffusion", type=int, default=3000, help="BC gradient steps of the diffusion model")
    p.add_argument("--diffusion-steps", type=int, default=100, help="DDPM training steps T of the diffusion model")
    p.add_argument("--eval-noise", choices=("sample", "zero"), default="sample")
    p.add_argument("--bc-coef", type=float, default=0.0)
    args = p.parse_args()
    {"run": run, "report": report, "timing": timing}[args.what](args)


if __name__ == "__main__":
    main()
