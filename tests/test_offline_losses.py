"""Offline learners' pure losses: hand-computed values (HL-Gauss, expectile, TD3+BC's normalisation,
CQL's conservative term against an explicit loop, Cal-QL's calibration) and gradient isolation.
"""

from __future__ import annotations

import math

import pytest
import torch

from robolearn.algos import bc, cql, iql, td3bc
from robolearn.algos.sac.losses import alpha_loss
from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble, make_target
from robolearn.nn.hlgauss import HLGauss, hl_gauss_probs
from robolearn.nn.mlp import MLP
from robolearn.nn.offline import DeterministicActor, fold_first_layer
from robolearn.types import Batch

OBS, ACT, B = 5, 2, 16


def _batch(n: int = B, seed: int = 0, obs: int = OBS) -> Batch:
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(n, generator=g) < 0.3
    # Time-outs are present everywhere below; the hand-computed targets bootstrap through them.
    return Batch(
        obs={"policy": torch.randn(n, obs, generator=g)},
        action=torch.rand(n, ACT, generator=g) * 2 - 1,
        reward=torch.randn(n, generator=g),
        next_obs={"policy": torch.randn(n, obs, generator=g)},
        terminated=terminated,
        truncated=~terminated & (torch.rand(n, generator=g) < 0.5),
        extras={"mc_return": torch.randn(n, generator=g)},
    )


def _perturb(module: torch.nn.Module, seed: int = 9) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))


def _all_grad(module: torch.nn.Module) -> bool:
    return all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in module.parameters())


def _no_grad(*modules: torch.nn.Module) -> bool:
    return all(p.grad is None for m in modules for p in m.parameters())


# -- HL-Gauss -----------------------------------------------------------------------------------------
def test_hl_gauss_histogram_matches_gaussian_cdf_and_recovers_the_value():
    hl = HLGauss(num_bins=21, v_min=-5.0, v_max=5.0)
    assert hl.sigma == pytest.approx(0.75 * 10.0 / 21)
    y = torch.tensor([-3.3, -0.01, 0.0, 1.234, 2.9], dtype=torch.float64)
    p = hl_gauss_probs(y, hl.edges.double(), hl.sigma)
    torch.testing.assert_close(p.sum(-1), torch.ones(5, dtype=torch.float64))
    # Bin i holds Phi((b_{i+1}-y)/s) - Phi((b_i-y)/s), renormalised over [v_min, v_max].
    edges = hl.edges.double().tolist()

    def phi(z: float) -> float:
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))

    for row, yi in zip(p.tolist(), y.tolist(), strict=True):
        z = phi((5.0 - yi) / hl.sigma) - phi((-5.0 - yi) / hl.sigma)
        manual = [
            (phi((edges[i + 1] - yi) / hl.sigma) - phi((edges[i] - yi) / hl.sigma)) / z for i in range(21)
        ]
        assert row == pytest.approx(manual, abs=1e-12)
    # Interior values are recovered by the histogram's mean (aliasing error ~ exp(-2 pi^2 0.75^2) bin widths).
    mean = (p * hl.centers.double()).sum(-1)
    torch.testing.assert_close(mean, y, atol=1e-4, rtol=0)
    # float32 path, and the value of logits equal to the log histogram
    p32 = hl.probs(y.float())
    torch.testing.assert_close(hl.value(p32.log()), y.float(), atol=1e-3, rtol=0)


def test_hl_gauss_out_of_range_targets_clamp_to_the_edge():
    hl = HLGauss(num_bins=11, v_min=0.0, v_max=1.0)
    p = hl.probs(torch.tensor([-1e6, 0.0, 1.0, 1e6]))
    assert bool(torch.isfinite(p).all())
    torch.testing.assert_close(p[0], p[1])
    torch.testing.assert_close(p[3], p[2])


def test_hl_gauss_cross_entropy_matches_manual():
    hl = HLGauss(num_bins=7, v_min=-1.0, v_max=2.0)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 7, generator=g, requires_grad=True)
    target = torch.tensor([-0.5, 0.1, 1.0, 1.9])
    loss = hl.loss(logits, target)
    assert loss.shape == (3, 4)
    for e in range(3):
        for b in range(4):
            p = hl.probs(target[b])
            q = torch.softmax(logits[e, b].detach(), -1)
            assert float(loss[e, b].detach()) == pytest.approx(float(-(p * q.log()).sum()), rel=1e-5)
    # The gradient of CE w.r.t. logits is softmax - p: zero exactly at the target histogram.
    loss.sum().backward()
    torch.testing.assert_close(logits.grad, torch.softmax(logits.detach(), -1) - hl.probs(target))
    with pytest.raises(ValueError, match="v_max"):
        HLGauss(5, 1.0, 1.0)


def test_critic_ensemble_default_is_unchanged_and_multi_output_has_a_bin_axis():
    torch.manual_seed(3)
    a = CriticEnsemble(OBS, ACT, 3, (8,))
    torch.manual_seed(3)
    b = CriticEnsemble(OBS, ACT, 3, (8,), num_outputs=1)
    obs, act = torch.randn(4, OBS), torch.randn(4, ACT)
    assert a(obs, act).shape == (3, 4)
    assert torch.equal(a(obs, act), b(obs, act))
    multi = CriticEnsemble(OBS, ACT, 3, (8,), num_outputs=9)
    assert multi(obs, act).shape == (3, 4, 9)
    assert multi.forward_subset(torch.tensor([1]), obs, act).shape == (1, 4, 9)


# -- BC and observation folding ------------------------------------------------------------------------
def test_bc_loss_is_the_mean_squared_action_error():
    torch.manual_seed(0)
    actor = DeterministicActor(OBS, ACT, (8,), action_low=[-1.0, 0.0], action_high=[1.0, 2.0])
    batch = _batch()
    out = bc.bc_loss(actor, batch.obs["policy"], batch.action)
    pi = actor(batch.obs["policy"]).detach()
    assert bool(((pi > torch.tensor([-1.0, 0.0])) & (pi < torch.tensor([1.0, 2.0]))).all())
    assert float(out["loss_actor"].detach()) == pytest.approx(
        float(((pi - batch.action) ** 2).mean()), rel=1e-6
    )
    out["loss_actor"].backward()
    assert _all_grad(actor)


def test_folding_the_statistics_gives_a_raw_observation_network():
    torch.manual_seed(0)
    actor = TanhGaussianActor(OBS, ACT, (8,))
    critic = CriticEnsemble(OBS, ACT, 2, (8,))
    mean, std = torch.randn(OBS), torch.rand(OBS) + 0.5
    x, a = torch.randn(6, OBS) * 3, torch.rand(6, ACT)
    raw_actor = TanhGaussianActor(OBS, ACT, (8,))
    raw_actor.load_state_dict(fold_first_layer(actor.state_dict(), "net.0.", mean, std))
    torch.testing.assert_close(raw_actor.act_deterministic(x), actor.act_deterministic((x - mean) / std))
    raw_critic = CriticEnsemble(OBS, ACT, 2, (8,))
    raw_critic.load_state_dict(fold_first_layer(critic.state_dict(), "params.0__", mean, std))
    torch.testing.assert_close(raw_critic(x, a), critic((x - mean) / std, a))
    back = fold_first_layer(raw_critic.state_dict(), "params.0__", mean, std, inverse=True)
    for k, v in critic.state_dict().items():
        torch.testing.assert_close(back[k], v)


# -- TD3+BC ---------------------------------------------------------------------------------------------
def _td3_nets(hl: HLGauss | None = None):
    torch.manual_seed(0)
    actor = DeterministicActor(OBS, ACT, (16,))
    critic = CriticEnsemble(OBS, ACT, 2, (16,), num_outputs=1 if hl is None else hl.num_bins)
    target_actor, target_critic = make_target(actor), make_target(critic)
    _perturb(target_critic)
    return actor, critic, target_actor, target_critic


def test_td3bc_actor_loss_normalises_by_mean_abs_q():
    actor, critic, _, _ = _td3_nets()
    batch = _batch()
    out = td3bc.actor_loss(actor, critic, batch, 2.5, "policy", "policy")
    obs = batch.obs["policy"]
    pi = actor(obs).detach()
    q = critic.member(0)(torch.cat([obs, pi], -1)).squeeze(-1).detach()  # the first critic only
    lmbda = 2.5 / q.abs().mean()
    expected = -lmbda * q.mean() + ((pi - batch.action) ** 2).mean()
    assert float(out["loss_actor"].detach()) == pytest.approx(float(expected), rel=1e-5)
    assert float(out["lmbda"]) == pytest.approx(float(lmbda), rel=1e-5)
    out["loss_actor"].backward()
    grads = [p.grad.clone() for p in actor.parameters()]
    assert _all_grad(actor) and _no_grad(critic)
    # Scaling every Q by 10 (the last layer of the critic) leaves the loss and its gradient unchanged.
    with torch.no_grad():
        critic.params["2__weight"].mul_(10.0)
        critic.params["2__bias"].mul_(10.0)
    actor.zero_grad(set_to_none=True)
    scaled = td3bc.actor_loss(actor, critic, batch, 2.5, "policy", "policy")
    assert float(scaled["loss_actor"].detach()) == pytest.approx(float(out["loss_actor"].detach()), rel=1e-5)
    scaled["loss_actor"].backward()
    for g1, p in zip(grads, actor.parameters(), strict=True):
        torch.testing.assert_close(p.grad, g1, rtol=1e-4, atol=1e-6)


def test_td3bc_target_smoothing_is_clipped_and_scaled_to_the_bounds():
    torch.manual_seed(0)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actor = DeterministicActor(OBS, ACT, (8,), action_low=low, action_high=high)
    obs = torch.randn(64, OBS)
    base = actor(obs)
    big = torch.full((64, ACT), 100.0)
    a = td3bc.smoothed_target_action(actor, obs, big, 0.2, 0.5)
    # noise clipped at 0.5 * half-range (2.0 and 0.5), then clamped into the bounds
    torch.testing.assert_close(a, torch.minimum(base + torch.tensor([1.0, 0.25]), high))
    small = torch.full((64, ACT), 0.5)
    torch.testing.assert_close(
        td3bc.smoothed_target_action(actor, obs, small, 0.2, 0.5),
        torch.clamp(base + 0.1 * torch.tensor([2.0, 0.5]), low, high),
    )


@pytest.mark.parametrize("critic_type", ["mse", "hl_gauss"])
def test_td3bc_critic_loss_reaches_only_the_critic(critic_type):
    hl = HLGauss(11, -5.0, 5.0) if critic_type == "hl_gauss" else None
    actor, critic, target_actor, target_critic = _td3_nets(hl)
    batch = _batch()
    noise = torch.randn(B, ACT)
    out = td3bc.critic_loss(
        critic, target_critic, target_actor, batch, noise, 0.9, 0.2, 0.5, "policy", "policy", hl
    )
    out["loss_critic"].backward()
    assert _all_grad(critic) and _no_grad(actor, target_actor, target_critic)
    if hl is None:
        with torch.no_grad():
            next_a = td3bc.smoothed_target_action(target_actor, batch.next_obs["policy"], noise, 0.2, 0.5)
            nq = target_critic(batch.next_obs["policy"], next_a).min(0).values
            y = batch.reward + 0.9 * (~batch.terminated).float() * nq
            q = critic(batch.obs["policy"], batch.action)
        assert float(out["loss_critic"].detach()) == pytest.approx(
            float(((q - y) ** 2).mean(1).sum()), rel=1e-5
        )


# -- IQL ------------------------------------------------------------------------------------------------
def test_expectile_loss_by_hand():
    diff = torch.tensor([2.0, -1.0, 0.5, -3.0])
    # weights 0.7, 0.3, 0.7, 0.3 on squares 4, 1, 0.25, 9: (2.8 + 0.3 + 0.175 + 2.7) / 4
    assert float(iql.expectile_loss(diff, 0.7)) == pytest.approx(5.975 / 4)
    assert float(iql.expectile_loss(diff, 0.5)) == pytest.approx(0.5 * (4 + 1 + 0.25 + 9) / 4)


def _iql_nets(actor_type: str = "gaussian", hl: HLGauss | None = None):
    torch.manual_seed(0)
    cls = TanhGaussianActor if actor_type == "gaussian" else DeterministicActor
    actor = cls(OBS, ACT, (16,))
    critic = CriticEnsemble(OBS, ACT, 2, (16,), num_outputs=1 if hl is None else hl.num_bins)
    target = make_target(critic)
    _perturb(target)
    value = MLP(OBS, 1, (16,), "relu")
    return actor, critic, target, value


@pytest.mark.parametrize("critic_type", ["mse", "hl_gauss"])
def test_iql_value_and_critic_losses_reach_only_their_networks(critic_type):
    hl = HLGauss(11, -5.0, 5.0) if critic_type == "hl_gauss" else None
    actor, critic, target, value = _iql_nets(hl=hl)
    batch = _batch()
    v_out = iql.value_loss(value, target, batch, 0.7, "policy", hl)
    v_out["loss_value"].backward()
    assert _all_grad(value) and _no_grad(critic, target, actor)
    assert not v_out["advantage"].requires_grad
    value.zero_grad(set_to_none=True)
    q_out = iql.critic_loss(critic, value, batch, 0.9, "policy", hl)
    q_out["loss_critic"].backward()
    assert _all_grad(critic) and _no_grad(value, target, actor)
    if hl is None:
        obs = batch.obs["policy"]
        with torch.no_grad():
            q_t = target(obs, batch.action).min(0).values
            v = value(obs).squeeze(-1)
            y = batch.reward + 0.9 * (~batch.terminated).float() * value(batch.next_obs["policy"]).squeeze(-1)
            q = critic(obs, batch.action)
        assert float(v_out["loss_value"].detach()) == pytest.approx(
            float(iql.expectile_loss(q_t - v, 0.7)), rel=1e-6
        )
        # CORL averages its twin Q losses.
        assert float(q_out["loss_critic"].detach()) == pytest.approx(float(((q - y) ** 2).mean()), rel=1e-5)


@pytest.mark.parametrize("actor_type", ["gaussian", "deterministic"])
def test_iql_actor_loss_weights_and_isolation(actor_type):
    actor, _, _, value = _iql_nets(actor_type)
    batch = _batch(n=4)
    adv = value(batch.obs["policy"]).squeeze(-1) * 0 + torch.tensor([-1.0, 0.0, 0.5, 3.0])  # attached to V
    out = iql.actor_loss(actor, batch, adv, 3.0, 100.0, "policy")
    weights = torch.tensor([math.exp(-3.0), 1.0, math.exp(1.5), 100.0])  # exp(9) clipped to 100
    obs = batch.obs["policy"]
    if actor_type == "gaussian":
        bc_term = -actor.log_prob(obs, batch.action)
    else:
        bc_term = ((actor(obs) - batch.action) ** 2).sum(-1)
    assert float(out["loss_actor"].detach()) == pytest.approx(
        float((weights * bc_term.detach()).mean()), rel=1e-5
    )
    out["loss_actor"].backward()
    assert _all_grad(actor) and _no_grad(value)


# -- CQL / Cal-QL ----------------------------------------------------------------------------------------
def _cql_nets(hl: HLGauss | None = None, low=(-1.0, -1.0), high=(1.0, 1.0)):
    torch.manual_seed(0)
    actor = TanhGaussianActor(OBS, ACT, (16,), action_low=list(low), action_high=list(high))
    critic = CriticEnsemble(OBS, ACT, 2, (16,), num_outputs=1 if hl is None else hl.num_bins)
    target = make_target(critic)
    _perturb(target)
    return actor, critic, target


@pytest.mark.parametrize(("importance_sample", "temp"), [(True, 1.0), (False, 1.0), (True, 0.5)])
def test_cql_critic_loss_matches_an_explicit_loop(importance_sample, temp):
    low, high = (-2.0, 0.0), (0.0, 3.0)  # widths 2 and 3: log uniform density -log 6
    actor, critic, target = _cql_nets(low=low, high=high)
    n_b, n_a, gamma, alpha, weight = 3, 2, 0.9, 0.3, 5.0
    batch = _batch(n=n_b)
    batch.action = torch.rand(n_b, ACT) * torch.tensor([2.0, 3.0]) + torch.tensor(low)
    samples = cql.sample_actions(
        actor, batch.obs["policy"], batch.next_obs["policy"], n_a, False, torch.Generator().manual_seed(1)
    )
    assert bool((samples.random >= torch.tensor(low)).all() & (samples.random <= torch.tensor(high)).all())
    assert float(samples.log_uniform_density) == pytest.approx(-math.log(6.0))
    out = cql.critic_loss(
        critic, target, batch, samples, torch.tensor(alpha), weight, gamma, "policy",
        backup_entropy=True, temp=temp, importance_sample=importance_sample,
    )  # fmt: skip

    members = [critic.member(e) for e in range(2)]
    targets = [target.member(e) for e in range(2)]

    @torch.no_grad()
    def q(m, s, a) -> float:
        return float(m(torch.cat([s, a])).squeeze())

    obs, nxt = batch.obs["policy"], batch.next_obs["policy"]
    log_u = -math.log(6.0)
    total, gaps = 0.0, []
    for m in members:
        td, gap = 0.0, 0.0
        for i in range(n_b):
            nv = min(q(t, nxt[i], samples.backup[i, 0]) for t in targets)
            nv -= alpha * float(samples.backup_log_prob[i, 0])
            y = float(batch.reward[i]) + gamma * (0.0 if bool(batch.terminated[i]) else 1.0) * nv
            qd = q(m, obs[i], batch.action[i])
            td += (qd - y) ** 2 / n_b
            terms = []
            for j in range(n_a):
                c = importance_sample
                terms.append(q(m, obs[i], samples.random[i, j]) - (log_u if c else 0.0))
                terms.append(
                    q(m, obs[i], samples.current[i, j])
                    - (float(samples.current_log_prob[i, j]) if c else 0.0)
                )
                terms.append(
                    q(m, obs[i], samples.next[i, j]) - (float(samples.next_log_prob[i, j]) if c else 0.0)
                )
            if not importance_sample:
                terms.append(qd)
            lse = temp * math.log(sum(math.exp(t / temp) for t in terms))
            gap += (lse - qd) / n_b
        gaps.append(gap)
        total += td + weight * gap
    assert out["cql_gap"].tolist() == pytest.approx(gaps, rel=1e-4)
    assert float(out["loss_critic"].detach()) == pytest.approx(total, rel=1e-4)


def test_cal_ql_lifts_policy_q_exactly_where_mc_return_is_higher():
    # One critic, two states, one action of each kind; importance weights zeroed for readability.
    dummy = torch.zeros(2, 1, ACT)
    samples = cql.CQLSamples(
        random=dummy, log_uniform_density=torch.tensor(0.0), current=dummy, current_log_prob=torch.zeros(2, 1),
        next=dummy, next_log_prob=torch.zeros(2, 1), backup=dummy, backup_log_prob=torch.zeros(2, 1),
    )  # fmt: skip
    q_data = torch.zeros(1, 2)
    q_rand = torch.tensor([[[1.0], [1.0]]])
    q_cur = torch.tensor([[[2.0], [-1.0]]], requires_grad=True)
    q_next = torch.tensor([[[0.5], [3.0]]], requires_grad=True)
    mc = torch.tensor([1.0, 1.0])
    plain = cql.conservative_gap(q_data, q_rand, q_cur, q_next, samples)
    cal = cql.conservative_gap(q_data, q_rand, q_cur, q_next, samples, mc_return=mc)
    e = math.exp
    # CQL: state 0 sees (1, 2, 0.5), state 1 sees (1, -1, 3).
    assert float(plain[0].detach()) == pytest.approx(
        0.5 * (math.log(e(1) + e(2) + e(0.5)) + math.log(e(1) + e(-1) + e(3)))
    )
    # Cal-QL: next-action Q 0.5 < 1 lifted in state 0, current-action Q -1 < 1 lifted in state 1.
    assert float(cal[0].detach()) == pytest.approx(
        0.5 * (math.log(e(1) + e(2) + e(1)) + math.log(e(1) + e(1) + e(3)))
    )
    cal.sum().backward()
    # The lifted entries are constants: no gradient pushes them down; the others still get one.
    assert float(q_next.grad[0, 0, 0]) == 0.0 and float(q_cur.grad[0, 1, 0]) == 0.0
    assert float(q_cur.grad[0, 0, 0]) > 0.0 and float(q_next.grad[0, 1, 0]) > 0.0
    # A bound below every Q changes nothing, bit for bit.
    low = cql.conservative_gap(q_data, q_rand, q_cur, q_next, samples, mc_return=torch.full((2,), -1e9))
    assert torch.equal(low, plain)


@pytest.mark.parametrize("critic_type", ["mse", "hl_gauss"])
def test_cql_losses_reach_only_their_parameters(critic_type):
    hl = HLGauss(11, -5.0, 5.0) if critic_type == "hl_gauss" else None
    actor, critic, target = _cql_nets(hl)
    batch = _batch()
    g = torch.Generator().manual_seed(0)
    samples = cql.sample_actions(actor, batch.obs["policy"], batch.next_obs["policy"], 3, True, g)
    assert samples.backup.shape == (B, 3, ACT) and not samples.current.requires_grad
    log_alpha = torch.zeros((), requires_grad=True)
    log_alpha_prime = torch.ones((), requires_grad=True)
    c_out = cql.critic_loss(
        critic, target, batch, samples, log_alpha.exp(), log_alpha_prime.exp() * 5.0, 0.99, "policy",
        backup_entropy=True, target_action_gap=0.8, mc_return=batch.extras["mc_return"], hl=hl,
    )  # fmt: skip
    assert set(k for k in c_out if k.startswith("loss_")) == {"loss_critic"}
    assert c_out["cql_gap"].shape == (2,) and not c_out["cql_gap"].requires_grad
    # bound_rate: the fraction of policy-action Q-values at s (critic before the step) below mc_return.
    with torch.no_grad():
        obs_rep = batch.obs["policy"].unsqueeze(1).expand(-1, 3, -1).reshape(-1, OBS)
        q_cur = critic(obs_rep, samples.current.reshape(-1, ACT))
        q_cur = (q_cur if hl is None else hl.value(q_cur)).reshape(2, B, 3)
    expected_rate = (q_cur < batch.extras["mc_return"].reshape(1, B, 1)).float().mean()
    assert 0.0 < float(expected_rate) < 1.0  # some lifted, some not: the count is informative
    torch.testing.assert_close(c_out["bound_rate"], expected_rate)
    # The agent passes the Lagrange weight detached; here it is attached to show only it would leak.
    c_out["loss_critic"].backward()
    assert _all_grad(critic) and _no_grad(actor, target) and log_alpha.grad is None
    log_alpha_prime.grad = None
    critic.zero_grad(set_to_none=True)

    a_out = cql.actor_loss(actor, critic, batch, log_alpha.exp(), "policy", "policy", generator=g, hl=hl)
    a_out["loss_actor"].backward()
    assert _all_grad(actor) and _no_grad(critic) and log_alpha.grad is None
    actor.zero_grad(set_to_none=True)
    bc_out = cql.actor_loss(actor, critic, batch, log_alpha.exp(), "policy", "policy", bc=True, generator=g)
    bc_out["loss_actor"].backward()
    assert _all_grad(actor) and _no_grad(critic)

    al = alpha_loss(log_alpha, a_out["log_prob"], -ACT)
    al["loss_alpha"].backward()
    assert log_alpha.grad is not None and _no_grad(critic)

    gap = critic(batch.obs["policy"], batch.action)
    gap = (gap if hl is None else hl.value(gap)).mean(1)  # attached to the critic
    ap = cql.alpha_prime_loss(log_alpha_prime, gap, 5.0, 0.8)
    ap["loss_alpha_prime"].backward()
    assert _no_grad(critic)
    # d/dlog a' of -mean(a' * 5 * (gap - 0.8)) = -a' * 5 * mean(gap - 0.8)
    expected = -math.e * 5.0 * float((gap.detach() - 0.8).mean())
    assert float(log_alpha_prime.grad) == pytest.approx(expected, rel=1e-5)
