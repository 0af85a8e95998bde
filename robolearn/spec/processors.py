"""Observation and action processors in plain torch, built from the policy spec.

The env applies them in simulation (``robolearn.envs.managers``) and a deploy runtime applies the
same objects to a robot's readings, so the policy sees exactly the transformation it was trained
with. Nothing here knows the simulator: inputs are tensors ``[B, ...]`` (``B`` worlds, or 1 robot)
and the spec's dataclasses.

Per observation group, in this order (``ObservationProcessor``):

1. per term (``TermProcessor``): additive noise, clip to ``[low, high]``, multiply by the scale;
2. the terms concatenated into one frame, cast to the observation dtype;
3. the delay stage, if the group has one (a callable the caller supplies: the env's per-world
   delay state, or a :class:`Delay` driven by a deploy runtime's own draws);
4. history stacking (``History``): the last ``history_length`` frames, oldest first.

Randomness comes from the caller: a :class:`RandomSource` hands out uniforms and normals per
named stream. The env passes its per-world streams (reproducible from its seed); a runtime that
wants noise (sim2sim) passes a :class:`GeneratorSource`; on a robot noise is simply not drawn
(``source=None``), since the sensors bring their own. So processors stay pure and device-neutral:
no host syncs, no NumPy, nothing but torch operations on the caller's device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from robolearn.spec.manifest import ActionTermSpec, DelaySpec, NoiseSpec, ObsGroupSpec, ObsTermSpec
from robolearn.utils.rng import tensor_version


class RandomSource(Protocol):
    """Where processors take random numbers from: ``[B, size]`` float64 draws per named stream."""

    def uniform(self, name: str, size: int) -> torch.Tensor:
        """Uniforms in ``[0, 1)``, ``[B, size]`` float64."""
        ...

    def normal(self, name: str, size: int) -> torch.Tensor:
        """Standard normals, ``[B, size]`` float64."""
        ...


class GeneratorSource:
    """A :class:`RandomSource` over one ``torch.Generator`` (stream names are ignored): for a
    deploy runtime or a test that wants noise without an env.
    """

    def __init__(self, batch: int, generator: torch.Generator | None = None, device: str | torch.device = "cpu") -> None:
        """Draw ``[batch, size]`` tensors on ``device`` from ``generator`` (default: a fresh one, seed 0)."""
        self.batch = int(batch)
        self.device = torch.device(device)
        self.generator = generator if generator is not None else torch.Generator(self.device).manual_seed(0)

    def uniform(self, name: str, size: int) -> torch.Tensor:
        """Uniforms in ``[0, 1)``."""
        return torch.rand(self.batch, size, generator=self.generator, dtype=torch.float64, device=self.device)

    def normal(self, name: str, size: int) -> torch.Tensor:
        """Standard normals."""
        return torch.randn(self.batch, size, generator=self.generator, dtype=torch.float64, device=self.device)


def unit_noise(source: RandomSource, name: str, kind: str, size: int) -> torch.Tensor:
    """Noise of scale 1 of ``kind``: uniform in ``[-1, 1)`` or standard normal, ``[B, size]``."""
    if kind == "gaussian":
        return source.normal(name, size)
    if kind == "uniform":
        return torch.add(-1.0, source.uniform(name, size), alpha=2.0)
    raise ValueError(f"noise.kind: expected 'uniform' or 'gaussian', got {kind!r}")


def uniform_int(u: torch.Tensor, low: int, high: int) -> torch.Tensor:
    """Uniform draws ``u`` in ``[0, 1)`` (float64) mapped to integers in ``[low, high]`` (int64)."""
    # u < 1 keeps the truncation at most high; the clamp only guards rounding at the top.
    return torch.add(low, u, alpha=high - low + 1).to(torch.long).clamp_(max=high)


def _as_vector(value: float | Sequence[float], n: int, where: str, device: torch.device | str) -> torch.Tensor:
    """A scalar or ``n`` values as a float64 ``[n]`` tensor on ``device``, or an error naming ``where``."""
    t = torch.as_tensor(value, dtype=torch.float64, device=device).flatten()
    if t.numel() == 1:
        return t.expand(n).clone()
    if t.numel() != n:
        raise ValueError(f"{where}: expected a scalar or {n} values, got {t.numel()}")
    return t


class TermProcessor:
    """Noise, clip and scale of one observation term (in that order)."""

    def __init__(self, term: ObsTermSpec, device: str | torch.device = "cpu", where: str = "") -> None:
        """Resolve the term's scale to a tensor on ``device`` once."""
        self.name = term.name
        self.dim = term.dim
        self.noise: NoiseSpec | None = term.noise if term.noise is not None and term.noise.scale > 0 else None
        self.clip = term.clip
        where = where or term.name
        self.scale = None if term.scale is None else _as_vector(term.scale, term.dim, f"{where}.scale", device)

    def __call__(self, value: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """``value`` ``[B, ...]`` with ``noise`` (scale 1, ``[B, dim]``; ``None``: none) added at the
        term's scale, clipped and scaled. A new tensor; ``value`` is not written to.
        """
        if noise is not None and self.noise is not None:
            value = value + (noise * self.noise.scale).reshape(value.shape)
        if self.clip is not None:
            value = value.clamp(self.clip[0], self.clip[1])
        if self.scale is not None:
            value = value * (self.scale if value.ndim == 2 else self.scale.reshape(value.shape[1:]))
        return value


class History:
    """The last ``length`` frames of each row, oldest first, flattened: ``[B, length * D]``."""

    def __init__(self, length: int) -> None:
        """An empty window; the first frame fills it."""
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"history_length: expected an integer >= 1, got {length!r}")
        self.length = length
        self.window: torch.Tensor | None = None
        """``[B, length, D]`` or ``None`` before the first frame."""

    def __call__(self, frame: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Push ``frame`` ``[B, D]`` and return the stacked window.

        With ``rows`` (rows that restart, ``frame`` holding only theirs) those windows restart
        filled with their frame, which is returned stacked. The window is replaced, never written
        in place, so an observation returned earlier keeps its values.
        """
        if self.window is None:
            if rows is not None:
                raise ValueError("history: the first frame must cover every row (rows=None)")
            self.window = frame.unsqueeze(1).repeat(1, self.length, 1)
            return self.window.flatten(1)
        if rows is not None:
            fresh = frame.unsqueeze(1).expand(-1, self.length, -1)
            window = self.window.clone()
            window[rows] = fresh
            self.window = window
            return fresh.flatten(1)
        self.window = torch.cat([self.window[:, 1:], frame.unsqueeze(1)], dim=1)
        return self.window.flatten(1)

    def reset(self) -> None:
        """Forget every window: the next frame fills them (an episode start on a robot)."""
        self.window = None


def _float64_columns(terms: Sequence[torch.Tensor], dims: tuple[int, ...]) -> bool:
    """Whether every term value is a float64 ``[B, dim]`` of its term's width (a plain loop: this
    runs for every group at every step).
    """
    f64 = torch.float64
    for v, d in zip(terms, dims, strict=True):
        if v.dtype is not f64 or v.ndim != 2 or v.shape[1] != d:
            return False
    return True


@dataclass(frozen=True)
class _FusedPlan:
    """A flat group's processing as operations on the whole frame (see ``ObservationProcessor._fused_plan``)."""

    noise: tuple[str, int, int, torch.Tensor] | None
    """``(kind, first column, end column, per-column scale)`` of the group's one noise draw."""
    low: torch.Tensor | None
    """Per-column lower clip bounds (``None``: no term clips)."""
    high: torch.Tensor | None
    """Per-column upper clip bounds."""
    scale: torch.Tensor | None
    """Per-column scales (``None``: no term scales)."""
    dims: tuple[int, ...]
    """Each term's width, in order."""


DelayFn = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]
"""A delay stage: ``(frame [B, ...], rows or None) -> delivered frame`` (see :class:`Delay`)."""


class ObservationProcessor:
    """One observation group's processing, from its spec (see the module doc for the order)."""

    def __init__(
        self,
        name: str,
        group: ObsGroupSpec,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        delay: DelayFn | None = None,
    ) -> None:
        """Build the term processors of group ``name``.

        Args:
            name: the group's name (names its noise stream, ``noise/<name>``).
            group: its spec.
            dtype: floating dtype of the processed observation.
            device: where the scales live (the caller's tensors' device).
            delay: the delay stage, applied after the cast and before the history (``None``: none;
                the spec's ``delay`` describes what the policy was trained under and is not
                applied by itself).
        """
        self.name = name
        self.group = group
        self.dtype = dtype
        self.delay = delay
        self.flat = group.flat
        self.terms = [TermProcessor(t, device, f"observations.{name}.{t.name}") for t in group.terms]
        self.history = History(group.history_length) if group.history_length > 1 else None
        # One draw per noise kind for the whole group (a per-call cost dominates at small B):
        # (kind, [(term index, first column)], total width), kinds in order of first appearance.
        self._noise: list[tuple[str, list[tuple[int, int]], int]] = []
        for i, proc in enumerate(self.terms):
            if proc.noise is None:
                continue
            entry = next((e for e in self._noise if e[0] == proc.noise.kind), None)
            if entry is None:
                entry = (proc.noise.kind, [], 0)
                self._noise.append(entry)
            k = self._noise.index(entry)
            self._noise[k] = (entry[0], [*entry[1], (i, entry[2])], entry[2] + proc.dim)
        self._fused = self._fused_plan(device) if self.flat else None

    def _fused_plan(self, device: str | torch.device) -> _FusedPlan | None:
        """The group's noise, clip and scale as a few operations on the concatenated frame, when
        that gives the per-term result bit for bit: at most one noise kind, drawn over one run of
        consecutive terms (so the draw's columns are the frame's columns ``start:stop``), and
        per-column clip bounds and scales (``-inf``/``inf`` and 1 where a term has none: a clamp to
        infinite bounds and a product with 1 leave every float as it is). Elementwise, each column
        sees the same float64 operations in the same order as in :class:`TermProcessor`.
        """
        if len(self._noise) > 1:
            return None
        noise: tuple[str, int, int, torch.Tensor] | None = None
        if self._noise:
            kind, members, size = self._noise[0]
            index = [i for i, _ in members]
            if index != list(range(index[0], index[-1] + 1)):
                return None  # noisy terms with a noiseless one between them
            start = sum(p.dim for p in self.terms[: index[0]])
            scale = torch.cat(
                [torch.full((self.terms[i].dim,), float(self.terms[i].noise.scale), dtype=torch.float64) for i in index]  # type: ignore[union-attr]
            ).to(device)
            noise = (kind, start, start + size, scale)
        low = high = scale_cols = None
        if any(p.clip is not None for p in self.terms):
            bounds = [(p.clip if p.clip is not None else (-math.inf, math.inf), p.dim) for p in self.terms]
            low = torch.cat([torch.full((d,), float(c[0]), dtype=torch.float64) for c, d in bounds]).to(device)
            high = torch.cat([torch.full((d,), float(c[1]), dtype=torch.float64) for c, d in bounds]).to(device)
        if any(p.scale is not None for p in self.terms):
            scale_cols = torch.cat(
                [p.scale if p.scale is not None else torch.ones(p.dim, dtype=torch.float64, device=device) for p in self.terms]
            )
        return _FusedPlan(noise, low, high, scale_cols, tuple(p.dim for p in self.terms))

    @property
    def noisy(self) -> bool:
        """Whether some term of the group draws noise."""
        return bool(self._noise)

    def draw_noise(self, source: RandomSource) -> list[torch.Tensor | None]:
        """Scale-1 noise per term (``None`` for noiseless terms), one draw per kind from ``source``."""
        out: list[torch.Tensor | None] = [None] * len(self.terms)
        for kind, members, size in self._noise:
            unit = unit_noise(source, f"noise/{self.name}", kind, size)
            for i, start in members:
                out[i] = unit[:, start : start + self.terms[i].dim]
        return out

    def __call__(
        self, terms: Sequence[torch.Tensor], source: RandomSource | None = None, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The group's observation from its raw term values ``[B, ...]`` (in the spec's order).

        Args:
            terms: raw values, one per term.
            source: random draws for the noise; ``None`` adds none (a robot's readings).
            rows: the values are only these rows, which restart (history and delay refill).
        """
        if len(terms) != len(self.terms):
            raise ValueError(f"observations.{self.name}: expected {len(self.terms)} term values, got {len(terms)}")
        fused = self._fused
        if fused is not None and _float64_columns(terms, fused.dims):
            frame = self._fused_frame(fused, terms, source)
        else:
            frame = self._term_frame(terms, source)
        if self.delay is not None:
            # Before the history: a robot stacks the frames as they reached it.
            frame = self.delay(frame, rows)
        if self.history is not None:
            frame = self.history(frame, rows)
        return frame

    def _fused_frame(self, plan: _FusedPlan, terms: Sequence[torch.Tensor], source: RandomSource | None) -> torch.Tensor:
        """One frame from float64 ``[B, dim]`` term values by the fused plan (see :meth:`_fused_plan`)."""
        # The last operation writes straight into the observation dtype: it computes in float64
        # and rounds once on the store, as .to() would after it.
        last = plan.low is None and plan.scale is None
        noisy = plan.noise is not None and source is not None
        if last and not noisy:
            return torch.cat(list(terms), dim=1, out=self._out(terms[0]))
        # torch.cat copies even a single part: the in-place steps below never touch the inputs.
        frame = torch.cat(list(terms), dim=1)
        if noisy:
            kind, start, stop, scale = plan.noise  # type: ignore[misc]
            # Not in place: the draw may be a view of the source's precomputed block.
            noise = unit_noise(source, f"noise/{self.name}", kind, stop - start) * scale  # type: ignore[arg-type]
            if start == 0 and stop == frame.shape[1]:
                if last:
                    return torch.add(frame, noise, out=self._out(frame))
                frame.add_(noise)
            else:
                frame[:, start:stop] += noise
        if plan.low is not None:
            frame.clamp_(plan.low, plan.high)
        if plan.scale is not None:
            frame.mul_(plan.scale)
        return frame.to(self.dtype)

    def _out(self, like: torch.Tensor) -> torch.Tensor:
        """A new ``[B, frame width]`` tensor of the observation dtype for a frame of ``like``'s rows."""
        return torch.empty(like.shape[0], self.group.frame_dim, dtype=self.dtype, device=like.device)

    def _term_frame(self, terms: Sequence[torch.Tensor], source: RandomSource | None) -> torch.Tensor:
        """One frame from the raw term values, term by term (any shapes and dtypes)."""
        noise = self.draw_noise(source) if source is not None and self._noise else [None] * len(self.terms)
        parts = []
        for proc, value, n in zip(self.terms, terms, noise, strict=True):
            if self.flat and value.ndim != 2:
                value = value.reshape(value.shape[0], -1)
            parts.append(proc(value, n))
        # torch.cat copies even a single part: an observation never aliases its inputs.
        if self.flat:
            return torch.cat(parts, dim=1).to(self.dtype)
        # An integer image (uint8 colour, int32 ids) keeps its dtype: images are stored as they are
        # rendered and become float only inside the network.
        frame = parts[0]
        return frame.to(self.dtype, copy=True) if frame.is_floating_point() else frame.clone()

    def reset(self) -> None:
        """Start over (a new episode on a robot): the next frame refills the history."""
        if self.history is not None:
            self.history.reset()


class RingIndex:
    """Flat row indices of a ring buffer ``[B, depth, ...]`` for fixed per-row lags, per write position.

    Reading row ``i``'s frame of ``lag[i]`` steps ago is a gather at ``i * depth + (head - lag[i]) %
    depth``; while the lags stay the same, those indices are computed once for every ``head`` and
    the read is one ``index_select``. The lags are checked by identity and in-place modification
    count (an inference tensor, which keeps no count, is recomputed on every read).
    """

    def __init__(self) -> None:
        """Nothing computed until the first read."""
        self._lag: torch.Tensor | None = None
        self._version = -1
        self._index: torch.Tensor | None = None

    def __call__(self, lag: torch.Tensor, depth: int) -> torch.Tensor:
        """``[depth, B]`` int64: row ``h`` holds the flat indices to read when the newest frame is at ``h``."""
        version = tensor_version(lag)
        if lag is not self._lag or version != self._version or version < 0 or self._index is None:
            heads = torch.arange(depth, dtype=torch.long, device=lag.device).unsqueeze(1)
            rows = torch.arange(lag.shape[0], dtype=torch.long, device=lag.device) * depth
            self._index = (heads - lag).remainder_(depth).add_(rows)
            self._lag, self._version = lag, version
        return self._index


def ring_read(buffer: torch.Tensor, head: int, lag: torch.Tensor, index: RingIndex) -> torch.Tensor:
    """``buffer[i, (head - lag[i]) % depth]`` for every row ``i`` of a ``[B, depth, ...]`` ring buffer
    (a new tensor), by one gather at indices ``index`` keeps while the lags do not change.
    """
    depth = buffer.shape[1]
    return torch.index_select(buffer.flatten(0, 1), 0, index(lag, depth)[head])


class Delay:
    """Delivers frames late: per-row lag, optional per-step jitter and holds (dropped packets).

    Row ``i`` is delivered the frame of ``lag[i]`` steps ago from a ring buffer of the last
    ``high + 1`` frames. With ``jitter`` the lag is redrawn every step and the delivered frame's
    age follows ``age_t = min(lag_t, age_{t-1} + 1)`` (never back in time); with ``hold_prob = p``
    the delivered frame is, with probability ``p`` per step, not refreshed. The uniforms come from
    the caller: :attr:`draws_per_step` columns per :meth:`__call__`, one per row at
    :meth:`draw_lags` when the lag range is not a single value.
    """

    def __init__(
        self, low: int, high: int, *, jitter: bool = False, hold_prob: float = 0.0,
        batch: int = 1, device: str | torch.device = "cpu",
    ) -> None:
        """Lags ``[batch]`` start at ``low``; the buffer is allocated on the first frame."""
        if not 0 <= low <= high:
            raise ValueError(f"delay.lag_range: expected integers 0 <= low <= high, got {(low, high)}")
        if not 0.0 <= hold_prob <= 1.0:
            raise ValueError(f"delay.hold_prob: expected a probability in [0, 1], got {hold_prob}")
        self.low, self.high = int(low), int(high)
        self.jitter, self.hold_prob = bool(jitter), float(hold_prob)
        self.depth = self.high + 1
        # Without jitter or holds the delivered frame is always the lagged one: no held copy needed.
        self.tracks_age = self.jitter or self.hold_prob > 0.0
        device = torch.device(device)
        self.rows = torch.arange(batch, device=device)
        self.lag = torch.full((batch,), self.low, dtype=torch.long, device=device)
        """Current lag per row (int64)."""
        self.age = torch.zeros(batch, dtype=torch.long, device=device)
        """Age in steps of each row's delivered frame (tracked with jitter or holds)."""
        self.head = 0
        self.buffer: torch.Tensor | None = None
        self.held: torch.Tensor | None = None
        self._ring_index = RingIndex()

    @classmethod
    def from_spec(cls, spec: DelaySpec, batch: int = 1, device: str | torch.device = "cpu") -> Delay:
        """The delay a group's spec describes, for ``batch`` rows."""
        return cls(*spec.lag_range, jitter=spec.jitter, hold_prob=spec.hold_prob, batch=batch, device=device)

    @property
    def draws_per_step(self) -> int:
        """Uniform columns :meth:`__call__` needs: one for a jittered lag, one for holds."""
        return int(self.jitter and self.low != self.high) + int(self.hold_prob > 0.0)

    def draw_lags(self, rows: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        """Set the lags of ``rows`` from uniforms ``u`` ``[len(rows)]`` (``None`` when the range is a
        single value: a fixed lag needs no draw); return them.
        """
        lag = torch.full((rows.numel(),), self.low, dtype=torch.long, device=self.lag.device) if u is None or \
            self.low == self.high else uniform_int(u, self.low, self.high)
        self.lag[rows] = lag
        return lag

    def restart(self, rows: torch.Tensor, frames: torch.Tensor) -> None:
        """Fill the buffers of ``rows`` (a 1-D int64 index tensor on the buffers' device) with
        ``frames`` (their fresh frames, ``[len(rows), ...]``).
        """
        self._allocate(frames)
        assert self.buffer is not None
        self.buffer[rows] = frames.unsqueeze(1)
        if self.held is not None:
            self.held = self.held.clone()  # the previous one may be an observation handed out
            self.held[rows] = frames
        self.age.index_fill_(0, rows, 0)  # not `[rows] = 0`: a host scalar copy syncs on CUDA

    def __call__(self, frame: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
        """Push ``frame`` ``[B, ...]`` (every row) and return the frame each row is delivered.

        ``u``: ``[B, draws_per_step]`` uniforms, column 0 for a jittered lag, the last for holds.
        """
        self._allocate(frame)
        assert self.buffer is not None
        self.head = (self.head + 1) % self.depth
        self.buffer[:, self.head] = frame
        if self.jitter and self.low != self.high:
            self.lag = uniform_int(u[:, 0], self.low, self.high)  # type: ignore[index]
            lagged = self.buffer[self.rows, (self.head - self.lag) % self.depth]
        else:
            lagged = ring_read(self.buffer, self.head, self.lag, self._ring_index)
        if not self.tracks_age:
            return lagged
        older = self.age + 1
        refresh = self.lag <= older  # the lagged frame is no older than the held one
        if self.hold_prob > 0.0:
            refresh &= u[:, -1] >= self.hold_prob  # type: ignore[index]
        out = torch.where(refresh.view(-1, *([1] * (frame.ndim - 1))), lagged, self.held)  # type: ignore[arg-type]
        self.age = torch.where(refresh, self.lag, older)
        self.held = out  # replaced, never written in place (the caller owns `out`)
        return out

    def _allocate(self, frame: torch.Tensor) -> None:
        """The ring buffer (and held frames) for frames shaped like ``frame``'s rows."""
        if self.buffer is None:
            shape = (self.rows.numel(), self.depth, *frame.shape[1:])
            self.buffer = torch.zeros(shape, dtype=frame.dtype, device=frame.device)
            if self.tracks_age:
                self.held = torch.zeros((shape[0], *shape[2:]), dtype=frame.dtype, device=frame.device)

    def state_dict(self) -> dict[str, Any]:
        """Ring buffer, write position, lags, ages and held frames."""
        return {
            "buffer": None if self.buffer is None else self.buffer.clone(),
            "held": None if self.held is None else self.held.clone(),
            "head": self.head,
            "lag": self.lag.clone(),
            "age": self.age.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.buffer = None if state["buffer"] is None else state["buffer"].clone()
        self.held = None if state["held"] is None else state["held"].clone()
        self.head = int(state["head"])
        self.lag = state["lag"].clone()
        self.age = state["age"].clone()


class LastAction:
    """The action sent at the previous step, as an observation term's raw value (zeros after a reset)."""

    def __init__(self, batch: int, dim: int, device: str | torch.device = "cpu") -> None:
        """Start at the zero action."""
        self.value = torch.zeros(batch, dim, dtype=torch.float64, device=device)
        """``[B, A]`` float64: the last recorded action."""

    def record(self, action: torch.Tensor) -> None:
        """Remember ``action`` ``[B, A]`` (a copy: the caller may reuse its tensor)."""
        self.value = action.to(torch.float64, copy=True)

    def reset(self, rows: torch.Tensor | None = None) -> None:
        """Rows ``rows`` (default: all) start an episode: their last action is zero."""
        if rows is None:
            self.value = torch.zeros_like(self.value)
        else:
            self.value = self.value.clone()
            self.value[rows] = 0.0


class ActionProcessor:
    """Actions to controls: ``offset + scale * clip(action, low, high)``, in float64."""

    def __init__(self, scale: torch.Tensor, offset: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> None:
        """Per-column ``[A]`` tensors (``low``/``high`` may be infinite: no clip there)."""
        self.scale, self.offset, self.low, self.high = scale, offset, low, high
        self._numpy: tuple[Any, ...] | None = None
        self.trivial_scale = bool((scale == 1).all() and (offset == 0).all())
        self.clipped = bool(torch.isfinite(low).any() or torch.isfinite(high).any())

    @classmethod
    def from_spec(cls, actions: Sequence[ActionTermSpec], device: str | torch.device = "cpu") -> ActionProcessor:
        """The processor of a spec's action terms (their clip, scale and offset, in order)."""
        def column(values: Sequence[float]) -> torch.Tensor:
            return torch.tensor(list(values), dtype=torch.float64, device=device)

        inf = float("inf")
        low = [v for a in actions for v in [a.clip[0] if a.clip is not None else -inf] * a.dim]
        high = [v for a in actions for v in [a.clip[1] if a.clip is not None else inf] * a.dim]
        scale = [v for a in actions for v in a.scale]
        offset = [v for a in actions for v in a.offset]
        return cls(column(scale), column(offset), column(low), column(high))

    def __call__(self, action: torch.Tensor) -> torch.Tensor:
        """Controls ``[B, A]`` float64 (the action itself, as float64, when nothing applies)."""
        a = action.to(torch.float64)
        if self.clipped:
            a = torch.maximum(torch.minimum(a, self.high), self.low)
        if not self.trivial_scale:
            a = torch.addcmul(self.offset, a, self.scale)
        return a

    def apply_numpy(self, action: Any) -> Any:
        """The same map on a NumPy array ``[..., A]`` (float64 out): a deploy runtime's batch-1 path,
        where a torch call's overhead would be most of the step. Same parameters, same operations
        (``offset + scale * clip``, in float64), so both give the same numbers.
        """
        import numpy as np

        if self._numpy is None:
            self._numpy = tuple(t.detach().cpu().numpy() for t in (self.scale, self.offset, self.low, self.high))
        scale, offset, low, high = self._numpy
        a = np.asarray(action, dtype=np.float64)
        if self.clipped:
            a = np.maximum(np.minimum(a, high), low)
        if not self.trivial_scale:
            a = offset + a * scale
        return a


__all__ = [
    "ActionProcessor",
    "Delay",
    "DelayFn",
    "GeneratorSource",
    "History",
    "LastAction",
    "ObservationProcessor",
    "RandomSource",
    "RingIndex",
    "TermProcessor",
    "ring_read",
    "uniform_int",
    "unit_noise",
]
