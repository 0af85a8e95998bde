"""What every training runner shares: the run directory, the loop skeleton, evaluation,
logging, the NaN guard, checkpoints and the summary.

A runner owns the loop, the clock, evaluation, logging and checkpoints (DESIGN.md, "Algorithm");
the algorithm only answers its verbs. Environments are used through the ``VecEnv`` contract plus
``state_dict``/``load_state_dict`` and two optional methods, ``policy_spec()`` and ``render()``,
so no runner imports env code. A checkpoint holds the agent, the envs, the global RNGs and the
counters, so a run killed at any point resumes from its last checkpoint and continues exactly as
the uninterrupted run would have. Subclasses define one iteration (collect, then update).
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from robolearn.logging import Logger, plot_learning_curve, write_mp4
from robolearn.runners.checkpoint import CheckpointManager, rng_state, set_rng_state
from robolearn.runners.rollout import VideoSpec, rollout

log = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """Too many updates in a row produced non-finite losses or parameters."""


@dataclass
class RunnerConfig:
    """Loop settings shared by the training runners."""

    total_env_steps: int = 1_000_000
    """Stop after this many environment steps (worlds x control steps)."""
    eval_interval: int = 20
    """Updates between evaluations; the run also evaluates once at the end."""
    eval_steps: int | None = None
    """Control steps of an evaluation episode; ``None``: the eval env's episode length."""
    checkpoint_interval: int = 20
    """Updates between checkpoints; the run also checkpoints at the end."""
    keep_checkpoints: int = 3
    """Checkpoints kept on disk (older ones are pruned)."""
    video: bool = True
    """Record world 0 of the final evaluation as ``eval.mp4`` (needs offscreen GL)."""
    video_size: tuple[int, int] = (320, 240)
    """Width and height of the evaluation video."""
    video_camera: str | int = -1
    """Camera of the video: a name in the model, or -1 for the free camera."""
    steps_per_iteration: int = 50
    """Off-policy runners: control steps of every world between two log/eval/checkpoint points."""
    max_bad_updates: int = 5
    """Stop after this many consecutive updates with non-finite losses or parameters."""
    console: bool = True
    """Show a progress bar."""
    tensorboard: bool = True
    """Write TensorBoard events."""


class BaseRunner:
    """The shared loop; a subclass implements :meth:`_iterate` and :meth:`_iteration_length`."""

    def __init__(
        self,
        env: Any,
        agent: Any,
        cfg: RunnerConfig,
        run_dir: str | os.PathLike[str],
        *,
        eval_env: Any | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Set up the run directory: ``config.json``, ``policy_spec.json``, logs and checkpoints."""
        self.env, self.agent, self.cfg = env, agent, cfg
        self.eval_env = eval_env
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.steps_per_iteration = self._iteration_length()
        """Environment steps (worlds x control steps) one iteration takes."""
        self.checkpoints = CheckpointManager(self.run_dir, keep=cfg.keep_checkpoints)
        self.update_idx = 0
        self.env_steps = 0
        self.wall_time = 0.0
        self.best_eval = -math.inf
        self.last_eval = math.nan
        self.bad_updates = 0
        self.skipped_updates = 0
        if config is not None:
            _write_json(self.run_dir / "config.json", config)
        if hasattr(env, "policy_spec"):
            _write_json(self.run_dir / "policy_spec.json", env.policy_spec())

    # -- the loop ----------------------------------------------------------------------------
    def learn(self, resume: bool = False) -> dict[str, Any]:
        """Train until ``total_env_steps``; resume from the latest checkpoint if asked. Returns the summary."""
        if resume:
            self._restore()
        cfg = self.cfg
        total_updates = math.ceil(cfg.total_env_steps / self.steps_per_iteration)
        logger = Logger(
            self.run_dir, console=cfg.console, tensorboard=cfg.tensorboard, total=cfg.total_env_steps
        )
        self._returns: list[torch.Tensor] = []
        self._lengths: list[torch.Tensor] = []
        self._successes: list[torch.Tensor] = []
        obs = self.env.obs
        try:
            while self.update_idx < total_updates:
                start = time.perf_counter()
                obs, stats = self._iterate(obs)
                self.update_idx += 1
                self.env_steps += self.steps_per_iteration
                self.wall_time += time.perf_counter() - start
                metrics = {f"train/{k}": v for k, v in stats.items()}
                if self._returns:
                    metrics["train/return"] = torch.cat(self._returns).double().mean()
                    metrics["train/episode_length"] = torch.cat(self._lengths).double().mean()
                    if self._successes:
                        metrics["train/success_rate"] = torch.cat(self._successes).double().mean()
                    self._returns, self._lengths, self._successes = [], [], []
                last = self.update_idx == total_updates
                if self.eval_env is not None and (last or self.update_idx % cfg.eval_interval == 0):
                    metrics.update(self.evaluate(video=last and cfg.video))
                metrics["env_steps"] = float(self.env_steps)
                metrics["train/skipped_updates"] = float(self.skipped_updates)
                metrics["time/env_steps_per_s"] = self.env_steps / max(self.wall_time, 1e-9)
                logger.log(metrics, step=self.env_steps)
                logger.progress(self.env_steps)
                # No checkpoint inside a streak of skipped updates: the last one stays before the trouble.
                if self.bad_updates == 0 and (last or self.update_idx % cfg.checkpoint_interval == 0):
                    self._checkpoint()
        finally:
            logger.close()
        return self._finish()

    def _iteration_length(self) -> int:
        """Environment steps (worlds x control steps) of one iteration."""
        raise NotImplementedError

    def _iterate(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Collect ``steps_per_iteration`` env steps and learn from them; return the latest obs and stats."""
        raise NotImplementedError

    def _record_episodes(self, info: dict[str, Any]) -> None:
        """Keep the returns, lengths and successes of the episodes that ended this step (no host sync)."""
        if "episode" in info:
            self._returns.append(info["episode"]["return"])
            self._lengths.append(info["episode"]["length"])
            if "success" in info["episode"]:
                self._successes.append(info["episode"]["success"])

    def _guarded(self, update: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Run ``update``; undo it when it produced non-finite numbers; too many in a row stop the run.

        The snapshot is the agent's ``learned_state_dict()`` where it has one, which leaves out a
        replay buffer: data, not learned state, and too large to copy every iteration.
        """
        learned = getattr(self.agent, "learned_state_dict", self.agent.state_dict)
        snapshot = copy.deepcopy(learned())
        stats = update()
        finite = all(bool(torch.isfinite(v).all()) for v in stats.values())  # one host sync per update
        finite = finite and all(bool(torch.isfinite(p).all()) for p in _parameters(self.agent))
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

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(self, video: bool = False) -> dict[str, float]:
        """Deterministic evaluation: one episode per eval world (the first each world ends).

        Returns the mean and spread of the returns and, where the task defines success, the
        success rate of those episodes.
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
            write_mp4(self.run_dir / "eval.mp4", result.frames, fps=1.0 / env.dt)
        out = result.summary("eval/")
        self.last_eval = out["eval/return"]
        self.best_eval = max(self.best_eval, self.last_eval)
        return out

    # -- checkpoints and the end of the run --------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Agent, envs, RNGs and counters."""
        state = {
            "agent": self.agent.state_dict(),
            "env": self.env.state_dict(),
            "rng": rng_state(),
            "counters": {
                "update_idx": self.update_idx,
                "env_steps": self.env_steps,
                "wall_time": self.wall_time,
                "best_eval": self.best_eval,
                "last_eval": self.last_eval,
                "skipped_updates": self.skipped_updates,
            },
        }
        if self.eval_env is not None:
            state["eval_env"] = self.eval_env.state_dict()
        return state

    def _checkpoint(self) -> None:
        self.checkpoints.save(self.state_dict(), step=self.env_steps)

    def _restore(self) -> None:
        state = self.checkpoints.load_latest()
        if state is None:
            raise FileNotFoundError(f"resume: no checkpoint in {self.run_dir / 'checkpoints'}")
        self.agent.load_state_dict(state["agent"])
        self.env.load_state_dict(state["env"])
        if self.eval_env is not None and "eval_env" in state:
            self.eval_env.load_state_dict(state["eval_env"])
        set_rng_state(state["rng"])
        c = state["counters"]
        self.update_idx, self.env_steps = int(c["update_idx"]), int(c["env_steps"])
        self.wall_time, self.best_eval, self.last_eval = float(c["wall_time"]), float(c["best_eval"]), float(c["last_eval"])
        self.skipped_updates = int(c["skipped_updates"])
        _truncate_metrics(self.run_dir / "metrics.csv", self.env_steps)
        log.info("resumed %s at update %d (%d env steps)", self.run_dir, self.update_idx, self.env_steps)

    def _finish(self) -> dict[str, Any]:
        summary = {
            "final_eval_return": self.last_eval,
            "best_eval_return": self.best_eval if math.isfinite(self.best_eval) else math.nan,
            "env_steps": self.env_steps,
            "updates": self.update_idx,
            "wall_time_s": self.wall_time,
            "env_steps_per_s": self.env_steps / max(self.wall_time, 1e-9),
            "skipped_updates": self.skipped_updates,
        }
        _write_json(self.run_dir / "summary.json", summary)
        try:
            y = ("eval/return", "train/return") if self.eval_env is not None else ("train/return",)
            plot_learning_curve(self.run_dir / "metrics.csv", self.run_dir / "learning_curve.png", x="env_steps", y=y)
        except ValueError as err:  # too short a run to have those columns
            log.warning("no learning curve: %s", err)
        return summary


def _parameters(agent: Any) -> list[torch.Tensor]:
    params = getattr(agent, "parameters", None)
    if callable(params):
        return list(params())
    return list(params or [])


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default))
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Callable):  # type: ignore[arg-type]
        return getattr(value, "__qualname__", repr(value))
    return repr(value)


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
