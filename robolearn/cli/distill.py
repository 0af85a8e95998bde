"""``robolearn distill teacher=<run dir> mode=dagger|aacd``: a privileged teacher into a deployable student.

A command of its own rather than a section of ``train``: the teacher is a finished run, as with
``export`` or ``eval``, and rsl_rl/Isaac Lab users know distillation as its own runner, started
with the teacher checkpoint to load (Isaac Lab's ``*-Distillation`` tasks, rsl_rl's
``DistillationRunner``). Everything else is ``train``'s: the same Hydra overrides (``task=``,
``seed=``, ``num_envs=``, ``total_env_steps=``, ``runner.*``, ``algo.*`` of
:class:`~robolearn.algos.distill.DistillConfig`), ``experiment=`` recipes, ``-m`` sweeps,
``resume=<student run>``, and the student's run directory is an ordinary one that
``robolearn export run=<dir>`` and ``robolearn eval run=<dir>`` read. ``task`` defaults to the
teacher's task and overrides, so the student meets the randomisation the teacher was trained under.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from robolearn.cli.build import EVAL_SEED_OFFSET, build_agent, build_env
from robolearn.cli.commands import (
    UsageError,
    _fail,
    _message,
    _os_message,
    _print_table,
    _resumed_config,
    compose_config,
    expand_sweeps,
)
from robolearn.cli.config import ConfigError, TrainConfig, train_config_from_dict, train_config_to_dict
from robolearn.runners import CheckpointError, RunDirError, TrainingDiverged
from robolearn.runners.distill import DistillRunner, TeacherError, load_teacher
from robolearn.runners.train_config import saved_config

USAGE = ("robolearn distill [-m] teacher=<teacher run dir> mode=<dagger|aacd> [task=<TaskId>] "
         "[experiment=<name>] [key=value ...]")
"""The command line, for ``--help``."""


def distill_command(argv: Sequence[str]) -> int:
    """Run ``robolearn distill <argv>``; return the exit status (as ``train``: 2 for a bad setting or
    a run directory that cannot be used, 1 for a diverged run, 130 after Ctrl-C).
    """
    args = list(argv)
    if any(a in ("-h", "--help") for a in args):
        print(_help())
        return 0
    multirun = any(a in ("-m", "--multirun") for a in args)
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    try:
        jobs = expand_sweeps(overrides) if multirun else [(overrides, "")]
        results = [distill_job(job, name) for job, name in jobs]
        if multirun:
            _print_table(["run_dir", "final eval return", "env steps"], results)
        return 0
    except (ConfigError, UsageError, HydraException, OmegaConfBaseException, RunDirError, CheckpointError,
            TeacherError) as exc:
        return _fail("distill", _message(exc), 2)
    except ValueError as exc:  # a student that reads a privileged group, an AACD teacher without a critic
        return _fail("distill", str(exc), 2)
    except OSError as exc:
        return _fail("distill", _os_message(exc), 2)
    except TrainingDiverged as exc:
        return _fail("distill", f"training stopped: {exc}", 1)
    except KeyboardInterrupt as exc:
        checkpoint = getattr(exc, "checkpoint", None)
        where = f"; the last checkpoint is {checkpoint} (continue with resume=<run dir>)" if checkpoint else ""
        return _fail("distill", f"interrupted{where}", 130)


def distill_config(composed: dict[str, Any]) -> TrainConfig:
    """The student's :class:`TrainConfig` from the composed ``distill.yaml``: ``teacher``/``mode`` go
    into the ``algo`` section, and a missing ``task`` is the teacher's (with its task overrides).

    Raises:
        ConfigError: no teacher, a teacher that is not a run, or any setting ``train`` would refuse.
    """
    top = dict(composed)
    algo = dict(top.get("algo") or {})
    algo["name"] = "distill"
    for key in ("teacher", "mode"):
        value = top.pop(key, None)
        if value is not None:
            algo[key] = value
    if not algo.get("teacher"):
        raise ConfigError("teacher: expected the run directory of a trained teacher (teacher=<run dir>)")
    if top.get("task") is None:
        try:
            teacher = saved_config(str(algo["teacher"]))
        except FileNotFoundError:
            raise ConfigError(f"teacher: {algo['teacher']} is not a run directory (no config.json)") from None
        top["task"] = teacher["task"]
        if not top.get("task_overrides"):
            top["task_overrides"] = teacher.get("task_overrides", {})
    run_dir = str(top.get("run_dir", ""))
    if run_dir.startswith("runs/None/"):  # the default run_dir, composed before the task was known
        top["run_dir"] = f"runs/{top['task']}/{run_dir.removeprefix('runs/None/')}"
    top["algo"] = algo
    return train_config_from_dict(top)


def distill_job(overrides: list[str], job_name: str = "") -> list[Any]:
    """Compose, convert and run one distillation job; return ``[run_dir, final eval return, env steps]``."""
    composed = compose_config("distill", overrides)
    if composed.get("resume"):
        cfg = train_config_from_dict(_resumed_config(str(composed["resume"]), overrides))
    else:
        if job_name:
            composed["run_dir"] = str(Path(str(composed["run_dir"])) / job_name)
        cfg = distill_config(composed)
    summary = distill(cfg)
    return [cfg.run_dir, summary.get("final_eval_return", math.nan), summary.get("env_steps", 0)]


def distill(cfg: TrainConfig) -> dict[str, Any]:
    """Load the teacher, build the envs and the student, train (or resume); print and return the summary."""
    if cfg.torch_threads is not None:
        torch.set_num_threads(cfg.torch_threads)
    teacher = load_teacher(str(cfg.algo.teacher), device=cfg.device)
    try:
        env = build_env(cfg, cfg.num_envs, cfg.seed)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    # Evaluation without the task's curriculum (its declared values are the task), as `train` does.
    eval_env = (build_env(cfg, cfg.eval_num_envs, cfg.seed + EVAL_SEED_OFFSET, evaluation=True)
                if cfg.eval_num_envs else None)
    try:
        agent = build_agent(cfg, env)
        runner = DistillRunner(env, agent, cfg.runner, cfg.run_dir, teacher=teacher, eval_env=eval_env,
                               config=train_config_to_dict(cfg))
        print(f"{'resuming' if cfg.resume else 'distilling'} {cfg.algo.teacher} into a {cfg.algo.mode} student "
              f"reading {cfg.algo.student_obs_group!r} on {cfg.task} in {cfg.run_dir}")
        summary = runner.learn(resume=cfg.resume is not None)
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()
    teacher_return = summary.get("teacher_eval_return", math.nan)
    print(f"done: {summary['env_steps']} env steps in {summary['wall_time_s']:.1f} s, student eval return "
          f"{summary['final_eval_return']:.1f}, teacher {teacher_return:.1f} on the same worlds ({cfg.run_dir})")
    return summary


def _help() -> str:
    """Usage, the modes and the default config."""
    import importlib.resources

    raw = (importlib.resources.files("robolearn.configs") / "distill.yaml").read_text()
    return (f"usage: {USAGE}\n\nmodes: dagger (the student's rollouts, beta-mixed with the teacher's actions, "
            "labelled by the teacher), aacd (RL against the teacher's privileged critic plus behaviour cloning)\n"
            f"algo.*: robolearn/algos/distill/config.py (DistillConfig)\n\ndefaults (robolearn.configs/distill.yaml):\n{raw}")


def main() -> int:  # pragma: no cover - ``python -m robolearn.cli.distill``
    """Entry point for ``python -m robolearn.cli.distill``."""
    return distill_command(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
