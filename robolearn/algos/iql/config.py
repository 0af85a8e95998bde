"""Implicit Q-Learning configuration."""

from __future__ import annotations

from dataclasses import dataclass

from robolearn.nn.offline import check_critic_fields

ACTOR_TYPES: tuple[str, ...] = ("gaussian", "deterministic")
"""IQL actor heads: a tanh-Gaussian scored by ``log_prob`` of dataset actions, or a deterministic
actor scored by squared error (CORL's ``iql_deterministic``)."""


@dataclass
class IQLConfig:
    """IQL (Kostrikov et al., 2022); defaults follow CORL's ``iql.py`` (locomotion settings)."""

    batch_size: int = 256
    """Transitions per gradient step (CORL: 256)."""
    gamma: float = 0.99
    """Discount factor (CORL: 0.99)."""
    tau: float = 0.005
    """Polyak rate of the target critics (CORL: 0.005)."""
    expectile: float = 0.7
    """Expectile of the value loss on ``min target Q(s, a) - V(s)`` (CORL ``iql_tau``: 0.7; AntMaze 0.9)."""
    beta: float = 3.0
    """Inverse temperature of the advantage weights ``exp(beta * adv)`` (CORL: 3.0; AntMaze 10.0)."""
    exp_adv_max: float = 100.0
    """Clip of the advantage weights (CORL ``EXP_ADV_MAX``: 100)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor (CORL: 3e-4)."""
    critic_lr: float = 3e-4
    """Adam learning rate of the Q ensemble (CORL ``qf_lr``: 3e-4)."""
    value_lr: float = 3e-4
    """Adam learning rate of V (CORL ``vf_lr``: 3e-4)."""
    actor_lr_decay_steps: int | None = None
    """If set, the actor's learning rate follows a cosine decay to 0 over this many updates (CORL
    always decays, over its ``max_timesteps`` = 1_000_000); ``None`` keeps it constant."""
    actor_type: str = "gaussian"
    """``gaussian`` (``TanhGaussianActor``, CORL's default) or ``deterministic``."""
    num_critics: int = 2
    """Q networks; V regresses towards the min of their targets (CORL: twin Q)."""
    actor_hidden: tuple[int, ...] = (256, 256)
    """Actor hidden layer widths (CORL: 256x2)."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Q hidden layer widths (CORL: 256x2)."""
    value_hidden: tuple[int, ...] = (256, 256)
    """V hidden layer widths (CORL: 256x2)."""
    activation: str = "relu"
    """Hidden activation of every network (CORL: ReLU)."""
    layer_norm: bool = False
    """LayerNorm after each hidden layer of Q and V."""
    actor_obs_group: str = "policy"
    """Observation group the actor reads."""
    buffer_size: int = 1_000_000
    """Online transitions kept when the learner acts in an env (``process``; offline-to-online)."""
    exploration_noise: float = 0.1
    """Online exploration of a deterministic actor: Gaussian noise of this times the half action range
    (TD3's 0.1), clipped to the bounds; 0 acts deterministically.
    """
    critic_obs_group: str | None = None
    """Observation group Q and V read; ``None`` means the actor's."""
    critic_type: str = "mse"
    """``mse``: scalar Q with squared TD error; ``hl_gauss``: Q logits trained by cross-entropy (V stays scalar)."""
    num_bins: int = 51
    """HL-Gauss bins (Farebrother et al. 2024 use 51 on Atari)."""
    v_min: float | None = None
    """Lower end of the HL-Gauss support; required with ``hl_gauss``."""
    v_max: float | None = None
    """Upper end of the HL-Gauss support; required with ``hl_gauss``."""

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        if isinstance(self.buffer_size, bool) or int(self.buffer_size) != self.buffer_size or self.buffer_size < 1:
            raise ValueError(f"buffer_size: expected an integer >= 1, got {self.buffer_size!r}")
        if not 0.0 <= float(self.exploration_noise) < float("inf"):
            raise ValueError(f"exploration_noise: expected a finite value >= 0, got {self.exploration_noise!r}")
        for name in ("batch_size", "num_critics"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma: expected a value in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau: expected a value in (0, 1], got {self.tau}")
        if not 0.0 < self.expectile < 1.0:
            raise ValueError(f"expectile: expected a value in (0, 1), got {self.expectile}")
        if self.beta < 0.0 or self.exp_adv_max <= 0.0:
            raise ValueError(
                f"beta/exp_adv_max: expected beta >= 0 and exp_adv_max > 0, got {self.beta}, {self.exp_adv_max}"
            )
        if self.actor_lr_decay_steps is not None and self.actor_lr_decay_steps < 1:
            raise ValueError(f"actor_lr_decay_steps: expected None or >= 1, got {self.actor_lr_decay_steps}")
        if self.actor_type not in ACTOR_TYPES:
            raise ValueError(f"actor_type: expected one of {', '.join(ACTOR_TYPES)}, got {self.actor_type!r}")
        check_critic_fields(self.critic_type, self.num_bins, self.v_min, self.v_max)
        self.actor_hidden = tuple(self.actor_hidden)
        self.critic_hidden = tuple(self.critic_hidden)
        self.value_hidden = tuple(self.value_hidden)

    @property
    def critic_group(self) -> str:
        """The group Q and V actually read."""
        return self.critic_obs_group or self.actor_obs_group
