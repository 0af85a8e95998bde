"""Implicit Q-Learning configuration."""

from __future__ import annotations

from dataclasses import dataclass

from robolearn.algos.common import OfflineCriticConfig, check_exploration_noise

ACTOR_TYPES: tuple[str, ...] = ("gaussian", "deterministic")
"""IQL actor heads: a tanh-Gaussian scored by ``log_prob`` of dataset actions, or a deterministic
actor scored by squared error (CORL's ``iql_deterministic``)."""


@dataclass
class IQLConfig(OfflineCriticConfig):
    """IQL (Kostrikov et al., 2022); defaults follow CORL's ``iql.py`` (locomotion settings).

    The fields every offline actor-critic shares (batch, discount, target rate, learning rates of the
    actor and Q, widths, observation groups, the HL-Gauss head) are :class:`OfflineCriticConfig`'s.
    """

    expectile: float = 0.7
    """Expectile of the value loss on ``min target Q(s, a) - V(s)`` (CORL ``iql_tau``: 0.7; AntMaze 0.9)."""
    beta: float = 3.0
    """Inverse temperature of the advantage weights ``exp(beta * adv)`` (CORL: 3.0; AntMaze 10.0)."""
    exp_adv_max: float = 100.0
    """Clip of the advantage weights (CORL ``EXP_ADV_MAX``: 100)."""
    value_lr: float = 3e-4
    """Adam learning rate of V (CORL ``vf_lr``: 3e-4)."""
    actor_lr_decay_steps: int | None = None
    """If set, the actor's learning rate follows a cosine decay to 0 over this many updates (CORL
    always decays, over its ``max_timesteps`` = 1_000_000); ``None`` keeps it constant."""
    actor_type: str = "gaussian"
    """``gaussian`` (``TanhGaussianActor``, CORL's default) or ``deterministic``."""
    value_hidden: tuple[int, ...] = (256, 256)
    """V hidden layer widths (CORL: 256x2)."""
    exploration_noise: float = 0.1
    """Online exploration of a deterministic actor: Gaussian noise of this times the half action range
    (TD3's 0.1), clipped to the bounds; 0 acts deterministically. A Gaussian actor samples instead.
    """

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        super().__post_init__()
        check_exploration_noise(self.exploration_noise)
        if not 0.0 < self.expectile < 1.0:
            raise ValueError(f"expectile: expected a value in (0, 1), got {self.expectile}")
        if self.beta < 0.0 or self.exp_adv_max <= 0.0:
            raise ValueError(
                f"beta/exp_adv_max: expected beta >= 0 and exp_adv_max > 0, got {self.beta}, {self.exp_adv_max}"
            )
        if not float(self.value_lr) > 0.0:
            raise ValueError(f"value_lr: expected a learning rate > 0, got {self.value_lr!r}")
        if self.actor_lr_decay_steps is not None and self.actor_lr_decay_steps < 1:
            raise ValueError(f"actor_lr_decay_steps: expected None or >= 1, got {self.actor_lr_decay_steps}")
        if self.actor_type not in ACTOR_TYPES:
            raise ValueError(f"actor_type: expected one of {', '.join(ACTOR_TYPES)}, got {self.actor_type!r}")
        self.value_hidden = tuple(self.value_hidden)
