"""Behaviour cloning: regress a deterministic tanh-squashed actor onto the dataset's actions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from robolearn.algos.bc.config import BCConfig
from robolearn.algos.bc.losses import bc_loss
from robolearn.algos.common import OfflineLearner
from robolearn.nn.offline import FIRST_LAYER, DeterministicActor, NetSpec
from robolearn.types import Batch


class BC(OfflineLearner):
    """An actor and its optimiser; one :meth:`update` is one gradient step on a sampled batch."""

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: BCConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the learner.

        Args:
            obs_dims: flat size of each observation group.
            action_dim: action size A.
            cfg: hyperparameters (defaults if ``None``).
            action_low: finite lower action bounds the actor squashes into.
            action_high: finite upper action bounds.
            device: where the networks and the generator live.
            seed: seeds the network init and the generator.
        """
        cfg = self._setup(cfg or BCConfig(), obs_dims, device, seed, critic=False)
        self.actor = DeterministicActor(
            obs_dims[self.actor_group],
            action_dim,
            cfg.actor_hidden,
            cfg.activation,
            cfg.layer_norm,
            action_low,
            action_high,
        ).to(self.device)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)

    @property
    def _nets(self) -> dict[str, NetSpec]:
        return {"actor": (self.actor, self.actor_group, FIRST_LAYER["actor"])}

    def update_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One gradient step on ``batch`` (raw observations, on this device); returns detached tensors."""
        obs = self.obs_norm(self.actor_group, batch.obs[self.actor_group])
        out = bc_loss(self.actor, obs, batch.action)
        self.actor_optimizer.zero_grad(set_to_none=True)
        out["loss_actor"].backward()
        self.actor_optimizer.step()
        self.num_updates += 1
        return {k: v.detach() for k, v in out.items()}

    def learner_state(self) -> dict[str, Any]:
        """The actor (a network of raw observations), optimiser, statistics, generator and counter."""
        return {
            **self.obs_norm.export_networks(self._nets),
            "obs_normalization": self.obs_norm.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
        }

    def load_learner_state(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        if "obs_normalization" in state:
            self.obs_norm.load_state_dict(state["obs_normalization"])
        self.obs_norm.import_networks(self._nets, state)
        if "actor_optimizer" in state:
            self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        self.num_updates = int(state.get("num_updates", 0))
