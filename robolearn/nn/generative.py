"""Generative action models over action chunks: diffusion (DDPM/DDIM), flow matching (rectified
flow) and its shortcut variant, with MLP and 1-D U-Net backbones.

Conventions shared by every learner built on this module:

* An **action chunk** is a tensor ``[B, H, A]``: ``H`` future actions of dimension ``A``, in the
  learner's normalised action space (``[-1, 1]`` per dimension; the learner maps to env units).
* A **condition** is a tensor ``[B, C]``: the (normalised, flattened) observation history.
* A **backbone** is called ``net(x, t, cond, d)``: ``x`` a noisy chunk ``[B, H, A]``, ``t`` the
  noise level ``[B]`` in ``[0, 1]``, ``cond`` ``[B, C]``, ``d`` the step size ``[B]`` of a shortcut
  model (``None`` for a plain model); it returns a chunk-shaped tensor (a velocity for flows, the
  noise for diffusion).
* **Flow time** runs from noise to data: ``x_t = (1 - t) x0 + t x1`` with ``x0 ~ N(0, I)`` and
  ``x1`` the data chunk; the velocity target is ``x1 - x0`` (Liu et al. 2022, rectified flow; the
  convention of ReinFlow and flow Q-learning). Euler sampling takes ``K`` steps of ``1/K``.
* **Diffusion** is DDPM with ``T`` training steps and epsilon prediction (Ho et al. 2020), the
  cosine schedule of Nichol & Dhariwal (2021); ``t = k / T`` is what the backbone sees. Sampling is
  DDIM (Song et al. 2021) over ``S`` of the ``T`` steps; ``eta = 1`` over all ``T`` steps is DDPM.
* Every sampler takes **its noise as input**: the initial chunk ``noise`` ``[B, H, A]`` and, for a
  stochastic sampler, ``step_noise`` ``[B, S, H, A]``. Samplers are then deterministic functions of
  their inputs, so they export to ONNX with a fixed number of steps and the noise as an explicit
  input, and the same noise gives the same actions everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from robolearn.nn.mlp import MLP

BACKBONES = ("mlp", "unet")
"""Backbone names a config may use."""


# -- embeddings ----------------------------------------------------------------------------------
class SinusoidalEmbedding(nn.Module):
    """``[B]`` scalars in ``[0, 1]`` to ``[B, dim]`` sines and cosines (transformer frequencies,
    scaled by 1000 so that ``[0, 1]`` spans the table as integer diffusion steps would).
    """

    def __init__(self, dim: int) -> None:
        """``dim`` even and >= 4."""
        super().__init__()
        if dim < 4 or dim % 2:
            raise ValueError(f"time_embed_dim: expected an even number >= 4, got {dim}")
        half = dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / max(half - 1, 1))
        self.register_buffer("freqs", freqs, persistent=False)
        self.dim = dim

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """The embedding of ``t`` ``[B]``."""
        arg = 1000.0 * t.reshape(-1, 1).to(self.freqs.dtype) * self.freqs
        return torch.cat([arg.sin(), arg.cos()], dim=-1)


class _Conditioning(nn.Module):
    """Time (and step size) embedding concatenated with the condition, through a small MLP."""

    def __init__(self, cond_dim: int, time_dim: int, out_dim: int, step_conditioned: bool) -> None:
        super().__init__()
        self.time = SinusoidalEmbedding(time_dim)
        self.step_conditioned = step_conditioned
        in_dim = time_dim * (2 if step_conditioned else 1) + cond_dim
        self.mlp = MLP(in_dim, out_dim, hidden=(out_dim,), activation="silu")

    def forward(self, t: torch.Tensor, cond: torch.Tensor, d: torch.Tensor | None) -> torch.Tensor:
        parts = [self.time(t).to(cond.dtype), cond]
        if self.step_conditioned:
            if d is None:
                raise ValueError("a shortcut backbone needs the step size d ([B] in [0, 1])")
            parts.insert(1, self.time(d).to(cond.dtype))
        return self.mlp(torch.cat(parts, dim=-1))


# -- backbones -----------------------------------------------------------------------------------
class ChunkMLP(nn.Module):
    """An MLP backbone: the flattened chunk, the conditioning embedding, out a flattened chunk."""

    def __init__(self, horizon: int, action_dim: int, cond_dim: int, hidden: tuple[int, ...] = (256, 256, 256),
                 time_embed_dim: int = 32, step_conditioned: bool = False) -> None:
        """A backbone for ``[B, horizon, action_dim]`` chunks given ``[B, cond_dim]`` conditions."""
        super().__init__()
        _check_dims(horizon, action_dim, cond_dim)
        self.horizon, self.action_dim, self.cond_dim = horizon, action_dim, cond_dim
        self.step_conditioned = step_conditioned
        embed = max(hidden[0] // 2, 32) if hidden else 64
        self.embed = _Conditioning(cond_dim, time_embed_dim, embed, step_conditioned)
        self.body = MLP(horizon * action_dim + embed, horizon * action_dim, hidden=tuple(hidden), activation="silu")

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, d: torch.Tensor | None = None) -> torch.Tensor:
        """The backbone's output for noisy chunks ``x`` (module doc)."""
        h = self.embed(t, cond, d)
        out = self.body(torch.cat([x.reshape(x.shape[0], -1), h], dim=-1))
        return out.reshape(x.shape)


class _ResBlock1D(nn.Module):
    """Two conv-GroupNorm-SiLU layers, FiLM-modulated by the conditioning, with a skip."""

    def __init__(self, c_in: int, c_out: int, embed: int, kernel: int = 5) -> None:
        super().__init__()
        groups = math.gcd(8, c_out)
        self.conv1 = nn.Sequential(nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), nn.GroupNorm(groups, c_out), nn.SiLU())
        self.conv2 = nn.Sequential(nn.Conv1d(c_out, c_out, kernel, padding=kernel // 2), nn.GroupNorm(groups, c_out), nn.SiLU())
        self.film = nn.Linear(embed, 2 * c_out)
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        y = self.conv1(x)
        scale, shift = self.film(h).unsqueeze(-1).chunk(2, dim=1)
        y = self.conv2(y * (1.0 + scale) + shift)
        return y + self.skip(x)


class ChunkUNet1D(nn.Module):
    """A 1-D U-Net over the chunk's time axis (actions as channels), FiLM-conditioned on time and
    observation (the Diffusion Policy backbone of Chi et al. 2023, sized for CPUs). ``horizon`` must
    be divisible by ``2 ** (len(channels) - 1)``.
    """

    def __init__(self, horizon: int, action_dim: int, cond_dim: int, channels: tuple[int, ...] = (64, 128),
                 time_embed_dim: int = 32, step_conditioned: bool = False, kernel: int = 5) -> None:
        """A backbone for ``[B, horizon, action_dim]`` chunks given ``[B, cond_dim]`` conditions."""
        super().__init__()
        _check_dims(horizon, action_dim, cond_dim)
        if not channels:
            raise ValueError("unet_channels: expected at least one level, got ()")
        factor = 2 ** (len(channels) - 1)
        if horizon % factor:
            raise ValueError(f"horizon: a U-Net with {len(channels)} levels needs a multiple of {factor}, got {horizon}")
        self.horizon, self.action_dim, self.cond_dim = horizon, action_dim, cond_dim
        self.step_conditioned = step_conditioned
        embed = 4 * time_embed_dim
        self.embed = _Conditioning(cond_dim, time_embed_dim, embed, step_conditioned)
        self.down = nn.ModuleList()
        self.pool = nn.ModuleList()
        last = action_dim
        for i, c in enumerate(channels):
            self.down.append(_ResBlock1D(last, c, embed, kernel))
            self.pool.append(nn.Conv1d(c, c, 3, stride=2, padding=1) if i < len(channels) - 1 else nn.Identity())
            last = c
        self.mid = _ResBlock1D(last, last, embed, kernel)
        self.up = nn.ModuleList()
        self.unpool = nn.ModuleList()
        for c in reversed(channels[:-1]):
            self.unpool.append(nn.ConvTranspose1d(last, last, 4, stride=2, padding=1))
            self.up.append(_ResBlock1D(last + c, c, embed, kernel))
            last = c
        self.out = nn.Conv1d(last, action_dim, 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, d: torch.Tensor | None = None) -> torch.Tensor:
        """The backbone's output for noisy chunks ``x`` (module doc)."""
        h = self.embed(t, cond, d)
        y = x.transpose(1, 2)  # [B, A, H]: actions are channels, the chunk is the sequence
        skips = []
        for block, pool in zip(self.down, self.pool, strict=True):
            y = block(y, h)
            skips.append(y)
            y = pool(y)
        y = self.mid(y, h)
        for unpool, block, skip in zip(self.unpool, self.up, reversed(skips[:-1]), strict=False):
            y = block(torch.cat([unpool(y), skip], dim=1), h)
        return self.out(y).transpose(1, 2)


def make_backbone(kind: str, horizon: int, action_dim: int, cond_dim: int, *, hidden: tuple[int, ...] = (256, 256, 256),
                  unet_channels: tuple[int, ...] = (64, 128), time_embed_dim: int = 32,
                  step_conditioned: bool = False) -> nn.Module:
    """The backbone ``kind`` (``"mlp"`` or ``"unet"``) for the given chunk and condition sizes."""
    if kind == "mlp":
        return ChunkMLP(horizon, action_dim, cond_dim, tuple(hidden), time_embed_dim, step_conditioned)
    if kind == "unet":
        return ChunkUNet1D(horizon, action_dim, cond_dim, tuple(unet_channels), time_embed_dim, step_conditioned)
    raise ValueError(f"backbone: unknown {kind!r}; expected one of {', '.join(BACKBONES)}")


def _check_dims(horizon: int, action_dim: int, cond_dim: int) -> None:
    for name, value in (("horizon", horizon), ("action_dim", action_dim), ("cond_dim", cond_dim)):
        if value < 1:
            raise ValueError(f"{name}: expected >= 1, got {value}")


# -- flow matching -------------------------------------------------------------------------------
def _weighted_mean(err: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean of the elementwise error ``err`` ``[B, H, A]``: plain, or weighted by ``weight`` ``[B]``
    (per sample) or ``[B, H]`` (per chunk step, e.g. a mask of padded steps), over the weight's sum.
    """
    if weight is None:
        return err.mean()
    w = weight.to(err.dtype)
    if w.dim() == 1:
        w = w.reshape(-1, *([1] * (err.dim() - 1))).expand_as(err)
    elif w.dim() == 2 and err.dim() == 3:
        w = w.unsqueeze(-1).expand_as(err)
    else:
        raise ValueError(f"weight: expected [B] or [B, H] for errors {tuple(err.shape)}, got {tuple(weight.shape)}")
    return (err * w).sum() / w.sum().clamp_min(1e-8)


def flow_matching_loss(net: nn.Module, actions: torch.Tensor, cond: torch.Tensor, *,
                       noise: torch.Tensor | None = None, t: torch.Tensor | None = None,
                       weight: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Rectified-flow loss: ``|net(x_t, t, cond) - (x1 - x0)|^2`` averaged over the chunk, with
    ``x1 = actions``, ``x0 = noise`` (standard normal when not given) and ``t ~ U[0, 1)`` (when not
    given), drawn from ``generator`` (the global stream when ``None``). ``weight`` ``[B]`` or
    ``[B, H]`` weights samples or chunk steps (e.g. a padding mask); the mean is over its sum.
    """
    x1 = actions
    x0 = torch.randn(x1.shape, generator=generator, device=x1.device, dtype=x1.dtype) if noise is None else noise
    if t is None:
        t = torch.rand(x1.shape[0], generator=generator, device=x1.device, dtype=x1.dtype)
    tt = t.reshape(-1, *([1] * (x1.dim() - 1)))
    xt = (1.0 - tt) * x0 + tt * x1
    kwargs = {"d": torch.zeros_like(t)} if getattr(net, "step_conditioned", False) else {}
    return _weighted_mean((net(xt, t, cond, **kwargs) - (x1 - x0)).pow(2), weight)


SHORTCUT_LOG2_STEPS = 7
"""Shortcut models train step sizes ``2d`` in ``1, 1/2, ..., 2^-(L-1)`` (``L`` this constant, the
default of :func:`shortcut_loss`): 1 to 64 Euler steps. A step finer than ``2^-(L-1)`` is the plain
flow-matching velocity (``d = 0``), both as the base of the self-consistency targets and in
:func:`flow_sample`, so the recursion is grounded in what flow matching trains.
"""


def _shortcut_d(d: torch.Tensor, max_log2_steps: int) -> torch.Tensor:
    """``d`` as the backbone is told it: 0 (flow matching) below the finest trained step size."""
    return torch.where(d < 2.0 ** -(max_log2_steps - 1), torch.zeros_like(d), d)


def shortcut_loss(net: nn.Module, actions: torch.Tensor, cond: torch.Tensor, *,
                  max_log2_steps: int = SHORTCUT_LOG2_STEPS, consistency_fraction: float = 0.25,
                  weight: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shortcut-model loss (Frans et al. 2025, "One Step Diffusion via Shortcut Models"): flow
    matching at step size ``d = 0`` on part of the batch, and on the rest (``consistency_fraction``)
    self-consistency: one step of ``2d`` equals two steps of ``d`` (their mean velocity, no gradient
    through the target), for ``d = 2^-j``, ``j`` in ``1..max_log2_steps`` and ``t`` on the ``2d`` grid;
    the finest half step ``2^-max_log2_steps`` is queried as flow matching (``d = 0``,
    :data:`SHORTCUT_LOG2_STEPS`). The model then samples in 1, 2, 4, ... steps. ``weight`` as in
    :func:`flow_matching_loss`; randomness from ``generator``.
    """
    if not getattr(net, "step_conditioned", False):
        raise ValueError("shortcut_loss needs a step-conditioned backbone (step_conditioned=True)")
    if not 0.0 < consistency_fraction < 1.0:
        raise ValueError(f"consistency_fraction: expected a value in (0, 1), got {consistency_fraction}")
    b = actions.shape[0]
    n_sc = max(1, int(round(b * consistency_fraction)))
    w_sc = None if weight is None else weight[:n_sc]
    w_fm = None if weight is None else weight[n_sc:]
    fm = (flow_matching_loss(net, actions[n_sc:], cond[n_sc:], weight=w_fm, generator=generator)
          if b - n_sc > 0 else actions.new_zeros(()))
    x1, c = actions[:n_sc], cond[:n_sc]
    dev, dt = x1.device, x1.dtype
    j = torch.randint(1, max_log2_steps + 1, (n_sc,), device=dev, generator=generator)
    d = torch.pow(2.0, -j.to(dt))  # the half step; the model is trained at 2d
    # t on the grid of 2d steps: t = m * 2d, m in [0, 1/(2d))
    m = torch.floor(torch.rand(n_sc, device=dev, dtype=dt, generator=generator) / (2.0 * d))
    t = m * 2.0 * d
    x0 = torch.randn(x1.shape, generator=generator, device=dev, dtype=dt)
    tt = t.reshape(-1, 1, 1)
    xt = (1.0 - tt) * x0 + tt * x1
    with torch.no_grad():
        dq = _shortcut_d(d, max_log2_steps)
        v1 = net(xt, t, c, dq)
        x_mid = xt + d.reshape(-1, 1, 1) * v1
        v2 = net(x_mid, t + d, c, dq)
        target = 0.5 * (v1 + v2)
    sc = _weighted_mean((net(xt, t, c, 2.0 * d) - target).pow(2), w_sc)
    frac = n_sc / b
    return (1.0 - frac) * fm + frac * sc


def flow_velocity(net: nn.Module, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, steps: int) -> torch.Tensor:
    """The velocity ``net`` gives at ``(x, t)`` for an Euler step of ``1 / steps``: a shortcut backbone
    is told that step size, or 0 (flow matching) below the finest one it trained on
    (:data:`SHORTCUT_LOG2_STEPS`); a plain flow gets no step size. The one rule of the samplers and of
    the RL chains built on them, so their steps are the same.
    """
    if not getattr(net, "step_conditioned", False):
        return net(x, t, cond)
    return net(x, t, cond, _shortcut_d(torch.full_like(t, 1.0 / steps), SHORTCUT_LOG2_STEPS))


def flow_sample(net: nn.Module, cond: torch.Tensor, noise: torch.Tensor, steps: int,
                clip: float | None = None) -> torch.Tensor:
    """Euler integration of the flow from ``noise`` (``t = 0``) to a chunk (``t = 1``) in ``steps``
    equal steps; a shortcut backbone is told the step size (0 for steps finer than it was trained
    on, :data:`SHORTCUT_LOG2_STEPS`). ``clip`` bounds the result.
    """
    if steps < 1:
        raise ValueError(f"steps: expected >= 1, got {steps}")
    x = noise
    dt = 1.0 / steps
    b = noise.shape[0]
    for k in range(steps):
        t = torch.full((b,), k * dt, device=noise.device, dtype=noise.dtype)
        x = x + dt * flow_velocity(net, x, t, cond, steps)
    return x.clamp(-clip, clip) if clip is not None else x


# -- diffusion -----------------------------------------------------------------------------------
@dataclass
class DiffusionSchedule:
    """A DDPM noise schedule of ``T`` steps: ``betas[k]`` and ``alphas_cumprod[k]`` for ``k`` in
    ``0..T-1`` (``alphas_cumprod[k]`` is the signal fraction after step ``k``).
    """

    betas: torch.Tensor
    alphas_cumprod: torch.Tensor

    @property
    def num_steps(self) -> int:
        """``T``."""
        return int(self.betas.shape[0])

    @classmethod
    def cosine(cls, num_steps: int = 100, s: float = 0.008, max_beta: float = 0.999) -> DiffusionSchedule:
        """Nichol & Dhariwal's cosine schedule (``alpha_bar(t) = cos^2((t + s)/(1 + s) * pi / 2)``)."""
        if num_steps < 2:
            raise ValueError(f"diffusion_steps: expected >= 2, got {num_steps}")
        x = torch.linspace(0, num_steps, num_steps + 1, dtype=torch.float64)
        ac = torch.cos(((x / num_steps) + s) / (1 + s) * math.pi * 0.5) ** 2
        ac = ac / ac[0]
        betas = (1 - ac[1:] / ac[:-1]).clamp(max=max_beta)
        return cls(betas.float(), torch.cumprod(1.0 - betas, 0).float())

    @classmethod
    def linear(cls, num_steps: int = 100, beta_start: float = 1e-4, beta_end: float = 0.02) -> DiffusionSchedule:
        """Ho et al.'s linear schedule, rescaled to ``num_steps``."""
        if num_steps < 2:
            raise ValueError(f"diffusion_steps: expected >= 2, got {num_steps}")
        scale = 1000.0 / num_steps
        betas = torch.linspace(scale * beta_start, min(scale * beta_end, 0.999), num_steps, dtype=torch.float64)
        return cls(betas.float(), torch.cumprod(1.0 - betas, 0).float())

    def to(self, device: torch.device | str) -> DiffusionSchedule:
        """The schedule on ``device``."""
        return DiffusionSchedule(self.betas.to(device), self.alphas_cumprod.to(device))

    def timesteps(self, steps: int) -> list[int]:
        """The ``steps`` training steps a DDIM sampler visits, descending (``T - 1`` first, ``0`` last
        when ``steps = T``): evenly spaced.
        """
        if not 1 <= steps <= self.num_steps:
            raise ValueError(f"steps: expected 1..{self.num_steps} (the schedule's steps), got {steps}")
        grid = torch.linspace(self.num_steps - 1, 0, steps).round().long()
        return [int(k) for k in grid]


def ddpm_loss(net: nn.Module, actions: torch.Tensor, cond: torch.Tensor, schedule: DiffusionSchedule, *,
              noise: torch.Tensor | None = None, k: torch.Tensor | None = None,
              weight: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Epsilon-prediction loss: ``|net(x_k, k/T, cond) - eps|^2`` with
    ``x_k = sqrt(ab_k) x + sqrt(1 - ab_k) eps``, ``k`` uniform over the ``T`` steps; ``weight`` as in
    :func:`flow_matching_loss`; randomness from ``generator``.
    """
    eps = torch.randn(actions.shape, generator=generator, device=actions.device, dtype=actions.dtype) if noise is None else noise
    if k is None:
        k = torch.randint(0, schedule.num_steps, (actions.shape[0],), device=actions.device, generator=generator)
    ab = schedule.alphas_cumprod.to(actions.device, actions.dtype)[k].reshape(-1, *([1] * (actions.dim() - 1)))
    xk = ab.sqrt() * actions + (1.0 - ab).sqrt() * eps
    t = k.to(actions.dtype) / schedule.num_steps
    return _weighted_mean((net(xk, t, cond) - eps).pow(2), weight)


def ddim_step_params(schedule: DiffusionSchedule, k: int, k_prev: int, eta: float) -> tuple[float, float, float]:
    """``(sqrt(ab_k), sqrt(ab_prev), sigma)`` of one DDIM step from ``k`` to ``k_prev`` (``-1``: to the
    data, ``ab = 1``); ``sigma = eta * sqrt((1 - ab_prev) / (1 - ab_k) * (1 - ab_k / ab_prev))``.
    """
    ac = schedule.alphas_cumprod
    ab = float(ac[k])
    ab_prev = float(ac[k_prev]) if k_prev >= 0 else 1.0
    sigma = eta * math.sqrt(max((1 - ab_prev) / (1 - ab) * (1 - ab / ab_prev), 0.0))
    return math.sqrt(ab), math.sqrt(ab_prev), sigma


def ddim_mean(net: nn.Module, x: torch.Tensor, cond: torch.Tensor, schedule: DiffusionSchedule, k: int, k_prev: int,
              eta: float, clip: float | None = None) -> tuple[torch.Tensor, float]:
    """The mean of ``x_{k_prev}`` given ``x_k`` under DDIM, and its standard deviation ``sigma``:
    ``x_prev = sqrt(ab_prev) x0_hat + sqrt(1 - ab_prev - sigma^2) eps_hat + sigma z``, with
    ``x0_hat`` from the predicted noise (clipped to ``clip`` when given, re-deriving ``eps_hat``).
    """
    s_ab, s_ab_prev, sigma = ddim_step_params(schedule, k, k_prev, eta)
    t = torch.full((x.shape[0],), k / schedule.num_steps, device=x.device, dtype=x.dtype)
    eps = net(x, t, cond)
    x0 = (x - math.sqrt(1 - s_ab**2) * eps) / s_ab
    if clip is not None:
        x0 = x0.clamp(-clip, clip)
        eps = (x - s_ab * x0) / math.sqrt(1 - s_ab**2)
    direction = math.sqrt(max(1 - s_ab_prev**2 - sigma**2, 0.0))
    return s_ab_prev * x0 + direction * eps, sigma


def ddim_sample(net: nn.Module, cond: torch.Tensor, noise: torch.Tensor, schedule: DiffusionSchedule, steps: int, *,
                eta: float = 0.0, step_noise: torch.Tensor | None = None, clip: float | None = 1.0) -> torch.Tensor:
    """DDIM sampling from ``noise`` over ``steps`` evenly spaced steps of the schedule (``eta = 0``:
    deterministic; ``eta = 1`` with ``steps = T``: DDPM ancestral sampling). ``step_noise``
    ``[B, steps, H, A]`` is each step's ``z`` (drawn when ``None`` and ``eta > 0``).
    """
    ks = schedule.timesteps(steps)
    if eta > 0 and step_noise is None:
        step_noise = torch.randn(noise.shape[0], steps, *noise.shape[1:], device=noise.device, dtype=noise.dtype)
    x = noise
    for i, k in enumerate(ks):
        k_prev = ks[i + 1] if i + 1 < len(ks) else -1
        mean, sigma = ddim_mean(net, x, cond, schedule, k, k_prev, eta, clip)
        x = mean + sigma * step_noise[:, i] if (sigma > 0 and step_noise is not None) else mean
    return x.clamp(-clip, clip) if clip is not None else x


# -- samplers as modules (export) -----------------------------------------------------------------
class FlowSampler(nn.Module):
    """``(cond, noise) -> chunk``: a flow backbone integrated in a fixed number of Euler steps."""

    def __init__(self, net: nn.Module, steps: int, clip: float | None = 1.0) -> None:
        """Wrap ``net`` with ``steps`` Euler steps."""
        super().__init__()
        self.net, self.steps, self.clip = net, int(steps), clip

    def forward(self, cond: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The chunk the flow carries ``noise`` to."""
        return flow_sample(self.net, cond, noise, self.steps, self.clip)


class DDIMSampler(nn.Module):
    """``(cond, noise[, step_noise]) -> chunk``: a diffusion backbone sampled by DDIM in a fixed
    number of steps (``eta > 0`` takes ``step_noise`` ``[B, steps, H, A]``).
    """

    def __init__(self, net: nn.Module, schedule: DiffusionSchedule, steps: int, eta: float = 0.0,
                 clip: float | None = 1.0) -> None:
        """Wrap ``net`` with a ``steps``-step DDIM sampler."""
        super().__init__()
        schedule.timesteps(steps)  # checks the range
        self.net, self.schedule, self.steps, self.eta, self.clip = net, schedule, int(steps), float(eta), clip

    def forward(self, cond: torch.Tensor, noise: torch.Tensor, step_noise: torch.Tensor | None = None) -> torch.Tensor:
        """The chunk the sampler carries ``noise`` to."""
        return ddim_sample(self.net, cond, noise, self.schedule, self.steps, eta=self.eta, step_noise=step_noise,
                           clip=self.clip)


# -- a chunk model with its normalisation: the contract between the generative learners ------------
MODELS = ("flow", "shortcut", "diffusion")
"""Generative model kinds: rectified flow, shortcut flow (1-4 steps), DDPM/DDIM diffusion."""


@dataclass
class ChunkModelSpec:
    """Everything needed to rebuild a chunk model (its checkpoint's ``"spec"``); plain JSON values."""

    model: str
    """One of :data:`MODELS`."""
    obs_dim: int
    """Width of one observation frame (the policy group)."""
    action_dim: int
    """Action width ``A``."""
    horizon: int = 1
    """Chunk length ``H``."""
    obs_history: int = 1
    """Frames in the condition (``cond_dim = obs_history * obs_dim``)."""
    backbone: str = "mlp"
    """One of :data:`BACKBONES`."""
    hidden: tuple[int, ...] = (256, 256, 256)
    """MLP backbone widths."""
    unet_channels: tuple[int, ...] = (64, 128)
    """U-Net channels per level."""
    time_embed_dim: int = 32
    """Sinusoidal embedding width."""
    diffusion_steps: int = 100
    """DDPM training steps ``T`` (diffusion only)."""
    schedule: str = "cosine"
    """``"cosine"`` or ``"linear"`` (diffusion only)."""

    def __post_init__(self) -> None:
        """Refuse an unknown model, backbone or schedule, naming the field."""
        if self.model not in MODELS:
            raise ValueError(f"model: expected one of {', '.join(MODELS)}, got {self.model!r}")
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone: expected one of {', '.join(BACKBONES)}, got {self.backbone!r}")
        if self.schedule not in ("cosine", "linear"):
            raise ValueError(f"schedule: expected cosine or linear, got {self.schedule!r}")
        self.hidden = tuple(int(h) for h in self.hidden)
        self.unet_channels = tuple(int(c) for c in self.unet_channels)

    @property
    def cond_dim(self) -> int:
        """Width of the condition."""
        return self.obs_history * self.obs_dim

    def to_dict(self) -> dict:
        """Plain JSON values."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: dict) -> ChunkModelSpec:
        """The spec from :meth:`to_dict`'s output."""
        return cls(**data)


class ChunkModel(nn.Module):
    """A generative chunk model in env units: backbone, condition normalisation (per frame mean and
    std of the observation) and the map between env actions (``[low, high]``) and the model's
    ``[-1, 1]``. The state (:meth:`checkpoint`) is what learners hand each other: a flow trained by
    behaviour cloning is the starting point of ReinFlow, of flow Q-learning's BC flow, and of export.
    """

    def __init__(self, spec: ChunkModelSpec, action_low: torch.Tensor | float = -1.0,
                 action_high: torch.Tensor | float = 1.0) -> None:
        """A freshly initialised model of ``spec`` (identity normalisation)."""
        super().__init__()
        self.spec = spec
        self.net = make_backbone(spec.backbone, spec.horizon, spec.action_dim, spec.cond_dim, hidden=spec.hidden,
                                 unet_channels=spec.unet_channels, time_embed_dim=spec.time_embed_dim,
                                 step_conditioned=spec.model == "shortcut")
        low = torch.as_tensor(action_low, dtype=torch.float32).expand(spec.action_dim).clone()
        high = torch.as_tensor(action_high, dtype=torch.float32).expand(spec.action_dim).clone()
        if not bool(torch.all(high > low)):
            raise ValueError(f"action bounds: expected high > low per dimension, got low={low.tolist()} high={high.tolist()}")
        self.register_buffer("action_low", low)
        self.register_buffer("action_high", high)
        self.register_buffer("obs_mean", torch.zeros(spec.obs_dim))
        self.register_buffer("obs_std", torch.ones(spec.obs_dim))
        self.schedule: DiffusionSchedule | None = None
        if spec.model == "diffusion":
            make = DiffusionSchedule.cosine if spec.schedule == "cosine" else DiffusionSchedule.linear
            self.schedule = make(spec.diffusion_steps)

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor, eps: float = 1e-3) -> None:
        """Per-frame observation statistics (``std`` floored at ``eps``)."""
        self.obs_mean.copy_(mean.reshape(-1).to(self.obs_mean))
        self.obs_std.copy_(std.reshape(-1).to(self.obs_std).clamp_min(eps))

    def cond(self, obs_history: torch.Tensor) -> torch.Tensor:
        """The normalised condition of raw stacked frames ``[B, obs_history * obs_dim]`` (oldest first)."""
        b = obs_history.shape[0]
        frames = obs_history.reshape(b, self.spec.obs_history, self.spec.obs_dim)
        return ((frames - self.obs_mean) / self.obs_std).reshape(b, -1)

    def to_env(self, x: torch.Tensor) -> torch.Tensor:
        """Model actions in ``[-1, 1]`` to env units (chunk or single actions)."""
        return self.action_low + (x.clamp(-1.0, 1.0) + 1.0) * 0.5 * (self.action_high - self.action_low)

    def from_env(self, a: torch.Tensor) -> torch.Tensor:
        """Env actions to the model's ``[-1, 1]`` (clipped to the bounds first)."""
        a = torch.maximum(torch.minimum(a, self.action_high), self.action_low)
        return 2.0 * (a - self.action_low) / (self.action_high - self.action_low) - 1.0

    def loss(self, obs_history: torch.Tensor, actions: torch.Tensor, weight: torch.Tensor | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
        """The model's training loss on raw stacked frames and env-unit chunks ``[B, H, A]``;
        ``weight`` ``[B]`` or ``[B, H]`` (a mask of padded chunk steps), noise from ``generator``.
        """
        cond, x1 = self.cond(obs_history), self.from_env(actions)
        if self.spec.model == "flow":
            return flow_matching_loss(self.net, x1, cond, weight=weight, generator=generator)
        if self.spec.model == "shortcut":
            return shortcut_loss(self.net, x1, cond, weight=weight, generator=generator)
        assert self.schedule is not None
        return ddpm_loss(self.net, x1, cond, self.schedule, weight=weight, generator=generator)

    def sample_normalized(self, obs_history: torch.Tensor, noise: torch.Tensor, steps: int,
                          clip: float | None = 1.0) -> torch.Tensor:
        """Chunks in the model's ``[-1, 1]`` space (what :meth:`sample` maps to env units): DDIM with
        ``eta = 0`` for diffusion, Euler for flows; ``clip`` bounds the result (``None``: unbounded,
        e.g. a one-step student's output under a distillation loss, which needs its gradient).
        """
        cond = self.cond(obs_history)
        if self.spec.model == "diffusion":
            assert self.schedule is not None
            return ddim_sample(self.net, cond, noise, self.schedule, steps, eta=0.0, clip=clip)
        return flow_sample(self.net, cond, noise, steps, clip=clip)

    def sample(self, obs_history: torch.Tensor, noise: torch.Tensor, steps: int) -> torch.Tensor:
        """Env-unit chunks ``[B, H, A]`` from raw stacked frames and the initial ``noise`` ``[B, H, A]``
        (deterministic: DDIM with ``eta = 0`` for diffusion, Euler for flows).
        """
        return self.to_env(self.sample_normalized(obs_history, noise, steps))

    def checkpoint(self) -> dict:
        """``{"spec": dict, "state": state_dict}``: what another learner or export rebuilds it from."""
        return {"spec": self.spec.to_dict(), "state": {k: v.detach().clone() for k, v in self.state_dict().items()}}

    @classmethod
    def from_checkpoint(cls, data: dict) -> ChunkModel:
        """The model :meth:`checkpoint` described (on the CPU)."""
        spec = ChunkModelSpec.from_dict(dict(data["spec"]))
        # The bounds become buffers as given: a GPU learner's checkpoint would leave them on its
        # device while the rebuilt network is on the CPU (policy_module, export then fail).
        low, high = (torch.as_tensor(data["state"][k]).detach().cpu() for k in ("action_low", "action_high"))
        model = cls(spec, low, high)
        model.load_state_dict(data["state"])
        return model


class ChunkSampler(nn.Module):
    """``(obs_history, noise) -> chunk``: a :class:`ChunkModel` with a fixed number of steps, env
    units in and out; what export traces (the noise an explicit input).
    """

    def __init__(self, model: ChunkModel, steps: int) -> None:
        """Wrap ``model`` with ``steps`` sampling steps."""
        super().__init__()
        if model.schedule is not None:
            model.schedule.timesteps(steps)
        elif steps < 1:
            raise ValueError(f"steps: expected >= 1, got {steps}")
        self.model, self.steps = model, int(steps)

    def forward(self, obs_history: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The chunk for ``obs_history`` ``[B, obs_history * obs_dim]`` and ``noise`` ``[B, H, A]``."""
        return self.model.sample(obs_history, noise, self.steps)
