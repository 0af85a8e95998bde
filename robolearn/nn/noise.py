"""Temporally correlated ("coloured") Gaussian exploration noise, one sequence per world.

Off-policy learners explore with noise drawn independently at every control step (white noise).
On tasks where the reward waits behind a sustained push (a pendulum or cart-pole pumped up over
several swings, a sparse goal some distance away), independent draws average out within a few
steps and the agent never reaches the reward. Noise with a power spectrum ``S(f) ∝ 1/f^β`` keeps
the marginal of white noise (standard normal at every step) but correlates successive steps:
``β = 0`` is white, ``β = 1`` pink, ``β = 2`` red (Brownian-like). Eberhard et al., "Pink Noise Is
All You Need: Colored Noise Exploration in Deep Reinforcement Learning" (ICLR 2023), compared
the colours on SAC and MPO over many continuous-control tasks and recommend pink noise as the
default.

Each world holds a sequence of ``length`` samples per action dimension, generated in the frequency
domain (Timmer & König, 1995): Gaussian Fourier coefficients scaled by ``f^(-β/2)`` (frequencies
below ``1/length`` held at ``1/length``), transformed back and divided by the exact standard deviation
of the construction, so every sample is standard normal. :meth:`ColoredNoise.sample` returns the
next sample of every world; a world's sequence is redrawn when it runs out or when
:meth:`ColoredNoise.reset` is told its episode ended, so each episode starts a fresh sequence.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def noise_scales(beta: float, length: int) -> torch.Tensor:
    """Amplitude ``f^(-β/2)`` of each rFFT frequency ``f = k / length``, ``k = 0 .. length // 2``.

    The zero frequency takes the lowest resolved one's amplitude, ``(1 / length)^(-β/2)``: the
    sequence's mean varies between sequences as much as its slowest oscillation.
    """
    freqs = torch.arange(length // 2 + 1, dtype=torch.float64) / length
    freqs[0] = 1.0 / length
    return freqs.pow(-beta / 2.0)


def colored_sequences(
    beta: float, length: int, shape: tuple[int, ...], generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Standard-normal sequences ``[*shape, length]`` with power spectrum ``∝ 1/f^β`` along the last axis.

    The zero-frequency term (and, for even ``length``, the Nyquist term) is real with twice the
    variance of the other coefficients' real and imaginary parts, as the Fourier transform of white
    noise has: with ``β = 0`` the samples are independent standard normals.
    """
    if length < 2:
        raise ValueError(f"length: expected >= 2 samples per sequence, got {length}")
    scales = noise_scales(beta, length).to(device=device, dtype=torch.float32)
    n_freq = scales.shape[0]
    real = torch.randn((*shape, n_freq), generator=generator, device=device)
    imag = torch.randn((*shape, n_freq), generator=generator, device=device)
    real_only = torch.zeros(n_freq, dtype=torch.bool, device=device)
    real_only[0] = True
    if length % 2 == 0:
        real_only[-1] = True
    real = torch.where(real_only, real * math.sqrt(2.0), real)
    imag = torch.where(real_only, torch.zeros_like(imag), imag)
    x = torch.fft.irfft(torch.complex(real * scales, imag * scales), n=length, dim=-1)
    # Variance of each sample of irfft's output (1/length normalisation): the real-only terms enter
    # with weight 1 and variance 2 s^2, every other term twice (itself and its conjugate), as
    # 2 Re(X e^{iθ}) with variance 4 s^2.
    weight = torch.where(real_only, 1.0, 2.0)
    var = (2.0 * weight * scales.square()).sum() / length**2
    return x / var.sqrt()


class ColoredNoise:
    """Per-world coloured noise ``[N, A]``, one sequence of ``length`` steps per world (module doc)."""

    def __init__(
        self, beta: float, length: int, num_worlds: int, action_dim: int, generator: torch.Generator,
        device: torch.device | str,
    ) -> None:
        """Draw the first sequence of every world.

        Args:
            beta: spectral exponent, ``>= 0`` (0 white, 1 pink, 2 red).
            length: samples per sequence; an episode's length makes one sequence per episode.
            num_worlds: N, the worlds acting together.
            action_dim: A.
            generator: the stream every sequence is drawn from (the learner's, for reproducibility).
            device: where the sequences live.
        """
        if beta < 0:
            raise ValueError(f"beta: expected >= 0 (0 white, 1 pink, 2 red), got {beta}")
        self.beta, self.length = float(beta), int(length)
        self.generator = generator
        self.device = torch.device(device)
        self.buffer = colored_sequences(self.beta, self.length, (num_worlds, action_dim), generator, self.device)
        """``[N, A, length]``: every world's current sequence."""
        self.position = torch.zeros(num_worlds, dtype=torch.long, device=self.device)
        """``[N]``: index of each world's next sample."""

    @property
    def num_worlds(self) -> int:
        """N."""
        return int(self.buffer.shape[0])

    def sample(self) -> torch.Tensor:
        """The next sample of every world, ``[N, A]``; a world at the end of its sequence draws a new one."""
        # One host read per step (which worlds need a new sequence): only the ended ones are redrawn,
        # so thousands of worlds with staggered episodes do not regenerate every sequence each step.
        ended = torch.nonzero(self.position >= self.length).squeeze(1)
        if ended.numel():
            self._redraw(ended)
        idx = self.position.view(-1, 1, 1).expand(-1, self.buffer.shape[1], 1)
        out = self.buffer.gather(2, idx).squeeze(2)
        self.position += 1
        return out

    def reset(self, worlds: torch.Tensor) -> None:
        """Start a fresh sequence at the next :meth:`sample` for the worlds where ``worlds`` (bool ``[N]``) is set."""
        self.position = torch.where(worlds.to(self.device), torch.full_like(self.position, self.length), self.position)

    def _redraw(self, ids: torch.Tensor) -> None:
        shape = (int(ids.numel()), int(self.buffer.shape[1]))
        self.buffer[ids] = colored_sequences(self.beta, self.length, shape, self.generator, self.device)
        self.position[ids] = 0

    def state_dict(self) -> dict[str, Any]:
        """The sequences and positions (a resumed run continues the same noise)."""
        return {"beta": self.beta, "length": self.length, "buffer": self.buffer.clone(), "position": self.position.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the shape must match this noise's worlds and action size."""
        buffer = state["buffer"].to(self.device)
        if tuple(buffer.shape) != tuple(self.buffer.shape):
            raise ValueError(f"action noise: checkpoint holds sequences {tuple(buffer.shape)}, this run needs {tuple(self.buffer.shape)}")
        self.buffer, self.position = buffer, state["position"].to(self.device)
