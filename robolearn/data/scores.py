"""Normalised scores and D4RL's published reference returns for the locomotion tasks."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

from robolearn.data.validation import task_family

D4RL_REF_RETURNS: dict[str, tuple[float, float]] = {
    # (random, expert) episode returns from D4RL's d4rl/infos.py, REF_MIN_SCORE / REF_MAX_SCORE for
    # '<task>-random-v0', which its loop reuses for every v0/v1/v2 gym-mujoco dataset of the task
    # (github.com/Farama-Foundation/D4RL, d4rl/infos.py).
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
    "ant": (-325.6, 3879.7),
}
"""D4RL reference returns ``(random, expert)`` by task family; scores of D4RL-era (gym v2) tasks."""

_Returns = TypeVar("_Returns", float, np.ndarray, torch.Tensor)


def d4rl_reference_returns(name: str) -> tuple[float, float]:
    """``(random, expert)`` reference returns for a D4RL locomotion dataset or task name
    (``"hopper-medium-v2"``, ``"HalfCheetah"``); KeyError naming the known families otherwise.
    """
    key = name.lower().replace("_", "-").split("/")[-1].split("-")[0]
    if key not in D4RL_REF_RETURNS:
        # task_family knows the families whose observation size changed; try it for ids like "mujoco/ant/...".
        fam = task_family(name)
        if fam not in D4RL_REF_RETURNS:
            raise KeyError(
                f"{name!r}: no D4RL reference returns; known task families {sorted(D4RL_REF_RETURNS)}"
            )
        key = fam
    return D4RL_REF_RETURNS[key]


def normalized_score(returns: _Returns, random_ref: float, expert_ref: float) -> _Returns:
    """D4RL's normalised score, ``100 * (returns - random_ref) / (expert_ref - random_ref)``:
    0 is a random policy, 100 an expert. Works on floats, numpy arrays and tensors alike.
    """
    span = float(expert_ref) - float(random_ref)
    if span == 0.0:
        raise ValueError(f"expert_ref ({expert_ref}) must differ from random_ref ({random_ref})")
    return 100.0 * (returns - float(random_ref)) / span
