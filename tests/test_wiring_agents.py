"""Agent-level wiring: what each learner's ``update`` feeds its losses, checked against targets built
here by hand from the agent's own networks before the step.

The pure losses have their own tests (test_sac.py, test_offline_losses.py); these pin what the
agents hand them: TD targets built from ``batch.next_obs`` (not ``obs``), bootstrapping through
time-outs and stopping only at terminals, the target networks (not the online ones) in the
target, the same observation statistics on ``obs`` and ``next_obs``, target networks that follow
the critic by exactly ``tau`` inside ``update``, and PPO's running normaliser applied alike to the
observation, the time-out's final observation and the last observation of a rollout. Each test
fails on the one-line bug its name describes (see tests/MUTATIONS.md).
"""

from __future__ import annotations

import copy

import pytest
import torch

from robolearn.algos import (
    CQL,
    IQL,
    PPO,
    SAC,
    TD3BC,
    CalQLConfig,
    CQLConfig,
    IQLConfig,
    PPOConfig,
    SACConfig,
    TD3BCConfig,
)
from robolearn.types import Batch, Transition

OBS, PRIV, ACT, B = 4, 3, 2, 12
GROUPS = {"policy": OBS, "critic": OBS + PRIV}
LOW, HIGH = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0])
H = (16, 16)
GAMMA = 0.9


def _obs(n: int, g: torch.Generator, shift: float = 0.0) -> dict[str, torch.Tensor]:
    policy = 2.0 + shift + 1.5 * torch.randn(n, OBS, generator=g)
    return {"policy": policy, "critic": torch.cat([policy, torch.randn(n, PRIV, generator=g) - 1.0], -1)}


def _batch(seed: int = 0) -> Batch:
    """A third of the rows terminated, a third timed out (truncated, not terminated), a third going
    on; ``next_obs`` drawn apart from ``obs`` so that a target built from the wrong one differs.
    """
    g = torch.Generator().manual_seed(seed)
    kind = torch.arange(B) % 3
    return Batch(
        obs=_obs(B, g),
        action=LOW + (HIGH - LOW) * torch.rand(B, ACT, generator=g),
        reward=torch.randn(B, generator=g),
        next_obs=_obs(B, g, shift=1.0),
        terminated=kind == 0,
        truncated=kind == 1,
        extras={"mc_return": torch.randn(B, generator=g)},
    )


def _perturb(module: torch.nn.Module, seed: int = 5) -> None:
    """Move a target network away from its online twin (they start equal), so that a target built
    from the wrong one of the two differs.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))


def _copy_generator(gen: torch.Generator) -> torch.Generator:
    return torch.Generator(device=gen.device).set_state(gen.get_state())


def _bootstrap(batch: Batch, next_value: torch.Tensor) -> torch.Tensor:
    """``r + gamma * (1 - terminated) * next_value``, written out: only terminals stop it."""
    keep = torch.where(batch.terminated, 0.0, 1.0)
    return batch.reward + GAMMA * keep * next_value


def _assert_discriminates(target: torch.Tensor, wrong: list[torch.Tensor]) -> None:
    """The test only means something if the plausible wrong targets differ from the right one."""
    for w in wrong:
        assert not torch.allclose(target, w, atol=1e-3), "the batch does not tell the wrong target apart"


# -- SAC ----------------------------------------------------------------------------------------------
def _sac(**overrides: object) -> SAC:
    cfg = SACConfig(
        actor_hidden=H, critic_hidden=H, critic_obs_group="critic", learning_starts=0, batch_size=B, gamma=GAMMA,
        **overrides,
    )
    return SAC(GROUPS, ACT, cfg, action_low=LOW, action_high=HIGH, seed=0)


def test_sac_target_bootstraps_from_next_obs_through_time_outs_only():
    agent = _sac()
    _perturb(agent.target_critic)
    batch = _batch()
    # The first draw of the step is the next action a' ~ pi(s'); replay it from a copy of the generator.
    g = _copy_generator(agent.generator)
    with torch.no_grad():
        alpha = agent.alpha
        a_next, logp_next = agent.actor(batch.next_obs["policy"], generator=g)
        next_v = agent.target_critic(batch.next_obs["critic"], a_next).min(0).values - alpha * logp_next
        target = _bootstrap(batch, next_v)
        q = agent.critic(batch.obs["critic"], batch.action)  # [E, B] before the step
        a_same, logp_same = agent.actor(batch.obs["policy"], generator=_copy_generator(agent.generator))
        from_obs = agent.target_critic(batch.obs["critic"], a_same).min(0).values - alpha * logp_same
        online = agent.critic(batch.next_obs["critic"], a_next).min(0).values - alpha * logp_next
    _assert_discriminates(
        target,
        [
            _bootstrap(batch, from_obs),
            torch.where(batch.truncated, batch.reward, target),  # time-outs treated as terminal
            _bootstrap(batch, online),
        ],
    )
    out = agent.update(batch)
    torch.testing.assert_close(out["target_mean"], target.mean())
    # The loss holds every row's target, not only their mean: sum over critics of the mean squared error.
    torch.testing.assert_close(out["loss_critic"], (q - target).square().mean(1).sum())


@pytest.mark.parametrize("source", ["batch", "replay"])
def test_sac_target_critic_follows_the_critic_by_tau_inside_update(source):
    tau = 0.1
    agent = _sac(tau=tau)
    batch = _batch()
    if source == "replay":
        agent.process(Transition(batch.obs, batch.action, batch.reward, batch.next_obs, batch.terminated, batch.truncated))
    _perturb(agent.target_critic)
    old = [p.detach().clone() for p in agent.target_critic.parameters()]
    agent.update(batch if source == "batch" else None)
    assert agent.num_updates == 1
    for t_old, t_new, online in zip(old, agent.target_critic.parameters(), agent.critic.parameters(), strict=True):
        # The lerp runs after the critic's step, towards the updated critic.
        torch.testing.assert_close(t_new, t_old + tau * (online - t_old), rtol=1e-6, atol=1e-7)
        assert not torch.allclose(t_new, t_old) and not torch.allclose(t_new, online)


# -- offline learners ------------------------------------------------------------------------------------
def _stats() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    mean = {"policy": torch.full((OBS,), 2.0), "critic": torch.linspace(-1.0, 2.5, OBS + PRIV)}
    std = {"policy": torch.full((OBS,), 1.5), "critic": torch.linspace(0.5, 2.0, OBS + PRIV)}
    return mean, std


def _normalised(group: str, x: torch.Tensor) -> torch.Tensor:
    mean, std = _stats()
    return (x - mean[group]) / std[group]


def _offline(name: str):
    common = {"actor_hidden": H, "critic_hidden": H, "critic_obs_group": "critic", "gamma": GAMMA}
    if name == "td3bc":
        cls, cfg = TD3BC, TD3BCConfig(**common, policy_noise=0.3, noise_clip=0.4)
    elif name == "iql":
        cls, cfg = IQL, IQLConfig(**common, value_hidden=H)
    elif name == "cql":
        cls, cfg = CQL, CQLConfig(**common, cql_n_actions=3)
    else:
        cls, cfg = CQL, CalQLConfig(**common, cql_n_actions=3)
    agent = cls(GROUPS, ACT, cfg, action_low=LOW, action_high=HIGH, seed=0)
    agent.set_obs_normalization(*_stats())
    _perturb(agent.target_critic)
    if name == "td3bc":
        _perturb(agent.target_actor, seed=6)
    return agent


@torch.no_grad()
def _offline_next_value(
    name: str, agent, batch: Batch, next_obs: dict[str, torch.Tensor], normalise: bool = True
) -> torch.Tensor:
    """The learner's ``V(s')`` built by hand from raw ``next_obs`` (normalised here unless told not to)."""
    s_actor, s_critic = next_obs["policy"], next_obs["critic"]
    if normalise:
        s_actor, s_critic = _normalised("policy", s_actor), _normalised("critic", s_critic)
    if name == "iql":  # r + gamma * V(s'): the value network
        return agent.value(s_critic).squeeze(-1)
    if name == "td3bc":  # min_e Q'_e(s', clip(pi'(s') + clipped noise)); the noise is the step's first draw
        noise = torch.randn(batch.action.shape, generator=_copy_generator(agent.generator))
        scale = (HIGH - LOW) / 2
        a = agent.target_actor(s_actor) + (noise * 0.3).clamp(-0.4, 0.4) * scale
        return agent.target_critic(s_critic, torch.minimum(torch.maximum(a, LOW), HIGH)).min(0).values
    # CQL / Cal-QL: min_e Q'_e(s', a') at a policy sample a'; the target critics below ignore the
    # action, so the value does not depend on which sample the step draws.
    return agent.target_critic(s_critic, torch.zeros(s_critic.shape[0], ACT)).min(0).values


@pytest.mark.parametrize("name", ["td3bc", "iql", "cql", "calql"])
def test_offline_targets_bootstrap_from_normalised_next_obs_through_time_outs_only(name):
    agent = _offline(name)
    if name in ("cql", "calql"):
        with torch.no_grad():  # the target critics read only the observation columns
            agent.target_critic.params["0__weight"][..., OBS + PRIV :] = 0.0
    batch = _batch()
    target = _bootstrap(batch, _offline_next_value(name, agent, batch, batch.next_obs))
    with torch.no_grad():
        q = agent.critic(_normalised("critic", batch.obs["critic"]), batch.action)  # [E, B] before the step
    _assert_discriminates(
        target,
        [
            _bootstrap(batch, _offline_next_value(name, agent, batch, batch.obs)),  # from obs
            torch.where(batch.truncated, batch.reward, target),  # time-outs as terminals
            _bootstrap(batch, _offline_next_value(name, agent, batch, batch.next_obs, normalise=False)),
        ],
    )
    out = agent.update(batch)
    torch.testing.assert_close(out["target_mean"], target.mean())
    # The same statistics on obs: the predictions the loss reports are those of normalised obs.
    torch.testing.assert_close(out["q_mean"], q.mean())
    per_row = (q - target).square()
    if name == "td3bc":
        torch.testing.assert_close(out["loss_critic"], per_row.mean(1).sum())
    elif name == "iql":
        torch.testing.assert_close(out["loss_critic"], per_row.mean())
    else:
        torch.testing.assert_close(out["td_loss"], per_row.mean())


# -- PPO ---------------------------------------------------------------------------------------------------
def test_ppo_applies_one_running_normaliser_to_obs_final_obs_and_last_obs():
    dims = {"policy": OBS, "critic": OBS + PRIV}
    cfg = PPOConfig(num_steps=3, num_minibatches=1, actor_hidden=H, critic_hidden=H, critic_obs_group="critic", gamma=GAMMA, lam=0.8)
    ppo = PPO(dims, ACT, cfg)
    assert cfg.normalize_obs
    g = torch.Generator().manual_seed(0)
    n = 4
    truncated = torch.tensor([True, False, False, False])
    values, timeout_values, rewards = [], [], []
    for t in range(cfg.num_steps):
        obs = _obs(n, g, shift=float(t))
        action = ppo.act(obs)
        norm = copy.deepcopy(ppo.critic_normalizer)  # as updated with this step's observations
        final = _obs(n, g, shift=5.0)
        reward = torch.randn(n, generator=g)
        ppo.process(Transition(obs, action, reward, final, torch.zeros(n, dtype=torch.bool), truncated))
        with torch.no_grad():
            assert torch.equal(ppo.storage.obs["critic"][t], norm(obs["critic"]))
            values.append(ppo.critic(norm(obs["critic"])).squeeze(-1))
            timeout_values.append(ppo.critic(norm(final["critic"])).squeeze(-1))
            unnormalised = ppo.critic(final["critic"]).squeeze(-1)
        assert not torch.allclose(timeout_values[-1], unnormalised, atol=1e-3)
        torch.testing.assert_close(ppo.storage.values[t], values[-1])
        torch.testing.assert_close(ppo.storage.timeout_values[t], timeout_values[-1])
        rewards.append(reward)
    last = _obs(n, g, shift=3.0)
    ppo.compute_returns(last)
    with torch.no_grad():
        last_v = ppo.critic(ppo.critic_normalizer(last["critic"])).squeeze(-1)
    # The last step: a time-out bootstraps from V(final obs), the others from V(last obs).
    t = cfg.num_steps - 1
    expected = torch.where(truncated, rewards[t] + GAMMA * timeout_values[t], rewards[t] + GAMMA * last_v)
    torch.testing.assert_close(ppo.storage.returns[t], expected)
