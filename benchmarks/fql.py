"""Flow Q-learning against IQL and Cal-QL on the same data: offline, then after online fine-tuning.

Every run is an ordinary ``robolearn train experiment=<exp> o2o_method=<fql|iql_ft|calql_ft>`` (one
torch thread, its own process, ``--jobs`` at a time; the runner of benchmarks/o2o_protocol.py):
``total_grad_steps`` offline gradient steps, then ``total_env_steps`` online env steps with half of
every batch from the data. The table gives, per method, the IQM over seeds with a 95% stratified-
bootstrap interval (rliable, :mod:`robolearn.analysis.compare`) of the normalised score and of the
success rate at the end of the offline phase and at the end of the run; ``robolearn compare``
writes the IQM curves over online env steps.

    python benchmarks/fql.py --root /work/bench/fql/runs --seeds 0 1 2 \\
        --dataset /work/bench/data/maze/PointMaze-UMaze/diverse.h5 --offline-steps 6000 --online-steps 10000

Resumable: a finished run (``summary.json``) is kept, one with checkpoints resumes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from o2o_protocol import Job, run  # noqa: E402  (the benchmarks folder is not a package)

METHODS: dict[str, list[str]] = {
    # FQL: the paper's defaults (alpha 10, mean of two LayerNorm critics, 10 flow steps), the
    # experiment's 64x64 networks for the one-step policy and the critics, a 64x64 flow.
    "fql": ["o2o_method=fql", "algo.flow_hidden=[64,64]"],
    "iql_ft": ["o2o_method=iql_ft"],
    # BENCHMARKS.md's Cal-QL settings on this maze (2 sampled actions, learning rates 3e-4).
    "calql_ft": ["o2o_method=calql_ft", "algo.cql_n_actions=2", "algo.actor_lr=3e-4", "algo.alpha_lr=3e-4"],
}
"""Each method's overrides on top of the experiment."""


def plan(args: argparse.Namespace) -> list[Job]:
    """One job per method and seed."""
    root = Path(args.root)
    common = [f"experiment={args.experiment}", f"dataset={args.dataset}", "torch_threads=1", "runner.console=false",
              f"total_grad_steps={args.offline_steps}", f"total_env_steps={args.online_steps}", *args.overrides]
    return [Job(f"{m}/seed{s}", root / m / f"seed{s}", [*common, *METHODS[m], f"seed={s}"])
            for m in args.methods for s in args.seeds]


def interval(values: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """IQM of ``values`` (one per seed) and its 95% stratified-bootstrap interval (rliable)."""
    from robolearn.analysis.compare import iqm, rliable_library

    library = rliable_library()
    scores = np.asarray(values, dtype=np.float64)[:, None, None]
    state = np.random.get_state()
    np.random.seed(seed)  # rliable draws its resampling indices from NumPy's global generator
    try:
        point, ci = library.get_interval_estimates({"m": scores}, lambda s: iqm(s[:, 0, :]), reps=reps,
                                                   random_state=np.random.RandomState(seed))
    finally:
        np.random.set_state(state)
    return float(np.asarray(point["m"]).item()), float(np.asarray(ci["m"][0]).item()), float(np.asarray(ci["m"][1]).item())


def table(root: Path, methods: list[str], seeds: list[int]) -> str:
    """The markdown table of offline and final scores (IQM [95% CI]) and the per-seed rows."""
    cols = [("offline_normalized_score", "offline score"), ("offline_success_rate", "offline success"),
            ("final_normalized_score", "final score"), ("final_success_rate", "final success")]
    lines = ["| method | " + " | ".join(c[1] for c in cols) + " | train time (s) |", "|---|" + "---:|" * (len(cols) + 1)]
    per_seed = ["| method | seed | " + " | ".join(c[1] for c in cols) + " | train time (s) |", "|---|---|" + "---:|" * (len(cols) + 1)]
    for m in methods:
        rows = [json.loads((root / m / f"seed{s}" / "summary.json").read_text()) for s in seeds]
        cells = []
        for key, _ in cols:
            vals = [float(r.get(key, float("nan"))) for r in rows]
            p, lo, hi = interval(vals)
            cells.append(f"{p:.2f} [{lo:.2f}, {hi:.2f}]")
        time_s = np.mean([r["train_time_s"] for r in rows])
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {time_s:.0f} |")
        for s, r in zip(seeds, rows, strict=True):
            per_seed.append(f"| {m} | {s} | " + " | ".join(f"{float(r.get(k, float('nan'))):.2f}" for k, _ in cols)
                            + f" | {r['train_time_s']:.0f} |")
    return "\n".join(lines) + "\n\n" + "\n".join(per_seed) + "\n"


def main() -> int:
    """Run the jobs, then the table and the curves."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="pointmaze_o2o")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--root", default="runs/fql")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    parser.add_argument("--offline-steps", type=int, default=6000)
    parser.add_argument("--online-steps", type=int, default=10000)
    parser.add_argument("--at", default=None, help="online env steps of the curve table (default: compare's)")
    parser.add_argument("overrides", nargs="*", help="extra `robolearn train` overrides for every run")
    args = parser.parse_args()
    run(plan(args), args.jobs)
    root = Path(args.root)
    if not all((root / m / f"seed{s}" / "summary.json").is_file() for m in args.methods for s in args.seeds):
        print("some runs did not finish; run the command again to continue them", flush=True)
        return 1
    text = table(root, args.methods, args.seeds)
    (root / "table.md").write_text(text)
    print(text, flush=True)
    groups = [f"{m}={','.join(str(root / m / f'seed{s}') for s in args.seeds)}" for m in args.methods]
    cmd = [sys.executable, "-m", "robolearn.cli.main", "compare", *groups, "--metric", "eval/normalized_score",
           "--x", "env_steps", "--out", str(root / "compare")]
    if args.at:
        cmd += ["--at", args.at]
    return subprocess.call(cmd)


if __name__ == "__main__":
    raise SystemExit(main())
