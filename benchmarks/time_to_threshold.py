"""Wall-clock to a return threshold: robolearn PPO against Stable-Baselines3 PPO (issue 3).

Both libraries train PPO on robolearn's ``Cartpole-Swingup`` (DMC cart-pole swing-up, 1000-step
episodes, reward in ``[0, 1]`` per step) in one process, one run after the other, interleaved by
seed (the order of the libraries alternates from seed to seed), with the same torch thread count
and MuJoCo ``nthread`` (1 by default). Each run records the env steps and the *training*
wall-clock (and CPU time) at every evaluation, and stops when the evaluation return has stayed at
or above the threshold for ``--stable-evals`` evaluations in a row, or at the budget.

The recipe (worlds, rollout length, epochs, minibatches, network, learning rate, gamma, lambda,
clip range, entropy and value coefficients, gradient clip, observation normalisation) is shared;
SB3 gets every setting it has:

* robolearn: ``robolearn.make(task, num_envs, seed=seed)`` and :class:`robolearn.algos.ppo.PPO`,
  driven by its verbs exactly as ``OnPolicyRunner._iterate`` drives them (act, step, process;
  compute_returns; update), without the runner's per-update NaN guard and logging.
* SB3: ``stable_baselines3.PPO("MlpPolicy", ...)`` on the same task through
  :class:`robolearn.envs.sb3_adapter.RobolearnSB3VecEnv` (``--sb3-env adapter``, the default: one
  batched env, the same worlds and seeds) or a ``DummyVecEnv`` of ``num_envs`` Gymnasium envs
  ``robolearn/<task>-v0`` (``--sb3-env dummy``), wrapped in ``VecNormalize(norm_reward=False)``
  when the recipe normalises observations. It trains with ``learn(eval_every,
  reset_num_timesteps=False)`` between evaluations: SB3's own loop, logging included.

Evaluation (identical for both, not counted in the training time): the deterministic policy (the
Gaussian mean; SB3's ``predict(deterministic=True)``) in a separate 16-world env seeded
``10_000 + seed`` and reset with that seed each time, so every evaluation starts from the same
states; the score is the mean return of the 16 1000-step episodes. Evaluations happen every
``--eval-every`` env steps (a multiple of ``num_envs * num_steps``) on the same schedule for both.

Reported per run: the first evaluation >= threshold and the first of ``--stable-evals``
consecutive evaluations >= threshold (env steps, training seconds), or "not reached" with the best
evaluation return. Then the medians over seeds per library and the ratio SB3 / robolearn.

    python benchmarks/time_to_threshold.py --seeds 0 1 2 --libs robolearn sb3 --json ttt.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import mujoco
import numpy as np
import stable_baselines3
import torch
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize
from torch import nn

import robolearn
from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.envs.sb3_adapter import RobolearnSB3VecEnv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onpolicy import ppo_iteration  # noqa: E402  (the benchmarks folder is not a package)

TASK = "Cartpole-Swingup"
EVAL_SEED_OFFSET = 10_000
"""The evaluation env of seed ``s`` is seeded ``EVAL_SEED_OFFSET + s`` (as ``robolearn train``)."""


def _log(msg: str) -> None:
    """Progress to stderr (the markdown tables go to stdout)."""
    print(msg, file=sys.stderr, flush=True)


def _load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


# -- the shared recipe -------------------------------------------------------------------------
@dataclass
class Recipe:
    """PPO settings both libraries get (``schedule`` and ``desired_kl`` are robolearn's only).

    The defaults are the recipe chosen for ``Cartpole-Swingup`` after single-seed trials
    (BENCHMARKS.md; ``configs/experiment/cartpole_swingup_ppo.yaml`` was the same for ``robolearn
    train`` until session 22, when the recipe moved to SB3's update ratio with a linear schedule).
    ``reward_scale`` multiplies the training reward only; evaluation is on the task's own.
    """

    num_envs: int = 64
    num_steps: int = 32
    epochs: int = 5
    minibatches: int = 4
    hidden: tuple[int, ...] = (256, 256, 256)
    learning_rate: float = 3e-4
    schedule: str = "fixed"
    desired_kl: float = 0.01
    gamma: float = 0.99
    lam: float = 0.95
    clip: float = 0.2
    value_clip: bool = False
    entropy_coef: float = 0.01
    value_coef: float = 1.0
    max_grad_norm: float = 1.0
    init_std: float = 1.0
    normalize_obs: bool = True
    reward_scale: float = 1.0

    def train_env_kwargs(self) -> dict[str, Any]:
        """Task overrides of the *training* worlds: the reward weight times ``reward_scale``."""
        if self.reward_scale == 1.0:
            return {}
        return {"rewards__smooth_balance__weight": self.reward_scale}

    @property
    def rollout(self) -> int:
        """Env steps per update: ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps


class Learner(Protocol):
    """What the benchmark loop needs from a library."""

    env_steps: int

    def train_until(self, env_steps: int) -> None:
        """Train until at least ``env_steps`` env steps have been collected in total."""
        ...

    def policy(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic actions ``[N, A]`` for a batch of robolearn observations."""
        ...

    def close(self) -> None:
        """Release the environments."""
        ...


class RobolearnLearner:
    """robolearn PPO on a ``BatchedEnv``, driven as ``OnPolicyRunner._iterate`` drives it."""

    def __init__(self, recipe: Recipe, seed: int, nthread: int) -> None:
        """Make the training worlds and the agent (network init seeded by ``seed``)."""
        self.env = robolearn.make(
            TASK, recipe.num_envs, seed=seed, nthread=nthread, **recipe.train_env_kwargs()
        )
        cfg = PPOConfig(
            num_steps=recipe.num_steps,
            num_epochs=recipe.epochs,
            num_minibatches=recipe.minibatches,
            gamma=recipe.gamma,
            lam=recipe.lam,
            clip_param=recipe.clip,
            value_clip=recipe.value_clip,
            value_loss_coef=recipe.value_coef,
            entropy_coef=recipe.entropy_coef,
            learning_rate=recipe.learning_rate,
            schedule=recipe.schedule,
            desired_kl=recipe.desired_kl,
            max_grad_norm=recipe.max_grad_norm,
            actor_hidden=recipe.hidden,
            critic_hidden=recipe.hidden,
            activation="elu",
            init_noise_std=recipe.init_std,
            normalize_obs=recipe.normalize_obs,
            seed=seed,
        )
        torch.manual_seed(seed)
        self.agent = PPO(self.env.obs_dims, self.env.action_dim, cfg)
        self.obs = self.env.obs
        self.env_steps = 0
        self.last_stats: dict[str, float] = {}

    def train_until(self, env_steps: int) -> None:
        """Whole updates (``num_steps`` steps of every world, GAE, the epochs) up to ``env_steps``."""
        agent, env, obs = self.agent, self.env, self.obs
        while self.env_steps < env_steps:
            obs, stats = ppo_iteration(agent, env, obs, agent.cfg.num_steps)
            self.env_steps += agent.cfg.num_steps * env.num_envs
        self.obs = obs
        self.last_stats = {k: float(v) for k, v in stats.items()}  # read once per chunk, after the timing

    def policy(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The Gaussian mean of the normalised observation."""
        return self.agent.act_inference(obs)

    def close(self) -> None:
        """Release the env."""
        self.env.close()


class SB3Learner:
    """``stable_baselines3.PPO`` with the recipe's settings; trains with its own ``learn`` loop."""

    def __init__(self, recipe: Recipe, seed: int, nthread: int, vec: str) -> None:
        """Make the vec env (``adapter`` or ``dummy``) and the model (seeded by ``seed``)."""
        venv: VecEnv
        if vec == "adapter":
            batched = robolearn.make(
                TASK, recipe.num_envs, seed=seed, nthread=nthread, **recipe.train_env_kwargs()
            )
            venv = RobolearnSB3VecEnv(env=batched)
        else:
            venv = DummyVecEnv([_gym_env_fn(nthread, recipe.train_env_kwargs())] * recipe.num_envs)
        self.norm: VecNormalize | None = None
        if recipe.normalize_obs:
            # robolearn's EmpiricalNormalizer: eps 1e-8, clip 10, updated on every collected batch.
            venv = self.norm = VecNormalize(
                venv, norm_obs=True, norm_reward=False, clip_obs=10.0, epsilon=1e-8
            )
        self.venv = venv
        self.model = stable_baselines3.PPO(
            "MlpPolicy",
            venv,
            learning_rate=recipe.learning_rate,
            n_steps=recipe.num_steps,
            batch_size=recipe.rollout // recipe.minibatches,
            n_epochs=recipe.epochs,
            gamma=recipe.gamma,
            gae_lambda=recipe.lam,
            clip_range=recipe.clip,
            clip_range_vf=recipe.clip if recipe.value_clip else None,
            ent_coef=recipe.entropy_coef,
            vf_coef=recipe.value_coef,
            max_grad_norm=recipe.max_grad_norm,
            policy_kwargs={
                "net_arch": {"pi": list(recipe.hidden), "vf": list(recipe.hidden)},
                "activation_fn": nn.ELU,
                "log_std_init": math.log(recipe.init_std),
            },
            device="cpu",
            seed=seed,
            verbose=0,
        )
        self.env_steps = 0

    def train_until(self, env_steps: int) -> None:
        """``learn`` the missing env steps (whole rollouts), continuing the previous call's episodes."""
        self.model.learn(total_timesteps=env_steps - self.env_steps, reset_num_timesteps=False)
        self.env_steps = int(self.model.num_timesteps)

    def policy(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``predict(deterministic=True)`` on the (frozen-statistics) normalised observation."""
        x = obs["policy"].numpy().astype(np.float64)
        if self.norm is not None:
            x = self.norm.normalize_obs(x)
        action, _ = self.model.predict(x, deterministic=True)
        return torch.as_tensor(action, dtype=torch.float32)

    def close(self) -> None:
        """Release the vec env."""
        self.venv.close()


def _gym_env_fn(nthread: int, overrides: dict[str, Any]) -> Callable[[], gym.Env]:
    """A factory of one Gymnasium ``robolearn/<TASK>-v0`` world (for ``DummyVecEnv``)."""

    def make() -> gym.Env:
        return gym.make(f"robolearn/{TASK}-v0", nthread=nthread, **overrides)

    return make


# -- evaluation and the run loop ---------------------------------------------------------------
def evaluate(env: Any, policy: Callable[[dict[str, torch.Tensor]], torch.Tensor]) -> float:
    """Mean return of one deterministic 1000-step episode per eval world, from the same start states."""
    obs, _ = env.reset(seed=env.seed)
    total = torch.zeros(env.num_envs, dtype=torch.float64)
    alive = torch.ones(env.num_envs, dtype=torch.bool)
    for _ in range(env.max_episode_length):
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        total += reward.double() * alive
        alive &= ~(terminated | truncated)
        if not bool(alive.any()):
            break
    return float(total.mean())


@dataclass
class Run:
    """One library, one seed: the evaluation curve and the threshold crossings."""

    lib: str
    seed: int
    evals: list[dict[str, float]] = field(default_factory=list)
    first: dict[str, float] | None = None
    stable: dict[str, float] | None = None
    stable_confirmed: dict[str, float] | None = None
    best_return: float = -math.inf
    env_steps: int = 0
    train_s: float = 0.0
    train_cpu_s: float = 0.0
    eval_s: float = 0.0
    stop_reason: str = ""
    load_start: float = 0.0
    load_end: float = 0.0

    @property
    def mean_load(self) -> float:
        """Mean 1-minute load average over the evaluations."""
        loads = [e["load"] for e in self.evals]
        return statistics.fmean(loads) if loads else math.nan


def run_one(lib: str, seed: int, recipe: Recipe, args: argparse.Namespace) -> Run:
    """Train ``lib`` from ``seed`` until the return is stably above the threshold or the budget ends."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    learner: Learner = (
        RobolearnLearner(recipe, seed, args.threads)
        if lib == "robolearn"
        else SB3Learner(recipe, seed, args.threads, args.sb3_env)
    )
    eval_env = robolearn.make(TASK, args.eval_envs, seed=EVAL_SEED_OFFSET + seed, nthread=args.threads)
    run = Run(lib, seed, load_start=_load())
    streak = 0
    streak_start: dict[str, float] | None = None
    budget_s = args.max_minutes * 60.0
    while True:
        target = min(learner.env_steps + args.eval_every, args.max_env_steps)
        w0, c0 = time.perf_counter(), time.process_time()
        learner.train_until(target)
        run.train_s += time.perf_counter() - w0
        run.train_cpu_s += time.process_time() - c0
        run.env_steps = learner.env_steps

        e0 = time.perf_counter()
        ret = evaluate(eval_env, learner.policy)
        run.eval_s += time.perf_counter() - e0
        point = {
            "env_steps": float(run.env_steps),
            "train_s": run.train_s,
            "train_cpu_s": run.train_cpu_s,
            "return": ret,
            "load": _load(),
        }
        if isinstance(learner, RobolearnLearner):
            point["learning_rate"] = learner.last_stats.get("learning_rate", math.nan)
            point["action_std"] = learner.last_stats.get("action_std", math.nan)
        run.evals.append(point)
        run.best_return = max(run.best_return, ret)

        streak = streak + 1 if ret >= args.threshold else 0
        if streak == 1 and run.first is None:
            run.first = point
        if streak == 1:
            streak_start = point
        _log(
            f"  {lib:9s} seed {seed}: {run.env_steps / 1e6:6.3f}M steps  train {run.train_s:7.1f} s  "
            f"eval {ret:6.1f}  load {point['load']:.1f}"
        )
        if streak >= args.stable_evals:
            run.stable, run.stable_confirmed = streak_start, point
            run.stop_reason = f"{args.stable_evals} evaluations in a row >= {args.threshold:g}"
            break
        if run.env_steps >= args.max_env_steps:
            run.stop_reason = f"env-step budget ({args.max_env_steps})"
            break
        if run.train_s >= budget_s:
            run.stop_reason = f"time budget ({args.max_minutes:g} min of training)"
            break
    run.load_end = _load()
    learner.close()
    eval_env.close()
    return run


# -- report ------------------------------------------------------------------------------------
def _cell(point: dict[str, float] | None) -> tuple[str, str]:
    """(env steps, training seconds) of a crossing, or dashes."""
    if point is None:
        return "—", "—"
    return f"{point['env_steps'] / 1e6:.3f}M", f"{point['train_s']:.0f} s"


def _steps(value: float) -> str:
    """Env steps in millions, or "not reached" for ``inf``."""
    return f"{value / 1e6:.3f}M" if math.isfinite(value) else "not reached"


def _secs(value: float) -> str:
    """Seconds, or "not reached" for ``inf``."""
    return f"{value:.0f}" if math.isfinite(value) else "not reached"


def _median(values: list[float]) -> float:
    """Median, ``inf`` when any run did not reach (it counts as slower than every run that did)."""
    return statistics.median(values) if values else math.nan


def report(runs: list[Run], args: argparse.Namespace) -> dict[str, Any]:
    """Print the per-run table and the medians; return the summary."""
    thr = f"{args.threshold:g}"
    print(f"\n### Time to eval return >= {thr} ({TASK})\n")
    print(
        f"| lib | seed | first >= {thr}: env steps | train time | {args.stable_evals} in a row from: env steps "
        "| train time | best eval | env steps/s | CPU / wall | mean load | stop |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        f_steps, f_s = _cell(r.first)
        s_steps, s_s = _cell(r.stable)
        print(
            f"| {r.lib} | {r.seed} | {f_steps} | {f_s} | {s_steps} | {s_s} | {r.best_return:.0f} "
            f"| {r.env_steps / max(r.train_s, 1e-9):,.0f} | {r.train_cpu_s / max(r.train_s, 1e-9):.2f} "
            f"| {r.mean_load:.1f} | {r.stop_reason} |"
        )
    summary: dict[str, Any] = {}
    for lib in args.libs:
        mine = [r for r in runs if r.lib == lib]
        entry: dict[str, Any] = {}
        for key in ("first", "stable"):
            points = [getattr(r, key) for r in mine]
            for unit in ("train_s", "env_steps", "train_cpu_s"):
                vals = [p[unit] if p is not None else math.inf for p in points]
                entry[f"{key}_{unit}"] = _median(vals)
        entry["reached_first"] = sum(r.first is not None for r in mine)
        entry["reached_stable"] = sum(r.stable is not None for r in mine)
        entry["env_steps_per_s"] = _median([r.env_steps / max(r.train_s, 1e-9) for r in mine])
        summary[lib] = entry
    print(
        "\n| lib | runs reaching | median first: env steps | train s | CPU s | median stable: env steps | "
        "train s | CPU s | env steps/s (median) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for lib, e in summary.items():
        n = sum(r.lib == lib for r in runs)
        print(
            f"| {lib} | {e['reached_first']}/{n} first, {e['reached_stable']}/{n} stable "
            f"| {_steps(e['first_env_steps'])} | {_secs(e['first_train_s'])} | {_secs(e['first_train_cpu_s'])} "
            f"| {_steps(e['stable_env_steps'])} | {_secs(e['stable_train_s'])} | {_secs(e['stable_train_cpu_s'])} "
            f"| {e['env_steps_per_s']:,.0f} |"
        )
    if "robolearn" in summary and "sb3" in summary:
        rl, sb = summary["robolearn"], summary["sb3"]
        ratios = {
            f"{key}_{unit}": sb[f"{key}_{unit}"] / rl[f"{key}_{unit}"]
            for key in ("first", "stable")
            for unit in ("train_s", "train_cpu_s", "env_steps")
        }
        ratios["env_steps_per_s"] = rl["env_steps_per_s"] / sb["env_steps_per_s"]
        summary["ratio_sb3_over_robolearn"] = ratios
        print(
            "\nSB3 / robolearn (medians; > 1: robolearn sooner): "
            f"first crossing {ratios['first_train_s']:.2f}× wall ({ratios['first_train_cpu_s']:.2f}× CPU, "
            f"{ratios['first_env_steps']:.2f}× env steps); stable {ratios['stable_train_s']:.2f}× wall "
            f"({ratios['stable_train_cpu_s']:.2f}× CPU, {ratios['stable_env_steps']:.2f}× env steps); "
            f"throughput robolearn/SB3 {ratios['env_steps_per_s']:.2f}×"
        )
    return summary


def _versions() -> dict[str, str]:
    """Versions of everything timed."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "mujoco": mujoco.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cores": str(os.cpu_count()),
    }


def main() -> None:
    """Parse the flags, run every (seed, library) pair interleaved, print and save the results."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--libs", nargs="+", default=["robolearn", "sb3"], choices=["robolearn", "sb3"])
    parser.add_argument("--threshold", type=float, default=800.0, help="mean eval return to reach")
    parser.add_argument("--stable-evals", type=int, default=3, help="consecutive evaluations >= threshold")
    parser.add_argument("--max-env-steps", type=int, default=2_500_000, help="budget per run")
    parser.add_argument("--max-minutes", type=float, default=15.0, help="training wall-clock budget per run")
    parser.add_argument("--eval-every", type=int, default=65_536, help="env steps between evaluations")
    parser.add_argument("--eval-envs", type=int, default=16, help="evaluation worlds (one episode each)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads and MuJoCo nthread")
    parser.add_argument(
        "--sb3-env",
        default="adapter",
        choices=["adapter", "dummy"],
        help="SB3's vec env: RobolearnSB3VecEnv or a DummyVecEnv of Gymnasium envs",
    )
    parser.add_argument("--json", help="write every evaluation and the summary here")
    rec = Recipe()
    group = parser.add_argument_group("recipe (shared by both libraries)")
    group.add_argument("--num-envs", type=int, default=rec.num_envs)
    group.add_argument(
        "--num-steps", type=int, default=rec.num_steps, help="rollout steps per world per update"
    )
    group.add_argument("--epochs", type=int, default=rec.epochs)
    group.add_argument("--minibatches", type=int, default=rec.minibatches)
    group.add_argument(
        "--hidden", type=int, nargs="+", default=list(rec.hidden), help="actor and critic widths"
    )
    group.add_argument("--lr", type=float, default=rec.learning_rate)
    group.add_argument(
        "--schedule", default=rec.schedule, choices=["fixed", "adaptive"], help="robolearn only"
    )
    group.add_argument(
        "--desired-kl", type=float, default=rec.desired_kl, help="robolearn adaptive schedule only"
    )
    group.add_argument("--gamma", type=float, default=rec.gamma)
    group.add_argument("--lam", type=float, default=rec.lam)
    group.add_argument("--clip", type=float, default=rec.clip)
    group.add_argument(
        "--value-clip", action="store_true", help="clip the value change to --clip (SB3: clip_range_vf)"
    )
    group.add_argument("--ent-coef", type=float, default=rec.entropy_coef)
    group.add_argument("--vf-coef", type=float, default=rec.value_coef)
    group.add_argument("--max-grad-norm", type=float, default=rec.max_grad_norm)
    group.add_argument("--init-std", type=float, default=rec.init_std)
    group.add_argument("--no-normalize-obs", action="store_true")
    group.add_argument(
        "--reward-scale",
        type=float,
        default=rec.reward_scale,
        help="training reward weight (evaluation: unscaled)",
    )
    args = parser.parse_args()
    recipe = Recipe(
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        epochs=args.epochs,
        minibatches=args.minibatches,
        hidden=tuple(args.hidden),
        learning_rate=args.lr,
        schedule=args.schedule,
        desired_kl=args.desired_kl,
        gamma=args.gamma,
        lam=args.lam,
        clip=args.clip,
        value_clip=args.value_clip,
        entropy_coef=args.ent_coef,
        value_coef=args.vf_coef,
        max_grad_norm=args.max_grad_norm,
        init_std=args.init_std,
        normalize_obs=not args.no_normalize_obs,
        reward_scale=args.reward_scale,
    )
    if args.eval_every % recipe.rollout:
        parser.error(f"--eval-every must be a multiple of num_envs * num_steps = {recipe.rollout}")
    if recipe.rollout % recipe.minibatches:
        parser.error("num_envs * num_steps must be divisible by --minibatches")

    torch.set_num_threads(args.threads)
    versions = _versions()
    _log(f"versions: {versions}; torch threads {torch.get_num_threads()}; load {_load():.2f}")
    _log(f"recipe: {asdict(recipe)}; SB3 env: {args.sb3_env}")
    runs: list[Run] = []
    t0 = time.perf_counter()
    for i, seed in enumerate(args.seeds):
        order = args.libs[i % len(args.libs) :] + args.libs[: i % len(args.libs)]
        for lib in order:
            runs.append(run_one(lib, seed, recipe, args))
            r = runs[-1]
            _log(f"done {lib} seed {seed}: {r.stop_reason}; {time.perf_counter() - t0:.0f} s since start")
    summary = report(runs, args)
    threads_end = torch.get_num_threads()
    if args.json:
        out = {
            "task": TASK,
            "threshold": args.threshold,
            "stable_evals": args.stable_evals,
            "recipe": asdict(recipe),
            "args": vars(args),
            "versions": versions,
            "torch_threads_end": threads_end,
            "total_s": time.perf_counter() - t0,
            "summary": summary,
            "runs": [{**asdict(r), "mean_load": r.mean_load} for r in runs],
        }
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
