"""Offline agents: the common interface, target updates, observation statistics, checkpoints that
reproduce the next update exactly, and CQL/Cal-QL checkpoints that resume in SAC.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from robolearn.algos import (
    BC,
    CQL,
    IQL,
    SAC,
    TD3BC,
    BCConfig,
    CalQLConfig,
    CQLConfig,
    IQLConfig,
    SACConfig,
    TD3BCConfig,
)
from robolearn.types import Batch

OBS, PRIV, ACT = 5, 3, 2
GROUPS = {"policy": OBS, "critic": OBS + PRIV}
LOW, HIGH = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0])
H = (16, 16)


def _cfg(name: str):
    if name == "bc":
        return BC, BCConfig(actor_hidden=H)
    if name == "td3bc":
        return TD3BC, TD3BCConfig(actor_hidden=H, critic_hidden=H, critic_obs_group="critic")
    if name == "td3bc_hl":
        return TD3BC, TD3BCConfig(actor_hidden=H, critic_hidden=H, critic_type="hl_gauss", v_min=-5, v_max=5)
    if name == "iql":
        return IQL, IQLConfig(
            actor_hidden=H,
            critic_hidden=H,
            value_hidden=H,
            critic_obs_group="critic",
            actor_lr_decay_steps=50,
        )
    if name == "iql_det_hl":
        return IQL, IQLConfig(
            actor_hidden=H, critic_hidden=H, value_hidden=H, actor_type="deterministic",
            critic_type="hl_gauss", v_min=-5, v_max=5,
        )  # fmt: skip
    if name == "cql":
        return CQL, CQLConfig(
            actor_hidden=H, critic_hidden=H, critic_obs_group="critic", cql_n_actions=3, cql_lagrange=True,
            cql_target_action_gap=0.8, cql_max_target_backup=True, backup_entropy=True, bc_steps=2,
            target_update_period=2,
        )  # fmt: skip
    if name == "calql":
        return CQL, CalQLConfig(actor_hidden=H, critic_hidden=H, cql_n_actions=3)
    if name == "cql_hl":
        return CQL, CQLConfig(
            actor_hidden=H, critic_hidden=H, cql_n_actions=3, critic_type="hl_gauss", v_min=-5, v_max=5
        )
    raise KeyError(name)


AGENTS = ["bc", "td3bc", "td3bc_hl", "iql", "iql_det_hl", "cql", "calql", "cql_hl"]


def _make(name: str, seed: int = 0):
    cls, cfg = _cfg(name)
    return cls(GROUPS, ACT, cfg, action_low=LOW, action_high=HIGH, seed=seed)


def _obs(n: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    policy = 3.0 + 2.0 * torch.randn(n, OBS, generator=g)
    return {"policy": policy, "critic": torch.cat([policy, torch.randn(n, PRIV, generator=g)], -1)}


def _batch(n: int = 32, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        obs=_obs(n, g),
        action=LOW + (HIGH - LOW) * torch.rand(n, ACT, generator=g),
        reward=torch.randn(n, generator=g),
        next_obs=_obs(n, g),
        terminated=torch.rand(n, generator=g) < 0.2,
        truncated=torch.rand(n, generator=g) < 0.2,
        extras={"mc_return": torch.randn(n, generator=g)},
    )


def _normalise(agent) -> None:
    agent.set_obs_normalization(
        {"policy": torch.full((OBS,), 3.0), "critic": torch.full((OBS + PRIV,), 1.0)},
        {"policy": torch.full((OBS,), 2.0), "critic": torch.linspace(0.5, 2.0, OBS + PRIV)},
    )


def _params(agent) -> list[torch.Tensor]:
    nets = [agent.actor] + [
        getattr(agent, n) for n in ("critic", "target_critic", "target_actor", "value") if hasattr(agent, n)
    ]
    return [p for net in nets for p in net.parameters()]


@pytest.mark.parametrize("name", AGENTS)
def test_update_returns_detached_scalars_and_actions_stay_in_bounds(name):
    agent = _make(name)
    out = {}
    for i in range(2):  # TD3+BC's actor step comes on the second update
        out.update(agent.update(_batch(seed=i)))
    assert "loss_actor" in out
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 and not v.requires_grad for v in out.values())
    assert all(bool(torch.isfinite(v)) for v in out.values()), out
    action = agent.act_inference(_obs(64, torch.Generator().manual_seed(5)))
    assert action.shape == (64, ACT)
    assert bool(((action >= LOW) & (action <= HIGH)).all())
    # act() explores (offline learners fine-tune online too), inside the bounds
    explore = agent.act(_obs(64, torch.Generator().manual_seed(5)))
    assert not torch.equal(explore, action)
    assert bool(((explore >= LOW) & (explore <= HIGH)).all())


@pytest.mark.parametrize("name", AGENTS)
def test_state_dict_round_trip_reproduces_the_next_updates(name):
    agent = _make(name)
    _normalise(agent)
    for i in range(3):
        agent.update(_batch(seed=i))
    state = copy.deepcopy(agent.state_dict())
    assert {"actor", "obs_normalization", "normalized_networks", "generator", "num_updates"} <= set(state)
    other = _make(name, seed=123)  # different init and generator, no statistics: all come from the state
    other.load_state_dict(state)
    for i in range(3, 5):
        a, b = agent.update(_batch(seed=i)), other.update(_batch(seed=i))
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
    for p, q in zip(_params(agent), _params(other), strict=True):
        assert torch.equal(p, q)
    obs = _obs(8, torch.Generator().manual_seed(7))
    assert torch.equal(agent.act_inference(obs), other.act_inference(obs))


@pytest.mark.parametrize("name", ["td3bc", "iql", "cql"])
def test_checkpoint_networks_read_raw_observations(name):
    agent = _make(name)
    _normalise(agent)
    agent.update(_batch())
    state = copy.deepcopy(agent.state_dict())
    del state["normalized_networks"]  # only the folded raw-observation networks remain
    other = _make(name, seed=1)
    other.load_state_dict(state)
    obs = _obs(16, torch.Generator().manual_seed(3))
    torch.testing.assert_close(other.act_inference(obs), agent.act_inference(obs), rtol=1e-5, atol=1e-5)
    for p, q in zip(_params(agent), _params(other), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


def test_td3bc_delays_the_actor_and_lerps_targets_only_then():
    agent = _make("td3bc")
    tau = agent.cfg.tau
    actor0 = [p.clone() for p in agent.actor.parameters()]
    targets0 = [p.clone() for p in [*agent.target_actor.parameters(), *agent.target_critic.parameters()]]
    out = agent.update(_batch(seed=0))
    assert "loss_actor" not in out
    assert all(torch.equal(a, b) for a, b in zip(actor0, agent.actor.parameters(), strict=True))
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            targets0, [*agent.target_actor.parameters(), *agent.target_critic.parameters()], strict=True
        )
    )
    out = agent.update(_batch(seed=1))
    assert "loss_actor" in out and "lmbda" in out
    online = [*agent.actor.parameters(), *agent.critic.parameters()]
    new = [*agent.target_actor.parameters(), *agent.target_critic.parameters()]
    for t_old, t_new, o in zip(targets0, new, online, strict=True):
        assert torch.equal(t_new, torch.lerp(t_old, o, tau))


@pytest.mark.parametrize(("name", "period"), [("iql", 1), ("cql", 2)])
def test_target_critics_follow_by_polyak_every_period(name, period):
    agent = _make(name)
    tau = agent.cfg.tau
    for step in range(1, 5):
        before = [p.clone() for p in agent.target_critic.parameters()]
        agent.update(_batch(seed=step))
        after = list(agent.target_critic.parameters())
        if step % period == 0:
            for t_old, t_new, o in zip(before, after, agent.critic.parameters(), strict=True):
                assert torch.equal(t_new, torch.lerp(t_old, o, tau))
        else:
            assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize(("calibrated", "normalised"), [(False, False), (True, False), (True, True)])
def test_cql_checkpoint_resumes_in_sac(calibrated, normalised):
    cfg = CQLConfig(
        actor_hidden=H, critic_hidden=H, cql_n_actions=3, critic_obs_group="critic", calibrated=calibrated
    )
    agent = CQL(GROUPS, ACT, cfg, action_low=LOW, action_high=HIGH)
    if normalised:
        _normalise(agent)
    for i in range(2):
        agent.update(_batch(seed=i))
    sac = SAC(
        GROUPS, ACT, SACConfig(actor_hidden=H, critic_hidden=H, critic_obs_group="critic", learning_starts=0),
        action_low=LOW, action_high=HIGH, seed=7,
    )  # fmt: skip
    sac.load_state_dict(copy.deepcopy(agent.state_dict()))
    obs = _obs(32, torch.Generator().manual_seed(4))
    action = torch.rand(32, ACT)
    q_cql = agent.critic(agent.obs_norm("critic", obs["critic"]), action)
    if normalised:
        torch.testing.assert_close(sac.act_inference(obs), agent.act_inference(obs), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sac.critic(obs["critic"], action), q_cql, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(sac.act_inference(obs), agent.act_inference(obs))
        assert torch.equal(sac.critic(obs["critic"], action), q_cql)
        assert torch.equal(sac.target_critic.params["0__weight"], agent.target_critic.params["0__weight"])
    assert torch.equal(sac.log_alpha, agent.log_alpha.detach())
    assert sac.num_updates == agent.num_updates == 2
    # Online fine-tuning runs at SAC's own learning rates, not the offline checkpoint's.
    assert sac.actor_optimizer.param_groups[0]["lr"] == sac.cfg.actor_lr != cfg.actor_lr
    assert sac.alpha_optimizer.param_groups[0]["lr"] == sac.cfg.alpha_lr
    out = sac.update_step(_batch(seed=9))  # and online training goes on from there
    assert all(bool(torch.isfinite(v)) for v in out.values())


def test_a_sac_checkpoint_loads_into_a_normalised_cql():
    sac = SAC(GROUPS, ACT, SACConfig(actor_hidden=H, critic_hidden=H), action_low=LOW, action_high=HIGH)
    agent = CQL(
        GROUPS, ACT, CQLConfig(actor_hidden=H, critic_hidden=H), action_low=LOW, action_high=HIGH, seed=3
    )
    _normalise(agent)
    agent.load_state_dict(sac.state_dict())  # raw-observation networks, unfolded into the statistics
    obs = _obs(16, torch.Generator().manual_seed(2))
    torch.testing.assert_close(agent.act_inference(obs), sac.act_inference(obs), rtol=1e-5, atol=1e-5)


def test_cal_ql_needs_monte_carlo_returns():
    agent = _make("calql")
    batch = _batch()
    batch.extras = {}
    with pytest.raises(KeyError, match="mc_return"):
        agent.update(batch)


def test_cql_uses_corl_initialisation():
    agent = _make("cql")
    w = agent.critic.member(0)[2].weight  # the square hidden layer: orthogonal with gain sqrt(2)
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(16), atol=1e-5, rtol=0)
    with torch.no_grad():
        q = agent.critic(torch.randn(64, OBS + PRIV), torch.rand(64, ACT))
    assert float(q.abs().max()) < 0.1  # output layer at gain 1e-2: Q starts near 0


def test_asymmetric_groups_and_bad_inputs_are_named():
    agent = _make("iql")
    assert (
        agent.actor.obs_dim == OBS and agent.critic.obs_dim == OBS + PRIV and agent.value.in_dim == OBS + PRIV
    )
    with pytest.raises(ValueError, match="observation group 'critic'"):
        IQL({"policy": OBS}, ACT, IQLConfig(critic_obs_group="critic"))
    with pytest.raises(ValueError, match="expects 5 values"):
        agent.set_obs_normalization({"policy": torch.zeros(4)}, {"policy": torch.ones(4)})
    with pytest.raises(ValueError, match="std > 0"):
        agent.set_obs_normalization({"policy": torch.zeros(OBS)}, {"policy": torch.zeros(OBS)})
    with pytest.raises(ValueError, match="v_min, v_max"):
        CQLConfig(critic_type="hl_gauss")
    with pytest.raises(ValueError, match="critic_type"):
        TD3BCConfig(critic_type="huber")
    with pytest.raises(ValueError, match="expectile"):
        IQLConfig(expectile=1.0)
    with pytest.raises(ValueError, match="actor_type"):
        IQLConfig(actor_type="diffusion")
    with pytest.raises(ValueError, match="policy_delay"):
        TD3BCConfig(policy_delay=0)
    with pytest.raises(ValueError, match="cql_n_actions"):
        CQLConfig(cql_n_actions=0)
    assert CalQLConfig().calibrated and not CQLConfig().calibrated


@pytest.mark.parametrize("config", [IQLConfig, TD3BCConfig, CQLConfig, CalQLConfig])
@pytest.mark.parametrize(
    ("field", "value"),
    [("batch_size", 2.5), ("num_critics", 0), ("buffer_size", True), ("gamma", 1.5), ("tau", 0.0), ("actor_lr", 0.0),
     ("critic_lr", -1e-3)],
)
def test_the_shared_offline_fields_are_checked_by_every_learner(config, field, value):
    # The four configs take these fields from one base: each must still run its checks (a subclass
    # whose __post_init__ forgot super() would take any of these values).
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        config(**{field: value})
    assert config().critic_group == "policy" and config(critic_obs_group="critic").critic_group == "critic"


def test_iql_actor_learning_rate_follows_a_cosine_to_zero():
    cls, cfg = _cfg("iql")
    cfg.actor_lr_decay_steps = 4
    agent = cls(GROUPS, ACT, cfg)
    lrs = []
    for i in range(4):
        agent.update(_batch(seed=i))
        lrs.append(agent.actor_optimizer.param_groups[0]["lr"])
    base = cfg.actor_lr
    expected = [base * (1 + math.cos(math.pi * k / 4)) / 2 for k in range(1, 5)]
    assert lrs == pytest.approx(expected, abs=1e-12)
    assert agent.critic_optimizer.param_groups[0]["lr"] == cfg.critic_lr
