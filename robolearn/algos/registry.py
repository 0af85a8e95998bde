"""The one table of algorithms (DESIGN.md, "Algorithm"): name -> config, agent, runner kinds.

The CLI, :func:`robolearn.load_policy` and the runners read this table and name no algorithm
themselves. Adding an algorithm is its package under ``robolearn/algos/`` plus one
:func:`register` call below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from robolearn.algos.bc import BC, BCConfig
from robolearn.algos.cql import CQL, CalQLConfig, CQLConfig
from robolearn.algos.distill import Distill, DistillConfig
from robolearn.algos.drqv2 import DrQV2, DrQV2Config
from robolearn.algos.fql import FQL, FQLConfig
from robolearn.algos.gbc import DiffusionBCConfig, FlowBCConfig, GenerativeBC
from robolearn.algos.iql import IQL, IQLConfig
from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.algos.reinflow import DPPOConfig, ReinFlow, ReinFlowConfig
from robolearn.algos.sac import SAC, SACConfig
from robolearn.algos.td3bc import TD3BC, TD3BCConfig

RUNNER_KINDS: tuple[str, ...] = ("on_policy", "off_policy", "offline", "offline_to_online", "distill")
"""The training loops an algorithm can name: collect-then-update on fresh rollouts (PPO), step and
store and update from a replay (SAC), gradient steps on a fixed dataset (BC, IQL, CQL...), and
offline pre-training then online fine-tuning (``o2o:``; the learners that act, store and learn
from a sampler)."""

AgentFactory = Callable[..., Any]
"""``factory(obs_dims, action_dim, cfg, *, action_low, action_high, device, seed) -> agent``."""


@dataclass(frozen=True)
class AlgoSpec:
    """One algorithm as the rest of robolearn sees it."""

    name: str
    """The ``algo=<name>`` of the CLI and ``config.json``."""
    config: type
    """Its config dataclass (every field documented; defaults are the algorithm's)."""
    agent: type
    """The class whose instances answer the verbs of :class:`robolearn.types.Algorithm`."""
    runners: tuple[str, ...]
    """Runner kinds it trains under (:data:`RUNNER_KINDS`), the default first."""
    factory: AgentFactory
    """Builds a fresh agent (see :data:`AgentFactory`)."""
    description: str = ""
    """One line for listings."""

    @property
    def offline(self) -> bool:
        """Whether its default runner learns from a dataset (``dataset=<file>``)."""
        return self.runners[0] == "offline"

    def build(
        self,
        cfg: Any,
        obs_dims: Mapping[str, int],
        action_dim: int,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> Any:
        """A freshly initialised agent for these spaces (network init seeded by ``seed``)."""
        if type(cfg) is not self.config:
            raise TypeError(f"{self.name}: expected a {self.config.__name__}, got {type(cfg).__name__}")
        torch.manual_seed(seed)  # network init, the same for every algorithm
        return self.factory(
            obs_dims, action_dim, cfg, action_low=action_low, action_high=action_high, device=device, seed=seed
        )


ALGORITHMS: dict[str, AlgoSpec] = {}
"""Every registered algorithm by name, in registration order."""


def register(spec: AlgoSpec) -> AlgoSpec:
    """Add ``spec`` to :data:`ALGORITHMS`; a name or config class registered twice is an error."""
    if spec.name in ALGORITHMS:
        raise ValueError(f"algorithm {spec.name!r} is already registered")
    if any(s.config is spec.config for s in ALGORITHMS.values()):
        raise ValueError(f"{spec.config.__name__} already belongs to another algorithm")
    bad = [k for k in spec.runners if k not in RUNNER_KINDS]
    if not spec.runners or bad:
        raise ValueError(f"{spec.name}: runners must name some of {RUNNER_KINDS}, got {spec.runners}")
    ALGORITHMS[spec.name] = spec
    return spec


def get(name: str) -> AlgoSpec:
    """The algorithm called ``name``; an unknown name lists the valid ones."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise KeyError(f"algo: unknown algorithm {name!r}; valid choices: {', '.join(ALGORITHMS)}") from None


def spec_of(cfg: Any) -> AlgoSpec:
    """The algorithm whose config class is exactly ``type(cfg)`` (Cal-QL's config derives from CQL's)."""
    for spec in ALGORITHMS.values():
        if type(cfg) is spec.config:
            return spec
    raise KeyError(f"no registered algorithm has the config class {type(cfg).__name__}")


def _with_bounds(cls: type) -> AgentFactory:
    """The factory of an agent whose constructor takes action bounds and a seed (SAC and the offline learners)."""

    def factory(obs_dims: Mapping[str, int], action_dim: int, cfg: Any, **kw: Any) -> Any:
        return cls(obs_dims, action_dim, cfg, **kw)

    return factory


def _ppo(obs_dims: Mapping[str, int], action_dim: int, cfg: PPOConfig, **kw: Any) -> PPO:
    # PPO's Gaussian is unbounded (the env clips) and its seed is part of its config.
    return PPO(obs_dims, action_dim, cfg, device=kw["device"])


register(AlgoSpec("ppo", PPOConfig, PPO, ("on_policy",), _ppo, "Proximal Policy Optimisation (on-policy)"))
register(AlgoSpec("sac", SACConfig, SAC, ("off_policy", "offline_to_online"), _with_bounds(SAC), "Soft Actor-Critic / REDQ (off-policy)"))
register(AlgoSpec("bc", BCConfig, BC, ("offline",), _with_bounds(BC), "Behaviour cloning (offline)"))
register(AlgoSpec("td3bc", TD3BCConfig, TD3BC, ("offline", "offline_to_online"), _with_bounds(TD3BC), "TD3+BC (offline)"))
register(AlgoSpec("iql", IQLConfig, IQL, ("offline", "offline_to_online"), _with_bounds(IQL), "Implicit Q-Learning (offline)"))
register(AlgoSpec("cql", CQLConfig, CQL, ("offline", "offline_to_online"), _with_bounds(CQL), "Conservative Q-Learning (offline)"))
register(AlgoSpec("calql", CalQLConfig, CQL, ("offline", "offline_to_online"), _with_bounds(CQL), "Calibrated Q-Learning (offline)"))
register(AlgoSpec("distill", DistillConfig, Distill, ("distill",), _with_bounds(Distill), "Teacher-student distillation: DAgger or asymmetric actor-critic (robolearn distill)"))
register(AlgoSpec("diffusion", DiffusionBCConfig, GenerativeBC, ("offline",), _with_bounds(GenerativeBC), "Diffusion Policy over action chunks (offline behaviour cloning)"))
register(AlgoSpec("flow", FlowBCConfig, GenerativeBC, ("offline",), _with_bounds(GenerativeBC), "Flow-matching / shortcut policy over action chunks (offline behaviour cloning)"))
register(AlgoSpec("reinflow", ReinFlowConfig, ReinFlow, ("on_policy",), _with_bounds(ReinFlow), "ReinFlow: PPO over a flow policy's noisy denoising chain (on-policy fine-tuning)"))
register(AlgoSpec("dppo", DPPOConfig, ReinFlow, ("on_policy",), _with_bounds(ReinFlow), "DPPO: PPO over a diffusion policy's DDIM chain (on-policy fine-tuning)"))
register(AlgoSpec("fql", FQLConfig, FQL, ("offline", "offline_to_online"), _with_bounds(FQL), "Flow Q-learning: BC flow + one-step policy (offline)"))
register(AlgoSpec("drqv2", DrQV2Config, DrQV2, ("off_policy",), _with_bounds(DrQV2), "DrQ-v2 from pixels: shared CNN, random shifts, n-step double Q (off-policy)"))

__all__ = ["ALGORITHMS", "RUNNER_KINDS", "AgentFactory", "AlgoSpec", "get", "register", "spec_of"]
