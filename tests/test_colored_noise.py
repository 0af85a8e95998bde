"""Coloured exploration noise (robolearn.nn.noise) and its wiring into SAC's acting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robolearn.algos.sac import SAC, SACConfig
from robolearn.nn.noise import ColoredNoise, colored_sequences, noise_scales


def _lag1(x: torch.Tensor) -> float:
    """Lag-1 autocorrelation along the last axis, pooled over the leading ones (zero-mean input)."""
    return float((x[..., 1:] * x[..., :-1]).mean() / (x * x).mean())


def _lag1_theory(beta: float, length: int) -> float:
    """The construction's exact lag-1 autocorrelation, by hand from its spectrum (numpy, float64).

    Each rFFT term contributes ``weight * s_k^2 * cos(2 pi k / T)`` to the autocovariance at lag 1,
    ``weight`` 1 for the real-only zero and Nyquist terms (variance 2 s^2 each) and 2 for the others
    (a term and its conjugate, variance 2 s^2 each).
    """
    k = np.arange(length // 2 + 1)
    f = k / length
    f[0] = 1.0 / length
    s2 = f ** (-beta)
    w = np.full_like(s2, 2.0)
    w[0] = 1.0
    if length % 2 == 0:
        w[-1] = 1.0
    return float((w * s2 * np.cos(2 * np.pi * k / length)).sum() / (w * s2).sum())


@pytest.mark.parametrize("beta", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("length", [1000, 999])
def test_sequences_are_standard_normal_with_the_spectrum_s_correlation(beta: float, length: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = colored_sequences(beta, length, (3000,), g, torch.device("cpu"))
    assert x.shape == (3000, length)
    # Unit variance at every step (the exact normalisation), whatever the colour.
    assert float(x.var()) == pytest.approx(1.0, abs=0.03)
    assert float(x[:, 0].var()) == pytest.approx(1.0, abs=0.08)
    assert float(x[:, length // 2].var()) == pytest.approx(1.0, abs=0.08)
    # The correlation between successive steps is the spectrum's: 0 for white, ~0.78 pink, ~1 red.
    assert _lag1(x) == pytest.approx(_lag1_theory(beta, length), abs=0.015)


def test_white_pink_and_red_differ_as_expected() -> None:
    assert _lag1_theory(0.0, 1000) == pytest.approx(0.0, abs=1e-9)
    assert 0.6 < _lag1_theory(1.0, 1000) < 0.9
    assert _lag1_theory(2.0, 1000) > 0.99
    # Amplitudes f^(-beta/2), the zero frequency held at the lowest resolved one.
    s = noise_scales(1.0, 8)
    assert s.tolist() == pytest.approx([math.sqrt(8), math.sqrt(8), math.sqrt(4), math.sqrt(8 / 3), math.sqrt(2)])


def test_noise_walks_through_each_world_s_sequence_then_draws_a_new_one() -> None:
    g = torch.Generator().manual_seed(1)
    noise = ColoredNoise(1.0, 4, num_worlds=3, action_dim=2, generator=g, device="cpu")
    first = noise.buffer.clone()
    got = torch.stack([noise.sample() for _ in range(4)], dim=-1)
    assert torch.equal(got, first)  # step t of every world is its sequence's sample t
    fifth = noise.sample()  # every sequence ran out: all redrawn, the first sample of the new ones
    assert not torch.equal(noise.buffer, first)
    assert torch.equal(fifth, noise.buffer[:, :, 0])
    assert noise.position.tolist() == [1, 1, 1]


def test_reset_restarts_only_the_ended_worlds() -> None:
    g = torch.Generator().manual_seed(2)
    noise = ColoredNoise(2.0, 10, num_worlds=3, action_dim=1, generator=g, device="cpu")
    for _ in range(3):
        noise.sample()
    before = noise.buffer.clone()
    noise.reset(torch.tensor([False, True, False]))
    out = noise.sample()
    assert noise.position.tolist() == [4, 1, 4]
    assert torch.equal(noise.buffer[[0, 2]], before[[0, 2]])  # the others go on with their sequences
    assert torch.equal(out[[0, 2]], before[[0, 2], :, 3])
    assert not torch.equal(noise.buffer[1], before[1])  # world 1 drew a fresh sequence, from its start
    assert torch.equal(out[1], noise.buffer[1, :, 0])


def test_bad_noise_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="action_noise_beta: expected >= 0"):
        SACConfig(action_noise_beta=-1.0)
    with pytest.raises(ValueError, match="action_noise_length: expected >= 2"):
        SACConfig(action_noise_length=1)


def _agent(beta: float, learning_starts: int = 0, seed: int = 0) -> SAC:
    cfg = SACConfig(
        batch_size=8, buffer_size=4096, learning_starts=learning_starts, actor_hidden=(16,), critic_hidden=(16,),
        action_noise_beta=beta, action_noise_length=64,
    )
    return SAC({"policy": 3}, 2, cfg, action_low=torch.tensor([-2.0, 0.0]), action_high=torch.tensor([2.0, 1.0]), seed=seed)


def _store(agent: SAC, obs: torch.Tensor, action: torch.Tensor, ended: torch.Tensor | None = None) -> None:
    n = obs.shape[0]
    done = torch.zeros(n, dtype=torch.bool) if ended is None else ended
    agent.process({"policy": obs}, action, torch.zeros(n), {"policy": obs}, done, torch.zeros(n, dtype=torch.bool))


@pytest.mark.parametrize("beta, correlated", [(0.0, False), (2.0, True)])
def test_random_warm_up_actions_follow_the_noise_s_colour(beta: float, correlated: bool) -> None:
    agent = _agent(beta, learning_starts=10_000)
    obs = torch.zeros(32, 3)
    acts = []
    for _ in range(60):
        a = agent.act({"policy": obs})
        _store(agent, obs, a)
        acts.append(a)
    a = torch.stack(acts, dim=-1)  # [N, A, T]
    assert bool(((a[:, 0] >= -2.0) & (a[:, 0] <= 2.0)).all()) and bool(((a[:, 1] >= 0.0) & (a[:, 1] <= 1.0)).all())
    # Uniform marginal in both cases (mean at the bounds' middle, variance of a uniform: width^2 / 12).
    assert float(a[:, 0].mean()) == pytest.approx(0.0, abs=0.15)
    assert float(a[:, 0].var()) == pytest.approx(16 / 12, rel=0.15)
    u = (a[:, 0] - a[:, 0].mean()) / a[:, 0].std()
    lag1 = _lag1(u)
    assert (lag1 > 0.9) if correlated else (abs(lag1) < 0.05)


def test_policy_actions_use_the_coloured_sample_and_episode_ends_restart_it() -> None:
    agent = _agent(1.0)
    obs = torch.randn(4, 3)
    agent.act({"policy": obs})  # builds the noise for 4 worlds and uses its first sample
    noise = agent.action_noise
    assert noise is not None and noise.position.tolist() == [1, 1, 1, 1]
    z = noise.buffer[:, :, 1].clone()
    expected, _ = agent.actor(obs, noise=z)
    assert torch.allclose(agent.act({"policy": obs}), expected)
    # World 2's episode ends: its next action starts a new sequence; the others take sample 2 of theirs.
    _store(agent, obs, expected, ended=torch.tensor([False, False, True, False]))
    before = noise.buffer.clone()
    agent.act({"policy": obs})
    assert noise.position.tolist() == [3, 3, 1, 3]
    assert torch.equal(noise.buffer[[0, 1, 3]], before[[0, 1, 3]])
    assert not torch.equal(noise.buffer[2], before[2])


def test_white_noise_acting_is_unchanged_by_the_option() -> None:
    # beta = 0 keeps SAC's own draws from the generator, bit for bit (no noise object is built).
    a, b = _agent(0.0, seed=3), _agent(0.0, seed=3)
    obs = torch.randn(5, 3)
    got = a.act({"policy": obs})
    ref, _ = b.actor(obs, generator=b.generator)
    assert a.action_noise is None and torch.equal(got, ref)


def test_a_checkpoint_continues_the_same_noise() -> None:
    agent = _agent(1.0)
    obs = torch.randn(4, 3)
    for _ in range(5):
        _store(agent, obs, agent.act({"policy": obs}))
    clone = _agent(1.0, seed=99)
    clone.load_state_dict(agent.state_dict())
    for _ in range(70):  # past the sequences' end (64): the redraws come from the restored generator
        x, y = agent.act({"policy": obs}), clone.act({"policy": obs})
        assert torch.equal(x, y)
