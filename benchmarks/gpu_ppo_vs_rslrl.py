"""PPO env steps/s including learning: robolearn's PPO against rsl-rl-lib's PPO (issue 15; goal >= 1.5x).

Both learners train on the same robolearn task, each on its own ``BatchedEnv`` of the same backend,
device, world count and seed, in one process, interleaved:

``robolearn``
    :class:`robolearn.algos.ppo.PPO` driven by its verbs as ``OnPolicyRunner._iterate`` drives
    them (act, step, process; compute_returns; update): ``benchmarks/onpolicy.py``.
``rsl_rl``
    ``rsl_rl.runners.OnPolicyRunner(...).learn(1)`` on :class:`RslRlVecEnv` (below: robolearn's
    ``BatchedEnv`` behind rsl_rl's ``VecEnv`` interface, ``dones = terminated | truncated``,
    ``extras["time_outs"] = truncated``) with ``log_dir=None`` (no writer) and
    ``check_for_nan=False`` (robolearn's loop has no per-step NaN check either).
``env only``
    The same env stepped with uniform random actions for the same steps: the ceiling that the
    learners' overhead is measured against.

Same networks (actor and critic MLPs ``--hidden`` with ELU, observation normalisation, a Gaussian
with learned log-std, init std 1) and the same batch: ``--num-envs`` x ``--num-steps`` env steps
per update, ``--epochs`` x ``--minibatches`` gradient steps, clipped value loss, adaptive KL
learning rate, gradient clip 1. One "call" is one update (a rollout plus the learning); after one
warm-up update each, every round times ``--updates`` updates of each, the order rotating every
round, synchronised with ``torch.cuda.synchronize()`` around each timing. The rate is the median
over rounds; the speed-up is the median of the per-round ratios.

    python benchmarks/gpu_ppo_vs_rslrl.py                   # H100/H200: Ant and HalfCheetah, 4,096 worlds
    python benchmarks/gpu_ppo_vs_rslrl.py --quick --device cpu --backend mujoco   # CPU smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

import torch
from tensordict import TensorDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import (  # noqa: E402  (the benchmarks folder is not a package)
    add_common_args,
    fmt_rate,
    log,
    machine_info,
    make_env,
    paired,
    parse_sets,
    print_machine,
    print_table,
    setup,
    summary,
    write_json,
)
from onpolicy import ppo_iteration  # noqa: E402

from robolearn.algos.ppo import PPO, PPOConfig  # noqa: E402

GOAL = 1.5
COLUMNS = ["task", "method", "env steps/s incl. learning", "robolearn speed-up (median, range)",
           "spread", f"goal ≥ {GOAL}×"]


def _rsl_rl() -> Any:
    """The ``rsl_rl`` package, or an exit naming the install (it is an optional benchmark dependency)."""
    try:
        import rsl_rl
        import rsl_rl.env
        import rsl_rl.runners
    except ImportError as exc:
        raise SystemExit(f"rsl_rl is not importable ({exc}): pip install rsl-rl-lib==5.5.1") from exc
    return rsl_rl


class RslRlVecEnv:
    """robolearn's ``BatchedEnv`` as rsl_rl's ``VecEnv``: observations as a ``TensorDict`` of the
    env's groups, ``dones = terminated | truncated``, ``extras["time_outs"] = truncated`` (rsl_rl
    bootstraps those with the value of the observation it is given).

    Built by :func:`make_rsl_env`, which makes it a subclass of ``rsl_rl.env.VecEnv`` (imported
    lazily so this module loads without rsl_rl).
    """

    def __init__(self, env: Any) -> None:
        """Wrap ``env`` (a ``BatchedEnv``); nothing is copied."""
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.action_dim
        self.max_episode_length = env.max_episode_length
        self.device = env.device
        self.cfg: dict[str, Any] = {"task": env.task_id}

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """The env's per-world step counters (rsl_rl may randomise them at the start)."""
        return self.env.episode_length

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length.copy_(value)

    def _td(self, obs: dict[str, torch.Tensor]) -> TensorDict:
        return TensorDict(dict(obs), batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> TensorDict:
        """The current observation groups."""
        return self._td(self.env.obs)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """One env step in rsl_rl's convention."""
        obs, reward, terminated, truncated, _ = self.env.step(actions)
        return self._td(obs), reward, terminated | truncated, {"time_outs": truncated}


def make_rsl_env(env: Any) -> Any:
    """:class:`RslRlVecEnv` over ``env``, registered as a ``rsl_rl.env.VecEnv``."""
    rsl_rl = _rsl_rl()
    cls = type("RslRlVecEnv", (RslRlVecEnv, rsl_rl.env.VecEnv), {})
    return cls(env)


def rsl_train_cfg(args: argparse.Namespace, cfg: PPOConfig) -> dict[str, Any]:
    """rsl_rl's runner config with robolearn's PPO settings (same networks, batch and losses)."""
    rsl_rl = _rsl_rl()
    from rsl_rl.algorithms import PPO as RslPPO
    from rsl_rl.models import MLPModel
    from rsl_rl.modules.distribution import GaussianDistribution

    del rsl_rl
    mlp = {"class_name": MLPModel, "hidden_dims": list(cfg.actor_hidden), "activation": cfg.activation,
           "obs_normalization": cfg.normalize_obs}
    return {
        "num_steps_per_env": cfg.num_steps,
        "save_interval": 10**9,
        "check_for_nan": False,
        "obs_groups": {"actor": [cfg.actor_obs_group], "critic": [cfg.critic_obs_group or cfg.actor_obs_group]},
        "actor": {**mlp, "distribution_cfg": {"class_name": GaussianDistribution, "init_std": cfg.init_noise_std,
                                              "std_type": "log" if cfg.std_type == "log" else "scalar"}},
        "critic": dict(mlp),
        "algorithm": {
            "class_name": RslPPO, "num_learning_epochs": cfg.num_epochs, "num_mini_batches": cfg.num_minibatches,
            "clip_param": cfg.clip_param, "gamma": cfg.gamma, "lam": cfg.lam,
            "value_loss_coef": cfg.value_loss_coef, "entropy_coef": cfg.entropy_coef,
            "learning_rate": cfg.learning_rate, "max_grad_norm": cfg.max_grad_norm,
            "use_clipped_value_loss": cfg.value_clip, "schedule": cfg.schedule, "desired_kl": cfg.desired_kl,
        },
    }


def bench_task(task: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The three methods on ``task``: per-round seconds and the summary."""
    rsl_rl = _rsl_rl()
    base = {"num_steps": args.num_steps, "num_epochs": args.epochs, "num_minibatches": args.minibatches,
            "actor_hidden": tuple(args.hidden), "critic_hidden": tuple(args.hidden), "activation": "elu"}
    cfg = parse_sets(args.set, PPOConfig, base)
    steps = cfg.num_steps * args.num_envs

    rl_env = make_env(task, args.num_envs, args.backend, device, seed=0, nthread=args.threads)
    torch.manual_seed(0)
    agent = PPO(rl_env.obs_dims, rl_env.action_dim, cfg, device=device)
    state = {"obs": rl_env.obs}

    def robolearn_update() -> None:
        state["obs"], _ = ppo_iteration(agent, rl_env, state["obs"], cfg.num_steps)

    rsl_env = make_rsl_env(make_env(task, args.num_envs, args.backend, device, seed=0, nthread=args.threads))
    torch.manual_seed(0)
    # rsl_rl prints its models on construction: keep stdout for the tables.
    with contextlib.redirect_stdout(sys.stderr):
        runner = rsl_rl.runners.OnPolicyRunner(rsl_env, rsl_train_cfg(args, cfg), log_dir=None, device=str(device))

    def rsl_update() -> None:
        runner.learn(num_learning_iterations=1)

    env_only = make_env(task, args.num_envs, args.backend, device, seed=0, nthread=args.threads)
    gen = torch.Generator(device=device).manual_seed(0)

    def env_steps() -> None:
        for _ in range(cfg.num_steps):
            env_only.step(torch.rand((args.num_envs, env_only.action_dim), generator=gen, device=device) * 2 - 1)

    log(f"{task}: {args.num_envs} worlds x {cfg.num_steps} steps = {steps} env steps per update, "
        f"{cfg.num_epochs} epochs x {cfg.num_minibatches} minibatches, hidden {list(cfg.actor_hidden)}")

    def many(fn: Any) -> Any:
        def run() -> None:
            for _ in range(args.updates):
                fn()
        return run

    methods = {"robolearn": many(robolearn_update), "rsl_rl": many(rsl_update), "env only": many(env_steps)}
    times = paired(methods, args.rounds, device)
    for env in (rl_env, rsl_env.env, env_only):
        env.close()
    return {"summary": summary(times, steps * args.updates, "robolearn"),
            "config": {"num_envs": args.num_envs, "num_steps": cfg.num_steps, "epochs": cfg.num_epochs,
                       "minibatches": cfg.num_minibatches, "hidden": list(cfg.actor_hidden), "set": args.set}}


def rows_of(task: str, res: dict[str, Any]) -> list[list[Any]]:
    """Table rows of one task."""
    rows = []
    for name, r in res["summary"].items():
        if name == "robolearn":
            speed, goal = "—", "—"
        elif name == "env only":
            # time(env only) / time(robolearn): the share of the env-only rate robolearn keeps.
            speed, goal = f"robolearn keeps {r['speedup']:.0%} of this rate", "—"
        else:
            lo, hi = r["speedup_range"]
            speed = f"{r['speedup']:.2f}× ({lo:.2f}–{hi:.2f})"
            goal = "met" if r["speedup"] >= GOAL else "not met"
        rows.append([task, name, fmt_rate(r["rate"]), speed, f"{r['spread']:.0%}", goal])
    return rows


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run every task, print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--tasks", nargs="+", default=None, help="default: Ant HalfCheetah (quick: HalfCheetah)")
    parser.add_argument("--num-envs", type=int, default=None, help="worlds (default 4096)")
    parser.add_argument("--num-steps", type=int, default=24, help="rollout steps per world per update")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--hidden", type=int, nargs="+", default=None, help="MLP widths (default 256 256 256)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5)")
    parser.add_argument("--updates", type=int, default=None, help="timed updates per method per round (default 3)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra PPOConfig fields for robolearn (e.g. a compile option)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.tasks = args.tasks or (["HalfCheetah"] if quick else ["Ant", "HalfCheetah"])
    args.num_envs = args.num_envs or (8 if quick else 4096)
    args.hidden = args.hidden or ([32, 32] if quick else [256, 256, 256])
    args.rounds = args.rounds or (2 if quick else 5)
    args.updates = args.updates or (1 if quick else 3)
    if quick:
        args.num_steps, args.epochs, args.minibatches = 4, 1, 2
    device = setup(args)
    _rsl_rl()
    info = machine_info(args.device)
    log(f"{info}")
    results: dict[str, Any] = {}
    rows: list[list[Any]] = []
    for task in args.tasks:
        results[task] = bench_task(task, args, device)
        rows += rows_of(task, results[task])
    print_machine(info, ["python", *sys.argv])
    title = (f"PPO env steps/s including learning: robolearn vs rsl_rl, backend={args.backend} on {args.device}, "
             f"{args.num_envs} worlds x {args.num_steps} steps, {args.epochs} epochs x {args.minibatches} "
             f"minibatches, hidden {args.hidden}")
    if quick:
        title += " — QUICK SMOKE RUN, not a measurement"
    print_table(title, COLUMNS, rows)
    write_json(args.json, {"machine": info, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
