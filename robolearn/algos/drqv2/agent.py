"""DrQ-v2: a deterministic actor and a double-Q critic on a shared CNN encoder, learned from pixels.

Verbs only (DESIGN.md, "Algorithm"): the runner owns the loop (the off-policy runner drives it
like SAC). What the agent keeps between calls besides its networks:

- frame stacks: the env gives one frame per world; the agent keeps the last ``frame_stack`` frames
  of each world (one stack for :meth:`DrQV2.act` and training, one for :meth:`DrQV2.act_inference`
  and evaluation, restarted by :meth:`DrQV2.reset`) and an episode starts with copies of its
  first frame. The stacked uint8 images are what the policy module reads and what a batch holds.
- the replay: by default a :class:`~robolearn.algos.drqv2.replay.FrameReplay` (``replay="frames"``)
  that stores each frame once and rebuilds the stacks when it samples; ``replay="stacked"`` keeps
  both stacks per transition in a :class:`~robolearn.data.replay.ReplayBuffer` (``2 * frame_stack``
  times the frame memory; the same batches for the same transitions).
- the n-step window: each world's last ``n_step`` steps, from which one n-step transition (return,
  discount ``gamma^m`` or 0 on termination) enters the replay per step; an episode end flushes the
  world's shorter windows, so nothing is bootstrapped across a reset.

Both are in the checkpoint (:meth:`DrQV2.state_dict`), so a resumed run stores the transitions a
straight run would. Action repeat is the task's ``decimation``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from torch.utils._pytree import tree_map

from robolearn.algos.drqv2.config import DrQV2Config
from robolearn.algos.drqv2.losses import actor_loss, critic_loss, noisy_action
from robolearn.algos.drqv2.replay import FrameReplay
from robolearn.data.replay import ReplayBuffer
from robolearn.data.sampler import ReplaySampler, Sampler
from robolearn.nn.ensemble import CriticEnsemble, make_target, soft_update_
from robolearn.nn.mlp import MLP
from robolearn.nn.policy import deployable
from robolearn.nn.vision import CNNEncoder, MultiModalEncoder, RandomShift, stack_frames
from robolearn.types import Batch, Obs, Transition

DISCOUNT = "discount"
"""The replay's extra field holding each transition's bootstrap discount (``gamma^m``, 0 on termination)."""


def image_shape(flat_dim: int, channels: int, group: str) -> tuple[int, int, int]:
    """``(H, W, C)`` of a square HWC frame of ``flat_dim`` values with ``channels`` channels."""
    side = math.isqrt(max(flat_dim // channels, 0))
    if side < 1 or side * side * channels != flat_dim:
        raise ValueError(
            f"{group}: expected a square {channels}-channel image group (H*W*{channels} values), got {flat_dim} values; "
            "set algo.image_channels or algo.actor_obs_group"
        )
    return side, side, channels


class FrameStack:
    """The last ``k`` frames of each of N worlds, restarted per world (oldest frame first)."""

    def __init__(self, k: int) -> None:
        """``k``: frames kept per world."""
        self.k = int(k)
        self.frames: torch.Tensor | None = None
        """``[N, k, H, W, C]`` (uint8), allocated on the first push."""
        self.restart: torch.Tensor | None = None
        """``[N]`` bool: the world's next frame starts a new episode."""

    def push(self, frame: torch.Tensor) -> torch.Tensor:
        """Append ``frame`` ``[N, H, W, C]`` and return the stack ``[N, H, W, k*C]``; a restarted
        world (or a first call, or a new N) is filled with ``k`` copies of its frame.
        """
        fresh = frame.unsqueeze(1).expand(-1, self.k, *frame.shape[1:])
        if self.frames is None or self.frames.shape[0] != frame.shape[0] or self.frames.shape[2:] != frame.shape[1:]:
            self.frames = fresh.clone()
        else:
            rolled = torch.cat([self.frames[:, 1:], frame.unsqueeze(1)], dim=1)
            assert self.restart is not None
            self.frames = torch.where(self.restart.view(-1, 1, 1, 1, 1), fresh, rolled)
        self.restart = torch.zeros(frame.shape[0], dtype=torch.bool, device=frame.device)
        return stack_frames(self.frames)

    def peek(self, frame: torch.Tensor) -> torch.Tensor:
        """The stack :meth:`push` of ``frame`` would give in a continuing episode, without storing it."""
        if self.frames is None:
            raise RuntimeError("FrameStack.peek: nothing pushed yet")
        return stack_frames(torch.cat([self.frames[:, 1:], frame.unsqueeze(1)], dim=1))

    def reset(self, done: torch.Tensor) -> None:
        """Mark the worlds where ``done[N]`` to restart at their next frame."""
        if self.restart is not None and self.restart.shape == done.shape:
            # Not in place: the stack may come from act's inference mode.
            self.restart = self.restart | done.to(self.restart.device, torch.bool)


class NStepWindow:
    """Turns N worlds' one-step transitions into n-step ones (DrQ-v2's n-step returns).

    A ring of ``n`` start slots per world: slot ``s`` holds ``(obs, action)`` of a step and the
    return accumulated since, ``sum_i gamma^i r``, and ``gamma^m`` after ``m`` steps. A slot is
    emitted when it has ``n`` steps, or earlier when its world's episode ends (terminated: discount
    0; truncated: ``gamma^m``, bootstrapping from the true final observation).
    """

    def __init__(self, n: int, gamma: float) -> None:
        """``n``: steps per window; ``gamma``: the per-step discount."""
        self.n, self.gamma = int(n), float(gamma)
        self.t = 0
        self.slots: dict[str, Any] = {}

    def _allocate(self, obs: Obs, action: torch.Tensor, reward: torch.Tensor) -> None:
        n, dev = self.n, reward.device
        self.slots = {
            "obs": {g: torch.zeros((n, *v.shape), dtype=v.dtype, device=dev) for g, v in obs.items()},
            "action": torch.zeros((n, *action.shape), dtype=action.dtype, device=dev),
            "ret": torch.zeros((n, reward.shape[0]), dtype=reward.dtype, device=dev),
            "disc": torch.ones((n, reward.shape[0]), dtype=reward.dtype, device=dev),
            "steps": torch.zeros((n, reward.shape[0]), dtype=torch.long, device=dev),
            "valid": torch.zeros((n, reward.shape[0]), dtype=torch.bool, device=dev),
        }

    def _record(
        self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Open this step's window, advance every open one; return the ``emit`` mask ``[n, N]`` of the
        windows this step completes and ``terminated``, ``truncated`` as bool.
        """
        if not self.slots or self.slots["valid"].shape[1] != reward.shape[0]:
            self._allocate(obs, action, reward)
            self.t = 0
        sl = self.slots
        s = self.t % self.n
        for g, v in obs.items():
            sl["obs"][g][s] = v
        sl["action"][s] = action
        sl["ret"][s] = 0.0
        sl["disc"][s] = 1.0
        sl["steps"][s] = 0
        sl["valid"][s] = True
        valid = sl["valid"]
        sl["ret"] += valid * sl["disc"] * reward.unsqueeze(0)
        sl["disc"] = torch.where(valid, sl["disc"] * self.gamma, sl["disc"])
        sl["steps"] += valid.long()
        terminated, truncated = terminated.bool(), truncated.bool()
        emit = valid & ((sl["steps"] >= self.n) | (terminated | truncated).unsqueeze(0))
        sl["valid"] = valid & ~emit
        self.t += 1
        return emit, terminated, truncated

    def add(
        self,
        obs: Obs,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: Obs,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> dict[str, Any] | None:
        """Record one step of every world; return the transitions it completes (``None``: none) as
        ``obs``, ``action``, ``reward`` (the n-step return), ``next_obs``, ``terminated``,
        ``truncated`` and ``discount``.
        """
        emit, terminated, truncated = self._record(obs, action, reward, terminated, truncated)
        sl = self.slots
        slot, world = emit.nonzero(as_tuple=True)  # one host sync: the replay's write count
        if slot.numel() == 0:
            return None
        term = terminated[world]
        return {
            "obs": {g: v[slot, world] for g, v in sl["obs"].items()},
            "action": sl["action"][slot, world],
            "reward": sl["ret"][slot, world],
            "next_obs": {g: v[world] for g, v in next_obs.items()},
            "terminated": term,
            "truncated": truncated[world],
            "discount": sl["disc"][slot, world] * (~term).to(reward.dtype),
        }

    def add_dense(
        self,
        obs: Obs,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: Obs,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> dict[str, Any]:
        """:meth:`add` without the host sync: every slot ``[n, N, ...]`` with ``emit`` ``[n, N]`` (the
        windows completed now), ``start`` (the host-side step each slot's window started, -1: unused)
        and this step's ``next_obs``, ``terminated``, ``truncated`` ``[N, ...]``. The slot tensors are
        the window's own: read them before the next step.
        """
        emit, terminated, truncated = self._record(obs, action, reward, terminated, truncated)
        sl = self.slots
        newest = self.t - 1
        start = [newest - (newest - i) % self.n for i in range(self.n)]
        return {
            "emit": emit,
            "start": [s if s >= 0 else -1 for s in start],
            "obs": sl["obs"],
            "action": sl["action"],
            "reward": sl["ret"],
            "next_obs": dict(next_obs),
            "terminated": terminated,
            "truncated": truncated,
            "discount": sl["disc"] * (~terminated).to(reward.dtype).unsqueeze(0),
        }


class DrQActor(nn.Module):
    """Pixels ``[B, H, W, k*C]`` uint8 -> deterministic action in the env's bounds.

    ``front`` is a :class:`~robolearn.nn.vision.MultiModalEncoder` over the shared encoder (detached
    in pixel mode, so only the critic trains the convolutions), then an MLP and tanh.
    """

    def __init__(
        self,
        encoder: CNNEncoder,
        action_dim: int,
        feature_dim: int,
        hidden_dim: int,
        detach: bool,
        action_low: torch.Tensor | float,
        action_high: torch.Tensor | float,
    ) -> None:
        """Build the trunk and head on ``encoder`` (shared, not copied)."""
        super().__init__()
        self.front = MultiModalEncoder(encoder, 0, feature_dim, detach=detach)
        self.policy = MLP(feature_dim, action_dim, (hidden_dim, hidden_dim), "relu")
        low = torch.as_tensor(action_low, dtype=torch.float32).expand(action_dim)
        high = torch.as_tensor(action_high, dtype=torch.float32).expand(action_dim)
        if not bool(torch.isfinite(low).all() and torch.isfinite(high).all() and (high > low).all()):
            raise ValueError(f"action bounds: expected finite low < high, got low={low.tolist()}, high={high.tolist()}")
        self.register_buffer("action_offset", (high + low) / 2)
        self.register_buffer("action_scale", (high - low) / 2)

    def head(self, features: torch.Tensor) -> torch.Tensor:
        """The mean action in [-1, 1] from the encoder's features ``[B, encoder.out_dim]``."""
        return torch.tanh(self.policy(self.front.trunk(features)))

    def to_env(self, action: torch.Tensor) -> torch.Tensor:
        """An action in [-1, 1] in the env's bounds."""
        return self.action_offset + self.action_scale * action

    def to_unit(self, action: torch.Tensor) -> torch.Tensor:
        """An action in the env's bounds in [-1, 1]."""
        return (action - self.action_offset) / self.action_scale

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The deterministic action for stacked uint8 images (what export traces)."""
        return self.to_env(torch.tanh(self.policy(self.front(images))))


class DrQCritic(nn.Module):
    """``num_critics`` Q networks on features: a ``Linear -> LayerNorm -> tanh`` trunk on CNN features
    (pixel mode) or the raw state (asymmetric mode, no trunk), then the vmapped MLPs.
    """

    def __init__(self, in_dim: int, action_dim: int, cfg: DrQV2Config, trunk: bool) -> None:
        """``in_dim``: the CNN's features or the state group's size; ``trunk``: pixel mode."""
        super().__init__()
        self.trunk: nn.Module = (
            nn.Sequential(nn.Linear(in_dim, cfg.feature_dim), nn.LayerNorm(cfg.feature_dim), nn.Tanh())
            if trunk
            else nn.Identity()
        )
        width = cfg.feature_dim if trunk else in_dim
        self.q = CriticEnsemble(width, action_dim, cfg.num_critics, (cfg.hidden_dim, cfg.hidden_dim), activation="relu")

    def forward(self, features: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """Q-values ``[E, B]``; ``detach_params``: no gradient into this critic's parameters."""
        if detach_params:
            params = {k: v.detach() for k, v in self.trunk.named_parameters()}
            h = functional_call(self.trunk, params, (features,))
        else:
            h = self.trunk(features)
        return self.q(h, action, detach_params=detach_params)


class DrQV2:
    """Encoder, actor, critic, target critic, replay, frame stacks and n-step window, with their optimisers."""

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: DrQV2Config | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the learner.

        Args:
            obs_dims: flat size of each observation group (``BatchedEnv.obs_dims``); the actor's
                group is a square HWC image of ``cfg.image_channels`` channels.
            action_dim: action size A.
            cfg: hyperparameters (defaults if ``None``).
            action_low: finite lower action bounds.
            action_high: finite upper action bounds.
            device: where networks, buffer and generator live.
            seed: seeds the network init, the sampling generator, augmentation and exploration noise.
        """
        self.cfg = cfg = cfg or DrQV2Config()
        self.device = torch.device(device)
        self.actor_group = cfg.actor_obs_group
        self.critic_group = cfg.critic_obs_group if cfg.asymmetric else cfg.actor_obs_group
        for group in (self.actor_group, self.critic_group):
            if group not in obs_dims:
                raise ValueError(f"observation group {group!r} not among the env's groups {sorted(obs_dims)}")
        self.action_dim = int(action_dim)
        h, w, c = image_shape(int(obs_dims[self.actor_group]), cfg.image_channels, self.actor_group)
        self.frame_shape = (h, w, c)
        """One frame ``(H, W, C)`` of the actor's group."""
        torch.manual_seed(seed)  # network init
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.encoder = CNNEncoder((h, w, c * cfg.frame_stack), "HWC", cfg.cnn_channels, cfg.cnn_layers).to(self.device)
        self.actor = DrQActor(
            self.encoder, action_dim, cfg.feature_dim, cfg.hidden_dim, not cfg.asymmetric, action_low, action_high
        ).to(self.device)
        if cfg.aux_state_weight > 0.0:
            # Part of the actor (saved and optimised with it); export traces forward(), which skips it.
            self.actor.aux = nn.Linear(cfg.feature_dim, int(obs_dims[self.critic_group])).to(self.device)
        critic_in = int(obs_dims[self.critic_group]) if cfg.asymmetric else self.encoder.out_dim
        self.critic = DrQCritic(critic_in, action_dim, cfg, trunk=not cfg.asymmetric).to(self.device)
        self.target_critic = make_target(self.critic)
        self.augment = RandomShift(cfg.aug_pad)
        self.encoder_optimizer = torch.optim.Adam(self.encoder.parameters(), lr=cfg.lr)
        encoder_ids = {id(p) for p in self.encoder.parameters()}
        self.actor_optimizer = torch.optim.Adam([p for p in self.actor.parameters() if id(p) not in encoder_ids], lr=cfg.lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr)
        self.replay: FrameReplay | ReplayBuffer = (
            FrameReplay(cfg.buffer_size, cfg.frame_stack, cfg.n_step, self.actor_group, self.device)
            if cfg.replay == "frames"
            else ReplayBuffer(cfg.buffer_size, self.device)
        )
        # ReplaySampler only asks its replay for len, device and sample(batch_size, generator).
        self.sampler: Sampler = ReplaySampler(self.replay, self.generator)  # type: ignore[arg-type]
        """Where :meth:`update` draws its batches (this agent's replay by default)."""
        self.train_stack = FrameStack(cfg.frame_stack)
        """Frames of the training env's worlds (:meth:`act`, :meth:`process`)."""
        self.eval_stack = FrameStack(cfg.frame_stack)
        """Frames of the evaluation env's worlds (:meth:`act_inference`, :meth:`reset`)."""
        self.window = NStepWindow(cfg.n_step, cfg.gamma)
        self._stacked: torch.Tensor | None = None  # the training stack :meth:`act` last returned
        self.env_steps = 0
        """Env steps stored so far, all worlds counted (drives the exploration std schedule)."""
        self.num_updates = 0
        """Gradient steps taken."""
        self.update_calls = 0
        """Calls of :meth:`update` without a batch once learning started (drives ``update_every``)."""
        self.last_shifts: tuple[torch.Tensor, torch.Tensor] | None = None
        """The random shifts ``[B, 2]`` of the last gradient step's observations and next observations."""

    # -- acting -------------------------------------------------------------------------------
    @property
    def std(self) -> float:
        """The exploration std at :attr:`env_steps` (:meth:`DrQV2Config.std`)."""
        return self.cfg.std(self.env_steps)

    def _frame(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        frame = obs[self.actor_group].to(self.device)
        if tuple(frame.shape[1:]) != self.frame_shape:
            raise ValueError(f"{self.actor_group}: expected frames [N, {', '.join(map(str, self.frame_shape))}], got {list(frame.shape)}")
        return frame

    @torch.inference_mode()
    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Exploration actions ``[N, A]``: uniform in the bounds until ``learning_starts``, then the
        actor's mean plus Gaussian noise of the scheduled std (clamped to the bounds).
        """
        stacked = self.train_stack.push(self._frame(obs))
        self._stacked = stacked
        n = stacked.shape[0]
        if len(self.replay) < self.cfg.learning_starts:
            u = torch.rand((n, self.action_dim), generator=self.generator, device=self.device)
            return self.actor.to_env(2.0 * u - 1.0)
        mean = self.actor.head(self.encoder(stacked))
        noise = torch.randn(mean.shape, generator=self.generator, device=self.device)
        return self.actor.to_env(noisy_action(mean, self.std, noise, None))

    @torch.inference_mode()
    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic actions ``[N, A]`` on the evaluation frame stack (one frame pushed per call)."""
        return self.actor(self.eval_stack.push(self._frame(obs)))

    def reset(self, done: torch.Tensor) -> None:
        """Restart the evaluation frame stack of the worlds where ``done[N]`` (the rollout loop calls it)."""
        self.eval_stack.reset(done)

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
        """Store one batched env step (``[N, ...]``) through the frame stack and the n-step window.

        ``next_obs`` is ``info["final_obs"]`` (pre-reset for worlds that ended); only ``terminated``
        stops bootstrapping. The frame replay stores each world's next frame (and an episode's first
        frame), so a continuing world's ``obs`` must be its previous ``next_obs``, as a
        :class:`~robolearn.envs.BatchedEnv` gives it; the stacked replay stores both stacks as given.
        """
        if isinstance(obs, Transition):
            obs, action, reward, next_obs, terminated, truncated = (
                obs.obs, obs.action, obs.reward, obs.next_obs, obs.terminated, obs.truncated,
            )  # fmt: skip
        if action is None or reward is None or next_obs is None or terminated is None:
            raise ValueError("process: expected a Transition or obs, action, reward, next_obs, terminated")
        if truncated is None:
            truncated = torch.zeros_like(terminated, dtype=torch.bool)
        dev = self.device
        terminated, truncated = terminated.to(dev, torch.bool), truncated.to(dev, torch.bool)
        frame = self._frame(obs)
        stacked = self._stacked if self._stacked is not None else self.train_stack.push(frame)
        self._stacked = None  # the next step's stack comes from act (or from the next process)
        if isinstance(self.replay, FrameReplay):
            # the window carries the stacks' frame numbers; the frames go to the replay once
            obs_idx, next_idx = self.replay.write_frames(frame, self._frame(next_obs), terminated | truncated)
            groups: dict[str, torch.Tensor] = {self.actor_group: obs_idx}
            next_groups: dict[str, torch.Tensor] = {self.actor_group: next_idx}
        else:
            groups = {self.actor_group: stacked}
            next_groups = {self.actor_group: self.train_stack.peek(self._frame(next_obs))}
        if self.cfg.asymmetric:
            groups[self.critic_group] = obs[self.critic_group].to(dev)
            next_groups[self.critic_group] = next_obs[self.critic_group].to(dev)
        self.train_stack.reset(terminated | truncated)
        self.env_steps += int(reward.shape[0])
        if isinstance(self.replay, FrameReplay):
            dense = self.window.add_dense(groups, action.to(dev), reward.to(dev), next_groups, terminated, truncated)
            self.replay.add(dense["start"], dense["emit"], dense["obs"], dense["action"], dense["reward"],
                            dense["next_obs"], dense["terminated"], dense["truncated"], {DISCOUNT: dense["discount"]})  # fmt: skip
            return
        out = self.window.add(groups, action.to(dev), reward.to(dev), next_groups, terminated, truncated)
        if out is not None:
            self.replay.add(out["obs"], out["action"], out["reward"], out["next_obs"], out["terminated"],
                            out["truncated"], extras={DISCOUNT: out["discount"]})  # fmt: skip

    # -- learning -------------------------------------------------------------------------------
    def update(self, batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """One gradient step on ``batch``; without it, one step on a batch from :attr:`sampler`
        every ``update_every`` calls once ``learning_starts`` transitions are stored (else ``{}``).
        """
        if batch is not None:
            return self.update_step(batch)
        if len(self.replay) < self.cfg.learning_starts or len(self.sampler) == 0:
            return {}
        self.update_calls += 1
        if (self.update_calls - 1) % self.cfg.update_every:
            return {}
        return self.update_step(self.sampler.sample(self.cfg.batch_size))

    def update_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Critic (and encoder) step, actor step, then the target lerp, on ``batch``.

        ``batch.extras["discount"]`` is each transition's bootstrap discount; a batch without it
        (one-step data) uses ``gamma * (1 - terminated)``.
        """
        cfg, gen, dev = self.cfg, self.generator, self.device
        img, next_img = batch.obs[self.actor_group].to(dev), batch.next_obs[self.actor_group].to(dev)
        # Independent shifts for s and s' (DrQ-v2 augments the two batches separately).
        img, s_obs = self.augment(img, "HWC", gen, return_shifts=True)
        next_img, s_next = self.augment(next_img, "HWC", gen, return_shifts=True)
        self.last_shifts = (s_obs, s_next)
        action = self.actor.to_unit(batch.action.to(dev))
        reward = batch.reward.to(dev)
        discount = batch.extras.get(DISCOUNT) if batch.extras else None
        if discount is None:
            discount = cfg.gamma * (~batch.terminated.to(dev).bool()).to(reward.dtype)
        shape = (action.shape[0], self.action_dim)
        next_noise = torch.randn(shape, generator=gen, device=dev)
        noise = torch.randn(shape, generator=gen, device=dev)
        std = self.std

        h = self.encoder(img)
        with torch.no_grad():
            h_next = self.encoder(next_img)
        if cfg.asymmetric:
            critic_f = batch.obs[self.critic_group].to(dev)
            next_critic_f = batch.next_obs[self.critic_group].to(dev)
            actor_f = h  # the actor loss trains the encoder: no critic reads it
        else:
            critic_f, next_critic_f, actor_f = h, h_next, h.detach()
        c = critic_loss(self.critic, self.target_critic, self.actor, critic_f, action, reward, discount,
                        h_next, next_critic_f, std, cfg.std_clip, next_noise)  # fmt: skip
        self.encoder_optimizer.zero_grad(set_to_none=True)
        self.critic_optimizer.zero_grad(set_to_none=True)
        c["loss_critic"].backward()
        self.critic_optimizer.step()
        if not cfg.asymmetric:
            self.encoder_optimizer.step()

        a = actor_loss(self.actor, self.critic, actor_f, critic_f, std, cfg.std_clip, noise)
        loss = a["loss_actor"]
        if cfg.aux_state_weight > 0.0:
            predicted = self.actor.aux(self.actor.front.trunk(actor_f))
            a["loss_aux_state"] = nn.functional.mse_loss(predicted, critic_f.to(predicted.dtype))
            loss = loss + cfg.aux_state_weight * a["loss_aux_state"]
        self.actor_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_optimizer.step()
        if cfg.asymmetric:
            self.encoder_optimizer.step()

        soft_update_(self.target_critic, self.critic, cfg.tau)
        self.num_updates += 1
        out = {k: v.detach() for k, v in {**c, **a}.items()}
        out["std"] = torch.tensor(std, device=dev)
        return out

    # -- what the runners and export read ------------------------------------------------------
    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor: encoder, actor head, critics and target critics (each once)."""
        seen: set[int] = set()
        out: list[torch.Tensor] = []
        for module in (self.encoder, self.actor, self.critic, self.target_critic):
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out

    def policy_module(self) -> nn.Module:
        """The deterministic ``stacked uint8 images [B, H, W, frame_stack*C] -> action`` module (encoder
        included), a CPU copy in eval mode. The deploy side stacks the frames (oldest first).
        """
        return deployable(self.actor)

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks (the encoder inside the actor's), targets, optimisers, replay, generator and counters."""
        return {
            **self.learned_state_dict(),
            "replay": self.replay.state_dict(),
            "env_steps": self.env_steps,
            # the training episodes in flight: a resumed run stores the same transitions as a straight one
            "collection": tree_map(
                lambda x: x.clone() if isinstance(x, torch.Tensor) else x,  # copies: the window updates in place
                {
                    "frames": self.train_stack.frames,
                    "restart": self.train_stack.restart,
                    "stacked": self._stacked,
                    "window_t": self.window.t,
                    "window": self.window.slots,
                },
            ),
        }

    def learned_state_dict(self) -> dict[str, Any]:
        """:meth:`state_dict` without the replay buffer and the env-step count (what a rollback of bad
        updates restores: the data collected meanwhile, and the std schedule's progress, stay).
        """
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "encoder_optimizer": self.encoder_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "counters": {"num_updates": self.num_updates, "update_calls": self.update_calls},
            "sampler": self.sampler.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` (a state without ``replay`` keeps this buffer)."""
        self.actor.load_state_dict(state["actor"])  # the shared encoder's weights come with it
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        for name in ("encoder_optimizer", "actor_optimizer", "critic_optimizer"):
            if name in state:
                getattr(self, name).load_state_dict(state[name])
        if "replay" in state:
            is_frames = state["replay"].get("kind") == "frames"
            if is_frames != isinstance(self.replay, FrameReplay):
                kind = "frames" if is_frames else "stacked"
                raise ValueError(f"replay: the checkpoint holds a {kind!r} replay, this agent {self.cfg.replay!r}; set algo.replay={kind}")
            self.replay.load_state_dict(state["replay"])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        counters = state.get("counters", {})
        if "env_steps" in state:
            self.env_steps = int(state["env_steps"])
        if "collection" in state:
            col = state["collection"]
            self.train_stack.frames, self.train_stack.restart = col["frames"], col["restart"]
            self._stacked = col["stacked"]
            self.window.t = int(col["window_t"])
            self.window.slots = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, col["window"])
        self.num_updates = int(counters.get("num_updates", 0))
        self.update_calls = int(counters.get("update_calls", 0))
        if "sampler" in state:
            self.sampler.load_state_dict(state["sampler"])


__all__: list[str] = ["DISCOUNT", "DrQActor", "DrQCritic", "DrQV2", "FrameStack", "NStepWindow", "image_shape"]
