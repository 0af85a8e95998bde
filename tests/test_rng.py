"""Per-world counter-based random streams."""

from __future__ import annotations

import numpy as np
import pytest

from robolearn.utils import WorldRNG


def test_streams_are_per_world_and_reproducible():
    a, b = WorldRNG(3, 8), WorldRNG(3, 8)
    together = a.uniform(np.arange(8), 4)
    alone = b.uniform(np.array([5]), 4)
    np.testing.assert_array_equal(together[5], alone[0])  # world 5 ignores who else draws
    assert len({tuple(r) for r in together}) == 8  # distinct across worlds
    np.testing.assert_array_equal(a.counters, [1] * 8)
    assert not np.array_equal(a.uniform(np.arange(8), 4), together)  # the counter advanced
    assert not np.array_equal(WorldRNG(4, 8).uniform(np.arange(8), 4), together)


def test_distributions():
    rng = WorldRNG(0, 4000)
    u = rng.uniform(np.arange(4000), 25, -2.0, 3.0)
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.std() - 5 / np.sqrt(12)) < 0.02
    z = rng.normal(np.arange(4000), 25, std=2.0)
    assert abs(z.mean()) < 0.03 and abs(z.std() - 2.0) < 0.03
    assert abs(np.mean(np.abs(z) < 2.0) - 0.6827) < 0.01  # one-sigma mass
    odd = rng.normal(np.arange(10), 3)
    assert odd.shape == (10, 3)


def test_state_dict_round_trip_and_validation():
    rng = WorldRNG(9, 5)
    rng.uniform(np.array([1, 3]), 2)
    saved = rng.state_dict()
    expected = rng.uniform(np.arange(5), 3)
    other = WorldRNG(0, 5)
    other.load_state_dict(saved)
    np.testing.assert_array_equal(other.uniform(np.arange(5), 3), expected)
    with pytest.raises(ValueError, match="expected shape"):
        WorldRNG(0, 4).load_state_dict(saved)
    with pytest.raises(ValueError, match="num_worlds must be >= 1"):
        WorldRNG(0, 0)
