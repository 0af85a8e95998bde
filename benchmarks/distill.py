"""Student vs teacher under randomisation: a privileged PPO teacher distilled by DAgger and by AACD.

For each seed: a PPO teacher whose actor (and critic) read ``critic`` (policy + privileged: the
drawn masses, damping, motor strength and the true state) is trained with ``robolearn train``;
then two students that read only ``policy`` are distilled from it with ``robolearn distill``
(``mode=dagger`` and ``mode=aacd``). Every policy is then evaluated on the same randomised worlds
(``--eval-worlds`` worlds seeded ``20000 + seed``, one full episode each), and the table reports
per-seed returns, the student/teacher ratio, and the IQM over seeds with stratified-bootstrap 95%
intervals (rliable through ``robolearn.analysis``). Target: student >= 0.9 x teacher.

Each training job is a background process with one torch thread (the machine is shared), at most
``--jobs`` at a time; finished runs (a ``summary.json``) are reused, so the script resumes.

    python benchmarks/distill.py --task Cartpole-Balance-DR --seeds 0 1 2
    python benchmarks/distill.py --task Quadrotor-Hover --seeds 0 1 2 --teacher-steps 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
ROBOLEARN = [str(Path(sys.executable).parent / "robolearn")]
QUIET = ["runner.video=false", "runner.console=false", "runner.tensorboard=false", "torch_threads=1"]
RECIPES: dict[str, dict[str, list[str]]] = {
    "Cartpole-Balance-DR": {
        "teacher": ["experiment=cartpole_ppo", "task=Cartpole-Balance-DR", "algo.actor_obs_group=critic",
                    "algo.critic_obs_group=critic"],
        "student": ["experiment=cartpole_dr_distill"],
    },
    "Quadrotor-Hover": {
        # The quadrotor benchmark's PPO recipe (benchmarks/quadrotor_hover.py), with the actor on
        # policy + privileged (true state, motor states, drawn mass/inertia/thrust/time constant)
        # instead of a history encoder.
        "teacher": ["task=Quadrotor-Hover", "algo.actor_obs_group=critic", "algo.critic_obs_group=critic",
                    "num_envs=1024", "algo.num_steps=16", "algo.num_epochs=4", "algo.actor_hidden=[64,64]",
                    "algo.critic_hidden=[128,128]", "algo.init_noise_std=0.5", "algo.entropy_coef=0.0",
                    "eval_num_envs=64", "runner.eval_interval=25", "runner.checkpoint_interval=50"],
        "student": ["task=Quadrotor-Hover", "num_envs=1024", "algo.num_steps=16", "algo.num_epochs=4",
                    "algo.actor_hidden=[64,64]", "algo.beta_iterations=30", "algo.buffer_size=200000",
                    "algo.bc_coef_end=0.1", "algo.bc_iterations=60", "algo.init_noise_std=0.3", "eval_num_envs=64",
                    "runner.eval_interval=25", "runner.checkpoint_interval=50"],
    },
}


def _done(run: Path) -> bool:
    return (run / "summary.json").is_file()


def _launch(cmd: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    print("$ robolearn", " ".join(cmd[1:]), flush=True)
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=REPO)


def _run_all(jobs: list[tuple[list[str], Path, Path]], parallel: int) -> None:
    """Run ``(command, run dir, log)`` jobs, at most ``parallel`` at once, skipping finished runs."""
    pending = [j for j in jobs if not _done(j[1])]
    running: list[tuple[subprocess.Popen, Path]] = []
    while pending or running:
        while pending and len(running) < parallel:
            cmd, run, log = pending.pop(0)
            running.append((_launch(cmd, log), log))
        time.sleep(5)
        still = []
        for proc, log in running:
            if proc.poll() is None:
                still.append((proc, log))
            elif proc.returncode != 0:
                print(f"job failed ({proc.returncode}); see {log}", flush=True)
        running = still


def _evaluate(run: Path, task: str, worlds: int, seed: int) -> float:
    """Mean return of one full episode in each of ``worlds`` randomised worlds (deterministic policy)."""
    import robolearn
    from robolearn.runners.rollout import rollout

    policy = robolearn.load_policy(run)
    env = robolearn.make(task, worlds, seed=seed, curriculum={})  # the task as declared, no curriculum
    try:
        return float(rollout(env, policy.act, seed=seed).returns.double().mean())
    finally:
        env.close()


def _iqm_ci(scores: np.ndarray, reps: int = 2000) -> tuple[float, float, float]:
    """IQM over runs with rliable's stratified-bootstrap 95% interval."""
    from robolearn.analysis.compare import iqm, rliable_library

    lib = rliable_library()
    point, interval = lib.get_interval_estimates({"m": scores[:, None, None]}, lambda s: iqm(s[:, 0, 0]), reps=reps,
                                                 random_state=np.random.RandomState(0))
    low, high = np.asarray(interval["m"]).reshape(-1)[:2]
    return float(point["m"]), float(low), float(high)


def main() -> int:
    """Train teachers, distil students, evaluate, print the table and write ``<out>/<task>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Cartpole-Balance-DR", choices=sorted(RECIPES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--teacher-steps", type=int, default=1_500_000)
    parser.add_argument("--student-steps", type=int, default=300_000)
    parser.add_argument("--modes", nargs="+", default=["dagger", "aacd"])
    parser.add_argument("--jobs", type=int, default=3, help="training processes at once (one torch thread each)")
    parser.add_argument("--eval-worlds", type=int, default=64)
    parser.add_argument("--student-extra", nargs="*", default=[], help="extra overrides of every student run")
    parser.add_argument("--label", default="", help="suffix of the student run folders (a variant of the recipe)")
    parser.add_argument("--out", type=Path, default=Path("/work/bench/distill"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    recipe = RECIPES[args.task]
    root = args.out / "runs" / args.task
    root.mkdir(parents=True, exist_ok=True)

    teachers = {s: root / "teacher_ppo" / f"seed_{s}" for s in args.seeds}
    students = {(m, s): root / f"student_{m}{args.label}" / f"seed_{s}" for m in args.modes for s in args.seeds}
    for run in [*teachers.values(), *students.values()]:
        run.parent.mkdir(parents=True, exist_ok=True)
    _run_all([([*ROBOLEARN, "train", *recipe["teacher"], f"total_env_steps={args.teacher_steps}", f"seed={s}",
                *QUIET, f"run_dir={run}", "overwrite=true"], run, run.parent / f"seed_{s}.log")
              for s, run in teachers.items()], args.jobs)
    _run_all([([*ROBOLEARN, "distill", *recipe["student"], f"teacher={teachers[s]}", f"mode={m}",
                f"total_env_steps={args.student_steps}", f"seed={s}", *args.student_extra, *QUIET, f"run_dir={run}", "overwrite=true"],
               run, run.parent / f"seed_{s}.log") for (m, s), run in students.items()], args.jobs)

    rows: dict[str, dict[int, float]] = {"teacher": {}}
    for s, run in teachers.items():
        if _done(run):
            rows["teacher"][s] = _evaluate(run, args.task, args.eval_worlds, 20_000 + s)
    for (m, s), run in students.items():
        if _done(run):
            rows.setdefault(m + args.label, {})[s] = _evaluate(run, args.task, args.eval_worlds, 20_000 + s)
    result: dict[str, object] = {"task": args.task, "seeds": args.seeds, "teacher_steps": args.teacher_steps,
                                 "student_steps": args.student_steps, "eval_worlds": args.eval_worlds, "methods": {}}
    print(f"\n{args.task}: mean return of one episode in each of {args.eval_worlds} randomised worlds (seed 20000+s)")
    print(f"{'policy':<10} {'per seed':<32} {'IQM [95% CI]':<28} {'ratio to teacher (IQM [CI])'}")
    for name, by_seed in rows.items():
        seeds = sorted(by_seed)
        if not seeds:
            continue
        scores = np.array([by_seed[s] for s in seeds])
        point, low, high = _iqm_ci(scores)
        entry: dict[str, object] = {"per_seed": {str(s): by_seed[s] for s in seeds}, "iqm": point, "ci": [low, high]}
        ratio_txt = ""
        if name != "teacher":
            paired = [s for s in seeds if s in rows["teacher"]]
            ratios = np.array([by_seed[s] / rows["teacher"][s] for s in paired])
            r_point, r_low, r_high = _iqm_ci(ratios)
            entry.update(ratio_per_seed={str(s): float(r) for s, r in zip(paired, ratios, strict=True)},
                         ratio_iqm=r_point, ratio_ci=[r_low, r_high], meets_target=bool(ratios.min() >= 0.9))
            ratio_txt = f"{r_point:.3f} [{r_low:.3f}, {r_high:.3f}] (min {ratios.min():.3f})"
        per_seed = " ".join(f"{by_seed[s]:.1f}" for s in seeds)
        print(f"{name:<10} {per_seed:<32} {point:8.1f} [{low:.1f}, {high:.1f}]   {ratio_txt}")
        result["methods"][name] = entry  # type: ignore[index]
    out = args.out / f"{args.task}{args.label}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwritten {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
