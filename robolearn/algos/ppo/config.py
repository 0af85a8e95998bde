"""Configuration of :class:`robolearn.algos.ppo.PPO`."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULES: tuple[str, ...] = ("adaptive", "fixed", "linear")
"""Learning-rate schedules PPO knows."""

MEMORIES: tuple[str, ...] = ("none", "gru", "lstm")
"""Recurrent memories of actor and critic (``none``: feed-forward PPO)."""

HISTORY_ENCODERS: tuple[str, ...] = ("none", "conv")
"""Encoders of the ``history`` observation group for the actor (``none``: the actor does not read it)."""

COMPILE_MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""``torch.compile`` modes; ``reduce-overhead`` (and ``max-autotune``) add CUDA graphs on CUDA."""


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
    or below ``desired_kl / 2``; ``fixed``: keep it; ``linear``: anneal it linearly to zero over the
    run's budget (``learning_rate * (1 - done / total_env_steps)`` for the update after ``done`` env
    steps, CleanRL's ``anneal_lr`` and the RL Zoo's ``lin_<x>``): the late updates take small steps,
    so a policy that has learned the task is not pushed off it. The runner tells the agent how far
    the run is (:meth:`robolearn.algos.ppo.PPO.set_progress`); a run resumed to a raised budget
    continues on the new, longer line (its rate steps up)."""
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
    normalize_rewards: bool = False
    """Divide each reward by the running standard deviation of the worlds' discounted returns (clipped
    to +-10), as Stable-Baselines3's ``VecNormalize(norm_reward=True)`` and Gymnasium's
    ``NormalizeReward`` do: the value targets stay of order one whatever the task's reward scale. Only
    what PPO learns from is scaled; logged and evaluated returns are the env's."""
    actor_obs_group: str = "policy"
    """Observation group the actor reads (what the deployed robot has)."""
    critic_obs_group: str | None = None
    """Observation group the critic reads; ``None`` means the actor's. ``critic`` gives an
    asymmetric actor-critic."""
    seed: int = 0
    """Seed of the minibatch shuffling generator."""
    memory: str = "none"
    """``gru`` or ``lstm``: actor and critic each get their own recurrent memory between their input
    and their MLP (the critic's reads the critic group), trained with truncated BPTT over
    ``bptt_length``-step chunks of the rollout; ``none``: feed-forward PPO."""
    memory_hidden: int = 256
    """Hidden size of each memory."""
    memory_layers: int = 1
    """Stacked recurrent layers of each memory."""
    bptt_length: int | None = None
    """Steps per truncated-BPTT chunk (``None``: the whole rollout, ``num_steps``). Each chunk re-runs
    the memory from the hidden state stored at its first step; minibatches are sets of chunks."""
    history_encoder: str = "none"
    """``conv``: the actor also reads the ``history_obs_group`` group through a temporal convolution
    (its input row is then the actor group followed by the history group); ``none``: it does not."""
    history_obs_group: str = "history"
    """The observation group of stacked frames the history encoder reads."""
    history_frames: int = 0
    """Frames stacked in the history group (its task's ``history_length``); needed by ``conv``."""
    history_channels: tuple[int, ...] = (32, 32)
    """Output channels of each ``Conv1d`` layer of the history encoder."""
    history_kernel: int = 3
    """Kernel size (in frames) of each ``Conv1d`` layer."""
    compile: bool = False
    """Run each minibatch's gradient step (forward, losses, gradient, clip, Adam) under
    ``torch.compile`` as one graph (feed-forward PPO only): the step is written with
    ``torch.func.grad`` and a traceable clip and Adam on the optimiser's own state
    (``PPO._whole_minibatch_step``); data-parallel training compiles the eager step instead (its
    gradients are averaged in backward hooks). Numerics match the eager step within float
    tolerance, not bit for bit. On this project's 2-core CPU the recipes' updates run 1.5x
    (HalfCheetah: 256x3 ELU, 10 x 24 minibatches of 64) to 3.0x (Cartpole-Swingup: 64x64 tanh, 10 x
    32 of 64) faster (BENCHMARKS.md, "Session 27"); the first update pays the compile (~20 s from inductor's cache,
    about a minute cold). Off by default: a short run may not earn the compile back."""
    compile_mode: str = "default"
    """``torch.compile`` mode when ``compile``: ``reduce-overhead`` also captures the step in CUDA
    graphs on CUDA (launch overhead gone; needs static shapes, which PPO's minibatches have)."""

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
        if self.memory not in MEMORIES:
            raise ValueError(f"memory: unknown {self.memory!r}; expected one of {', '.join(MEMORIES)}")
        if self.history_encoder not in HISTORY_ENCODERS:
            raise ValueError(
                f"history_encoder: unknown {self.history_encoder!r}; expected one of {', '.join(HISTORY_ENCODERS)}"
            )
        for name in ("memory_hidden", "memory_layers", "history_kernel"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode: unknown {self.compile_mode!r}; expected one of {', '.join(COMPILE_MODES)}")
        if self.compile and self.memory != "none":
            raise ValueError(
                f"compile: supported for the feed-forward PPO only (memory=none), got memory={self.memory!r}; "
                "recurrent chunks re-run a cuDNN memory whose update runs eagerly"
            )
        if self.bptt_length is not None and int(self.bptt_length) < 1:
            raise ValueError(f"bptt_length: expected an integer >= 1 or None, got {self.bptt_length}")
        if self.history_encoder == "conv" and int(self.history_frames) < 1:
            raise ValueError(
                f"history_frames: expected the history group's frame count (>= 1) with history_encoder=conv, "
                f"got {self.history_frames}"
            )
        self.actor_hidden = tuple(self.actor_hidden)
        self.critic_hidden = tuple(self.critic_hidden)
        self.history_channels = tuple(self.history_channels)

    @property
    def chunk_length(self) -> int:
        """Steps per truncated-BPTT chunk: ``bptt_length``, at most the whole rollout (a longer
        chunk would only add padding).
        """
        steps = int(self.num_steps)
        return min(int(self.bptt_length), steps) if self.bptt_length is not None else steps
