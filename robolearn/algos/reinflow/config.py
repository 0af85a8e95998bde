"""Configuration of :class:`robolearn.algos.reinflow.ReinFlow` (``algo=reinflow``) and its DPPO variant
(``algo=dppo``): PPO over the denoising chain of a pre-trained flow or diffusion chunk policy.
"""

from __future__ import annotations

from dataclasses import dataclass

EVAL_NOISE: tuple[str, ...] = ("sample", "zero")
"""How :meth:`act_inference` draws the chain's initial noise: a fresh ``N(0, I)`` draw from the
agent's evaluation generator (the pre-trained policy's own behaviour), or zeros."""


@dataclass
class ReinFlowConfig:
    """ReinFlow (Zhang et al. 2025): the ``K`` Euler steps of a flow policy become a Markov chain
    ``x_{k+1} ~ N(x_k + v(x_k, t_k, cond) / K, sigma_theta(x_k, t_k, cond)^2)`` with a learned noise
    network, and PPO fine-tunes velocity and noise networks on the chain's exact log-likelihood.
    """

    init_from: str | None = None
    """The pre-trained policy: a run directory of a flow/diffusion BC run (its newest checkpoint's
    ``agent.model``), a checkpoint file, or ``None`` for a freshly initialised model (tests, ablations)."""
    steps: int = 4
    """Denoising steps ``K`` of the chain (Euler steps of the flow; DDIM steps for DPPO); 1 works."""
    min_std: float = 0.08
    """Lower bound of the transition noise std (model units, the ``[-1, 1]`` action space)."""
    max_std: float = 0.16
    """Upper bound of the learned noise std (ReinFlow); DPPO ignores it."""
    noise_hidden: tuple[int, ...] = (128, 128)
    """Hidden widths of ReinFlow's noise network ``(x_k, t_k, cond) -> sigma``."""
    horizon: int = 1
    """Chunk length ``H`` of a fresh model (``init_from=None``); a pre-trained model brings its own."""
    model_hidden: tuple[int, ...] = (256, 256, 256)
    """MLP backbone widths of a fresh model (``init_from=None``)."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of the value MLP on the critic group."""
    activation: str = "elu"
    """Activation of the value MLP and the noise network."""
    actor_obs_group: str = "policy"
    """Observation group the chunk model is conditioned on (what it was pre-trained on)."""
    critic_obs_group: str | None = None
    """Observation group of the value function; ``None`` means the actor's."""
    normalize_critic_obs: bool = True
    """Normalise the critic's input with running statistics (the actor keeps the model's own,
    fixed pre-training statistics)."""
    num_steps: int = 32
    """Env steps collected per world between updates (the rollout length T)."""
    num_epochs: int = 5
    """Passes over the rollout per update."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    gamma: float = 0.99
    """Discount factor."""
    lam: float = 0.95
    """GAE lambda."""
    clip_param: float = 0.05
    """Clip range of the chain's probability ratio (small: the ratio multiplies ``K`` transitions of
    ``H * A`` dimensions each, so it moves much faster than a one-Gaussian policy's)."""
    value_clip: bool = False
    """Clip the value change to ``clip_param`` around the collection-time value."""
    value_loss_coef: float = 0.5
    """Weight of the value loss."""
    entropy_coef: float = 0.0
    """Weight of the chain's entropy bonus (the sum of the transitions' Gaussian entropies)."""
    bc_coef: float = 0.0
    """Weight of the BC regulariser: the squared distance between the fine-tuned and the
    pre-trained model's noise-free samples from the same initial noise (an upper bound of their W2
    distance, as in flow Q-learning's distillation), on the rollout's conditions."""
    actor_learning_rate: float = 1e-4
    """Adam learning rate of the velocity (or noise-prediction) network and the noise network."""
    critic_learning_rate: float = 1e-3
    """Adam learning rate of the value function."""
    critic_warmup_iterations: int = 0
    """Updates at the start that train only the value function (the pre-trained actor stays as it
    is until its advantages mean something)."""
    target_kl: float | None = None
    """Stop an update's epochs once the approximate KL ``mean(old_lp - lp)`` exceeds this
    (one host sync per minibatch); ``None``: run every epoch."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip, per optimiser."""
    normalize_advantages: bool = True
    """Standardise advantages over the whole rollout."""
    eval_noise: str = "zero"
    """Initial noise of :meth:`act_inference` (:data:`EVAL_NOISE`); the chain itself runs noise-free."""
    seed: int = 0
    """Seed of the rollout noise, the shuffling and the evaluation generators."""

    def __post_init__(self) -> None:
        """Check ranges, naming the field and the value."""
        if int(self.steps) < 1:
            raise ValueError(f"steps: expected >= 1 denoising steps, got {self.steps}")
        if not 0.0 < float(self.min_std) <= float(self.max_std):
            raise ValueError(f"min_std/max_std: expected 0 < min_std <= max_std, got {self.min_std}, {self.max_std}")
        for name in ("num_steps", "num_epochs", "num_minibatches", "horizon"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.eval_noise not in EVAL_NOISE:
            raise ValueError(f"eval_noise: expected one of {', '.join(EVAL_NOISE)}, got {self.eval_noise!r}")
        if float(self.clip_param) <= 0.0:
            raise ValueError(f"clip_param: expected > 0, got {self.clip_param}")
        if int(self.critic_warmup_iterations) < 0:
            raise ValueError(f"critic_warmup_iterations: expected >= 0, got {self.critic_warmup_iterations}")
        self.noise_hidden = tuple(int(h) for h in self.noise_hidden)
        self.model_hidden = tuple(int(h) for h in self.model_hidden)
        self.critic_hidden = tuple(int(h) for h in self.critic_hidden)


@dataclass
class DPPOConfig(ReinFlowConfig):
    """DPPO (Ren et al. 2024): the same PPO over the DDIM steps of a diffusion policy, each step a
    Gaussian of fixed std ``max(sigma_DDIM(eta), min_std)`` (no noise network). The first
    ``steps - ft_steps`` steps run the frozen pre-trained network; the last ``ft_steps`` are
    fine-tuned and carry the log-likelihood.
    """

    steps: int = 5
    """DDIM steps ``K`` of the chain."""
    min_std: float = 0.1
    """Floor of every step's std, so that even a step DDIM makes deterministic is a proper Gaussian."""
    eta: float = 0.0
    """DDIM's eta: the scheduled part of each step's std (``ddim_step_params``)."""
    ft_steps: int | None = None
    """Fine-tuned (last) steps ``K'``; ``None``: all ``K``."""
    clip_x0: float = 1.0
    """Clip of the predicted clean chunk inside each DDIM step (as the pre-trained sampler)."""

    def __post_init__(self) -> None:
        """Also check ``eta`` and ``ft_steps``."""
        super().__post_init__()
        if float(self.eta) < 0.0:
            raise ValueError(f"eta: expected >= 0, got {self.eta}")
        if self.ft_steps is not None and not 1 <= int(self.ft_steps) <= int(self.steps):
            raise ValueError(f"ft_steps: expected 1..steps ({self.steps}) or None, got {self.ft_steps}")

    @property
    def fine_tuned_steps(self) -> int:
        """``K'``: the number of last steps that are fine-tuned."""
        return int(self.steps) if self.ft_steps is None else int(self.ft_steps)
