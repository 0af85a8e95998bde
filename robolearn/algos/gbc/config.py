"""Generative behaviour cloning configuration: diffusion and flow-matching policies over action chunks."""

from __future__ import annotations

import math
from dataclasses import dataclass

from robolearn.nn.generative import BACKBONES
from robolearn.spec.chunking import ENSEMBLES


def _int_at_least(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")


def _finite(name: str, value: object, low: float, *, strict: bool, high: float = math.inf, high_strict: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        v = float(value)
        ok = (v > low if strict else v >= low) and (v < high if high_strict else v <= high)
    if not ok:
        lo = f"> {low}" if strict else f">= {low}"
        hi = "" if math.isinf(high) else (f" and < {high}" if high_strict else f" and <= {high}")
        raise ValueError(f"{name}: expected a finite number {lo}{hi}, got {value!r}")


@dataclass
class GenerativeBCConfig:
    """Fields shared by the diffusion and flow policies (defaults: Diffusion Policy's state-based
    recipe, Chi et al. 2023, sized for CPUs where it differs).
    """

    model: str = "flow"
    """The generative model: ``diffusion`` (DDPM training, DDIM sampling), ``flow`` (rectified flow,
    Euler sampling) or ``shortcut`` (a flow that also samples in 1-4 steps)."""
    backbone: str = "mlp"
    """``mlp`` or ``unet`` (a 1-D temporal U-Net over the chunk, Diffusion Policy's backbone)."""
    hidden: tuple[int, ...] = (256, 256, 256)
    """MLP backbone widths."""
    unet_channels: tuple[int, ...] = (64, 128)
    """U-Net channels per level (``horizon`` must be a multiple of ``2 ** (levels - 1)``)."""
    time_embed_dim: int = 32
    """Width of the sinusoidal embedding of the noise level (and of a shortcut's step size)."""
    horizon: int = 16
    """Actions predicted per plan, ``H`` (Diffusion Policy: 16)."""
    execute: int = 8
    """Actions played per plan, ``k <= H`` (Diffusion Policy's ``n_action_steps``: 8); must be 1
    with ``ensemble=exp``."""
    obs_history: int = 2
    """Observations the policy is conditioned on, newest last (Diffusion Policy's ``n_obs_steps``: 2)."""
    ensemble: str = "none"
    """``none`` (play ``execute`` actions per plan) or ``exp`` (replan every step and play ACT's
    exponentially weighted mean of the chunks covering the step)."""
    ensemble_decay: float = 0.01
    """ACT's ``m``: weights ``exp(-m * i)``, ``i = 0`` the oldest prediction."""
    diffusion_steps: int = 100
    """DDPM training steps ``T`` (diffusion only; Diffusion Policy: 100)."""
    schedule: str = "cosine"
    """DDPM noise schedule, ``cosine`` (Diffusion Policy's ``squaredcos_cap_v2``) or ``linear``."""
    sample_steps: int = 10
    """Denoising steps at inference: DDIM steps for diffusion (<= ``diffusion_steps``), Euler steps
    for flows. One DDIM step from pure noise is poor (the last training step keeps almost no signal,
    so it amplifies any prediction error); for one-step control use ``one_step_head`` or a shortcut
    flow, and power-of-two step counts for a shortcut flow (the step sizes it trains)."""
    lr: float = 1e-4
    """AdamW learning rate (Diffusion Policy: 1e-4)."""
    weight_decay: float = 1e-6
    """AdamW weight decay (Diffusion Policy: 1e-6)."""
    batch_size: int = 256
    """(observation-history, action-chunk) samples per gradient step (Diffusion Policy: 256)."""
    grad_clip: float = 10.0
    """Largest gradient norm (LeRobot: 10); 0 disables clipping."""
    ema: float = 0.9999
    """Largest decay of the exponential moving average of the weights that acts, checkpoints and
    exports (Diffusion Policy's EMA: decay ``min(ema, 1 - (1 + n) ** -0.75)`` after ``n`` updates,
    so it warms up); 0 disables it (the trained weights act)."""
    mask_padding: bool = False
    """Leave the chunk steps past an episode's end (padded by repeating its last action) out of the
    loss (LeRobot's ``do_mask_loss_for_padding``); False trains on the repeated action, as
    Diffusion Policy and LeRobot do by default (the policy learns to hold still at the end)."""
    one_step_head: bool = False
    """Also distil a one-step flow head from the multi-step sampler (RL-100's consistency step):
    ``agent.one_step`` maps ``(cond, z)`` in one Euler step to what ``sample_steps`` steps of the
    (EMA) model give from the same ``z``."""
    one_step_lr: float | None = None
    """AdamW learning rate of the one-step head (``None``: ``lr``)."""
    one_step_weight: float = 1.0
    """Weight of the one-step distillation loss (the head has its own optimiser, so this scales its
    steps like a learning rate under SGD; under AdamW it matters only against ``weight_decay``);
    0 with ``one_step_head`` keeps the head untrained."""
    obs_group: str = "policy"
    """Observation group the policy reads (one frame per step)."""

    def __post_init__(self) -> None:
        """Validate every field; a bad value names the field, the value and what was expected."""
        if self.model not in self._models():
            raise ValueError(f"model: expected one of {', '.join(self._models())}, got {self.model!r}")
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone: expected one of {', '.join(BACKBONES)}, got {self.backbone!r}")
        self.hidden = tuple(self.hidden)
        self.unet_channels = tuple(self.unet_channels)
        for name, widths in (("hidden", self.hidden), ("unet_channels", self.unet_channels)):
            if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
                raise ValueError(f"{name}: expected a non-empty list of integers >= 1, got {list(widths)!r}")
        _int_at_least("time_embed_dim", self.time_embed_dim, 4)
        if self.time_embed_dim % 2:
            raise ValueError(f"time_embed_dim: expected an even number, got {self.time_embed_dim}")
        _int_at_least("horizon", self.horizon, 1)
        _int_at_least("execute", self.execute, 1)
        if self.execute > self.horizon:
            raise ValueError(f"execute: expected 1..horizon ({self.horizon}), got {self.execute}")
        _int_at_least("obs_history", self.obs_history, 1)
        if self.ensemble not in ENSEMBLES:
            raise ValueError(f"ensemble: expected one of {', '.join(ENSEMBLES)}, got {self.ensemble!r}")
        if self.ensemble == "exp" and self.execute != 1:
            raise ValueError(f"execute: ensemble=exp replans every step, so execute must be 1, got {self.execute}")
        _finite("ensemble_decay", self.ensemble_decay, 0.0, strict=False)
        if self.backbone == "unet" and self.horizon % 2 ** (len(self.unet_channels) - 1):
            raise ValueError(
                f"horizon: a U-Net with {len(self.unet_channels)} levels needs a multiple of "
                f"{2 ** (len(self.unet_channels) - 1)}, got {self.horizon}"
            )
        _int_at_least("diffusion_steps", self.diffusion_steps, 2)
        if self.schedule not in ("cosine", "linear"):
            raise ValueError(f"schedule: expected cosine or linear, got {self.schedule!r}")
        _int_at_least("sample_steps", self.sample_steps, 1)
        if self.model == "diffusion" and self.sample_steps > self.diffusion_steps:
            raise ValueError(f"sample_steps: DDIM visits at most diffusion_steps ({self.diffusion_steps}), got {self.sample_steps}")
        _finite("lr", self.lr, 0.0, strict=True)
        _finite("weight_decay", self.weight_decay, 0.0, strict=False)
        _int_at_least("batch_size", self.batch_size, 1)
        _finite("grad_clip", self.grad_clip, 0.0, strict=False)
        _finite("ema", self.ema, 0.0, strict=False, high=1.0, high_strict=True)
        if self.one_step_lr is not None:
            _finite("one_step_lr", self.one_step_lr, 0.0, strict=True)
        _finite("one_step_weight", self.one_step_weight, 0.0, strict=False)
        if not isinstance(self.obs_group, str) or not self.obs_group:
            raise ValueError(f"obs_group: expected an observation group name, got {self.obs_group!r}")

    @staticmethod
    def _models() -> tuple[str, ...]:
        return ("diffusion", "flow", "shortcut")


@dataclass
class DiffusionBCConfig(GenerativeBCConfig):
    """``algo=diffusion``: Diffusion Policy (DDPM training with epsilon prediction, DDIM sampling)."""

    model: str = "diffusion"
    """Always ``diffusion``."""
    backbone: str = "unet"
    """``unet`` (Diffusion Policy's 1-D temporal U-Net) or ``mlp``."""

    @staticmethod
    def _models() -> tuple[str, ...]:
        return ("diffusion",)


@dataclass
class FlowBCConfig(GenerativeBCConfig):
    """``algo=flow``: a flow-matching policy (rectified flow, or its shortcut variant for 1-4 steps)."""

    model: str = "flow"
    """``flow`` (rectified flow) or ``shortcut`` (shortcut model: also samples in 1, 2, 4 steps)."""

    @staticmethod
    def _models() -> tuple[str, ...]:
        return ("flow", "shortcut")


__all__ = ["DiffusionBCConfig", "FlowBCConfig", "GenerativeBCConfig"]
