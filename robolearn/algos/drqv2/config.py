"""DrQ-v2 (Yarats et al. 2021, "Mastering Visual Continuous Control") configuration."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DrQV2Config:
    """DrQ-v2 hyperparameters; defaults follow the paper's DMC settings (``cfgs/config.yaml`` of the
    authors' code), counted in agent steps (one ``process`` call stores one step per world).

    Action repeat is the task's business (``task_overrides.decimation``), not the learner's: the
    paper's 8 for cart-pole is ``decimation=8`` with ``episode_length=125`` on
    ``Cartpole-Swingup-Pixels`` (see the README's Vision section).
    """

    batch_size: int = 256
    """Transitions per gradient step."""
    buffer_size: int = 1_000_000
    """Replay capacity in (n-step) transitions, over all worlds. With ``replay="frames"`` a transition
    costs about one uint8 frame of the actor's group (84 x 84 x 3 = 21 kB at DrQ-v2's sizes, plus ~60
    bytes of frame numbers and scalars; k frames when the env already stacks k, ``history_length``), and
    each world keeps ``frame_stack + 2 n_step`` frames of slack; with ``replay="stacked"`` two stacks of
    ``frame_stack`` frames (2 x 84 x 84 x 9 = 127 kB). Size it to the machine's memory."""
    replay: str = "frames"
    """``"frames"``: store each rendered frame once and rebuild the stacks when sampling
    (:class:`~robolearn.algos.drqv2.replay.FrameReplay`; a continuing world's observation must be its
    previous ``final_obs``, as the env gives it). ``"stacked"``: store both stacks of every transition
    (:class:`~robolearn.data.replay.ReplayBuffer`); the same batches for the same transitions."""
    gamma: float = 0.99
    """Discount factor per agent step."""
    n_step: int = 3
    """Steps of the n-step return ``sum_i gamma^i r_{t+i} + gamma^n Q'(s_{t+n})``; an episode end
    inside the window shortens it (a termination stops bootstrapping, a time-out bootstraps)."""
    tau: float = 0.01
    """Polyak rate of the target critic: ``target <- (1 - tau) * target + tau * online``."""
    lr: float = 1e-4
    """Adam learning rate of encoder, actor and critic."""
    feature_dim: int = 50
    """Width of the actor's and the critic's trunk (``Linear -> LayerNorm -> tanh``) on the CNN features."""
    hidden_dim: int = 1024
    """Width of the two hidden layers of the actor and of each Q network."""
    num_critics: int = 2
    """Q networks; the target takes their min (double Q)."""
    cnn_channels: int = 32
    """Filters of each convolution of the shared encoder."""
    cnn_layers: int = 4
    """3x3 convolutions of the shared encoder (the first with stride 2)."""
    image_channels: int = 3
    """Channels of one frame of the image group (3: RGB). The agent is given the group's flat size
    only; it reads the frame as square ``H = W = sqrt(size / image_channels)``, HWC."""
    frame_stack: int = 3
    """Frames stacked along the channel axis (oldest first), kept per world by the agent; a new
    episode starts with ``frame_stack`` copies of its first frame."""
    aug_pad: int = 4
    """Random-shift augmentation: largest shift in pixels (0: no augmentation)."""
    std_init: float = 1.0
    """Exploration std of the actor's Gaussian (in the [-1, 1] action scale) at step 0."""
    std_final: float = 0.1
    """Exploration std after ``std_schedule_steps``."""
    std_schedule_steps: int = 500_000
    """Env steps (all worlds counted) over which the std decays linearly from ``std_init`` to ``std_final``."""
    std_clip: float = 0.3
    """Clip of the Gaussian noise on the actions of the actor loss and of the target (target smoothing)."""
    learning_starts: int = 4000
    """Stored transitions before updates begin; until then ``act`` returns uniform random actions. (The
    frame replay counts a transition once its n-step window can no longer change, ``n_step - 1``
    steps after it started.)"""
    update_every: int = 2
    """One gradient step every ``update_every`` calls of :meth:`DrQV2.update` without a batch (the paper: every 2 agent steps)."""
    actor_obs_group: str = "image"
    """Image group the actor (and in pixel mode the critic) reads: uint8 ``[N, H, W, C]``."""
    critic_obs_group: str | None = None
    """``None``: the critic reads the actor's pixels through the shared encoder (DrQ-v2). A state
    group (``"critic"``): asymmetric mode, the critic is an MLP on that group and the encoder is
    trained by the actor loss instead."""
    aux_state_weight: float = 0.0
    """Asymmetric mode only: weight of an auxiliary loss that trains the actor's trunk (and through it
    the encoder) to predict the critic's state group from the pixels (mean squared error of a linear
    head on the trunk's features), added to the actor loss, so the encoder learns state features even
    when the actor loss passes no gradient (a saturated tanh). It does not reliably bring a saturated
    actor back: on Cartpole-Swingup-Pixels one asymmetric seed of three left the 75-return plateau
    within 100k frames with it, none without (BENCHMARKS.md, "Vision")."""

    def __post_init__(self) -> None:
        """Validate ranges; a bad value names the field."""
        positive = ("batch_size", "buffer_size", "n_step", "feature_dim", "hidden_dim", "num_critics", "cnn_channels",
                    "cnn_layers", "image_channels", "frame_stack", "update_every", "std_schedule_steps")  # fmt: skip
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma: expected a value in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau: expected a value in (0, 1], got {self.tau}")
        if self.lr <= 0.0:
            raise ValueError(f"lr: expected > 0, got {self.lr}")
        for name in ("std_init", "std_final", "std_clip"):
            if getattr(self, name) < 0.0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")
        if self.replay not in ("frames", "stacked"):
            raise ValueError(f"replay: expected 'frames' or 'stacked', got {self.replay!r}")
        if self.aug_pad < 0:
            raise ValueError(f"aug_pad: expected >= 0, got {self.aug_pad}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts: expected >= 0, got {self.learning_starts}")
        if not self.aux_state_weight >= 0.0:
            raise ValueError(f"aux_state_weight: expected >= 0, got {self.aux_state_weight}")
        if self.aux_state_weight > 0.0 and not self.asymmetric:
            raise ValueError(
                f"aux_state_weight: {self.aux_state_weight} needs a state group to predict; set critic_obs_group "
                "(asymmetric mode) or leave aux_state_weight at 0"
            )

    @property
    def asymmetric(self) -> bool:
        """Whether the critic reads a state group (actor on pixels, critic on state)."""
        return self.critic_obs_group is not None and self.critic_obs_group != self.actor_obs_group

    def std(self, step: int) -> float:
        """Exploration std after ``step`` env steps: linear from ``std_init`` to ``std_final``, then flat."""
        frac = min(max(step, 0) / self.std_schedule_steps, 1.0)
        return self.std_init + frac * (self.std_final - self.std_init)
