"""Flow Q-learning: a BC flow policy, a one-step policy that climbs Q while distilling the flow's
samples under the same noise, and a Q ensemble bootstrapped from the one-step policy.

Acting: the one-step policy. :meth:`FQL.act` (exploration, online fine-tuning) draws ``z ~ N(0, I)``
as FQL samples; :meth:`act_inference`, evaluation, :func:`robolearn.load_policy` and export use
``z = 0``: a deterministic policy (what the deploy runtime and the parity checks need), the image
of the noise distribution's mode. After Q-maximisation the one-step policy is close to
deterministic in ``z`` (the Q term pulls every ``z`` to the same high-value action, which the
test on the toy bandit shows), so ``z = 0`` loses little; with a large ``alpha`` on multimodal data
it picks whichever mode the flow sends ``z = 0`` to.

The flow is trained on normalised observations with its own statistics left at identity; a
checkpoint's ``"flow"`` is a :meth:`ChunkModel.checkpoint` with the dataset statistics put into its
buffers, i.e. a flow of raw observations that other learners and export can rebuild as is.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from robolearn.algos.common import OfflineLearner
from robolearn.algos.fql.config import FQLConfig
from robolearn.algos.fql.losses import actor_loss, critic_loss, flow_loss
from robolearn.algos.fql.networks import NoisyPolicy, OneStepPolicy
from robolearn.nn.ensemble import make_target, soft_update_
from robolearn.nn.generative import ChunkModel, ChunkModelSpec
from robolearn.nn.offline import FIRST_LAYER, NetSpec, build_critic, check_groups
from robolearn.types import Batch


class FQL(OfflineLearner):
    """BC flow (:attr:`flow`), one-step policy (:attr:`actor`), critics with their target, and their
    optimisers; :meth:`update` is one step of all three losses.
    """

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: FQLConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the learner (arguments as :class:`~robolearn.algos.bc.BC`)."""
        cfg = self._setup(cfg or FQLConfig(), obs_dims, device, seed, critic=False)
        # A scalar critic only (no HL-Gauss head): FQL's critic is a plain regression.
        self.critic_group = cfg.critic_group
        check_groups(obs_dims, self.critic_group)
        self.hl = None
        self.action_dim = int(action_dim)
        obs_dim = obs_dims[self.actor_group]
        spec = ChunkModelSpec(model="flow", obs_dim=obs_dim, action_dim=self.action_dim, horizon=1, obs_history=1,
                              backbone="mlp", hidden=cfg.flow_hidden, time_embed_dim=cfg.time_embed_dim)
        self.flow = ChunkModel(spec, action_low, action_high).to(self.device)
        self.actor = OneStepPolicy(obs_dim, self.action_dim, cfg.actor_hidden, cfg.activation, cfg.actor_layer_norm,
                                   action_low, action_high, cfg.squash).to(self.device)
        self.critic = build_critic(obs_dims[self.critic_group], self.action_dim, cfg, None).to(self.device)
        self.target_critic = make_target(self.critic)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.flow_optimizer = torch.optim.Adam(self.flow.parameters(), lr=cfg.flow_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)

    @property
    def _nets(self) -> dict[str, NetSpec]:
        c = self.critic_group
        return {
            "actor": (self.actor, self.actor_group, FIRST_LAYER["actor"]),
            "critic": (self.critic, c, FIRST_LAYER["critic"]),
            "target_critic": (self.target_critic, c, FIRST_LAYER["critic"]),
        }

    def _noise(self, n: int) -> torch.Tensor:
        return torch.randn(n, self.action_dim, generator=self.generator, device=self.device)

    @torch.inference_mode()
    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Exploring in-bounds actions ``[N, A]``: the one-step policy at ``z ~ N(0, I)`` from :attr:`generator`."""
        x = self.obs_norm(self.actor_group, obs[self.actor_group].to(self.device))
        return self.actor(x, self._noise(x.shape[0]))

    def noisy_policy_module(self) -> nn.Module:
        """``(obs, noise) -> action``: the one-step policy with its noise an explicit input and the
        statistics folded in, a CPU copy in eval mode (:meth:`policy_module` is it at ``noise = 0``).
        """
        stats = self.obs_norm.stats.get(self.actor_group)
        module = NoisyPolicy(self.actor, *(stats if stats is not None else (None, None)))
        return copy.deepcopy(module).cpu().eval()

    def sample_flow(self, obs: Mapping[str, torch.Tensor], noise: torch.Tensor | None = None,
                    steps: int | None = None) -> torch.Tensor:
        """The BC flow's env-unit actions ``[N, A]`` for raw observations (noise drawn when not given;
        ``cfg.flow_steps`` Euler steps unless ``steps``): the behaviour policy FQL regularises towards.
        """
        x = self.obs_norm(self.actor_group, obs[self.actor_group].to(self.device))
        z = self._noise(x.shape[0]) if noise is None else noise.to(self.device)
        with torch.no_grad():
            return self.flow.sample(x, z.unsqueeze(1), int(steps or self.cfg.flow_steps)).squeeze(1)

    def update_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One step of the flow, the critics and the one-step policy on ``batch`` (raw observations,
        on this device), then the target lerp; returns detached tensors.
        """
        cfg = self.cfg
        a, c = self.actor_group, self.critic_group
        b = self.obs_norm.batch(batch, (a, c))
        n = int(batch.action.shape[0])
        # Every draw from the learner's generator, in a fixed order: a resumed run repeats them.
        x0 = self._noise(n)
        t = torch.rand(n, generator=self.generator, device=self.device)
        next_noise, noise = self._noise(n), self._noise(n)
        f_out = flow_loss(self.flow, b.obs[a], batch.action, x0, t)
        q_out = critic_loss(self.critic, self.target_critic, self.actor, b, next_noise, cfg.gamma, cfg.q_agg, a, c)
        p_out = actor_loss(self.actor, self.flow, self.critic, b.obs[a], b.obs[c], noise, cfg.alpha, cfg.flow_steps,
                           cfg.normalize_q_loss)
        optimizers = (self.flow_optimizer, self.critic_optimizer, self.actor_optimizer)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        (f_out["loss_flow"] + q_out["loss_critic"] + p_out["loss_actor"]).backward()
        for opt in optimizers:
            opt.step()
        soft_update_(self.target_critic, self.critic, cfg.tau)
        self.num_updates += 1
        return {k: v.detach() for k, v in {**f_out, **q_out, **p_out}.items()}

    # -- checkpoints ----------------------------------------------------------------------------
    def flow_checkpoint(self) -> dict[str, Any]:
        """The BC flow as a :class:`ChunkModel` of raw observations (the dataset statistics in its
        buffers): ``ChunkModel.from_checkpoint`` rebuilds it without this class.
        """
        flow = copy.deepcopy(self.flow)
        if self.actor_group in self.obs_norm.stats:
            mean, std = self.obs_norm.stats[self.actor_group]
            with torch.no_grad():  # copy_, not set_normalization: the statistics exactly as trained
                flow.obs_mean.copy_(mean)
                flow.obs_std.copy_(std)
        return flow.checkpoint()

    def learner_state(self) -> dict[str, Any]:
        """Networks (of raw observations), the flow, target, optimisers, statistics, generator, counter."""
        return {
            **self.obs_norm.export_networks(self._nets),
            "flow": self.flow_checkpoint(),
            "obs_normalization": self.obs_norm.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "flow_optimizer": self.flow_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
        }

    def load_learner_state(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; a missing target starts from the critic."""
        if "obs_normalization" in state:
            self.obs_norm.load_state_dict(state["obs_normalization"])
        self.obs_norm.import_networks(self._nets, state, {"target_critic": "critic"})
        if "flow" in state:
            self.flow.load_state_dict(state["flow"]["state"])
            # The flow's network is the same at any statistics; this learner feeds it normalised
            # observations, so its own normalisation goes back to identity.
            with torch.no_grad():
                self.flow.obs_mean.zero_()
                self.flow.obs_std.fill_(1.0)
        for name in ("actor_optimizer", "flow_optimizer", "critic_optimizer"):
            if name in state:
                getattr(self, name).load_state_dict(state[name])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        self.num_updates = int(state.get("num_updates", 0))
