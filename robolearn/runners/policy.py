"""A trained run as a deterministic policy: :func:`load_policy` and :class:`LoadedPolicy`.

The agent is rebuilt from the run's ``config.json`` (through the algorithm registry) and its
``policy_spec.json`` (observation sizes, action size and bounds), so loading a policy needs
neither the simulator nor the task registry: what a deploy runtime on a robot stands on.

A recurrent run's policy carries its hidden state from one :meth:`LoadedPolicy.act` to the next,
starting from the initial (zero) state; :meth:`LoadedPolicy.reset` starts it over, for every world
or for the worlds whose episode ended (``reset(done)``, which evaluation rollouts call). It steps
the run's deployable module (``policy_module()``: the contract of ``robolearn.nn.recurrent.
RecurrentPolicy``), so it acts exactly as the exported policy does, and it owns its state: the
inference state a checkpoint holds (the last evaluation's) is never carried into a loaded policy.
A feed-forward policy acts through ``act_inference`` as before; its ``reset`` does nothing.

A policy whose input spans several observation groups (PPO's history encoder reads ``policy`` then
``history``: the module's ``obs_groups``) acts from the observation dict as the env gives it; the
groups are concatenated in that order, as the exported network's input row is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robolearn.algos import registry
from robolearn.runners.checkpoint import CheckpointManager
from robolearn.runners.train_config import TrainConfig, read_train_config
from robolearn.spec.manifest import PolicySpec
from robolearn.types import Resettable
from robolearn.utils.config import ConfigError, read_json_object


class LoadedPolicy:
    """A trained run's deterministic policy: :meth:`act` on observation dicts, plus its spec and config
    (a recurrent one carries its state, module doc).
    """

    def __init__(self, agent: Any, cfg: TrainConfig, spec: dict[str, Any], checkpoint: Path) -> None:
        """Wrap a rebuilt ``agent`` (weights loaded) with its run's config, spec and checkpoint path."""
        self.agent = agent
        """The rebuilt agent with the checkpoint's weights."""
        self.cfg = cfg
        """The run's training config."""
        self.spec = spec
        """The run's ``policy_spec.json`` (what each observation and action number means)."""
        self.checkpoint = checkpoint
        """The checkpoint file the weights came from."""
        module = agent.policy_module()
        self._recurrent: nn.Module | None = module if getattr(module, "state_names", None) else None
        self.obs_groups: tuple[str, ...] = tuple(
            getattr(module, "obs_groups", None) or (getattr(agent, "actor_group", "policy"),)
        )
        """The observation groups the policy reads, in the order its input row concatenates them."""
        self._state: tuple[torch.Tensor, ...] | None = None
        """The carried hidden state ``[N, *shape]`` per state; ``None``: the initial state at the next act."""

    @property
    def recurrent(self) -> bool:
        """Whether the policy carries hidden state between :meth:`act` calls."""
        return self._recurrent is not None

    @property
    def state(self) -> tuple[torch.Tensor, ...]:
        """The carried hidden state (``[N, *shape]`` per state name; empty before the first act
        after a reset, and for a feed-forward policy).
        """
        return self._state or ()

    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic actions ``[N, A]`` for an observation dict (as ``env.obs``); a recurrent
        policy advances its state (a batch of another size than the carried state's is refused).
        """
        missing = [g for g in self.obs_groups if g not in obs]
        if missing:
            raise KeyError(f"obs: the policy reads the groups {list(self.obs_groups)}; {missing} missing (got {sorted(obs)})")
        with torch.inference_mode():
            if self._recurrent is None:
                return self.agent.act_inference(obs)
            return self._act_recurrent(obs)

    def _act_recurrent(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """One step of the recurrent module from the carried state."""
        module = self._recurrent
        assert module is not None
        # The module's input row: its groups in order (the actor group, then the history frames).
        parts = [obs[g].flatten(1) for g in self.obs_groups]
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        if self._state is None:
            module.to(x.device)
            self._state = tuple(s.to(x.device) for s in module.initial_state(x.shape[0]))
        elif self._state[0].shape[0] != x.shape[0]:
            raise ValueError(
                f"obs: a batch of {x.shape[0]} worlds, but the carried state is for {self._state[0].shape[0]}; "
                "call reset() to start over with another batch"
            )
        action, *state = module(x, *self._state)
        self._state = tuple(state)
        return action

    def reset(self, done: torch.Tensor | None = None) -> None:
        """Start the hidden state over from the initial state: every world (``done`` omitted; the
        next :meth:`act` may then have any batch size) or the worlds where ``done[N]`` (bool) is
        true, the others keeping theirs. Nothing for a feed-forward policy; a learner that acts with
        state of its own (a chunked policy's executor: ``reset(done)``) restarts that.
        """
        if self._recurrent is None and isinstance(self.agent, Resettable):
            self.agent.reset(done)
            return
        if self._state is None:
            return
        if done is None:
            self._state = None
            return
        mask = done.to(device=self._state[0].device, dtype=torch.bool).reshape(-1)
        if mask.shape[0] != self._state[0].shape[0]:
            raise ValueError(f"done: expected {self._state[0].shape[0]} flags (one per world), got {mask.shape[0]}")
        with torch.inference_mode():
            self._state = tuple(
                torch.where(mask.reshape(-1, *([1] * (s.dim() - 1))), torch.zeros_like(s), s) for s in self._state
            )

    def module(self) -> nn.Module:
        """The policy as a plain ``obs -> action`` module on the CPU (what export traces); a
        recurrent one is ``(obs, *states) -> (action, *new_states)`` with ``state_names``.
        """
        return self.agent.policy_module()


def read_policy_spec(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The run's ``policy_spec.json`` as a mapping.

    Raises:
        FileNotFoundError: the run has none.
        ConfigError: it is not a JSON object (the file is named).
    """
    return read_json_object(Path(run_dir) / "policy_spec.json", "the run's observation and action layout is unknown")


def agent_spaces(spec: Mapping[str, Any], where: str = "policy_spec.json") -> dict[str, Any]:
    """``obs_dims``, ``action_dim``, ``action_low`` and ``action_high`` of a policy spec: what an
    agent's constructor needs, read without an env.

    Raises:
        ConfigError: the spec is malformed (:class:`robolearn.spec.SpecError`, naming the field and
            the value, with ``where``).
    """
    typed = PolicySpec.from_dict(spec, where)
    low = [v for term in typed.actions for v in term.low]
    high = [v for term in typed.actions for v in term.high]
    if len(low) != typed.action_dim or len(high) != typed.action_dim:
        raise ConfigError(f"{where}: action bounds give {len(low)}/{len(high)} values for action_dim {typed.action_dim}")
    return {
        "obs_dims": {g: group.size for g, group in typed.observations.items()},
        "action_dim": typed.action_dim,
        "action_low": torch.tensor(low, dtype=torch.float32),
        "action_high": torch.tensor(high, dtype=torch.float32),
    }


def load_policy(run_dir: str | os.PathLike[str], device: str = "cpu") -> LoadedPolicy:
    """Rebuild a run's agent from its ``config.json`` and ``policy_spec.json`` and load its newest
    readable checkpoint (a damaged latest one is passed over with a warning).

    Raises:
        FileNotFoundError: the run has no config, spec or checkpoint.
        ConfigError: the config or spec cannot be read (the file is named).
        CheckpointError: no checkpoint of the run loads (each is named with its reason).
    """
    run = Path(run_dir)
    cfg = read_train_config(run)
    spec = read_policy_spec(run)
    spaces = agent_spaces(spec, str(run / "policy_spec.json"))
    # The newest checkpoint that loads and verifies: a truncated latest one falls back, with a warning.
    found = CheckpointManager(run, keep=None).load_newest_readable(map_location=device)
    if found is None:
        raise FileNotFoundError(f"no checkpoint in {run / 'checkpoints'}")
    path, state = found
    algo_cfg = cfg.algo
    o2o = state.get("o2o")
    if cfg.o2o is not None and cfg.o2o.pretrain is not None and o2o is not None and not o2o.get("online_started"):
        algo_cfg = cfg.o2o.pretrain  # an offline-to-online run still in its offline phase: the pre-training learner
    algo = registry.spec_of(algo_cfg)
    agent = algo.build(algo_cfg, spaces["obs_dims"], spaces["action_dim"], action_low=spaces["action_low"],
                       action_high=spaces["action_high"], device=device, seed=cfg.seed)
    agent.load_state_dict(state["agent"])
    return LoadedPolicy(agent, cfg, spec, path)


__all__ = ["LoadedPolicy", "agent_spaces", "load_policy", "read_policy_spec"]
