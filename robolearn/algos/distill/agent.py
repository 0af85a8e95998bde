"""The distillation student as verbs (DESIGN.md, "Algorithm"): ``act``, ``process``, ``compute_returns``,
``update``; the runner (:mod:`robolearn.runners.distill`) owns the loop and the teacher.

The student is a Gaussian MLP on one deployable observation group, exported like PPO's actor
(running normaliser, then the mean). The teacher comes in through :meth:`Distill.attach_teacher` as
plain callables and modules (its deterministic action, and for AACD a copy of its critic), so this
package imports no other algorithm. Without a teacher the student still acts, evaluates, exports
and loads a checkpoint: what :func:`robolearn.load_policy` and ``robolearn export`` need.

The teacher's own networks never receive a gradient: the action labels are computed without one,
and the critic is a copy, frozen (``requires_grad=False``) unless ``finetune_critic`` fits it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from robolearn.algos.common import surrogate_loss
from robolearn.algos.distill.config import DistillConfig
from robolearn.algos.distill.losses import (
    gae,
    imitation_loss,
    q_actor_loss,
    scheduled,
    value_loss,
)
from robolearn.nn import MLP, EmpiricalNormalizer
from robolearn.nn.distributions import DiagGaussian
from robolearn.nn.policy import deployable
from robolearn.types import Batch, Transition

TeacherAct = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]
"""The teacher's deterministic action ``[N, A]`` for an observation dict (it reads its own groups)."""
CRITIC_KINDS: tuple[str, ...] = ("value", "q")
"""A teacher critic is a state value ``V(obs[group]) -> [N]`` (PPO) or an ensemble
``Q(obs[group], action) -> [E, N]`` (SAC)."""


class Distill:
    """A student that imitates (DAgger) or is taught by the critic of (AACD) a privileged teacher."""

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: DistillConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> None:
        """Build the student (network init follows the global seed the registry sets).

        Args:
            obs_dims: feature size of each observation group (``BatchedEnv.obs_dims``).
            action_dim: action size A.
            cfg: hyper-parameters (defaults if ``None``).
            action_low: lower action bounds (a Q teacher is queried inside them).
            action_high: upper action bounds.
            device: where the networks, rollouts and updates live.
            seed: unused beyond the registry's global seeding; ``cfg.seed`` seeds the generator.
        """
        self.cfg = cfg = cfg if cfg is not None else DistillConfig()
        self.device = torch.device(device)
        self.group = cfg.student_obs_group
        self.actor_group = self.group
        """The group the deployable policy reads (the name export and the other learners use)."""
        if self.group not in obs_dims:
            raise ValueError(f"student_obs_group: group {self.group!r} is not among the observation groups {sorted(obs_dims)}")
        self.action_dim = int(action_dim)
        dim = int(obs_dims[self.group])
        self.actor = MLP(dim, self.action_dim, cfg.actor_hidden, cfg.activation, output_gain=0.01).to(self.device)
        self.dist = DiagGaussian(self.action_dim, cfg.init_noise_std).to(self.device)
        self.normalizer: nn.Module = (EmpiricalNormalizer(dim) if cfg.normalize_obs else nn.Identity()).to(self.device)
        self.action_low = torch.as_tensor(action_low, dtype=torch.float32, device=self.device).expand(self.action_dim)
        self.action_high = torch.as_tensor(action_high, dtype=torch.float32, device=self.device).expand(self.action_dim)
        self._trained = [*self.actor.parameters(), *self.dist.parameters()]
        self.optimizer = torch.optim.Adam(self._trained, lr=cfg.learning_rate)
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.iteration = 0
        """Updates taken: the position on the beta and behaviour-cloning schedules."""
        self.teacher_act: TeacherAct | None = None
        self.teacher_reset: Callable[[torch.Tensor], None] | None = None
        self.critic: nn.Module | None = None
        """AACD: the copy of the teacher's critic (frozen unless ``finetune_critic``)."""
        self.critic_kind: str | None = None
        self.critic_group: str | None = None
        self.critic_optimizer: torch.optim.Optimizer | None = None
        self._rollout: dict[str, list[torch.Tensor]] = {}
        self._pending: dict[str, torch.Tensor] | None = None
        self._gap = torch.zeros((), device=self.device)
        self._gap_count = 0
        # DAgger's labelled states (allocated on the first act, when the number of worlds is known).
        self._buffer: dict[str, torch.Tensor] = {}
        self._buffer_len = 0
        self._buffer_pos = 0
        self._new_rows = 0  # labelled states added since the last update

    # -- the teacher ---------------------------------------------------------------------------
    def attach_teacher(
        self,
        act: TeacherAct,
        critic: nn.Module | None = None,
        critic_kind: str | None = None,
        critic_group: str | None = None,
        reset: Callable[[torch.Tensor], None] | None = None,
    ) -> None:
        """Give the student its teacher: the deterministic action, and for AACD a copy of its critic.

        ``reset(done[N])`` (a recurrent teacher's) is called after every step with the worlds whose
        episode ended, so the teacher's hidden state restarts with their next episode.

        ``critic`` is owned by the student from here on (checkpointed with it); frozen unless
        ``cfg.finetune_critic``, which only a state-value critic allows.

        Raises:
            ValueError: AACD without a critic, an unknown critic kind, or fine-tuning a Q critic.
        """
        self.teacher_act, self.teacher_reset = act, reset
        if self.cfg.mode != "aacd":
            return
        if critic is None or critic_kind not in CRITIC_KINDS or critic_group is None:
            raise ValueError(
                f"mode=aacd: the teacher must bring a critic (a state value or a Q ensemble) and the group it reads; "
                f"got critic_kind={critic_kind!r}, critic_group={critic_group!r}"
            )
        if self.cfg.finetune_critic and critic_kind != "value":
            raise ValueError("finetune_critic: only a state-value teacher critic (PPO) can be fine-tuned; a Q "
                             "teacher's critic stays frozen (set algo.finetune_critic=false)")
        self.critic, self.critic_kind, self.critic_group = critic.to(self.device), critic_kind, critic_group
        self.critic.requires_grad_(self.cfg.finetune_critic)
        if self.cfg.finetune_critic:
            self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=self.cfg.learning_rate)

    @property
    def beta(self) -> float:
        """The probability of executing the teacher's action in the current rollout (DAgger)."""
        cfg = self.cfg
        return scheduled(cfg.beta_schedule, self.iteration, cfg.beta_start, cfg.beta_end, cfg.beta_iterations,
                         cfg.beta_rate)

    @property
    def bc_coef(self) -> float:
        """The weight of the behaviour-cloning term in the current update (AACD)."""
        cfg = self.cfg
        return scheduled("linear", self.iteration, cfg.bc_coef, cfg.bc_coef_end, cfg.bc_iterations)

    # -- acting --------------------------------------------------------------------------------
    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The executed actions ``[N, A]``; records the student's input and the teacher's label.

        DAgger: the teacher's action with probability beta per world, else the student's (its mean
        under ``mse``, a sample under ``nll``). AACD: a sample of the student's Gaussian. Without a
        teacher (a loaded student), a sample, recording nothing.
        """
        x = obs[self.group].to(self.device)
        with torch.no_grad():
            if self.teacher_act is not None and self.cfg.normalize_obs:
                self.normalizer.update(x)
            x_in = self.normalizer(x)
            mean = self.actor(x_in)
            std = self.dist.std(mean)
            sample = self.dist.sample(mean, std, self.generator)
            if self.teacher_act is None:
                return sample
            teacher = self.teacher_act(obs).to(self.device).clone()
            self._gap = self._gap + (mean - teacher).square().mean()
            self._gap_count += 1
            if self.cfg.mode == "dagger":
                student = mean if self.cfg.imitation_loss == "mse" else sample
                take_teacher = torch.rand((x.shape[0], 1), generator=self.generator, device=self.device) < self.beta
                self._store(x, teacher)
                self._pending = {}
                return torch.where(take_teacher, teacher, student)
            self._pending = {
                "input": x_in.clone(),
                "actions": sample,
                "log_probs": self.dist.log_prob(mean, std, sample),
                "teacher": teacher,
                "critic_obs": obs[self.critic_group].to(self.device).clone(),
            }
            if self.critic_kind == "value":
                self._pending["values"] = self._value(obs)
            return sample

    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The deterministic action (the student's mean) for evaluation and deployment; records nothing."""
        with torch.no_grad():
            return self.actor(self.normalizer(obs[self.group].to(self.device)))

    def _value(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        assert self.critic is not None and self.critic_group is not None
        with torch.no_grad():
            return self.critic(obs[self.critic_group].to(self.device)).reshape(-1)

    def _store(self, x: torch.Tensor, teacher: torch.Tensor) -> None:
        """Append labelled states to DAgger's buffer (a ring of ``buffer_size``, or one rollout)."""
        n = x.shape[0]
        if not self._buffer:
            capacity = max(self.cfg.buffer_size, self.cfg.num_steps * n)
            self._buffer = {
                "obs": torch.zeros((capacity, x.shape[1]), device=self.device),
                "teacher": torch.zeros((capacity, self.action_dim), device=self.device),
            }
        capacity = self._buffer["obs"].shape[0]
        rows = (self._buffer_pos + torch.arange(n, device=self.device)) % capacity
        self._buffer["obs"][rows] = x
        self._buffer["teacher"][rows] = teacher
        self._buffer_pos = (self._buffer_pos + n) % capacity
        self._buffer_len = min(self._buffer_len + n, capacity)
        self._new_rows += n

    # -- data ----------------------------------------------------------------------------------
    def process(self, transition: Transition) -> None:
        """Record the step that followed the last :meth:`act` (AACD: rewards, dones, bootstrap values).

        ``next_obs`` is the env's ``info["final_obs"]`` (the pre-reset observation of ended worlds),
        so a time-out bootstraps from its true final state.
        """
        if self._pending is None:
            raise RuntimeError("process() needs a preceding act() with a teacher attached")
        pending, self._pending = self._pending, None
        if self.teacher_reset is not None:
            self.teacher_reset(transition.terminated | transition.truncated)
        if self.cfg.mode == "dagger":
            return
        pending["rewards"] = transition.reward.to(self.device).float()
        pending["terminated"] = transition.terminated.to(self.device)
        pending["done"] = (transition.terminated | transition.truncated).to(self.device)
        if self.critic_kind == "value":
            pending["next_values"] = self._value(transition.next_obs)
        for key, value in pending.items():
            self._rollout.setdefault(key, []).append(value)

    def compute_returns(self, last_obs: Mapping[str, torch.Tensor] | None = None) -> None:
        """Advantages and returns of the rollout from the (teacher's) state-value critic.

        Nothing to do for DAgger or a Q teacher. Every step's bootstrap value was taken from its
        own next observation in :meth:`process`, so ``last_obs`` is not needed (kept for the
        on-policy runner's call).
        """
        if self.cfg.mode != "aacd" or self.critic_kind != "value" or not self._rollout:
            return
        r = {k: torch.stack(v) for k, v in self._rollout.items() if k in ("rewards", "values", "next_values",
                                                                      "terminated", "done")}
        advantages, returns = gae(r["rewards"], r["values"], r["next_values"], r["terminated"], r["done"],
                                  self.cfg.gamma, self.cfg.lam)
        self._rollout["advantages"] = [(advantages - advantages.mean()) / (advantages.std() + 1e-8)]
        self._rollout["returns"] = [returns]

    # -- learning ------------------------------------------------------------------------------
    def update(self, batch: Batch | None = None) -> dict[str, torch.Tensor]:
        """``num_epochs x num_minibatches`` gradient steps on the rollout (DAgger: on the labelled
        buffer); returns mean statistics as 0-d tensors and advances the schedules.

        The student learns from its own rollouts and its teacher's labels: an external ``batch`` is refused.
        """
        if batch is not None:
            raise ValueError("Distill.update: the student learns from its own rollouts labelled by its teacher; "
                             "got an external batch")
        if self.teacher_act is None:
            raise RuntimeError("Distill.update: no teacher attached (attach_teacher)")
        stats = self._update_dagger() if self.cfg.mode == "dagger" else self._update_aacd()
        stats["action_gap"] = (self._gap / max(self._gap_count, 1)).sqrt()
        self._gap, self._gap_count = torch.zeros((), device=self.device), 0
        stats["action_std"] = self.dist.std(torch.zeros(self.action_dim, device=self.device)).detach().mean()
        self.iteration += 1
        return stats

    def _minibatches(self, size: int, rollout: int) -> list[torch.Tensor]:
        """Index sets of ``num_epochs`` passes of ``rollout`` samples drawn without replacement from
        ``size`` rows (the rollout itself, or DAgger's larger aggregated buffer: the cost of an
        update stays that of one rollout however large the buffer grows).
        """
        cfg, out = self.cfg, []
        rollout = min(size, max(rollout, 1))
        per = max(rollout // cfg.num_minibatches, 1)
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(size, generator=self.generator, device=self.device)[:rollout]
            out.extend(perm[i * per:(i + 1) * per] for i in range(cfg.num_minibatches))
        return out

    def _step(self, loss: torch.Tensor, params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        optimizer.step()

    def _update_dagger(self) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        if self._buffer_len == 0:
            raise RuntimeError("update() before any act()")
        total, count = torch.zeros((), device=self.device), 0
        obs, labels = self._buffer["obs"][: self._buffer_len], self._buffer["teacher"][: self._buffer_len]
        for idx in self._minibatches(self._buffer_len, self._new_rows):
            mean = self.actor(self.normalizer(obs[idx]))
            loss = imitation_loss(mean, self.dist.std(mean), labels[idx], cfg.imitation_loss)
            self._step(loss, self._trained, self.optimizer)
            total, count = total + loss.detach(), count + 1
        stats = {"loss_imitation": total / count, "beta": torch.tensor(self.beta, device=self.device),
                 "buffer_size": torch.tensor(float(self._buffer_len), device=self.device)}
        self._new_rows = 0
        if not cfg.buffer_size:
            self._buffer_len, self._buffer_pos = 0, 0  # the latest rollout only
        return stats

    def _update_aacd(self) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        if not self._rollout:
            raise RuntimeError("update() before any rollout")
        if self.critic_kind == "value" and "advantages" not in self._rollout:
            self.compute_returns()
        flat = {k: torch.cat(v) if k in ("advantages", "returns") else torch.stack(v).flatten(0, 1)
                for k, v in self._rollout.items()}
        if "advantages" in flat:
            flat["advantages"] = flat["advantages"].reshape(-1)
            flat["returns"] = flat["returns"].reshape(-1)
        self._rollout = {}
        size = flat["input"].shape[0]
        bc_coef = self.bc_coef
        sums: dict[str, torch.Tensor] = {}
        count = 0
        for idx in self._minibatches(size, size):
            mean = self.actor(flat["input"][idx])
            std = self.dist.std(mean)
            losses = {"loss_bc": bc_coef * imitation_loss(mean, std, flat["teacher"][idx], cfg.imitation_loss)}
            if self.critic_kind == "value":
                log_probs = self.dist.log_prob(mean, std, flat["actions"][idx])
                losses["loss_policy"] = surrogate_loss(log_probs, flat["log_probs"][idx], flat["advantages"][idx],
                                                       cfg.clip_param)
                losses["loss_entropy"] = -cfg.entropy_coef * self.dist.entropy(std).mean()
            else:
                assert self.critic is not None
                inside = torch.maximum(torch.minimum(mean, self.action_high), self.action_low)
                q = self.critic(flat["critic_obs"][idx], inside).min(dim=0).values
                losses["loss_q"] = cfg.q_coef * q_actor_loss(q)
            self._step(sum(losses.values()), self._trained, self.optimizer)
            if cfg.finetune_critic and self.critic is not None and self.critic_optimizer is not None:
                values = self.critic(flat["critic_obs"][idx]).reshape(-1)
                losses["loss_value"] = cfg.value_loss_coef * value_loss(values, flat["returns"][idx])
                self._step(losses["loss_value"], list(self.critic.parameters()), self.critic_optimizer)
            for k, v in losses.items():
                sums[k] = sums.get(k, 0.0) + v.detach()
            count += 1
        stats = {k: v / count for k, v in sums.items()}
        stats["bc_coef"] = torch.tensor(bc_coef, device=self.device)
        return stats

    # -- what the runners and export read --------------------------------------------------------
    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor: the student, its normaliser's statistics, a fine-tuned critic."""
        params = [*self._trained, *self.normalizer.buffers()]
        if self.critic is not None and self.cfg.finetune_critic:
            params.extend(self.critic.parameters())
        return params

    def policy_module(self) -> nn.Module:
        """The deterministic ``obs -> action`` module (normaliser, then the mean), a CPU copy in eval mode."""
        return deployable(nn.Sequential(self.normalizer, self.actor))

    # -- checkpoints -----------------------------------------------------------------------------
    def learned_state_dict(self) -> dict[str, Any]:
        """:meth:`state_dict` without DAgger's buffer (what the divergence guard restores)."""
        state: dict[str, Any] = {
            "actor": self.actor.state_dict(),
            "dist": self.dist.state_dict(),
            "normalizer": self.normalizer.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "iteration": self.iteration,
        }
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
            if self.critic_optimizer is not None:
                state["critic_optimizer"] = self.critic_optimizer.state_dict()
        return state

    def state_dict(self) -> dict[str, Any]:
        """The student, its optimiser, generator and schedule position, DAgger's buffer, a critic copy."""
        state = self.learned_state_dict()
        if self._buffer:
            state["buffer"] = {k: v[: self._buffer_len].clone() for k, v in self._buffer.items()}
            state["buffer_pos"] = self._buffer_pos
            state["buffer_capacity"] = int(self._buffer["obs"].shape[0])
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; a student without a teacher (export, ``load_policy``) skips the critic."""
        self.actor.load_state_dict(state["actor"])
        self.dist.load_state_dict(state["dist"])
        self.normalizer.load_state_dict(state["normalizer"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.iteration = int(state["iteration"])
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
            if self.critic_optimizer is not None and "critic_optimizer" in state:
                self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        if "buffer" in state:
            capacity = int(state["buffer_capacity"])
            stored = state["buffer"]
            self._buffer = {k: torch.zeros((capacity, *v.shape[1:]), device=self.device) for k, v in stored.items()}
            self._buffer_len = int(stored["obs"].shape[0])
            for k, v in stored.items():
                self._buffer[k][: self._buffer_len] = v.to(self.device)
            self._buffer_pos = int(state["buffer_pos"])

