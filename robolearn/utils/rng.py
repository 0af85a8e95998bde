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
from collections.abc import Iterator
from contextlib import contextmanager

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
    ``uint64``). Eleven torch operations: their count, not the arithmetic, is the cost at small sizes.
    """
    return _mix_(z.clone())


def _mix_(z: torch.Tensor) -> torch.Tensor:
    """:func:`mix` in place on ``z`` (a tensor the caller owns), returned; one temporary, reused."""
    t = torch.bitwise_right_shift(z, 30).bitwise_and_(_LOW[30])
    z.bitwise_xor_(t).mul_(_S_M1)
    z.bitwise_xor_(torch.bitwise_right_shift(z, 27, out=t).bitwise_and_(_LOW[27])).mul_(_S_M2)
    return z.bitwise_xor_(torch.bitwise_right_shift(z, 31, out=t).bitwise_and_(_LOW[31]))


def _top53_(z: torch.Tensor) -> torch.Tensor:
    """The top 53 bits of each ``uint64`` pattern of ``z`` as a non-negative ``int64``, in place."""
    return z.bitwise_right_shift_(11).bitwise_and_(_LOW[11])


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
        self._stream_consts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._plans: dict[str, _Plan] = {}
        self._open: _Batch | None = None

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
        consts = self._stream_consts.get(stream)
        if consts is None:
            # Per stream, once: the worlds' keys and the block's positions times the golden ratio.
            world = torch.arange(self.num_worlds, dtype=torch.int64, device=self.device) * _signed(_WORLD)
            keys = _mix_(world ^ _signed(mix64(self._key ^ _name_key(stream)))).unsqueeze(1)
            pos = torch.arange(1, STEP_BLOCK * width + 1, dtype=torch.int64, device=self.device).mul_(_S_GOLDEN)
            consts = self._stream_consts[stream] = (keys, pos)
        keys, pos = consts
        # Position p of the block is step `start` * width + p: the same integers as one long stream.
        z = _top53_(_mix_(torch.add(pos, keys, alpha=1).add_(_signed(start * width * _GOLDEN))))
        u = z.to(torch.float64).mul_(_TWO_M53).view(self.num_worlds, STEP_BLOCK, width)
        if kind == "uniform":
            return u
        half = width // 2
        r = torch.log(1.0 - u[..., :half]).mul_(-2.0).sqrt_()
        theta = u[..., half:] * (2.0 * math.pi)
        return torch.cat([r * torch.cos(theta), r.mul_(torch.sin(theta))], dim=2)[..., :size]

    @contextmanager
    def batch(self, ids: torch.Tensor | None, name: str) -> Iterator[None]:
        """Within the block, compute the calls for worlds ``ids`` in one pass where they can be foreseen.

        A reset draws from the same worlds a fixed sequence of calls (one per event, the initial
        state, the latency models, the fresh observation's noise), each a handful of torch
        operations on a few numbers. The block records that sequence under ``name``; the next time,
        the first call computes the bits of every recorded call at once (positions of call ``c``
        are those of counter ``counter + c``) and the later calls take their slices. The values are
        exactly those of separate calls: a call of another size, for other worlds, or beyond the
        record ends the prefetch (the counters are brought up to date first) and draws as usual,
        and the sequence seen this time is recorded for the next. ``ids=None`` (every world, the
        env's own reset of all) prefetches nothing.
        """
        if ids is None or self._open is not None:
            yield
            return
        ob = _Batch(ids, self._plans.get(name))
        self._open = ob
        try:
            yield
        finally:
            if self._open is ob:
                self._close_prefetch(ob)
                self._open = None
                if ob.plan is None or ob.sizes != list(ob.plan.sizes):
                    self._plans[name] = _Plan(tuple(ob.sizes), self.device)

    def _close_prefetch(self, ob: _Batch) -> None:
        """Stop serving prefetched bits: the counters of the batch's worlds advance by the calls served."""
        if ob.bits is not None:
            self.counters[ob.ids] = ob.ctr + ob.served
            ob.bits = None
        ob.direct = True

    def _prefetched(self, ob: _Batch, ids: torch.Tensor, size: int) -> torch.Tensor | None:
        """The bits of this call from the open batch's prefetch, or ``None`` to draw them directly."""
        if not ob.matches(ids):
            self._close_prefetch(ob)  # other worlds: counters exact from here on
            return None
        ob.sizes.append(size)
        if ob.direct:
            return None
        plan, k = ob.plan, len(ob.sizes) - 1
        if plan is None or k >= len(plan.sizes) or plan.sizes[k] != size:
            self._close_prefetch(ob)
            return None
        if ob.bits is None:
            # The first call: every recorded call's positions at once.
            ob.ctr = self.counters[ids]
            base = torch.add(self._keys[ids], ob.ctr, alpha=_S_STEP)
            ob.bits = _top53_(_mix_(base.unsqueeze(1) + plan.offsets))
        ob.served = k + 1
        start = plan.starts[k]
        return ob.bits[:, start : start + size]

    def _bits(self, ids: torch.Tensor | None, size: int) -> torch.Tensor:
        """The top 53 bits (``int64`` ``[len(ids), size]``) of each world's next ``size`` numbers."""
        if not 0 < size <= CALL_STRIDE:
            raise ValueError(f"size: expected 1 to {CALL_STRIDE} draws per world and call, got {size}")
        ob = self._open
        if ob is not None:
            if ids is None:
                self._close_prefetch(ob)
            else:
                ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
                bits = self._prefetched(ob, ids, size)
                if bits is not None:
                    return bits
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
        return _top53_(_mix_(base.unsqueeze(1) + offsets))

    def state_dict(self) -> dict[str, object]:
        """Seed, per-world counters and per-step stream counts, for checkpoints."""
        if self._open is not None:
            self._close_prefetch(self._open)
        return {"seed": self.seed, "counters": self.counters.clone(), "step_counts": dict(self.step_counts)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore seed and counters saved by :meth:`state_dict` (onto this generator's device)."""
        counters = torch.as_tensor(state["counters"]).to(dtype=torch.int64, device=self.device)
        if counters.shape != self.counters.shape:
            raise ValueError(f"rng counters: expected shape {tuple(self.counters.shape)}, got {tuple(counters.shape)}")
        if self._open is not None:
            self._close_prefetch(self._open)
        plans = self._plans
        self.__init__(int(state["seed"]), counters.shape[0], self.device)  # type: ignore[misc]
        self._plans = plans  # call patterns describe the env, not the state
        self.counters.copy_(counters)
        self.step_counts = {str(k): int(v) for k, v in dict(state.get("step_counts", {})).items()}  # type: ignore[call-overload]


class _Plan:
    """A recorded sequence of call sizes and the position offsets that compute all of them at once."""

    def __init__(self, sizes: tuple[int, ...], device: torch.device) -> None:
        """Offsets of call ``c``, draw ``j``: ``c * CALL_STRIDE * GOLDEN + (j + 1) * GOLDEN`` (mod 2**64)."""
        self.sizes = sizes
        self.starts: list[int] = []
        offsets: list[int] = []
        for c, size in enumerate(sizes):
            self.starts.append(len(offsets))
            offsets += [_signed(c * CALL_STRIDE * _GOLDEN + (j + 1) * _GOLDEN) for j in range(size)]
        self.offsets = torch.tensor(offsets, dtype=torch.int64, device=device)


class _Batch:
    """An open :meth:`WorldRNG.batch`: its worlds, the plan it follows and what it has served."""

    def __init__(self, ids: torch.Tensor, plan: _Plan | None) -> None:
        """Nothing computed until the first call."""
        self.ids = ids
        self.plan = plan if plan is not None and plan.sizes else None
        self.sizes: list[int] = []
        """Sizes of the calls for these worlds so far (the next plan)."""
        self.bits: torch.Tensor | None = None
        self.ctr: torch.Tensor | None = None
        self.served = 0
        self.direct = self.plan is None
        self._version = tensor_version(ids)

    def matches(self, ids: torch.Tensor) -> bool:
        """Whether ``ids`` is the batch's index tensor, unchanged since the batch opened."""
        return ids is self.ids and tensor_version(ids) == self._version


def tensor_version(t: torch.Tensor) -> int:
    """``t``'s in-place modification count, or -1 for an inference tensor, which keeps none (a
    cache keyed on it must then recompute).
    """
    try:
        return t._version
    except RuntimeError:
        return -1
