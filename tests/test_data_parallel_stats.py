"""The statistics data-parallel PPO shares across ranks: the observation normalisers (both folded
with one collective) and the advantage normalisation equal those of one process holding every
rank's batch. Two ranks are emulated in one process: each rank's contribution is computed first,
then the "collective" hands every rank their mean, as an all-reduce would.
"""

from __future__ import annotations

import torch

from robolearn.data.rollout import RolloutStorage
from robolearn.nn import EmpiricalNormalizer
from robolearn.nn.normalizer import update_normalizers


def _batches(seed: int, dim: int, offset: float) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [offset + torch.randn(64, dim, generator=g) * (1 + i) for i in range(3)]


def test_two_normalisers_with_one_collective_equal_one_process_on_the_combined_batch():
    # Far-from-zero observations (positions ~1000): the moments are centred on the running mean,
    # or float32 sums of squares would cancel the variance away.
    actor_rank = [_batches(0, 3, 1000.0), _batches(1, 3, 1000.0)]
    critic_rank = [_batches(2, 5, -2.0), _batches(3, 5, -2.0)]
    ref_a, ref_c = EmpiricalNormalizer(3), EmpiricalNormalizer(5)
    ranks = [(EmpiricalNormalizer(3), EmpiricalNormalizer(5)) for _ in range(2)]
    calls = []
    for step in range(3):
        ref_a.update(torch.cat([actor_rank[0][step], actor_rank[1][step]]))
        ref_c.update(torch.cat([critic_rank[0][step], critic_rank[1][step]]))
        parts = [
            torch.cat([a.moments(actor_rank[r][step]), c.moments(critic_rank[r][step])])
            for r, (a, c) in enumerate(ranks)
        ]
        mean = (parts[0] + parts[1]) / 2

        def reduce(t: torch.Tensor, mean: torch.Tensor = mean) -> torch.Tensor:
            calls.append(t.shape)
            return mean

        for r, (a, c) in enumerate(ranks):
            update_normalizers([(a, actor_rank[r][step]), (c, critic_rank[r][step])], reduce)
    assert len(calls) == 6 and calls[0] == (1 + 2 * 3 + 1 + 2 * 5,)  # one collective per rank and step
    for a, c in ranks:
        torch.testing.assert_close(a.mean, ref_a.mean, rtol=0, atol=1e-3)
        torch.testing.assert_close(a.var, ref_a.var, rtol=1e-3, atol=0)
        torch.testing.assert_close(c.mean, ref_c.mean, rtol=0, atol=1e-5)
        torch.testing.assert_close(c.var, ref_c.var, rtol=1e-4, atol=0)
        assert a.count == ref_a.count / 2  # per-rank samples: the weights of one combined batch


def _storage(seed: int, steps: int = 8, envs: int = 4) -> RolloutStorage:
    g = torch.Generator().manual_seed(seed)
    st = RolloutStorage(steps, envs, {"policy": 2}, 1)
    for _ in range(steps):
        st.add(
            {"policy": torch.randn(envs, 2, generator=g)}, torch.randn(envs, 1, generator=g),
            torch.randn(envs, generator=g) * 3 + seed, torch.rand(envs, generator=g) < 0.1,
            torch.zeros(envs, dtype=torch.bool), torch.randn(envs, generator=g), torch.zeros(envs),
            torch.zeros(envs, 1), torch.ones(envs, 1),
        )
    return st


def test_advantages_are_normalised_with_the_statistics_of_all_ranks():
    ranks = [_storage(0), _storage(5)]  # different reward levels: per-rank statistics would differ
    raw = []
    for st in ranks:
        st.compute_returns(torch.zeros(4), 0.99, 0.95)
        raw.append(st.advantages.clone())
    combined = torch.cat(raw)
    want = (combined - combined.mean()) / (combined.std() + 1e-8)
    parts = [torch.stack([torch.tensor(float(a.numel())), a.sum(), a.square().sum()]) for a in raw]
    mean = (parts[0] + parts[1]) / 2
    for r, st in enumerate(ranks):
        st.compute_returns(torch.zeros(4), 0.99, 0.95, normalize_advantages=True, reduce_mean=lambda t, m=mean: m)
        # Bessel's correction uses a rank's count for the total: relative error below 1/n (1/32).
        torch.testing.assert_close(st.advantages, want[r * 8 : (r + 1) * 8], rtol=1e-2, atol=1e-4)
    local = (raw[1] - raw[1].mean()) / (raw[1].std() + 1e-8)
    assert (ranks[1].advantages - local).abs().max() > 0.1  # not the per-rank normalisation
