"""TD3+BC configuration."""

from __future__ import annotations

from dataclasses import dataclass

from robolearn.algos.common import OfflineCriticConfig, check_count, check_exploration_noise


@dataclass
class TD3BCConfig(OfflineCriticConfig):
    """TD3 with a behaviour-cloning term (Fujimoto & Gu, 2021); defaults follow CORL's ``td3_bc.py``.

    The fields every offline actor-critic shares (batch, discount, target rate, learning rates,
    widths, observation groups, the HL-Gauss head) are :class:`OfflineCriticConfig`'s; ``tau``
    moves the target actor as well as the target critics.
    """

    policy_noise: float = 0.2
    """Std of the target-policy smoothing noise, in units of the action half-range (CORL: 0.2 * max_action)."""
    noise_clip: float = 0.5
    """Clip of that noise, in units of the action half-range (CORL: 0.5 * max_action)."""
    policy_delay: int = 2
    """The actor and the targets are updated on every ``policy_delay``-th critic step (CORL: 2)."""
    alpha: float = 2.5
    """BC trade-off: the actor loss is ``-alpha / mean|Q| * Q(s, pi(s)) + MSE(pi(s), a)`` (CORL: 2.5)."""
    exploration_noise: float = 0.1
    """Online exploration of the deterministic actor: Gaussian noise of this times the half action
    range (TD3's 0.1), clipped to the bounds; 0 acts deterministically.
    """

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        super().__post_init__()
        check_exploration_noise(self.exploration_noise)
        check_count("policy_delay", self.policy_delay)
        for name in ("policy_noise", "noise_clip", "alpha"):
            if getattr(self, name) < 0.0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")
