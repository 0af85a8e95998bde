"""SAC gradient steps/s on the GPU: robolearn's SAC against Stable-Baselines3's (issue 15; goal >= 3x).

Both learners live on ``--device`` and train on replay buffers filled with the same random
transitions of the task's shapes (``--task``, HalfCheetah by default: the env is only asked for
its observation and action sizes and bounds, so the figure is the learner's alone):

``robolearn``
    :class:`robolearn.algos.sac.SAC`; one gradient step is ``replay.sample`` (indices drawn on the
    device) + ``update_step``, ``--steps`` of them per timed call. ``--set KEY=VALUE`` passes extra
    ``SACConfig`` fields (a compile or CUDA-graph option of the update, where there is one).
``sb3``
    ``stable_baselines3.SAC("MlpPolicy", RobolearnSB3VecEnv(...), device=...)`` and
    ``model.train(gradient_steps=--steps, batch_size=...)``: SB3's own gradient loop, its replay
    buffer in host memory copied to the device per batch (that is how SB3 runs on a GPU).

Same networks (actor and 2 critics of ``--hidden`` ReLU units), the same batch size (each of
``--batch``), one critic and one actor step per gradient step (UTD 1, no policy delay),
automatic entropy tuning, Polyak targets. After one warm-up call each, ``--rounds`` interleaved
rounds, each timed between ``torch.cuda.synchronize()`` calls; the rate is the median, the
speed-up the median of the per-round ratios.

    python benchmarks/gpu_sac_vs_sb3.py                      # H100/H200: batch 256 and 4096
    python benchmarks/gpu_sac_vs_sb3.py --quick --device cpu  # CPU smoke run
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np
import torch

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

from robolearn.algos.sac import SAC, SACConfig  # noqa: E402

GOAL = 3.0
COLUMNS = ["task", "batch", "method", "gradient steps/s", "robolearn speed-up (median, range)", "spread",
           f"goal ≥ {GOAL:g}×"]


def random_transitions(n: int, obs_dim: int, act_dim: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` random transitions (float32; actions in [-1, 1]; 0.1 % terminal), the same for both buffers."""
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "next_obs": rng.standard_normal((n, obs_dim)).astype(np.float32),
        "action": rng.uniform(-1.0, 1.0, (n, act_dim)).astype(np.float32),
        "reward": rng.standard_normal(n).astype(np.float32),
        "terminated": rng.random(n) < 0.001,
    }


def robolearn_sac(env: Any, data: dict[str, np.ndarray], batch: int, args: argparse.Namespace,
                  device: torch.device) -> Any:
    """A robolearn SAC agent on ``device`` with the transitions in its replay buffer; returns the timed call."""
    n = len(data["reward"])
    base = {"batch_size": batch, "buffer_size": n, "learning_starts": 0, "actor_hidden": tuple(args.hidden),
            "critic_hidden": tuple(args.hidden), "num_critics": 2, "utd_ratio": 1, "policy_delay": 1}
    cfg = parse_sets(args.set, SACConfig, base)
    agent = SAC(env.obs_dims, env.action_dim, cfg, action_low=env.ctrl_low, action_high=env.ctrl_high,
                device=device, seed=0)
    term = torch.from_numpy(data["terminated"]).to(device)
    agent.replay.add({"policy": torch.from_numpy(data["obs"]).to(device)}, torch.from_numpy(data["action"]).to(device),
                     torch.from_numpy(data["reward"]).to(device), {"policy": torch.from_numpy(data["next_obs"]).to(device)},
                     term, torch.zeros_like(term))

    def steps() -> None:
        for _ in range(args.steps):
            agent.update_step(agent.replay.sample(cfg.batch_size, agent.generator))

    return steps


def sb3_sac(env: Any, data: dict[str, np.ndarray], batch: int, args: argparse.Namespace,
            device: torch.device) -> tuple[Any, Any]:
    """An SB3 SAC model on ``device`` with the transitions in its buffer; returns (timed call, vec env)."""
    import stable_baselines3
    from stable_baselines3.common.logger import configure

    from robolearn.envs.sb3_adapter import RobolearnSB3VecEnv

    venv = RobolearnSB3VecEnv(env=env)
    n = len(data["reward"])
    model = stable_baselines3.SAC(
        "MlpPolicy", venv, buffer_size=n, batch_size=batch, learning_starts=0, train_freq=1, gradient_steps=1,
        policy_kwargs={"net_arch": list(args.hidden), "n_critics": 2}, device=device, seed=0, verbose=0,
    )
    model.set_logger(configure(None, []))
    buf = model.replay_buffer
    buf.observations[:n, 0] = data["obs"]
    buf.next_observations[:n, 0] = data["next_obs"]
    buf.actions[:n, 0] = data["action"]
    buf.rewards[:n, 0] = data["reward"]
    buf.dones[:n, 0] = data["terminated"]
    buf.timeouts[:n, 0] = False
    buf.pos, buf.full = 0, True  # exactly n stored: the buffer's whole capacity

    def steps() -> None:
        model.train(gradient_steps=args.steps, batch_size=batch)

    return steps, venv


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, time both learners at every batch size, print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--task", default="HalfCheetah", help="shapes of observations and actions")
    parser.add_argument("--batch", type=int, nargs="+", default=None, help="batch sizes (default 256 4096)")
    parser.add_argument("--hidden", type=int, nargs="+", default=None, help="MLP widths (default 256 256)")
    parser.add_argument("--fill", type=int, default=None, help="random transitions in each buffer (default 100000)")
    parser.add_argument("--steps", type=int, default=None, help="gradient steps per timed call (default 500)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra SACConfig fields for robolearn")
    args = parser.parse_args(argv)
    quick = args.quick
    args.batch = args.batch or ([16] if quick else [256, 4096])
    args.hidden = args.hidden or ([32, 32] if quick else [256, 256])
    args.fill = args.fill or (500 if quick else 100_000)
    args.steps = args.steps or (3 if quick else 500)
    args.rounds = args.rounds or (2 if quick else 5)
    device = setup(args)
    info = machine_info(args.device)
    log(f"{info}")
    # Shapes only: the MuJoCo CPU batch, one world (the learners never step it).
    env = make_env(args.task, 1, "mujoco", "cpu", seed=0, nthread=1)
    data = random_transitions(args.fill, env.obs_dims["policy"], env.action_dim)
    results: dict[str, Any] = {}
    rows = []
    for batch in args.batch:
        log(f"SAC {args.task}: batch {batch}, hidden {args.hidden}, {args.fill} transitions, {args.steps} steps/call")
        sb3_steps, venv = sb3_sac(env, data, batch, args, device)
        methods = {"robolearn": robolearn_sac(env, data, batch, args, device), "sb3": sb3_steps}
        times = paired(methods, args.rounds, device)
        res = summary(times, args.steps, "robolearn")
        results[str(batch)] = res
        for name, r in res.items():
            if name == "robolearn":
                speed, goal = "—", "—"
            else:
                lo, hi = r["speedup_range"]
                speed, goal = f"{r['speedup']:.2f}× ({lo:.2f}–{hi:.2f})", "met" if r["speedup"] >= GOAL else "not met"
            rows.append([args.task, batch, name, fmt_rate(r["rate"]), speed, f"{r['spread']:.0%}", goal])
        del venv  # the adapter wraps the shared one-world env: closed once, below
    env.close()
    print_machine(info, ["python", *sys.argv])
    title = (f"SAC gradient steps/s on {args.device}: robolearn vs SB3, hidden {args.hidden}, 2 critics, UTD 1, "
             f"{args.steps} steps x {args.rounds} rounds")
    if quick:
        title += " — QUICK SMOKE RUN, not a measurement"
    print_table(title, COLUMNS, rows)
    write_json(args.json, {"machine": info, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
