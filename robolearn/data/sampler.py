"""Samplers: where an update's batch comes from (DESIGN.md, "Sampler").

An off-policy or offline learner draws its minibatches through one :class:`Sampler`: its own replay
buffer (:class:`ReplaySampler`), a fixed :class:`~robolearn.data.Dataset` (:class:`DatasetSampler`),
or several of them mixed at fixed ratios (:class:`MixedSampler`, RLPD's symmetric sampling is
``MixedSampler([online, offline], [0.5, 0.5])``). Offline-to-online methods are therefore a sampler
configuration, not a new learner.

Every sampler draws with a ``torch.Generator`` on its data's device, never syncs with the host
(sizes are host-side ints the data already keeps), and checkpoints the generator it owns, so a
resumed run draws the same batches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from robolearn.data.replay import ReplayBuffer
from robolearn.types import Batch


@runtime_checkable
class Sampler(Protocol):
    """A source of minibatches of transitions."""

    def __len__(self) -> int:
        """Transitions available to draw from (0: nothing to sample yet)."""
        ...

    def sample(self, batch_size: int) -> Batch:
        """``batch_size`` transitions, drawn uniformly with replacement."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The sampler's own random state (not the data)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...


def _generator(device: torch.device, generator: torch.Generator | None, seed: int) -> tuple[torch.Generator, bool]:
    """The caller's generator (not owned: its owner checkpoints it), or a new seeded one (owned)."""
    if generator is not None:
        return generator, False
    return torch.Generator(device=device).manual_seed(int(seed)), True


class _OwnsGenerator:
    """State handling shared by the samplers: only a generator the sampler created is its state."""

    generator: torch.Generator
    _owned: bool

    def state_dict(self) -> dict[str, Any]:
        """The generator's state if this sampler owns it, else nothing (its owner saves it)."""
        return {"generator": self.generator.get_state()} if self._owned else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the owned generator."""
        if self._owned and "generator" in state:
            self.generator.set_state(state["generator"])


class ReplaySampler(_OwnsGenerator):
    """Uniform minibatches from a :class:`~robolearn.data.replay.ReplayBuffer` (what it holds now)."""

    def __init__(self, replay: ReplayBuffer, generator: torch.Generator | None = None, seed: int = 0) -> None:
        """``generator``: a generator on the buffer's device to share (e.g. the agent's); else one of
        the sampler's own, seeded ``seed``.
        """
        self.replay = replay
        self.generator, self._owned = _generator(replay.device, generator, seed)

    def __len__(self) -> int:
        """Transitions in the buffer."""
        return len(self.replay)

    def sample(self, batch_size: int) -> Batch:
        """``batch_size`` stored transitions."""
        return self.replay.sample(int(batch_size), self.generator)


class DatasetSampler(_OwnsGenerator):
    """Uniform minibatches of a :class:`~robolearn.data.Dataset`'s transitions.

    With ``mc_return_gamma`` every batch carries ``extras["mc_return"]``: the discounted return-to-go
    of each transition within its episode (what Cal-QL calibrates against), computed once here.
    """

    def __init__(
        self,
        dataset: Any,
        generator: torch.Generator | None = None,
        seed: int = 0,
        mc_return_gamma: float | None = None,
    ) -> None:
        """``dataset``: a :class:`robolearn.data.Dataset`; ``generator``: shared generator on its
        device (else an owned one seeded ``seed``); ``mc_return_gamma``: discount of the Monte-Carlo
        returns to attach (``None``: none).
        """
        if mc_return_gamma is not None and not 0.0 <= float(mc_return_gamma) <= 1.0:
            raise ValueError(f"mc_return_gamma: expected a discount in [0, 1], got {mc_return_gamma}")
        self.dataset = dataset
        self.device = torch.device(dataset.device)
        self.generator, self._owned = _generator(self.device, generator, seed)
        self.mc_return = None if mc_return_gamma is None else dataset.returns_to_go(float(mc_return_gamma))

    def __len__(self) -> int:
        """Transitions in the dataset."""
        return len(self.dataset)

    def sample(self, batch_size: int) -> Batch:
        """``batch_size`` transitions (with ``mc_return`` if asked)."""
        idx = torch.randint(len(self.dataset), (int(batch_size),), generator=self.generator, device=self.device)
        batch = self.dataset.gather(idx)
        if self.mc_return is not None:
            batch.extras["mc_return"] = self.mc_return[idx]
        return batch


def split_batch_size(batch_size: int, ratios: Sequence[float]) -> list[int]:
    """Integer shares of ``batch_size`` proportional to ``ratios``, summing to ``batch_size``.

    Largest-remainder rounding, ties to the earlier source, so ``(256, [0.5, 0.5])`` is ``[128, 128]``
    and ``(5, [0.5, 0.5])`` is ``[3, 2]``.
    """
    total = float(sum(ratios))
    exact = [batch_size * r / total for r in ratios]
    shares = [math.floor(x) for x in exact]
    order = sorted(range(len(ratios)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in order[: batch_size - sum(shares)]:
        shares[i] += 1
    return shares


class MixedSampler:
    """Minibatches drawn from several samplers at fixed ratios and concatenated (RLPD, WSRL, Cal-QL
    fine-tuning).

    A source that is still empty (the online replay before the first step) gives its share to the
    others in proportion to their ratios, so learning can start from the offline data alone.
    Only the observation groups and extras every source has are kept.
    """

    def __init__(self, samplers: Sequence[Sampler], ratios: Sequence[float]) -> None:
        """``samplers`` and their ``ratios`` (positive, any scale: ``[1, 1]`` is half and half)."""
        if len(samplers) < 1 or len(samplers) != len(ratios):
            raise ValueError(f"ratios: expected one ratio per sampler ({len(samplers)}), got {list(ratios)}")
        bad = [r for r in ratios if not (math.isfinite(float(r)) and float(r) > 0.0)]
        if bad:
            raise ValueError(f"ratios: expected finite values > 0, got {list(ratios)}")
        self.samplers = list(samplers)
        self.ratios = [float(r) for r in ratios]

    def __len__(self) -> int:
        """Transitions available across the sources."""
        return sum(len(s) for s in self.samplers)

    def sample(self, batch_size: int) -> Batch:
        """``batch_size`` transitions: each non-empty source's share, concatenated in source order."""
        live = [i for i, s in enumerate(self.samplers) if len(s) > 0]
        if not live:
            raise RuntimeError("MixedSampler.sample: every source is empty")
        shares = split_batch_size(int(batch_size), [self.ratios[i] for i in live])
        batches = [self.samplers[i].sample(n) for i, n in zip(live, shares, strict=True) if n > 0]
        return concat_batches(batches)

    def state_dict(self) -> dict[str, Any]:
        """Each source's own state, in order."""
        return {"sources": [s.state_dict() for s in self.samplers]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore every source."""
        for sampler, sub in zip(self.samplers, state.get("sources", []), strict=False):
            sampler.load_state_dict(sub)


def concat_batches(batches: Sequence[Batch]) -> Batch:
    """One batch of ``batches`` in order; groups and extras common to all; dtypes of the first."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0]
    groups = [g for g in first.obs if all(g in b.obs and g in b.next_obs for b in batches)]
    extras = [k for k in first.extras if all(k in b.extras for b in batches)]

    def cat(parts: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([p.to(parts[0].dtype) for p in parts])

    return Batch(
        obs={g: cat([b.obs[g] for b in batches]) for g in groups},
        action=cat([b.action for b in batches]),
        reward=cat([b.reward for b in batches]),
        next_obs={g: cat([b.next_obs[g] for b in batches]) for g in groups},
        terminated=cat([b.terminated for b in batches]),
        truncated=cat([b.truncated for b in batches]),
        extras={k: cat([b.extras[k] for b in batches]) for k in extras},
    )


__all__ = [
    "DatasetSampler",
    "MixedSampler",
    "ReplaySampler",
    "Sampler",
    "concat_batches",
    "split_batch_size",
]
