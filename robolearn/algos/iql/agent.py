"""Implicit Q-Learning: expectile value regression, SARSA-style Q backups through V, and an
advantage-weighted actor; no action outside the dataset is ever queried.

The three losses touch disjoint parameters and are built from the pre-step networks, so one
backward of their sum replaces three (same gradients, a third of the graph traversals).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from robolearn.algos.common import OfflineLearner
from robolearn.algos.iql.config import IQLConfig
from robolearn.algos.iql.losses import actor_loss, critic_loss, value_loss
from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble, make_target, soft_update_
from robolearn.nn.mlp import MLP
from robolearn.nn.offline import (
    FIRST_LAYER,
    DeterministicActor,
    NetSpec,
)
from robolearn.types import Batch


class IQL(OfflineLearner):
    """Actor, Q ensemble with its target, value network V, their optimisers (and the actor's
    optional cosine schedule); :meth:`update` is one step of all three.
    """

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: IQLConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the learner (arguments as :class:`~robolearn.algos.bc.BC`)."""
        cfg = self._setup(cfg or IQLConfig(), obs_dims, device, seed, critic=True)
        actor_cls = TanhGaussianActor if cfg.actor_type == "gaussian" else DeterministicActor
        self.actor: TanhGaussianActor | DeterministicActor = actor_cls(
            obs_dims[self.actor_group],
            action_dim,
            cfg.actor_hidden,
            cfg.activation,
            False,
            action_low,
            action_high,
        ).to(self.device)
        critic_dim = obs_dims[self.critic_group]
        self.critic = CriticEnsemble(
            critic_dim,
            action_dim,
            cfg.num_critics,
            cfg.critic_hidden,
            cfg.layer_norm,
            cfg.activation,
            num_outputs=1 if self.hl is None else self.hl.num_bins,
        ).to(self.device)
        self.target_critic = make_target(self.critic)
        self.value = MLP(critic_dim, 1, cfg.value_hidden, cfg.activation, cfg.layer_norm).to(self.device)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.value_optimizer = torch.optim.Adam(self.value.parameters(), lr=cfg.value_lr)
        self.actor_scheduler = (
            torch.optim.lr_scheduler.CosineAnnealingLR(self.actor_optimizer, cfg.actor_lr_decay_steps)
            if cfg.actor_lr_decay_steps is not None
            else None
        )

    @property
    def _nets(self) -> dict[str, NetSpec]:
        c = self.critic_group
        return {
            "actor": (self.actor, self.actor_group, FIRST_LAYER["actor"]),
            "critic": (self.critic, c, FIRST_LAYER["critic"]),
            "target_critic": (self.target_critic, c, FIRST_LAYER["critic"]),
            "value": (self.value, c, FIRST_LAYER["value"]),
        }

    def update_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One step of V, Q and the actor on ``batch`` (raw observations, on this device), then the
        target lerp; returns detached tensors.
        """
        cfg = self.cfg
        b = self.obs_norm.batch(batch, (self.actor_group, self.critic_group))
        v_out = value_loss(self.value, self.target_critic, b, cfg.expectile, self.critic_group, self.hl)
        q_out = critic_loss(self.critic, self.value, b, cfg.gamma, self.critic_group, self.hl)
        a_out = actor_loss(self.actor, b, v_out["advantage"], cfg.beta, cfg.exp_adv_max, self.actor_group)
        optimizers = (self.value_optimizer, self.critic_optimizer, self.actor_optimizer)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        (v_out["loss_value"] + q_out["loss_critic"] + a_out["loss_actor"]).backward()
        for opt in optimizers:
            opt.step()
        if self.actor_scheduler is not None:
            self.actor_scheduler.step()
        soft_update_(self.target_critic, self.critic, cfg.tau)
        self.num_updates += 1
        out = {**v_out, **q_out, **a_out}
        adv = out.pop("advantage")
        out["advantage_mean"] = adv.mean()
        return {k: v.detach() for k, v in out.items()}

    def learner_state(self) -> dict[str, Any]:
        """Networks (of raw observations), target, optimisers, schedule, statistics, generator, counter."""
        state = {
            **self.obs_norm.export_networks(self._nets),
            "obs_normalization": self.obs_norm.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "value_optimizer": self.value_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
        }
        if self.actor_scheduler is not None:
            state["actor_scheduler"] = self.actor_scheduler.state_dict()
        return state

    def load_learner_state(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; a missing target starts from the critic."""
        if "obs_normalization" in state:
            self.obs_norm.load_state_dict(state["obs_normalization"])
        self.obs_norm.import_networks(self._nets, state, {"target_critic": "critic"})
        for name in ("actor_optimizer", "critic_optimizer", "value_optimizer"):
            if name in state:
                getattr(self, name).load_state_dict(state[name])
        if self.actor_scheduler is not None and "actor_scheduler" in state:
            self.actor_scheduler.load_state_dict(state["actor_scheduler"])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        self.num_updates = int(state.get("num_updates", 0))
