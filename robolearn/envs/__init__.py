"""Batched environments: ``BatchedEnv``, its declarative configs, generic MDP terms, the registry."""

from robolearn.envs import mdp
from robolearn.envs.batched_env import BatchedEnv
from robolearn.envs.cfg import (
    ActionTerm,
    CommandTerm,
    EventTerm,
    InitialState,
    NoiseCfg,
    ObsGroup,
    ObsTerm,
    RewardTerm,
    SuccessTerm,
    TaskCfg,
    TerminationTerm,
)
from robolearn.envs.registry import list_tasks, make, register, task_cfg

__all__ = [
    "ActionTerm",
    "BatchedEnv",
    "CommandTerm",
    "EventTerm",
    "InitialState",
    "NoiseCfg",
    "ObsGroup",
    "ObsTerm",
    "RewardTerm",
    "SuccessTerm",
    "TaskCfg",
    "TerminationTerm",
    "list_tasks",
    "make",
    "mdp",
    "register",
    "task_cfg",
]
