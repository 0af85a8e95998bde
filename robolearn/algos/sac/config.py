"""SAC (and REDQ, via ``num_critics``/``num_target_subset``/``utd_ratio``) configuration."""

from __future__ import annotations

from dataclasses import dataclass

COMPILE_MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""``torch.compile`` modes; ``reduce-overhead`` (and ``max-autotune``) add CUDA graphs on CUDA."""


@dataclass
class SACConfig:
    """Soft Actor-Critic hyperparameters; defaults follow CleanRL's ``sac_continuous_action.py``."""

    batch_size: int = 256
    """Transitions per gradient step."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target critics: ``target <- (1 - tau) * target + tau * online``."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic ensemble."""
    alpha_lr: float = 1e-3
    """Adam learning rate of ``log_alpha`` (automatic entropy tuning)."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    autotune_alpha: bool = True
    """Learn alpha towards ``target_entropy``; if False alpha stays ``init_alpha``."""
    target_entropy: float | None = None
    """Entropy the temperature steers to; ``None`` means ``-action_dim``."""
    num_critics: int = 2
    """Critics in the ensemble (REDQ uses 10)."""
    num_target_subset: int | None = None
    """Target critics the TD target takes the min over, drawn at random each step; ``None`` = all (REDQ: 2)."""
    actor_q_reduction: str = "min"
    """How the actor loss reduces the ensemble: ``min`` (SAC) or ``mean`` (REDQ)."""
    utd_ratio: int = 1
    """Gradient steps per :meth:`SAC.update` call (update-to-data ratio per env step; REDQ: 20)."""
    backup_entropy: bool = True
    """Soft TD target ``r + gamma * (min Q(s', a') - alpha * log pi(a'|s'))``; False drops the entropy
    term (CQL/Cal-QL's default, and WSRL's AntMaze setting): the target then has the scale of the
    pre-trained critics it continues from."""
    policy_delay: int = 1
    """Actor and alpha are updated on every ``policy_delay``-th critic step."""
    learning_starts: int = 5000
    """Stored transitions before updates begin; until then ``act`` returns uniform random actions."""
    layer_norm: bool = False
    """LayerNorm after each hidden layer of the critics (and of the actor if ``actor_layer_norm``)."""
    actor_layer_norm: bool = False
    """LayerNorm in the actor's hidden layers."""
    actor_hidden: tuple[int, ...] = (256, 256)
    """Actor hidden layer widths."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Critic hidden layer widths."""
    activation: str = "relu"
    """Hidden activation of both networks (a key of ``robolearn.nn.ACTIVATIONS``)."""
    actor_obs_group: str = "policy"
    """Observation group the actor reads."""
    critic_obs_group: str | None = None
    """Observation group the critic reads; ``None`` means the actor's."""
    action_noise_beta: float = 0.0
    """Colour of the exploration noise: the Gaussian policy's noise (and, before ``learning_starts``,
    the uniform random actions) drawn as per-world sequences with power spectrum ``1/f^beta``
    (:mod:`robolearn.nn.noise`). 0 draws independently at every step (SAC's own); 1 is pink
    noise, which Eberhard et al. (ICLR 2023) recommend as the default for SAC and MPO; 2 is red.
    On Pendulum-Swingup at 50k env steps pink did no better than white over 3 seeds
    (BENCHMARKS.md, "Session 25"). The marginal stays standard normal (uniform before ``learning_starts``), so
    only the correlation between steps changes; the updates still draw white noise."""
    action_noise_length: int = 1000
    """Samples per noise sequence when ``action_noise_beta > 0``: the episode length (a sequence per
    episode; a world's sequence restarts when its episode ends). The slowest correlation lasts about
    this many steps."""
    compile: bool = False
    """Run each gradient step (critic, actor, alpha, target lerp) under ``torch.compile`` as one
    graph: the step is written with ``torch.func.grad`` and a traceable Adam on the optimisers' own
    state (``SAC._whole_step``), so nothing breaks the graph. The random draws stay outside it, from
    the same generator in the same order; numerics match the eager step within float tolerance, not
    bit for bit. On this project's 2-core CPU the compiled step is ~2x faster with 256x256 networks
    and ~5x with 64x64 (BENCHMARKS.md, "Session 27"); the first step pays the compile (about a
    minute cold, seconds from inductor's cache)."""
    compile_mode: str = "default"
    """``torch.compile`` mode when ``compile``: ``reduce-overhead`` also captures the step in a CUDA
    graph on CUDA (one per step kind: critic-only and full)."""

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        positive = ("batch_size", "buffer_size", "num_critics", "utd_ratio", "policy_delay")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma: expected a value in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau: expected a value in (0, 1], got {self.tau}")
        if self.init_alpha <= 0.0:
            raise ValueError(f"init_alpha: expected > 0, got {self.init_alpha}")
        if self.num_target_subset is not None and not 1 <= self.num_target_subset <= self.num_critics:
            raise ValueError(
                f"num_target_subset: expected None or 1..num_critics ({self.num_critics}), got {self.num_target_subset}"
            )
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode: unknown {self.compile_mode!r}; expected one of {', '.join(COMPILE_MODES)}")
        if self.actor_q_reduction not in ("min", "mean"):
            raise ValueError(f"actor_q_reduction: expected 'min' or 'mean', got {self.actor_q_reduction!r}")
        if self.action_noise_beta < 0:
            raise ValueError(f"action_noise_beta: expected >= 0 (0 white, 1 pink, 2 red), got {self.action_noise_beta}")
        if self.action_noise_length < 2:
            raise ValueError(f"action_noise_length: expected >= 2 samples per sequence, got {self.action_noise_length}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts: expected >= 0, got {self.learning_starts}")
        self.actor_hidden = tuple(self.actor_hidden)
        self.critic_hidden = tuple(self.critic_hidden)

    @property
    def critic_group(self) -> str:
        """The group the critic actually reads."""
        return self.critic_obs_group or self.actor_obs_group
