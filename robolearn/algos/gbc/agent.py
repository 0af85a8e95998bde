"""Generative behaviour cloning: a diffusion or flow-matching policy over action chunks, trained
from a dataset's episodes, acting through the chunk executor it is deployed with.

Training samples. Every transition ``t`` of the dataset starts one sample: the condition is the
observations ``t - obs_history + 1 .. t`` of its episode (the episode's first observation repeated
before its start), the target the actions ``t .. t + H - 1`` (the episode's last action repeated
past its end; ``cfg.mask_padding`` leaves those steps out of the loss, else they are trained on as
Diffusion Policy does). ``chunk[0]`` is the action at the newest observation (ACT's and ReinFlow's
alignment; Diffusion Policy's chunks also cover the ``obs_history - 1`` past actions and play from
there). Observations are normalised per frame by the dataset's statistics, actions mapped to
``[-1, 1]`` by the env's bounds (:class:`~robolearn.nn.generative.ChunkModel`).

Acting. :meth:`GenerativeBC.act_inference` (evaluation) and :meth:`GenerativeBC.act` (collection)
each run a :class:`ChunkPolicy`: a per-world :class:`~robolearn.spec.chunking.ChunkExecutor` that
asks the sampler for a chunk when a world's queue runs out, with the initial noise drawn from the
policy's own seeded CPU generator (so the same seed gives the same actions on any device, and the
exported sampler, which takes the noise as an input, reproduces them). Noise is never zero: from
``z = 0`` a flow trained on two symmetric modes lands between them, the average a Gaussian policy
plays. :meth:`GenerativeBC.reset` restarts the executors of ended episodes (the rollouts call it).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from robolearn.algos.gbc.config import FlowBCConfig, GenerativeBCConfig
from robolearn.algos.gbc.losses import one_step_distillation_loss
from robolearn.nn.ensemble import soft_update_
from robolearn.nn.generative import ChunkModel, ChunkModelSpec, ChunkSampler
from robolearn.spec.chunking import ChunkExecutor, ChunkSpec
from robolearn.types import Batch, Transition

EMA_POWER = 0.75
"""Warm-up of the weight average (Diffusion Policy's ``EMAModel``): decay ``1 - (1 + n) ** -0.75``
after ``n`` updates, capped at ``cfg.ema``."""


def ema_decay(num_updates: int, max_decay: float) -> float:
    """The EMA decay for the update after ``num_updates`` updates (0 at the first: a copy)."""
    if max_decay <= 0.0 or num_updates <= 0:
        return 0.0
    return min(max_decay, 1.0 - (1.0 + num_updates) ** -EMA_POWER)


def gather_chunks(dataset: Any, idx: torch.Tensor, horizon: int, obs_history: int,
                  group: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The training samples that start at transitions ``idx[B]`` of ``dataset``: raw stacked frames
    ``[B, obs_history * obs_dim]`` (oldest first, the episode's first observation repeated before its
    start), action chunks ``[B, H, A]`` (the episode's last action repeated past its end) and the
    mask ``[B, H]`` of real (not padded) chunk steps. Never crosses an episode boundary.
    """
    dev = dataset.device
    idx = idx.to(dev)
    start = dataset.episode_starts[dataset.episode_index[idx]]
    back = torch.arange(obs_history - 1, -1, -1, device=dev)  # oldest first
    rows = torch.maximum(idx[:, None] - back[None, :], start[:, None])
    frames = dataset.observations[group][rows].float().reshape(idx.shape[0], -1)
    steps = idx[:, None] + torch.arange(horizon, device=dev)[None, :]
    last = dataset.episode_last[idx][:, None]
    mask = steps <= last
    actions = dataset.actions[torch.minimum(steps, last)]
    return frames, actions, mask


class ChunkPolicy(nn.Module):
    """``obs[N, obs_dim] -> action[N, A]``: a :class:`ChunkSampler` run through a per-world
    :class:`ChunkExecutor` with noise from a seeded CPU generator (stateful; module doc).

    ``sampler`` is the network part export traces (``(obs_history, noise) -> chunk``), ``chunk`` the
    execution semantics the deploy runtime reproduces, ``seed`` the noise stream's seed. The
    executor is built for the first batch size seen and rebuilt (fresh) when it changes.
    """

    def __init__(self, sampler: ChunkSampler, chunk: ChunkSpec, seed: int = 0) -> None:
        """Wrap ``sampler`` (its model's ``horizon`` and ``obs_history`` must be ``chunk``'s)."""
        super().__init__()
        spec = sampler.model.spec
        if (spec.horizon, spec.obs_history) != (chunk.horizon, chunk.obs_history):
            raise ValueError(
                f"chunk: horizon/obs_history {chunk.horizon}/{chunk.obs_history} differ from the model's "
                f"{spec.horizon}/{spec.obs_history}"
            )
        self.sampler = sampler
        self.chunk = chunk
        self.seed = int(seed)
        self.obs_dim, self.action_dim = spec.obs_dim, spec.action_dim
        self.generator = torch.Generator().manual_seed(self.seed)
        self.executor: ChunkExecutor | None = None

    def reset(self, done: torch.Tensor | None = None) -> None:
        """Restart the worlds where ``done[N]``; ``None``: every world, and the noise stream from its
        seed (a fresh policy).
        """
        if done is None:
            self.executor = None
            self.generator.manual_seed(self.seed)
        elif self.executor is not None:
            self.executor.reset(done)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The actions of this step for the observations ``[N, obs_dim]`` (plans where a queue ran out)."""
        with torch.no_grad():
            n = obs.shape[0]
            ex = self.executor
            if ex is None or ex.n != n or ex.history.device != obs.device:
                ex = self.executor = ChunkExecutor(self.chunk, n, self.obs_dim, self.action_dim, device=obs.device)
            cond = ex.observe(obs.reshape(n, -1))
            need = ex.needs_plan()
            if bool(need.any()):
                shape = (n, self.chunk.horizon, self.action_dim)
                noise = torch.randn(shape, generator=self.generator).to(obs.device)
                device = next(self.sampler.parameters()).device
                if bool(need.all()):
                    chunks = self.sampler(cond.to(device), noise.to(device)).to(obs.device)
                else:  # only the worlds whose queue ran out; the others keep theirs
                    rows = need.nonzero().reshape(-1)
                    part = self.sampler(cond[rows].to(device), noise[rows].to(device)).to(obs.device)
                    chunks = torch.zeros(shape, device=obs.device, dtype=part.dtype).index_copy(0, rows, part)
                ex.plan(chunks, need)
            return ex.act()


class GenerativeBC:
    """A diffusion or flow policy over action chunks, cloned from a dataset (module doc).

    Attributes other learners and export rely on: :attr:`model` (the multi-step
    :class:`ChunkModel` that acts: the EMA of the trained weights when ``cfg.ema > 0``),
    :attr:`chunk` (:class:`ChunkSpec`), :attr:`one_step` (the distilled one-step head or ``None``),
    :attr:`cfg` (``sample_steps``), :meth:`sampler_module`, :meth:`policy_module`;
    ``state_dict()["model"]`` is ``model.checkpoint()`` (``ChunkModel.from_checkpoint`` rebuilds it).
    """

    sampler: Any = None
    """Where :meth:`update` draws samples: a :class:`~robolearn.data.sampler.DatasetSampler` (the
    offline runner sets it); its ``dataset`` and ``generator`` are used."""

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: GenerativeBCConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the learner.

        Args:
            obs_dims: flat size of each observation group (``cfg.obs_group`` is one frame).
            action_dim: action size A.
            cfg: hyperparameters (a :class:`FlowBCConfig` if ``None``).
            action_low: finite lower action bounds (actions map to ``[-1, 1]`` through them).
            action_high: finite upper action bounds.
            device: where the networks and the training generator live.
            seed: seeds the network init, the training noise and the acting noise.
        """
        cfg = cfg if cfg is not None else FlowBCConfig()
        self.cfg = cfg
        self.device = torch.device(device)
        self.actor_group = cfg.obs_group
        if cfg.obs_group not in obs_dims:
            raise ValueError(f"obs_group: {cfg.obs_group!r} is not an observation group; expected one of {sorted(obs_dims)}")
        low = torch.as_tensor(action_low, dtype=torch.float32).expand(action_dim).clone()
        high = torch.as_tensor(action_high, dtype=torch.float32).expand(action_dim).clone()
        if not bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise ValueError(
                f"action bounds: a generative policy maps actions to [-1, 1] through finite bounds, got "
                f"low={low.tolist()} high={high.tolist()}"
            )
        self.chunk = ChunkSpec(cfg.horizon, cfg.execute, cfg.obs_history, cfg.ensemble, float(cfg.ensemble_decay))
        """How the policy runs its chunks (recorded with the policy for deployment)."""
        spec = ChunkModelSpec(
            model=cfg.model, obs_dim=int(obs_dims[cfg.obs_group]), action_dim=int(action_dim), horizon=cfg.horizon,
            obs_history=cfg.obs_history, backbone=cfg.backbone, hidden=cfg.hidden, unet_channels=cfg.unet_channels,
            time_embed_dim=cfg.time_embed_dim, diffusion_steps=cfg.diffusion_steps, schedule=cfg.schedule,
        )
        torch.manual_seed(seed)  # network init
        self.seed = int(seed)
        self.train_model = ChunkModel(spec, low, high).to(self.device)
        """The weights the optimiser moves (the same object as :attr:`model` when ``cfg.ema`` is 0)."""
        self.model = self.train_model
        """The multi-step model that acts, checkpoints and exports (the EMA copy when ``cfg.ema > 0``)."""
        if cfg.ema > 0:
            self.model = copy.deepcopy(self.train_model).requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.train_model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.one_step: ChunkModel | None = None
        """The one-step head (a ``model="flow"`` :class:`ChunkModel` sampled in one step), or None."""
        self.one_step_optimizer: torch.optim.Optimizer | None = None
        if cfg.one_step_head:
            self.one_step = ChunkModel(replace(spec, model="flow"), low, high).to(self.device)
            self.one_step_optimizer = torch.optim.AdamW(
                self.one_step.parameters(), lr=cfg.one_step_lr if cfg.one_step_lr is not None else cfg.lr,
                weight_decay=cfg.weight_decay,
            )
        self.generator = torch.Generator(device=self.device).manual_seed(self.seed)
        """Training randomness (noise levels, noise, the one-step head's ``z``)."""
        self.num_updates = 0
        self.normalized = False
        """Whether observation statistics were set (else the first dataset's are taken)."""
        self._dataset_id: int | None = None
        self._eval = ChunkPolicy(ChunkSampler(self.model, cfg.sample_steps), self.chunk, self.seed)
        self._explore = ChunkPolicy(ChunkSampler(self.model, cfg.sample_steps), self.chunk, self.seed + 1)

    # -- data ----------------------------------------------------------------------------------
    def set_obs_normalization(self, mean: Mapping[str, torch.Tensor], std: Mapping[str, torch.Tensor]) -> None:
        """Fix the per-frame observation statistics of ``cfg.obs_group`` (other groups are ignored)."""
        g = self.actor_group
        if g not in mean or g not in std:
            raise ValueError(f"set_obs_normalization: group {g!r} missing (got {sorted(mean)})")
        for m in self._models():
            m.set_normalization(mean[g].to(self.device), std[g].to(self.device))
        self.normalized = True

    def _models(self) -> list[ChunkModel]:
        out = [self.train_model]
        if self.model is not self.train_model:
            out.append(self.model)
        if self.one_step is not None:
            out.append(self.one_step)
        return out

    def _use_dataset(self, dataset: Any) -> None:
        """Check a new dataset against the spaces; take its statistics unless some were set."""
        if self._dataset_id == id(dataset):
            return
        g, spec = self.actor_group, self.model.spec
        if g not in dataset.observations:
            raise ValueError(f"obs_group: the dataset has no {g!r} observations (it has {sorted(dataset.observations)})")
        obs = dataset.observations[g].reshape(len(dataset), -1)
        if obs.shape[1] != spec.obs_dim or dataset.action_dim != spec.action_dim:
            raise ValueError(
                f"dataset: {g} width {obs.shape[1]} and action width {dataset.action_dim}; the policy expects "
                f"{spec.obs_dim} and {spec.action_dim}"
            )
        if not self.normalized:
            o = obs.double()
            self.set_obs_normalization({g: o.mean(0).float()}, {g: o.std(0).float().clamp_min(1e-3)})
        self._dataset_id = id(dataset)

    def _chunk_batch(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """An external batch as (stacked frames, chunks, mask): ``obs[group]`` ``[B, obs_dim]`` (with
        ``obs_history`` 1), ``[B, obs_history * obs_dim]`` or ``[B, obs_history, obs_dim]``; ``action``
        ``[B, A]`` (with ``horizon`` 1) or ``[B, H, A]``; ``extras["mask"]`` ``[B, H]`` optional.
        """
        spec = self.model.spec
        obs = batch.obs[self.actor_group].to(self.device).float()
        b = obs.shape[0]
        obs = obs.reshape(b, -1)
        if obs.shape[1] != spec.cond_dim:
            raise ValueError(f"batch.obs[{self.actor_group!r}]: expected {spec.obs_history} frames of {spec.obs_dim} "
                             f"per sample, got {list(batch.obs[self.actor_group].shape)}")
        act = batch.action.to(self.device).float()
        if act.dim() == 2 and spec.horizon == 1:
            act = act.unsqueeze(1)
        if tuple(act.shape) != (b, spec.horizon, spec.action_dim):
            raise ValueError(f"batch.action: expected chunks [B, {spec.horizon}, {spec.action_dim}], got {list(batch.action.shape)}")
        mask = batch.extras.get("mask")
        return obs, act, (None if mask is None else mask.to(self.device))

    # -- learning ------------------------------------------------------------------------------
    def update(self, batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """One gradient step on ``batch`` (chunks, :meth:`_chunk_batch`), or on ``cfg.batch_size``
        samples drawn from :attr:`sampler`'s dataset with its generator; returns detached tensors.
        """
        if batch is not None:
            obs, actions, mask = self._chunk_batch(batch)
        else:
            dataset = getattr(self.sampler, "dataset", None)
            if dataset is None:
                raise RuntimeError(
                    f"{type(self).__name__}.update: no batch given and no dataset sampler set (set agent.sampler "
                    "to a robolearn.data.sampler.DatasetSampler, or pass a batch of chunks)"
                )
            self._use_dataset(dataset)
            idx = torch.randint(len(dataset), (int(self.cfg.batch_size),), generator=self.sampler.generator,
                                device=dataset.device)
            obs, actions, mask = gather_chunks(dataset, idx, self.cfg.horizon, self.cfg.obs_history, self.actor_group)
            obs, actions, mask = obs.to(self.device), actions.to(self.device), mask.to(self.device)
        return self.update_step(obs, actions, mask)

    def update_step(self, obs_history: torch.Tensor, actions: torch.Tensor,
                    mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """One gradient step on raw stacked frames ``[B, obs_history * obs_dim]`` and env-unit chunks
        ``[B, H, A]`` (``mask`` ``[B, H]``: real steps, used with ``cfg.mask_padding``); then the EMA
        and, with a one-step head, one distillation step.
        """
        cfg = self.cfg
        weight = mask.to(actions.dtype) if (cfg.mask_padding and mask is not None) else None
        loss = self.train_model.loss(obs_history, actions, weight=weight, generator=self.generator)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.train_model.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
        self.optimizer.step()
        out = {"loss_bc": loss.detach(), "grad_norm": grad_norm.detach()}
        if self.model is not self.train_model:
            decay = ema_decay(self.num_updates, float(cfg.ema))
            soft_update_(self.model, self.train_model, 1.0 - decay)  # the EMA is a Polyak average
            with torch.no_grad():
                for b_ema, b in zip(self.model.buffers(), self.train_model.buffers(), strict=True):
                    b_ema.copy_(b)
            out["ema_decay"] = torch.tensor(decay)
        if self.one_step is not None and self.one_step_optimizer is not None:
            noise = torch.randn(actions.shape, generator=self.generator, device=self.device, dtype=actions.dtype)
            d = one_step_distillation_loss(self.one_step, self.model, obs_history, noise, cfg.sample_steps)
            self.one_step_optimizer.zero_grad(set_to_none=True)
            (float(cfg.one_step_weight) * d["loss_one_step"]).backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.one_step.parameters(), cfg.grad_clip)
            self.one_step_optimizer.step()
            out.update({k: v.detach() for k, v in d.items()})
        self.num_updates += 1
        return out

    def process(self, transition: Transition) -> None:
        """Not supported: generative behaviour cloning learns from a dataset only (runner ``offline``)."""
        raise NotImplementedError(
            "GenerativeBC learns offline from a dataset; online fine-tuning of a flow policy is algo=reinflow"
        )

    # -- acting --------------------------------------------------------------------------------
    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Evaluation actions ``[N, A]``: the chunk executor's, planned with :attr:`model` at
        ``cfg.sample_steps`` from the evaluation noise stream (seeded ``seed``).
        """
        return self._eval(obs[self.actor_group])

    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Collection actions ``[N, A]``: as :meth:`act_inference`, with a second executor and noise
        stream (seeded ``seed + 1``), so collecting does not disturb an evaluation's state.
        """
        return self._explore(obs[self.actor_group])

    def reset(self, done: torch.Tensor | None = None) -> None:
        """Restart the acting state (executors) of the worlds where ``done[N]``; ``None``: all worlds,
        and the noise streams from their seeds (:class:`robolearn.types.Resettable`).
        """
        self._eval.reset(done)
        self._explore.reset(done)

    def sampler_module(self, steps: int | None = None, one_step: bool = False) -> ChunkSampler:
        """An independent CPU copy in eval mode of ``(obs_history, noise) -> chunk`` (env units):
        :attr:`model` at ``steps`` (default ``cfg.sample_steps``), or with ``one_step`` the one-step
        head (``steps`` must then be 1 or None).
        """
        if one_step:
            if self.one_step is None:
                raise ValueError("one_step: this learner has no one-step head (cfg.one_step_head is false)")
            if steps not in (None, 1):
                raise ValueError(f"steps: the one-step head samples in 1 step, got {steps}")
            model, n = self.one_step, 1
        else:
            model, n = self.model, int(steps if steps is not None else self.cfg.sample_steps)
        copy_ = ChunkModel.from_checkpoint(model.checkpoint()).eval().requires_grad_(False)
        return ChunkSampler(copy_, n).eval()

    def policy_module(self, steps: int | None = None, one_step: bool = False) -> ChunkPolicy:
        """The stateful CPU policy ``obs[N, obs_dim] -> action[N, A]`` (:class:`ChunkPolicy`, with
        ``reset(done)``): :meth:`sampler_module` run by a fresh chunk executor, noise seeded ``seed``
        (so a fresh module reproduces a fresh :meth:`act_inference`).
        """
        return ChunkPolicy(self.sampler_module(steps, one_step), self.chunk, self.seed).eval()

    # -- state ---------------------------------------------------------------------------------
    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor: parameters and floating buffers of the trained, EMA and one-step models."""
        out: list[torch.Tensor] = []
        for m in self._models():
            out.extend(m.parameters())
            out.extend(b for b in m.buffers() if b.is_floating_point())
        return out

    def learned_state_dict(self) -> dict[str, Any]:
        """Models, optimisers, generator and counters (no sampler position)."""
        state: dict[str, Any] = {
            "model": self.model.checkpoint(),
            "one_step": None if self.one_step is None else self.one_step.checkpoint(),
            "train_model": None if self.model is self.train_model else self.train_model.checkpoint(),
            "optimizer": self.optimizer.state_dict(),
            "one_step_optimizer": None if self.one_step_optimizer is None else self.one_step_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
            "normalized": self.normalized,
            "chunk": self.chunk.to_dict(),
            "sample_steps": int(self.cfg.sample_steps),
        }
        return state

    def state_dict(self) -> dict[str, Any]:
        """:meth:`learned_state_dict` plus the sampler's own state."""
        state = self.learned_state_dict()
        if self.sampler is not None:
            state["sampler"] = self.sampler.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (a model of another spec is refused, naming both)."""
        mine = self.model.spec.to_dict()
        theirs = dict(state["model"]["spec"])
        if {k: list(v) if isinstance(v, tuple) else v for k, v in theirs.items()} != mine:
            raise ValueError(f"model: the checkpoint's spec {theirs} differs from this learner's {mine}")
        self.model.load_state_dict(state["model"]["state"])
        if self.model is not self.train_model:
            train = state.get("train_model") or state["model"]
            self.train_model.load_state_dict(train["state"])
        if self.one_step is not None and state.get("one_step") is not None:
            self.one_step.load_state_dict(state["one_step"]["state"])
        if state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.one_step_optimizer is not None and state.get("one_step_optimizer") is not None:
            self.one_step_optimizer.load_state_dict(state["one_step_optimizer"])
        if "generator" in state:
            self.generator.set_state(state["generator"])
        self.num_updates = int(state.get("num_updates", 0))
        self.normalized = bool(state.get("normalized", True))
        if self.sampler is not None and "sampler" in state:
            self.sampler.load_state_dict(state["sampler"])
        self.reset()


__all__ = ["ChunkPolicy", "GenerativeBC", "ema_decay", "gather_chunks"]
