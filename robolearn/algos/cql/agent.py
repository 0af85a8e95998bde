"""CQL(H) and Cal-QL on SAC's networks, so an offline checkpoint resumes online in SAC.

The actor is :class:`~robolearn.nn.actors.TanhGaussianActor` and the critics a
:class:`~robolearn.nn.ensemble.CriticEnsemble`, stored under SAC's state-dict keys (``actor``,
``critic``, ``target_critic``, ``log_alpha`` and the three optimisers), folded to raw observations
when dataset statistics are set: ``SAC.load_state_dict`` takes a CQL/Cal-QL checkpoint as is.

Every loss is built from the pre-step networks (as CORL does) and reaches only its own parameters,
so one backward of their sum drives all optimisers; nothing syncs with the host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from robolearn.algos.common import OfflineLearner, alpha_loss
from robolearn.algos.cql.config import CQLConfig
from robolearn.algos.cql.losses import actor_loss, alpha_prime_loss, critic_loss, sample_actions
from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble, make_target, soft_update_
from robolearn.nn.offline import (
    FIRST_LAYER,
    NetSpec,
    build_critic,
)
from robolearn.types import Batch


@torch.no_grad()
def corl_init_(actor: TanhGaussianActor, critic: CriticEnsemble) -> None:
    """CORL ``cql.py``'s initialisation (see ``CQLConfig.orthogonal_init``), member by member."""
    linears = [m for m in actor.net if isinstance(m, nn.Linear)]
    nn.init.xavier_uniform_(linears[-1].weight, gain=1e-2)
    nn.init.zeros_(linears[-1].bias)
    # The ensemble stacks each member's Linear weight as params["<layer>__weight"] of shape [E, out, in].
    layers = sorted(
        int(name.split("__")[0])
        for name, p in critic.params.items()
        if name.endswith("__weight") and p.ndim == 3
    )
    for layer in layers:
        weight, bias = critic.params[f"{layer}__weight"], critic.params[f"{layer}__bias"]
        gain = 1e-2 if layer == layers[-1] else math.sqrt(2.0)
        for i in range(critic.num_members):
            nn.init.orthogonal_(weight[i], gain=gain)
        bias.zero_()


class CQL(OfflineLearner):
    """Actor, critic ensemble and target, temperature, optional Lagrange multiplier and their
    optimisers; :meth:`update` is one step of all of them. ``cfg.calibrated`` makes it Cal-QL.
    """

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: CQLConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the learner (arguments as :class:`~robolearn.algos.bc.BC`)."""
        cfg = self._setup(cfg or CQLConfig(), obs_dims, device, seed, critic=True)
        self.action_dim = int(action_dim)
        self.actor = TanhGaussianActor(
            obs_dims[self.actor_group],
            action_dim,
            cfg.actor_hidden,
            cfg.activation,
            False,
            action_low,
            action_high,
        ).to(self.device)
        self.critic = build_critic(obs_dims[self.critic_group], action_dim, cfg, self.hl).to(self.device)
        if cfg.orthogonal_init:
            corl_init_(self.actor, self.critic)
        self.target_critic = make_target(self.critic)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=self.device, requires_grad=True)
        self.log_alpha_prime = torch.tensor(
            float(cfg.init_log_alpha_prime), device=self.device, requires_grad=True
        )
        self.target_entropy = float(-action_dim if cfg.target_entropy is None else cfg.target_entropy)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr)
        self.alpha_prime_optimizer = torch.optim.Adam([self.log_alpha_prime], lr=cfg.alpha_prime_lr)

    @property
    def _nets(self) -> dict[str, NetSpec]:
        c = self.critic_group
        return {
            "actor": (self.actor, self.actor_group, FIRST_LAYER["actor"]),
            "critic": (self.critic, c, FIRST_LAYER["critic"]),
            "target_critic": (self.target_critic, c, FIRST_LAYER["critic"]),
        }

    @property
    def alpha(self) -> torch.Tensor:
        """Entropy weight ``alpha_multiplier * exp(log_alpha)``, a detached 0-d tensor."""
        return self.log_alpha.detach().exp() * self.cfg.alpha_multiplier

    @property
    def needs_mc_return(self) -> bool:
        """Cal-QL reads Monte-Carlo returns-to-go from ``batch.extras["mc_return"]``; the offline
        runner provides them when this is true.
        """
        return bool(self.cfg.calibrated)

    def update_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One step of actor, temperature, critics (and Lagrange multiplier) on ``batch`` (raw
        observations, on this device; Cal-QL also ``extras["mc_return"]``); returns detached tensors.
        """
        cfg = self.cfg
        mc_return = None
        if cfg.calibrated:
            if "mc_return" not in batch.extras:
                raise KeyError(
                    "Cal-QL (calibrated=True) needs batch.extras['mc_return'], the Monte-Carlo return-to-go [B]"
                )
            mc_return = batch.extras["mc_return"]
        b = self.obs_norm.batch(batch, (self.actor_group, self.critic_group))
        alpha = self.alpha
        a_out = actor_loss(
            self.actor,
            self.critic,
            b,
            alpha,
            self.actor_group,
            self.critic_group,
            bc=self.num_updates < cfg.bc_steps,
            generator=self.generator,
            hl=self.hl,
        )
        total = a_out["loss_actor"]
        out: dict[str, torch.Tensor] = {
            "loss_actor": a_out["loss_actor"],
            "entropy": a_out["entropy"],
            "alpha": alpha,
        }
        if cfg.autotune_alpha:
            al = alpha_loss(self.log_alpha, a_out["log_prob"], self.target_entropy)
            total = total + al["loss_alpha"]
            out["loss_alpha"] = al["loss_alpha"]
        samples = sample_actions(
            self.actor,
            b.obs[self.actor_group],
            b.next_obs[self.actor_group],
            cfg.cql_n_actions,
            cfg.cql_max_target_backup,
            self.generator,
        )
        if cfg.cql_lagrange:
            alpha_prime = self.log_alpha_prime.detach().exp().clamp(0.0, 1e6)
            weight, gap_target = alpha_prime * cfg.cql_alpha, cfg.cql_target_action_gap
        else:
            weight, gap_target = cfg.cql_alpha, 0.0
        c_out = critic_loss(
            self.critic,
            self.target_critic,
            b,
            samples,
            alpha,
            weight,
            cfg.gamma,
            self.critic_group,
            cfg.backup_entropy,
            cfg.cql_temp,
            cfg.cql_importance_sample,
            gap_target,
            cfg.cql_clip_diff_min,
            cfg.cql_clip_diff_max,
            mc_return,
            self.hl,
        )
        total = total + c_out["loss_critic"]
        out.update(c_out)
        out["cql_gap"] = c_out["cql_gap"].mean()
        optimizers = [self.actor_optimizer, self.critic_optimizer]
        if cfg.autotune_alpha:
            optimizers.append(self.alpha_optimizer)
        if cfg.cql_lagrange:
            ap = alpha_prime_loss(
                self.log_alpha_prime, c_out["cql_gap"], cfg.cql_alpha, cfg.cql_target_action_gap
            )
            total = total + ap["loss_alpha_prime"]
            out.update(ap)
            optimizers.append(self.alpha_prime_optimizer)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        total.backward()
        for opt in optimizers:
            opt.step()
        self.num_updates += 1
        if self.num_updates % cfg.target_update_period == 0:
            soft_update_(self.target_critic, self.critic, cfg.tau)
        return {k: v.detach() for k, v in out.items()}

    def learner_state(self) -> dict[str, Any]:
        """SAC's keys (networks of raw observations, ``log_alpha``, optimisers, generator, counter)
        plus the Lagrange multiplier, the statistics and, when set, the exact normalised networks.
        """
        return {
            **self.obs_norm.export_networks(self._nets),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
            "log_alpha_prime": self.log_alpha_prime.detach().clone(),
            "alpha_prime_optimizer": self.alpha_prime_optimizer.state_dict(),
            "obs_normalization": self.obs_norm.state_dict(),
        }

    def load_learner_state(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` (or from a SAC checkpoint: its networks are raw-observation ones)."""
        if "obs_normalization" in state:
            self.obs_norm.load_state_dict(state["obs_normalization"])
        self.obs_norm.import_networks(self._nets, state, {"target_critic": "critic"})
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
            if "log_alpha_prime" in state:
                self.log_alpha_prime.copy_(state["log_alpha_prime"])
        for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer", "alpha_prime_optimizer"):
            if name in state:
                getattr(self, name).load_state_dict(state[name])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        self.num_updates = int(state.get("num_updates", 0))
