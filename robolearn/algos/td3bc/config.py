"""TD3+BC configuration."""

from __future__ import annotations

from dataclasses import dataclass

from robolearn.nn.offline import check_critic_fields


@dataclass
class TD3BCConfig:
    """TD3 with a behaviour-cloning term (Fujimoto & Gu, 2021); defaults follow CORL's ``td3_bc.py``."""

    batch_size: int = 256
    """Transitions per gradient step (CORL: 256)."""
    gamma: float = 0.99
    """Discount factor (CORL: 0.99)."""
    tau: float = 0.005
    """Polyak rate of the target actor and critics (CORL: 0.005)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor (CORL: 3e-4)."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics (CORL: 3e-4)."""
    policy_noise: float = 0.2
    """Std of the target-policy smoothing noise, in units of the action half-range (CORL: 0.2 * max_action)."""
    noise_clip: float = 0.5
    """Clip of that noise, in units of the action half-range (CORL: 0.5 * max_action)."""
    policy_delay: int = 2
    """The actor and the targets are updated on every ``policy_delay``-th critic step (CORL: 2)."""
    alpha: float = 2.5
    """BC trade-off: the actor loss is ``-alpha / mean|Q| * Q(s, pi(s)) + MSE(pi(s), a)`` (CORL: 2.5)."""
    num_critics: int = 2
    """Critics in the ensemble; the TD target takes their min (TD3: 2)."""
    actor_hidden: tuple[int, ...] = (256, 256)
    """Actor hidden layer widths (CORL: 256x2)."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Critic hidden layer widths (CORL: 256x2)."""
    activation: str = "relu"
    """Hidden activation of both networks (CORL: ReLU)."""
    layer_norm: bool = False
    """LayerNorm after each hidden layer of the critics."""
    actor_obs_group: str = "policy"
    """Observation group the actor reads."""
    buffer_size: int = 1_000_000
    """Online transitions kept when the learner acts in an env (``process``; offline-to-online)."""
    exploration_noise: float = 0.1
    """Online exploration of a deterministic actor: Gaussian noise of this times the half action range
    (TD3's 0.1), clipped to the bounds; 0 acts deterministically.
    """
    critic_obs_group: str | None = None
    """Observation group the critics read; ``None`` means the actor's."""
    critic_type: str = "mse"
    """``mse``: scalar critics with squared TD error; ``hl_gauss``: ``num_bins`` logits trained by cross-entropy."""
    num_bins: int = 51
    """HL-Gauss bins (Farebrother et al. 2024 use 51 on Atari)."""
    v_min: float | None = None
    """Lower end of the HL-Gauss support; required with ``hl_gauss`` (about ``r_min / (1 - gamma)``)."""
    v_max: float | None = None
    """Upper end of the HL-Gauss support; required with ``hl_gauss``."""

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        if isinstance(self.buffer_size, bool) or int(self.buffer_size) != self.buffer_size or self.buffer_size < 1:
            raise ValueError(f"buffer_size: expected an integer >= 1, got {self.buffer_size!r}")
        if not 0.0 <= float(self.exploration_noise) < float("inf"):
            raise ValueError(f"exploration_noise: expected a finite value >= 0, got {self.exploration_noise!r}")
        for name in ("batch_size", "policy_delay", "num_critics"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma: expected a value in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau: expected a value in (0, 1], got {self.tau}")
        for name in ("policy_noise", "noise_clip", "alpha"):
            if getattr(self, name) < 0.0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")
        check_critic_fields(self.critic_type, self.num_bins, self.v_min, self.v_max)
        self.actor_hidden = tuple(self.actor_hidden)
        self.critic_hidden = tuple(self.critic_hidden)

    @property
    def critic_group(self) -> str:
        """The group the critics actually read."""
        return self.critic_obs_group or self.actor_obs_group
