"""PPO as verbs (DESIGN.md, "Algorithm"): ``act``, ``process``, ``compute_returns``, ``update``.

The runner owns the loop::

    obs, _ = env.reset()
    for _ in range(cfg.num_steps):
        actions = ppo.act(obs)
        obs, reward, terminated, truncated, info = env.step(actions)
        ppo.process(Transition(obs_before, actions, reward, info["final_obs"], terminated, truncated))
    ppo.compute_returns(obs)
    stats = ppo.update()

Asymmetric actor-critic is configuration: the actor reads ``obs[actor_obs_group]``, the critic
``obs[critic_obs_group or actor_obs_group]``, each through its own running normaliser.

Host syncs: none on the hot path. Rollouts run under ``torch.inference_mode``; the update keeps
every statistic as a tensor; the adaptive learning rate lives in a tensor that Adam reads directly
(``capturable`` on CUDA, so Adam does not read it back to the host either).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from robolearn.algos.ppo.config import PPOConfig
from robolearn.algos.ppo.losses import adaptive_learning_rate, gaussian_kl, ppo_loss
from robolearn.data.rollout import RolloutStorage
from robolearn.nn import MLP, EmpiricalNormalizer
from robolearn.nn.distributions import DiagGaussian
from robolearn.nn.policy import deployable
from robolearn.types import Transition

ACTOR_KEY = "actor"
"""Storage key of the actor's (normalised) input."""
CRITIC_KEY = "critic"
"""Storage key of the critic's (normalised) input."""


class PPO:
    """Proximal Policy Optimisation for continuous actions with a diagonal Gaussian policy."""

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: PPOConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        """Build actor, critic, normalisers and optimiser.

        Args:
            obs_dims: feature size of each observation group (as ``BatchedEnv.obs_dims``).
            action_dim: number of action dimensions A.
            cfg: hyper-parameters; defaults to :class:`PPOConfig`.
            device: where networks, rollouts and the update live.
        """
        self.cfg = cfg = cfg if cfg is not None else PPOConfig()
        self.device = torch.device(device)
        self.action_dim = int(action_dim)
        self.actor_group = cfg.actor_obs_group
        self.critic_group = cfg.critic_obs_group or cfg.actor_obs_group
        for field_name, group in (("actor_obs_group", self.actor_group), ("critic_obs_group", self.critic_group)):
            if group not in obs_dims:
                raise ValueError(f"{field_name}: group {group!r} is not among the observation groups {sorted(obs_dims)}")
        actor_dim, critic_dim = int(obs_dims[self.actor_group]), int(obs_dims[self.critic_group])

        # A small last layer keeps the initial policy mean near zero, so early exploration is set
        # by init_noise_std alone (rsl_rl, and Andrychowicz et al. 2021).
        self.actor = MLP(actor_dim, self.action_dim, cfg.actor_hidden, cfg.activation, output_gain=0.01).to(self.device)
        self.critic = MLP(critic_dim, 1, cfg.critic_hidden, cfg.activation, output_gain=1.0).to(self.device)
        self.dist = DiagGaussian(self.action_dim, cfg.init_noise_std, cfg.std_type).to(self.device)
        self.actor_normalizer: nn.Module = EmpiricalNormalizer(actor_dim) if cfg.normalize_obs else nn.Identity()
        self.critic_normalizer: nn.Module = EmpiricalNormalizer(critic_dim) if cfg.normalize_obs else nn.Identity()
        self.actor_normalizer.to(self.device)
        self.critic_normalizer.to(self.device)

        self.learning_rate = torch.tensor(float(cfg.learning_rate), device=self.device)
        self._trained = [*self.actor.parameters(), *self.dist.parameters(), *self.critic.parameters()]
        # Adam takes the lr tensor itself; the adaptive schedule updates it in place, so no float
        # has to be read back per minibatch. On CUDA, capturable keeps Adam from reading it either.
        self.optimizer = torch.optim.Adam(
            self._trained, lr=self.learning_rate, capturable=self.device.type == "cuda"
        )
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(cfg.seed)
        self.storage: RolloutStorage | None = None
        self._pending: dict[str, Any] | None = None

    # -- rollout -----------------------------------------------------------------------------
    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Sample actions ``[N, A]``; record what the update needs (inputs, values, log-probs).

        Updates the observation normalisers with this batch. Call :meth:`process` before the next
        ``act``.
        """
        actor_obs, critic_obs = obs[self.actor_group], obs[self.critic_group]
        if self.storage is None:
            # Allocated outside inference mode: its buffers must be ordinary tensors for the update.
            self.storage = RolloutStorage(
                self.cfg.num_steps,
                actor_obs.shape[0],
                {ACTOR_KEY: actor_obs.shape[1:], CRITIC_KEY: critic_obs.shape[1:]},
                self.action_dim,
                device=self.device,
            )
        with torch.inference_mode():
            if self.cfg.normalize_obs:
                self.actor_normalizer.update(actor_obs)
                self.critic_normalizer.update(critic_obs)
            actor_in = self.actor_normalizer(actor_obs)
            critic_in = self.critic_normalizer(critic_obs)
            mean = self.actor(actor_in)
            std = self.dist.std(mean)
            actions = self.dist.sample(mean, std)
            self._pending = {
                "obs": {ACTOR_KEY: actor_in, CRITIC_KEY: critic_in},
                "actions": actions,
                "values": self.critic(critic_in).squeeze(-1),
                "log_probs": self.dist.log_prob(mean, std, actions),
                "action_mean": mean,
                "action_std": std,
            }
        return actions

    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The deterministic action (the policy mean) for evaluation and deployment; records nothing."""
        with torch.inference_mode():
            return self.actor(self.actor_normalizer(obs[self.actor_group]))

    def evaluate(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Critic values ``[N]`` of ``obs`` (no normaliser update)."""
        with torch.inference_mode():
            return self.critic(self.critic_normalizer(obs[self.critic_group])).squeeze(-1)

    def process(self, transition: Transition) -> None:
        """Store the step that followed the last :meth:`act`.

        Uses ``reward``, ``terminated``, ``truncated`` and ``next_obs`` (for done worlds the pre-reset
        observation, i.e. the env's ``info["final_obs"]``), from which time-outs bootstrap.
        ``obs`` and ``action`` are taken from :meth:`act` and may be left as they are.
        """
        if self._pending is None or self.storage is None:
            raise RuntimeError("process() needs a preceding act() on the same step")
        pending, self._pending = self._pending, None
        timeout_values = None
        final_obs = transition.next_obs
        if final_obs is not None and self.critic_group in final_obs:
            # V of every world, masked later by `truncated`: selecting only the truncated rows would
            # need their count on the host.
            timeout_values = self.evaluate(final_obs)
        self.storage.add(
            pending["obs"],
            pending["actions"],
            transition.reward,
            transition.terminated,
            transition.truncated,
            pending["values"],
            pending["log_probs"],
            pending["action_mean"],
            pending["action_std"],
            timeout_values=timeout_values,
        )

    def compute_returns(self, last_obs: Mapping[str, torch.Tensor]) -> None:
        """GAE over the full rollout, bootstrapping from the observation after its last step."""
        if self.storage is None:
            raise RuntimeError("compute_returns() before any act()")
        last_values = self.evaluate(last_obs)
        with torch.inference_mode():
            self.storage.compute_returns(
                last_values, self.cfg.gamma, self.cfg.lam, normalize_advantages=self.cfg.normalize_advantages
            )

    # -- learning ----------------------------------------------------------------------------
    def update(self, batch: Any = None) -> dict[str, torch.Tensor]:
        """``num_epochs x num_minibatches`` gradient steps on the rollout; returns mean statistics as
        0-d tensors (``loss_policy``, ``loss_value``, ``loss_entropy``, ``kl``, ``clip_fraction``,
        ``learning_rate``, ``action_std``). Clears the rollout.

        PPO learns only from its own on-policy rollout: an external ``batch`` is refused.
        """
        if batch is not None:
            raise ValueError("PPO.update: PPO learns from its own rollout (process + compute_returns); got an external batch")
        if self.storage is None:
            raise RuntimeError("update() before any rollout")
        cfg = self.cfg
        zero = torch.zeros((), device=self.device)
        sums = {k: zero.clone() for k in ("loss_policy", "loss_value", "loss_entropy", "kl", "clip_fraction")}
        count = 0
        for batch in self.storage.mini_batches(cfg.num_epochs, cfg.num_minibatches, self.generator):
            mean = self.actor(batch.obs[ACTOR_KEY])
            std = self.dist.std(mean)
            log_probs = self.dist.log_prob(mean, std, batch.actions)
            values = self.critic(batch.obs[CRITIC_KEY]).squeeze(-1)
            with torch.no_grad():
                kl = gaussian_kl(batch.action_mean, batch.action_std, mean, std).mean()
                if cfg.schedule == "adaptive":
                    self.learning_rate.copy_(
                        adaptive_learning_rate(
                            self.learning_rate, kl, cfg.desired_kl,
                            min_lr=cfg.min_learning_rate, max_lr=cfg.max_learning_rate,
                        )
                    )
                ratio = torch.exp(log_probs - batch.log_probs)
                clip_fraction = ((ratio - 1.0).abs() > cfg.clip_param).float().mean()
            losses = ppo_loss(
                log_probs, batch.log_probs, batch.advantages, values, batch.values, batch.returns,
                self.dist.entropy(std), cfg.clip_param, cfg.value_clip, cfg.value_loss_coef, cfg.entropy_coef,
            )
            total = losses["loss_policy"] + losses["loss_value"] + losses["loss_entropy"]
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            nn.utils.clip_grad_norm_(self._trained, cfg.max_grad_norm)
            self.optimizer.step()
            for name, value in losses.items():
                sums[name] += value.detach()
            sums["kl"] += kl
            sums["clip_fraction"] += clip_fraction
            count += 1
        self.storage.clear()
        stats = {name: total / count for name, total in sums.items()}
        stats["learning_rate"] = self.learning_rate.clone()
        stats["action_std"] = self.dist.std(torch.zeros(self.action_dim, device=self.device)).detach().mean()
        return stats

    # -- what the runners and export read ---------------------------------------------------
    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor: actor, noise, critic, and the normalisers' running statistics."""
        stats = [*self.actor_normalizer.buffers(), *self.critic_normalizer.buffers()]
        return [*self._trained, *stats]

    def policy_module(self) -> nn.Module:
        """The deterministic ``obs -> action`` module (normaliser, then the mean), a CPU copy in eval mode."""
        return deployable(nn.Sequential(self.actor_normalizer, self.actor))

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, normalisers, optimiser, learning rate and shuffling generator."""
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "dist": self.dist.state_dict(),
            "actor_normalizer": self.actor_normalizer.state_dict(),
            "critic_normalizer": self.critic_normalizer.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate.detach().clone(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore everything :meth:`state_dict` saved."""
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.dist.load_state_dict(state["dist"])
        self.actor_normalizer.load_state_dict(state["actor_normalizer"])
        self.critic_normalizer.load_state_dict(state["critic_normalizer"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.learning_rate.copy_(torch.as_tensor(state["learning_rate"]))
        # Loading replaced the param group's lr with a copy; point it back at the tensor the
        # schedule updates in place.
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate
        self.generator.set_state(state["generator"])
