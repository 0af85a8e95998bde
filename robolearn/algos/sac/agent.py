"""Soft Actor-Critic with a vmapped critic ensemble: SAC by default, REDQ by configuration.

Verbs only (DESIGN.md, "Algorithm"): the runner owns the loop. The hot path never syncs with the
host: alpha stays a tensor, targets follow by ``torch._foreach_lerp_``, the REDQ subset is drawn
with ``torch.randperm`` on the device generator, and ``update`` returns tensors, never floats.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.func import functional_call, grad

from robolearn.algos.common import (
    ParameterHolder,
    adam_step_,
    check_compile_toolchain,
    compile_step,
    init_adam_state,
)
from robolearn.algos.sac.config import SACConfig
from robolearn.algos.sac.losses import actor_loss, alpha_loss, critic_loss
from robolearn.data.replay import ReplayBuffer
from robolearn.data.sampler import ReplaySampler, Sampler
from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble, make_target, soft_update_
from robolearn.nn.noise import ColoredNoise
from robolearn.nn.policy import SquashedMean, deployable
from robolearn.types import Batch, Obs, Transition


class SAC:
    """Actor, critic ensemble, target ensemble, temperature and replay buffer, with their optimisers."""

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: SACConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the learner.

        Args:
            obs_dims: flat size of each observation group (``BatchedEnv.obs_dims``).
            action_dim: action size A.
            cfg: hyperparameters (defaults if ``None``).
            action_low: finite lower action bounds the actor squashes into.
            action_high: finite upper action bounds.
            device: where networks, buffer and generator live.
            seed: seeds the network init, the sampling generator and the exploration noise.
        """
        self.cfg = cfg = cfg or SACConfig()
        self.device = torch.device(device)
        self.actor_group, self.critic_group = cfg.actor_obs_group, cfg.critic_group
        for group in (self.actor_group, self.critic_group):
            if group not in obs_dims:
                raise ValueError(f"observation group {group!r} not among the env's groups {sorted(obs_dims)}")
        self.action_dim = int(action_dim)
        torch.manual_seed(seed)  # network init
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.actor = TanhGaussianActor(
            obs_dims[self.actor_group],
            action_dim,
            cfg.actor_hidden,
            cfg.activation,
            cfg.actor_layer_norm,
            action_low,
            action_high,
        ).to(self.device)
        self.critic = CriticEnsemble(
            obs_dims[self.critic_group],
            action_dim,
            cfg.num_critics,
            cfg.critic_hidden,
            cfg.layer_norm,
            cfg.activation,
        ).to(self.device)
        self.target_critic = make_target(self.critic)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=self.device, requires_grad=True)
        self.target_entropy = float(-action_dim if cfg.target_entropy is None else cfg.target_entropy)
        if cfg.compile:
            check_compile_toolchain(self.device)
        # A compiled step on CUDA keeps Adam's step counters on the device (capturable), so the
        # graph neither reads them back nor needs them on the host; eager Adam keeps them on the host.
        capturable = cfg.compile and self.device.type == "cuda"
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, capturable=capturable)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, capturable=capturable)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr, capturable=capturable)
        # The actor and the critic each under a root whose parameters the compiled step rebinds.
        self._held_actor, self._held_critic = ParameterHolder({"actor": self.actor}), ParameterHolder({"critic": self.critic})
        self.replay = ReplayBuffer(cfg.buffer_size, self.device)
        self.sampler: Sampler = ReplaySampler(self.replay, self.generator)
        """Where :meth:`update` draws its batches: this agent's replay by default; a
        :class:`~robolearn.data.sampler.DatasetSampler` or a :class:`~robolearn.data.sampler.MixedSampler`
        of replay and dataset for offline-to-online learning.
        """
        self.num_updates = 0
        """Gradient steps taken on the critic (host counter; drives ``policy_delay``)."""
        self._compiled_step: Callable[..., dict[str, torch.Tensor]] | None = None
        """:meth:`_gradient_step` under ``torch.compile`` (``cfg.compile``), built at the first step."""
        self.action_noise: ColoredNoise | None = None
        """The coloured exploration noise of ``cfg.action_noise_beta > 0``, built at the first :meth:`act`
        for its number of worlds; ``None`` with white noise."""

    # -- acting -------------------------------------------------------------------------------
    @property
    def alpha(self) -> torch.Tensor:
        """Current temperature, a detached 0-d tensor."""
        return self.log_alpha.detach().exp()

    @torch.inference_mode()
    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Exploration actions ``[N, A]``: uniform in the bounds until ``learning_starts``, then sampled."""
        x = obs[self.actor_group].to(self.device)
        z = self._colored_noise(x.shape[0]) if self.cfg.action_noise_beta > 0 else None
        if len(self.replay) < self.cfg.learning_starts:
            if z is None:
                u = torch.rand((x.shape[0], self.action_dim), generator=self.generator, device=self.device)
            else:  # the normal CDF keeps the uniform marginal and the sequence's correlation in time
                u = 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))
            return self.actor.action_offset + self.actor.action_scale * (2.0 * u - 1.0)
        action, _ = self.actor(x, generator=self.generator, noise=z)
        return action

    def _colored_noise(self, num_worlds: int) -> torch.Tensor:
        """The next coloured noise sample ``[N, A]``, (re)building the noise for ``num_worlds`` worlds."""
        if self.action_noise is None or self.action_noise.num_worlds != num_worlds:
            self.action_noise = ColoredNoise(
                self.cfg.action_noise_beta, self.cfg.action_noise_length, num_worlds, self.action_dim,
                self.generator, self.device,
            )
        return self.action_noise.sample()

    @torch.inference_mode()
    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic actions ``[N, A]`` (the squashed mean) for evaluation and export."""
        return self.actor.act_deterministic(obs[self.actor_group].to(self.device))

    # -- data -----------------------------------------------------------------------------------
    def process(
        self,
        obs: Obs | Transition,
        action: torch.Tensor | None = None,
        reward: torch.Tensor | None = None,
        next_obs: Obs | None = None,
        terminated: torch.Tensor | None = None,
        truncated: torch.Tensor | None = None,
    ) -> None:
        """Store one batched env step (``[N, ...]``), either as fields or as one :class:`Transition`.

        ``next_obs`` is ``info["final_obs"]``: for worlds that ended this step, the observation
        before the reset. Only ``terminated`` stops bootstrapping; time-outs bootstrap from it.
        """
        if isinstance(obs, Transition):
            obs, action, reward, next_obs, terminated, truncated = (
                obs.obs,
                obs.action,
                obs.reward,
                obs.next_obs,
                obs.terminated,
                obs.truncated,
            )
        if action is None or reward is None or next_obs is None or terminated is None:
            raise ValueError("process: expected a Transition or obs, action, reward, next_obs, terminated")
        if self.action_noise is not None and terminated.shape[0] == self.action_noise.num_worlds:
            # A world whose episode ended starts a fresh noise sequence with its next episode.
            ended = terminated.to(torch.bool) if truncated is None else terminated.to(torch.bool) | truncated.to(torch.bool)
            self.action_noise.reset(ended)
        groups = {self.actor_group, self.critic_group}
        self.replay.add(
            {g: obs[g] for g in groups},
            action,
            reward,
            {g: next_obs[g] for g in groups},
            terminated,
            truncated,
        )

    # -- learning -------------------------------------------------------------------------------
    def update(self, batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """Gradient steps; returns the last step's losses and diagnostics (tensors).

        Without ``batch``: ``utd_ratio`` steps on batches from :attr:`sampler`, or nothing (an empty
        dict) while fewer than ``learning_starts`` transitions were collected or the sampler is
        empty. With ``batch``: exactly one step on it. Either way the update counter advances per
        step, so ``policy_delay`` holds whoever supplies the batches.
        """
        if batch is not None:
            return self._step(batch)
        if len(self.replay) < self.cfg.learning_starts or len(self.sampler) == 0:
            return {}
        out: dict[str, torch.Tensor] = {}
        for _ in range(self.cfg.utd_ratio):
            out.update(self._step(self.sampler.sample(self.cfg.batch_size)))
        return out

    def _step(self, batch: Batch) -> dict[str, torch.Tensor]:
        out = self.update_step(batch, update_actor=self.num_updates % self.cfg.policy_delay == 0)
        self.num_updates += 1
        return out

    def update_step(self, batch: Batch, update_actor: bool = True) -> dict[str, torch.Tensor]:
        """One critic step (and, if ``update_actor``, one actor and alpha step) on ``batch``, then the
        target lerp. Free of host syncs. The random draws (the REDQ subset, then the next-action and
        the actor's noise) come from :attr:`generator` here, in that order, and enter the gradient
        step as tensors: with ``cfg.compile`` that step runs under ``torch.compile``, which wants
        no generator inside the graph.
        """
        cfg = self.cfg
        subset = None
        if cfg.num_target_subset is not None and cfg.num_target_subset < cfg.num_critics:
            perm = torch.randperm(cfg.num_critics, generator=self.generator, device=self.device)
            subset = perm[: cfg.num_target_subset]
        shape = (batch.action.shape[0], self.action_dim)
        dtype = next(self.actor.parameters()).dtype
        next_noise = torch.randn(shape, generator=self.generator, device=self.device, dtype=dtype)
        noise = torch.randn(shape, generator=self.generator, device=self.device, dtype=dtype) if update_actor else None
        step = self._gradient_step
        if cfg.compile:
            # Adam's state exists before the graph reads it, also after a load_state_dict of a
            # checkpoint taken before the first update (a few dict lookups: cheap outside the graph).
            for optimizer in (self.critic_optimizer, self.actor_optimizer, self.alpha_optimizer):
                init_adam_state(optimizer, mark_static=self.device.type == "cuda" and self._compiled_step is None)
            if self._compiled_step is None:
                self._compiled_step = compile_step(self._whole_step, cfg.compile_mode, self.device, fullgraph=True)
            step = self._compiled_step
        return step(batch, subset, next_noise, noise)

    def _critic_losses(
        self, critic: CriticEnsemble, batch: Batch, alpha: torch.Tensor, subset: torch.Tensor | None,
        next_noise: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """:func:`critic_loss` of ``critic`` (the ensemble, its parameters possibly rebound) with this
        learner's targets and settings; alpha enters the critic only through the target.
        """
        cfg = self.cfg
        backup_alpha = alpha if cfg.backup_entropy else torch.zeros_like(alpha)
        return critic_loss(
            critic, self.target_critic, self.actor, batch, backup_alpha, cfg.gamma, self.actor_group,
            self.critic_group, subset, noise=next_noise,
        )

    def _actor_losses(
        self, actor: TanhGaussianActor, batch: Batch, alpha: torch.Tensor, noise: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """:func:`actor_loss` of ``actor`` (the module, its parameters possibly rebound) against this
        learner's critics.
        """
        return actor_loss(
            actor, self.critic, batch, alpha, self.actor_group, self.critic_group, self.cfg.actor_q_reduction,
            noise=noise,
        )

    def _gradient_step(
        self, batch: Batch, subset: torch.Tensor | None, next_noise: torch.Tensor, noise: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """The gradient step of :meth:`update_step` given its random draws (``noise`` ``None``: the
        critic only, no actor or alpha step).
        """
        cfg = self.cfg
        alpha = self.alpha
        losses = self._critic_losses(self.critic, batch, alpha, subset, next_noise)
        self.critic_optimizer.zero_grad(set_to_none=True)
        losses["loss_critic"].backward()
        self.critic_optimizer.step()
        out = {k: v.detach() for k, v in losses.items()}

        if noise is not None:
            a_losses = self._actor_losses(self.actor, batch, alpha, noise)
            self.actor_optimizer.zero_grad(set_to_none=True)
            a_losses["loss_actor"].backward()
            self.actor_optimizer.step()
            out["loss_actor"] = a_losses["loss_actor"].detach()
            out["entropy"] = a_losses["entropy"]
            if cfg.autotune_alpha:
                al = alpha_loss(self.log_alpha, a_losses["log_prob"], self.target_entropy)
                self.alpha_optimizer.zero_grad(set_to_none=True)
                al["loss_alpha"].backward()
                self.alpha_optimizer.step()
                out["loss_alpha"] = al["loss_alpha"].detach()

        soft_update_(self.target_critic, self.critic, cfg.tau)
        out["alpha"] = self.alpha
        return out

    def _whole_step(
        self, batch: Batch, subset: torch.Tensor | None, next_noise: torch.Tensor, noise: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """:meth:`_gradient_step` as one traceable program, the step ``cfg.compile`` compiles.

        The same losses on the same modules, but each gradient comes from ``torch.func.grad`` of the
        loss as a function of the parameters (the module rebound to them by ``functional_call`` on
        its :class:`ParameterHolder`) and
        Adam is applied to the optimisers' own state by :func:`adam_step_`. ``backward()`` and
        ``Optimizer.step`` each end a compiled graph; without them ``torch.compile`` captures the
        critic, actor, temperature and target updates whole (``fullgraph``), so the step runs as a
        few generated kernels instead of ~1,000 eager operator calls (BENCHMARKS.md, "Session 27").
        """
        cfg = self.cfg
        alpha = self.alpha

        def critic_objective(params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            call = (self._critic_losses, self.critic, batch, alpha, subset, next_noise)
            losses = functional_call(self._held_critic, params, call)
            return losses["loss_critic"], {k: v.detach() for k, v in losses.items()}

        critic_params = {name: p.detach() for name, p in self._held_critic.named_parameters()}
        critic_grads, out = grad(critic_objective, has_aux=True)(critic_params)
        adam_step_(self.critic_optimizer, [critic_grads[name] for name in critic_params])

        if noise is not None:

            def actor_objective(params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
                losses = functional_call(self._held_actor, params, (self._actor_losses, self.actor, batch, alpha, noise))
                return losses["loss_actor"], {k: v.detach() for k, v in losses.items()}

            actor_params = {name: p.detach() for name, p in self._held_actor.named_parameters()}
            actor_grads, a_losses = grad(actor_objective, has_aux=True)(actor_params)
            adam_step_(self.actor_optimizer, [actor_grads[name] for name in actor_params])
            out["loss_actor"] = a_losses["loss_actor"]
            out["entropy"] = a_losses["entropy"]
            if cfg.autotune_alpha:
                log_prob = a_losses["log_prob"]

                def alpha_objective(log_alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                    loss = alpha_loss(log_alpha, log_prob, self.target_entropy)["loss_alpha"]
                    return loss, loss.detach()

                alpha_grad, out["loss_alpha"] = grad(alpha_objective, has_aux=True)(self.log_alpha.detach())
                adam_step_(self.alpha_optimizer, [alpha_grad])

        soft_update_(self.target_critic, self.critic, cfg.tau)
        out["alpha"] = self.alpha
        return out

    # -- what the runners and export read ------------------------------------------------------
    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor: actor, critics, target critics and the temperature."""
        return [
            *self.actor.parameters(),
            *self.critic.parameters(),
            *self.target_critic.parameters(),
            self.log_alpha,
        ]

    def policy_module(self) -> torch.nn.Module:
        """The deterministic ``obs -> action`` module (the squashed mean), a CPU copy in eval mode."""
        return deployable(SquashedMean(self.actor))

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, target critics, temperature, optimisers, replay buffer, generator and counters."""
        return self._state(include_replay=True)

    def _state(self, include_replay: bool) -> dict[str, Any]:
        state = {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
            "sampler": self.sampler.state_dict(),
        }
        if self.action_noise is not None:
            state["action_noise"] = self.action_noise.state_dict()
        if include_replay:
            state["replay"] = self.replay.state_dict()
        return state

    def learned_state_dict(self) -> dict[str, Any]:
        """:meth:`state_dict` without the replay buffer: what a rollback of bad updates restores,
        without copying the data.
        """
        return self._state(include_replay=False)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`; an offline checkpoint without ``replay`` keeps this buffer."""
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state.get("target_critic", state["critic"]))
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        lrs = {"actor_optimizer": self.cfg.actor_lr, "critic_optimizer": self.cfg.critic_lr, "alpha_optimizer": self.cfg.alpha_lr}
        for name, lr in lrs.items():
            if name in state:
                optimizer = getattr(self, name)
                optimizer.load_state_dict(state[name])
                # The learning rate is this run's config, not the checkpoint's (an offline CQL
                # checkpoint carries CQL's rates into online fine-tuning otherwise).
                for group in optimizer.param_groups:
                    group["lr"] = lr
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        self.num_updates = int(state.get("num_updates", 0))
        noise = state.get("action_noise")
        if noise is not None and self.cfg.action_noise_beta > 0:
            # The same sequences and positions: a resumed run continues the exploration it was making.
            self.action_noise = ColoredNoise(
                self.cfg.action_noise_beta, self.cfg.action_noise_length, int(noise["buffer"].shape[0]),
                self.action_dim, self.generator, self.device,
            )
            self.action_noise.load_state_dict(noise)
            if "generator" in state:  # building the noise drew from the generator: back to the checkpoint's stream
                self.generator.set_state(state["generator"])
        if "sampler" in state:
            self.sampler.load_state_dict(state["sampler"])
