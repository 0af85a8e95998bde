"""Flow Q-learning configuration."""

from __future__ import annotations

from dataclasses import dataclass

Q_AGGS: tuple[str, ...] = ("mean", "min")
"""How the target critics' values are combined in the TD target: FQL's default ``mean`` of the two,
or the clipped double-Q ``min`` (FQL uses it on some tasks). The actor's Q term is always the mean,
as in FQL's code."""

SQUASHES: tuple[str, ...] = ("clip", "tanh")
"""How the one-step policy's raw output is kept inside the action bounds: ``clip`` (FQL: a plain
linear head, its actions clipped to ``[-1, 1]`` wherever they are used) or ``tanh``."""


@dataclass
class FQLConfig:
    """Flow Q-learning (Park, Li & Levine, 2025, "Flow Q-Learning").

    Defaults follow the paper's code (batch 256, learning rate 3e-4, 10 Euler steps, ``alpha = 10``,
    ``mean`` over two LayerNorm critics), except the network widths (512x4 there; 256x3 here, sized
    for CPUs) and ``normalize_q_loss`` (see its docstring).
    """

    batch_size: int = 256
    """Transitions per gradient step (FQL: 256)."""
    gamma: float = 0.99
    """Discount factor (FQL: 0.99)."""
    tau: float = 0.005
    """Polyak rate of the target critics (FQL: 0.005)."""
    alpha: float = 10.0
    """Weight of the distillation term ``|mu_omega(s, z) - mu_flow(s, z)|^2`` in the one-step
    policy's loss: large keeps it on the flow's samples (behaviour cloning), small lets it climb Q
    (FQL tunes it per task, 3 to 1000; 10 is its default)."""
    flow_steps: int = 10
    """Euler steps of the BC flow when it produces the distillation target (FQL: 10)."""
    normalize_q_loss: bool = True
    """Divide the one-step policy's ``-Q`` term by the batch's mean ``|Q|`` (no gradient through the
    scale), so ``alpha`` means the same at any reward scale. FQL has the option (off by default, on
    for some task families); on here because robolearn's tasks span reward scales from 0/1 per step
    (mazes) to hundreds per episode (locomotion)."""
    q_agg: str = "mean"
    """``mean`` or ``min`` over the target critics in the TD target (:data:`Q_AGGS`); the actor loss uses the mean."""
    squash: str = "clip"
    """How the one-step policy stays within the bounds (:data:`SQUASHES`)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the one-step policy (FQL: 3e-4)."""
    flow_lr: float = 3e-4
    """Adam learning rate of the BC flow (FQL: 3e-4)."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics (FQL: 3e-4)."""
    num_critics: int = 2
    """Q networks (FQL: 2)."""
    actor_hidden: tuple[int, ...] = (256, 256, 256)
    """Hidden widths of the one-step policy (FQL: 512x4)."""
    flow_hidden: tuple[int, ...] = (256, 256, 256)
    """Hidden widths of the BC flow's MLP backbone (FQL: 512x4)."""
    critic_hidden: tuple[int, ...] = (256, 256, 256)
    """Hidden widths of each critic (FQL: 512x4)."""
    activation: str = "relu"
    """Hidden activation of the one-step policy and the critics (FQL: GELU; the flow backbone uses SiLU)."""
    layer_norm: bool = True
    """LayerNorm after each hidden layer of the critics (FQL: on)."""
    actor_layer_norm: bool = False
    """LayerNorm in the one-step policy (FQL: off)."""
    time_embed_dim: int = 32
    """Sinusoidal time embedding width of the flow backbone."""
    actor_obs_group: str = "policy"
    """Observation group the policies read."""
    critic_obs_group: str | None = None
    """Observation group the critics read; ``None`` means the actor's."""
    buffer_size: int = 1_000_000
    """Online transitions kept when the learner acts in an env (offline-to-online)."""

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        for name in ("batch_size", "num_critics", "flow_steps", "buffer_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma: expected a value in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau: expected a value in (0, 1], got {self.tau}")
        if not 0.0 <= float(self.alpha) < float("inf"):
            raise ValueError(f"alpha: expected a finite value >= 0, got {self.alpha!r}")
        for name in ("actor_lr", "flow_lr", "critic_lr"):
            if not float(getattr(self, name)) > 0.0:
                raise ValueError(f"{name}: expected a learning rate > 0, got {getattr(self, name)!r}")
        if self.q_agg not in Q_AGGS:
            raise ValueError(f"q_agg: expected one of {', '.join(Q_AGGS)}, got {self.q_agg!r}")
        if self.squash not in SQUASHES:
            raise ValueError(f"squash: expected one of {', '.join(SQUASHES)}, got {self.squash!r}")
        if self.time_embed_dim < 4 or self.time_embed_dim % 2:
            raise ValueError(f"time_embed_dim: expected an even number >= 4, got {self.time_embed_dim}")
        self.actor_hidden = tuple(int(h) for h in self.actor_hidden)
        self.flow_hidden = tuple(int(h) for h in self.flow_hidden)
        self.critic_hidden = tuple(int(h) for h in self.critic_hidden)
        if not self.flow_hidden:
            raise ValueError("flow_hidden: expected at least one hidden layer, got ()")

    @property
    def critic_group(self) -> str:
        """The group the critics actually read."""
        return self.critic_obs_group or self.actor_obs_group
