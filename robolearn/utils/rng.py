"""Counter-based random numbers, one independent stream per world, in torch on any device.

World ``i``'s stream is SplitMix64 started at a per-world key: its ``k``-th number is
``mix(key_i + k * GOLDEN)``, where ``key_i`` is a hash of ``(seed, i)`` and ``mix`` the SplitMix64
finaliser. Each call of :meth:`WorldRNG.uniform`/:meth:`WorldRNG.normal` advances the drawing
worlds' counters by one and reads positions ``counter * 2**20 + j`` (``j`` < ``size``), so a draw
depends only on the seed, the world, how many calls that world has drawn in, and the draw index:
not on how many worlds there are, which other worlds reset, the device or the physics threads.
A rollout is therefore reproducible from the seed alone.

The arithmetic is on ``int64`` tensors: torch's integer multiply wraps modulo ``2**64`` exactly as
``uint64`` does, and the logical right shift is an arithmetic shift masked to the low bits. Nothing
goes through NumPy or the host, so the streams live on whatever device the env does.
"""

from __future__ import annotations

import hashlib
import math

import torch

_U64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit pattern as the ``int64`` value torch stores it as."""
    value &= _U64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_WORLD = 0xD1B54A32D192ED03
CALL_STRIDE = 1 << 20
"""Positions reserved per call and world: one call draws at most this many numbers per world."""
_S_GOLDEN = _signed(_GOLDEN)
_S_M1, _S_M2 = _signed(_M1), _signed(_M2)
_S_STEP = _signed(CALL_STRIDE * _GOLDEN)
_LOW = {k: (1 << (64 - k)) - 1 for k in (11, 27, 30, 31)}  # masks of a logical right shift by k
_TWO_M53 = 2.0**-53


def mix64(z: int) -> int:
    """The SplitMix64 finaliser on one Python integer (the reference for :func:`mix`)."""
    z &= _U64
    z = ((z ^ (z >> 30)) * _M1) & _U64
    z = ((z ^ (z >> 27)) * _M2) & _U64
    return z ^ (z >> 31)


def mix(z: torch.Tensor) -> torch.Tensor:
    """The SplitMix64 finaliser elementwise on an ``int64`` tensor (a new tensor; bit patterns as
    ``uint64``). Eight torch operations: their count, not the arithmetic, is the cost at small sizes.
    """
    z = z ^ ((z >> 30) & _LOW[30])
    z.mul_(_S_M1)
    z ^= (z >> 27) & _LOW[27]
    z.mul_(_S_M2)
    z ^= (z >> 31) & _LOW[31]
    return z


STEP_BLOCK = 32
"""Control steps of per-step draws computed per batch (see :meth:`WorldRNG.step_uniform`)."""


def _name_key(name: str) -> int:
    """A stable 64-bit key of a stream name (Python's ``hash`` of a string changes per process)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


class WorldRNG:
    """Per-world random streams: world ``i``'s draws depend only on ``(seed, i, its counter)``.

    Two kinds of draws:

    * :meth:`uniform`/:meth:`normal` for any subset of worlds (resets, firing events): each call
      advances the drawing worlds' counters;
    * :meth:`step_uniform`/:meth:`step_normal` for every world at every control step (observation
      noise, jitter): each named stream has its own key and one step counter. Because every world
      draws at every step, the next :data:`STEP_BLOCK` steps are computed in one batch and handed
      out a slice at a time: the hash's fixed cost per torch operation is paid once per block,
      not per step. A value depends on ``(seed, name, world, step, index)`` only, not on the block.
    """

    def __init__(self, seed: int, num_worlds: int, device: str | torch.device = "cpu") -> None:
        """Create ``num_worlds`` streams from one integer seed, with their state on ``device``."""
        if isinstance(num_worlds, bool) or int(num_worlds) != num_worlds or num_worlds < 1:
            raise ValueError(f"num_worlds must be >= 1, got {num_worlds}")
        self.seed = int(seed)
        self.device = torch.device(device)
        key = mix64(self.seed + _GOLDEN)
        # The per-world keys are computed on the host once (Python integers, exact), then moved.
        keys = [_signed(mix64(key ^ ((i * _WORLD) & _U64))) for i in range(int(num_worlds))]
        self._keys = torch.tensor(keys, dtype=torch.int64, device=self.device)
        self.counters = torch.zeros(int(num_worlds), dtype=torch.int64, device=self.device)
        """Calls each world has drawn in (``int64`` ``[N]``)."""
        self._offsets: dict[int, torch.Tensor] = {}
        self._key = key
        self.step_counts: dict[str, int] = {}
        """Steps drawn per named per-step stream (``name|kind|size``)."""
        self._blocks: dict[str, tuple[int, torch.Tensor]] = {}

    @property
    def num_worlds(self) -> int:
        """N."""
        return int(self._keys.shape[0])

    def uniform(self, ids: torch.Tensor | None, size: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """Draw ``[len(ids), size]`` float64 uniforms in ``[low, high)`` for worlds ``ids`` (``None``:
        every world, in order), advancing those worlds' counters.
        """
        bits = self._bits(ids, size)
        # The top 53 bits as an integer, scaled into [low, high) by one fused multiply-add.
        return torch.add(low, bits.to(torch.float64), alpha=(high - low) * _TWO_M53)

    def normal(self, ids: torch.Tensor | None, size: int, std: float = 1.0) -> torch.Tensor:
        """Draw ``[len(ids), size]`` float64 Gaussians ``N(0, std^2)`` (Box-Muller on pairs of uniforms,
        both outputs used), advancing those worlds' counters.
        """
        half = (size + 1) // 2
        bits = self._bits(ids, 2 * half).to(torch.float64)
        # u1 in (0, 1] keeps the log finite; u2 in [0, 1) is the angle.
        r = torch.log(torch.add(1.0, bits[:, :half], alpha=-_TWO_M53)).mul_(-2.0).sqrt_().mul_(std)
        theta = bits[:, half:].mul_(2.0 * math.pi * _TWO_M53)
        return torch.cat([r * torch.cos(theta), r.mul_(torch.sin(theta))], dim=1)[:, :size]

    def step_uniform(self, name: str, size: int) -> torch.Tensor:
        """The current step's ``[N, size]`` float64 uniforms in ``[0, 1)`` of per-step stream ``name``."""
        return self._step(name, "uniform", size)

    def step_normal(self, name: str, size: int) -> torch.Tensor:
        """The current step's ``[N, size]`` float64 standard normals of per-step stream ``name``."""
        return self._step(name, "normal", size)

    def _step(self, name: str, kind: str, size: int) -> torch.Tensor:
        """One step's slice of the stream's current block, computing the next block when needed."""
        stream = f"{name}|{kind}|{size}"
        count = self.step_counts.get(stream, 0)
        block = self._blocks.get(stream)
        if block is None or not block[0] <= count < block[0] + STEP_BLOCK:
            block = (count, self._step_block(stream, kind, size, count))
            self._blocks[stream] = block
        self.step_counts[stream] = count + 1
        return block[1][:, count - block[0]]

    def _step_block(self, stream: str, kind: str, size: int, start: int) -> torch.Tensor:
        """Steps ``start .. start + STEP_BLOCK - 1`` of a per-step stream, ``[N, STEP_BLOCK, size]``."""
        width = size + (size & 1) if kind == "normal" else size  # Box-Muller takes pairs
        world = torch.arange(self.num_worlds, dtype=torch.int64, device=self.device) * _signed(_WORLD)
        keys = mix(world ^ _signed(mix64(self._key ^ _name_key(stream))))
        pos = torch.arange(STEP_BLOCK * width, dtype=torch.int64, device=self.device) + (start * width + 1)
        z = mix(keys.unsqueeze(1) + pos * _S_GOLDEN)
        u = ((z >> 11) & _LOW[11]).to(torch.float64).mul_(_TWO_M53).view(self.num_worlds, STEP_BLOCK, width)
        if kind == "uniform":
            return u
        half = width // 2
        r = torch.log(1.0 - u[..., :half]).mul_(-2.0).sqrt_()
        theta = u[..., half:] * (2.0 * math.pi)
        return torch.cat([r * torch.cos(theta), r * torch.sin(theta)], dim=2)[..., :size]

    def _bits(self, ids: torch.Tensor | None, size: int) -> torch.Tensor:
        """The top 53 bits (``int64`` ``[len(ids), size]``) of each world's next ``size`` numbers."""
        if not 0 < size <= CALL_STRIDE:
            raise ValueError(f"size: expected 1 to {CALL_STRIDE} draws per world and call, got {size}")
        if ids is None:
            base = torch.add(self._keys, self.counters, alpha=_S_STEP)
            self.counters += 1
        else:
            ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
            ctr = self.counters[ids]
            base = torch.add(self._keys[ids], ctr, alpha=_S_STEP)
            # Index assignment, not +=: a world listed twice still advances once (as one call).
            self.counters[ids] = ctr + 1
        offsets = self._offsets.get(size)
        if offsets is None:
            offsets = torch.tensor([_signed((j + 1) * _GOLDEN) for j in range(size)], dtype=torch.int64, device=self.device)
            self._offsets[size] = offsets
        z = mix(base.unsqueeze(1) + offsets)
        return (z >> 11) & _LOW[11]

    def state_dict(self) -> dict[str, object]:
        """Seed, per-world counters and per-step stream counts, for checkpoints."""
        return {"seed": self.seed, "counters": self.counters.clone(), "step_counts": dict(self.step_counts)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore seed and counters saved by :meth:`state_dict` (onto this generator's device)."""
        counters = torch.as_tensor(state["counters"]).to(dtype=torch.int64, device=self.device)
        if counters.shape != self.counters.shape:
            raise ValueError(f"rng counters: expected shape {tuple(self.counters.shape)}, got {tuple(counters.shape)}")
        self.__init__(int(state["seed"]), counters.shape[0], self.device)  # type: ignore[misc]
        self.counters.copy_(counters)
        self.step_counts = {str(k): int(v) for k, v in dict(state.get("step_counts", {})).items()}  # type: ignore[call-overload]
