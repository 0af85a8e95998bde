"""Configuration of :class:`robolearn.algos.ppo.PPO`."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES: tuple[str, ...] = ("adaptive", "fixed")
"""Learning-rate schedules PPO knows."""


@dataclass
class PPOConfig:
    """Proximal Policy Optimisation with GAE, clipped losses and an adaptive-KL learning rate.

    Defaults follow rsl_rl's PPO for locomotion-sized problems.
    """

    num_steps: int = 24
    """Steps collected per world between updates (the rollout length T)."""
    num_epochs: int = 5
    """Passes over the rollout per update."""
    num_minibatches: int = 4
    """Minibatches per epoch; each holds ``num_steps * num_envs // num_minibatches`` samples."""
    gamma: float = 0.99
    """Discount factor."""
    lam: float = 0.95
    """GAE lambda: 0 is one-step TD, 1 is Monte Carlo."""
    clip_param: float = 0.2
    """Clip range epsilon of the probability ratio in the surrogate."""
    value_clip: bool = True
    """Clip the value change to ``clip_param`` around the collection-time value (pessimistic max)."""
    value_loss_coef: float = 1.0
    """Weight of the value loss in the total loss."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (subtracted from the loss)."""
    learning_rate: float = 1e-3
    """Initial Adam learning rate (the adaptive schedule then moves it)."""
    schedule: str = "adaptive"
    """``adaptive``: scale the learning rate by 1.5 down or up when the KL is above ``2 * desired_kl``
    or below ``desired_kl / 2``; ``fixed``: keep it."""
    desired_kl: float = 0.01
    """Target KL between the collection-time and updated policy, for the adaptive schedule."""
    min_learning_rate: float = 1e-5
    """Floor of the adaptive learning rate."""
    max_learning_rate: float = 1e-2
    """Ceiling of the adaptive learning rate."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip over actor and critic parameters."""
    normalize_advantages: bool = True
    """Standardise advantages over the whole rollout before the epochs."""
    actor_hidden: tuple[int, ...] = (256, 256, 256)
    """Hidden widths of the actor MLP."""
    critic_hidden: tuple[int, ...] = (256, 256, 256)
    """Hidden widths of the critic MLP."""
    activation: str = "elu"
    """Activation of both MLPs (see :data:`robolearn.nn.ACTIVATIONS`)."""
    init_noise_std: float = 1.0
    """Initial standard deviation of the Gaussian policy."""
    std_type: str = "log"
    """``log``: learn ``log std``; ``scalar``: learn ``std`` directly."""
    normalize_obs: bool = True
    """Normalise actor and critic inputs with running statistics (one normaliser per group)."""
    actor_obs_group: str = "policy"
    """Observation group the actor reads (what the deployed robot has)."""
    critic_obs_group: str | None = None
    """Observation group the critic reads; ``None`` means the actor's. ``critic`` gives an
    asymmetric actor-critic."""
    seed: int = 0
    """Seed of the minibatch shuffling generator."""

    def __post_init__(self) -> None:
        """Reject values that cannot work, naming the field and the valid choices."""
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: unknown {self.schedule!r}; expected one of {', '.join(SCHEDULES)}")
        for name in ("num_steps", "num_epochs", "num_minibatches"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={self.gamma}, lam={self.lam}")
        if self.clip_param <= 0 or self.learning_rate <= 0 or self.desired_kl <= 0:
            raise ValueError("clip_param, learning_rate and desired_kl must be positive")
        self.actor_hidden = tuple(self.actor_hidden)
        self.critic_hidden = tuple(self.critic_hidden)
