"""Counter-based random numbers, one independent stream per world.

A draw for world ``i`` is a hash of ``(seed, i, stream counter, draw index)``, so it does not depend
on how many worlds there are, which other worlds reset, or how many threads step the physics: a
rollout is reproducible from the seed alone. The hash is SplitMix64, vectorised in NumPy; its
outputs pass BigCrush when used as a counter-based generator, which is ample for reset noise.
"""

from __future__ import annotations

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_WORLD = np.uint64(0xD1B54A32D192ED03)
_DRAW = np.uint64(0x8CB92BA72F3D8DD7)
_TWO53 = float(2**53)


def _mix(z: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser, elementwise on ``uint64`` arrays (wrap-around intended; NumPy
    warns about it only for scalars, which callers wrap in ``np.errstate``).
    """
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


class WorldRNG:
    """Per-world random streams: world ``i``'s draws depend only on ``(seed, i, its counter)``."""

    def __init__(self, seed: int, num_worlds: int) -> None:
        """Create ``num_worlds`` streams from one integer seed."""
        if num_worlds < 1:
            raise ValueError(f"num_worlds must be >= 1, got {num_worlds}")
        self.seed = int(seed)
        with np.errstate(over="ignore"):
            self._key = _mix(np.array([self.seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64) + _GOLDEN)[0]
        self.counters = np.zeros(num_worlds, dtype=np.uint64)
        with np.errstate(over="ignore"):
            self._all_worlds = np.arange(num_worlds, dtype=np.uint64) * _WORLD

    def uniform(self, ids: np.ndarray, size: int, low: float = 0.0, high: float = 1.0) -> np.ndarray:
        """Draw ``[len(ids), size]`` uniforms in ``[low, high)``, advancing those worlds' counters."""
        bits = self._bits(ids, size)
        u = (bits >> np.uint64(11)).astype(np.float64) / _TWO53
        return low + (high - low) * u

    def normal(self, ids: np.ndarray, size: int, std: float = 1.0) -> np.ndarray:
        """Draw ``[len(ids), size]`` Gaussians (Box-Muller), advancing those worlds' counters."""
        n = size + (size & 1)
        u = self.uniform(ids, n)
        u1 = 1.0 - u[:, 0::2]  # in (0, 1], so the log is finite
        u2 = u[:, 1::2]
        r = np.sqrt(-2.0 * np.log(u1))
        z = np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)], axis=1)
        return std * z[:, :size]

    def _bits(self, ids: np.ndarray, size: int) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == self.counters.size and ids[0] == 0 and ids[-1] == ids.size - 1:
            # Every world, in order (the per-step case): slices instead of fancy indexing.
            ctr = self.counters.copy()
            self.counters += np.uint64(1)
            world = self._all_worlds
        else:
            ctr = self.counters[ids]
            self.counters[ids] = ctr + np.uint64(1)
            world = ids.astype(np.uint64) * _WORLD
        base = _mix(self._key ^ world ^ _mix(ctr + _GOLDEN))
        draw = np.arange(1, size + 1, dtype=np.uint64) * _DRAW
        return _mix(base[:, None] + draw[None, :])

    def state_dict(self) -> dict[str, object]:
        """Seed and per-world counters, for checkpoints."""
        # A torch tensor, so checkpoints load with weights_only=True.
        return {"seed": self.seed, "counters": torch.from_numpy(self.counters.copy())}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore seed and counters saved by :meth:`state_dict`."""
        raw = state["counters"]
        counters = np.asarray(raw.numpy() if isinstance(raw, torch.Tensor) else raw, dtype=np.uint64)
        if counters.shape != self.counters.shape:
            raise ValueError(
                f"rng counters: expected shape {self.counters.shape}, got {counters.shape}"
            )
        self.__init__(int(state["seed"]), counters.shape[0])  # type: ignore[misc]
        self.counters[:] = counters
