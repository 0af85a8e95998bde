"""Importing this module registers every robolearn task with Gymnasium as ``robolearn/<TaskId>-v0``.

``gymnasium.make("robolearn.gym:robolearn/HalfCheetah-v0")`` imports it and makes the env in one
call; after ``import robolearn.gym`` the plain id works too. ``import robolearn`` alone does not
import Gymnasium (the package facade has no side effects).
"""

from __future__ import annotations

from robolearn.envs.gym_adapter import gym_id, register_gymnasium_envs
from robolearn.envs.registry import load_task_plugins

load_task_plugins()
GYM_IDS: list[str] = register_gymnasium_envs()
"""The Gymnasium ids registered."""

__all__ = ["GYM_IDS", "gym_id"]
