"""ReinFlow and DPPO (robolearn/algos/reinflow): the chain's likelihood against hand-computed
Gaussians, PPO's ratio at 1 before the first update, DDIM step stds, where gradients flow, the
rollout wiring (terminated vs truncated), pre-trained model loading, and a short learning test."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import norm
from torch import nn

from robolearn.algos import registry
from robolearn.algos.reinflow import DPPOConfig, ReinFlow, ReinFlowConfig, load_pretrained
from robolearn.algos.reinflow.agent import CHAIN_KEY, COND_KEY, deterministic_chain, step_mean
from robolearn.algos.reinflow.losses import flow_transition_means
from robolearn.nn.generative import ChunkModel, ChunkModelSpec, ddim_mean, ddim_step_params, flow_sample
from robolearn.types import Transition

OBS = {"policy": 3, "critic": 5}
A = 2


def make(cfg: ReinFlowConfig, **kw) -> ReinFlow:
    return ReinFlow(OBS, A, cfg, action_low=-2.0, action_high=2.0, seed=0, **kw)


def small(cls=ReinFlowConfig, **kw):
    base = dict(model_hidden=(32, 32), critic_hidden=(32, 32), noise_hidden=(16,), num_steps=4, num_minibatches=2)
    base.update(kw)
    return cls(**base)


def obs_batch(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(n, d, generator=g) for k, d in OBS.items()}


class ConstVelocity(nn.Module):
    """v(x, t, cond) = c * (1 + t): a known velocity that also depends on the step's time."""

    def __init__(self, c: torch.Tensor) -> None:
        super().__init__()
        self.c = nn.Parameter(c.clone())

    def forward(self, x, t, cond, d=None):
        return self.c * (1.0 + t).reshape(-1, 1, 1) + 0.0 * x


class ConstNoise(nn.Module):
    """sigma(x, t, cond) = 0.1 + 0.05 * t (a known, time-dependent std)."""

    def forward(self, x, t, cond):
        return (0.1 + 0.05 * t).reshape(-1, 1, 1).expand_as(x).clone()


def test_reinflow_chain_log_prob_is_the_sum_of_hand_computed_gaussian_transitions():
    agent = make(small(steps=2, horizon=2))
    c = torch.tensor([0.3, -0.7])
    agent.model.net = ConstVelocity(c)
    agent.noise_net = ConstNoise()
    g = torch.Generator().manual_seed(1)
    chain = torch.randn(3, 3, 2 * A, generator=g)  # B=3, K+1=3, D = H*A = 4
    cond = torch.randn(3, OBS["policy"], generator=g)
    lp, entropy, std = agent.chain_stats(chain, cond)
    expected = []
    for b in range(3):
        x = chain[b].double().numpy()
        total = norm.logpdf(x[0]).sum()  # the initial N(0, I) draw
        for k in range(2):
            t = k / 2
            mean = x[k] + (c.double().numpy().repeat(1).reshape(1, A) * (1 + t)).repeat(2, 0).reshape(-1) / 2
            total += norm.logpdf(x[k + 1], loc=mean, scale=0.1 + 0.05 * t).sum()
        expected.append(total)
    torch.testing.assert_close(lp.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-4)
    # entropy: 4 dims per step, stds 0.1 and 0.125
    ent = 4 * sum(math.log(s) + 0.5 * math.log(2 * math.pi * math.e) for s in (0.1, 0.125))
    torch.testing.assert_close(entropy, torch.full((3,), ent), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(std, torch.full((3,), 0.1125))


def test_k1_chain_samples_one_gaussian_around_the_euler_step():
    # K=1: the action chunk is x0 + v(x0, 0) + sigma * eps; the likelihood is N(x0) N(x1 | x0 + v, sigma^2)
    agent = make(small(steps=1))
    c = torch.tensor([0.5, -0.5])
    agent.model.net = ConstVelocity(c)
    agent.noise_net = ConstNoise()
    chain = agent.sample_chain(torch.zeros(4000, OBS["policy"]))
    step = chain[:, 1] - chain[:, 0]
    torch.testing.assert_close(step.mean(0), c, atol=0.01, rtol=0)
    torch.testing.assert_close(step.std(0), torch.full((A,), 0.1), atol=0.005, rtol=0)


@pytest.mark.parametrize("cls,steps", [(ReinFlowConfig, 1), (ReinFlowConfig, 4), (DPPOConfig, 4)])
def test_ratio_is_one_before_the_first_update(cls, steps):
    agent = make(small(cls, steps=steps, num_steps=5, num_minibatches=3, horizon=2))
    obs = obs_batch(7)
    for i in range(5):
        a = agent.act(obs)
        assert a.shape == (7, A) and bool(((a >= -2) & (a <= 2)).all())
        nxt = obs_batch(7, seed=i + 1)
        agent.process(Transition(obs, a, torch.ones(7), nxt, torch.zeros(7, dtype=torch.bool), torch.zeros(7, dtype=torch.bool)))
        obs = nxt
    agent.compute_returns(obs)
    for mb in agent.storage.mini_batches(1, 3, torch.Generator().manual_seed(0)):
        lp, _, _ = agent.chain_stats(mb.obs[CHAIN_KEY], mb.obs[COND_KEY])
        # recomputed on a shuffled minibatch of another size: equal up to float32 rounding
        torch.testing.assert_close(lp, mb.log_probs, rtol=1e-6, atol=1e-5)
    stats = agent.update()
    assert stats["clip_fraction"] < 1.0 and torch.isfinite(stats["loss_policy"])


@pytest.mark.parametrize("steps", [4, 128])
def test_a_shortcut_models_chain_means_are_its_pretrained_sampler_at_any_step_count(steps):
    # Below the finest trained step size (2^-6) the pre-trained sampler tells a shortcut backbone d = 0
    # (flow matching); the chain must ask for the same velocities, or at K = 128 it runs an untrained d.
    spec = ChunkModelSpec("shortcut", OBS["policy"], A, horizon=2, hidden=(16,))
    agent = make(small(steps=steps), model=ChunkModel(spec, -2.0, 2.0))
    cond, noise = torch.randn(4, OBS["policy"]), torch.randn(4, 2, A)
    with torch.no_grad():
        got = deterministic_chain(agent.model, None, agent.cfg, False, cond, noise)
        want = flow_sample(agent.model.net, cond, noise, steps)
        torch.testing.assert_close(got, want)
        # the update's batched means agree with the sampler's steps as well
        states, x = [noise.reshape(4, -1)], noise
        for i in range(steps):
            x, _ = step_mean(agent.model, None, agent.cfg, False, i, x, cond)
            states.append(x.reshape(4, -1))
        means, _ = flow_transition_means(agent.model.net, torch.stack(states, 1), cond, 2, A)
        torch.testing.assert_close(means, torch.stack(states[1:], 1))


def test_dppo_step_std_is_ddim_sigma_floored_and_frozen_steps_use_the_pretrained_net():
    cfg = small(DPPOConfig, steps=4, eta=0.7, min_std=0.05, ft_steps=2)
    agent = make(cfg)
    with torch.no_grad():  # the fine-tuned net moves away from the pre-trained (reference) one
        for p in agent.model.net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    sched = agent.model.schedule
    ks = sched.timesteps(4)
    x = torch.randn(5, 1, A)
    cond = torch.randn(5, OBS["policy"])
    stds = []
    for i in range(4):
        k_prev = ks[i + 1] if i + 1 < 4 else -1
        sigma = ddim_step_params(sched, ks[i], k_prev, 0.7)[2]
        mean, std = step_mean(agent.model, agent.ref_model, cfg, True, i, x, cond)
        assert std == pytest.approx(max(sigma, 0.05))
        net = agent.ref_model.net if i < 2 else agent.model.net
        want, _ = ddim_mean(net, x, cond, sched, ks[i], k_prev, 0.7, clip=1.0)
        torch.testing.assert_close(mean, want)
        stds.append(std)
    assert stds[-1] == pytest.approx(0.05) and max(stds) > 0.05  # the last DDIM step is deterministic: floored
    # the likelihood covers the two fine-tuned transitions only (plus the constant N(0, I) of x0)
    chain = torch.randn(5, 5, A)
    lp, _, mean_std = agent.chain_stats(chain, cond)
    want = norm.logpdf(chain[:, 0].double().numpy()).sum(-1)
    for i in (2, 3):
        m, s = step_mean(agent.model, agent.ref_model, cfg, True, i, chain[:, i].reshape(5, 1, A), cond)
        want = want + norm.logpdf(chain[:, i + 1].double().numpy(), loc=m.reshape(5, A).detach().double().numpy(), scale=s).sum(-1)
    torch.testing.assert_close(lp.double(), torch.as_tensor(want), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(mean_std, torch.full((5,), (stds[2] + stds[3]) / 2))


def test_gradients_reach_the_noise_net_in_reinflow_and_no_frozen_tensor_in_dppo():
    agent = make(small(steps=2))
    chain = agent.sample_chain(torch.randn(6, OBS["policy"]))
    lp, _, _ = agent.chain_stats(chain, torch.randn(6, OBS["policy"]))
    lp.mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.noise_net.parameters() if p.dim() > 1)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.model.net.parameters())
    assert all(p.grad is None for p in agent.ref_model.parameters())

    dppo = make(small(DPPOConfig, steps=3, ft_steps=1, clip_x0=10.0))  # no clamp: the x0 clip cuts gradients
    assert dppo.noise_net is None  # the std is a schedule, not a parameter
    cond = torch.randn(6, OBS["policy"])
    chain = dppo.sample_chain(cond)
    lp, _, _ = dppo.chain_stats(chain, cond)
    lp.mean().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in dppo.model.net.parameters())
    assert all(p.grad is None and not p.requires_grad for p in dppo.ref_model.parameters())
    learned = {id(p) for p in dppo.parameters()}
    assert not any(id(p) in learned for p in dppo.ref_model.parameters())


def test_terminated_worlds_do_not_bootstrap_truncated_ones_do_from_their_final_obs():
    agent = make(small(num_steps=1, gamma=0.9, lam=1.0, normalize_advantages=False, normalize_critic_obs=False))
    obs = obs_batch(3)
    a = agent.act(obs)
    final, last = obs_batch(3, seed=5), obs_batch(3, seed=6)
    reward = torch.tensor([1.0, 2.0, 3.0])
    terminated = torch.tensor([True, False, False])
    truncated = torch.tensor([False, True, False])
    agent.process(Transition(obs, a, reward, final, terminated, truncated))
    agent.compute_returns(last)
    v_final, v_last = agent.evaluate(final), agent.evaluate(last)
    want = torch.stack([reward[0], reward[1] + 0.9 * v_final[1], reward[2] + 0.9 * v_last[2]])
    torch.testing.assert_close(agent.storage.returns[0], want)
    # the stored chain ends in the executed action (first of the chunk, env units)
    torch.testing.assert_close(agent.chunk_of(agent.storage.obs[CHAIN_KEY][0])[:, 0], a)


def test_init_from_a_run_directory_and_refusals(tmp_path):
    spec = ChunkModelSpec("flow", OBS["policy"], A, horizon=1, hidden=(16,))
    model = ChunkModel(spec, -2.0, 2.0)
    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    torch.save({"agent": {"model": model.checkpoint()}}, ckpts / "ckpt_000010.pt")
    (ckpts / "latest").write_text("ckpt_000010.pt\n")
    agent = make(small(init_from=str(tmp_path / "run")))
    for p, q in zip(agent.model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    # the fine-tuned run's own checkpoint is again an init_from source
    torch.save({"agent": agent.state_dict()}, tmp_path / "ft.pt")
    assert load_pretrained(tmp_path / "ft.pt").spec == spec
    with pytest.raises(ValueError, match="algo=dppo.*'flow'"):
        make(small(DPPOConfig, init_from=str(tmp_path / "run")))
    with pytest.raises(FileNotFoundError, match="init_from"):
        make(small(init_from=str(tmp_path / "nothing")))
    with pytest.raises(ValueError, match="action_dim"):
        ReinFlow(OBS, 3, small(init_from=str(tmp_path / "run")))


def test_init_from_a_run_without_a_latest_pointer_takes_the_highest_step_not_the_last_name(tmp_path):
    # ckpt_{step:06d}.pt grows a seventh digit at step 10**6, where the text order and the step order part
    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    models = {}
    for step in (999_999, 1_000_000):
        torch.manual_seed(step)
        models[step] = ChunkModel(ChunkModelSpec("flow", OBS["policy"], A, hidden=(16,)), -2.0, 2.0)
        torch.save({"agent": {"model": models[step].checkpoint()}}, ckpts / f"ckpt_{step:06d}.pt")
    (ckpts / "ckpt_best.pt").write_text("not a step")  # a stray name the step pattern must skip
    loaded = load_pretrained(tmp_path / "run")
    for p, q in zip(loaded.parameters(), models[1_000_000].parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_registered_with_the_on_policy_runner_and_state_round_trips():
    for name, cls in (("reinflow", ReinFlowConfig), ("dppo", DPPOConfig)):
        spec = registry.get(name)
        assert spec.config is cls and spec.runners == ("on_policy",)
        agent = spec.build(small(cls), OBS, A, action_low=-2.0, action_high=2.0, seed=1)
        obs = obs_batch(4)
        for _ in range(4):
            a = agent.act(obs)
            agent.process(Transition(obs, a, torch.ones(4), obs, torch.zeros(4, dtype=torch.bool), torch.zeros(4, dtype=torch.bool)))
        agent.compute_returns(obs)
        agent.update()
        fresh = spec.build(small(cls), OBS, A, action_low=-2.0, action_high=2.0, seed=2)
        fresh.load_state_dict(agent.state_dict())
        torch.testing.assert_close(fresh.act_inference(obs), agent.act_inference(obs))
        torch.testing.assert_close(fresh.policy_module()(obs["policy"]), agent.act_inference(obs))


def bandit_return(agent: ReinFlow, goals: torch.Tensor) -> float:
    """Mean reward -|a - g|^2 of the noise-free policy on a contextual bandit (obs = goal)."""
    a = agent.act_inference({"policy": goals, "critic": goals})
    return float(-(a - goals).square().sum(-1).mean())


# About 1-2 s each on an idle core: in the default suite, so a broken chain likelihood or ratio fails CI.
@pytest.mark.parametrize("cls", [ReinFlowConfig, DPPOConfig])
def test_fine_tuning_corrects_a_biased_pretrained_policy(cls):
    # A one-step task: obs = goal g in [-0.6, 0.6]^2, reward -|a - g|^2. The pre-trained policy cloned
    # a biased expert (g + 0.4); PPO over the chain must pull it back towards g.
    torch.manual_seed(0)
    kind = "diffusion" if cls is DPPOConfig else "flow"
    spec = ChunkModelSpec(kind, 2, 2, hidden=(64, 64), diffusion_steps=10)
    model = ChunkModel(spec, -1.0, 1.0)
    opt = torch.optim.Adam(model.net.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        goals = torch.rand(128, 2, generator=g) * 1.2 - 0.6
        loss = model.loss(goals, (goals + 0.4).unsqueeze(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    obs_dims = {"policy": 2}
    cfg = cls(steps=2, num_steps=1, num_epochs=4, num_minibatches=2, critic_hidden=(32,), actor_learning_rate=1e-3,
              clip_param=0.1, gamma=0.0, lam=0.0, seed=0, min_std=0.05, **({"max_std": 0.1} if cls is ReinFlowConfig else {}))
    agent = ReinFlow(obs_dims, 2, cfg, model=model)
    test_goals = torch.rand(512, 2, generator=torch.Generator().manual_seed(9)) * 1.2 - 0.6
    before = bandit_return(agent, test_goals)
    for _ in range(25):
        goals = torch.rand(128, 2, generator=g) * 1.2 - 0.6
        obs = {"policy": goals}
        a = agent.act(obs)
        reward = -(a - goals).square().sum(-1)
        done = torch.ones(128, dtype=torch.bool)
        agent.process(Transition(obs, a, reward, obs, done, torch.zeros(128, dtype=torch.bool)))
        agent.compute_returns(obs)
        agent.update()
    after = bandit_return(agent, test_goals)
    assert before < -0.2, f"the pre-trained policy should be biased (mean reward {before:.3f})"
    assert after > before + 0.1, f"fine-tuning did not improve enough: {before:.3f} -> {after:.3f}"


@pytest.mark.parametrize("cls", [ReinFlowConfig, DPPOConfig])
def test_bc_regularizer_is_zero_at_the_pretrained_policy_and_pulls_back_towards_it(cls):
    # DPPO: no x0 clip, so a fresh model's samples are not all on the clip (where both would agree)
    agent = make(small(cls, steps=3, bc_coef=1.0, **({"clip_x0": 1e6} if cls is DPPOConfig else {})))
    torch.manual_seed(0)
    cond = torch.randn(16, OBS["policy"])
    assert float(agent._bc_loss(cond).detach()) == 0.0
    with torch.no_grad():
        for p in agent.model.net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    agent.generator.manual_seed(0)
    moved = agent._bc_loss(cond)
    assert float(moved.detach()) > 0.0
    moved.backward()
    assert all(p.grad is None for p in agent.ref_model.parameters())
    if cls is DPPOConfig:
        return  # an untrained diffusion model's unclipped DDIM samples are too far out for a small step
    with torch.no_grad():  # one small gradient step on the regulariser alone reduces it (same noise)
        for p in agent.model.net.parameters():
            if p.grad is not None:
                p.sub_(1e-2 * p.grad)
    agent.generator.manual_seed(0)
    assert float(agent._bc_loss(cond).detach()) < float(moved.detach())


def test_observation_history_is_stacked_per_world_and_restarts_where_an_episode_ended():
    spec = ChunkModelSpec("flow", OBS["policy"], A, horizon=3, obs_history=2, hidden=(16,))
    agent = make(small(num_steps=3), model=ChunkModel(spec, -2.0, 2.0))
    o1, o2, o3 = obs_batch(2, seed=1), obs_batch(2, seed=2), obs_batch(2, seed=3)
    no = torch.zeros(2, dtype=torch.bool)
    for obs, nxt, term in ((o1, o2, no), (o2, o3, torch.tensor([True, False])), (o3, o1, no)):
        a = agent.act(obs)
        agent.process(Transition(obs, a, torch.zeros(2), nxt, term, no))
    conds = agent.storage.obs[COND_KEY]  # [T, N, 2 * obs_dim], frames oldest first
    p1, p2, p3 = o1["policy"], o2["policy"], o3["policy"]
    torch.testing.assert_close(conds[0], agent.model.cond(torch.cat([p1, p1], -1)))  # a fresh world repeats its frame
    torch.testing.assert_close(conds[1], agent.model.cond(torch.cat([p1, p2], -1)))
    # world 0's episode ended at step 1: its history restarts; world 1's goes on
    torch.testing.assert_close(conds[2][0], agent.model.cond(torch.cat([p3[:1], p3[:1]], -1))[0])
    torch.testing.assert_close(conds[2][1], agent.model.cond(torch.cat([p2[1:], p3[1:]], -1))[0])
    # act_inference keeps its own history, which reset() restarts; the policy module matches it
    module = agent.policy_module()
    for obs in (o1, o2):
        torch.testing.assert_close(module(obs["policy"]), agent.act_inference(obs))
    agent.reset(torch.tensor([True, True]))
    module.reset(torch.tensor([True, True]))
    torch.testing.assert_close(module(o3["policy"]), agent.act_inference(o3))
