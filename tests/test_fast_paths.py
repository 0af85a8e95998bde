"""The env core's fast paths give exactly what the plain ones give (issue 10, randomisation cost):
reset draws computed in one pass (``WorldRNG.batch``), observation groups processed on the
concatenated frame, ring buffers read through cached indices, terms shared between groups."""

from __future__ import annotations

import math

import pytest
import torch

import robolearn
from robolearn.envs import BatchedEnv, NoiseCfg, mdp
from robolearn.sim2real.randomization import ObservationDelay
from robolearn.spec import (
    Delay,
    GeneratorSource,
    NoiseSpec,
    ObservationProcessor,
    ObsGroupSpec,
    ObsTermSpec,
    TermProcessor,
)
from robolearn.tasks.locomotion.half_cheetah_dr import half_cheetah_dr_cfg
from robolearn.utils.rng import WorldRNG


def _calls(rng: WorldRNG, ids: torch.Tensor, sizes: list[tuple[str, int]], other: torch.Tensor | None = None) -> list[torch.Tensor]:
    """A reset-like sequence of draws (``other`` worlds draw between the third and fourth call)."""
    out = []
    for k, (kind, size) in enumerate(sizes):
        if k == 3 and other is not None:  # the size the record expects next: only the worlds differ
            out.append(rng.uniform(other, 1))
        out.append(rng.uniform(ids, size, -1.0, 2.0) if kind == "u" else rng.normal(ids, size, 0.5))
    return out


@pytest.mark.parametrize("variant", ["same", "longer", "shorter", "other size", "other worlds", "every world"])
def test_batched_reset_draws_equal_separate_calls(variant: str) -> None:
    recorded = [("u", 1), ("u", 3), ("n", 5), ("u", 1), ("n", 2)]
    now = {
        "same": recorded,
        "longer": [*recorded, ("u", 4)],
        "shorter": recorded[:2],
        "other size": [*recorded[:2], ("u", 7), *recorded[3:]],
        "other worlds": recorded,
        "every world": recorded,
    }[variant]
    ids = torch.tensor([1, 4, 6])
    other = torch.tensor([0, 4]) if variant == "other worlds" else None
    fast, slow = WorldRNG(5, 8), WorldRNG(5, 8)
    for rng in (fast, slow):
        rng.uniform(torch.tensor([4]), 1)  # counters that differ per world
    with fast.batch(ids, "reset"):  # the first time only records the sequence
        first = _calls(fast, ids, recorded)
    assert all(torch.equal(a, b) for a, b in zip(first, _calls(slow, ids, recorded), strict=True))
    with fast.batch(ids, "reset"):
        got = _calls(fast, ids, now, other)
        if variant == "every world":
            got.append(fast.uniform(None, 2))
    want = _calls(slow, ids, now, other)
    if variant == "every world":
        want.append(slow.uniform(None, 2))
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert torch.equal(fast.counters, slow.counters)
    # Inside the block the counters are exact whenever someone reads them.
    with fast.batch(ids, "reset"):
        _calls(fast, ids, recorded[:2])
        assert torch.equal(fast.state_dict()["counters"], _counters_after(slow, ids, recorded[:2]))


def _counters_after(rng: WorldRNG, ids: torch.Tensor, sizes: list[tuple[str, int]]) -> torch.Tensor:
    _calls(rng, ids, sizes)
    return rng.counters.clone()


def _group(terms: tuple[ObsTermSpec, ...]) -> ObsGroupSpec:
    width = sum(t.dim for t in terms)
    return ObsGroupSpec(shape=(width,), frame_dim=width, terms=terms)


@pytest.mark.parametrize(
    "terms",
    [
        # one noise kind over every column, clip and per-column scale on some terms
        (
            ObsTermSpec("a", 0, 3, noise=NoiseSpec("gaussian", 0.3), clip=(-0.5, 0.7)),
            ObsTermSpec("b", 3, 2, noise=NoiseSpec("gaussian", 2.0), scale=(3.0, -0.25)),
        ),
        # noisy terms after a noiseless one (noise on a column range), uniform noise
        (
            ObsTermSpec("a", 0, 2, scale=2.0),
            ObsTermSpec("b", 2, 2, noise=NoiseSpec("uniform", 0.4), clip=(-math.inf, 0.2)),
            ObsTermSpec("c", 4, 1, noise=NoiseSpec("uniform", 1.5)),
        ),
        # no noise at all: straight into the observation dtype
        (ObsTermSpec("a", 0, 2), ObsTermSpec("b", 2, 3)),
        # two kinds, and a noiseless term between noisy ones: the term-by-term path
        (
            ObsTermSpec("a", 0, 2, noise=NoiseSpec("uniform", 0.4)),
            ObsTermSpec("b", 2, 1),
            ObsTermSpec("c", 3, 2, noise=NoiseSpec("gaussian", 0.1), clip=(-0.1, 0.1)),
        ),
    ],
)
def test_group_processing_equals_term_by_term(terms: tuple[ObsTermSpec, ...]) -> None:
    group = _group(terms)
    proc = ObservationProcessor("policy", group, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(5, t.dim, generator=gen, dtype=torch.float64) * 3 for t in terms]
    got = proc(values, GeneratorSource(5, torch.Generator().manual_seed(1)))
    # By hand: each kind's noise is one draw laid out over its terms in order, then each term's
    # noise, clip and scale (TermProcessor), then the concatenation cast once.
    source = GeneratorSource(5, torch.Generator().manual_seed(1))
    noise: dict[str, torch.Tensor] = {}
    for kind in dict.fromkeys(t.noise.kind for t in terms if t.noise is not None):
        width = sum(t.dim for t in terms if t.noise is not None and t.noise.kind == kind)
        unit = source.normal("", width) if kind == "gaussian" else source.uniform("", width) * 2 - 1
        noise[kind] = unit
    used = dict.fromkeys(noise, 0)
    parts = []
    for t, v in zip(terms, values, strict=True):
        n = None
        if t.noise is not None:
            n = noise[t.noise.kind][:, used[t.noise.kind] : used[t.noise.kind] + t.dim]
            used[t.noise.kind] += t.dim
        parts.append(TermProcessor(t)(v, n))
    assert torch.equal(got, torch.cat(parts, dim=1).to(torch.float32))
    assert got.dtype == torch.float32 and not any(got.data_ptr() == v.data_ptr() for v in values)
    # Other dtypes take the term-by-term path with the same result.
    again = proc([v.float() for v in values], None)
    by_term = [TermProcessor(t)(v.float()) for t, v in zip(terms, values, strict=True)]
    assert torch.equal(again, torch.cat(by_term, 1).to(torch.float32))


def test_delay_follows_lags_changed_in_place_and_replaced() -> None:
    d = Delay(0, 3, batch=4)
    frames = [torch.full((4, 1), float(t)) for t in range(10)]
    d.restart(d.rows, frames[0])
    for t in range(1, 4):
        d(frames[t])
    d.lag[torch.tensor([1, 3])] = torch.tensor([2, 3])  # in place, as a reset draws them
    assert d(frames[4]).flatten().tolist() == [4, 2, 4, 1]
    d.lag = torch.tensor([1, 1, 0, 0])  # replaced, as a checkpoint restores them
    assert d(frames[5]).flatten().tolist() == [4, 4, 5, 5]
    with torch.inference_mode():  # no version counter on inference tensors: indices recomputed
        d.lag = torch.tensor([0, 3, 2, 1])
        assert d(frames[6]).flatten().tolist() == [6, 3, 4, 5]
        d.lag[0] = 2
        assert d(frames[7]).flatten().tolist() == [5, 4, 5, 6]


def test_terms_shared_by_groups_see_each_groups_draws() -> None:
    """The critic reads the policy's and the privileged group's terms once, but a jittered delay
    records this step's lags while the policy group is processed: a group before it sees the
    previous lags, a group after it (the critic) this step's."""
    robolearn.list_tasks()
    cfg = half_cheetah_dr_cfg()
    cfg.events = {}
    policy = cfg.observations["policy"]
    policy.delay = ObservationDelay((0, 3), jitter=True)
    policy.terms["joint_vel"].noise = NoiseCfg("uniform", 0.2)
    cfg.observations = {"privileged": cfg.observations["privileged"], "policy": policy}  # privileged first
    env = BatchedEnv(cfg, 8, seed=0)
    gen = torch.Generator().manual_seed(0)
    differed = False
    for _ in range(10):
        before = mdp.drawn(env).float()
        obs, *_ = env.step(torch.rand(8, env.action_dim, generator=gen) * 2 - 1)
        after = mdp.drawn(env).float()  # this step's jittered lags
        k = after.shape[1]
        assert torch.equal(obs["critic"][:, 17 : 17 + k], after)
        assert torch.equal(obs["critic"][:, :8], env.sim.qpos[:, 1:].float())  # the clean policy terms
        # The privileged group came first: the delay's columns (lag, age) are those recorded
        # before this step's delay ran, the others (jitter, action delay) this step's.
        from_delay = torch.tensor([name.startswith("obs_") for name in sorted(env.drawn)])
        assert torch.equal(obs["privileged"][:, :k], torch.where(from_delay, before, after))
        differed |= not torch.equal(obs["privileged"][:, :k], after)
    assert differed  # the lags did change during some step, so the two groups were told apart
