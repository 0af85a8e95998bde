"""robolearn's offline learners against CORL-style single-file references (issue 6).

Gradient steps per second of BC, TD3+BC, IQL, CQL and Cal-QL at batch 256 with 256x2 MLPs
(HalfCheetah-like: 17-dim observations, 6-dim actions in [-1, 1]). robolearn's agents
(``robolearn.algos.{bc,td3bc,iql,cql}``) run against references written the way CORL's
single-file implementations are (``algorithms/offline/{any_percent_bc,td3_bc,iql,cql}.py`` and
``algorithms/finetune/cal_ql.py`` of tinkoff-ai/CORL), re-typed here:

* two separate critic modules (``Critic`` / ``TwinQ`` / ``FullyConnectedQFunction``), each called on
  its own, combined with ``torch.min``; CQL calls each critic once per action kind (data, uniform,
  pi(s), pi(s')) on ``repeat_interleave``-d observations;
* a separate ``backward`` and optimiser step per loss (IQL: V, Q, actor; CQL: alpha, actor, critics,
  with ``retain_graph=True``), the actor loss back-propagating into the critic's parameters too;
* ``torch.distributions`` for the Gaussian policies (``TransformedDistribution`` with ``TanhTransform``);
* Polyak updates in a Python loop, ``target.data.copy_((1 - tau) * target.data + tau * source.data)``;
* a ``log_dict`` of ``.item()`` values every step (what CORL hands to ``wandb.log``).

The algorithm maths is robolearn's (a comparison of speed, not of algorithms): CORL's defaults
with robolearn's configs set to 256x2 everywhere (CQL/Cal-QL default to 256x3 in both; CORL's IQL
decays the actor learning rate over 1M steps, so robolearn's ``actor_lr_decay_steps`` is set to
that), and the references use robolearn's parameterisation of the tanh-Gaussian log-std
(``tanh``-rescaled into [-5, 2]) where CORL's IQL has a state-independent log-std and CORL's CQL
learnable scalars with a clamp. A sanity check copies robolearn's initial weights into the
reference and compares the first step's losses (equal where no sampling is involved).

Timing: both implementations in one process, on the same 64 pre-generated batches (cycled), no
replay sampling. After a warm-up that also estimates each rate, every round times ``n`` steps of
each implementation (``n`` chosen so a block lasts about ``--block-seconds``), the order rotating
each round; a rate is the median over rounds, the ratio the median of the per-round ratios.
Repeated for each ``--threads`` value (``torch.set_num_threads``). Denormals are flushed for both.
A torch.profiler pass (1 thread) then gives the GEMM time per step of each implementation.

    python benchmarks/offline_vs_corl.py [--learners bc td3bc iql cql calql] [--threads 1 2]
        [--rounds 7] [--block-seconds 1.5] [--no-profile] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Distribution, Normal, TanhTransform, TransformedDistribution
from torch.optim.lr_scheduler import CosineAnnealingLR

from robolearn.algos.bc import BC, BCConfig
from robolearn.algos.cql import CQL, CalQLConfig, CQLConfig
from robolearn.algos.iql import IQL, IQLConfig
from robolearn.algos.td3bc import TD3BC, TD3BCConfig
from robolearn.types import Batch

OBS_DIM = 17
ACT_DIM = 6
BATCH = 256
HIDDEN = 256
NUM_BATCHES = 64
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # robolearn's TanhGaussianActor range
EXP_ADV_MAX = 100.0
LEARNERS = ("bc", "td3bc", "iql", "cql", "calql")
GEMM_OPS = frozenset(
    {"aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation"}
)
"""Matrix-multiply kernels as the CPU profiler names them (Linear forward/backward, vmapped bmm)."""

TensorBatch = list[torch.Tensor]
"""CORL's batch: ``[states, actions, rewards[B, 1], next_states, dones[B, 1]]`` (+ ``mc_returns[B, 1]``)."""


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load() -> tuple[float, float, float]:
    return os.getloadavg()


# =============================================================================================
# CORL-style references
# =============================================================================================
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """CORL's Polyak update: one Python-level copy per parameter."""
    for target_param, source_param in zip(target.parameters(), source.parameters(), strict=True):
        target_param.data.copy_((1 - tau) * target_param.data + tau * source_param.data)


def extend_and_repeat(tensor: torch.Tensor, dim: int, repeat: int) -> torch.Tensor:
    """CORL ``cql.py``: insert ``dim`` and repeat each row ``repeat`` times along it."""
    return tensor.unsqueeze(dim).repeat_interleave(repeat, dim=dim)


# -- BC / TD3+BC (any_percent_bc.py, td3_bc.py) ----------------------------------------------
class Actor(nn.Module):
    """``max_action * tanh(MLP(s))`` with two hidden layers of 256."""

    def __init__(self, state_dim: int, action_dim: int, max_action: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, action_dim),
            nn.Tanh(),
        )
        self.max_action = max_action

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """Actions ``[B, A]``."""
        return self.max_action * self.net(state)


class Critic(nn.Module):
    """``Q(s, a)`` ``[B, 1]`` with two hidden layers of 256."""

    def __init__(self, state_dim: int, action_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim + action_dim, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, 1),
        )

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, 1]``."""
        sa = torch.cat([state, action], 1)
        return self.net(sa)


class CorlBC:
    """``any_percent_bc.py``'s ``BC`` trainer (MSE to the dataset actions)."""

    def __init__(self, actor: nn.Module, actor_optimizer: torch.optim.Optimizer) -> None:
        self.actor = actor
        self.actor_optimizer = actor_optimizer
        self.total_it = 0

    def train(self, batch: TensorBatch) -> dict[str, float]:
        """One gradient step; returns the ``.item()`` log dict."""
        log_dict = {}
        self.total_it += 1
        state, action, _, _, _ = batch[:5]
        pi = self.actor(state)
        actor_loss = F.mse_loss(pi, action)
        log_dict["actor_loss"] = actor_loss.item()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()
        return log_dict


class CorlTD3BC:
    """``td3_bc.py``'s ``TD3_BC`` trainer: two critic modules with their own optimisers."""

    def __init__(
        self,
        max_action: float,
        actor: nn.Module,
        actor_optimizer: torch.optim.Optimizer,
        critic_1: nn.Module,
        critic_1_optimizer: torch.optim.Optimizer,
        critic_2: nn.Module,
        critic_2_optimizer: torch.optim.Optimizer,
        discount: float = 0.99,
        tau: float = 0.005,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        policy_freq: int = 2,
        alpha: float = 2.5,
    ) -> None:
        self.actor = actor
        self.actor_target = copy.deepcopy(actor)
        self.actor_optimizer = actor_optimizer
        self.critic_1 = critic_1
        self.critic_1_target = copy.deepcopy(critic_1)
        self.critic_1_optimizer = critic_1_optimizer
        self.critic_2 = critic_2
        self.critic_2_target = copy.deepcopy(critic_2)
        self.critic_2_optimizer = critic_2_optimizer
        self.max_action = max_action
        self.discount = discount
        self.tau = tau
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip
        self.policy_freq = policy_freq
        self.alpha = alpha
        self.total_it = 0

    def train(self, batch: TensorBatch) -> dict[str, float]:
        """One critic step; the actor step and the target updates every ``policy_freq`` steps."""
        log_dict = {}
        self.total_it += 1
        state, action, reward, next_state, done = batch[:5]
        not_done = 1 - done

        with torch.no_grad():
            noise = (torch.randn_like(action) * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
            next_action = (self.actor_target(next_state) + noise).clamp(-self.max_action, self.max_action)
            target_q1 = self.critic_1_target(next_state, next_action)
            target_q2 = self.critic_2_target(next_state, next_action)
            target_q = torch.min(target_q1, target_q2)
            target_q = reward + not_done * self.discount * target_q

        current_q1 = self.critic_1(state, action)
        current_q2 = self.critic_2(state, action)
        critic_loss = F.mse_loss(current_q1, target_q) + F.mse_loss(current_q2, target_q)
        log_dict["critic_loss"] = critic_loss.item()
        self.critic_1_optimizer.zero_grad()
        self.critic_2_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_1_optimizer.step()
        self.critic_2_optimizer.step()

        if self.total_it % self.policy_freq == 0:
            pi = self.actor(state)
            q = self.critic_1(state, pi)
            lmbda = self.alpha / q.abs().mean().detach()
            actor_loss = -lmbda * q.mean() + F.mse_loss(pi, action)
            log_dict["actor_loss"] = actor_loss.item()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            soft_update(self.critic_1_target, self.critic_1, self.tau)
            soft_update(self.critic_2_target, self.critic_2, self.tau)
            soft_update(self.actor_target, self.actor, self.tau)
        return log_dict


# -- IQL (iql.py) ------------------------------------------------------------------------------
def asymmetric_l2_loss(u: torch.Tensor, tau: float) -> torch.Tensor:
    """IQL's expectile loss ``mean(|tau - 1[u < 0]| * u^2)``."""
    return torch.mean(torch.abs(tau - (u < 0).float()) * u**2)


class Squeeze(nn.Module):
    """Drop a trailing singleton dimension."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x.squeeze(dim)``."""
        return x.squeeze(dim=self.dim)


class MLP(nn.Module):
    """CORL ``iql.py``'s MLP: ``Linear``/``ReLU`` pairs, a linear head, optionally squeezed."""

    def __init__(self, dims: Sequence[int], squeeze_output: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(len(dims) - 2):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            layers.append(nn.ReLU())
        layers.append(nn.Linear(dims[-2], dims[-1]))
        if squeeze_output:
            layers.append(Squeeze(-1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layers."""
        return self.net(x)


def _bounded_log_std(raw: torch.Tensor) -> torch.Tensor:
    # robolearn's TanhGaussianActor parameterisation (see the module docstring).
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)


class GaussianPolicy(nn.Module):
    """IQL's policy: ``forward`` returns a distribution the trainer scores dataset actions with.

    robolearn's IQL actor is a tanh-squashed Gaussian with state-dependent log-std, so the
    distribution is ``TransformedDistribution(Normal, TanhTransform)`` over ``2A`` network outputs.
    """

    def __init__(self, state_dim: int, act_dim: int, max_action: float) -> None:
        super().__init__()
        self.net = MLP([state_dim, HIDDEN, HIDDEN, 2 * act_dim])
        self.act_dim = act_dim
        self.max_action = max_action

    def forward(self, obs: torch.Tensor) -> Distribution:
        """The action distribution at ``obs``."""
        mean, raw = torch.split(self.net(obs), self.act_dim, dim=-1)
        std = torch.exp(_bounded_log_std(raw))
        return TransformedDistribution(Normal(mean, std), TanhTransform(cache_size=1))


class TwinQ(nn.Module):
    """Two Q MLPs in one module; ``forward`` is their ``torch.min``."""

    def __init__(self, state_dim: int, action_dim: int) -> None:
        super().__init__()
        dims = [state_dim + action_dim, HIDDEN, HIDDEN, 1]
        self.q1 = MLP(dims, squeeze_output=True)
        self.q2 = MLP(dims, squeeze_output=True)

    def both(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both Q-values ``[B]``."""
        sa = torch.cat([state, action], 1)
        return self.q1(sa), self.q2(sa)

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``min(Q1, Q2)`` ``[B]``."""
        return torch.min(*self.both(state, action))


class ValueFunction(nn.Module):
    """``V(s)`` ``[B]``."""

    def __init__(self, state_dim: int) -> None:
        super().__init__()
        self.v = MLP([state_dim, HIDDEN, HIDDEN, 1], squeeze_output=True)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """Values ``[B]``."""
        return self.v(state)


class CorlIQL:
    """``iql.py``'s ``ImplicitQLearning``: V, Q and the actor stepped one after the other."""

    def __init__(
        self,
        actor: nn.Module,
        actor_optimizer: torch.optim.Optimizer,
        q_network: nn.Module,
        q_optimizer: torch.optim.Optimizer,
        v_network: nn.Module,
        v_optimizer: torch.optim.Optimizer,
        iql_tau: float = 0.7,
        beta: float = 3.0,
        max_steps: int = 1_000_000,
        discount: float = 0.99,
        tau: float = 0.005,
    ) -> None:
        self.qf = q_network
        self.q_target = copy.deepcopy(self.qf).requires_grad_(False)
        self.vf = v_network
        self.actor = actor
        self.v_optimizer = v_optimizer
        self.q_optimizer = q_optimizer
        self.actor_optimizer = actor_optimizer
        self.actor_lr_schedule = CosineAnnealingLR(self.actor_optimizer, max_steps)
        self.iql_tau = iql_tau
        self.beta = beta
        self.discount = discount
        self.tau = tau
        self.total_it = 0

    def _update_v(
        self, observations: torch.Tensor, actions: torch.Tensor, log_dict: dict[str, float]
    ) -> torch.Tensor:
        with torch.no_grad():
            target_q = self.q_target(observations, actions)
        v = self.vf(observations)
        adv = target_q - v
        v_loss = asymmetric_l2_loss(adv, self.iql_tau)
        log_dict["value_loss"] = v_loss.item()
        self.v_optimizer.zero_grad()
        v_loss.backward()
        self.v_optimizer.step()
        return adv

    def _update_q(
        self,
        next_v: torch.Tensor,
        observations: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        terminals: torch.Tensor,
        log_dict: dict[str, float],
    ) -> None:
        targets = rewards + (1.0 - terminals.float()) * self.discount * next_v.detach()
        qs = self.qf.both(observations, actions)
        q_loss = sum(F.mse_loss(q, targets) for q in qs) / len(qs)
        log_dict["q_loss"] = q_loss.item()
        self.q_optimizer.zero_grad()
        q_loss.backward()
        self.q_optimizer.step()
        soft_update(self.q_target, self.qf, self.tau)

    def _update_policy(
        self,
        adv: torch.Tensor,
        observations: torch.Tensor,
        actions: torch.Tensor,
        log_dict: dict[str, float],
    ) -> None:
        exp_adv = torch.exp(self.beta * adv.detach()).clamp(max=EXP_ADV_MAX)
        policy_out = self.actor(observations)
        if isinstance(policy_out, Distribution):
            # robolearn keeps dataset actions 1e-6 inside the bounds before atanh; so do we.
            bc_losses = -policy_out.log_prob(actions.clamp(-1.0 + 1e-6, 1.0 - 1e-6)).sum(-1, keepdim=False)
        elif torch.is_tensor(policy_out):
            bc_losses = torch.sum((policy_out - actions) ** 2, dim=1)
        else:
            raise NotImplementedError
        policy_loss = torch.mean(exp_adv * bc_losses)
        log_dict["actor_loss"] = policy_loss.item()
        self.actor_optimizer.zero_grad()
        policy_loss.backward()
        self.actor_optimizer.step()
        self.actor_lr_schedule.step()

    def train(self, batch: TensorBatch) -> dict[str, float]:
        """One step of V, then Q (and its target), then the actor."""
        self.total_it += 1
        observations, actions, rewards, next_observations, dones = batch[:5]
        log_dict: dict[str, float] = {}
        with torch.no_grad():
            next_v = self.vf(next_observations)
        adv = self._update_v(observations, actions, log_dict)
        rewards = rewards.squeeze(dim=-1)
        dones = dones.squeeze(dim=-1)
        self._update_q(next_v, observations, actions, rewards, dones, log_dict)
        self._update_policy(adv, observations, actions, log_dict)
        return log_dict


# -- CQL / Cal-QL (cql.py, finetune/cal_ql.py) -------------------------------------------------
def init_module_weights(module: nn.Sequential, orthogonal_init: bool = False) -> None:
    """CORL's init: hidden layers orthogonal (gain sqrt 2) when asked; the last layer small."""
    if orthogonal_init:
        for submodule in module[:-1]:
            if isinstance(submodule, nn.Linear):
                nn.init.orthogonal_(submodule.weight, gain=math.sqrt(2))
                nn.init.constant_(submodule.bias, 0.0)
    if orthogonal_init:
        nn.init.orthogonal_(module[-1].weight, gain=1e-2)
    else:
        nn.init.xavier_uniform_(module[-1].weight, gain=1e-2)
    nn.init.constant_(module[-1].bias, 0.0)


class ReparameterizedTanhGaussian(nn.Module):
    """Sample and score through ``TransformedDistribution(Normal, TanhTransform)``."""

    def log_prob(self, mean: torch.Tensor, log_std: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
        """Log-density of ``sample`` summed over action dims."""
        std = torch.exp(log_std)
        action_distribution = TransformedDistribution(Normal(mean, std), TanhTransform(cache_size=1))
        return torch.sum(action_distribution.log_prob(sample), dim=-1)

    def forward(
        self, mean: torch.Tensor, log_std: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample (or ``tanh(mean)``) and its log-density."""
        std = torch.exp(log_std)
        action_distribution = TransformedDistribution(Normal(mean, std), TanhTransform(cache_size=1))
        if deterministic:
            action_sample = torch.tanh(mean)
        else:
            action_sample = action_distribution.rsample()
        log_prob = torch.sum(action_distribution.log_prob(action_sample), dim=-1)
        return action_sample, log_prob


class TanhGaussianPolicy(nn.Module):
    """CORL ``cql.py``'s policy, two hidden layers; ``repeat`` draws several actions per state."""

    def __init__(self, state_dim: int, action_dim: int, max_action: float) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.max_action = max_action
        self.base_network = nn.Sequential(
            nn.Linear(state_dim, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, 2 * action_dim),
        )
        init_module_weights(self.base_network)
        self.tanh_gaussian = ReparameterizedTanhGaussian()

    def log_prob(self, observations: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of given actions."""
        if actions.ndim == 3:
            observations = extend_and_repeat(observations, 1, actions.shape[1])
        mean, raw = torch.split(self.base_network(observations), self.action_dim, dim=-1)
        return self.tanh_gaussian.log_prob(mean, _bounded_log_std(raw), actions)

    def forward(
        self, observations: torch.Tensor, deterministic: bool = False, repeat: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(max_action * actions, log_probs)``; ``[B, repeat, A]`` with ``repeat``."""
        if repeat is not None:
            observations = extend_and_repeat(observations, 1, repeat)
        mean, raw = torch.split(self.base_network(observations), self.action_dim, dim=-1)
        actions, log_probs = self.tanh_gaussian(mean, _bounded_log_std(raw), deterministic)
        return self.max_action * actions, log_probs


class FullyConnectedQFunction(nn.Module):
    """CORL ``cql.py``'s critic; ``[B, N, A]`` actions are scored against repeated observations."""

    def __init__(self, observation_dim: int, action_dim: int, orthogonal_init: bool = True) -> None:
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(observation_dim + action_dim, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, 1),
        )
        init_module_weights(self.network, orthogonal_init)

    def forward(self, observations: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B]`` (``[B, N]`` for ``[B, N, A]`` actions)."""
        multiple_actions = False
        batch_size = observations.shape[0]
        if actions.ndim == 3 and observations.ndim == 2:
            multiple_actions = True
            observations = extend_and_repeat(observations, 1, actions.shape[1]).reshape(
                -1, observations.shape[-1]
            )
            actions = actions.reshape(-1, actions.shape[-1])
        input_tensor = torch.cat([observations, actions], dim=-1)
        q_values = torch.squeeze(self.network(input_tensor), dim=-1)
        if multiple_actions:
            q_values = q_values.reshape(batch_size, -1)
        return q_values


class Scalar(nn.Module):
    """A learnable scalar (``log_alpha``, ``log_alpha_prime``)."""

    def __init__(self, init_value: float) -> None:
        super().__init__()
        self.constant = nn.Parameter(torch.tensor(init_value, dtype=torch.float32))

    def forward(self) -> nn.Parameter:
        """The scalar."""
        return self.constant


class CorlCQL:
    """``cql.py``'s ``ContinuousCQL`` (Lagrange off, no max-backup, as its locomotion configs);
    ``calibrated`` adds ``cal_ql.py``'s lower bound ``max(Q, mc_return)`` on the policy actions.
    """

    def __init__(
        self,
        critic_1: nn.Module,
        critic_1_optimizer: torch.optim.Optimizer,
        critic_2: nn.Module,
        critic_2_optimizer: torch.optim.Optimizer,
        actor: nn.Module,
        actor_optimizer: torch.optim.Optimizer,
        target_entropy: float,
        calibrated: bool = False,
        discount: float = 0.99,
        alpha_multiplier: float = 1.0,
        policy_lr: float = 3e-5,
        qf_lr: float = 3e-4,
        soft_target_update_rate: float = 5e-3,
        bc_steps: int = 0,
        target_update_period: int = 1,
        cql_n_actions: int = 10,
        cql_temp: float = 1.0,
        cql_alpha: float = 10.0,
        cql_clip_diff_min: float = -math.inf,
        cql_clip_diff_max: float = math.inf,
    ) -> None:
        self.discount = discount
        self.target_entropy = target_entropy
        self.calibrated = calibrated
        self.alpha_multiplier = alpha_multiplier
        self.soft_target_update_rate = soft_target_update_rate
        self.bc_steps = bc_steps
        self.target_update_period = target_update_period
        self.cql_n_actions = cql_n_actions
        self.cql_temp = cql_temp
        self.cql_alpha = cql_alpha
        self.cql_clip_diff_min = cql_clip_diff_min
        self.cql_clip_diff_max = cql_clip_diff_max
        self.critic_1 = critic_1
        self.critic_2 = critic_2
        self.target_critic_1 = copy.deepcopy(self.critic_1)
        self.target_critic_2 = copy.deepcopy(self.critic_2)
        self.actor = actor
        self.actor_optimizer = actor_optimizer
        self.critic_1_optimizer = critic_1_optimizer
        self.critic_2_optimizer = critic_2_optimizer
        self.log_alpha = Scalar(0.0)
        self.alpha_optimizer = torch.optim.Adam(self.log_alpha.parameters(), lr=policy_lr)
        self.log_alpha_prime = Scalar(1.0)
        self.alpha_prime_optimizer = torch.optim.Adam(self.log_alpha_prime.parameters(), lr=qf_lr)
        self.total_it = 0

    def update_target_network(self, soft_target_update_rate: float) -> None:
        """Polyak-update both target critics."""
        soft_update(self.target_critic_1, self.critic_1, soft_target_update_rate)
        soft_update(self.target_critic_2, self.critic_2, soft_target_update_rate)

    def _alpha_and_alpha_loss(self, log_pi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        alpha_loss = -(self.log_alpha() * (log_pi + self.target_entropy).detach()).mean()
        alpha = self.log_alpha().exp() * self.alpha_multiplier
        return alpha, alpha_loss

    def _policy_loss(
        self,
        observations: torch.Tensor,
        actions: torch.Tensor,
        new_actions: torch.Tensor,
        alpha: torch.Tensor,
        log_pi: torch.Tensor,
    ) -> torch.Tensor:
        if self.total_it <= self.bc_steps:
            log_probs = self.actor.log_prob(observations, actions)
            return (alpha * log_pi - log_probs).mean()
        q_new_actions = torch.min(
            self.critic_1(observations, new_actions),
            self.critic_2(observations, new_actions),
        )
        return (alpha * log_pi - q_new_actions).mean()

    def _q_loss(
        self,
        observations: torch.Tensor,
        actions: torch.Tensor,
        next_observations: torch.Tensor,
        rewards: torch.Tensor,
        dones: torch.Tensor,
        mc_returns: torch.Tensor | None,
        alpha: torch.Tensor,
        log_dict: dict[str, float],
    ) -> torch.Tensor:
        q1_predicted = self.critic_1(observations, actions)
        q2_predicted = self.critic_2(observations, actions)

        new_next_actions, _next_log_pi = self.actor(next_observations)
        target_q_values = torch.min(
            self.target_critic_1(next_observations, new_next_actions),
            self.target_critic_2(next_observations, new_next_actions),
        )
        target_q_values = target_q_values.unsqueeze(-1)
        td_target = rewards + (1.0 - dones) * self.discount * target_q_values.detach()
        td_target = td_target.squeeze(-1)
        qf1_loss = F.mse_loss(q1_predicted, td_target.detach())
        qf2_loss = F.mse_loss(q2_predicted, td_target.detach())

        batch_size = actions.shape[0]
        action_dim = actions.shape[-1]
        cql_random_actions = actions.new_empty(
            (batch_size, self.cql_n_actions, action_dim), requires_grad=False
        ).uniform_(-1, 1)
        cql_current_actions, cql_current_log_pis = self.actor(observations, repeat=self.cql_n_actions)
        cql_next_actions, cql_next_log_pis = self.actor(next_observations, repeat=self.cql_n_actions)
        cql_current_actions, cql_current_log_pis = (
            cql_current_actions.detach(),
            cql_current_log_pis.detach(),
        )
        cql_next_actions, cql_next_log_pis = cql_next_actions.detach(), cql_next_log_pis.detach()

        cql_q1_rand = self.critic_1(observations, cql_random_actions)
        cql_q2_rand = self.critic_2(observations, cql_random_actions)
        cql_q1_current_actions = self.critic_1(observations, cql_current_actions)
        cql_q2_current_actions = self.critic_2(observations, cql_current_actions)
        cql_q1_next_actions = self.critic_1(observations, cql_next_actions)
        cql_q2_next_actions = self.critic_2(observations, cql_next_actions)

        if mc_returns is not None:
            lower_bounds = mc_returns.reshape(-1, 1).repeat(1, cql_q1_current_actions.shape[1])
            num_vals = torch.sum(lower_bounds == lower_bounds)
            log_dict["bound_rate_cql_q1_current_actions"] = (
                torch.sum(cql_q1_current_actions < lower_bounds) / num_vals
            ).item()
            log_dict["bound_rate_cql_q2_current_actions"] = (
                torch.sum(cql_q2_current_actions < lower_bounds) / num_vals
            ).item()
            log_dict["bound_rate_cql_q1_next_actions"] = (
                torch.sum(cql_q1_next_actions < lower_bounds) / num_vals
            ).item()
            log_dict["bound_rate_cql_q2_next_actions"] = (
                torch.sum(cql_q2_next_actions < lower_bounds) / num_vals
            ).item()
            cql_q1_current_actions = torch.maximum(cql_q1_current_actions, lower_bounds)
            cql_q2_current_actions = torch.maximum(cql_q2_current_actions, lower_bounds)
            cql_q1_next_actions = torch.maximum(cql_q1_next_actions, lower_bounds)
            cql_q2_next_actions = torch.maximum(cql_q2_next_actions, lower_bounds)

        cql_cat_q1 = torch.cat(
            [cql_q1_rand, torch.unsqueeze(q1_predicted, 1), cql_q1_next_actions, cql_q1_current_actions],
            dim=1,
        )
        cql_cat_q2 = torch.cat(
            [cql_q2_rand, torch.unsqueeze(q2_predicted, 1), cql_q2_next_actions, cql_q2_current_actions],
            dim=1,
        )
        cql_std_q1 = torch.std(cql_cat_q1, dim=1)
        cql_std_q2 = torch.std(cql_cat_q2, dim=1)

        # cql_importance_sample=True (CORL's default)
        random_density = math.log(0.5**action_dim)
        cql_cat_q1 = torch.cat(
            [
                cql_q1_rand - random_density,
                cql_q1_next_actions - cql_next_log_pis.detach(),
                cql_q1_current_actions - cql_current_log_pis.detach(),
            ],
            dim=1,
        )
        cql_cat_q2 = torch.cat(
            [
                cql_q2_rand - random_density,
                cql_q2_next_actions - cql_next_log_pis.detach(),
                cql_q2_current_actions - cql_current_log_pis.detach(),
            ],
            dim=1,
        )
        cql_qf1_ood = torch.logsumexp(cql_cat_q1 / self.cql_temp, dim=1) * self.cql_temp
        cql_qf2_ood = torch.logsumexp(cql_cat_q2 / self.cql_temp, dim=1) * self.cql_temp

        cql_qf1_diff = torch.clamp(
            cql_qf1_ood - q1_predicted, self.cql_clip_diff_min, self.cql_clip_diff_max
        ).mean()
        cql_qf2_diff = torch.clamp(
            cql_qf2_ood - q2_predicted, self.cql_clip_diff_min, self.cql_clip_diff_max
        ).mean()

        # cql_lagrange=False (CORL's locomotion configs)
        cql_min_qf1_loss = cql_qf1_diff * self.cql_alpha
        cql_min_qf2_loss = cql_qf2_diff * self.cql_alpha
        alpha_prime_loss = observations.new_tensor(0.0)
        alpha_prime = observations.new_tensor(0.0)

        qf_loss = qf1_loss + qf2_loss + cql_min_qf1_loss + cql_min_qf2_loss

        log_dict.update(
            {
                "qf1_loss": qf1_loss.item(),
                "qf2_loss": qf2_loss.item(),
                "alpha": alpha.item(),
                "average_qf1": q1_predicted.mean().item(),
                "average_qf2": q2_predicted.mean().item(),
                "average_target_q": target_q_values.mean().item(),
            }
        )
        log_dict.update(
            {
                "cql_std_q1": cql_std_q1.mean().item(),
                "cql_std_q2": cql_std_q2.mean().item(),
                "cql_q1_rand": cql_q1_rand.mean().item(),
                "cql_q2_rand": cql_q2_rand.mean().item(),
                "cql_min_qf1_loss": cql_min_qf1_loss.mean().item(),
                "cql_min_qf2_loss": cql_min_qf2_loss.mean().item(),
                "cql_qf1_diff": cql_qf1_diff.mean().item(),
                "cql_qf2_diff": cql_qf2_diff.mean().item(),
                "cql_q1_current_actions": cql_q1_current_actions.mean().item(),
                "cql_q2_current_actions": cql_q2_current_actions.mean().item(),
                "cql_q1_next_actions": cql_q1_next_actions.mean().item(),
                "cql_q2_next_actions": cql_q2_next_actions.mean().item(),
                "alpha_prime_loss": alpha_prime_loss.item(),
                "alpha_prime": alpha_prime.item(),
            }
        )
        log_dict["qf_loss"] = qf_loss.item()  # the sanity check compares this one
        return qf_loss

    def train(self, batch: TensorBatch) -> dict[str, float]:
        """Temperature, actor and critic steps, each with its own backward; then the targets."""
        observations, actions, rewards, next_observations, dones = batch[:5]
        mc_returns = batch[5] if self.calibrated else None
        self.total_it += 1

        new_actions, log_pi = self.actor(observations)
        alpha, alpha_loss = self._alpha_and_alpha_loss(log_pi)
        policy_loss = self._policy_loss(observations, actions, new_actions, alpha, log_pi)
        log_dict = {
            "log_pi": log_pi.mean().item(),
            "policy_loss": policy_loss.item(),
            "alpha_loss": alpha_loss.item(),
            "alpha": alpha.item(),
        }
        qf_loss = self._q_loss(
            observations, actions, next_observations, rewards, dones, mc_returns, alpha, log_dict
        )

        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()

        self.actor_optimizer.zero_grad()
        policy_loss.backward()
        self.actor_optimizer.step()

        self.critic_1_optimizer.zero_grad()
        self.critic_2_optimizer.zero_grad()
        qf_loss.backward(retain_graph=True)
        self.critic_1_optimizer.step()
        self.critic_2_optimizer.step()

        if self.total_it % self.target_update_period == 0:
            self.update_target_network(self.soft_target_update_rate)
        return log_dict


# =============================================================================================
# Construction: both implementations of a learner, the reference starting from robolearn's weights
# =============================================================================================
@torch.no_grad()
def _copy_linears(dst: nn.Module, src: nn.Module) -> None:
    """Copy the ``nn.Linear`` layers of ``src`` into those of ``dst``, in order."""
    d = [m for m in dst.modules() if isinstance(m, nn.Linear)]
    s = [m for m in src.modules() if isinstance(m, nn.Linear)]
    if len(d) != len(s):
        raise ValueError(f"{len(d)} vs {len(s)} linear layers")
    for a, b in zip(d, s, strict=True):
        a.weight.copy_(b.weight)
        a.bias.copy_(b.bias)


def _robolearn_cfg(name: str) -> Any:
    hidden = (HIDDEN, HIDDEN)
    if name == "bc":
        return BCConfig(batch_size=BATCH, actor_hidden=hidden)
    if name == "td3bc":
        return TD3BCConfig(batch_size=BATCH, actor_hidden=hidden, critic_hidden=hidden)
    if name == "iql":
        # CORL's IQL always cosine-decays the actor learning rate over max_timesteps = 1M.
        return IQLConfig(
            batch_size=BATCH,
            actor_hidden=hidden,
            critic_hidden=hidden,
            value_hidden=hidden,
            actor_lr_decay_steps=1_000_000,
        )
    cls = CalQLConfig if name == "calql" else CQLConfig
    return cls(batch_size=BATCH, actor_hidden=hidden, critic_hidden=hidden)


def build(name: str, seed: int = 0) -> tuple[Any, Any]:
    """``(robolearn agent, CORL-style trainer)`` for learner ``name``, with equal initial weights."""
    cfg = _robolearn_cfg(name)
    kw: dict[str, Any] = {"action_low": -1.0, "action_high": 1.0, "device": "cpu", "seed": seed}
    obs_dims = {"policy": OBS_DIM}
    torch.manual_seed(seed + 1)
    if name == "bc":
        rl = BC(obs_dims, ACT_DIM, cfg, **kw)
        actor = Actor(OBS_DIM, ACT_DIM, 1.0)
        _copy_linears(actor, rl.actor)
        return rl, CorlBC(actor, torch.optim.Adam(actor.parameters(), lr=3e-4))
    if name == "td3bc":
        rl = TD3BC(obs_dims, ACT_DIM, cfg, **kw)
        actor = Actor(OBS_DIM, ACT_DIM, 1.0)
        critic_1, critic_2 = Critic(OBS_DIM, ACT_DIM), Critic(OBS_DIM, ACT_DIM)
        _copy_linears(actor, rl.actor)
        _copy_linears(critic_1, rl.critic.member(0))
        _copy_linears(critic_2, rl.critic.member(1))
        ref = CorlTD3BC(
            1.0,
            actor,
            torch.optim.Adam(actor.parameters(), lr=3e-4),
            critic_1,
            torch.optim.Adam(critic_1.parameters(), lr=3e-4),
            critic_2,
            torch.optim.Adam(critic_2.parameters(), lr=3e-4),
        )
        return rl, ref
    if name == "iql":
        rl = IQL(obs_dims, ACT_DIM, cfg, **kw)
        actor = GaussianPolicy(OBS_DIM, ACT_DIM, 1.0)
        q_network, v_network = TwinQ(OBS_DIM, ACT_DIM), ValueFunction(OBS_DIM)
        _copy_linears(actor, rl.actor)
        _copy_linears(q_network.q1, rl.critic.member(0))
        _copy_linears(q_network.q2, rl.critic.member(1))
        _copy_linears(v_network, rl.value)
        ref = CorlIQL(
            actor,
            torch.optim.Adam(actor.parameters(), lr=3e-4),
            q_network,
            torch.optim.Adam(q_network.parameters(), lr=3e-4),
            v_network,
            torch.optim.Adam(v_network.parameters(), lr=3e-4),
        )
        return rl, ref
    rl = CQL(obs_dims, ACT_DIM, cfg, **kw)
    actor = TanhGaussianPolicy(OBS_DIM, ACT_DIM, 1.0)
    critic_1 = FullyConnectedQFunction(OBS_DIM, ACT_DIM)
    critic_2 = FullyConnectedQFunction(OBS_DIM, ACT_DIM)
    _copy_linears(actor, rl.actor)
    _copy_linears(critic_1, rl.critic.member(0))
    _copy_linears(critic_2, rl.critic.member(1))
    ref = CorlCQL(
        critic_1,
        torch.optim.Adam(critic_1.parameters(), lr=3e-4),
        critic_2,
        torch.optim.Adam(critic_2.parameters(), lr=3e-4),
        actor,
        torch.optim.Adam(actor.parameters(), lr=3e-5),
        target_entropy=-float(ACT_DIM),
        calibrated=name == "calql",
    )
    return rl, ref


def make_batches(n: int, seed: int = 0) -> tuple[list[Batch], list[TensorBatch]]:
    """``n`` random batches in both layouts, sharing the same tensors' values."""
    g = torch.Generator().manual_seed(seed)
    rl_batches: list[Batch] = []
    corl_batches: list[TensorBatch] = []
    for _ in range(n):
        obs = torch.randn(BATCH, OBS_DIM, generator=g)
        next_obs = torch.randn(BATCH, OBS_DIM, generator=g)
        action = torch.rand(BATCH, ACT_DIM, generator=g) * 2.0 - 1.0
        reward = torch.randn(BATCH, generator=g)
        terminated = torch.rand(BATCH, generator=g) < 0.01
        mc_return = torch.randn(BATCH, generator=g)
        rl_batches.append(
            Batch(
                obs={"policy": obs},
                action=action,
                reward=reward,
                next_obs={"policy": next_obs},
                terminated=terminated,
                truncated=torch.zeros_like(terminated),
                extras={"mc_return": mc_return},
            )
        )
        corl_batches.append(
            [
                obs.clone(),
                action.clone(),
                reward[:, None].clone(),
                next_obs.clone(),
                terminated[:, None].float(),
                mc_return[:, None].clone(),
            ]
        )
    return rl_batches, corl_batches


class Stepper:
    """Runs ``n`` updates of one implementation, cycling through its batches."""

    def __init__(self, step: Callable[[Any], object], batches: Sequence[Any]) -> None:
        self.step, self.batches, self.i = step, batches, 0

    def __call__(self, n: int) -> None:
        """``n`` gradient steps."""
        for _ in range(n):
            self.step(self.batches[self.i % len(self.batches)])
            self.i += 1


# =============================================================================================
# Sanity check, timing, profile
# =============================================================================================
SANITY_KEYS: dict[str, list[tuple[str, str]]] = {
    "bc": [("loss_actor", "actor_loss")],
    "td3bc": [("loss_critic", "critic_loss"), ("loss_actor", "actor_loss")],
    "iql": [("loss_value", "value_loss"), ("loss_critic", "q_loss"), ("loss_actor", "actor_loss")],
    "cql": [("loss_critic", "qf_loss"), ("loss_actor", "policy_loss"), ("entropy", "neg_log_pi")],
    "calql": [("loss_critic", "qf_loss"), ("loss_actor", "policy_loss"), ("bound_rate", "bound_rate")],
}
"""robolearn's output key and the reference's log-dict key of the same quantity."""


def sanity(name: str, rl_batches: list[Batch], corl_batches: list[TensorBatch]) -> list[dict[str, Any]]:
    """The first two steps' losses of both implementations, from the same weights and batches."""
    rl, ref = build(name)
    rows = []
    for i in range(2):  # TD3+BC's actor loss appears on the 2nd step
        out = rl.update(rl_batches[i])
        log = ref.train(corl_batches[i])
        if "log_pi" in log:
            log["neg_log_pi"] = -log["log_pi"]
        if name == "calql":
            log["bound_rate"] = statistics.mean(log[f"bound_rate_cql_q{k}_current_actions"] for k in (1, 2))
        for rl_key, ref_key in SANITY_KEYS[name]:
            if rl_key in out and ref_key in log:
                rows.append(
                    {"step": i + 1, "quantity": rl_key, "robolearn": float(out[rl_key]), "corl": log[ref_key]}
                )
    return rows


def _paired(methods: dict[str, Stepper], steps: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per step of each method, per round, the order rotated each round."""
    names = list(methods)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            t0 = time.perf_counter()
            methods[n](steps)
            times[n].append((time.perf_counter() - t0) / steps)
    return times


def _warmup_rate(stepper: Stepper, min_seconds: float) -> float:
    """Run a doubling number of steps until a run lasts ``min_seconds``; its steps/s."""
    n = 2
    while True:
        t0 = time.perf_counter()
        stepper(n)
        dt = time.perf_counter() - t0
        if dt >= min_seconds or n >= 4096:
            return n / dt
        n *= 2


def bench(
    name: str,
    rl_batches: list[Batch],
    corl_batches: list[TensorBatch],
    rounds: int,
    block_seconds: float,
) -> dict[str, Any]:
    """Paired timing of one learner at the current thread count."""
    rl, ref = build(name)
    methods = {"robolearn": Stepper(rl.update, rl_batches), "corl": Stepper(ref.train, corl_batches)}
    rates = {n: _warmup_rate(m, min(0.5, block_seconds / 2)) for n, m in methods.items()}
    steps = max(2, int(block_seconds * math.sqrt(rates["robolearn"] * rates["corl"])))
    steps += steps % 2  # TD3+BC alternates critic-only and critic+actor steps
    times = _paired(methods, steps, rounds)
    ratios = [c / r for r, c in zip(times["robolearn"], times["corl"], strict=True)]
    out: dict[str, Any] = {"steps_per_round": steps, "rounds": times, "rate": {}, "spread": {}}
    for n, ts in times.items():
        med = statistics.median(ts)
        out["rate"][n] = 1.0 / med
        out["spread"][n] = (max(ts) - min(ts)) / med
    out["ratio"] = statistics.median(ratios)
    out["ratio_range"] = (min(ratios), max(ratios))
    return out


def profile(
    name: str, rl_batches: list[Batch], corl_batches: list[TensorBatch], steps: int, reps: int = 3
) -> dict[str, Any]:
    """GEMM time per step of each implementation (torch.profiler, CPU op self time).

    ``reps`` alternating passes; each metric is the median over them (the machine is shared).
    """
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    rl, ref = build(name)
    steppers = {"robolearn": Stepper(rl.update, rl_batches), "corl": Stepper(ref.train, corl_batches)}
    for stepper in steppers.values():
        stepper(max(2, steps // 2))  # warm-up
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in steppers}
    for _ in range(reps):
        for label, stepper in steppers.items():
            t0 = time.perf_counter()
            stepper(steps)
            plain = (time.perf_counter() - t0) / steps
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                stepper(steps)
            events = prof.key_averages()
            gemm_us = sum(e.self_cpu_time_total for e in events if e.key in GEMM_OPS)
            samples[label].append(
                {
                    "ms_per_step": plain * 1e3,
                    "gemm_ms_per_step": gemm_us / steps / 1e3,
                    "ops_per_step": sum(e.count for e in events) / steps,
                }
            )
    out: dict[str, Any] = {"steps": steps, "reps": reps}
    for label, rows in samples.items():
        out[label] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    return out


def _fmt(rate: float) -> str:
    return f"{rate / 1e3:.2f}k" if rate >= 1e3 else f"{rate:.1f}" if rate < 100 else f"{rate:.0f}"


NAMES = {"bc": "BC", "td3bc": "TD3+BC", "iql": "IQL", "cql": "CQL", "calql": "Cal-QL"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--learners", nargs="+", default=list(LEARNERS), choices=LEARNERS)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (>= 5 advised)")
    parser.add_argument(
        "--block-seconds", type=float, default=1.5, help="about how long one timed block of steps lasts"
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the GEMM-time profile")
    parser.add_argument("--json", help="save everything (every round) here")
    args = parser.parse_args()

    t_start = time.perf_counter()
    torch.set_flush_denormal(True)
    results: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "config": {"obs_dim": OBS_DIM, "action_dim": ACT_DIM, "batch": BATCH, "hidden": [HIDDEN, HIDDEN]},
        "load_start": _load(),
        "rounds": args.rounds,
    }
    _log(
        f"torch {torch.__version__}, python {platform.python_version()}, cores {os.cpu_count()}, "
        f"load {results['load_start']}"
    )
    rl_batches, corl_batches = make_batches(NUM_BATCHES)

    torch.set_num_threads(1)
    results["sanity"] = {}
    for name in args.learners:
        rows = sanity(name, rl_batches, corl_batches)
        results["sanity"][name] = rows
        _log(
            f"sanity {NAMES[name]}: "
            + ", ".join(f"{r['quantity']}@{r['step']} {r['robolearn']:.4g} vs {r['corl']:.4g}" for r in rows)
        )

    results["timing"] = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        results["timing"][threads] = {}
        for name in args.learners:
            res = bench(name, rl_batches, corl_batches, args.rounds, args.block_seconds)
            res["load"] = _load()
            results["timing"][threads][name] = res
            _log(
                f"{threads} thread(s) {NAMES[name]}: robolearn {res['rate']['robolearn']:.1f}/s, "
                f"CORL-style {res['rate']['corl']:.1f}/s, ratio {res['ratio']:.2f} "
                f"({res['steps_per_round']} steps x {args.rounds} rounds), load {res['load'][0]:.2f}"
            )

    if not args.no_profile:
        torch.set_num_threads(1)
        results["profile"] = {}
        for name in args.learners:
            rate = results["timing"][args.threads[0]][name]["rate"]["corl"]
            steps = max(4, int(0.5 * rate))  # about half a second of CORL-style steps
            steps += steps % 2
            results["profile"][name] = prof = profile(name, rl_batches, corl_batches, steps)
            _log(
                f"profile {NAMES[name]}: "
                + ", ".join(
                    f"{k} {prof[k]['ms_per_step']:.2f} ms/step, GEMM {prof[k]['gemm_ms_per_step']:.2f} ms"
                    for k in ("robolearn", "corl")
                )
            )

    results["load_end"] = _load()
    results["wall_s"] = time.perf_counter() - t_start

    print(
        f"\ntorch {results['torch']}, python {results['python']}, {results['cpu_count']} cores; "
        f"load avg (1/5/15 min) at start {'/'.join(f'{x:.2f}' for x in results['load_start'])}, "
        f"at end {'/'.join(f'{x:.2f}' for x in results['load_end'])}; {results['wall_s']:.0f} s\n"
    )
    print(
        "| learner | threads | robolearn steps/s | CORL-style steps/s | ratio (median, range) | spread rl / CORL | steps × rounds |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.learners:
        for threads in args.threads:
            r = results["timing"][threads][name]
            lo, hi = r["ratio_range"]
            print(
                f"| {NAMES[name]} | {threads} | {_fmt(r['rate']['robolearn'])} | {_fmt(r['rate']['corl'])} "
                f"| **{r['ratio']:.2f}×** ({lo:.2f}–{hi:.2f}) "
                f"| {r['spread']['robolearn']:.0%} / {r['spread']['corl']:.0%} "
                f"| {r['steps_per_round']} × {args.rounds} |"
            )
    if "profile" in results:
        print(
            "\nGEMM time per step (1 thread, torch.profiler self time of addmm/mm/bmm/baddbmm, median of "
            "3 alternating passes; ms/step measured without the profiler; bound = CORL-style ms/step ÷ robolearn GEMM ms/step, the "
            "speed-up if everything but robolearn's GEMMs cost nothing):\n"
        )
        print(
            "| learner | robolearn ms/step | its GEMM ms (share) | CORL-style ms/step | its GEMM ms (share) "
            "| GEMM ms CORL ÷ rl | ops/step rl / CORL | bound |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name in args.learners:
            p = results["profile"][name]
            rl, co = p["robolearn"], p["corl"]
            print(
                f"| {NAMES[name]} | {rl['ms_per_step']:.2f} | {rl['gemm_ms_per_step']:.2f} "
                f"({rl['gemm_ms_per_step'] / rl['ms_per_step']:.0%}) | {co['ms_per_step']:.2f} "
                f"| {co['gemm_ms_per_step']:.2f} ({co['gemm_ms_per_step'] / co['ms_per_step']:.0%}) "
                f"| {co['gemm_ms_per_step'] / rl['gemm_ms_per_step']:.2f}× "
                f"| {rl['ops_per_step']:.0f} / {co['ops_per_step']:.0f} "
                f"| {co['ms_per_step'] / rl['gemm_ms_per_step']:.2f}× |"
            )
    print("\nSanity check (same initial weights and batches; sampled terms differ by their noise):\n")
    print("| learner | step | quantity | robolearn | CORL-style |")
    print("|---|---:|---|---:|---:|")
    for name in args.learners:
        for row in results["sanity"][name]:
            print(
                f"| {NAMES[name]} | {row['step']} | {row['quantity']} | {row['robolearn']:.4g} | {row['corl']:.4g} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
