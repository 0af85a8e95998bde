"""What the learners share that is not a network: the verbs of the offline learners and the config
fields of their actor-critics; the entropy-temperature loss of SAC and CQL; PPO's clipped surrogate
(PPO and the distillation student's AACD mode); and what PPO's and SAC's compiled whole steps are
made of (:class:`ParameterHolder`, :func:`adam_step_`, :func:`clip_grad_norm_list_`, the compile
helpers).

``robolearn/algos/<name>/`` packages never import one another (DESIGN.md); a block two of them
share lives in ``robolearn/nn`` when it is a network and here when it is learner behaviour
(tests/test_import_rules.py enforces both).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn
from torch.utils._pytree import tree_map

from robolearn.data.replay import ReplayBuffer
from robolearn.nn.offline import (
    DeterministicActor,
    NetSpec,
    ObsNormalization,
    check_critic_fields,
    check_groups,
    make_hl_gauss,
)
from robolearn.nn.policy import SquashedMean, deployable
from robolearn.types import Batch, Transition


def check_count(name: str, value: Any) -> None:
    """Reject anything but a whole number >= 1 (a bool or 2.5 included); the message names the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")


@dataclass
class OfflineCriticConfig:
    """The fields every offline actor-critic (TD3+BC, IQL, CQL and Cal-QL) has, at CORL's values;
    each learner's config adds its own and redeclares a field where its CORL default differs.

    Subclasses validate their own fields in ``__post_init__`` after calling this one's.
    """

    batch_size: int = 256
    """Transitions per gradient step (CORL: 256)."""
    gamma: float = 0.99
    """Discount factor (CORL: 0.99)."""
    tau: float = 0.005
    """Polyak rate of the target networks: ``target <- (1 - tau) * target + tau * online`` (CORL: 0.005)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor (CORL: 3e-4)."""
    critic_lr: float = 3e-4
    """Adam learning rate of the Q ensemble (CORL ``qf_lr``: 3e-4)."""
    num_critics: int = 2
    """Q networks in the ensemble; TD targets take the min over their targets (CORL: twin Q)."""
    actor_hidden: tuple[int, ...] = (256, 256)
    """Actor hidden layer widths (CORL: 256x2)."""
    critic_hidden: tuple[int, ...] = (256, 256)
    """Q hidden layer widths (CORL: 256x2)."""
    activation: str = "relu"
    """Hidden activation of every network (CORL: ReLU)."""
    layer_norm: bool = False
    """LayerNorm after each hidden layer of the critics (and of IQL's V); set SAC's ``layer_norm``
    alike to continue online from these critics."""
    actor_obs_group: str = "policy"
    """Observation group the actor reads."""
    critic_obs_group: str | None = None
    """Observation group the critics (and IQL's V) read; ``None`` means the actor's."""
    buffer_size: int = 1_000_000
    """Online transitions kept when the learner acts in an env (``process``; offline-to-online)."""
    critic_type: str = "mse"
    """``mse``: scalar Q with a squared TD error (checkpoints load into SAC); ``hl_gauss``:
    ``num_bins`` logits trained by cross-entropy (IQL's V stays scalar)."""
    num_bins: int = 51
    """HL-Gauss bins (Farebrother et al. 2024 use 51 on Atari)."""
    v_min: float | None = None
    """Lower end of the HL-Gauss support; required with ``hl_gauss`` (about ``r_min / (1 - gamma)``)."""
    v_max: float | None = None
    """Upper end of the HL-Gauss support; required with ``hl_gauss``."""

    def __post_init__(self) -> None:
        """Validate the shared fields; a bad value names the field."""
        for name in ("batch_size", "num_critics", "buffer_size"):
            check_count(name, getattr(self, name))
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma: expected a value in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau: expected a value in (0, 1], got {self.tau}")
        for name in ("actor_lr", "critic_lr"):
            if not float(getattr(self, name)) > 0.0:
                raise ValueError(f"{name}: expected a learning rate > 0, got {getattr(self, name)!r}")
        check_critic_fields(self.critic_type, self.num_bins, self.v_min, self.v_max)
        self.actor_hidden = tuple(self.actor_hidden)
        self.critic_hidden = tuple(self.critic_hidden)

    @property
    def critic_group(self) -> str:
        """The group the critics actually read."""
        return self.critic_obs_group or self.actor_obs_group


def check_exploration_noise(value: float) -> None:
    """Validate a deterministic actor's ``exploration_noise`` (a finite value >= 0)."""
    if not 0.0 <= float(value) < float("inf"):
        raise ValueError(f"exploration_noise: expected a finite value >= 0, got {value!r}")


class OfflineLearner:
    """The verbs every offline learner shares (DESIGN.md, "Algorithm"), so it can also act, store and
    learn online (offline-to-online fine-tuning is a sampler and a runner, not a new class).

    - :meth:`act_inference`: the actor's deterministic in-bounds action from raw observations;
    - :meth:`act`: an exploring action: a sample of a stochastic actor, or the deterministic action
      plus Gaussian noise of ``cfg.exploration_noise`` times the half action range, clipped;
    - :meth:`process`: stores a batched env step in :attr:`replay` (allocated on first use);
    - :meth:`update`: one gradient step on the given batch, or on one drawn from :attr:`sampler`;
    - :meth:`parameters`, :meth:`policy_module`, :meth:`state_dict` / :meth:`load_state_dict`
      (the learner's own state plus the sampler's and, once filled, the replay buffer).

    The learner provides ``actor`` (with ``act_deterministic``), ``actor_group``, ``obs_norm``
    (:class:`ObsNormalization`), ``device``, ``generator``, ``cfg`` (``batch_size``, optionally
    ``buffer_size`` and ``exploration_noise``), ``_nets``, :meth:`update_step`,
    :meth:`learner_state` and :meth:`load_learner_state`.
    """

    actor: nn.Module
    actor_group: str
    obs_norm: ObsNormalization
    device: torch.device
    generator: torch.Generator
    cfg: Any
    critic_group: str
    hl: Any
    num_updates: int
    sampler: Any = None
    """Where :meth:`update` draws a batch when none is given (a :mod:`robolearn.data.sampler` sampler)."""
    _replay: ReplayBuffer | None = None

    def _setup(self, cfg: Any, obs_dims: Mapping[str, int], device: str | torch.device, seed: int, critic: bool) -> Any:
        """What every offline learner's constructor does first: config, device, observation groups
        (checked against ``obs_dims``), the seeded network init and generator, empty observation
        statistics, the update counter and, with a ``critic``, its HL-Gauss head (if configured).
        Returns ``cfg``.
        """
        self.cfg = cfg
        self.device = torch.device(device)
        self.actor_group = cfg.actor_obs_group
        groups = [self.actor_group]
        if critic:
            self.critic_group = cfg.critic_group
            groups.append(self.critic_group)
        check_groups(obs_dims, *groups)
        torch.manual_seed(seed)  # network init
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.obs_norm = ObsNormalization(obs_dims, self.device)
        self.num_updates = 0
        if critic:
            self.hl = make_hl_gauss(cfg.critic_type, cfg.num_bins, cfg.v_min, cfg.v_max, self.device)
        return cfg

    def set_obs_normalization(self, mean: Mapping[str, torch.Tensor], std: Mapping[str, torch.Tensor]) -> None:
        """Fix per-group observation statistics (the dataset's); callers keep passing raw observations."""
        self.obs_norm.set(mean, std)

    @torch.inference_mode()
    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic in-bounds actions ``[N, A]`` from raw observations."""
        return self.actor.act_deterministic(self.obs_norm(self.actor_group, obs[self.actor_group].to(self.device)))

    @torch.inference_mode()
    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Exploring in-bounds actions ``[N, A]`` (see the class docstring), drawn from :attr:`generator`."""
        x = self.obs_norm(self.actor_group, obs[self.actor_group].to(self.device))
        if not isinstance(self.actor, DeterministicActor):  # a tanh-Gaussian actor explores by sampling
            action, _ = self.actor(x, generator=self.generator)
            return action
        action = self.actor(x)
        sigma = float(getattr(self.cfg, "exploration_noise", 0.0))
        if sigma == 0.0:
            return action
        scale, offset = self.actor.action_scale, self.actor.action_offset
        noise = torch.randn(action.shape, generator=self.generator, device=self.device) * (sigma * scale)
        return torch.minimum(torch.maximum(action + noise, offset - scale), offset + scale)

    @property
    def replay(self) -> ReplayBuffer:
        """The learner's own replay buffer of online transitions (``cfg.buffer_size`` of them)."""
        if self._replay is None:
            self._replay = ReplayBuffer(int(getattr(self.cfg, "buffer_size", 1_000_000)), self.device)
        return self._replay

    def process(self, transition: Transition) -> None:
        """Store one batched env step; ``next_obs`` is the pre-reset observation of ended worlds."""
        groups = list(dict.fromkeys(net[1] for net in self._nets.values()))
        self.replay.add(
            {g: transition.obs[g] for g in groups},
            transition.action,
            transition.reward,
            {g: transition.next_obs[g] for g in groups},
            transition.terminated,
            transition.truncated,
        )

    def update(self, batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """One gradient step on ``batch`` (raw observations), or on ``cfg.batch_size`` transitions
        drawn from :attr:`sampler` when no batch is given; returns detached tensors.
        """
        if batch is None:
            if self.sampler is None:
                raise RuntimeError(
                    f"{type(self).__name__}.update: no batch given and no sampler set "
                    "(set agent.sampler to a robolearn.data.sampler sampler, or pass a batch)"
                )
            batch = self.sampler.sample(int(self.cfg.batch_size))
        return self.update_step(batch)

    def update_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One gradient step on ``batch``; each learner implements it."""
        raise NotImplementedError

    @property
    def _nets(self) -> dict[str, NetSpec]:
        raise NotImplementedError

    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor: the parameters and buffers of each network, and learned scalars
        (temperatures, Lagrange multipliers) the learner holds as tensors.
        """
        out: list[torch.Tensor] = []
        for value in vars(self).values():
            if isinstance(value, nn.Module):
                out.extend(value.parameters())
                out.extend(b for b in value.buffers() if b.is_floating_point())
            elif isinstance(value, torch.Tensor) and value.requires_grad:
                out.append(value)
        return out

    def policy_module(self) -> nn.Module:
        """The deterministic ``obs -> action`` module with the dataset statistics folded in, a CPU
        copy in eval mode.
        """
        return deployable(SquashedMean(self.actor), self.obs_norm.stats, self.actor_group)

    def learner_state(self) -> dict[str, Any]:
        """The learner's own checkpoint: networks, optimisers, statistics, generator, counters."""
        raise NotImplementedError

    def load_learner_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`learner_state`."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: :meth:`learner_state`, the sampler's own state and the
        replay buffer (once it holds anything).
        """
        state = self.learned_state_dict()
        if self.sampler is not None:
            state["sampler"] = self.sampler.state_dict()
        if self._replay is not None and len(self._replay):
            state["replay"] = self._replay.state_dict()
        return state

    def learned_state_dict(self) -> dict[str, Any]:
        """What a rollback of bad updates restores: :meth:`learner_state`, without the data (replay)
        and without the sampler's position, so the updates after a rollback see fresh batches.
        """
        return self.learner_state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; a state without ``replay`` keeps this buffer."""
        self.load_learner_state(state)
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])
        if self.sampler is not None and "sampler" in state:
            self.sampler.load_state_dict(state["sampler"])

_Out = TypeVar("_Out")

CUDA_GRAPH_MODES: frozenset[str] = frozenset({"reduce-overhead", "max-autotune"})
"""``torch.compile`` modes that replay the compiled code as CUDA graphs on CUDA."""


def check_compile_toolchain(device: torch.device | str, field: str = "algo.compile") -> None:
    """Refuse ``torch.compile`` on the CPU where no C++ compiler is on the PATH (inductor writes its
    CPU kernels in C++): said when the learner is built, not at its first update after a warm-up.
    The compiler is ``$CXX`` if set, else the first of ``g++``, ``clang++``, ``c++`` found.
    """
    if torch.device(device).type != "cpu":
        return
    wanted = os.environ.get("CXX")
    candidates = [wanted] if wanted else ["g++", "clang++", "c++"]
    if not any(shutil.which(name) for name in candidates):
        raise ValueError(
            f"{field}=true: torch.compile on the CPU needs a C++ compiler, and none of "
            f"{', '.join(candidates)} is on the PATH; install one (Debian: apt-get install g++; "
            f"scripts/setup.sh does) or set {field}=false"
        )


def compile_step(
    fn: Callable[..., _Out], mode: str, device: torch.device, fullgraph: bool = False
) -> Callable[..., _Out]:
    """``fn`` (a learner's gradient step, free of host syncs) under ``torch.compile(mode=mode)``;
    ``fullgraph`` makes a graph break an error (a step written to be captured whole).

    With a CUDA-graph mode on CUDA each call first marks a new step (the previous call's graph
    outputs are dead) and returns clones of the tensors it produced: a graph's outputs live in its
    memory pool and the next replay overwrites them, while a runner may keep the last statistics.
    Elsewhere the compiled function is called as it is.
    """
    compiled = torch.compile(fn, mode=mode, dynamic=False, fullgraph=fullgraph)
    if not (torch.device(device).type == "cuda" and mode in CUDA_GRAPH_MODES):
        return compiled

    def step(*args: Any, **kwargs: Any) -> _Out:
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(*args, **kwargs)
        return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, out)

    return step


def init_adam_state(optimizer: torch.optim.Adam, mark_static: bool = False) -> None:
    """Create the state :meth:`torch.optim.Adam.step` would create lazily (``step``, ``exp_avg``,
    ``exp_avg_sq`` per parameter, in the same places and dtypes) for every parameter that has none,
    so :func:`adam_step_` can update it and the optimiser's ``state_dict`` keeps its format.

    ``mark_static`` (for a CUDA-graph step about to be compiled) marks every state tensor a static
    address: the step mutates them in place, and a CUDA graph then updates them where they live
    instead of copying them in and out on each replay.
    """
    for group in optimizer.param_groups:
        if group["amsgrad"] or group["weight_decay"] or group["maximize"]:
            raise ValueError("adam_step_: only plain Adam (no amsgrad, weight decay or maximize) is supported")
        on_device = group["capturable"] or group["fused"]
        for p in group["params"]:
            state = optimizer.state[p]
            if not state:
                state["step"] = (
                    torch.zeros((), dtype=torch.float32, device=p.device)
                    if on_device
                    else torch.tensor(0.0, dtype=torch.float32)
                )
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if mark_static:
                for value in state.values():
                    torch._dynamo.mark_static_address(value)


def adam_step_(optimizer: torch.optim.Adam, grads: list[torch.Tensor]) -> None:
    """One :meth:`torch.optim.Adam.step` of a plain Adam with ``grads`` (one per parameter, in the
    optimiser's order) instead of the parameters' ``.grad``, written with foreach operations and the
    step counters kept as tensors, so that ``torch.compile`` traces it inside a whole gradient step
    (``Optimizer.step`` and ``backward`` break a graph). It updates the optimiser's own state as
    Adam's foreach path does, up to float rounding (the bias corrections are computed in float32
    tensors there, in Python floats by Adam): checkpoints and a later eager ``step`` continue from it.
    Call :func:`init_adam_state` once, outside the compiled region, before the first call.
    """
    expected = sum(len(group["params"]) for group in optimizer.param_groups)
    if len(grads) != expected:
        raise ValueError(f"adam_step_: expected {expected} gradients (one per parameter), got {len(grads)}")
    with torch.no_grad():
        for group in optimizer.param_groups:
            params = list(group["params"])
            group_grads, grads = grads[: len(params)], grads[len(params) :]
            beta1, beta2 = group["betas"]
            states = [optimizer.state[p] for p in params]
            steps = [s["step"] for s in states]
            exp_avgs = [s["exp_avg"] for s in states]
            exp_avg_sqs = [s["exp_avg_sq"] for s in states]
            torch._foreach_add_(steps, 1.0)
            step = steps[0]  # every parameter of a group steps together
            torch._foreach_lerp_(exp_avgs, group_grads, 1.0 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, group_grads, group_grads, 1.0 - beta2)
            bias_correction1 = 1.0 - torch.pow(beta1, step)
            bias_correction2_sqrt = (1.0 - torch.pow(beta2, step)).sqrt()
            denom = torch._foreach_sqrt(exp_avg_sqs)
            torch._foreach_div_(denom, bias_correction2_sqrt)
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(exp_avgs, denom)
            torch._foreach_mul_(update, -group["lr"] / bias_correction1)
            torch._foreach_add_(params, update)


def clip_grad_norm_list_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """:func:`torch.nn.utils.clip_grad_norm_` on a list of gradient tensors (not ``.grad`` fields),
    in place: scaled by ``min(1, max_norm / (norm + 1e-6))`` as torch's does, traceable by
    ``torch.compile``. Returns the total 2-norm before clipping.
    """
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


class ParameterHolder(nn.Module):
    """Holds a learner's modules under one root so :func:`torch.func.functional_call` can rebind all
    their parameters around any function of them: ``functional_call(holder, params, (fn, *args))``
    runs ``fn(*args)`` with the modules' parameters replaced by ``params`` (names as
    ``holder.named_parameters()`` gives them). The modules stay the learner's own objects.
    """

    def __init__(self, modules: Mapping[str, nn.Module]) -> None:
        """Hold ``modules`` (name -> module) in that order."""
        super().__init__()
        self.held = nn.ModuleDict(dict(modules))

    def forward(self, fn: Callable[..., _Out], *args: Any) -> _Out:
        """``fn(*args)``: with ``functional_call``, under the bound parameters."""
        return fn(*args)


def alpha_loss(
    log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float
) -> dict[str, torch.Tensor]:
    """Temperature loss ``mean(log_alpha * (-log_prob - target_entropy))``: alpha rises when the
    policy's entropy falls below the target. ``log_prob`` enters detached. Returns ``loss_alpha``.
    """
    return {"loss_alpha": (log_alpha * (-log_prob.detach() - target_entropy)).mean()}


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``x.mean()``, or with ``mask`` (bool or 0/1, ``x``'s shape) the mean over the entries it keeps:
    padded steps of a truncated-BPTT chunk carry no weight. No host sync (the count stays a tensor).
    """
    if mask is None:
        return x.mean()
    keep = mask.to(torch.bool)
    # where, not x * mask: a padded entry that is inf would turn into NaN when multiplied by 0.
    return torch.where(keep, x, torch.zeros_like(x)).sum() / keep.sum().clamp_min(1).to(x.dtype)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_param: float | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Squared error to ``returns``; with ``clip_param``, the pessimistic max of the unclipped error
    and that of ``old_values + clip(values - old_values, -eps, eps)`` (PPO2's value clipping).
    """
    unclipped = (values - returns).square()
    if clip_param is None:
        return masked_mean(unclipped, mask)
    clipped_values = old_values + (values - old_values).clamp(-clip_param, clip_param)
    return masked_mean(torch.maximum(unclipped, (clipped_values - returns).square()), mask)


def surrogate_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip_param: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Clipped surrogate ``mean(max(-A r, -A clip(r, 1-eps, 1+eps)))`` with ``r = exp(lp - lp_old)``.

    The max keeps the pessimistic term, so once the ratio has moved past the clip range in the
    direction the advantage favours, the gradient vanishes; moves against it stay unclipped.
    """
    ratio = torch.exp(log_probs - old_log_probs)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_param, 1.0 + clip_param)
    return masked_mean(torch.maximum(unclipped, clipped), mask)


__all__ = [
    "CUDA_GRAPH_MODES",
    "OfflineCriticConfig",
    "OfflineLearner",
    "ParameterHolder",
    "adam_step_",
    "alpha_loss",
    "check_compile_toolchain",
    "check_count",
    "clip_grad_norm_list_",
    "check_exploration_noise",
    "compile_step",
    "init_adam_state",
    "masked_mean",
    "surrogate_loss",
]
