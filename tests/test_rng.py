"""Per-world counter-based random streams (torch, no NumPy)."""

from __future__ import annotations

import random

import pytest
import torch

from robolearn.utils import WorldRNG
from robolearn.utils.rng import CALL_STRIDE, mix, mix64


def test_mix_is_splitmix64_bit_for_bit():
    # Exact modular arithmetic on Python integers is the reference for the int64 tensor version:
    # a lost mask (arithmetic instead of logical shift) or a wrong constant changes most outputs.
    gen = random.Random(0)
    values = [gen.getrandbits(64) for _ in range(200)] + [0, 1, (1 << 63), (1 << 64) - 1]
    signed = [v - (1 << 64) if v >= 1 << 63 else v for v in values]
    got = mix(torch.tensor(signed, dtype=torch.int64)).tolist()
    assert [g & ((1 << 64) - 1) for g in got] == [mix64(v) for v in values]
    assert mix64(0) == 0 and mix64(1) == 0x5692161D100B05E5  # SplitMix64's finaliser of 1


def test_streams_are_per_world_and_reproducible():
    a, b = WorldRNG(3, 8), WorldRNG(3, 8)
    together = a.uniform(None, 4)
    alone = b.uniform(torch.tensor([5]), 4)
    assert torch.equal(together[5], alone[0])  # world 5 ignores who else draws
    assert len({tuple(r) for r in together.tolist()}) == 8  # distinct across worlds
    assert a.counters.tolist() == [1] * 8 and b.counters.tolist() == [0] * 5 + [1] + [0] * 2
    assert not torch.equal(a.uniform(None, 4), together)  # the counter advanced
    assert not torch.equal(WorldRNG(4, 8).uniform(None, 4), together)
    # The same world's stream does not depend on the number of worlds either.
    assert torch.equal(WorldRNG(3, 100).uniform(torch.tensor([5]), 4)[0], together[5])
    # A world listed twice draws (and advances) once.
    c = WorldRNG(3, 8)
    twice = c.uniform(torch.tensor([5, 5]), 4)
    assert torch.equal(twice[0], twice[1]) and c.counters[5] == 1


def test_distributions():
    rng = WorldRNG(0, 4000)
    u = rng.uniform(None, 25, -2.0, 3.0)
    assert u.dtype == torch.float64 and u.shape == (4000, 25)
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.std() - 5 / 12**0.5) < 0.02
    z = rng.normal(None, 25, std=2.0)
    assert abs(z.mean()) < 0.03 and abs(z.std() - 2.0) < 0.03
    assert abs((z.abs() < 2.0).double().mean() - 0.6827) < 0.01  # one-sigma mass
    # The two halves of Box-Muller are independent: no correlation between columns.
    assert abs(torch.corrcoef(torch.stack([z[:, 0], z[:, 13]]))[0, 1]) < 0.05
    odd = rng.normal(torch.arange(10), 3)
    assert odd.shape == (10, 3) and torch.isfinite(odd).all()


def test_state_dict_round_trip_and_validation():
    rng = WorldRNG(9, 5)
    rng.uniform(torch.tensor([1, 3]), 2)
    saved = rng.state_dict()
    expected = rng.uniform(None, 3)
    other = WorldRNG(0, 5)
    other.load_state_dict(saved)
    assert torch.equal(other.uniform(None, 3), expected)
    with pytest.raises(ValueError, match="expected shape"):
        WorldRNG(0, 4).load_state_dict(saved)
    with pytest.raises(ValueError, match="num_worlds must be >= 1"):
        WorldRNG(0, 0)
    with pytest.raises(ValueError, match="draws per world"):
        rng.uniform(None, CALL_STRIDE + 1)


def test_step_streams_are_per_world_blockwise_exact_and_checkpointed():
    from robolearn.utils.rng import STEP_BLOCK

    a, b = WorldRNG(3, 6), WorldRNG(3, 4)
    steps_a = [a.step_normal("noise/policy", 5) for _ in range(STEP_BLOCK + 3)]  # crosses a block
    steps_b = [b.step_normal("noise/policy", 5) for _ in range(STEP_BLOCK + 3)]
    assert all(x.shape == (6, 5) for x in steps_a)
    assert all(torch.equal(x[:4], y) for x, y in zip(steps_a, steps_b, strict=True))  # independent of N
    assert not torch.equal(steps_a[0], steps_a[1])  # a new step, new values
    assert not torch.equal(steps_a[0][0], steps_a[0][1])  # worlds differ
    # Other names (and kinds) are other streams; the per-call counters are untouched.
    assert not torch.equal(WorldRNG(3, 6).step_normal("noise/critic", 5), steps_a[0])
    assert a.counters.tolist() == [0] * 6
    rng = WorldRNG(1, 500)
    u = torch.stack([rng.step_uniform("jitter", 1) for _ in range(40)])
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    # A checkpoint taken mid-block resumes with the same values (the block is recomputed).
    c = WorldRNG(3, 6)
    for _ in range(7):
        c.step_normal("noise/policy", 5)
    saved = c.state_dict()
    d = WorldRNG(0, 6)
    d.load_state_dict(saved)
    assert torch.equal(d.step_normal("noise/policy", 5), steps_a[7])
    assert torch.equal(c.step_normal("noise/policy", 5), steps_a[7])
