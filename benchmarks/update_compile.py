"""Eager vs ``torch.compile``d gradient steps of PPO and SAC (``compile=True`` in their configs).

Times the update only, at the default network sizes, one thread, the two learners interleaved
round by round (the ratio holds up better than the rates on a shared machine):

* PPO: one ``update()`` (5 epochs x 4 minibatches, 256x256x256 ELU) on a HalfCheetah rollout of
  ``--envs`` worlds x 24 steps, the same rollout for both learners each round;
* SAC: ``--sac-steps`` ``update()`` calls (batch 256, ``--sac-hidden`` ReLU, default 256x256, two
  critics; compiled: the whole step as one graph) on a replay of
  random HalfCheetah-sized transitions.

The first compiled call compiles (reported as ``compile_s``). ``--device cuda`` runs the same on
a GPU with ``compile_mode=reduce-overhead`` (CUDA graphs) unless ``--mode`` says otherwise.

    OMP_NUM_THREADS=1 python benchmarks/update_compile.py                 # the CPU table
    python benchmarks/update_compile.py --device cuda --backend warp --envs 4096   # on a GPU
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

import robolearn
from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.algos.sac import SAC, SACConfig
from robolearn.types import Transition


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], Any], device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def bench_ppo(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Median eager and compiled PPO update times (s) and the median per-round ratio."""
    task, envs = "HalfCheetah", args.envs
    cfg = PPOConfig(num_steps=args.ppo_steps) if not args.tiny else PPOConfig(
        num_steps=4, num_epochs=1, num_minibatches=2, actor_hidden=(32,), critic_hidden=(32,)
    )
    if args.ppo_recipe:  # the recipe's own update: its task, worlds, rollout and learner settings
        from robolearn.cli.commands import compose_config
        from robolearn.cli.config import train_config_from_dict

        recipe = train_config_from_dict(compose_config("train", [f"experiment={args.ppo_recipe}"]))
        task, envs, cfg = recipe.task, recipe.num_envs, replace(recipe.algo, compile=False)
    env = robolearn.make(task, envs, seed=0, device=str(device), backend=args.backend)
    env.reset(seed=0)
    eager = PPO(env.obs_dims, env.action_dim, cfg, device=device)
    compiled = PPO(
        env.obs_dims, env.action_dim,
        replace(cfg, compile=True, compile_mode=args.mode), device=device,
    )
    compiled.load_state_dict(eager.state_dict())
    obs = env.obs
    for _ in range(cfg.num_steps):
        action = eager.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        eager.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        obs = next_obs
    eager.compute_returns(obs)
    filled = copy.deepcopy(eager.storage)

    def update(agent: PPO) -> Callable[[], Any]:
        def run() -> Any:
            agent.storage = copy.deepcopy(filled)  # a full rollout every round (update clears it)
            return agent.update()
        return run

    # The optimiser's state appears at the first step, which recompiles once: warm up twice.
    compile_s = _timed(update(compiled), device) + _timed(update(compiled), device)
    _timed(update(eager), device)
    return _rounds(update(eager), update(compiled), args.rounds, device, compile_s)


def bench_sac(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Median eager and compiled times (s) of ``--sac-steps`` SAC updates, and the median ratio."""
    obs_dim, action_dim, n = 17, 6, 10_000
    hidden = tuple(int(h) for h in args.sac_hidden.split(","))
    base = SACConfig(learning_starts=0, buffer_size=n, actor_hidden=hidden, critic_hidden=hidden)
    if args.tiny:
        base = SACConfig(learning_starts=0, buffer_size=n, batch_size=16, actor_hidden=(32,), critic_hidden=(32,))
    eager = SAC({"policy": obs_dim}, action_dim, base, device=device, seed=0)
    compiled = SAC(
        {"policy": obs_dim}, action_dim,
        replace(base, compile=True, compile_mode=args.mode), device=device, seed=0,
    )
    compiled.load_state_dict(eager.state_dict())
    gen = torch.Generator(device=device).manual_seed(1)
    for _ in range(n // 1000):
        o = {"policy": torch.randn(1000, obs_dim, generator=gen, device=device)}
        o2 = {"policy": torch.randn(1000, obs_dim, generator=gen, device=device)}
        a = torch.rand(1000, action_dim, generator=gen, device=device) * 2 - 1
        r = torch.randn(1000, generator=gen, device=device)
        done = torch.rand(1000, generator=gen, device=device) < 0.01
        for agent in (eager, compiled):
            agent.process(o, a, r, o2, done, torch.zeros_like(done))
    steps = args.sac_steps

    def updates(agent: SAC) -> Callable[[], Any]:
        def run() -> None:
            for _ in range(steps):
                agent.update()
        return run

    # The optimisers' state appears at the first step, which recompiles once: warm up twice.
    compile_s = _timed(compiled.update, device) + _timed(compiled.update, device)
    _timed(eager.update, device)
    return _rounds(updates(eager), updates(compiled), args.rounds, device, compile_s)


def _rounds(
    eager: Callable[[], Any], compiled: Callable[[], Any], rounds: int, device: torch.device, compile_s: float
) -> dict[str, Any]:
    te, tc = [], []
    for _ in range(rounds):
        te.append(_timed(eager, device))
        tc.append(_timed(compiled, device))
    return {
        "eager_s": statistics.median(te),
        "compiled_s": statistics.median(tc),
        "ratio_eager_over_compiled": statistics.median(a / b for a, b in zip(te, tc, strict=True)),
        "compile_s": compile_s,
        "rounds": rounds,
    }


def main() -> None:
    """Run both benchmarks and print a Markdown table (and JSON with ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", default=None, help="torch.compile mode (default: cpu 'default', cuda 'reduce-overhead')")
    parser.add_argument("--envs", type=int, default=64, help="PPO worlds")
    parser.add_argument("--backend", default="mujoco", help="simulation backend of the PPO rollout (warp on a GPU)")
    parser.add_argument("--ppo-steps", type=int, default=24, help="PPO rollout length")
    parser.add_argument("--sac-steps", type=int, default=50, help="SAC updates per round")
    parser.add_argument("--ppo-recipe", default=None, help="time this PPO experiment's update (e.g. hopper_ppo)")
    parser.add_argument("--sac-hidden", default="256,256", help="SAC actor and critic hidden widths")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tiny", action="store_true", help="small networks and rollouts (a smoke test)")
    parser.add_argument("--only", choices=("ppo", "sac"), default=None)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.mode is None:
        args.mode = "reduce-overhead" if device.type == "cuda" else "default"
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"device": str(device), "mode": args.mode, "threads": args.threads, "torch": torch.__version__}
    if args.only in (None, "ppo"):
        results["ppo"] = bench_ppo(args, device)
    if args.only in (None, "sac"):
        results["sac"] = bench_sac(args, device)
    print(f"device={device} mode={args.mode} threads={args.threads} torch={torch.__version__} rounds={args.rounds}")
    print("| update | eager (ms) | compiled (ms) | eager / compiled | first two compiled calls (s) |")
    print("|---|---|---|---|---|")
    labels = {
        "ppo": f"PPO update ({args.envs} worlds x {args.ppo_steps} steps, 5x4 minibatches, 256x3 ELU)"
        if not args.ppo_recipe else f"PPO update of the {args.ppo_recipe} recipe",
        "sac": f"SAC, {args.sac_steps} gradient steps (batch 256, {args.sac_hidden.replace(',', 'x')} ReLU, 2 critics)",
    }
    if args.tiny:
        labels = {
            "ppo": f"PPO update, tiny ({args.envs} worlds x 4 steps, 1x2 minibatches, 32 wide)",
            "sac": f"SAC, {args.sac_steps} gradient steps, tiny (batch 16, 32 wide)",
        }
    for key in ("ppo", "sac"):
        if key in results:
            r = results[key]
            print(f"| {labels[key]} | {1e3 * r['eager_s']:.1f} | {1e3 * r['compiled_s']:.1f} | "
                  f"{r['ratio_eager_over_compiled']:.2f} | {r['compile_s']:.1f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
