"""Shared fixtures: backends under test and small models."""

from __future__ import annotations

import pytest
import torch

from robolearn.assets import gymnasium_asset

FAST_BACKENDS = ["mujoco"]
"""Backends that must match the reference backend (MJX, Warp and Isaac join this list later)."""


@pytest.fixture(autouse=True)
def _torch_threads() -> None:
    torch.set_num_threads(1)


@pytest.fixture
def cheetah_xml() -> str:
    return str(gymnasium_asset("half_cheetah.xml"))


@pytest.fixture
def ant_xml() -> str:
    return str(gymnasium_asset("ant.xml"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu``-marked tests run where CUDA exists and are reported as skipped, with the reason, elsewhere."""
    if torch.cuda.is_available():
        return
    reason = "needs CUDA: torch.cuda.is_available() is False on this machine (run on a GPU machine: pytest -m gpu)"
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
