"""robolearn's online learners against Stable-Baselines3 on HalfCheetah (issue 3).

Two paired, interleaved measurements in one process, with the same torch thread count for both:

``ppo``
    Env steps per second *including learning*: one update is ``n_steps`` control steps of every
    world, GAE, then ``epochs x minibatches`` gradient steps. robolearn runs the task
    ``HalfCheetah`` (one ``BatchedEnv``) with :class:`robolearn.algos.ppo.PPO`, SB3 runs
    ``stable_baselines3.PPO`` on ``gymnasium.make("HalfCheetah-v5")`` in a ``DummyVecEnv`` and/or a
    ``SubprocVecEnv``. Same worlds, rollout length, epochs, minibatch size, hidden sizes and
    activation. After one warm-up update each, every round times ``--ppo-updates`` updates of
    each method; the order rotates every round.
``sac``
    Gradient steps per second at batch 256: robolearn's ``replay.sample`` + ``SAC.update_step``
    against SB3's ``SAC.train(gradient_steps=K, batch_size=256)``, both on a replay buffer filled
    with the same random transitions, 256x256 MLPs, 2 critics, UTD 1, automatic entropy tuning.

A rate is the median over rounds; a ratio is the median of the per-round ratios.

    python benchmarks/vs_sb3.py [--what ppo sac] [--rounds 5] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv
from torch import nn

import robolearn
from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.algos.sac import SAC, SACConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onpolicy import ppo_iteration  # noqa: E402  (the benchmarks folder is not a package)

GYM_ID = "HalfCheetah-v5"
TASK = "HalfCheetah"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _make_gym() -> gym.Env:
    return gym.make(GYM_ID)


def _print_rates(title: str, unit: str, res: dict[str, Any]) -> None:
    """A markdown table of one benchmark's rates and robolearn's speed-up over each method."""
    print(f"\n### {title}\n")
    print(f"| method | {unit} | robolearn speed-up (median, range) | spread |")
    print("|---|---:|---:|---:|")
    for name, rate in res["rate"].items():
        if name == "robolearn":
            ratio = "—"
        else:
            lo, hi = res["ratio_range"][name]
            ratio = f"{res['ratio'][name]:.2f}× ({lo:.2f}–{hi:.2f})"
        print(f"| {name} | {_fmt(rate)} | {ratio} | {res['spread'][name]:.0%} |")


def _load() -> float:
    return os.getloadavg()[0]


# -- PPO ---------------------------------------------------------------------------------------
class RobolearnPPO:
    """robolearn's on-policy loop, exactly as ``OnPolicyRunner._iterate`` runs it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.env = robolearn.make(TASK, args.num_envs, seed=0, nthread=args.threads)
        hidden = tuple(args.hidden)
        cfg = PPOConfig(
            num_steps=args.n_steps,
            num_epochs=args.epochs,
            num_minibatches=args.minibatches,
            actor_hidden=hidden,
            critic_hidden=hidden,
            activation="elu",
        )
        torch.manual_seed(0)
        self.agent = PPO(self.env.obs_dims, self.env.action_dim, cfg)
        self.obs = self.env.obs

    def update(self) -> None:
        self.obs, _ = ppo_iteration(self.agent, self.env, self.obs, self.agent.cfg.num_steps)


class SB3PPO:
    """``stable_baselines3.PPO`` with the same rollout and network shape; one update = one ``learn`` chunk."""

    def __init__(self, args: argparse.Namespace, vec: str) -> None:
        fns = [_make_gym] * args.num_envs
        self.env = DummyVecEnv(fns) if vec == "dummy" else SubprocVecEnv(fns, start_method="fork")
        self.env.seed(0)
        hidden = list(args.hidden)
        self.steps = args.n_steps * args.num_envs
        self.model = stable_baselines3.PPO(
            "MlpPolicy",
            self.env,
            n_steps=args.n_steps,
            batch_size=self.steps // args.minibatches,
            n_epochs=args.epochs,
            policy_kwargs={"net_arch": {"pi": hidden, "vf": hidden}, "activation_fn": nn.ELU},
            device="cpu",
            seed=0,
            verbose=0,
        )

    def update(self) -> None:
        # With reset_num_timesteps=False, learn() neither resets the envs nor rebuilds anything:
        # it is one collect_rollouts + train, plus a logger dump.
        self.model.learn(total_timesteps=self.steps, reset_num_timesteps=False)

    def close(self) -> None:
        self.env.close()


def _paired(methods: dict[str, Callable[[], None]], rounds: int, reps: int) -> dict[str, list[float]]:
    """Seconds per call of each method, per round, interleaved with the order rotated each round."""
    names = list(methods)
    times: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # warm-up
        methods[n]()
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            t0 = time.perf_counter()
            for _ in range(reps):
                methods[n]()
            times[n].append((time.perf_counter() - t0) / reps)
        _log(
            f"  round {r + 1}/{rounds}: "
            + "  ".join(f"{n} {times[n][-1] * 1e3:.0f} ms" for n in names)
            + f"  load {_load():.1f}"
        )
    return times


def _summary(times: dict[str, list[float]], work: float, ref: str) -> dict[str, Any]:
    """Median rate per method (``work`` units per call) and median paired ratio against ``ref``."""
    out: dict[str, Any] = {"rate": {}, "ratio": {}, "ratio_range": {}, "spread": {}, "rounds": times}
    for name, ts in times.items():
        out["rate"][name] = work / statistics.median(ts)
        out["spread"][name] = (max(ts) - min(ts)) / statistics.median(ts)
        if name != ref:
            ratios = [t / t_ref for t, t_ref in zip(ts, times[ref], strict=True)]
            out["ratio"][name] = statistics.median(ratios)
            out["ratio_range"][name] = (min(ratios), max(ratios))
    return out


def bench_ppo(args: argparse.Namespace) -> dict[str, Any]:
    steps = args.n_steps * args.num_envs
    _log(
        f"PPO: {args.num_envs} envs x {args.n_steps} steps = {steps} env steps per update, "
        f"{args.epochs} epochs x {args.minibatches} minibatches of {steps // args.minibatches}, hidden {args.hidden}"
    )
    methods: dict[str, Callable[[], None]] = {}
    rl = RobolearnPPO(args)
    methods["robolearn"] = rl.update
    sb3: dict[str, SB3PPO] = {}
    for vec in args.sb3_vec:
        sb3[vec] = SB3PPO(args, vec)
        methods[f"sb3_{vec}"] = sb3[vec].update
    times = _paired(methods, args.rounds, args.ppo_updates)
    if len(args.sb3_vec) > 1:  # SB3's best vec env, chosen per round
        times["sb3_best"] = [min(times[f"sb3_{v}"][r] for v in args.sb3_vec) for r in range(args.rounds)]
    for s in sb3.values():
        s.close()
    res = _summary(times, steps, "robolearn")
    res["config"] = {k: getattr(args, k) for k in ("num_envs", "n_steps", "epochs", "minibatches", "hidden")}
    res["load"] = _load()
    return res


# -- SAC ---------------------------------------------------------------------------------------
def _random_transitions(n: int, obs_dim: int, act_dim: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "next_obs": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "action": rng.uniform(-1.0, 1.0, (n, act_dim)).astype(np.float32),
        "reward": rng.standard_normal(n).astype(np.float32),
        "terminated": rng.random(n) < 0.001,
    }


def bench_sac(args: argparse.Namespace) -> dict[str, Any]:
    env = robolearn.make(TASK, 1, seed=0)
    obs_dim, act_dim = env.obs_dims["policy"], env.action_dim
    data = _random_transitions(args.sac_fill, obs_dim, act_dim)
    _log(
        f"SAC: obs {obs_dim}, actions {act_dim}, batch {args.sac_batch}, 256x256, {args.sac_fill} random transitions"
    )

    cfg = SACConfig(batch_size=args.sac_batch, buffer_size=args.sac_fill, learning_starts=0)
    agent = SAC(env.obs_dims, act_dim, cfg, action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)
    term = torch.from_numpy(data["terminated"])
    agent.replay.add(
        {"policy": torch.from_numpy(data["obs"])},
        torch.from_numpy(data["action"]),
        torch.from_numpy(data["reward"]),
        {"policy": torch.from_numpy(data["next_obs"])},
        term,
        torch.zeros_like(term),
    )
    env.close()

    def robolearn_steps() -> None:
        for _ in range(args.sac_steps):
            agent.update_step(agent.replay.sample(cfg.batch_size, agent.generator))

    genv = DummyVecEnv([_make_gym])
    model = stable_baselines3.SAC(
        "MlpPolicy",
        genv,
        buffer_size=args.sac_fill,
        batch_size=args.sac_batch,
        learning_starts=0,
        policy_kwargs={"net_arch": [256, 256], "n_critics": 2},
        device="cpu",
        seed=0,
        verbose=0,
    )
    model.set_logger(configure(None, []))
    buf = model.replay_buffer
    n = args.sac_fill
    buf.observations[:n, 0] = data["obs"]
    buf.next_observations[:n, 0] = data["next_obs"]
    buf.actions[:n, 0] = data["action"]
    buf.rewards[:n, 0] = data["reward"]
    buf.dones[:n, 0] = data["terminated"]
    buf.timeouts[:n, 0] = False
    buf.pos, buf.full = 0, True  # exactly n stored, the buffer's full capacity

    def sb3_steps() -> None:
        model.train(gradient_steps=args.sac_steps, batch_size=args.sac_batch)

    times = _paired({"robolearn": robolearn_steps, "sb3": sb3_steps}, args.rounds, 1)
    genv.close()
    res = _summary(times, args.sac_steps, "robolearn")
    res["config"] = {"batch": args.sac_batch, "fill": args.sac_fill, "steps_per_round": args.sac_steps}
    res["load"] = _load()
    return res


def _fmt(rate: float) -> str:
    return f"{rate / 1e3:.2f}k" if rate >= 1e3 else f"{rate:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--what", nargs="+", default=["ppo", "sac"], choices=["ppo", "sac"])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (both) and robolearn nthread"
    )
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--n-steps", type=int, default=24, help="PPO rollout steps per env")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument(
        "--hidden", type=int, nargs="+", default=[256, 256, 256], help="PPO actor/critic widths"
    )
    parser.add_argument("--ppo-updates", type=int, default=3, help="timed PPO updates per method per round")
    parser.add_argument("--sb3-vec", nargs="+", default=["dummy", "subproc"], choices=["dummy", "subproc"])
    parser.add_argument("--sac-batch", type=int, default=256)
    parser.add_argument("--sac-fill", type=int, default=100_000, help="random transitions in both buffers")
    parser.add_argument(
        "--sac-steps", type=int, default=200, help="timed gradient steps per method per round"
    )
    parser.add_argument("--json", help="save every round here")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    _log(
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), stable-baselines3 "
        f"{stable_baselines3.__version__}, gymnasium {gym.__version__}, cores {os.cpu_count()}"
    )
    results: dict[str, Any] = {"threads": args.threads}
    if "ppo" in args.what:
        res = bench_ppo(args)
        results["ppo"] = res
        _print_rates("PPO env steps/s including learning", "env steps/s", res)
    if "sac" in args.what:
        res = bench_sac(args)
        results["sac"] = res
        _print_rates("SAC gradient steps/s (batch 256)", "grad steps/s", res)
    # the torch thread count may be changed by a library; report what it was at the end
    _log(f"torch threads at the end: {torch.get_num_threads()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
