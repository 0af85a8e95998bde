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

Recurrent PPO and the history encoder are configuration too (``memory=gru|lstm``,
``history_encoder=conv``): actor and critic each get a memory between their input and their MLP;
the rollout hidden states advance in :meth:`act`, restart at episode ends in :meth:`process`, are
stored at chunk starts and re-run over ``bptt_length``-step chunks in :meth:`update` (truncated
BPTT, episode ends inside a chunk restart the memory, padding is masked out of the losses).
:meth:`act_inference` keeps its own hidden state, which :meth:`reset` restarts for worlds whose
episode ended (the evaluation rollout calls it). With ``memory=none`` and ``history_encoder=none``
PPO is the feed-forward learner, unchanged.

Host syncs: none on the hot path. Rollouts run under ``torch.inference_mode``; the update keeps
every statistic as a tensor; the adaptive learning rate lives in a tensor that Adam reads directly
(``capturable`` on CUDA, so Adam does not read it back to the host either).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad

from robolearn.algos.common import (
    ParameterHolder,
    adam_step_,
    check_compile_toolchain,
    clip_grad_norm_list_,
    compile_step,
    init_adam_state,
)
from robolearn.algos.ppo.config import PPOConfig
from robolearn.algos.ppo.losses import adaptive_learning_rate, gaussian_kl, masked_mean, ppo_loss
from robolearn.data.rollout import ChunkBatch, RolloutBatch, RolloutStorage
from robolearn.nn import MLP, EmpiricalNormalizer
from robolearn.nn.distributions import DiagGaussian
from robolearn.nn.normalizer import update_normalizers
from robolearn.nn.policy import deployable
from robolearn.nn.recurrent import HistoryEncoder, Memory, RecurrentPolicy, State, reset_state
from robolearn.types import Transition

ACTOR_KEY = "actor"
"""Storage key of the actor's (normalised) input."""
CRITIC_KEY = "critic"
"""Storage key of the critic's (normalised) input."""
REWARD_CLIP = 10.0
"""Bound on a scaled reward (``normalize_rewards``), Stable-Baselines3's ``clip_reward``."""


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
        self.history_group = cfg.history_obs_group if cfg.history_encoder != "none" else None
        self.actor_encoder = self._history_encoder(obs_dims, actor_dim)
        if self.actor_encoder is not None:
            actor_dim = self.actor_encoder.in_dim  # the actor's input row is [actor group | history group]
        actor_features = self.actor_encoder.out_dim if self.actor_encoder is not None else actor_dim

        self.actor_memory: Memory | None = None
        self.critic_memory: Memory | None = None
        actor_head_in, critic_head_in = actor_features, critic_dim
        if cfg.memory != "none":
            self.actor_memory = Memory(cfg.memory, actor_features, cfg.memory_hidden, cfg.memory_layers).to(self.device)
            self.critic_memory = Memory(cfg.memory, critic_dim, cfg.memory_hidden, cfg.memory_layers).to(self.device)
            actor_head_in = critic_head_in = cfg.memory_hidden
        # A small last layer keeps the initial policy mean near zero, so early exploration is set
        # by init_noise_std alone (rsl_rl, and Andrychowicz et al. 2021).
        self.actor = MLP(actor_head_in, self.action_dim, cfg.actor_hidden, cfg.activation, output_gain=0.01).to(self.device)
        self.critic = MLP(critic_head_in, 1, cfg.critic_hidden, cfg.activation, output_gain=1.0).to(self.device)
        self.dist = DiagGaussian(self.action_dim, cfg.init_noise_std, cfg.std_type).to(self.device)
        self.actor_normalizer: nn.Module = EmpiricalNormalizer(actor_dim) if cfg.normalize_obs else nn.Identity()
        self.critic_normalizer: nn.Module = EmpiricalNormalizer(critic_dim) if cfg.normalize_obs else nn.Identity()
        self.actor_normalizer.to(self.device)
        self.critic_normalizer.to(self.device)
        # Reward scaling: the running variance of every world's discounted return (its mean is not
        # subtracted from rewards: that would change which behaviour the returns prefer).
        self.reward_normalizer: EmpiricalNormalizer | None = (
            EmpiricalNormalizer(1, clip=None).to(self.device) if cfg.normalize_rewards else None
        )
        self._discounted_return: torch.Tensor | None = None

        self.learning_rate = torch.tensor(float(cfg.learning_rate), device=self.device)
        self.reduce_mean: Callable[[torch.Tensor], torch.Tensor] | None = None
        """Set by data-parallel training (robolearn.runners.distributed) to the mean over ranks: the
        adaptive schedule then reads the same KL on every rank, so the step sizes stay equal."""
        self._trained = [*self.actor.parameters(), *self.dist.parameters(), *self.critic.parameters()]
        for extra in (self.actor_encoder, self.actor_memory, self.critic_memory):
            if extra is not None:
                self._trained += list(extra.parameters())
        # Adam takes the lr tensor itself; the adaptive schedule updates it in place, so no float
        # has to be read back per minibatch. On CUDA, capturable keeps Adam from reading it either.
        # On the CPU the fused kernel updates every parameter in one call: with small networks the
        # per-tensor loop of the default one was about a quarter of the update (64x64 actor and
        # critic: Adam ~110 us fused against ~520 us per step; the update 1.22-1.53x faster over
        # four runs, 256-wide networks within about 10% either way: benchmarks/ppo_adam.py).
        # Not under torch.compile, which traces the default one.
        # The modules of ``_trained`` under one root, in its order, for the compiled whole step.
        held = {"actor": self.actor, "dist": self.dist, "critic": self.critic}
        for name, extra in (
            ("actor_encoder", self.actor_encoder), ("actor_memory", self.actor_memory), ("critic_memory", self.critic_memory)
        ):
            if extra is not None:
                held[name] = extra
        self._held = ParameterHolder(held)
        if len(list(self._held.parameters())) != len(self._trained):  # a parameter shared by two modules
            raise RuntimeError("PPO: the trained modules share parameters; the compiled step cannot bind them")
        if cfg.compile:
            check_compile_toolchain(self.device)
        self.optimizer = torch.optim.Adam(
            self._trained, lr=self.learning_rate, capturable=self.device.type == "cuda",
            fused=True if self.device.type == "cpu" and not cfg.compile else None,
        )
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(cfg.seed)
        self._compiled_step: Callable[..., Any] | None = None
        """:meth:`_minibatch_step` under ``torch.compile`` (``cfg.compile``), built at the first update."""
        self.storage: RolloutStorage | None = None
        self._pending: dict[str, Any] | None = None
        # Recurrent states, batch-first [N, layers, hidden] per tensor: the rollout's (actor and
        # critic) and the one act_inference carries; None until the first call sizes them.
        self._hidden: dict[str, State] | None = None
        self._inference_hidden: State | None = None

    def _history_encoder(self, obs_dims: Mapping[str, int], actor_dim: int) -> HistoryEncoder | None:
        """The temporal-conv encoder of the history group (``history_encoder=conv``), checked against its width."""
        cfg = self.cfg
        if self.history_group is None:
            return None
        if self.history_group not in obs_dims:
            raise ValueError(
                f"history_obs_group: group {self.history_group!r} is not among the observation groups {sorted(obs_dims)}"
            )
        width, frames = int(obs_dims[self.history_group]), int(cfg.history_frames)
        if width % frames:
            raise ValueError(
                f"history_frames: {frames} does not divide the {self.history_group!r} group's width {width}; "
                "expected its task's history_length"
            )
        encoder = HistoryEncoder(actor_dim, frames, width // frames, cfg.history_channels, cfg.history_kernel, cfg.activation)
        return encoder.to(self.device)

    @property
    def recurrent(self) -> bool:
        """Whether actor and critic carry a memory (``memory`` is not ``none``)."""
        return self.actor_memory is not None

    @property
    def actor_obs_groups(self) -> tuple[str, ...]:
        """The observation groups the actor reads, in the order its input row concatenates them
        (the actor group, then the history group with a history encoder).
        """
        return (self.actor_group,) if self.history_group is None else (self.actor_group, self.history_group)

    def _actor_input(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The actor's raw input row: its group, followed by the history group when it reads one."""
        if self.history_group is None:
            return obs[self.actor_group]
        return torch.cat([obs[self.actor_group], obs[self.history_group].flatten(1)], dim=-1)

    def _actor_features(self, actor_in: torch.Tensor) -> torch.Tensor:
        return self.actor_encoder(actor_in) if self.actor_encoder is not None else actor_in

    def _hidden_shapes(self) -> dict[str, tuple[int, ...]]:
        """Storage names and per-world shapes of every rollout hidden state (``actor.h``, ``critic.c``...)."""
        assert self.actor_memory is not None and self.critic_memory is not None
        shapes: dict[str, tuple[int, ...]] = {}
        for owner, memory in (("actor", self.actor_memory), ("critic", self.critic_memory)):
            for name, shape in zip(memory.state_names, memory.state_shapes, strict=True):
                shapes[f"{owner}.{name}"] = shape
        return shapes

    def _flat_hidden(self, hidden: Mapping[str, State]) -> dict[str, torch.Tensor]:
        return {key: t for key, t in zip(self._hidden_shapes(), (*hidden["actor"], *hidden["critic"]), strict=True)}

    def _unflat_hidden(self, flat: Mapping[str, torch.Tensor]) -> dict[str, State]:
        out: dict[str, list[torch.Tensor]] = {"actor": [], "critic": []}
        for key in self._hidden_shapes():
            out[key.split(".")[0]].append(flat[key])
        return {owner: tuple(states) for owner, states in out.items()}

    # -- rollout -----------------------------------------------------------------------------
    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Sample actions ``[N, A]``; record what the update needs (inputs, values, log-probs).

        Updates the observation normalisers with this batch. Call :meth:`process` before the next
        ``act``.
        """
        actor_obs, critic_obs = self._actor_input(obs), obs[self.critic_group]
        if self.storage is None:
            # Allocated outside inference mode: its buffers must be ordinary tensors for the update.
            self.storage = RolloutStorage(
                self.cfg.num_steps,
                actor_obs.shape[0],
                {ACTOR_KEY: actor_obs.shape[1:], CRITIC_KEY: critic_obs.shape[1:]},
                self.action_dim,
                device=self.device,
                hidden_shapes=self._hidden_shapes() if self.recurrent else None,
                chunk_length=self.cfg.chunk_length,
            )
        with torch.inference_mode():
            if self.cfg.normalize_obs:
                if self.reduce_mean is not None:
                    # Data-parallel: both normalisers' batch moments in one collective per step.
                    update_normalizers(
                        [(self.actor_normalizer, actor_obs), (self.critic_normalizer, critic_obs)], self.reduce_mean
                    )
                else:
                    self.actor_normalizer.update(actor_obs)
                    self.critic_normalizer.update(critic_obs)
            actor_in = self.actor_normalizer(actor_obs)
            critic_in = self.critic_normalizer(critic_obs)
            if self.recurrent:
                assert self.actor_memory is not None and self.critic_memory is not None
                hidden = self._rollout_hidden(actor_obs.shape[0])
                actor_out, next_actor = self.actor_memory.step(self._actor_features(actor_in), hidden["actor"])
                critic_out, next_critic = self.critic_memory.step(critic_in, hidden["critic"])
            else:
                actor_out, critic_out = self._actor_features(actor_in), critic_in
            mean = self.actor(actor_out)
            std = self.dist.std(mean)
            actions = self.dist.sample(mean, std)
            self._pending = {
                "obs": {ACTOR_KEY: actor_in, CRITIC_KEY: critic_in},
                "actions": actions,
                "values": self.critic(critic_out).squeeze(-1),
                "log_probs": self.dist.log_prob(mean, std, actions),
                "action_mean": mean,
                "action_std": std,
            }
            if self.recurrent:
                self._pending["hidden"] = hidden
                self._pending["next_hidden"] = {"actor": next_actor, "critic": next_critic}
        return actions

    def _rollout_hidden(self, num_envs: int) -> dict[str, State]:
        """The rollout's hidden states, zeros at the first call (or if the number of worlds changed)."""
        assert self.actor_memory is not None and self.critic_memory is not None
        if self._hidden is None or self._hidden["actor"][0].shape[0] != num_envs:
            self._hidden = {
                "actor": self.actor_memory.initial_state(num_envs),
                "critic": self.critic_memory.initial_state(num_envs),
            }
        return self._hidden

    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The deterministic action (the policy mean) for evaluation and deployment; records nothing.

        A recurrent policy advances its own inference hidden state (separate from the rollout's):
        call :meth:`reset` for worlds whose episode ended. A batch of another size starts from zeros.
        """
        with torch.inference_mode():
            features = self._actor_features(self.actor_normalizer(self._actor_input(obs)))
            if self.actor_memory is None:
                return self.actor(features)
            state = self._inference_hidden
            if state is None or state[0].shape[0] != features.shape[0]:
                state = self.actor_memory.initial_state(features.shape[0])
            out, self._inference_hidden = self.actor_memory.step(features, state)
            return self.actor(out)

    def reset(self, done: torch.Tensor) -> None:
        """Restart :meth:`act_inference`'s hidden state for the worlds where ``done[N]`` is true (their
        next observation starts a new episode); the others keep theirs. A no-op for a feed-forward policy.
        """
        if self._inference_hidden is not None:
            with torch.inference_mode():
                self._inference_hidden = reset_state(self._inference_hidden, done.to(self.device))

    def evaluate(self, obs: Mapping[str, torch.Tensor], hidden: State | None = None) -> torch.Tensor:
        """Critic values ``[N]`` of ``obs`` (no normaliser update).

        A recurrent critic reads ``obs`` from ``hidden`` (default: the rollout's current critic
        state, i.e. ``obs`` is the observation the next :meth:`act` will see); nothing is advanced.
        """
        with torch.inference_mode():
            critic_in = self.critic_normalizer(obs[self.critic_group])
            if self.critic_memory is not None:
                if hidden is None:
                    hidden = self._rollout_hidden(critic_in.shape[0])["critic"]
                critic_in, _ = self.critic_memory.step(critic_in, hidden)
            return self.critic(critic_in).squeeze(-1)

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
        next_hidden = pending.get("next_hidden")
        if final_obs is not None and self.critic_group in final_obs:
            # V of every world, masked later by `truncated`: selecting only the truncated rows would
            # need their count on the host. A recurrent critic reads the final observation with the
            # state after this step, in the episode that observation belongs to.
            timeout_values = self.evaluate(final_obs, next_hidden["critic"] if next_hidden is not None else None)
        reward = transition.reward
        if self.reward_normalizer is not None:
            reward = self._scale_rewards(reward, transition.terminated | transition.truncated)
        self.storage.add(
            pending["obs"],
            pending["actions"],
            reward,
            transition.terminated,
            transition.truncated,
            pending["values"],
            pending["log_probs"],
            pending["action_mean"],
            pending["action_std"],
            timeout_values=timeout_values,
            hidden=self._flat_hidden(pending["hidden"]) if next_hidden is not None else None,
        )
        if next_hidden is not None:
            # Worlds whose episode ended start the next one from the initial state; others go on.
            done = (transition.terminated | transition.truncated).reshape(-1)
            with torch.inference_mode():
                self._hidden = {owner: reset_state(state, done) for owner, state in next_hidden.items()}

    def _scale_rewards(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """``reward / std(discounted return)``, clipped, after folding this step's returns into the
        statistics; worlds whose episode ended start their return again from zero.
        """
        assert self.reward_normalizer is not None
        with torch.inference_mode():
            r = reward.reshape(-1).to(torch.float32)
            if self._discounted_return is None:
                self._discounted_return = torch.zeros_like(r)
            ret = self._discounted_return * self.cfg.gamma + r
            if self.reduce_mean is not None:
                update_normalizers([(self.reward_normalizer, ret[:, None])], self.reduce_mean)
            else:
                self.reward_normalizer.update(ret[:, None])
            std = torch.sqrt(self.reward_normalizer.var + self.reward_normalizer.eps)
            scaled = (r / std).clamp(-REWARD_CLIP, REWARD_CLIP)
            self._discounted_return = ret.masked_fill(done.reshape(-1).bool(), 0.0)
        return scaled.reshape(reward.shape).to(reward.dtype)

    def compute_returns(self, last_obs: Mapping[str, torch.Tensor]) -> None:
        """GAE over the full rollout, bootstrapping from the observation after its last step."""
        if self.storage is None:
            raise RuntimeError("compute_returns() before any act()")
        last_values = self.evaluate(last_obs)
        with torch.inference_mode():
            self.storage.compute_returns(
                last_values, self.cfg.gamma, self.cfg.lam, normalize_advantages=self.cfg.normalize_advantages,
                reduce_mean=self.reduce_mean,
            )

    # -- learning ----------------------------------------------------------------------------
    def set_progress(self, fraction: float) -> None:
        """How much of the run's budget is done before the next update (``[0, 1]``; the runner calls
        it every iteration: :class:`robolearn.types.Scheduled`). With ``schedule: linear`` the
        learning rate becomes ``learning_rate * (1 - fraction)``; the other schedules ignore it.
        """
        if self.cfg.schedule == "linear":
            self.learning_rate.fill_(float(self.cfg.learning_rate) * max(0.0, 1.0 - float(fraction)))

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
        batches = (
            self.storage.chunk_batches(cfg.num_epochs, cfg.num_minibatches, self.generator)
            if self.recurrent
            else self.storage.mini_batches(cfg.num_epochs, cfg.num_minibatches, self.generator)
        )
        step = self._minibatch_step
        if cfg.compile:
            # Data-parallel training averages gradients in backward hooks, which the whole step
            # (no backward) would not run: it compiles the eager step, graph breaks and all.
            whole = self.reduce_mean is None
            if whole:  # Adam's state before the graph reads it (cheap outside it)
                init_adam_state(self.optimizer, mark_static=self.device.type == "cuda" and self._compiled_step is None)
            if self._compiled_step is None:
                # The adaptive step size is written inside the step, before Adam's part of it is
                # traced (which marks its own tensors static). A write into a non-static input
                # makes CUDA-graph trees skip the step's first graph; a fixed address avoids it.
                torch._dynamo.mark_static_address(self.learning_rate)
                self._compiled_step = compile_step(
                    self._whole_minibatch_step if whole else self._minibatch_step,
                    cfg.compile_mode, self.device, fullgraph=whole,
                )
            step = self._compiled_step
        for batch in batches:
            losses, kl, clip_fraction = step(batch)
            for name, value in losses.items():
                sums[name] += value
            sums["kl"] += kl
            sums["clip_fraction"] += clip_fraction
            count += 1
        self.storage.clear()
        stats = {name: total / count for name, total in sums.items()}
        stats["learning_rate"] = self.learning_rate.clone()
        stats["action_std"] = self.dist.std(torch.zeros(self.action_dim, device=self.device)).detach().mean()
        return stats

    def _minibatch_step(
        self, batch: RolloutBatch | ChunkBatch
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """One gradient step on a minibatch: forward, KL and adaptive learning rate, losses, backward,
        gradient clip, Adam. Returns the detached losses, the KL and the clip fraction. Free of host
        syncs; with ``cfg.compile`` and data-parallel training :meth:`update` runs it under
        ``torch.compile`` (otherwise :meth:`_whole_minibatch_step`).
        """
        total, (losses, kl, clip_fraction) = self._minibatch_losses(batch)
        self._adapt_learning_rate(kl)
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        nn.utils.clip_grad_norm_(self._trained, self.cfg.max_grad_norm)
        self.optimizer.step()
        return losses, kl, clip_fraction

    def _whole_minibatch_step(
        self, batch: RolloutBatch | ChunkBatch
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """:meth:`_minibatch_step` as one traceable program, the step ``cfg.compile`` compiles: the
        gradient by ``torch.func.grad`` of the loss as a function of the trained parameters (the
        modules rebound by ``functional_call``), the clip and Adam on lists of tensors
        (:func:`clip_grad_norm_list_`, :func:`adam_step_` on the optimiser's own state), so no
        ``backward()`` or ``Optimizer.step`` breaks the graph. Same losses, order and state as the
        eager step up to float rounding.
        """

        def objective(params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
            return functional_call(self._held, params, (self._minibatch_losses, batch))

        params = {name: p.detach() for name, p in self._held.named_parameters()}  # in _trained's order
        grads, (losses, kl, clip_fraction) = grad(objective, has_aux=True)(params)
        self._adapt_learning_rate(kl)
        flat = [grads[name] for name in params]
        clip_grad_norm_list_(flat, self.cfg.max_grad_norm)
        adam_step_(self.optimizer, flat)
        return losses, kl, clip_fraction

    def _minibatch_losses(
        self, batch: RolloutBatch | ChunkBatch
    ) -> tuple[torch.Tensor, tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]]:
        """The minibatch's total loss (with gradients) and, detached, its terms, the KL to the
        rollout's policy (the mean over ranks in data-parallel training) and the clip fraction.
        """
        cfg = self.cfg
        mean, values = self._forward_batch(batch)
        mask = batch.valid if isinstance(batch, ChunkBatch) else None
        std = self.dist.std(mean)
        log_probs = self.dist.log_prob(mean, std, batch.actions)
        with torch.no_grad():
            kl = masked_mean(gaussian_kl(batch.action_mean, batch.action_std, mean, std), mask)
            if self.reduce_mean is not None:
                # Data-parallel: every rank adapts its step size to the same (mean) KL.
                kl = self.reduce_mean(kl)
            ratio = torch.exp(log_probs - batch.log_probs)
            clip_fraction = masked_mean(((ratio - 1.0).abs() > cfg.clip_param).float(), mask)
        losses = ppo_loss(
            log_probs, batch.log_probs, batch.advantages, values, batch.values, batch.returns,
            self.dist.entropy(std), cfg.clip_param, cfg.value_clip, cfg.value_loss_coef, cfg.entropy_coef,
            mask=mask,
        )
        total = losses["loss_policy"] + losses["loss_value"] + losses["loss_entropy"]
        return total, ({name: value.detach() for name, value in losses.items()}, kl.detach(), clip_fraction.detach())

    def _adapt_learning_rate(self, kl: torch.Tensor) -> None:
        """The adaptive schedule's step size for this minibatch, from its KL, before Adam's step."""
        cfg = self.cfg
        if cfg.schedule == "adaptive":
            with torch.no_grad():
                self.learning_rate.copy_(
                    adaptive_learning_rate(
                        self.learning_rate, kl, cfg.desired_kl,
                        min_lr=cfg.min_learning_rate, max_lr=cfg.max_learning_rate,
                    )
                )

    def _forward_batch(self, batch: RolloutBatch | ChunkBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy means and values of a minibatch, with gradients: per sample, or for a chunk batch
        the memories re-run over the chunk from its stored start states, restarting at episode ends.
        """
        actor_in = self._actor_features(batch.obs[ACTOR_KEY])
        critic_in = batch.obs[CRITIC_KEY]
        if isinstance(batch, ChunkBatch):
            assert self.actor_memory is not None and self.critic_memory is not None
            start = self._unflat_hidden(batch.hidden)
            actor_in, _ = self.actor_memory.sequence(actor_in, start["actor"], batch.resets)
            critic_in, _ = self.critic_memory.sequence(critic_in, start["critic"], batch.resets)
        return self.actor(actor_in), self.critic(critic_in).squeeze(-1)

    # -- what the runners and export read ---------------------------------------------------
    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor: actor, noise, critic (memories and encoder included), and the
        normalisers' running statistics.
        """
        stats = [*self.actor_normalizer.buffers(), *self.critic_normalizer.buffers()]
        return [*self._trained, *stats]

    def policy_module(self) -> nn.Module:
        """The deterministic policy, a CPU copy in eval mode with the normaliser folded in.

        Feed-forward: the plain ``obs -> action`` module (normaliser, [history encoder,] mean).
        Recurrent: a :class:`robolearn.nn.recurrent.RecurrentPolicy`, ``(obs, *states) -> (action,
        *new_states)`` with ``state_names``, ``state_shapes`` and ``initial_state(batch)``. With a
        history encoder, ``obs`` is the actor group followed by the history group; the module's
        ``obs_groups`` attribute names the groups of its input row in that order.
        """
        encoder: nn.Module = self.actor_encoder if self.actor_encoder is not None else nn.Identity()
        module: nn.Module
        if self.actor_memory is not None:
            module = RecurrentPolicy(self.actor_normalizer, encoder, self.actor_memory, self.actor)
        elif self.actor_encoder is not None:
            module = nn.Sequential(self.actor_normalizer, encoder, self.actor)
        else:
            module = nn.Sequential(self.actor_normalizer, self.actor)
        module = deployable(module)
        module.obs_groups = self.actor_obs_groups
        return module

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, normalisers, optimiser, learning rate and shuffling generator; a recurrent or
        history-encoding agent adds its modules and its rollout and inference hidden states.
        """
        state = {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "dist": self.dist.state_dict(),
            "actor_normalizer": self.actor_normalizer.state_dict(),
            "critic_normalizer": self.critic_normalizer.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate.detach().clone(),
            "generator": self.generator.get_state(),
        }
        if self.reward_normalizer is not None:
            state["reward_normalizer"] = self.reward_normalizer.state_dict()
            state["discounted_return"] = None if self._discounted_return is None else self._discounted_return.clone()
        if self.actor_encoder is not None:
            state["actor_encoder"] = self.actor_encoder.state_dict()
        if self.actor_memory is not None and self.critic_memory is not None:
            state["actor_memory"] = self.actor_memory.state_dict()
            state["critic_memory"] = self.critic_memory.state_dict()
            # Clones outside inference mode: ordinary tensors, safe to deep-copy, save and load.
            state["hidden"] = (
                None if self._hidden is None else {k: t.clone() for k, t in self._flat_hidden(self._hidden).items()}
            )
            state["inference_hidden"] = (
                None if self._inference_hidden is None else tuple(t.clone() for t in self._inference_hidden)
            )
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore everything :meth:`state_dict` saved."""
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.dist.load_state_dict(state["dist"])
        self.actor_normalizer.load_state_dict(state["actor_normalizer"])
        self.critic_normalizer.load_state_dict(state["critic_normalizer"])
        if (self.reward_normalizer is not None) != ("reward_normalizer" in state):
            raise ValueError(
                f"algo.normalize_rewards: the checkpoint was saved with normalize_rewards="
                f"{'reward_normalizer' in state}, this agent has {self.reward_normalizer is not None}; "
                "expected the same setting as the run that saved it")
        if self.reward_normalizer is not None:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])
            saved = state["discounted_return"]
            self._discounted_return = None if saved is None else torch.as_tensor(saved, device=self.device).clone()
        self.optimizer.load_state_dict(state["optimizer"])
        self.learning_rate.copy_(torch.as_tensor(state["learning_rate"]))
        # Loading replaced the param group's lr with a copy; point it back at the tensor the
        # schedule updates in place.
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate
        self.generator.set_state(state["generator"])
        if self.actor_encoder is not None:
            self.actor_encoder.load_state_dict(state["actor_encoder"])
        if self.actor_memory is not None and self.critic_memory is not None:
            self.actor_memory.load_state_dict(state["actor_memory"])
            self.critic_memory.load_state_dict(state["critic_memory"])
            hidden, inference = state.get("hidden"), state.get("inference_hidden")
            self._hidden = (
                None if hidden is None
                else self._unflat_hidden({k: torch.as_tensor(t).to(self.device, copy=True) for k, t in hidden.items()})
            )
            self._inference_hidden = (
                None if inference is None else tuple(torch.as_tensor(t).to(self.device, copy=True) for t in inference)
            )
