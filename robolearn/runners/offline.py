"""The offline runner: gradient steps on a fixed dataset, evaluated in simulation as normalised scores.

One iteration is ``cfg.steps_per_iteration`` gradient steps, each on a batch drawn uniformly from
the dataset with the runner's own generator (so a resumed run draws the same batches). Learners
that want Monte-Carlo returns-to-go (Cal-QL: ``agent.needs_mc_return``) get them in
``batch.extras["mc_return"]``, computed once from the dataset. Evaluation, logging, checkpoints,
the NaN guard and the run directory are the shared ones of :class:`~robolearn.runners.base.BaseRunner`;
``summary.json`` adds ``normalized_score`` (D4RL's ``100 * (R - R_random) / (R_expert - R_random)``)
when reference returns are known.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from robolearn.logging import Logger, plot_learning_curve
from robolearn.runners.base import BaseRunner, RunnerConfig, _truncate_metrics, _write_json
from robolearn.runners.checkpoint import set_rng_state

log = logging.getLogger(__name__)


@dataclass
class ReferenceReturns:
    """Returns of a random and an expert policy on the task, for normalised scores."""

    random: float
    """Mean episode return of a uniformly random policy."""
    expert: float
    """Mean episode return of the expert (D4RL's reference or the collection's best policy)."""

    def normalize(self, value: float) -> float:
        """``100 * (value - random) / (expert - random)``."""
        return 100.0 * (value - self.random) / (self.expert - self.random)


class OfflineRunner(BaseRunner):
    """Trains an offline learner on a dataset; ``env`` is the evaluation env (no training env)."""

    def __init__(
        self,
        dataset: Any,
        agent: Any,
        cfg: RunnerConfig,
        run_dir: str | os.PathLike[str],
        *,
        eval_env: Any,
        total_grad_steps: int,
        batch_size: int = 256,
        seed: int = 0,
        gamma: float = 0.99,
        reference: ReferenceReturns | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Set up the run directory (as the online runners) around ``dataset`` and ``eval_env``.

        Args:
            dataset: a :class:`robolearn.data.Dataset` on the agent's device.
            agent: an offline learner (``update(batch)``, ``act_inference``, ``state_dict``).
            cfg: loop settings; ``steps_per_iteration`` counts gradient steps here.
            run_dir: where the run is written.
            eval_env: the batched env policies are evaluated in (also the policy spec's source).
            total_grad_steps: gradient steps of the run.
            batch_size: transitions per gradient step.
            seed: seeds the batch sampling generator.
            gamma: discount of the Monte-Carlo returns handed to learners that need them.
            reference: random/expert returns; the summary then has ``normalized_score``.
            config: the resolved config, written as ``config.json``.
        """
        if total_grad_steps < 1:
            raise ValueError(f"total_grad_steps: expected an integer >= 1, got {total_grad_steps}")
        self.dataset = dataset
        self.total_grad_steps = int(total_grad_steps)
        self.batch_size = int(batch_size)
        self.reference = reference
        self.generator = torch.Generator(device=dataset.device).manual_seed(seed)
        self.mc_return = dataset.returns_to_go(gamma) if getattr(agent, "needs_mc_return", False) else None
        super().__init__(eval_env, agent, cfg, run_dir, eval_env=eval_env, config=config)

    def _iteration_length(self) -> int:
        """Gradient steps per iteration."""
        return int(self.cfg.steps_per_iteration)

    def _iterate(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        def learn() -> dict[str, torch.Tensor]:
            stats: dict[str, torch.Tensor] = {}
            for _ in range(self.steps_per_iteration):
                idx = torch.randint(len(self.dataset), (self.batch_size,), generator=self.generator, device=self.dataset.device)
                batch = self.dataset.gather(idx)
                if self.mc_return is not None:
                    batch.extras["mc_return"] = self.mc_return[idx]
                stats = self.agent.update(batch)
            return stats

        return obs, self._guarded(learn)

    def learn(self, resume: bool = False) -> dict[str, Any]:
        """Run ``total_grad_steps`` gradient steps (resuming if asked); return the summary."""
        if resume:
            self._restore()
        cfg = self.cfg
        total = math.ceil(self.total_grad_steps / self.steps_per_iteration)
        logger = Logger(self.run_dir, console=cfg.console, tensorboard=cfg.tensorboard, total=self.total_grad_steps)
        try:
            while self.update_idx < total:
                start = time.perf_counter()
                _, stats = self._iterate({})
                self.update_idx += 1
                self.env_steps += self.steps_per_iteration  # gradient steps, in the shared counter
                self.wall_time += time.perf_counter() - start
                metrics: dict[str, Any] = {f"train/{k}": v for k, v in stats.items()}
                last = self.update_idx == total
                if last or self.update_idx % cfg.eval_interval == 0:
                    metrics.update(self.evaluate(video=last and cfg.video))
                    if self.reference is not None:
                        metrics["eval/normalized_score"] = self.reference.normalize(self.last_eval)
                metrics["grad_steps"] = float(self.env_steps)
                metrics["train/skipped_updates"] = float(self.skipped_updates)
                metrics["time/grad_steps_per_s"] = self.env_steps / max(self.wall_time, 1e-9)
                logger.log(metrics, step=self.env_steps)
                logger.progress(self.env_steps)
                if self.bad_updates == 0 and (last or self.update_idx % cfg.checkpoint_interval == 0):
                    self._checkpoint()
        finally:
            logger.close()
        return self._finish()

    def state_dict(self) -> dict[str, Any]:
        """Agent, sampling generator, RNGs and counters (the dataset is data, re-read on resume)."""
        state = super().state_dict()
        state.pop("env", None)  # the eval env is re-seeded at every evaluation
        state["sampler"] = self.generator.get_state()
        return state

    def _restore(self) -> None:
        state = self.checkpoints.load_latest()
        if state is None:
            raise FileNotFoundError(f"resume: no checkpoint in {self.run_dir / 'checkpoints'}")
        self.agent.load_state_dict(state["agent"])
        set_rng_state(state["rng"])
        self.generator.set_state(state["sampler"])
        c = state["counters"]
        self.update_idx, self.env_steps = int(c["update_idx"]), int(c["env_steps"])
        self.wall_time, self.best_eval, self.last_eval = float(c["wall_time"]), float(c["best_eval"]), float(c["last_eval"])
        self.skipped_updates = int(c["skipped_updates"])
        _truncate_metrics(self.run_dir / "metrics.csv", self.env_steps)
        log.info("resumed %s at gradient step %d", self.run_dir, self.env_steps)

    def _finish(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "final_eval_return": self.last_eval,
            "best_eval_return": self.best_eval if math.isfinite(self.best_eval) else math.nan,
            "grad_steps": self.env_steps,
            "updates": self.update_idx,
            "wall_time_s": self.wall_time,
            "grad_steps_per_s": self.env_steps / max(self.wall_time, 1e-9),
            "skipped_updates": self.skipped_updates,
            "dataset_transitions": len(self.dataset),
        }
        if self.reference is not None:
            summary["normalized_score"] = self.reference.normalize(self.last_eval)
            summary["best_normalized_score"] = self.reference.normalize(self.best_eval)
            summary["reference_returns"] = {"random": self.reference.random, "expert": self.reference.expert}
        _write_json(self.run_dir / "summary.json", summary)
        try:
            plot_learning_curve(self.run_dir / "metrics.csv", self.run_dir / "learning_curve.png", x="grad_steps", y=("eval/return",))
        except ValueError as err:  # too short a run to have those columns
            log.warning("no learning curve: %s", err)
        return summary
