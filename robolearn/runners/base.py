"""What every training runner shares: the run directory, the loop, evaluation, logging, the
divergence guards, checkpoints and the summary.

A runner owns the loop, the clock, evaluation, logging and checkpoints (DESIGN.md, "Algorithm");
the algorithm only answers its verbs. Environments are used through the ``VecEnv`` contract plus
``state_dict``/``load_state_dict`` and two optional methods, ``policy_spec()`` and ``render()``,
so no runner imports env code. A checkpoint holds the agent, the envs, the global RNGs and the
counters, so a run killed at any point resumes from its last checkpoint and continues exactly as
the uninterrupted run would have. Subclasses define one iteration (collect, then update) and the
unit their steps count in: environment steps (online) or gradient steps (offline), which names
the step column of ``metrics.csv``, the summary's counter and the progress bar.

Order of a run, so that nothing is lost: every setting is checked first (the video camera by
rendering one frame); then the run directory is locked and checked (a new run never writes over
another one, a resume must fit the run and its checkpoint before anything is written); the loop
runs; at the end the final checkpoint and ``summary.json`` are written before the optional video
and plot, whose failure is logged, never fatal.

Data-parallel (:mod:`robolearn.runners.distributed`, one process per rank under torchrun): every
rank runs this loop on its own worlds with one learner kept identical by the gradient all-reduce.
Rank 0 alone locks, checks and writes the run (logs, evaluation, checkpoints, summary); every
other rank writes only its shard, ``ranks/<rank>/checkpoints`` (its envs, replay, RNGs), and an
iteration counts the steps of all ranks. Decisions that change the control flow are taken
together (one collective each): whether an update is kept or undone, a divergence stop, a Ctrl-C
stop, so no rank leaves the loop while the others wait in a collective.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import logging
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TypeVar

import numpy as np
import torch

from robolearn.logging import Logger, plot_learning_curve, write_mp4
from robolearn.runners import distributed
from robolearn.runners.checkpoint import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from robolearn.runners.rollout import VideoSpec, rollout
from robolearn.runners.rundir import (
    RANKS_FOLDER,
    RunDirError,
    RunLock,
    check_new_run,
    check_resume_config,
    check_resume_spec,
    write_json,
)
from robolearn.runners.runner_config import RunnerConfig
from robolearn.types import Scheduled
from robolearn.utils.config import ConfigError

__all__ = ["BaseRunner", "RunInterrupted", "RunnerConfig", "TrainingDiverged"]

log = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """Too many updates in a row produced non-finite numbers, or the physics diverged in most worlds."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run at an iteration boundary, after saving a checkpoint."""

    def __init__(self, message: str, checkpoint: Path | None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint
        """The checkpoint the run can be resumed from (``None`` if there is none)."""


_T = TypeVar("_T")


class BaseRunner:
    """The shared loop; a subclass implements :meth:`_iterate` and :meth:`_iteration_length`."""

    unit: str = "env_steps"
    """What a step is (``env_steps``: worlds x control steps; ``grad_steps`` offline): the name of
    the step column in ``metrics.csv``, of the summary's counter and of the progress bar's unit."""
    times_updates: bool = False
    """Whether :meth:`_iterate` times its updates (:meth:`_timed_update`): then ``metrics.csv`` has
    ``time/update_s`` and the summary ``update_time_s``, the profile of the training seconds."""

    def __init__(
        self,
        env: Any | None,
        agent: Any,
        cfg: RunnerConfig,
        run_dir: str | os.PathLike[str],
        *,
        eval_env: Any | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Remember what to run; nothing is written until :meth:`learn`.

        Args:
            env: the training env (``None`` for a runner that learns from data only).
            agent: the learner (DESIGN.md, "Algorithm").
            cfg: loop settings.
            run_dir: where the run is written.
            eval_env: the env evaluations run in (``None``: no evaluation).
            config: the run's resolved config, written as ``config.json`` and compared on resume.
        """
        if not isinstance(cfg, RunnerConfig):
            raise TypeError(f"cfg: expected a RunnerConfig, got {type(cfg).__name__}")
        self.env, self.agent, self.cfg = env, agent, cfg
        self.dist = distributed.context()
        """This process's rank in data-parallel training (``None``: a single process)."""
        self.world_size = 1 if self.dist is None else self.dist.world_size
        """Processes training together; an iteration's steps count all of them."""
        self.is_main = self.dist is None or self.dist.is_main
        """Whether this process logs, evaluates and writes the run (rank 0, or the only process)."""
        self.eval_env = eval_env if self.is_main else None
        self.config = config
        self.run_dir = Path(run_dir)
        self.total_steps = self._total_steps()
        """Length of the run in :attr:`unit`."""
        self.steps_per_iteration = self._iteration_length()
        """Steps (in :attr:`unit`) one iteration takes."""
        # Ranks other than 0 keep only their own shard (env, replay, RNGs) for an exact resume.
        self.shard_dir = None if self.is_main or self.dist is None else self.run_dir / RANKS_FOLDER / str(self.dist.rank)
        self.checkpoints = CheckpointManager(self.shard_dir or self.run_dir, keep=cfg.keep_checkpoints)
        self.update_idx = 0
        self.steps = 0
        """Steps taken so far, in :attr:`unit`."""
        self.train_time = 0.0
        """Seconds spent in iterations (collecting and updating), summed over resumes."""
        self.update_time = 0.0
        """The part of :attr:`train_time` spent in the agent's updates (runners that
        :attr:`times_updates`; the rest is acting, simulating and storing), summed over resumes."""
        self.total_time = 0.0
        """Seconds of the whole run before this session (evaluations, checkpoints, video included)."""
        self.best_eval = -math.inf
        self.last_eval = math.nan
        self.bad_updates = 0
        self.skipped_updates = 0
        self.num_diverged = 0
        """World-steps of the training env that diverged (the env's cumulative count)."""
        self._started = False  # this object has set up (or continued) the run directory
        self._video: tuple[list[np.ndarray], float] | None = None
        self._returns: list[torch.Tensor] = []
        self._lengths: list[torch.Tensor] = []
        self._successes: list[torch.Tensor] = []
        self._reset_divergence()

    # -- what a subclass defines ---------------------------------------------------------------
    def _total_steps(self) -> int:
        """Length of the run in :attr:`unit` (online: ``cfg.total_env_steps``)."""
        return int(self.cfg.total_env_steps)

    def _iteration_length(self) -> int:
        """Steps (in :attr:`unit`) of one iteration."""
        raise NotImplementedError

    def _iterate(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Collect ``steps_per_iteration`` env steps and learn from them; return the latest obs and stats."""
        raise NotImplementedError

    def _evaluate_now(self) -> bool:
        """Whether to evaluate after this iteration besides the schedule (a phase boundary)."""
        return False

    def _step_columns(self) -> dict[str, float]:
        """Extra columns of this iteration's ``metrics.csv`` row (the phase and its counters)."""
        return {}

    # -- the run -------------------------------------------------------------------------------
    def learn(self, resume: bool = False) -> dict[str, Any]:
        """Train until :attr:`total_steps`; resume from the newest readable checkpoint if asked.

        Returns the summary (also written as ``summary.json``).

        Raises:
            RunDirError: the directory holds another run, is locked by another writer, or the run
                to resume does not fit (nothing has been written then).
            TrainingDiverged: updates kept producing non-finite numbers, or the physics diverged
                in most worlds for ``divergence_patience`` steps.
            RunInterrupted: Ctrl-C; the run stopped after saving a checkpoint.
        """
        session_start = time.perf_counter()
        self._check_settings()
        if self.dist is not None:
            # Same initial learner on every rank, gradients averaged from the first backward on.
            distributed.attach(self.agent)
        with contextlib.ExitStack() as stack:
            interrupt = stack.enter_context(_Interrupt())
            if self.dist is None:
                stack.enter_context(RunLock(self.run_dir))
                self._open(resume)
            else:
                self._open_distributed(resume, stack)
            self._loop(interrupt, session_start)
            return self._finish(session_start)

    def _check_settings(self) -> None:
        """Settings used only at the end are tried now: one video frame with the run's size and camera."""
        if not (self.cfg.video and self.eval_env is not None):
            return
        width, height = self.cfg.video_size
        try:
            self.eval_env.render([0], width, height, camera=self.cfg.video_camera)
        except ValueError as exc:
            raise ConfigError(f"runner.video_camera / runner.video_size: {exc}") from None
        except Exception as exc:  # no GL context on a headless machine, a size the model's buffer refuses
            raise ConfigError(
                f"runner.video: rendering a {width}x{height} frame failed here ({exc}); set runner.video=false, "
                "or install EGL/OSMesa (MUJOCO_GL=egl or osmesa)"
            ) from None

    def _open(self, resume: bool, steps: set[int] | None = None) -> None:
        """Check the run directory (and for a resume, the run and its checkpoint), then write the run's files.

        ``steps``: on resume, the checkpoint steps allowed (those every rank of a distributed run has).
        """
        spec = self._policy_spec()
        if resume:
            check_resume_config(self.run_dir, self.config)
            check_resume_spec(self.run_dir, spec)
            self._restore(steps)
        elif not self._started:
            check_new_run(self.run_dir, self.cfg.overwrite)
        # Everything is known to fit: only now is anything of the run written.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            _truncate_metrics(self.run_dir / "metrics.csv", self.steps)
        if self.config is not None:
            write_json(self.run_dir / "config.json", self.config)
        if spec is not None:
            write_json(self.run_dir / "policy_spec.json", spec)
        self._started = True

    def _open_distributed(self, resume: bool, stack: contextlib.ExitStack) -> None:
        """:meth:`_open` on rank 0 (which alone locks and writes the run), then every other rank's shard.

        Rank 0's outcome is broadcast first, so a run directory it refuses stops every rank with
        its message; then each rank opens its shard (on resume: the checkpoint of rank 0's step)
        and the ranks agree that all succeeded before the learner is taken from rank 0.
        """
        error: Exception | None = None
        steps: set[int] | None = None
        if resume:
            # Ranks stopped while saving can leave rank 0 a checkpoint newer than another rank's
            # shard: the run resumes from the newest step every rank has a checkpoint of.
            mine = None if self.is_main else [_step_of(p) for p in self.checkpoints.checkpoints()]
            shards = [set(s) for s in distributed.gather_objects(mine) if s is not None]
            steps = set.intersection(*shards) if shards else None
        if self.is_main:
            try:
                stack.enter_context(RunLock(self.run_dir))
                self._open(resume, steps)
            except Exception as exc:  # told to the other ranks, then raised here as it is
                error = exc
        status = distributed.broadcast_object(None if error is None else f"{error}")
        if error is not None:
            raise error
        if status is not None:
            raise RunDirError(f"rank 0 could not open {self.run_dir}: {status}")
        step = distributed.broadcast_object(self.steps)
        message = None
        if not self.is_main:
            try:
                self._open_shard(resume, int(step))
            except (RunDirError, CheckpointError, OSError) as exc:
                error, message = exc, f"rank {self.dist.rank if self.dist else 0}: {exc}"
        failures = [m for m in distributed.gather_objects(message) if m is not None]
        if error is not None:
            raise error
        if failures:
            raise RunDirError(f"resume: {'; '.join(failures)}")
        if resume:
            distributed.sync_learner(self.agent)  # weights and optimiser state: rank 0's checkpoint's

    def _open_shard(self, resume: bool, step: int) -> None:
        """A rank's own state besides rank 0's: on resume its shard checkpoint of ``step``; on a new run, none."""
        assert self.shard_dir is not None
        if not resume:
            if self.shard_dir.exists():  # a shard left on this node by an earlier run in this folder
                shutil.rmtree(self.shard_dir)
            return
        path = self.checkpoints.path_for(step)
        if not path.is_file():
            raise RunDirError(
                f"no checkpoint of step {step} in {self.checkpoints.dir}; a distributed run resumes with the "
                "processes it was trained with (same world size) and its ranks/ folders"
            )
        try:
            self._load_state(load_checkpoint(path))
        except (KeyError, ValueError, RuntimeError, TypeError, IndexError) as exc:
            raise RunDirError(f"checkpoint {path} does not fit this run: {exc}") from None

    def _policy_spec(self) -> dict[str, Any] | None:
        source = self.env if self.env is not None else self.eval_env
        return source.policy_spec() if hasattr(source, "policy_spec") else None

    def _loop(self, interrupt: _Interrupt, session_start: float) -> None:
        cfg = self.cfg
        self.total_steps = self._total_steps()  # read again: the config may have grown since __init__
        logger: Logger | _NullLogger = (
            Logger(self.run_dir, console=cfg.console, tensorboard=cfg.tensorboard, total=self.total_steps, unit=self.unit)
            if self.is_main
            else _NullLogger()
        )
        self._returns, self._lengths, self._successes = [], [], []
        obs = self.env.obs if self.env is not None else {}
        try:
            # The run ends at the first iteration boundary at or past total_steps; a subclass whose
            # iterations differ in length (offline-to-online phases) sets steps_per_iteration in
            # _iterate to what that iteration took.
            while self.steps < self.total_steps:
                start = time.perf_counter()
                if isinstance(self.agent, Scheduled):  # e.g. PPO's linear learning-rate schedule
                    self.agent.set_progress(self.steps / self.total_steps)
                obs, stats = self._iterate(obs)
                self.update_idx += 1
                self.steps += self.steps_per_iteration
                self.train_time += time.perf_counter() - start
                last = self.steps >= self.total_steps
                metrics = self._train_metrics(stats)
                if self.eval_env is not None and (
                    last or self.update_idx % cfg.eval_interval == 0 or self._evaluate_now()
                ):
                    metrics.update(self.evaluate(video=last and cfg.video))
                metrics.update(self._step_columns())
                metrics[self.unit] = float(self.steps)
                metrics["train/skipped_updates"] = float(self.skipped_updates)
                metrics[f"time/{self.unit}_per_s"] = self.steps / max(self.train_time, 1e-9)
                # Training seconds so far (evaluations, checkpoints and logging left out; carried over
                # a resume): the x axis of wall-clock-to-threshold comparisons (robolearn.benchmark).
                metrics["time/train_s"] = self.train_time
                if self.times_updates:
                    # The profile of the training seconds: update vs collection (robolearn.benchmark's report).
                    metrics["time/update_s"] = self.update_time
                logger.log(metrics, step=self.steps)
                if self.dist is not None:
                    self._agree(interrupt)
                self._check_divergence()
                # No checkpoint inside a streak of skipped updates: the last one stays before the trouble.
                saved = self.bad_updates == 0 and (last or self.update_idx % cfg.checkpoint_interval == 0)
                if saved:
                    self._checkpoint(session_start)
                if interrupt.requested:
                    if self.bad_updates == 0 and not saved:
                        self._checkpoint(session_start)
                    latest = self.checkpoints.latest()
                    raise RunInterrupted(
                        f"interrupted at {self.steps} {self.unit}; the last checkpoint is {latest}", latest
                    )
        finally:
            logger.close()

    def _agree(self, interrupt: _Interrupt) -> None:
        """Make the ranks take the same branch (one collective): the worst divergence streak and
        a stop request of any rank count for all, so no rank stops while the others wait for it.
        """
        worst, requested = distributed.all_max([int(self._worst_streak), int(interrupt.requested)])
        self._worst_streak = torch.full_like(self._worst_streak, worst)
        interrupt.requested = bool(requested)

    def _train_metrics(self, stats: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The iteration's update stats, finished-episode statistics and divergence counts (tensors: no sync here)."""
        metrics: dict[str, Any] = {f"train/{k}": v for k, v in stats.items()}
        if self._returns:
            metrics["train/return"] = torch.cat(self._returns).double().mean()
            metrics["train/episode_length"] = torch.cat(self._lengths).double().mean()
            if self._successes:
                metrics["train/success_rate"] = torch.cat(self._successes).double().mean()
            self._returns, self._lengths, self._successes = [], [], []
        if self.env is not None:
            metrics["train/diverged"] = self._diverged
            metrics["train/num_diverged"] = float(self.num_diverged)
            self._diverged = torch.zeros_like(self._diverged)
        # The env's curriculum values as they stand at the iteration's end (0-d tensors).
        for name, value in getattr(self, "_curriculum", {}).items():
            metrics[f"curriculum/{name}"] = value
        return metrics

    def _record(self, info: dict[str, Any]) -> None:
        """Keep what a training step reports: finished episodes, diverged worlds (tensor ops, no host sync)."""
        if "episode" in info:
            self._returns.append(info["episode"]["return"])
            self._lengths.append(info["episode"]["length"])
            if "success" in info["episode"]:
                self._successes.append(info["episode"]["success"])
        diverged = info.get("diverged")
        if diverged is not None:
            if self._streak.device != diverged.device:  # once: the counters live where the env's tensors do
                self._reset_divergence(diverged.device)
            self._diverged = self._diverged + diverged.sum()
            most = diverged.double().mean() > self.cfg.divergence_fraction
            self._streak = torch.where(most, self._streak + 1, torch.zeros_like(self._streak))
            self._worst_streak = torch.maximum(self._worst_streak, self._streak)
        if "num_diverged" in info:
            self.num_diverged = int(info["num_diverged"])
        if "curriculum" in info:  # the latest values; the env replaces the dict, never edits it
            self._curriculum = info["curriculum"]

    def _reset_divergence(self, device: torch.device | str = "cpu") -> None:
        self._diverged = torch.zeros((), dtype=torch.long, device=device)
        self._streak = torch.zeros((), dtype=torch.long, device=device)
        self._worst_streak = torch.zeros((), dtype=torch.long, device=device)

    def _check_divergence(self) -> None:
        """Stop when most worlds diverged for ``divergence_patience`` consecutive control steps."""
        worst = int(self._worst_streak)
        self._worst_streak = torch.zeros_like(self._worst_streak)
        if worst >= self.cfg.divergence_patience:
            raise TrainingDiverged(
                f"the physics diverged in more than {self.cfg.divergence_fraction:.0%} of the worlds for {worst} "
                f"consecutive control steps (runner.divergence_patience={self.cfg.divergence_patience}) at "
                f"{self.steps} {self.unit}; check the timestep and the model parameters. metrics.csv has "
                "train/diverged per iteration"
            )

    # -- the divergence guard of the updates ---------------------------------------------------
    def _guarded(self, update: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Run ``update``; undo it when it produced non-finite numbers; too many in a row stop the run.

        The snapshot is the agent's ``learned_state_dict()`` where it has one, which leaves out a
        replay buffer: data, not learned state, and too large to copy every iteration. The check
        covers the update's stats and every tensor of ``agent.parameters()``.
        """
        learned = getattr(self.agent, "learned_state_dict", self.agent.state_dict)
        snapshot = copy.deepcopy(learned())
        stats = update()
        # An agent without parameters() is checked on every float tensor of its learned state.
        params = _parameters(self.agent) or _float_tensors(learned())
        finite = _all_finite([*stats.values(), *params])
        if self.dist is not None:
            finite = distributed.all_true(finite)  # every rank keeps, or every rank undoes, the update
        if finite:
            self.bad_updates = 0
            return stats
        self.agent.load_state_dict(snapshot)  # an agent keeps its replay buffer when the state has none
        self.bad_updates += 1
        self.skipped_updates += 1
        log.warning("update %d produced non-finite values; skipped (%d in a row)", self.update_idx, self.bad_updates)
        if self.bad_updates >= self.cfg.max_bad_updates:
            raise TrainingDiverged(
                f"{self.bad_updates} consecutive updates produced NaN/inf losses or parameters; stopping. "
                f"The last good checkpoint is {self.checkpoints.latest()}"
            )
        return {k: torch.zeros(()) for k in stats}

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, video: bool = False) -> dict[str, float]:
        """Deterministic evaluation: one episode per eval world (the first each world ends).

        Returns the mean and spread of the returns, the mean episode length, the diverged
        world-steps and, where the task defines success, the success rate of those episodes.
        With ``video``, world 0's episode is filmed; the file is written at the end of the run.
        """
        env = self.eval_env
        width, height = self.cfg.video_size
        result = rollout(
            env,
            self.agent.act_inference,
            seed=env.seed,  # the same start states at every evaluation
            max_steps=self.cfg.eval_steps,
            video=VideoSpec(width, height, self.cfg.video_camera) if video else None,
            inference=False,  # the eval env lives on (and is checkpointed, restored in place)
        )
        if result.frames:
            self._video = (result.frames, 1.0 / env.dt)
        out = result.summary("eval/")
        out["eval/diverged"] = float(result.diverged)
        self.last_eval = out["eval/return"]
        self.best_eval = max(self.best_eval, self.last_eval)
        return out

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self, session_start: float | None = None) -> dict[str, Any]:
        """Agent, envs, RNGs and counters."""
        elapsed = 0.0 if session_start is None else time.perf_counter() - session_start
        state = {
            "agent": self.agent.state_dict(),
            "rng": rng_state(),
            "counters": {
                "unit": self.unit,
                "update_idx": self.update_idx,
                "steps": self.steps,
                "train_time": self.train_time,
                "update_time": self.update_time,
                "total_time": self.total_time + elapsed,
                "best_eval": self.best_eval,
                "last_eval": self.last_eval,
                "skipped_updates": self.skipped_updates,
                "num_diverged": self.num_diverged,
                "world_size": self.world_size,
            },
        }
        if self.env is not None:
            state["env"] = self.env.state_dict()
        if self.eval_env is not None:
            state["eval_env"] = self.eval_env.state_dict()
        return state

    def _checkpoint(self, session_start: float | None = None) -> None:
        self.checkpoints.save(self.state_dict(session_start), step=self.steps)

    def _restore(self, steps: set[int] | None = None) -> None:
        """Load the newest readable checkpoint into the agent, envs, RNGs and counters.

        ``steps``: only checkpoints of these steps qualify (a distributed run: those every rank has).

        Raises:
            RunDirError: no checkpoint, none readable, or one that does not fit this run.
        """
        try:
            found = self.checkpoints.load_newest_readable() if steps is None else self._newest_readable_of(steps)
        except CheckpointError as exc:
            raise RunDirError(f"resume: {exc}") from None
        if found is None:
            raise RunDirError(f"resume: no checkpoint in {self.checkpoints.dir}")
        path, state = found
        trained_by = int(state.get("counters", {}).get("world_size", 1))
        if trained_by != self.world_size:
            raise RunDirError(
                f"resume: checkpoint {path} was trained by {trained_by} process(es), this run has {self.world_size}; "
                f"resume it with the same number of processes ({'distributed=true under torchrun' if trained_by > 1 else 'without distributed=true'})"
            )
        try:
            self._load_state(state)
        except (KeyError, ValueError, RuntimeError, TypeError, IndexError) as exc:
            raise RunDirError(f"resume: checkpoint {path} does not fit this run: {exc}") from None
        log.info("resumed %s from %s at iteration %d (%d %s)", self.run_dir, path.name, self.update_idx, self.steps, self.unit)

    def _newest_readable_of(self, steps: set[int]) -> tuple[Path, dict[str, Any]] | None:
        """``(path, state)`` of the newest readable checkpoint whose step is in ``steps``.

        Raises:
            CheckpointError: there are checkpoints but none of ``steps`` loads (each named with its reason).
        """
        found = self.checkpoints.checkpoints()
        if not found:
            return None
        reasons = []
        for path in reversed(found):
            if _step_of(path) not in steps:
                reasons.append(f"{path.name}: not every rank has a checkpoint of its step")
                log.warning("%s: not every rank has a checkpoint of its step (stopped while saving?); "
                            "falling back to the next older checkpoint", path)
                continue
            try:
                return path, load_checkpoint(path)
            except CheckpointError as err:
                reasons.append(str(err))
                log.warning("%s; falling back to the next older checkpoint", err)
        raise CheckpointError(
            f"no checkpoint in {self.checkpoints.dir} that every rank can resume from "
            f"(the other ranks' shards under {RANKS_FOLDER}/ have steps {sorted(steps)}): " + "; ".join(reasons)
        )

    def _load_state(self, state: dict[str, Any]) -> None:
        """Put a checkpoint's state into the agent, the envs, the RNGs and the counters."""
        c = state["counters"]
        unit = c.get("unit", "env_steps")
        if unit != self.unit:
            raise ValueError(f"its steps count {unit}, this runner's count {self.unit}")
        self.agent.load_state_dict(state["agent"])
        if self.env is not None:
            self.env.load_state_dict(state["env"])
        if self.eval_env is not None and "eval_env" in state:
            self.eval_env.load_state_dict(state["eval_env"])
        set_rng_state(state["rng"])
        self.update_idx = int(c["update_idx"])
        self.steps = int(c.get("steps", c.get("env_steps", 0)))  # "env_steps": checkpoints of earlier versions
        self.train_time = float(c.get("train_time", c.get("wall_time", 0.0)))
        self.total_time = float(c.get("total_time", self.train_time))
        # Absent from checkpoints of earlier versions: the split of the seconds before is unknown, not
        # zero (as the SB3 run's collect_s); the report takes the split from rows that have one.
        self.update_time = float(c.get("update_time", math.nan))
        self.best_eval, self.last_eval = float(c["best_eval"]), float(c["last_eval"])
        self.skipped_updates = int(c["skipped_updates"])
        self.num_diverged = int(c.get("num_diverged", 0))

    # -- the end of the run --------------------------------------------------------------------
    def _summary(self, session_start: float) -> dict[str, Any]:
        """What ``summary.json`` holds; subclasses add their own entries."""
        summary: dict[str, Any] = {
            "final_eval_return": self.last_eval,
            "best_eval_return": self.best_eval if math.isfinite(self.best_eval) else math.nan,
            self.unit: self.steps,
            "updates": self.update_idx,
            "train_time_s": self.train_time,
            "wall_time_s": self.total_time + time.perf_counter() - session_start,
            f"{self.unit}_per_s": self.steps / max(self.train_time, 1e-9),
            "skipped_updates": self.skipped_updates,
            "num_diverged": self.num_diverged,
        }
        if self.times_updates:
            summary["update_time_s"] = self.update_time
        return summary

    def _timed_update(self, update: Callable[[], _T]) -> _T:
        """Call ``update`` and add its seconds to :attr:`update_time` (a CUDA update is timed as
        far as its kernels were queued: the split is exact on the CPU, indicative on a GPU).
        """
        start = time.perf_counter()
        try:
            return update()
        finally:
            self.update_time += time.perf_counter() - start

    def _finish(self, session_start: float) -> dict[str, Any]:
        """Write the summary (the checkpoint is already written), then the optional video and plot.

        Ranks other than 0 write nothing: they return their summary (their eval entries are NaN).
        """
        if not self.is_main:
            return self._summary(session_start)
        write_json(self.run_dir / "summary.json", self._summary(session_start))
        if self._video is not None:
            frames, fps = self._video
            self._video = None
            _optional("eval.mp4", lambda: write_mp4(self.run_dir / "eval.mp4", frames, fps=fps))
        _optional("learning_curve.png", self._plot)
        summary = self._summary(session_start)  # the total time now includes the video and the plot
        write_json(self.run_dir / "summary.json", summary)
        return summary

    def _plot(self) -> None:
        wanted = ("eval/return", "train/return") if self.eval_env is not None else ("train/return",)
        plot_learning_curve(self.run_dir / "metrics.csv", self.run_dir / "learning_curve.png", x=self.unit, y=wanted,
                            skip_missing=True)


class _NullLogger:
    """The logger of a rank other than 0: the run's metrics are rank 0's to write."""

    def log(self, metrics: Any, step: int) -> None:
        """Drop ``metrics``."""

    def close(self) -> None:
        """Nothing to close."""


class _Interrupt:
    """Turns the first Ctrl-C into a request to stop at the next iteration boundary (the loop then
    saves a checkpoint); a second Ctrl-C interrupts at once. Only in the main thread, where Python
    delivers signals.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("interrupted: stopping after this iteration, with a checkpoint (Ctrl-C again stops at once)")

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _optional(what: str, write: Callable[[], object]) -> None:
    """Write an optional output; a failure is logged (the run's results are already on disk)."""
    try:
        write()
    except Exception as exc:
        log.warning("no %s: %s", what, exc)


def _parameters(agent: Any) -> list[torch.Tensor]:
    """The agent's learnable tensors (``parameters()``, a method or, in older agents, a list)."""
    params = getattr(agent, "parameters", None)
    if callable(params):
        return list(params())
    return list(params or [])


def _float_tensors(state: Any) -> list[torch.Tensor]:
    """Every floating-point tensor in a nested state dict."""
    if isinstance(state, torch.Tensor):
        return [state] if state.is_floating_point() else []
    if isinstance(state, dict):
        return [t for v in state.values() for t in _float_tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in _float_tensors(v)]
    return []


def _all_finite(tensors: Iterable[torch.Tensor | float]) -> bool:
    """Whether every value is finite: one reduction and one host sync per device."""
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        t = torch.as_tensor(t)
        by_device.setdefault(t.device, []).append(torch.isfinite(t).all())
    return all(bool(torch.stack(flags).all()) for flags in by_device.values())


def _step_of(checkpoint: Path) -> int:
    """The step of a checkpoint file ``ckpt_<step>.pt`` (as :class:`CheckpointManager` names them)."""
    return int(checkpoint.stem.split("_", 1)[1])


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop rows logged after ``step`` (the run continues from there and logs them again)."""
    if not path.exists():
        return
    text = path.read_text()
    if not text.endswith("\n"):  # a row torn by the kill: drop it
        text = text[: text.rfind("\n") + 1]
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        return
    kept = [rows[0]] + [r for r in rows[1:] if len(r) == len(rows[0]) and float(r[0]) <= step]
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as fh:
        csv.writer(fh).writerows(kept)
    os.replace(tmp, path)
