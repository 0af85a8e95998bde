"""TD3+BC: TD3's twin critics, target smoothing and delayed actor, plus a BC term in the actor loss.

The hot path never syncs with the host: noise comes from the device generator, ``lambda`` stays a
tensor, targets follow by ``torch._foreach_lerp_``; ``update`` returns tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from robolearn.algos.common import OfflineLearner
from robolearn.algos.td3bc.config import TD3BCConfig
from robolearn.algos.td3bc.losses import actor_loss, critic_loss
from robolearn.nn.ensemble import make_target, soft_update_
from robolearn.nn.offline import (
    FIRST_LAYER,
    DeterministicActor,
    NetSpec,
    build_critic,
)
from robolearn.types import Batch


class TD3BC(OfflineLearner):
    """Actor, critic ensemble, their targets and optimisers; :meth:`update` is one critic step
    (and, every ``policy_delay`` steps, one actor step and the target lerp).
    """

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: TD3BCConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the learner (arguments as :class:`~robolearn.algos.bc.BC`)."""
        cfg = self._setup(cfg or TD3BCConfig(), obs_dims, device, seed, critic=True)
        self.actor = DeterministicActor(
            obs_dims[self.actor_group],
            action_dim,
            cfg.actor_hidden,
            cfg.activation,
            False,
            action_low,
            action_high,
        ).to(self.device)
        self.critic = build_critic(obs_dims[self.critic_group], action_dim, cfg, self.hl).to(self.device)
        self.target_actor = make_target(self.actor)
        self.target_critic = make_target(self.critic)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)

    @property
    def _nets(self) -> dict[str, NetSpec]:
        a, c = self.actor_group, self.critic_group
        return {
            "actor": (self.actor, a, FIRST_LAYER["actor"]),
            "critic": (self.critic, c, FIRST_LAYER["critic"]),
            "target_actor": (self.target_actor, a, FIRST_LAYER["actor"]),
            "target_critic": (self.target_critic, c, FIRST_LAYER["critic"]),
        }

    def update_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One critic step on ``batch`` (raw observations, on this device), the delayed actor step
        and target lerp when due; returns detached tensors.
        """
        cfg = self.cfg
        b = self.obs_norm.batch(batch, (self.actor_group, self.critic_group))
        noise = torch.randn(
            b.action.shape, generator=self.generator, device=self.device, dtype=b.action.dtype
        )
        losses = critic_loss(
            self.critic,
            self.target_critic,
            self.target_actor,
            b,
            noise,
            cfg.gamma,
            cfg.policy_noise,
            cfg.noise_clip,
            self.actor_group,
            self.critic_group,
            self.hl,
        )
        self.critic_optimizer.zero_grad(set_to_none=True)
        losses["loss_critic"].backward()
        self.critic_optimizer.step()
        out = {k: v.detach() for k, v in losses.items()}
        self.num_updates += 1
        # CORL counts from 1 and updates the actor when the count is a multiple of the delay.
        if self.num_updates % cfg.policy_delay == 0:
            # The actor is scored by the critic just updated, as in TD3.
            a_losses = actor_loss(
                self.actor, self.critic, b, cfg.alpha, self.actor_group, self.critic_group, self.hl
            )
            self.actor_optimizer.zero_grad(set_to_none=True)
            a_losses["loss_actor"].backward()
            self.actor_optimizer.step()
            out.update({k: v.detach() for k, v in a_losses.items()})
            soft_update_(self.target_critic, self.critic, cfg.tau)
            soft_update_(self.target_actor, self.actor, cfg.tau)
        return out

    def learner_state(self) -> dict[str, Any]:
        """Networks (of raw observations) and targets, optimisers, statistics, generator and counter."""
        return {
            **self.obs_norm.export_networks(self._nets),
            "obs_normalization": self.obs_norm.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
        }

    def load_learner_state(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; missing targets start from their online networks."""
        if "obs_normalization" in state:
            self.obs_norm.load_state_dict(state["obs_normalization"])
        fallback = {"target_actor": "actor", "target_critic": "critic"}
        self.obs_norm.import_networks(self._nets, state, fallback)
        for name in ("actor_optimizer", "critic_optimizer"):
            if name in state:
                getattr(self, name).load_state_dict(state[name])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        self.num_updates = int(state.get("num_updates", 0))
