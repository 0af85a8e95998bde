"""MLP construction and the empirical normaliser's running statistics."""

from __future__ import annotations

import pytest
import torch

from robolearn.nn import MLP, EmpiricalNormalizer


def test_mlp_shapes_layer_norm_and_errors():
    net = MLP(5, 3, hidden=(16, 8), activation="tanh", layer_norm=True, output_gain=0.01)
    assert net(torch.zeros(7, 5)).shape == (7, 3)
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in net) == 2
    assert net[-1].weight.abs().max() < 0.05 and torch.equal(net[-1].bias, torch.zeros(3))
    with pytest.raises(ValueError, match="unknown 'swish'; expected one of"):
        MLP(2, 2, activation="swish")


def test_normalizer_matches_batch_statistics_over_chunks():
    torch.manual_seed(0)
    data = torch.randn(1000, 4) * torch.tensor([1.0, 2.0, 0.5, 3.0]) + torch.tensor([0.0, 5.0, -1.0, 2.0])
    norm = EmpiricalNormalizer(4, clip=None)
    for chunk in data.split(137):
        norm.update(chunk)
    torch.testing.assert_close(norm.mean, data.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(norm.var, data.var(0, unbiased=False), rtol=1e-4, atol=1e-4)
    assert norm.count.item() == 1000
    y = norm(data)
    torch.testing.assert_close(y.mean(0), torch.zeros(4), atol=1e-4, rtol=0)
    clipped = EmpiricalNormalizer(1, clip=2.0)
    clipped.update(torch.randn(100, 1))
    assert clipped(torch.tensor([[100.0]])).item() == 2.0


def test_normalizer_freezes_after_until_and_state_dict_round_trip():
    norm = EmpiricalNormalizer(2, until=10)
    norm.update(torch.ones(10, 2))
    norm.update(torch.full((10, 2), 5.0))
    torch.testing.assert_close(norm.mean, torch.ones(2))
    other = EmpiricalNormalizer(2)
    other.load_state_dict(norm.state_dict())
    torch.testing.assert_close(other.mean, norm.mean)
