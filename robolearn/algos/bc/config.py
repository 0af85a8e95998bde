"""Behaviour cloning configuration."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BCConfig:
    """Deterministic behaviour cloning; defaults follow CORL's ``any_percent_bc.py``."""

    batch_size: int = 256
    """Transitions per gradient step (CORL: 256)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor (CORL: 3e-4)."""
    actor_hidden: tuple[int, ...] = (256, 256)
    """Actor hidden layer widths (CORL: two layers of 256)."""
    activation: str = "relu"
    """Hidden activation (a key of ``robolearn.nn.ACTIVATIONS``; CORL: ReLU)."""
    layer_norm: bool = False
    """LayerNorm after each hidden layer."""
    actor_obs_group: str = "policy"
    """Observation group the actor reads."""
    buffer_size: int = 1_000_000
    """Online transitions kept when the learner acts in an env (``process``; offline-to-online)."""
    exploration_noise: float = 0.1
    """Online exploration of a deterministic actor: Gaussian noise of this times the half action range
    (TD3's 0.1), clipped to the bounds; 0 acts deterministically.
    """

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        if isinstance(self.buffer_size, bool) or int(self.buffer_size) != self.buffer_size or self.buffer_size < 1:
            raise ValueError(f"buffer_size: expected an integer >= 1, got {self.buffer_size!r}")
        if not 0.0 <= float(self.exploration_noise) < float("inf"):
            raise ValueError(f"exploration_noise: expected a finite value >= 0, got {self.exploration_noise!r}")
        if int(self.batch_size) < 1:
            raise ValueError(f"batch_size: expected an integer >= 1, got {self.batch_size}")
        if self.actor_lr <= 0.0:
            raise ValueError(f"actor_lr: expected > 0, got {self.actor_lr}")
        self.actor_hidden = tuple(self.actor_hidden)
