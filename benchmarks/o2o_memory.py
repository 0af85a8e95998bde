"""Peak memory of offline-to-online fine-tuning with and without the offline data (BENCHMARKS.md).

Each configuration is a fresh ``robolearn train`` process; its ``summary.json`` records the peak
resident memory of the run (``peak_rss_mb``). Compared on one dataset (the 1M-transition Hopper set):

- ``wsrl_from_checkpoint``: WSRL started from a finished offline Cal-QL run (``o2o.checkpoint``):
  the dataset is never loaded;
- ``wsrl_one_run``: WSRL with its offline phase in the same run: the dataset is loaded for the
  offline phase and let go when the online phase starts (its peak includes the data);
- ``rlpd``: RLPD, which keeps the dataset for the whole online phase (half of every batch).

Every run takes the same short online phase (the online replay is allocated at its full
``algo.buffer_size`` either way), one torch thread.

    python benchmarks/o2o_memory.py --dataset data/d4rl_style/Hopper/medium-1m.h5 --root runs/o2o_memory
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def train(run: Path, overrides: list[str]) -> dict:
    """Run (or keep) one ``robolearn train`` and return its summary."""
    if not (run / "summary.json").is_file():
        cmd = [sys.executable, "-m", "robolearn.cli.main", "train", *overrides, f"run_dir={run}", "overwrite=true"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads((run / "summary.json").read_text())


def main() -> int:
    """Measure the three configurations; print a table and write ``<root>/memory.json``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--experiment", default="hopper_o2o")
    parser.add_argument("--root", default="runs/o2o_memory")
    parser.add_argument("--online-steps", type=int, default=2000)
    parser.add_argument("--grad-steps", type=int, default=100)
    args = parser.parse_args()
    root = Path(args.root)
    # Small networks: the memory in question is the data's, and the runs stay short.
    nets = ["algo.actor_hidden=[64,64]", "algo.critic_hidden=[64,64]"]
    common = [f"experiment={args.experiment}", f"dataset={args.dataset}", "torch_threads=1", "runner.console=false",
              "runner.tensorboard=false", f"total_env_steps={args.online_steps}", f"o2o.warmup_steps={args.online_steps // 2}",
              f"o2o.offline_steps_per_iteration={args.grad_steps}", *nets]
    pre = root / "pretrain_calql"
    train(pre, [f"experiment={args.experiment}", f"dataset={args.dataset}", "o2o_method=pretrain_calql", *nets,
                f"total_grad_steps={args.grad_steps}", f"runner.steps_per_iteration={args.grad_steps}", "torch_threads=1",
                "runner.console=false"])
    results = {
        "wsrl_from_checkpoint": train(root / "wsrl_ckpt", [*common, "o2o_method=wsrl", "o2o.pretrain=null",
                                                         f"+o2o.checkpoint={pre}", "total_grad_steps=0"]),
        "wsrl_one_run": train(root / "wsrl_one_run", [*common, "o2o_method=wsrl", f"total_grad_steps={args.grad_steps}"]),
        "rlpd": train(root / "rlpd", [*common, "o2o_method=rlpd", "o2o.warmup_steps=0"]),
    }
    size = Path(args.dataset).stat().st_size / 2**20
    print(f"dataset {args.dataset}: {size:.0f} MiB on disk")
    print(f"{'configuration':24} {'peak RSS MiB':>14} {'keeps the data online':>24}")
    for name, summary in results.items():
        keeps = "yes" if summary.get("offline_ratio", 0) > 0 else "no"
        print(f"{name:24} {summary['peak_rss_mb']:14.0f} {keeps:>24}")
    (root / "memory.json").write_text(json.dumps({"dataset": args.dataset, "dataset_mib": size,
                                                  **{k: v["peak_rss_mb"] for k, v in results.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
