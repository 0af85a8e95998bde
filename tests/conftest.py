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
