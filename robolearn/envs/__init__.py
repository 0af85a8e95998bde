"""Batched environments: ``BatchedEnv``, its declarative configs, generic MDP terms, the registry,
and the Gymnasium adapters. ``RobolearnSB3VecEnv`` (Stable-Baselines3, the ``sb3`` extra) is
imported on first access.
"""

from typing import Any

from robolearn.envs import curriculum, mdp
from robolearn.envs.batched_env import BatchedEnv
from robolearn.envs.cfg import (
    ActionDelayModel,
    ActionDelayState,
    ActionTerm,
    ActuatorModel,
    ActuatorState,
    CommandTerm,
    ControlJitterModel,
    ControlJitterState,
    CurriculumTerm,
    EventTerm,
    InitialState,
    ModelState,
    NoiseCfg,
    ObsDelayModel,
    ObsDelayState,
    ObsGroup,
    ObsTerm,
    RewardTerm,
    SuccessTerm,
    TaskCfg,
    TerminationTerm,
)
from robolearn.envs.gym_adapter import RobolearnGymEnv, RobolearnVectorEnv, gym_id, register_gymnasium_envs
from robolearn.envs.registry import list_tasks, make, register, task_cfg

__all__ = [
    "ActionDelayModel",
    "ActionDelayState",
    "ActionTerm",
    "ActuatorModel",
    "ActuatorState",
    "BatchedEnv",
    "CommandTerm",
    "ControlJitterModel",
    "ControlJitterState",
    "CurriculumTerm",
    "EventTerm",
    "InitialState",
    "ModelState",
    "NoiseCfg",
    "ObsDelayModel",
    "ObsDelayState",
    "ObsGroup",
    "ObsTerm",
    "RewardTerm",
    "RobolearnGymEnv",
    "RobolearnSB3VecEnv",
    "RobolearnVectorEnv",
    "SuccessTerm",
    "TaskCfg",
    "TerminationTerm",
    "gym_id",
    "curriculum",
    "list_tasks",
    "make",
    "mdp",
    "register",
    "register_gymnasium_envs",
    "task_cfg",
]


def __getattr__(name: str) -> Any:
    """Import ``RobolearnSB3VecEnv`` lazily, so Stable-Baselines3 stays optional."""
    if name == "RobolearnSB3VecEnv":
        from robolearn.envs.sb3_adapter import RobolearnSB3VecEnv

        return RobolearnSB3VecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
