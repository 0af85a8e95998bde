"""Samplers: replay, dataset and mixed sources, with hand-checked shares and reproducible draws."""

from __future__ import annotations

import pytest
import torch

from robolearn.data import Dataset
from robolearn.data.replay import ReplayBuffer
from robolearn.data.sampler import (
    DatasetSampler,
    MixedSampler,
    ReplaySampler,
    concat_batches,
    split_batch_size,
)


def replay_of(values: list[float], dim: int = 2) -> ReplayBuffer:
    """A replay whose transition i has observation value ``values[i]`` everywhere."""
    buf = ReplayBuffer(100)
    v = torch.tensor(values)
    obs = {"policy": v[:, None].expand(-1, dim).clone()}
    buf.add(obs, v[:, None].clone(), v.clone(), {"policy": obs["policy"] + 0.5}, torch.zeros(len(values), dtype=torch.bool))
    return buf


def tiny_dataset() -> Dataset:
    # two episodes, reward 1 every step: returns-to-go with gamma 0.5 are 1.75, 1.5, 1 and 1.5, 1
    return Dataset.from_episodes(
        [
            {"observations": {"policy": torch.full((4, 2), 10.0)}, "actions": torch.zeros(3, 1),
             "rewards": torch.ones(3), "terminals": torch.tensor([False, False, True])},
            {"observations": {"policy": torch.full((3, 2), 20.0)}, "actions": torch.zeros(2, 1),
             "rewards": torch.ones(2), "terminals": torch.tensor([False, True])},
        ]
    )


def test_split_batch_size_hand_computed():
    assert split_batch_size(256, [0.5, 0.5]) == [128, 128]
    assert split_batch_size(5, [0.5, 0.5]) == [3, 2]
    assert split_batch_size(10, [1, 3]) == [3, 7]  # exact 2.5 / 7.5: the tied remainder goes to the first
    assert split_batch_size(7, [1, 1, 1]) == [3, 2, 2]
    assert sum(split_batch_size(257, [0.25, 0.75])) == 257


def test_mixed_sampler_draws_each_source_at_its_ratio():
    online, offline = replay_of([1.0] * 10), replay_of([2.0] * 10)
    mixed = MixedSampler([ReplaySampler(online, seed=0), ReplaySampler(offline, seed=1)], [1, 3])
    b = mixed.sample(8)
    assert b.obs["policy"][:, 0].tolist() == [1.0] * 2 + [2.0] * 6
    torch.testing.assert_close(b.next_obs["policy"], b.obs["policy"] + 0.5)
    assert b.action.shape == (8, 1) and b.terminated.shape == (8,)
    assert len(mixed) == 20


def test_an_empty_source_gives_its_share_to_the_others():
    empty = ReplayBuffer(10)
    mixed = MixedSampler([ReplaySampler(empty, seed=0), ReplaySampler(replay_of([3.0] * 4), seed=1)], [0.5, 0.5])
    b = mixed.sample(6)
    assert b.obs["policy"][:, 0].tolist() == [3.0] * 6
    with pytest.raises(RuntimeError, match="every source is empty"):
        MixedSampler([ReplaySampler(ReplayBuffer(3), seed=0)], [1]).sample(2)


def test_mixed_sampler_rejects_bad_ratios():
    s = ReplaySampler(replay_of([1.0]), seed=0)
    with pytest.raises(ValueError, match="ratios"):
        MixedSampler([s, s], [1.0])
    with pytest.raises(ValueError, match="ratios"):
        MixedSampler([s, s], [1.0, 0.0])
    with pytest.raises(ValueError, match="ratios"):
        MixedSampler([s], [float("nan")])


def test_owned_generators_checkpoint_and_replay_the_same_draws():
    s = ReplaySampler(replay_of([float(i) for i in range(50)]), seed=7)
    state = s.state_dict()
    first = s.sample(16).obs["policy"]
    s.load_state_dict(state)
    torch.testing.assert_close(s.sample(16).obs["policy"], first)
    # a shared generator belongs to its owner: the sampler does not checkpoint it
    shared = ReplaySampler(replay_of([1.0]), generator=torch.Generator().manual_seed(0))
    assert shared.state_dict() == {}


def test_concat_keeps_only_common_groups_and_extras():
    a, b = replay_of([1.0] * 3).sample(2), replay_of([2.0] * 3).sample(3)
    a.obs["critic"] = torch.zeros(2, 4)
    a.next_obs["critic"] = torch.zeros(2, 4)
    a.extras["mc_return"] = torch.zeros(2)
    out = concat_batches([a, b])
    assert set(out.obs) == {"policy"} and out.extras == {}
    assert out.reward.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]


def test_dataset_sampler_attaches_monte_carlo_returns():
    ds = tiny_dataset()
    s = DatasetSampler(ds, seed=0, mc_return_gamma=0.5)
    b = s.sample(64)
    expect = {10.0: {1.75, 1.5, 1.0}, 20.0: {1.5, 1.0}}
    for obs, g in zip(b.obs["policy"][:, 0].tolist(), b.extras["mc_return"].tolist(), strict=True):
        assert g in expect[obs]
    assert len(s) == 5
    with pytest.raises(ValueError, match="mc_return_gamma"):
        DatasetSampler(ds, mc_return_gamma=1.5)
