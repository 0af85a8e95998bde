"""Offline-to-online training: an offline phase, an optional warm-up, an online phase, one run.

The three phases share one run directory, one ``metrics.csv`` and one checkpoint series:

1. **offline** — ``total_grad_steps`` gradient steps of the pre-training learner on the dataset
   (as :class:`~robolearn.runners.offline.OfflineRunner`), or none when the run starts from a
   pre-trained checkpoint (``o2o.checkpoint``) or from scratch (RLPD, SAC);
2. **warm-up** — ``o2o.warmup_steps`` env steps of the *frozen* policy (its exploring ``act``)
   into the empty online replay, with no update (WSRL: the transitions recalibrate the
   pre-trained critic to online data before the first online update);
3. **online** — ``total_env_steps`` minus the warm-up: act, store, ``update()`` every control
   step, batches from the online replay alone (``o2o.offline_ratio = 0``, WSRL: the offline data
   is dropped) or from a fixed mix of replay and dataset (RLPD's and Cal-QL's 50/50).

The online learner is the run's ``algo``. With ``o2o.pretrain`` another learner is pre-trained
and its networks move into ``algo`` at the first online step (Cal-QL -> SAC with the same critic
ensemble is WSRL); without it ``algo`` itself learns offline and carries on online (Cal-QL, IQL
fine-tuning). A learner that calibrates against Monte-Carlo returns (Cal-QL) gets them for its
online transitions too: each world's episode is held back until it ends, then stored with its
discounted return-to-go.

The step axis of ``metrics.csv`` (``steps``) counts offline gradient steps, then env steps; the
columns ``phase`` (0 offline, 1 warm-up, 2 online), ``offline/grad_steps`` and ``env_steps`` say
where each row belongs. ``summary.json`` adds the score at the end of each phase and the
collapse figure of WSRL's paper: the lowest evaluation over the first 10% of the online budget
after the warm-up.
"""

from __future__ import annotations

import gc
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from robolearn.data.sampler import DatasetSampler, MixedSampler, ReplaySampler
from robolearn.runners.base import BaseRunner, RunnerConfig
from robolearn.types import Transition
from robolearn.utils.config import ConfigError

log = logging.getLogger(__name__)

PHASES: tuple[str, ...] = ("offline", "warmup", "online")
"""The phases in order; ``metrics.csv``'s ``phase`` column holds the index."""

TRANSFERRED_KEYS: tuple[str, ...] = ("actor", "critic", "target_critic", "log_alpha")
"""What moves from the pre-training learner into the online one: the networks (of raw observations:
offline learners fold their normalisation into the first layer) and the temperature. The online
learner keeps its own fresh optimisers, learning rates and generator."""

EARLY_FRACTION = 0.1
"""The collapse figure is the lowest evaluation over this fraction of the online budget, right after
the warm-up (WSRL)."""


@dataclass
class O2OConfig:
    """The offline-to-online settings of a training run (``o2o:`` in the config)."""

    pretrain: Any = None
    """The pre-training learner: an algorithm section (``{name: calql, ...}``) whose networks move
    into ``algo`` after the offline phase (WSRL: Cal-QL -> SAC). ``None``: ``algo`` itself learns
    offline (when the run has an offline phase) and carries on online."""
    checkpoint: str | None = None
    """A finished offline run directory of the same task to start from instead of an offline phase
    (its newest readable checkpoint; its algorithm is the pre-training learner)."""
    warmup_steps: int = 5000
    """Env steps of the frozen pre-trained policy into the empty online replay before any online
    update (WSRL: 5,000); 0 skips the warm-up. They count towards ``total_env_steps``."""
    offline_ratio: float = 0.0
    """Fraction of every online batch drawn from the dataset: 0 drops the offline data after the
    offline phase (WSRL), 0.5 is RLPD's and Cal-QL's symmetric sampling, 1 learns from data only."""
    updates_per_step: int = 1
    """``agent.update()`` calls per online control step: the update-to-data ratio of the online
    phase for every learner (SAC's own ``utd_ratio`` multiplies it)."""
    offline_steps_per_iteration: int = 1000
    """Gradient steps per iteration of the offline phase (the online phase's iterations are
    ``runner.steps_per_iteration`` control steps)."""

    def __post_init__(self) -> None:
        """Check ranges; a bad value names its field."""
        r = self.offline_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= float(r) <= 1.0:
            raise ConfigError(f"o2o.offline_ratio: expected a fraction in [0, 1], got {r!r}")
        self.offline_ratio = float(r)
        for name, low in (("warmup_steps", 0), ("offline_steps_per_iteration", 1), ("updates_per_step", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"o2o.{name}: expected an integer >= {low}, got {value!r}")
        if self.pretrain is not None and self.checkpoint is not None:
            raise ConfigError(
                "o2o.checkpoint: the pre-training learner is the checkpoint's; remove o2o.pretrain "
                f"({self.pretrain!r}) or o2o.checkpoint ({self.checkpoint!r})"
            )


def transfer_state(learner: Any) -> dict[str, Any]:
    """The part of a pre-trained learner's state the online learner takes (:data:`TRANSFERRED_KEYS`)."""
    state = learner.learned_state_dict() if hasattr(learner, "learned_state_dict") else learner.state_dict()
    missing = [k for k in TRANSFERRED_KEYS if k not in state]
    if missing:
        raise ConfigError(f"o2o.pretrain: {type(learner).__name__} has no {missing} to hand to the online learner")
    return {k: state[k] for k in TRANSFERRED_KEYS}


class EpisodeReturns:
    """Holds each world's transitions until its episode ends, then stores them with their discounted
    return-to-go in ``extras["mc_return"]`` (Cal-QL's calibration target for online data).

    At a time-out the sum stops, as :meth:`robolearn.data.Dataset.returns_to_go` does for the data.
    """

    def __init__(self, num_envs: int, gamma: float) -> None:
        """``num_envs`` worlds, discount ``gamma``."""
        self.gamma = float(gamma)
        self.pending: list[list[dict[str, Any]]] = [[] for _ in range(int(num_envs))]

    def add(self, transition: Transition, store: Any, groups: Sequence[str] | None = None) -> None:
        """Hold one batched step (its observation ``groups``, default all); ``store(obs, action, reward,
        next_obs, terminated, truncated, extras)`` receives each finished episode.
        """
        keep = list(transition.obs) if groups is None else list(groups)
        done = (transition.terminated | transition.truncated).cpu().tolist()
        for w, ended in enumerate(done):
            self.pending[w].append({
                "obs": {g: transition.obs[g][w] for g in keep},
                "action": transition.action[w],
                "reward": transition.reward[w],
                "next_obs": {g: transition.next_obs[g][w] for g in keep},
                "terminated": transition.terminated[w],
                "truncated": transition.truncated[w],
            })
            if ended:
                self._flush(w, store)

    def _flush(self, w: int, store: Any) -> None:
        steps, self.pending[w] = self.pending[w], []
        rewards = torch.stack([s["reward"] for s in steps]).double()
        rtg = torch.empty_like(rewards)
        running = torch.zeros((), dtype=torch.float64, device=rewards.device)
        for t in range(len(steps) - 1, -1, -1):  # one episode, once: a plain backward sum
            running = rewards[t] + self.gamma * running
            rtg[t] = running
        groups = steps[0]["obs"]
        store(
            {g: torch.stack([s["obs"][g] for s in steps]) for g in groups},
            torch.stack([s["action"] for s in steps]),
            torch.stack([s["reward"] for s in steps]),
            {g: torch.stack([s["next_obs"][g] for s in steps]) for g in groups},
            torch.stack([s["terminated"] for s in steps]),
            torch.stack([s["truncated"] for s in steps]),
            {"mc_return": rtg.float()},
        )

    def state_dict(self) -> dict[str, Any]:
        """The unfinished episodes (a resumed run completes them)."""
        return {"gamma": self.gamma, "pending": [list(p) for p in self.pending]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.pending = [list(p) for p in state["pending"]]


class O2ORunner(BaseRunner):
    """Offline phase, warm-up and online phase in one run (see the module docstring)."""

    unit = "steps"

    def __init__(
        self,
        env: Any,
        agent: Any,
        cfg: RunnerConfig,
        run_dir: str | os.PathLike[str],
        *,
        o2o: O2OConfig,
        eval_env: Any,
        pretrained: Any = None,
        dataset: Any = None,
        offline_grad_steps: int = 0,
        seed: int = 0,
        gamma: float = 0.99,
        reference: Any = None,
        config: dict[str, Any] | None = None,
        pretrained_start: bool = False,
    ) -> None:
        """Set up the run (nothing is written until :meth:`learn`).

        Args:
            env: the training env of the warm-up and online phases.
            agent: the online learner (SAC, or an offline learner that carries on online).
            cfg: loop settings; ``total_env_steps`` is the online budget (warm-up included).
            run_dir: where the run is written.
            o2o: the phase settings.
            eval_env: the env of every evaluation.
            pretrained: the pre-training learner when it differs from ``agent`` (its networks move
                into ``agent`` after the offline phase); ``None``: ``agent`` learns offline itself.
            dataset: the offline data (needed for an offline phase or ``offline_ratio > 0``).
            offline_grad_steps: gradient steps of the offline phase (0: none).
            seed: seeds the dataset samplers.
            gamma: discount of Monte-Carlo returns for learners that calibrate against them.
            reference: random/expert returns (:class:`~robolearn.runners.offline.ReferenceReturns`).
            config: the resolved config, written as ``config.json``.
            pretrained_start: ``agent`` (or ``pretrained``) was loaded from a pre-trained checkpoint:
                it is evaluated before the first online step, as the run's offline score.
        """
        if isinstance(offline_grad_steps, bool) or not isinstance(offline_grad_steps, int) or offline_grad_steps < 0:
            raise ValueError(f"offline_grad_steps: expected an integer >= 0, got {offline_grad_steps!r}")
        if dataset is None and (offline_grad_steps > 0 or o2o.offline_ratio > 0):
            raise ConfigError("dataset: an offline phase or o2o.offline_ratio > 0 needs dataset=<file>")
        if pretrained is agent:
            pretrained = None
        self.o2o = o2o
        self.online_agent = agent
        self.pretrained = pretrained
        self.dataset = dataset
        self.offline_grad_steps = offline_grad_steps
        self.pretrained_start = bool(pretrained_start)
        self.reference = reference
        self.seed, self.gamma = int(seed), float(gamma)
        self.grad_steps = 0
        """Gradient steps of the offline phase taken so far."""
        self.env_steps = 0
        """Env steps (worlds x control steps) of the warm-up and online phases taken so far."""
        self.online_started = False
        """Whether the online learner has taken over (networks moved, online sampler set)."""
        self.scores: dict[str, dict[str, float]] = {}
        """The evaluation at the end of each phase (``offline``, ``warmup``) and of the run."""
        self.evals: list[dict[str, float]] = []
        """Every evaluation: its phase, counters, return and (where known) success rate."""
        self._boundary: str | None = None
        self._last_phase = "offline"
        self._episodes: EpisodeReturns | None = None
        first = pretrained if pretrained is not None else agent
        if dataset is not None and offline_grad_steps > 0:
            mc = gamma if getattr(first, "needs_mc_return", False) else None
            first.sampler = DatasetSampler(dataset, seed=seed, mc_return_gamma=mc)
        super().__init__(env, first, cfg, run_dir, eval_env=eval_env, config=config)

    # -- phases ---------------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        """The phase the next iteration belongs to."""
        if self.grad_steps < self.offline_grad_steps:
            return "offline"
        if self.env_steps < self.o2o.warmup_steps:
            return "warmup"
        return "online"

    def _total_steps(self) -> int:
        return self.offline_grad_steps + int(self.cfg.total_env_steps)

    def _iteration_length(self) -> int:
        if self.phase == "offline":
            return min(self.o2o.offline_steps_per_iteration, self.offline_grad_steps)
        return int(self.cfg.steps_per_iteration) * int(self.env.num_envs)

    def _start_online(self) -> None:
        """Hand over to the online learner: move the pre-trained networks, set the online sampler,
        and drop what the online phase no longer needs (the offline learner; the dataset when
        ``offline_ratio`` is 0).
        """
        if self.pretrained is not None:
            self.online_agent.load_state_dict(transfer_state(self.pretrained))
        self._use_online_agent()  # lets the pre-training learner go
        if self.pretrained_start and "offline" not in self.scores and self.eval_env is not None:
            # Started from a pre-trained checkpoint: its score is the offline score of this run.
            self._boundary, self._last_phase = "offline", "offline"
            self.evaluate()
            self._last_phase = self.phase
        gc.collect()
        log.info("online phase: %s learns from %s", type(self.agent).__name__, self._sampler_name())

    def _use_online_agent(self) -> None:
        agent = self.online_agent
        self.agent = agent
        self.pretrained = None
        replay = ReplaySampler(agent.replay, agent.generator)
        r = self.o2o.offline_ratio
        if r > 0.0:
            mc = self.gamma if getattr(agent, "needs_mc_return", False) else None
            data = DatasetSampler(self.dataset, seed=self.seed + 1, mc_return_gamma=mc)
            agent.sampler = data if r == 1.0 else MixedSampler([replay, data], [1.0 - r, r])
        else:
            agent.sampler = replay
            self.dataset = None  # WSRL keeps no offline data: let it be freed
        if getattr(agent, "needs_mc_return", False):
            self._episodes = EpisodeReturns(self.env.num_envs, self.gamma)
        self.online_started = True

    def _sampler_name(self) -> str:
        r = self.o2o.offline_ratio
        return "the online replay only" if r == 0 else f"online replay and dataset at {1 - r:g}:{r:g}"

    # -- one iteration --------------------------------------------------------------------------
    def _iterate(self, obs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        phase = self._last_phase = self.phase
        if phase == "offline":
            n = min(self.o2o.offline_steps_per_iteration, self.offline_grad_steps - self.grad_steps)

            def learn() -> dict[str, torch.Tensor]:
                stats: dict[str, torch.Tensor] = {}
                for _ in range(n):
                    stats = self.agent.update()
                return stats

            stats = self._guarded(learn)
            self.grad_steps += n
            self.steps_per_iteration = n
            if self.grad_steps >= self.offline_grad_steps:
                self._boundary = "offline"
            return obs, stats
        if not self.online_started:
            self._start_online()
        num_envs = int(self.env.num_envs)
        end = self.o2o.warmup_steps if phase == "warmup" else int(self.cfg.total_env_steps)
        control_steps = min(int(self.cfg.steps_per_iteration), math.ceil((end - self.env_steps) / num_envs))
        learn_online = phase == "online"

        def collect(learn: bool) -> dict[str, torch.Tensor]:
            nonlocal obs
            stats: dict[str, torch.Tensor] = {}
            for _ in range(control_steps):
                action = self.agent.act(obs)
                if not bool(torch.isfinite(action).all()):
                    break  # an update broke the actor: the guard restores it
                next_obs, reward, terminated, truncated, info = self.env.step(action)
                self._store(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
                self._record(info)
                obs = next_obs
                if learn:
                    for _ in range(self.o2o.updates_per_step):
                        stats = self.agent.update() or stats
            return stats

        # The warm-up only collects (the policy stays frozen); the online phase is guarded as the
        # off-policy runner's iterations are.
        stats = self._guarded(lambda: collect(True)) if learn_online else collect(False)
        taken = control_steps * num_envs
        self.env_steps += taken
        self.steps_per_iteration = taken
        if phase == "warmup" and self.env_steps >= self.o2o.warmup_steps:
            self._boundary = "warmup"
        return obs, stats

    def _store(self, transition: Transition) -> None:
        if self._episodes is None:
            self.agent.process(transition)
            return
        self._episodes.add(transition, self.agent.replay.add, self.agent_groups())

    def agent_groups(self) -> list[str]:
        """The observation groups the online learner stores (its actor's and critic's)."""
        groups = [self.agent.actor_group, getattr(self.agent, "critic_group", self.agent.actor_group)]
        return list(dict.fromkeys(groups))

    # -- evaluation and the step columns --------------------------------------------------------
    def _evaluate_now(self) -> bool:
        return self._boundary is not None

    def evaluate(self, video: bool = False) -> dict[str, float]:
        """:meth:`BaseRunner.evaluate` plus the normalised score; the end of a phase is remembered."""
        out = super().evaluate(video)
        if self.reference is not None:
            out["eval/normalized_score"] = self.reference.normalize(self.last_eval)
        record = {
            "phase": float(PHASES.index(self._last_phase)),
            "grad_steps": float(self.grad_steps),
            "env_steps": float(self.env_steps),
            "return": float(out["eval/return"]),
            "success_rate": float(out.get("eval/success_rate", math.nan)),
            "normalized_score": float(out.get("eval/normalized_score", math.nan)),
        }
        self.evals.append(record)
        if self._boundary is not None:
            self.scores[self._boundary] = record
            self._boundary = None
        return out

    def _step_columns(self) -> dict[str, float]:
        return {"phase": float(PHASES.index(self._last_phase)), "offline/grad_steps": float(self.grad_steps),
                "env_steps": float(self.env_steps)}

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self, session_start: float | None = None) -> dict[str, Any]:
        """:meth:`BaseRunner.state_dict` plus the phase counters, the held-back episodes and the evaluations."""
        state = super().state_dict(session_start)
        state["o2o"] = {
            "grad_steps": self.grad_steps,
            "env_steps": self.env_steps,
            "online_started": self.online_started,
            "scores": self.scores,
            "evals": self.evals,
            "episodes": None if self._episodes is None else self._episodes.state_dict(),
        }
        return state

    def _load_state(self, state: dict[str, Any]) -> None:
        o2o = state["o2o"]
        self.grad_steps, self.env_steps = int(o2o["grad_steps"]), int(o2o["env_steps"])
        if o2o["online_started"]:
            self._use_online_agent()  # the checkpoint's agent state is the online learner's
        super()._load_state(state)
        if o2o["episodes"] is not None and self._episodes is not None:
            self._episodes.load_state_dict(o2o["episodes"])
        self.scores = {k: dict(v) for k, v in o2o["scores"].items()}
        self.evals = [dict(e) for e in o2o["evals"]]

    # -- the summary ----------------------------------------------------------------------------
    def _summary(self, session_start: float) -> dict[str, Any]:
        summary = super()._summary(session_start)
        summary["offline_grad_steps"] = self.grad_steps
        summary["env_steps"] = self.env_steps
        summary["offline_ratio"] = self.o2o.offline_ratio
        summary["warmup_steps"] = self.o2o.warmup_steps
        for phase in ("offline", "warmup"):
            if phase in self.scores:
                summary[f"{phase}_score"] = self.scores[phase]["return"]
                for key in ("success_rate", "normalized_score"):
                    if math.isfinite(self.scores[phase][key]):
                        summary[f"{phase}_{key}"] = self.scores[phase][key]
        summary["final_online_score"] = self.last_eval
        if self.evals:
            for key in ("success_rate", "normalized_score"):
                if math.isfinite(self.evals[-1][key]):
                    summary[f"final_{key}"] = self.evals[-1][key]
        # The collapse window: the first 10% of the online budget after the warm-up, where the first
        # updates on online data act (during the warm-up the policy is frozen and cannot collapse).
        start = self.o2o.warmup_steps
        horizon = start + EARLY_FRACTION * int(self.cfg.total_env_steps)
        early = [e["return"] for e in self.evals if start < e["env_steps"] <= horizon]
        if early:
            summary["min_early_online_score"] = min(early)
            start = self.scores.get("offline", {}).get("return")
            if start is not None and start != 0:
                summary["min_early_online_ratio"] = min(early) / start
        peak = _peak_rss_mb()
        if peak is not None:  # what keeping (or dropping) the offline data costs
            summary["peak_rss_mb"] = peak
        if self.reference is not None:
            summary["normalized_score"] = self.reference.normalize(self.last_eval)
            summary["reference_returns"] = {"random": self.reference.random, "expert": self.reference.expert}
        return summary

    def _plot(self) -> None:
        from robolearn.logging import plot_learning_curve

        plot_learning_curve(self.run_dir / "metrics.csv", self.run_dir / "learning_curve.png", x=self.unit,
                            y=("eval/return", "train/return"), skip_missing=True)


def _peak_rss_mb() -> float | None:
    """Peak resident memory of the process in MiB (Linux and macOS), else ``None``."""
    try:
        import resource
        import sys
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0  # bytes on macOS, KiB on Linux


__all__ = ["EARLY_FRACTION", "PHASES", "TRANSFERRED_KEYS", "EpisodeReturns", "O2OConfig", "O2ORunner", "transfer_state"]
