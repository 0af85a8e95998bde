"""Shared vocabulary: observation-group keys, transition containers and the core protocols.

Everything here depends on torch only, so every layer of robolearn may import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

# Observation-group names, the same everywhere (DESIGN.md, "BatchedEnv").
POLICY = "policy"
"""What the deployed robot will have."""
CRITIC = "critic"
"""What the critic sees; by default ``policy`` plus ``privileged``."""
PRIVILEGED = "privileged"
"""What only the simulator knows: true state, randomisation draws."""
HISTORY = "history"
"""Stacked past observations."""
IMAGE = "image"
"""Rendered camera images."""

OBS_GROUPS: tuple[str, ...] = (POLICY, CRITIC, PRIVILEGED, HISTORY, IMAGE)
"""Every valid observation-group name."""

DEPLOYABLE_GROUPS: tuple[str, ...] = (POLICY, HISTORY, IMAGE)
"""Groups a deployed policy may read on the robot; no privileged term enters them unasked."""


def assert_reads(consumer: str, reads: Sequence[str], allowed: Sequence[str] = DEPLOYABLE_GROUPS) -> None:
    """Assert that ``consumer`` (an actor, an exported policy, a student) reads only ``allowed``
    observation groups (by default the deployable ones); raise naming both otherwise.
    """
    bad = [g for g in reads if g not in allowed]
    if bad:
        raise ValueError(f"{consumer}: reads observation group(s) {bad}; it may read only {list(allowed)}")

Obs = dict[str, torch.Tensor]
"""A batch of observations: group name to a ``[N, ...]`` tensor."""


@dataclass
class Transition:
    """One batched environment step as a learner sees it (all tensors ``[N, ...]``)."""

    obs: Obs
    """Observations the action was chosen from."""
    action: torch.Tensor
    """Actions taken, ``[N, A]``."""
    reward: torch.Tensor
    """Rewards, ``[N]``."""
    next_obs: Obs
    """Observations after the step; for done worlds, the pre-reset (final) observation."""
    terminated: torch.Tensor
    """True where the MDP ended (no bootstrapping), ``[N]`` bool."""
    truncated: torch.Tensor
    """True where the episode was cut by a time limit (bootstrap from ``next_obs``), ``[N]`` bool."""
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    """Algorithm-specific extras (log-probabilities, values, ...)."""


@dataclass
class Batch:
    """A minibatch sampled for an update; same fields as :class:`Transition`, leading dim ``[B]``."""

    obs: Obs
    """Observations."""
    action: torch.Tensor
    """Actions."""
    reward: torch.Tensor
    """Rewards."""
    next_obs: Obs
    """Next observations."""
    terminated: torch.Tensor
    """Terminal flags."""
    truncated: torch.Tensor
    """Time-out flags."""
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    """Extras."""


@runtime_checkable
class VecEnv(Protocol):
    """A batched environment: N worlds stepped together, auto-reset by index inside ``step``."""

    num_envs: int
    """Number of worlds N."""
    device: torch.device
    """Device every returned tensor lives on."""

    def reset(self, seed: int | None = None) -> tuple[Obs, dict[str, Any]]:
        """Reset every world; return the observation groups and an info dict."""
        ...

    def step(
        self, action: torch.Tensor
    ) -> tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Advance every world by one control step: ``(obs, reward, terminated, truncated, info)``."""
        ...


@runtime_checkable
class Policy(Protocol):
    """Anything that maps observation groups to actions."""

    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Return actions ``[N, A]`` for a batch of observations."""
        ...


@runtime_checkable
class Algorithm(Protocol):
    """A learner as the runners drive it (DESIGN.md, "Algorithm"); online and offline learners alike.

    The runner owns the loop; a learner only answers these verbs. Every registered algorithm
    (``robolearn.algos.registry``) implements all of them.
    """

    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Exploring actions ``[N, A]`` for a batch of observations (what training collects with)."""
        ...

    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic actions ``[N, A]`` (evaluation and deployment); records nothing."""
        ...

    def process(self, transition: Transition) -> None:
        """Record one batched env step (``next_obs``: the pre-reset observation of ended worlds)."""
        ...

    def update(self, batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """Learn: from ``batch`` when given (one gradient step), else from the learner's own data
        (its rollout or its sampler). Returns named scalar tensors (``loss_*`` and diagnostics);
        an empty dict when there is nothing to learn from yet.
        """
        ...

    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor (what a divergence guard checks for non-finite values)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        ...

    def policy_module(self) -> torch.nn.Module:
        """The deployable deterministic ``obs[B, D] -> action[B, A]`` module (normalisation folded
        in), an independent CPU copy in eval mode: what export traces and deployment runs. A
        recurrent learner's module also carries its state (``state_names``, ``state_shapes``,
        ``initial_state(batch)``, ``forward(obs, *states) -> (action, *new_states)``; see
        ``robolearn.nn.recurrent.RecurrentPolicy``).
        """
        ...


@runtime_checkable
class Resettable(Protocol):
    """The optional verb of a learner whose :meth:`Algorithm.act_inference` carries state between
    steps (a recurrent policy): evaluation and collection loops call it at episode ends. A
    feed-forward learner need not implement it.
    """

    def reset(self, done: torch.Tensor) -> None:
        """Restart the inference state of the worlds where ``done[N]`` (bool) is true; keep the others'."""
        ...


@runtime_checkable
class Scheduled(Protocol):
    """The optional verb of a learner whose settings follow the run's progress (PPO's linear
    learning-rate schedule): the runner calls it before each iteration's learning. A learner
    without a schedule need not implement it.
    """

    def set_progress(self, fraction: float) -> None:
        """``fraction`` of the run's budget (``[0, 1)``) is done before the coming update."""
        ...


class NonFiniteValue(ValueError):
    """A NaN or inf where an env needs finite numbers (an action), raised before the physics sees it,
    so the env's state is untouched (``robolearn.envs.sync.check_finite``). A training loop that
    wants to react (stop acting on an actor an update broke) catches this instead of checking each
    action itself, which would add a second host sync per step to the one the env's check costs.
    """
