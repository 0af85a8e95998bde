"""Configuration of :class:`robolearn.algos.distill.Distill`, the teacher-student learner."""

from __future__ import annotations

import math
from dataclasses import dataclass

from robolearn.types import DEPLOYABLE_GROUPS, assert_reads

MODES: tuple[str, ...] = ("dagger", "aacd")
"""Distillation modes: DAgger on the student's own rollouts, asymmetric actor-critic distillation."""
IMITATION_LOSSES: tuple[str, ...] = ("mse", "nll")
"""How the student regresses on the teacher's action: squared error of the mean, or the Gaussian
negative log-likelihood of the teacher's action (which also learns the student's std)."""
SCHEDULES: tuple[str, ...] = ("linear", "exponential", "constant")
"""Shapes of the beta (and behaviour-cloning weight) schedules."""


@dataclass
class DistillConfig:
    """A student on deployable observation groups, taught by a trained privileged teacher.

    ``dagger``: the student's own rollouts, the executed action being the teacher's with probability
    beta per world and step (beta goes from ``beta_start`` to ``beta_end``); every visited state is
    labelled with the teacher's deterministic action and the student regresses on the labels
    (Ross et al. 2011; rsl_rl's ``Distillation``). ``aacd``: the student improves by RL against the
    teacher's privileged critic plus a behaviour-cloning term towards the teacher (TacSL's
    asymmetric actor-critic distillation): with a state-value teacher (PPO), a clipped PPO
    surrogate whose advantages come from the teacher's value function (frozen, or fine-tuned on
    the student's returns with ``finetune_critic``); with a Q teacher (SAC), the deterministic
    policy gradient of the teacher's frozen ``Q(privileged obs, student action)``.
    """

    teacher: str | None = None
    """The teacher's run directory (any trained run of a registered algorithm). Required to train;
    ``None`` only where a student is rebuilt for inference or export (``load_policy``)."""
    mode: str = "dagger"
    """``dagger`` or ``aacd`` (see the class docstring)."""
    student_obs_group: str = "policy"
    """Observation group the student reads: a deployable one (``policy``, ``history``, ``image``);
    a privileged group is refused here, before anything is built."""
    actor_hidden: tuple[int, ...] = (256, 256, 256)
    """Hidden widths of the student MLP."""
    activation: str = "elu"
    """Hidden activation (a key of ``robolearn.nn.ACTIVATIONS``)."""
    init_noise_std: float = 0.5
    """Initial std of the student's Gaussian (AACD's exploration, the NLL loss)."""
    normalize_obs: bool = True
    """Normalise the student's input with running statistics (folded into the exported policy)."""
    num_steps: int = 24
    """Control steps collected per world between updates."""
    num_epochs: int = 5
    """Passes per update (DAgger with an aggregated buffer: passes of the rollout's size drawn from it)."""
    num_minibatches: int = 4
    """Minibatches per pass; each holds ``num_steps * num_envs // num_minibatches`` samples."""
    learning_rate: float = 1e-3
    """Adam learning rate of the student (and of a fine-tuned critic)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of the student's (and the fine-tuned critic's) parameters."""
    imitation_loss: str = "mse"
    """``mse`` or ``nll`` (:data:`IMITATION_LOSSES`)."""
    # -- DAgger -------------------------------------------------------------------------------
    beta_schedule: str = "linear"
    """``linear``: beta from ``beta_start`` to ``beta_end`` over ``beta_iterations`` updates, then
    ``beta_end``; ``exponential``: ``beta_start * beta_rate**k`` (DAgger's ``p**(i-1)``), floored at
    ``beta_end``; ``constant``: ``beta_start``."""
    beta_start: float = 1.0
    """Probability of executing the teacher's action in the first rollout."""
    beta_end: float = 0.0
    """Probability at the end of the schedule."""
    beta_iterations: int = 20
    """Updates the linear schedule takes from ``beta_start`` to ``beta_end``."""
    beta_rate: float = 0.9
    """Factor per update of the exponential schedule."""
    buffer_size: int = 0
    """0: learn from the latest rollout only (rsl_rl's distillation); > 0: DAgger's aggregated
    dataset, the last ``buffer_size`` labelled states (at least one rollout)."""
    # -- asymmetric actor-critic distillation -------------------------------------------------
    bc_coef: float = 1.0
    """Weight of the behaviour-cloning term towards the teacher's action at the start."""
    bc_coef_end: float = 1.0
    """Weight after ``bc_iterations`` updates (linear anneal; equal to ``bc_coef``: constant)."""
    bc_iterations: int = 50
    """Updates of the behaviour-cloning weight's linear anneal."""
    gamma: float = 0.99
    """Discount of the returns (the teacher critic's discount should match)."""
    lam: float = 0.95
    """GAE lambda."""
    clip_param: float = 0.2
    """PPO clip range of the probability ratio (state-value teacher)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (state-value teacher)."""
    finetune_critic: bool = False
    """State-value teacher: fit a copy of its critic to the student's returns (the teacher run's
    own weights never change either way); ``False`` keeps the critic frozen. A Q teacher's critic is
    always frozen (fitting it would need its TD learner)."""
    value_loss_coef: float = 1.0
    """Weight of the value loss of a fine-tuned critic."""
    q_coef: float = 1.0
    """Q teacher: weight of ``-Q(s, pi(s)) / mean|Q|`` (TD3+BC's scale-free form)."""
    seed: int = 0
    """Seed of the beta draws, the exploration noise and the minibatch shuffling."""

    def __post_init__(self) -> None:
        """Refuse what cannot work, naming the field, the value and what is expected."""
        assert_reads(f"distillation student (algo.student_obs_group={self.student_obs_group!r})",
                     [self.student_obs_group], DEPLOYABLE_GROUPS)
        for name, choices in (("mode", MODES), ("imitation_loss", IMITATION_LOSSES), ("beta_schedule", SCHEDULES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name}: unknown {getattr(self, name)!r}; expected one of {', '.join(choices)}")
        for name in ("num_steps", "num_epochs", "num_minibatches", "beta_iterations", "bc_iterations"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        if isinstance(self.buffer_size, bool) or int(self.buffer_size) != self.buffer_size or self.buffer_size < 0:
            raise ValueError(f"buffer_size: expected an integer >= 0, got {self.buffer_size!r}")
        for name in ("beta_start", "beta_end", "beta_rate", "gamma", "lam"):
            value = float(getattr(self, name))
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: expected a value in [0, 1], got {value}")
        for name in ("learning_rate", "max_grad_norm", "init_noise_std", "clip_param"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f"{name}: expected a finite value > 0, got {value}")
        for name in ("bc_coef", "bc_coef_end", "entropy_coef", "value_loss_coef", "q_coef"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name}: expected a finite value >= 0, got {value}")
        self.actor_hidden = tuple(self.actor_hidden)
