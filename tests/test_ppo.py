"""PPO: GAE with terminations and time-outs, clipped losses, KL, adaptive lr, gradient isolation,
checkpoints, asymmetric critic, and learning on Cartpole-Balance."""

from __future__ import annotations

import io
import math

import pytest
import torch

import robolearn
from robolearn.algos import PPO, PPOConfig
from robolearn.algos.ppo.losses import (
    adaptive_learning_rate,
    gaussian_kl,
    ppo_loss,
    surrogate_loss,
    value_loss,
)
from robolearn.data import RolloutStorage
from robolearn.nn.distributions import DiagGaussian, gaussian_entropy, gaussian_log_prob
from robolearn.types import Transition

# -- rollout storage and GAE --------------------------------------------------------------------


def _tiny_storage() -> RolloutStorage:
    """T=3, N=2. World 0 terminates at t=1 (also flagged truncated: termination wins); world 1
    times out at t=0 with V(final_obs)=4."""
    st = RolloutStorage(3, 2, {"policy": 1}, action_dim=1)
    rewards = [[1.0, 0.5], [2.0, 1.0], [3.0, -1.0]]
    values = [[0.5, 1.0], [1.0, 2.0], [1.5, 3.0]]
    terminated = [[False, False], [True, False], [False, False]]
    truncated = [[False, True], [True, False], [False, False]]
    timeout_values = [[0.0, 4.0], [100.0, 0.0], [0.0, 0.0]]
    for t in range(3):
        st.add(
            {"policy": torch.full((2, 1), float(t))},
            torch.zeros(2, 1),
            torch.tensor(rewards[t]),
            torch.tensor(terminated[t]),
            torch.tensor(truncated[t]),
            torch.tensor(values[t]),
            torch.zeros(2),
            torch.zeros(2, 1),
            torch.ones(2, 1),
            timeout_values=torch.tensor(timeout_values[t]),
        )
    return st


def test_gae_by_hand_with_termination_and_timeout():
    g, lam = 0.9, 0.8
    st = _tiny_storage()
    st.compute_returns(torch.tensor([2.0, -1.0]), gamma=g, lam=lam)
    # World 0: t=2 bootstraps from last value 2; t=1 terminated (no bootstrap, the timeout value 100
    # is ignored because termination wins); t=0 continues into t=1.
    a0_2 = 3.0 + g * 2.0 - 1.5
    a0_1 = 2.0 - 1.0
    a0_0 = (1.0 + g * 1.0 - 0.5) + g * lam * a0_1
    # World 1: t=2 bootstraps from -1; t=1 continues; t=0 timed out: reward + g * V(final) = 0.5 + 0.9 * 4,
    # and the recursion is cut there.
    a1_2 = -1.0 + g * -1.0 - 3.0
    a1_1 = (1.0 + g * 3.0 - 2.0) + g * lam * a1_2
    a1_0 = (0.5 + g * 4.0) - 1.0
    expected_adv = torch.tensor([[a0_0, a1_0], [a0_1, a1_1], [a0_2, a1_2]])
    torch.testing.assert_close(expected_adv, torch.tensor([[2.12, 3.1], [1.0, -1.828], [3.3, -4.9]]))
    torch.testing.assert_close(st.advantages, expected_adv)
    torch.testing.assert_close(st.returns, expected_adv + st.values)


def test_gae_normalised_advantages_and_storage_errors():
    st = _tiny_storage()
    st.compute_returns(torch.tensor([2.0, -1.0]), gamma=0.9, lam=0.8, normalize_advantages=True)
    assert abs(st.advantages.mean().item()) < 1e-6 and abs(st.advantages.std().item() - 1.0) < 1e-5
    with pytest.raises(RuntimeError, match="full"):
        st.add({"policy": torch.zeros(2, 1)}, *[torch.zeros(2)] * 6, torch.zeros(2, 1), torch.zeros(2, 1))
    st.clear()
    with pytest.raises(RuntimeError, match="holds 0 of 3"):
        st.compute_returns(torch.zeros(2), 0.9, 0.8)


def test_minibatches_cover_every_sample_and_are_reproducible():
    st = _tiny_storage()
    st.compute_returns(torch.zeros(2), 0.9, 0.8)

    def orders(seed: int) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return [b.obs["policy"].flatten() * 10 + b.returns for b in st.mini_batches(2, 3, gen)]

    first, again, other = orders(0), orders(0), orders(1)
    assert len(first) == 6 and all(b.numel() == 2 for b in first)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))
    keys = torch.cat([b.obs["policy"].flatten() * 10 + b.returns for b in st.mini_batches(1, 3)])
    expected = st.obs["policy"].flatten() * 10 + st.returns.flatten()
    torch.testing.assert_close(keys.sort().values, expected.sort().values)


# -- losses -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "adv", "zero_grad"),
    [(1.5, 1.0, True), (1.5, -1.0, False), (0.5, -1.0, True), (0.5, 1.0, False), (1.1, 1.0, False), (0.9, -1.0, False)],
)
def test_surrogate_gradient_vanishes_only_on_the_clipped_side(ratio, adv, zero_grad):
    log_prob = torch.tensor([math.log(ratio)], requires_grad=True)
    loss = surrogate_loss(log_prob, torch.zeros(1), torch.tensor([adv]), clip_param=0.2)
    loss.backward()
    if zero_grad:
        assert log_prob.grad.item() == 0.0
        clipped = min(max(ratio, 0.8), 1.2)
        assert loss.item() == pytest.approx(-adv * clipped)
    else:
        # d(-A r)/d(log r) = -A r: the unclipped, pessimistic term is active.
        assert log_prob.grad.item() == pytest.approx(-adv * ratio)


def test_value_clipping_is_pessimistic():
    old, ret = torch.zeros(1), torch.ones(1)
    v = torch.tensor([0.5], requires_grad=True)
    loss = value_loss(v, old, ret, clip_param=0.2)
    loss.backward()
    # Clipped prediction 0.2 has the larger error (0.64 > 0.25), and it does not depend on v.
    assert loss.item() == pytest.approx(0.64) and v.grad.item() == 0.0
    v = torch.tensor([-0.5], requires_grad=True)
    loss = value_loss(v, old, ret, clip_param=0.2)
    loss.backward()
    # Unclipped error 2.25 beats the clipped 1.44, so the gradient flows: 2 * (v - R).
    assert loss.item() == pytest.approx(2.25) and v.grad.item() == pytest.approx(-3.0)
    assert value_loss(torch.tensor([0.5]), old, ret).item() == pytest.approx(0.25)


def test_gaussian_kl_log_prob_and_entropy():
    mean, std = torch.randn(4, 3), torch.rand(4, 3) + 0.1
    torch.testing.assert_close(gaussian_kl(mean, std, mean, std), torch.zeros(4))
    # KL(N(0,1) || N(1,2^2)) = log 2 + (1 + 1) / (2 * 4) - 1/2.
    kl = gaussian_kl(torch.zeros(1), torch.ones(1), torch.ones(1), torch.full((1,), 2.0))
    assert kl.item() == pytest.approx(math.log(2.0) + 2.0 / 8.0 - 0.5)
    mean_q, std_q = torch.randn(4, 3), torch.rand(4, 3) + 0.1
    p, q = torch.distributions.Normal(mean, std), torch.distributions.Normal(mean_q, std_q)
    torch.testing.assert_close(gaussian_kl(mean, std, mean_q, std_q), torch.distributions.kl_divergence(p, q).sum(-1))
    a = torch.randn(4, 3)
    torch.testing.assert_close(gaussian_log_prob(a, mean, std), p.log_prob(a).sum(-1))
    torch.testing.assert_close(gaussian_entropy(std), p.entropy().sum(-1))
    head = DiagGaussian(3, init_std=0.5, std_type="scalar")
    torch.testing.assert_close(head.std(mean), torch.full((4, 3), 0.5))
    with pytest.raises(ValueError, match="expected one of log, scalar"):
        DiagGaussian(3, std_type="softplus")


def test_adaptive_learning_rate_rule():
    lr = torch.tensor(1e-3)
    assert adaptive_learning_rate(lr, torch.tensor(0.05), 0.01).item() == pytest.approx(1e-3 / 1.5)
    assert adaptive_learning_rate(lr, torch.tensor(0.001), 0.01).item() == pytest.approx(1.5e-3)
    assert adaptive_learning_rate(lr, torch.tensor(0.01), 0.01).item() == pytest.approx(1e-3)
    assert adaptive_learning_rate(lr, torch.tensor(0.0), 0.01).item() == pytest.approx(1e-3)
    assert adaptive_learning_rate(torch.tensor(1e-5), torch.tensor(1.0), 0.01).item() == pytest.approx(1e-5)
    assert adaptive_learning_rate(torch.tensor(1e-2), torch.tensor(1e-4), 0.01).item() == pytest.approx(1e-2)


# -- the agent ----------------------------------------------------------------------------------


def _small_cfg(**overrides: object) -> PPOConfig:
    base = {"num_steps": 8, "num_epochs": 2, "num_minibatches": 2, "actor_hidden": (16,), "critic_hidden": (16,)}
    base.update(overrides)
    return PPOConfig(**base)


def _fake_rollout(ppo: PPO, dims: dict[str, int], n: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """Fill the agent's rollout with random observations and rewards; return the last obs."""
    gen = torch.Generator().manual_seed(seed)
    obs = {g: torch.randn(n, d, generator=gen) for g, d in dims.items()}
    for t in range(ppo.cfg.num_steps):
        actions = ppo.act(obs)
        nxt = {g: torch.randn(n, d, generator=gen) for g, d in dims.items()}
        reward = actions.sum(-1) + torch.randn(n, generator=gen)
        terminated = torch.zeros(n, dtype=torch.bool)
        truncated = torch.zeros(n, dtype=torch.bool)
        truncated[t % n] = t % 3 == 2
        ppo.process(Transition(obs, actions, reward, nxt, terminated, truncated))
        obs = nxt
    ppo.compute_returns(obs)
    return obs


def test_adaptive_schedule_moves_the_agent_learning_rate():
    dims = {"policy": 3}
    up = PPO(dims, 2, _small_cfg(desired_kl=1e6, learning_rate=1e-3))
    _fake_rollout(up, dims)
    stats = up.update()
    assert stats["learning_rate"].item() > 1e-3
    assert up.optimizer.param_groups[0]["lr"] is up.learning_rate
    down = PPO(dims, 2, _small_cfg(desired_kl=1e-12, learning_rate=1e-3))
    _fake_rollout(down, dims)
    assert down.update()["learning_rate"].item() < 1e-3
    fixed = PPO(dims, 2, _small_cfg(desired_kl=1e-12, learning_rate=1e-3, schedule="fixed"))
    _fake_rollout(fixed, dims)
    assert fixed.update()["learning_rate"].item() == pytest.approx(1e-3)


def test_linear_schedule_anneals_the_learning_rate_by_progress_and_the_others_ignore_it():
    """``schedule: linear``: ``lr * (1 - fraction)`` from ``set_progress``, what Adam steps with and
    what the update reports (hand values); the adaptive and fixed schedules are not moved by it."""
    dims = {"policy": 3}
    ppo = PPO(dims, 2, _small_cfg(learning_rate=1e-3, schedule="linear", desired_kl=1e-12))
    for fraction, lr in ((0.0, 1e-3), (0.25, 7.5e-4), (0.9, 1e-4)):
        ppo.set_progress(fraction)
        _fake_rollout(ppo, dims)
        assert ppo.update()["learning_rate"].item() == pytest.approx(lr, rel=1e-6)  # the KL rule not applied
        assert ppo.optimizer.param_groups[0]["lr"] is ppo.learning_rate
    ppo.set_progress(1.5)  # past the budget (never asked by the runner): no negative rate
    assert ppo.learning_rate.item() == 0.0
    for name in ("fixed", "adaptive"):
        other = PPO(dims, 2, _small_cfg(learning_rate=1e-3, schedule=name))
        other.set_progress(0.5)
        assert other.learning_rate.item() == pytest.approx(1e-3), name


def test_update_returns_tensors_and_gradients_are_isolated():
    dims = {"policy": 3}
    ppo = PPO(dims, 2, _small_cfg())
    _fake_rollout(ppo, dims)
    stats = ppo.update()
    expected = {"loss_policy", "loss_value", "loss_entropy", "kl", "clip_fraction", "learning_rate", "action_std"}
    assert set(stats) == expected
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 and torch.isfinite(v) for v in stats.values())

    _fake_rollout(ppo, dims, seed=1)
    batch = next(ppo.storage.mini_batches(1, 1))
    actor_params = [*ppo.actor.parameters(), *ppo.dist.parameters()]
    critic_params = list(ppo.critic.parameters())
    for name, owned, other in (("loss_policy", actor_params, critic_params), ("loss_value", critic_params, actor_params)):
        ppo.optimizer.zero_grad(set_to_none=True)
        mean = ppo.actor(batch.obs["actor"])
        std = ppo.dist.std(mean)
        losses = ppo_loss(
            ppo.dist.log_prob(mean, std, batch.actions) + 0.1, batch.log_probs, batch.advantages,
            ppo.critic(batch.obs["critic"]).squeeze(-1) + 0.5, batch.values, batch.returns,
            ppo.dist.entropy(std), 0.2, True, 1.0, 0.01,
        )
        losses[name].backward()
        assert all(p.grad is None for p in other), name
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in owned), name


def test_state_dict_round_trip_reproduces_actions():
    dims = {"policy": 3}
    ppo = PPO(dims, 2, _small_cfg())
    last = _fake_rollout(ppo, dims)
    ppo.update()
    buf = io.BytesIO()
    torch.save(ppo.state_dict(), buf)
    buf.seek(0)
    clone = PPO(dims, 2, _small_cfg(seed=123))
    clone.load_state_dict(torch.load(buf, weights_only=False))
    assert clone.optimizer.param_groups[0]["lr"] is clone.learning_rate
    assert torch.equal(clone.learning_rate, ppo.learning_rate)
    assert torch.equal(ppo.act_inference(last), clone.act_inference(last))
    torch.manual_seed(7)
    a = ppo.act(last)
    torch.manual_seed(7)
    b = clone.act(last)
    assert torch.equal(a, b)
    # Training continues identically too: same minibatch order, same optimiser moments.
    ppo._pending = clone._pending = None
    ppo.storage.clear()
    torch.manual_seed(3)
    _fake_rollout(ppo, dims, seed=5)
    torch.manual_seed(3)
    _fake_rollout(clone, dims, seed=5)
    ppo.update()
    clone.update()
    assert torch.equal(ppo.act_inference(last), clone.act_inference(last))


def _step_rewards(ppo: PPO, rewards: list[list[float]], done: list[list[bool]], dims: dict[str, int]) -> None:
    """One act/process per row of ``rewards`` (worlds in columns); ``done`` marks terminations."""
    obs = {g: torch.zeros(len(rewards[0]), d) for g, d in dims.items()}
    for r, d in zip(rewards, done, strict=True):
        actions = ppo.act(obs)
        term = torch.tensor(d)
        ppo.process(Transition(obs, actions, torch.tensor(r), obs, term, torch.zeros_like(term)))


def test_reward_normalisation_divides_by_the_std_of_discounted_returns():
    """By hand, gamma 0.5, two worlds: returns [1, 3] (var 1), then [1.5, 4.5] (var of all four
    1.875); world 0 terminates at step 2, so its step-3 return restarts at its reward."""
    dims = {"policy": 2}
    ppo = PPO(dims, 1, _small_cfg(num_steps=4, gamma=0.5, normalize_rewards=True))
    _step_rewards(ppo, [[1.0, 3.0], [1.0, 3.0], [2.0, 3.0]], [[False, False], [True, False], [False, False]], dims)
    stored = ppo.storage.rewards[:3]
    assert torch.allclose(stored[0], torch.tensor([1.0, 3.0]), atol=1e-6)
    assert torch.allclose(stored[1], torch.tensor([1.0, 3.0]) / math.sqrt(1.875), atol=1e-6)
    # step 3: returns [2 (restarted), 4.5 * 0.5 + 3 = 5.25]; statistics over [1, 3, 1.5, 4.5, 2, 5.25]
    seen = torch.tensor([1.0, 3.0, 1.5, 4.5, 2.0, 5.25])
    std = math.sqrt(seen.var(unbiased=False).item())
    assert torch.allclose(stored[2], torch.tensor([2.0, 3.0]) / std, atol=1e-5)
    # off by default: the env's rewards are stored as they are
    plain = PPO(dims, 1, _small_cfg(num_steps=4, gamma=0.5))
    _step_rewards(plain, [[1.0, 3.0], [1.0, 3.0]], [[False, False], [False, False]], dims)
    assert torch.equal(plain.storage.rewards[:2], torch.tensor([[1.0, 3.0], [1.0, 3.0]]))


def test_reward_normalisation_clips_and_survives_a_checkpoint():
    dims = {"policy": 2}
    ppo = PPO(dims, 1, _small_cfg(num_steps=4, gamma=0.0, normalize_rewards=True))
    # gamma 0: the returns are the rewards; 99 worlds at 0 and one at 1,000 make the std ~99.5, so the
    # outlier's scaled reward (~10.05) is clipped to 10
    _step_rewards(ppo, [[0.0] * 99 + [1000.0]], [[False] * 100], dims)
    assert ppo.storage.rewards[0, -1].item() == pytest.approx(10.0)
    buf = io.BytesIO()
    torch.save(ppo.state_dict(), buf)
    buf.seek(0)
    clone = PPO(dims, 1, _small_cfg(num_steps=4, gamma=0.0, normalize_rewards=True))
    clone.load_state_dict(torch.load(buf, weights_only=False))
    for agent in (ppo, clone):
        _step_rewards(agent, [[5.0] * 100], [[False] * 100], dims)
    # the clone's rollout starts afresh (its first step is row 0), its statistics do not
    assert torch.equal(ppo.storage.rewards[1], clone.storage.rewards[0])
    assert 0.0 < clone.storage.rewards[0, 0].item() < 0.1  # 5 / std of [0 x 99, 1000, 5 x 100]
    buf.seek(0)
    with pytest.raises(ValueError, match="algo.normalize_rewards"):
        PPO(dims, 1, _small_cfg(num_steps=4)).load_state_dict(torch.load(buf, weights_only=False))


def test_asymmetric_critic_reads_the_critic_group():
    dims = {"policy": 3, "critic": 7}
    ppo = PPO(dims, 2, _small_cfg(critic_obs_group="critic"))
    assert ppo.actor[0].in_features == 3 and ppo.critic[0].in_features == 7
    assert ppo.actor_normalizer.mean.shape == (3,) and ppo.critic_normalizer.mean.shape == (7,)
    last = _fake_rollout(ppo, dims)
    assert ppo.storage.obs["critic"].shape == (8, 4, 7)
    ppo.update()
    changed = {"policy": last["policy"], "critic": last["critic"] + 1.0}
    assert torch.equal(ppo.act_inference(last), ppo.act_inference(changed))
    assert not torch.equal(ppo.evaluate(last), ppo.evaluate(changed))
    symmetric = PPO(dims, 2, _small_cfg())
    assert symmetric.critic[0].in_features == 3
    with pytest.raises(ValueError, match="critic_obs_group: group 'privileged' is not among"):
        PPO(dims, 2, _small_cfg(critic_obs_group="privileged"))
    with pytest.raises(ValueError, match="schedule: unknown 'cosine'"):
        _small_cfg(schedule="cosine")


# -- learning -----------------------------------------------------------------------------------

_LEARN_CFG = {
    "num_steps": 32,
    "num_epochs": 5,
    "num_minibatches": 4,
    "actor_hidden": (64, 64),
    "critic_hidden": (64, 64),
    "entropy_coef": 0.0,
    "init_noise_std": 0.5,
    # A shorter horizon and a lower lr ceiling than the defaults: measured on seeds 0-2, these
    # reach ~0.98-0.99 per-step reward within 150 updates (100 on the Xeon they were first tuned
    # on), where the defaults sometimes relapse.
    "gamma": 0.98,
    "max_learning_rate": 3e-3,
}


def _evaluate(ppo: PPO, steps: int = 200) -> float:
    """Mean per-step reward of the deterministic policy over one 200-step episode of 16 worlds."""
    env = robolearn.make("Cartpole-Balance", num_envs=16, seed=123, episode_length=200)
    obs, _ = env.reset()
    total = torch.zeros(())
    for _ in range(steps):
        obs, reward, *_ = env.step(ppo.act_inference(obs).clamp(-1.0, 1.0))
        total += reward.mean()
    return total.item() / steps


def _train_cartpole(iterations: int, seed: int = 0) -> tuple[float, float]:
    """Train on 32 worlds of 200-step Cartpole-Balance; return evaluation before and after."""
    torch.manual_seed(seed)
    env = robolearn.make("Cartpole-Balance", num_envs=32, seed=seed, episode_length=200)
    ppo = PPO(env.obs_dims, env.action_dim, PPOConfig(**_LEARN_CFG, seed=seed))
    before = _evaluate(ppo)
    obs, _ = env.reset()
    for _ in range(iterations):
        for _ in range(ppo.cfg.num_steps):
            actions = ppo.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(actions.clamp(-1.0, 1.0))
            ppo.process(Transition(obs, actions, reward, info["final_obs"], terminated, truncated))
            obs = next_obs
        ppo.compute_returns(obs)
        ppo.update()
    return before, _evaluate(ppo)


# Margin measured at this budget (150 updates of 32 x 32 steps, ~30 s per seed on one CPU thread),
# evaluation after training, mean per-step reward, seeds 0 / 1 / 2, on an AMD EPYC:
#   working learner (gamma 0.98):                      0.982 / 0.998 / 0.997   (before: ~0.70)
#   broken bootstrapping (gamma 0, otherwise the same): 0.698 / 0.698 / 0.685
# `_train_cartpole(150, seed)` with `_LEARN_CFG` and only gamma overridden, one torch thread. It was
# 100 updates, measured on an Intel Xeon (0.997 / 0.992 / 0.992); on the EPYC seed 0 reached only
# 0.750 by then (0.870 at 120): float reductions differ across CPUs, so the budget leaves room for a
# slower seed. The threshold 0.9 sits ~0.08 under the working learners' worst and ~0.2 over the
# broken ones' best.
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_learns_cartpole_balance(seed):
    before, after = _train_cartpole(iterations=150, seed=seed)
    assert after > before + 0.15 and after > 0.9, (before, after)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_ppo_learns_cartpole_balance_other_seeds(seed):
    before, after = _train_cartpole(iterations=150, seed=seed)
    assert after > before + 0.15 and after > 0.95, (before, after)
