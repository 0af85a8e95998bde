"""Behaviour cloning on multimodal demonstrations (issue 14): flow and diffusion policies over
action chunks against Gaussian (MSE) BC on ``PointMaze-Fork``.

The data (``robolearn data build tasks=[PointMaze-Fork] datasets=[expert]``) are planner episodes
that go round the central block on the left or on the right, each route in about half of them.
A unimodal policy regresses to the routes' average, which points straight at the block; a
generative policy can sample one route or the other. Per method and seed: ``robolearn train`` on
the dataset (in this process, one torch thread), then one episode in each of ``--episodes``
evaluation worlds with the policy as it is deployed (``robolearn.load_policy``: BC's deterministic
mean, the generative policies' sampler with fresh noise), keeping every position. Reported:

* success rate (the episode ends inside the goal radius) per run, IQM over seeds with rliable's
  stratified-bootstrap 95% interval (with 3 seeds the IQM is the mean: floor(3/4) = 0 runs are cut);
* mode coverage: the fraction of evaluation episodes through the left corridor, the right one, or
  neither (never got past the block: crashed into it or stalled), by
  :func:`robolearn.tasks.navigation.fork.corridor_of`; and per run the minority route's fraction
  ``min(left, right)`` (0 for a run that always takes the same route; the data's is 0.44), IQM over
  seeds with its interval: averaging left/right over seeds would hide runs that each collapse onto
  a different route;
* a PNG of sampled trajectories over the maze, one panel per method plus the demonstrations.

Resumable: a run with ``summary.json`` is not retrained, an evaluation with ``eval.json`` not rerun.

    OMP_NUM_THREADS=1 python benchmarks/bc_multimodal.py --dataset /work/bench/data/fork_expert.hdf5 \\
        --out /work/bench/bc_multimodal --methods bc flow diffusion --seeds 0 1 2 \\
        --png docs/benchmarks/fork_bc_trajectories.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

TASK = "PointMaze-Fork"
DEFAULT_STEPS = {"bc": 20_000, "flow": 20_000, "diffusion": 20_000}
"""Gradient steps per method (batch 256): BC's MLP converges in a few thousand; the generative
policies are given the same budget."""
COLOURS = {"left": "tab:blue", "right": "tab:orange", "neither": "tab:red"}


def train(method: str, seed: int, steps: int, dataset: Path, run: Path, extra: list[str]) -> float:
    """Train (or keep) one run; return its training wall time in seconds (a kept run's, from its summary)."""
    if (run / "summary.json").is_file():
        return float(json.loads((run / "summary.json").read_text())["wall_time_s"])
    from robolearn.cli.main import main

    t0 = time.perf_counter()
    code = main(["train", f"algo={method}", f"task={TASK}", f"dataset={dataset}", f"total_grad_steps={steps}",
                 f"seed={seed}", f"run_dir={run}", "torch_threads=1", "runner.video=false", "runner.tensorboard=false",
                 "runner.console=false", f"runner.eval_interval={10**9}", "eval_num_envs=1", "overwrite=true", *extra])
    if code != 0:
        raise RuntimeError(f"training {method} seed {seed} failed with exit code {code} (see {run})")
    return time.perf_counter() - t0


def evaluate(run: Path, episodes: int, seed: int) -> dict[str, Any]:
    """One episode per world in ``episodes`` worlds; success per episode, positions ``[E, T+1, 2]``, modes."""
    import robolearn
    from robolearn.runners.rollout import RolloutStep, rollout
    from robolearn.tasks.navigation.fork import modes_of
    from robolearn.tasks.navigation.point_maze import maze

    out = run / "eval.json"
    if out.is_file():
        return json.loads(out.read_text())
    policy = robolearn.load_policy(run)
    env = robolearn.make(TASK, episodes, seed=seed)
    positions: list[torch.Tensor] = []
    finals: dict[int, torch.Tensor] = {}

    def record(step: RolloutStep) -> None:
        positions.append(step.obs["policy"][:, :2].detach().double().cpu().clone())
        for i in step.done_ids.tolist():  # the last state of a world's first episode
            finals.setdefault(i, step.info["final_obs"]["policy"][i, :2].detach().double().cpu().clone())

    t0 = time.perf_counter()
    try:
        result = rollout(env, policy.act, seed=seed, on_step=record)
    finally:
        env.close()
    eval_s = time.perf_counter() - t0
    length = int(result.lengths.max())
    xy = torch.stack(positions[:length], dim=1)  # [E, T, 2], every world's first episode (no termination)
    xy = torch.cat([xy, torch.stack([finals[i] for i in range(episodes)])[:, None]], dim=1)
    modes = modes_of(list(xy), maze("Fork"))
    data = {"success": result.successes.tolist(), "modes": modes, "xy": xy.float().tolist(), "eval_s": eval_s,
            "steps": length}
    out.write_text(json.dumps(data))
    return data


def balanced(src: Path, dst: Path) -> Path:
    """A copy of ``src`` with as many left-route as right-route episodes (the first of each, in
    order), so neither mode is the majority: what a unimodal policy does when the data give it no
    side to prefer. Kept if ``dst`` exists.
    """
    if dst.is_file():
        return dst
    import dataclasses

    from robolearn.data import Dataset
    from robolearn.tasks.navigation.fork import corridor_of
    from robolearn.tasks.navigation.point_maze import maze

    ds = Dataset.load(src)
    episodes = [ds.episode(i) for i in range(ds.num_episodes)]
    modes = [corridor_of(e["observations"]["policy"][:, :2], maze("Fork")) for e in episodes]
    n = min(modes.count("left"), modes.count("right"))
    keep = [e for side in ("left", "right") for e in [e for e, mo in zip(episodes, modes, strict=True) if mo == side][:n]]
    meta = dataclasses.replace(ds.metadata, collection=f"{ds.metadata.collection}-balanced")
    dst.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_episodes(keep, meta).save(dst)
    return dst


def iqm_ci(scores: np.ndarray, reps: int = 2000) -> tuple[float, float, float]:
    """IQM over runs with rliable's stratified-bootstrap 95% interval."""
    from robolearn.analysis.compare import iqm, rliable_library

    lib = rliable_library()
    point, interval = lib.get_interval_estimates({"m": scores[:, None, None]}, lambda s: iqm(s[:, 0, 0]), reps=reps,
                                                 random_state=np.random.RandomState(0))
    low, high = np.asarray(interval["m"]).reshape(-1)[:2]
    return float(point["m"]), float(low), float(high)


def draw(png: Path, panels: list[tuple[str, list[list[list[float]]], list[str]]], per_panel: int) -> None:
    """Trajectories over the maze, one panel per (title, trajectories, modes), coloured by corridor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Circle, Rectangle

    from robolearn.tasks.navigation.point_maze import GOAL_RADIUS, maze

    m = maze("Fork")
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.4), squeeze=False)
    for ax, (title, trajs, modes) in zip(axes[0], panels, strict=True):
        for cell in m.walls:
            x, y = m.center(cell)
            ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, color="0.35"))
        gx, gy = m.center(m.find("G"))
        ax.add_patch(Circle((gx, gy), GOAL_RADIUS, color="tab:green", alpha=0.3))
        sx, sy = m.center(m.find("S"))
        ax.plot([sx], [sy], "k*", ms=9)
        for xy, mode in list(zip(trajs, modes, strict=True))[:per_panel]:
            a = np.asarray(xy)
            ax.plot(a[:, 0], a[:, 1], color=COLOURS[mode], lw=0.8, alpha=0.7)
            ax.plot(a[-1, 0], a[-1, 1], "o", color=COLOURS[mode], ms=2.5)
        counts = {k: sum(mo == k for mo in modes) for k in COLOURS}
        ax.set_title(f"{title}\nL {counts['left']} / R {counts['right']} / none {counts['neither']}", fontsize=9)
        h, w = m.shape
        ax.set_xlim(-w / 2, w / 2)
        ax.set_ylim(-h / 2, h / 2)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main() -> int:
    """Train, evaluate, print the table, write ``<out>/results.json`` and the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=Path("/work/bench/data/fork_expert.hdf5"))
    parser.add_argument("--out", type=Path, default=Path("/work/bench/bc_multimodal"))
    parser.add_argument("--methods", nargs="+", default=["bc", "flow", "diffusion"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", nargs="*", default=[], help="per-method gradient steps, e.g. flow=10000")
    parser.add_argument("--extra", nargs="*", default=[], help="per-method overrides, e.g. flow:algo.sample_steps=4")
    parser.add_argument("--episodes", type=int, default=32, help="evaluation worlds (one episode each) per run")
    parser.add_argument("--png", type=Path, default=Path("docs/benchmarks/fork_bc_trajectories.png"))
    parser.add_argument("--balance", action="store_true",
                        help="train on <out>/balanced.hdf5: the dataset cut to equal left and right episodes")
    parser.add_argument("--per-panel", type=int, default=32, help="trajectories drawn per method (from seed 0's run)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    steps = dict(DEFAULT_STEPS)
    steps.update({k: int(v) for k, v in (s.split("=", 1) for s in args.steps)})
    extra: dict[str, list[str]] = {}
    for item in args.extra:
        method, override = item.split(":", 1)
        extra.setdefault(method, []).append(override)

    from robolearn.data import Dataset
    from robolearn.tasks.navigation.fork import mode_coverage, modes_of
    from robolearn.tasks.navigation.point_maze import maze

    if args.balance:
        args.dataset = balanced(args.dataset, args.out / "balanced.hdf5")
    ds = Dataset.load(args.dataset)
    demo = [ds.episode(i)["observations"]["policy"][:, :2].double() for i in range(ds.num_episodes)]
    demo_modes = modes_of(demo, maze("Fork"))
    results: dict[str, Any] = {
        "task": TASK, "dataset": str(args.dataset), "demonstrations": mode_coverage(demo, maze("Fork")),
        "episodes": args.episodes, "steps": steps, "extra": extra, "machine": platform.platform(),
        "cpus": os.cpu_count(), "load_before": os.getloadavg(), "methods": {},
    }
    panels = [("demonstrations", [d.tolist() for d in demo], list(demo_modes))]
    for method in args.methods:
        runs = []
        for seed in args.seeds:
            run = args.out / method / f"seed{seed}"
            train_s = train(method, seed, steps[method], args.dataset, run, extra.get(method, []))
            ev = evaluate(run, args.episodes, seed=1000 + seed)
            modes = ev["modes"]
            runs.append({"seed": seed, "success": float(np.mean(ev["success"])), "train_s": train_s,
                         "eval_s": ev["eval_s"], **{k: modes.count(k) / len(modes) for k in COLOURS}})
            runs[-1]["minority"] = min(runs[-1]["left"], runs[-1]["right"])
            print(f"{method} seed {seed}: success {runs[-1]['success']:.2f}, left {runs[-1]['left']:.2f}, right "
                  f"{runs[-1]['right']:.2f}, neither {runs[-1]['neither']:.2f} (train {train_s:.0f} s, eval "
                  f"{ev['eval_s']:.0f} s)", flush=True)
            if seed == args.seeds[0]:
                panels.append((f"{method} (seed {seed})", ev["xy"], modes))
        success = np.array([r["success"] for r in runs])
        point, low, high = iqm_ci(success)
        m_point, m_low, m_high = iqm_ci(np.array([r["minority"] for r in runs]))
        results["methods"][method] = {
            "runs": runs, "success_iqm": point, "success_ci95": [low, high],
            "minority_iqm": m_point, "minority_ci95": [m_low, m_high],
            **{f"{k}_mean": float(np.mean([r[k] for r in runs])) for k in COLOURS},
        }
    results["load_after"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    draw(args.png, panels, args.per_panel)
    print("\n| method | success IQM [95% CI] | minority route IQM [95% CI] | left | right | neither | seeds |\n"
          "|---|---|---|---|---|---|---|")
    d = results["demonstrations"]
    print(f"| demonstrations | {ds.metadata.extra.get('success_rate', float('nan')):.2f} | {min(d['left'], d['right']):.2f} | {d['left']:.2f} | {d['right']:.2f} | {d['neither']:.2f} | - |")
    for method, r in results["methods"].items():
        print(f"| {method} | {r['success_iqm']:.2f} [{r['success_ci95'][0]:.2f}, {r['success_ci95'][1]:.2f}] | "
              f"{r['minority_iqm']:.2f} [{r['minority_ci95'][0]:.2f}, {r['minority_ci95'][1]:.2f}] | "
              f"{r['left_mean']:.2f} | {r['right_mean']:.2f} | {r['neither_mean']:.2f} | {len(r['runs'])} |")
    print(f"wrote {args.out / 'results.json'} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
