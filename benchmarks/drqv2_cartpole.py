"""DrQ-v2 on Cartpole-Swingup-Pixels against DrQ-v2's published DMC curve, in frames.

Reads the run directories of one or more methods (``name=dir,dir,...``: a method's seeds), puts
each run's ``eval/return`` on a frame axis (frames = agent steps x the run's action repeat, the
``task_overrides.decimation`` in its ``config.json``), adds the published DrQ-v2 runs as a method
of their own, and writes ``robolearn compare``'s report (IQM with 95% stratified-bootstrap
intervals, probability of improvement, curves) for the frames every method covers.

    python benchmarks/drqv2_cartpole.py pixels=runs/p0,runs/p1,runs/p2 asym=runs/a0,runs/a1,runs/a2 \
        --out docs/benchmarks/drqv2_cartpole

The published figures are DrQ-v2's own evaluation returns for ``cartpole_swingup`` (Yarats et al.
2021; ``curves/dmc_cartpole_swingup.csv`` of facebookresearch/drqv2: 10 seeds, action repeat 2,
84x84, batch 256), transcribed at every 20k frames up to 100k and at 500k.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from robolearn.analysis.compare import compare, curves_png, markdown
from robolearn.analysis.runs import Group, RunCurve, load_run

PUBLISHED_FRAMES = (20_000, 40_000, 60_000, 80_000, 100_000)
"""Frames of the transcribed published evaluations below (each row: seeds 1..10)."""
PUBLISHED = np.array([
    [174.8, 75.5, 54.8, 75.2, 75.0, 74.9, 240.3, 97.9, 74.9, 75.0],
    [294.9, 75.3, 355.4, 121.8, 165.6, 74.0, 421.7, 200.4, 237.5, 86.7],
    [506.2, 74.6, 664.6, 191.7, 208.6, 200.2, 607.9, 333.6, 403.6, 65.6],
    [751.3, 175.7, 755.7, 342.0, 459.4, 263.3, 800.6, 537.9, 661.2, 90.4],
    [763.5, 210.0, 786.2, 809.8, 750.3, 357.5, 803.0, 824.4, 791.3, 168.3],
])
"""DrQ-v2's published eval returns ``[frames, seeds]`` on cartpole_swingup."""
PUBLISHED_500K = (855.5, 838.4, 823.0, 831.0, 869.1, 837.3, 828.0, 878.9, 847.0, 851.3)
"""The same seeds at 500k frames."""


def frames_curve(path: Path) -> RunCurve:
    """One run's ``eval/return`` against frames (agent steps x its action repeat)."""
    run = load_run(path, "eval/return", x="env_steps")
    repeat = int(run.config.get("task_overrides", {}).get("decimation", 1))
    return RunCurve(path=run.path, config=run.config, unit="frames", steps=run.steps * repeat, values=run.values)


def published_group() -> Group:
    """The published DrQ-v2 seeds as a method."""
    steps = np.asarray(PUBLISHED_FRAMES, dtype=np.float64)
    runs = tuple(
        RunCurve(path=Path(f"drqv2-published/seed{i + 1}"), config={}, unit="frames", steps=steps,
                 values=PUBLISHED[:, i].astype(np.float64))
        for i in range(PUBLISHED.shape[1])
    )
    return Group(name="DrQ-v2 (published, AR 2, 84x84)", runs=runs)


def main() -> None:
    """Parse ``name=dir,dir`` methods, compare them with the published curve, write the report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("methods", nargs="+", help="name=run_dir,run_dir,... (one per method)")
    parser.add_argument("--out", type=Path, required=True, help="folder for comparison.md/json and curves.png")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    args = parser.parse_args()
    groups = []
    for spec in args.methods:
        name, _, dirs = spec.partition("=")
        if not dirs:
            parser.error(f"{spec!r}: expected name=dir,dir,...")
        groups.append(Group(name=name, runs=tuple(frames_curve(Path(d)) for d in dirs.split(","))))
    groups.append(published_group())
    result = compare(groups, "eval/return", at=[f for f in PUBLISHED_FRAMES], align="last", reps=args.reps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "comparison.md").write_text(markdown(result))
    (args.out / "comparison.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    (args.out / "curves.png").write_bytes(curves_png(result))
    print(markdown(result))
    pub = np.asarray(PUBLISHED_500K)
    print(f"published at 500k frames: mean {pub.mean():.1f}, min {pub.min():.1f}, max {pub.max():.1f} (10 seeds)")


if __name__ == "__main__":
    main()
