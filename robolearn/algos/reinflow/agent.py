"""ReinFlow and DPPO as verbs (DESIGN.md, "Algorithm"): ``act``, ``process``, ``compute_returns``,
``update``; trained by the on-policy runner exactly like PPO.

The policy is a pre-trained generative chunk model (:class:`robolearn.nn.generative.ChunkModel`)
whose denoising steps are turned into a Markov chain of Gaussian transitions:

* **ReinFlow** (``algo=reinflow``, a flow model): ``x_{k+1} ~ N(x_k + v(x_k, t_k, c) / K,
  sigma_phi(x_k, t_k, c)^2)``, ``t_k = k / K``, with a learned noise network bounded in
  ``[min_std, max_std]``;
* **DPPO** (``algo=dppo``, a diffusion model): ``x_{k+1} ~ N(mu_DDIM(x_k), max(sigma_DDIM, min_std)^2)``
  over ``K`` DDIM steps; the last ``ft_steps`` are fine-tuned, the earlier ones run a frozen copy
  of the pre-trained network.

:meth:`act` samples the chain, executes the first action of the final chunk (``ChunkModel.to_env``
clips it to the action bounds), and stores the whole chain ``[K + 1, H * A]`` per world in the
rollout (as an extra "observation" group of :class:`robolearn.data.rollout.RolloutStorage`), with
its log-likelihood and the critic's value. :meth:`update` recomputes the log-likelihood of the
stored chains under the current networks for PPO's ratio, through the same function :meth:`act`
used, so the ratio is 1 before the first gradient step. The value function is an MLP on the
critic group. Evaluation (:meth:`act_inference`) runs the chain's means without the injected
noise, from zeros (``eval_noise=zero``, the default: deterministic, like every learner's
``act_inference``) or from a fresh ``N(0, I)`` draw (``eval_noise=sample``: the policy's own action
distribution, what benchmarks/reinflow.py reports).

Supported: chunks of any horizon ``H`` executed one action per env step (``execute = 1``: a chain per
env step), conditioned on ``obs_history`` stacked frames kept per world by a
:class:`robolearn.spec.chunking.ChunkExecutor` (the deploy runtime's semantics: a restarted world's
history is its first observation repeated); the rollout's history restarts where an episode ended,
:meth:`act_inference`'s where :meth:`reset` says.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robolearn.algos.common import surrogate_loss, value_loss
from robolearn.algos.reinflow.config import DPPOConfig, ReinFlowConfig
from robolearn.algos.reinflow.losses import (
    approx_kl,
    bc_regularizer,
    chain_entropy,
    chain_log_prob,
    flow_transition_means,
)
from robolearn.data.rollout import RolloutStorage
from robolearn.nn import MLP, EmpiricalNormalizer
from robolearn.nn.generative import ChunkModel, ChunkModelSpec, ddim_mean, flow_velocity
from robolearn.spec.chunking import ChunkExecutor, ChunkSpec
from robolearn.types import Transition

COND_KEY = "cond"
"""Storage key of the model's (normalised) condition."""
CRITIC_KEY = "critic"
"""Storage key of the critic's (normalised) input."""
CHAIN_KEY = "chain"
"""Storage key of the sampled chain ``[K + 1, H * A]``."""


def load_pretrained(init_from: str | Path) -> ChunkModel:
    """The pre-trained :class:`ChunkModel` of a run directory (its newest checkpoint: the
    ``checkpoints/latest`` pointer, else the highest ``ckpt_<step>.pt``) or of a checkpoint file.

    Reads ``state["agent"]["model"]`` (a generative BC run, or a ReinFlow/DPPO run), or a bare
    ``ChunkModel.checkpoint()`` dict; always with ``weights_only=True``.

    Raises:
        FileNotFoundError: nothing readable at ``init_from``.
        ValueError: the file holds no chunk model.
    """
    path = Path(init_from)
    if path.is_dir():
        folder = path / "checkpoints"
        pointer = folder / "latest"
        target = folder / pointer.read_text().strip() if pointer.is_file() else None
        if target is None or not target.is_file():
            # By the step's value, not the name: ckpt_1000000.pt sorts before ckpt_999999.pt as text.
            steps = [(int(m.group(1)), f) for f in (folder.iterdir() if folder.is_dir() else [])
                     if (m := re.fullmatch(r"ckpt_(\d+)\.pt", f.name)) and f.is_file()]
            found = [f for _, f in sorted(steps)]
            if not found:
                raise FileNotFoundError(f"algo.init_from: {path} holds no checkpoints/ckpt_*.pt (expected a flow or diffusion BC run)")
            target = found[-1]
        path = target
    if not path.is_file():
        raise FileNotFoundError(f"algo.init_from: {path} is neither a run directory nor a checkpoint file")
    state: Any = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("agent", "model"):
        if isinstance(state, Mapping) and key in state and isinstance(state[key], Mapping):
            state = state[key]
    if not (isinstance(state, Mapping) and "spec" in state and "state" in state):
        raise ValueError(
            f"algo.init_from: {path} holds no chunk model (expected agent.model = ChunkModel.checkpoint(), "
            "as a flow/diffusion BC run writes)"
        )
    return ChunkModel.from_checkpoint(dict(state))


class NoiseNet(nn.Module):
    """ReinFlow's noise network ``(x_k, t_k, cond) -> sigma`` ``[B, H, A]`` in ``[min_std, max_std]``
    (a sigmoid between the bounds, so every transition stays a proper, bounded Gaussian).
    """

    def __init__(self, horizon: int, action_dim: int, cond_dim: int, hidden: tuple[int, ...], activation: str,
                 min_std: float, max_std: float) -> None:
        """A fresh network whose initial std is the middle of the bounds (a near-zero last layer)."""
        super().__init__()
        self.shape = (horizon, action_dim)
        d = horizon * action_dim
        self.mlp = MLP(d + 1 + cond_dim, d, hidden, activation, output_gain=0.01)
        self.min_std, self.max_std = float(min_std), float(max_std)

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """The std of the transition out of ``x`` ``[B, H, A]`` at times ``t`` ``[B]``."""
        out = self.mlp(torch.cat([x.flatten(1), t.reshape(-1, 1).to(x.dtype), cond], dim=-1))
        return (self.min_std + (self.max_std - self.min_std) * torch.sigmoid(out)).reshape(x.shape)


class ChainPolicy(nn.Module):
    """``obs -> action``: the chain's noise-free means from a fresh initial draw (or zeros), first
    action of the chunk in env units; an independent copy for evaluation and export.
    """

    def __init__(self, agent: ReinFlow) -> None:
        """Copy ``agent``'s networks (CPU, eval mode)."""
        super().__init__()
        self.model = copy.deepcopy(agent.model).cpu().eval()
        self.ref = copy.deepcopy(agent.ref_model).cpu().eval() if agent.dppo else None
        self.cfg = agent.cfg
        self.dppo = agent.dppo
        self.obs_groups = (agent.actor_group,)
        self._history: ChunkExecutor | None = None

    def reset(self, done: torch.Tensor) -> None:
        """Restart the observation history of the worlds where ``done[B]`` (``obs_history > 1``)."""
        if self._history is not None:
            self._history.reset(done)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[B, A]`` for raw observations ``[B, obs_dim]`` (stacked with the history it keeps)."""
        spec = self.model.spec
        if self._history is None or self._history.n != obs.shape[0]:
            self._history = history_executor(spec, obs.shape[0], obs.device)
        noise = torch.zeros(obs.shape[0], spec.horizon, spec.action_dim, dtype=obs.dtype, device=obs.device)
        if self.cfg.eval_noise == "sample":
            noise = torch.randn_like(noise)
        cond = self.model.cond(self._history.observe(obs))
        x = deterministic_chain(self.model, self.ref, self.cfg, self.dppo, cond, noise)
        return self.model.to_env(x)[:, 0]


def history_executor(spec: ChunkModelSpec, num_worlds: int, device: torch.device | str) -> ChunkExecutor:
    """A per-world observation history of ``spec.obs_history`` frames (chunks executed one action at a time)."""
    chunk = ChunkSpec(horizon=spec.horizon, execute=1, obs_history=spec.obs_history)
    return ChunkExecutor(chunk, num_worlds, spec.obs_dim, spec.action_dim, device=device)


def step_mean(model: ChunkModel, ref: ChunkModel | None, cfg: ReinFlowConfig, dppo: bool, i: int,
              x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, float | None]:
    """The mean of step ``i``'s transition out of ``x`` ``[B, H, A]`` and, for DPPO, its fixed std.

    DPPO's steps before the fine-tuned ones run ``ref`` (the frozen pre-trained network).
    """
    k = int(cfg.steps)
    if not dppo:
        t = torch.full((x.shape[0],), i / k, device=x.device, dtype=x.dtype)
        return x + flow_velocity(model.net, x, t, cond, k) / k, None
    assert isinstance(cfg, DPPOConfig) and model.schedule is not None
    ks = model.schedule.timesteps(k)
    k_prev = ks[i + 1] if i + 1 < k else -1
    frozen = i < k - cfg.fine_tuned_steps
    net = ref.net if (frozen and ref is not None) else model.net
    mean, sigma = ddim_mean(net, x, cond, model.schedule, ks[i], k_prev, float(cfg.eta), clip=float(cfg.clip_x0))
    return mean, max(sigma, float(cfg.min_std))


def deterministic_chain(model: ChunkModel, ref: ChunkModel | None, cfg: ReinFlowConfig, dppo: bool,
                        cond: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The chain run through its means, no noise injected: the final chunk ``[B, H, A]`` (model units)."""
    x = noise
    for i in range(int(cfg.steps)):
        x, _ = step_mean(model, ref, cfg, dppo, i, x, cond)
    return x


class ReinFlow:
    """PPO over the denoising chain of a pre-trained flow (ReinFlow) or diffusion (DPPO) chunk policy."""

    def __init__(
        self,
        obs_dims: Mapping[str, int],
        action_dim: int,
        cfg: ReinFlowConfig | None = None,
        *,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        model: ChunkModel | None = None,
    ) -> None:
        """Load (``model``, else ``cfg.init_from``) or build the chunk model; build noise net, critic,
        normaliser and optimisers.

        Args:
            obs_dims: feature size of each observation group.
            action_dim: env action width ``A`` (must match the model's).
            cfg: a :class:`ReinFlowConfig` (ReinFlow) or :class:`DPPOConfig` (DPPO).
            action_low: env action lower bounds (used by a fresh model only; a pre-trained one
                brings its own).
            action_high: env action upper bounds (likewise).
            device: where everything lives.
            seed: generator seed (default ``cfg.seed``).
            model: a pre-trained model to fine-tune (a copy is taken); overrides ``cfg.init_from``.
        """
        self.cfg = cfg = cfg if cfg is not None else ReinFlowConfig()
        self.dppo = isinstance(cfg, DPPOConfig)
        self.device = torch.device(device)
        self.actor_group = cfg.actor_obs_group
        self.critic_group = cfg.critic_obs_group or cfg.actor_obs_group
        for field_name, group in (("actor_obs_group", self.actor_group), ("critic_obs_group", self.critic_group)):
            if group not in obs_dims:
                raise ValueError(f"{field_name}: group {group!r} is not among the observation groups {sorted(obs_dims)}")
        kind = "diffusion" if self.dppo else "flow"
        if model is not None:
            model = copy.deepcopy(model)
        elif cfg.init_from:
            model = load_pretrained(cfg.init_from)
        else:
            spec = ChunkModelSpec(kind, int(obs_dims[self.actor_group]), int(action_dim), int(cfg.horizon),
                                  hidden=tuple(cfg.model_hidden))
            model = ChunkModel(spec, action_low, action_high)
        self._check_model(model, obs_dims, action_dim)
        self.model: ChunkModel = model.to(self.device)
        if self.model.schedule is not None:
            self.model.schedule = self.model.schedule.to(self.device)
        # The pre-trained policy, frozen: the BC regulariser's reference and DPPO's early steps.
        self.ref_model: ChunkModel = copy.deepcopy(self.model)
        for p in self.ref_model.parameters():
            p.requires_grad_(False)
        spec = self.model.spec
        self.horizon, self.action_dim = spec.horizon, spec.action_dim
        self.chunk_dim = spec.horizon * spec.action_dim
        self.noise_net: NoiseNet | None = None
        if not self.dppo:
            self.noise_net = NoiseNet(spec.horizon, spec.action_dim, spec.cond_dim, cfg.noise_hidden, cfg.activation,
                                      cfg.min_std, cfg.max_std).to(self.device)
        critic_dim = int(obs_dims[self.critic_group])
        self.critic = MLP(critic_dim, 1, cfg.critic_hidden, cfg.activation, output_gain=1.0).to(self.device)
        self.critic_normalizer: nn.Module = (
            EmpiricalNormalizer(critic_dim) if cfg.normalize_critic_obs else nn.Identity()
        ).to(self.device)
        self._actor_params = list(self.model.net.parameters())
        if self.noise_net is not None:
            self._actor_params += list(self.noise_net.parameters())
        self.actor_optimizer = torch.optim.Adam(self._actor_params, lr=float(cfg.actor_learning_rate))
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=float(cfg.critic_learning_rate))
        seed = int(cfg.seed if seed is None else seed)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.eval_generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.storage: RolloutStorage | None = None
        self._pending: dict[str, Any] | None = None
        self.num_updates = 0
        # Observation histories (obs_history frames per world): the rollout's and act_inference's.
        self._history: dict[str, ChunkExecutor] = {}

    def _stacked(self, which: str, obs: torch.Tensor) -> torch.Tensor:
        """Push ``obs`` into the ``which`` history (sized on first use) and return the stacked frames."""
        executor = self._history.get(which)
        if executor is None or executor.n != obs.shape[0]:
            executor = self._history[which] = history_executor(self.model.spec, obs.shape[0], self.device)
        return executor.observe(obs)

    def _check_model(self, model: ChunkModel, obs_dims: Mapping[str, int], action_dim: int) -> None:
        spec = model.spec
        want = ("diffusion",) if self.dppo else ("flow", "shortcut")
        name = "dppo" if self.dppo else "reinflow"
        if spec.model not in want:
            raise ValueError(f"algo={name}: the pre-trained model is a {spec.model!r} model; expected {' or '.join(want)}")
        if spec.action_dim != int(action_dim):
            raise ValueError(f"algo.init_from: the model's action_dim is {spec.action_dim}, the env's {action_dim}")
        if spec.obs_dim != int(obs_dims[self.actor_group]):
            raise ValueError(
                f"algo.init_from: the model's obs_dim is {spec.obs_dim}, the {self.actor_group!r} group's {obs_dims[self.actor_group]}"
            )
        if self.dppo:
            assert model.schedule is not None
            model.schedule.timesteps(int(self.cfg.steps))  # names the valid range

    # -- the chain ---------------------------------------------------------------------------
    def chain_stats(self, chain: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The chain's log-likelihood ``[B]`` under the current networks, its transition entropy
        ``[B]`` and the mean std of its (fine-tuned) transitions ``[B]``; differentiable.

        The one function both :meth:`act` and :meth:`update` use, so PPO's ratio starts at 1.
        """
        cfg, b = self.cfg, chain.shape[0]
        if self.noise_net is not None:
            means, t = flow_transition_means(self.model.net, chain, cond, self.horizon, self.action_dim)
            xk = chain[:, :-1].reshape(-1, self.horizon, self.action_dim)
            stds = self.noise_net(xk, t, cond.repeat_interleave(int(cfg.steps), dim=0)).reshape(means.shape)
            first = 0
        else:
            assert isinstance(cfg, DPPOConfig)
            first = int(cfg.steps) - cfg.fine_tuned_steps
            mean_list, std_list = [], []
            for i in range(first, int(cfg.steps)):
                x = chain[:, i].reshape(b, self.horizon, self.action_dim)
                mean, std = step_mean(self.model, self.ref_model, cfg, True, i, x, cond)
                mean_list.append(mean.reshape(b, -1))
                std_list.append(torch.full((1, self.chunk_dim), float(std), device=chain.device, dtype=chain.dtype))
            means = torch.stack(mean_list, dim=1)
            stds = torch.stack(std_list, dim=1).expand_as(means)
        lp = chain_log_prob(chain, means, stds, first=first)
        return lp, chain_entropy(stds), stds.flatten(1).mean(-1)

    @torch.no_grad()
    def sample_chain(self, cond: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """A chain ``[B, K + 1, H * A]`` sampled from ``N(0, I)`` through the noisy transitions: data,
        without a graph (a likelihood's gradient through its own sample would cancel the mean's).
        """
        b = cond.shape[0]
        gen = generator if generator is not None else self.generator
        x = torch.randn(b, self.horizon, self.action_dim, generator=gen, device=self.device)
        states = [x.reshape(b, -1)]
        for i in range(int(self.cfg.steps)):
            mean, std = step_mean(self.model, self.ref_model, self.cfg, self.dppo, i, x, cond)
            if std is None:
                assert self.noise_net is not None
                t = torch.full((b,), i / int(self.cfg.steps), device=self.device)
                std_t: torch.Tensor | float = self.noise_net(x, t, cond)
            else:
                std_t = std
            x = mean + std_t * torch.randn(mean.shape, generator=gen, device=self.device)
            states.append(x.reshape(b, -1))
        return torch.stack(states, dim=1)

    def chunk_of(self, chain: torch.Tensor) -> torch.Tensor:
        """The env-unit chunk ``[B, H, A]`` of a chain's last state (clipped to the bounds)."""
        return self.model.to_env(chain[:, -1].reshape(-1, self.horizon, self.action_dim))

    # -- rollout -----------------------------------------------------------------------------
    def act(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Sample a chain per world and return the first action of its chunk ``[N, A]`` (env units);
        record the chain, its log-likelihood and the value. Call :meth:`process` before the next ``act``.
        """
        actor_obs, critic_obs = obs[self.actor_group].to(self.device), obs[self.critic_group].to(self.device)
        n = actor_obs.shape[0]
        if self.storage is None:
            # Allocated outside inference mode: its buffers must be ordinary tensors for the update.
            self.storage = RolloutStorage(
                self.cfg.num_steps, n,
                {COND_KEY: (self.model.spec.cond_dim,), CRITIC_KEY: critic_obs.shape[1:],
                 CHAIN_KEY: (int(self.cfg.steps) + 1, self.chunk_dim)},
                self.action_dim, device=self.device,
            )
        with torch.inference_mode():
            if self.cfg.normalize_critic_obs:
                self.critic_normalizer.update(critic_obs)
            critic_in = self.critic_normalizer(critic_obs)
            cond = self.model.cond(self._stacked("rollout", actor_obs))
            chain = self.sample_chain(cond)
            log_prob, _, _ = self.chain_stats(chain, cond)
            actions = self.chunk_of(chain)[:, 0]
            zeros = torch.zeros_like(actions)
            self._pending = {
                "obs": {COND_KEY: cond, CRITIC_KEY: critic_in, CHAIN_KEY: chain},
                "actions": actions,
                "values": self.critic(critic_in).squeeze(-1),
                "log_probs": log_prob,
                # The rollout's Gaussian-policy slots: unused here (the KL is estimated from log-probs).
                "action_mean": zeros,
                "action_std": torch.ones_like(actions),
            }
        return actions

    def act_inference(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Evaluation actions ``[N, A]``: the chain's means without injected noise, from zeros
        (``eval_noise=zero``) or a fresh ``N(0, I)`` draw of :attr:`eval_generator` (``sample``); records nothing.
        """
        with torch.inference_mode():
            actor_obs = obs[self.actor_group].to(self.device)
            noise = torch.zeros(actor_obs.shape[0], self.horizon, self.action_dim, device=self.device)
            if self.cfg.eval_noise == "sample":
                noise = torch.randn(noise.shape, generator=self.eval_generator, device=self.device)
            cond = self.model.cond(self._stacked("inference", actor_obs))
            x = deterministic_chain(self.model, self.ref_model, self.cfg, self.dppo, cond, noise)
            return self.model.to_env(x)[:, 0]

    def reset(self, done: torch.Tensor) -> None:
        """Restart :meth:`act_inference`'s observation history for the worlds where ``done[N]`` (each
        action's chain is drawn afresh, so nothing else carries over).
        """
        if "inference" in self._history:
            self._history["inference"].reset(done.to(self.device))

    def evaluate(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Values ``[N]`` of ``obs`` (no normaliser update)."""
        with torch.inference_mode():
            return self.critic(self.critic_normalizer(obs[self.critic_group].to(self.device))).squeeze(-1)

    def process(self, transition: Transition) -> None:
        """Store the step that followed the last :meth:`act` (as PPO: ``next_obs`` holds the pre-reset
        observation of ended worlds; time-outs bootstrap from its value, terminations do not).
        """
        if self._pending is None or self.storage is None:
            raise RuntimeError("process() needs a preceding act() on the same step")
        pending, self._pending = self._pending, None
        timeout_values = None
        if transition.next_obs is not None and self.critic_group in transition.next_obs:
            timeout_values = self.evaluate(transition.next_obs)
        self.storage.add(
            pending["obs"], pending["actions"], transition.reward.to(self.device), transition.terminated.to(self.device),
            transition.truncated.to(self.device), pending["values"], pending["log_probs"], pending["action_mean"],
            pending["action_std"], timeout_values=timeout_values,
        )
        if "rollout" in self._history:  # the next observation of an ended world starts a new episode
            self._history["rollout"].reset((transition.terminated | transition.truncated).to(self.device))

    def compute_returns(self, last_obs: Mapping[str, torch.Tensor]) -> None:
        """GAE over the full rollout, bootstrapping from the observation after its last step."""
        if self.storage is None:
            raise RuntimeError("compute_returns() before any act()")
        last_values = self.evaluate(last_obs)
        with torch.inference_mode():
            self.storage.compute_returns(last_values, self.cfg.gamma, self.cfg.lam,
                                         normalize_advantages=self.cfg.normalize_advantages)

    # -- learning ----------------------------------------------------------------------------
    def update(self, batch: Any = None) -> dict[str, torch.Tensor]:
        """``num_epochs x num_minibatches`` PPO steps on the rollout's chains (value only during the
        critic warm-up); returns mean statistics as 0-d tensors. Clears the rollout.
        """
        if batch is not None:
            raise ValueError(f"{type(self).__name__}.update: it learns from its own rollout; got an external batch")
        if self.storage is None:
            raise RuntimeError("update() before any rollout")
        cfg = self.cfg
        train_actor = self.num_updates >= int(cfg.critic_warmup_iterations)
        names = ("loss_policy", "loss_value", "loss_entropy", "loss_bc", "kl", "clip_fraction", "noise_std")
        sums = {k: torch.zeros((), device=self.device) for k in names}
        count = 0
        stop = False
        for _ in range(int(cfg.num_epochs)):
            for mb in self.storage.mini_batches(1, int(cfg.num_minibatches), self.generator):
                values = self.critic(mb.obs[CRITIC_KEY]).squeeze(-1)
                loss_value = cfg.value_loss_coef * value_loss(
                    values, mb.values, mb.returns, cfg.clip_param if cfg.value_clip else None)
                self.critic_optimizer.zero_grad(set_to_none=True)
                loss_value.backward()
                nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                self.critic_optimizer.step()
                sums["loss_value"] += loss_value.detach()
                count += 1
                if not train_actor:
                    continue
                cond, chain = mb.obs[COND_KEY], mb.obs[CHAIN_KEY]
                log_probs, entropy, noise_std = self.chain_stats(chain, cond)
                loss_policy = surrogate_loss(log_probs, mb.log_probs, mb.advantages, cfg.clip_param)
                loss_entropy = -cfg.entropy_coef * entropy.mean()
                loss = loss_policy + loss_entropy
                if cfg.bc_coef > 0.0:
                    loss_bc = cfg.bc_coef * self._bc_loss(cond)
                    loss = loss + loss_bc
                    sums["loss_bc"] += loss_bc.detach()
                self.actor_optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self._actor_params, cfg.max_grad_norm)
                self.actor_optimizer.step()
                with torch.no_grad():
                    kl = approx_kl(log_probs, mb.log_probs)
                    ratio = torch.exp(log_probs - mb.log_probs)
                    sums["clip_fraction"] += ((ratio - 1.0).abs() > cfg.clip_param).float().mean()
                sums["loss_policy"] += loss_policy.detach()
                sums["loss_entropy"] += loss_entropy.detach()
                sums["kl"] += kl
                sums["noise_std"] += noise_std.detach().mean()
                if cfg.target_kl is not None and float(kl) > float(cfg.target_kl):
                    stop = True  # the chain moved far enough on this rollout
                    break
            if stop:
                break
        self.storage.clear()
        self.num_updates += 1
        stats = {name: total / max(count, 1) for name, total in sums.items()}
        stats["actor_updated"] = torch.tensor(float(train_actor), device=self.device)
        return stats

    def _bc_loss(self, cond: torch.Tensor) -> torch.Tensor:
        """The BC regulariser on ``cond``: noise-free samples of the fine-tuned vs the pre-trained chain."""
        noise = torch.randn(cond.shape[0], self.horizon, self.action_dim, generator=self.generator, device=self.device)
        with torch.no_grad():
            reference = deterministic_chain(self.ref_model, self.ref_model, self.cfg, self.dppo, cond, noise)
        samples = deterministic_chain(self.model, self.ref_model, self.cfg, self.dppo, cond, noise)
        return bc_regularizer(samples, reference)

    # -- what the runners and export read ---------------------------------------------------
    def parameters(self) -> list[torch.Tensor]:
        """Every learned tensor: the model's network, the noise network, the critic and the critic
        normaliser's statistics.
        """
        out = [*self._actor_params, *self.critic.parameters()]
        return out + [b for b in self.critic_normalizer.buffers() if b.is_floating_point()]

    def policy_module(self) -> nn.Module:
        """The evaluation policy ``obs -> action`` (:class:`ChainPolicy`), an independent CPU copy."""
        return ChainPolicy(self)

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, optimisers, generators and counters; ``model`` is ``ChunkModel.checkpoint()`` (so a
        fine-tuned run is itself an ``init_from`` or an export source) and ``ref_model`` the pre-trained one.
        """
        return {
            "model": self.model.checkpoint(),
            "ref_model": self.ref_model.checkpoint(),
            "noise_net": self.noise_net.state_dict() if self.noise_net is not None else None,
            "critic": self.critic.state_dict(),
            "critic_normalizer": self.critic_normalizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "eval_generator": self.eval_generator.get_state(),
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (the model's weights in place, so the optimiser keeps its tensors)."""
        self.model.load_state_dict(state["model"]["state"])
        self.ref_model.load_state_dict(state["ref_model"]["state"])
        if self.noise_net is not None and state.get("noise_net") is not None:
            self.noise_net.load_state_dict(state["noise_net"])
        self.critic.load_state_dict(state["critic"])
        self.critic_normalizer.load_state_dict(state["critic_normalizer"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.generator.set_state(state["generator"])
        self.eval_generator.set_state(state["eval_generator"])
        self.num_updates = int(state["num_updates"])


__all__ = ["COND_KEY", "CHAIN_KEY", "CRITIC_KEY", "ChainPolicy", "NoiseNet", "ReinFlow", "load_pretrained"]
