"""The offline runner: gradient steps on a fixed dataset, evaluated in simulation as normalised scores.

One iteration is ``cfg.steps_per_iteration`` gradient steps, each on a batch drawn uniformly from
the dataset with the runner's own generator (so a resumed run draws the same batches). Learners
that want Monte-Carlo returns-to-go (Cal-QL: ``agent.needs_mc_return``) get them in
``batch.extras["mc_return"]``, computed once from the dataset. The loop, evaluation, logging,
checkpoints, resume, the NaN guard and the run directory are those of
:class:`~robolearn.runners.base.BaseRunner`, counting gradient steps instead of env steps;
``summary.json`` adds ``normalized_score`` (D4RL's ``100 * (R - R_random) / (R_expert - R_random)``)
when reference returns are known.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

from robolearn.data.sampler import DatasetSampler
from robolearn.logging import plot_learning_curve
from robolearn.runners.base import BaseRunner, RunnerConfig

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
    """Trains an offline learner on a dataset; there is no training env, only ``eval_env``.

    Its steps are gradient steps (:attr:`unit` ``grad_steps``): the step column of
    ``metrics.csv``, the summary's counter and the progress bar count them.
    """

    unit = "grad_steps"

    def __init__(
        self,
        dataset: Any,
        agent: Any,
        cfg: RunnerConfig,
        run_dir: str | os.PathLike[str],
        *,
        eval_env: Any,
        total_grad_steps: int,
        seed: int = 0,
        gamma: float = 0.99,
        reference: ReferenceReturns | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Set up the run (nothing is written until :meth:`learn`) around ``dataset`` and ``eval_env``.

        Args:
            dataset: a :class:`robolearn.data.Dataset` on the agent's device.
            agent: an offline learner; the runner sets its ``sampler`` to the dataset and calls
                ``update()`` (each draws ``agent.cfg.batch_size`` transitions).
            cfg: loop settings; ``steps_per_iteration`` counts gradient steps here.
            run_dir: where the run is written.
            eval_env: the batched env policies are evaluated in (also the policy spec's source).
            total_grad_steps: gradient steps of the run.
            seed: seeds the dataset sampler's generator.
            gamma: discount of the Monte-Carlo returns handed to learners that need them.
            reference: random/expert returns; the summary then has ``normalized_score``.
            config: the resolved config, written as ``config.json``.
        """
        if isinstance(total_grad_steps, bool) or not isinstance(total_grad_steps, int) or total_grad_steps < 1:
            raise ValueError(f"total_grad_steps: expected an integer >= 1, got {total_grad_steps!r}")
        if eval_env is None:
            raise ValueError("eval_env: an offline run evaluates in simulation and needs an eval env")
        self.dataset = dataset
        self.total_grad_steps = total_grad_steps
        self.reference = reference
        # Where the learner's batches come from (DESIGN.md, "Sampler"): uniform over the dataset,
        # with Monte-Carlo returns for learners that calibrate against them (Cal-QL).
        mc_gamma = gamma if getattr(agent, "needs_mc_return", False) else None
        agent.sampler = DatasetSampler(dataset, seed=seed, mc_return_gamma=mc_gamma)
        super().__init__(None, agent, cfg, run_dir, eval_env=eval_env, config=config)

    def _total_steps(self) -> int:
        """The run's gradient steps."""
        return self.total_grad_steps

    def _iteration_length(self) -> int:
        """Gradient steps per iteration."""
        return int(self.cfg.steps_per_iteration)

    def _iterate(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        def learn() -> dict[str, torch.Tensor]:
            stats: dict[str, torch.Tensor] = {}
            for _ in range(self.steps_per_iteration):
                stats = self.agent.update()
            return stats

        return obs, self._guarded(learn)

    def evaluate(self, video: bool = False) -> dict[str, float]:
        """:meth:`BaseRunner.evaluate`, plus the normalised score when reference returns are known."""
        out = super().evaluate(video)
        if self.reference is not None:
            out["eval/normalized_score"] = self.reference.normalize(self.last_eval)
        return out

    def _load_state(self, state: dict[str, Any]) -> None:
        super()._load_state(state)
        if "sampler" in state:  # checkpoints of robolearn 0.1 kept the sampling generator here
            self.agent.sampler.load_state_dict({"generator": state["sampler"]})

    def _summary(self, session_start: float) -> dict[str, Any]:
        summary = super()._summary(session_start)
        summary["dataset_transitions"] = len(self.dataset)
        if self.reference is not None:
            summary["normalized_score"] = self.reference.normalize(self.last_eval)
            summary["best_normalized_score"] = self.reference.normalize(self.best_eval)
            summary["reference_returns"] = {"random": self.reference.random, "expert": self.reference.expert}
        return summary

    def _plot(self) -> None:
        plot_learning_curve(self.run_dir / "metrics.csv", self.run_dir / "learning_curve.png", x=self.unit,
                            y=("eval/return",), skip_missing=True)
