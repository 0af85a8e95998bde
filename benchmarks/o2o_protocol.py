"""The offline-to-online comparison of BENCHMARKS.md: methods x seeds on one experiment, then ``robolearn compare``.

Every run is an ordinary ``robolearn train`` (one torch thread, in its own process, ``--jobs`` at a
time). The WSRL variants share one offline Cal-QL pre-training per seed (``o2o_method=pretrain_calql``)
and start from its checkpoint (``o2o.checkpoint``), so the ablations differ only in what they do
online. Resumable: a run with a ``summary.json`` is kept, one with checkpoints resumes; re-running
the command finishes an interrupted table.

    python benchmarks/o2o_protocol.py --experiment pointmaze_o2o --seeds 0 1 2 --root runs/o2o_umaze \\
        --methods wsrl wsrl_no_warmup rlpd calql_ft iql_ft sac --metric eval/success_rate [-- extra overrides]

Then ``<root>/compare`` holds ``comparison.md`` (IQM with 95% stratified-bootstrap intervals at fixed
online env steps, probability of improvement) and the PNG curves.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

WSRL_FAMILY = ("wsrl", "wsrl_no_warmup", "wsrl_retain", "wsrl_hard_backup")
"""Methods that start from the shared pre-trained Cal-QL checkpoint."""


@dataclass
class Job:
    """One ``robolearn train`` run."""

    name: str
    run_dir: Path
    overrides: list[str]
    after: list[str] = field(default_factory=list)

    def command(self) -> list[str]:
        """The command line; resumes a run that has checkpoints."""
        if (self.run_dir / "checkpoints").is_dir() and any((self.run_dir / "checkpoints").glob("ckpt_*.pt")):
            return [sys.executable, "-m", "robolearn.cli.main", "train", f"resume={self.run_dir}"]
        return [sys.executable, "-m", "robolearn.cli.main", "train", *self.overrides, f"run_dir={self.run_dir}"]

    @property
    def done(self) -> bool:
        """Whether the run finished (its summary is written last)."""
        return (self.run_dir / "summary.json").is_file()


def plan(args: argparse.Namespace) -> list[Job]:
    """The jobs of the table, pre-training first."""
    root = Path(args.root)
    common = [f"experiment={args.experiment}", "torch_threads=1", "runner.console=false", *args.overrides]
    jobs: list[Job] = []
    calql = [f"algo.{kv}" for kv in args.calql]
    # The offline phase's length, for the runs that have one (RLPD and SAC have none; the WSRL
    # variants start from the pre-training's checkpoint).
    offline = [] if args.offline_steps is None else [f"total_grad_steps={args.offline_steps}"]
    if any(m in WSRL_FAMILY for m in args.methods):
        for seed in args.seeds:
            pre = root / "pretrain_calql" / f"seed{seed}"
            jobs.append(Job(f"pretrain_calql/seed{seed}", pre, [*common, "o2o_method=pretrain_calql", f"seed={seed}", *calql,
                                                                  *offline]))
    for method in args.methods:  # method by method, so that an interrupted table has whole rows
        for seed in args.seeds:
            pre = root / "pretrain_calql" / f"seed{seed}"
            extra = [f"o2o_method={method}", f"seed={seed}", *(calql if method == "calql_ft" else [])]
            if method in ("calql_ft", "iql_ft", "wsrl_retain"):
                extra += offline
            after: list[str] = []
            if method in WSRL_FAMILY:
                extra += ["o2o.pretrain=null", f"+o2o.checkpoint={pre}", "total_grad_steps=0"]
                if args.warmup is not None and method != "wsrl_no_warmup":
                    extra.append(f"o2o.warmup_steps={args.warmup}")
                after = [f"pretrain_calql/seed{seed}"]
            jobs.append(Job(f"{method}/seed{seed}", root / method / f"seed{seed}", [*common, *extra], after))
    return jobs


def run(jobs: list[Job], parallel: int) -> None:
    """Run the unfinished jobs, ``parallel`` at a time, each after the jobs it needs."""
    finished = {j.name for j in jobs if j.done}
    pending = [j for j in jobs if not j.done]
    running: dict[str, tuple[subprocess.Popen, float, object]] = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    while pending or running:
        for name, (proc, start, log) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()  # type: ignore[attr-defined]
            del running[name]
            status = "done" if proc.returncode == 0 else f"FAILED ({proc.returncode})"
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {status} in {time.time() - start:.0f} s", flush=True)
            if proc.returncode == 0:
                finished.add(name)
            else:
                pending = [j for j in pending if name not in j.after]  # its dependants cannot run
        ready = [j for j in pending if all(a in finished for a in j.after)]
        while ready and len(running) < parallel:
            job = ready.pop(0)
            pending.remove(job)
            job.run_dir.parent.mkdir(parents=True, exist_ok=True)
            log = open(job.run_dir.parent / f"{job.run_dir.name}.log", "a")  # noqa: SIM115 (closed when it ends)
            print(f"[{time.strftime('%H:%M:%S')}] start {job.name}", flush=True)
            running[job.name] = (subprocess.Popen(job.command(), stdout=log, stderr=subprocess.STDOUT, env=env),
                                 time.time(), log)
        if not ready and not running and pending:
            print(f"cannot run (a run they need failed): {[j.name for j in pending]}", flush=True)
            return
        time.sleep(1.0)


def main() -> int:
    """Run the table and the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="pointmaze_o2o")
    parser.add_argument("--methods", nargs="+", default=["wsrl", "wsrl_no_warmup", "rlpd", "calql_ft", "iql_ft", "sac"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--root", default="runs/o2o")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    parser.add_argument("--metric", default="eval/return")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps of the WSRL variants (default: the method's)")
    parser.add_argument("--calql", nargs="*", default=[],
                        help="algo settings of the Cal-QL runs only (pre-training and calql_ft), e.g. cql_n_actions=2 actor_lr=3e-4")
    parser.add_argument("--offline-steps", type=int, default=None, help="offline gradient steps (default: the experiment's)")
    parser.add_argument("--at", default=None, help="online env steps of the comparison table (default: compare's)")
    parser.add_argument("overrides", nargs="*", help="extra `robolearn train` overrides for every run")
    args = parser.parse_args()
    jobs = plan(args)
    run(jobs, args.jobs)
    groups = [f"{m}={','.join(str(Path(args.root) / m / f'seed{s}') for s in args.seeds)}" for m in args.methods]
    if not all((Path(args.root) / m / f"seed{s}" / "summary.json").is_file() for m in args.methods for s in args.seeds):
        print("some runs did not finish; run the command again to continue them", flush=True)
        return 1
    cmd = [sys.executable, "-m", "robolearn.cli.main", "compare", *groups, "--metric", args.metric, "--x", "env_steps",
           "--out", str(Path(args.root) / "compare")]
    if args.at:
        cmd += ["--at", args.at]
    code = subprocess.call(cmd)
    table = {}
    for m in args.methods:
        table[m] = [json.loads((Path(args.root) / m / f"seed{s}" / "summary.json").read_text()) for s in args.seeds]
    keys = ("offline_score", "warmup_score", "min_early_online_score", "min_early_online_ratio", "final_online_score",
            "final_success_rate", "final_normalized_score", "peak_rss_mb", "train_time_s")
    print("method            " + "  ".join(f"{k:>24}" for k in keys))
    for m, rows in table.items():
        cells = []
        for k in keys:
            vals = [r[k] for r in rows if k in r]
            cells.append(f"{sum(vals) / len(vals):24.3f}" if vals else f"{'-':>24}")
        print(f"{m:18}" + "  ".join(cells))
    (Path(args.root) / "summaries.json").write_text(json.dumps(table, indent=1))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
