"""Flow Q-learning (robolearn/algos/fql): the distillation term's noise and gradients, the critic
target's wiring (one-step action at the next observation, target critics, terminal vs time-out),
the Polyak step, the two ends of alpha (the flow's samples; the argmax of a known Q), state round
trips, the deployable z = 0 policy, and ``robolearn train algo=fql`` offline and offline-to-online.
"""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.algos import registry
from robolearn.algos.fql import FQL, FQLConfig, OneStepPolicy, actor_loss, flow_actions
from robolearn.cli.main import main
from robolearn.data import Dataset, DatasetMetadata
from robolearn.nn.ensemble import CriticEnsemble
from robolearn.nn.generative import ChunkModel, ChunkModelSpec
from robolearn.runners.collect import collect_episodes, uniform_policy
from robolearn.types import Batch

H = (32, 32)
SMALL = {"actor_hidden": H, "flow_hidden": H, "critic_hidden": H, "batch_size": 32}
LOW = torch.tensor([-2.0, 0.0])
HIGH = torch.tensor([2.0, 1.0])


def _agent(seed: int = 0, **kw) -> FQL:
    return FQL({"policy": 3}, 2, FQLConfig(**{**SMALL, **kw}), action_low=LOW, action_high=HIGH, seed=seed)


def _batch(n: int = 6, seed: int = 1) -> Batch:
    g = torch.Generator().manual_seed(seed)
    terminated = torch.zeros(n, dtype=torch.bool)
    truncated = torch.zeros(n, dtype=torch.bool)
    terminated[0] = True  # no bootstrap
    truncated[1] = True  # a time-out: bootstraps
    action = LOW + (HIGH - LOW) * torch.rand(n, 2, generator=g)
    return Batch(obs={"policy": 3.0 + 2.0 * torch.randn(n, 3, generator=g)}, action=action,
                 reward=torch.randn(n, generator=g), next_obs={"policy": 3.0 + 2.0 * torch.randn(n, 3, generator=g)},
                 terminated=terminated, truncated=truncated)


def _nets(seed: int = 0) -> tuple[OneStepPolicy, ChunkModel, CriticEnsemble]:
    torch.manual_seed(seed)
    actor = OneStepPolicy(3, 2, H, action_low=LOW, action_high=HIGH)
    flow = ChunkModel(ChunkModelSpec("flow", 3, 2, hidden=H), LOW, HIGH)
    critic = CriticEnsemble(3, 2, 2, H)
    return actor, flow, critic


# -- the one-step policy's loss ----------------------------------------------------------------------
def test_distillation_targets_the_flow_under_the_same_noise_and_sends_no_gradient_into_the_flow():
    actor, flow, critic = _nets()
    obs, z = torch.randn(64, 3), torch.randn(64, 2)
    out = actor_loss(actor, flow, critic, obs, obs, z, alpha=1.0, flow_steps=4, normalize_q_loss=False)
    # The target is the flow's 4-step Euler sample from the same z (model space: env units mapped to [-1, 1]).
    target = flow.from_env(flow.sample(obs, z.unsqueeze(1), 4)).squeeze(1)
    torch.testing.assert_close(flow_actions(flow, obs, z, 4), target, rtol=1e-5, atol=1e-5)
    expected = (actor.model_action(obs, z) - target).square().mean()
    torch.testing.assert_close(out["loss_distill"], expected.detach())
    other = (actor.model_action(obs, z) - flow_actions(flow, obs, torch.randn(64, 2), 4)).square().mean()
    assert abs(float(other) - float(expected.detach())) > 1e-3  # another noise would give another value
    q = critic(obs, actor(obs, z)).mean(0)
    torch.testing.assert_close(out["loss_actor"], (-q.mean() + expected).detach(), rtol=1e-5, atol=1e-6)
    out["loss_actor"].backward()
    assert all(p.grad is None for p in flow.parameters()), "a gradient reached the BC flow"
    assert all(p.grad is None for p in critic.parameters()), "the actor loss moved the critics"
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in actor.parameters())


def test_q_term_is_normalised_by_the_mean_absolute_q_without_a_gradient_through_the_scale():
    actor, flow, critic = _nets()
    obs, z = torch.randn(32, 3), torch.randn(32, 2)
    plain = actor_loss(actor, flow, critic, obs, obs, z, alpha=0.0, flow_steps=2, normalize_q_loss=False)
    scaled = actor_loss(actor, flow, critic, obs, obs, z, alpha=0.0, flow_steps=2, normalize_q_loss=True)
    q = critic(obs, actor(obs, z)).mean(0).detach()
    torch.testing.assert_close(scaled["loss_actor"].detach(), -q.mean() / q.abs().mean())
    g_plain = torch.autograd.grad(plain["loss_actor"], actor.net[0].weight)[0]
    g_scaled = torch.autograd.grad(scaled["loss_actor"], actor.net[0].weight)[0]
    torch.testing.assert_close(g_scaled, g_plain / q.abs().mean(), rtol=1e-4, atol=1e-7)


# -- the critic ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("q_agg", ["mean", "min"])
def test_critic_target_bootstraps_from_the_one_step_action_at_next_obs_through_the_target_critics(q_agg):
    agent = _agent(q_agg=q_agg, gamma=0.9)
    mean, std = torch.tensor([3.0, 3.0, 3.0]), torch.tensor([2.0, 1.0, 0.5])
    agent.set_obs_normalization({"policy": mean}, {"policy": std})
    with torch.no_grad():  # a target far from the online critics, so using the wrong one shows
        for p in agent.target_critic.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = _batch()
    # Replay the learner's draws: flow x0 [B, A], flow t [B], then the next-state noise [B, A].
    g = torch.Generator().manual_seed(0)
    g.set_state(agent.generator.get_state())
    torch.randn(6, 2, generator=g)
    torch.rand(6, generator=g)
    next_noise = torch.randn(6, 2, generator=g)
    norm = lambda x: (x - mean) / std  # noqa: E731
    with torch.no_grad():
        next_action = agent.actor(norm(batch.next_obs["policy"]), next_noise)
        q_next = agent.target_critic(norm(batch.next_obs["policy"]), next_action)
        q_next = q_next.mean(0) if q_agg == "mean" else q_next.min(0).values
        alive = torch.tensor([0.0, 1, 1, 1, 1, 1])  # terminated stops it, the time-out (row 1) does not
        target = batch.reward + 0.9 * alive * q_next
        loss = (agent.critic(norm(batch.obs["policy"]), batch.action) - target).square().mean()
    out = agent.update(batch)
    torch.testing.assert_close(out["target_mean"], target.mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["loss_critic"], loss, rtol=1e-5, atol=1e-6)


def test_target_critics_move_by_tau():
    agent = _agent(tau=0.25)
    before = [p.detach().clone() for p in agent.target_critic.parameters()]
    agent.update(_batch())
    for old, new, online in zip(before, agent.target_critic.parameters(), agent.critic.parameters(), strict=True):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * online.detach())


# -- the two ends of alpha ----------------------------------------------------------------------------
def _train_actor(alpha: float, critic: CriticEnsemble, flow: ChunkModel, steps: int, seed: int = 0) -> OneStepPolicy:
    torch.manual_seed(seed)
    actor = OneStepPolicy(3, 2, (64, 64), action_low=LOW, action_high=HIGH)
    opt = torch.optim.Adam(actor.parameters(), lr=3e-3)
    for _ in range(steps):
        obs, z = torch.randn(256, 3), torch.randn(256, 2)
        loss = actor_loss(actor, flow, critic, obs, obs, z, alpha=alpha, flow_steps=4)["loss_actor"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    return actor


def test_with_a_large_alpha_the_one_step_policy_reproduces_the_flows_samples_noise_by_noise():
    _, flow, critic = _nets(seed=3)
    actor = _train_actor(1e4, critic, flow, 250)
    obs, z = torch.randn(512, 3), torch.randn(512, 2)
    with torch.no_grad():
        got = actor.model_action(obs, z)
        same = (got - flow_actions(flow, obs, z, 4)).square().mean()
        spread = (flow_actions(flow, obs, torch.randn(512, 2), 4) - flow_actions(flow, obs, z, 4)).square().mean()
    # Matching noise by noise (not only the marginal, which independent noise would give) ...
    assert float(same) < 0.1 * float(spread), (float(same), float(spread))


def _bowl(star: torch.Tensor) -> CriticEnsemble:
    """Two critics that both compute the known ``Q(s, a) = 2 - |a_0 - star_0| - |a_1 - star_1|``
    exactly (one hidden ReLU layer of four units: the positive and negative parts of each error)."""
    critic = CriticEnsemble(3, 2, 2, (4,))
    w0, b0 = torch.zeros(4, 5), torch.zeros(4)
    for j in range(2):
        w0[2 * j, 3 + j], b0[2 * j] = 1.0, -float(star[j])
        w0[2 * j + 1, 3 + j], b0[2 * j + 1] = -1.0, float(star[j])
    with torch.no_grad():
        critic.params["0__weight"].copy_(w0.expand(2, 4, 5))
        critic.params["0__bias"].copy_(b0.expand(2, 4))
        critic.params["2__weight"].fill_(-1.0)
        critic.params["2__bias"].fill_(2.0)
    return critic


def test_on_a_bandit_with_a_known_q_a_small_alpha_goes_to_the_argmax():
    star = torch.tensor([1.2, 0.3])  # inside the box [-2, 2] x [0, 1]
    critic = _bowl(star)
    a = LOW + (HIGH - LOW) * torch.rand(100, 2)
    q = critic(torch.zeros(100, 3), a)
    torch.testing.assert_close(q[1], 2.0 - (a - star).abs().sum(-1))  # the critic is the known Q
    _, flow, _ = _nets(seed=3)
    actor = _train_actor(1e-3, critic, flow, 250)
    with torch.no_grad():
        acts = actor(torch.randn(256, 3), torch.randn(256, 2))
        spread = flow.sample(torch.randn(256, 3), torch.randn(256, 1, 2), 4).squeeze(1)
    # Every noise goes to the argmax (the flow it barely distils stays spread).
    assert float((acts - star).abs().max()) < 0.1, acts.mean(0)
    assert float((spread - star).abs().max(dim=-1).values.mean()) > 0.3


# -- state and deployment -----------------------------------------------------------------------------
def test_state_round_trips_and_the_saved_flow_is_a_raw_observation_chunk_model():
    agent = _agent(seed=2)
    agent.set_obs_normalization({"policy": torch.tensor([1.0, -1.0, 3.0])}, {"policy": torch.tensor([2.0, 0.5, 1.0])})
    for _ in range(3):
        agent.update(_batch(seed=5))
    state = copy.deepcopy(agent.state_dict())  # as a checkpoint file would: no tensor shared with the agent
    clone = _agent(seed=9)
    clone.load_state_dict(state)
    obs = {"policy": torch.randn(4, 3) * 3}
    torch.testing.assert_close(clone.act_inference(obs), agent.act_inference(obs))
    nxt = _batch(seed=6)
    a, b = agent.update(nxt), clone.update(nxt)  # same generator, optimisers and networks: same step
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k)
    torch.testing.assert_close(clone.act(obs), agent.act(obs))
    flow = ChunkModel.from_checkpoint(agent.state_dict()["flow"])  # without the FQL class
    z = torch.randn(4, 2)
    torch.testing.assert_close(flow.sample(obs["policy"], z.unsqueeze(1), 10).squeeze(1), agent.sample_flow(obs, z),
                               rtol=1e-5, atol=1e-5)


def test_policy_module_is_the_one_step_policy_at_zero_noise_and_traces():
    agent = _agent()
    agent.set_obs_normalization({"policy": torch.tensor([1.0, 2.0, 3.0])}, {"policy": torch.tensor([2.0, 2.0, 0.5])})
    agent.update(_batch())
    obs = torch.randn(5, 3)
    module = agent.policy_module()
    expected = agent.actor((obs - torch.tensor([1.0, 2.0, 3.0])) / torch.tensor([2.0, 2.0, 0.5]), torch.zeros(5, 2))
    torch.testing.assert_close(module(obs), expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(agent.act_inference({"policy": obs}), expected.detach(), rtol=1e-5, atol=1e-6)
    traced = torch.jit.trace(module, torch.randn(2, 3))
    torch.testing.assert_close(traced(obs), module(obs))
    assert bool(((module(obs * 50) >= LOW) & (module(obs * 50) <= HIGH)).all())
    noisy = agent.noisy_policy_module()  # the noise as an explicit input
    torch.testing.assert_close(noisy(obs, torch.zeros(5, 2)), module(obs), rtol=1e-5, atol=1e-6)
    z = torch.randn(5, 2)
    norm_obs = (obs - torch.tensor([1.0, 2.0, 3.0])) / torch.tensor([2.0, 2.0, 0.5])
    torch.testing.assert_close(noisy(obs, z), agent.actor(norm_obs, z).detach(), rtol=1e-5, atol=1e-6)
    traced_noisy = torch.jit.trace(noisy, (torch.randn(2, 3), torch.randn(2, 2)))
    torch.testing.assert_close(traced_noisy(obs, z), noisy(obs, z))


def test_config_errors_name_the_field():
    for kw, field in (({"q_agg": "max"}, "q_agg"), ({"alpha": -1.0}, "alpha"), ({"flow_steps": 0}, "flow_steps"),
                      ({"squash": "sigmoid"}, "squash"), ({"tau": 0.0}, "tau")):
        with pytest.raises(ValueError, match=field):
            FQLConfig(**kw)
    assert registry.get("fql").runners == ("offline", "offline_to_online")


# -- the command line ---------------------------------------------------------------------------------
TASK = "Cartpole-Balance"
FAST = ["runner.video=false", "runner.console=false", "runner.tensorboard=false", "eval_num_envs=2"]
NETS = ["algo.actor_hidden=[32,32]", "algo.flow_hidden=[32,32]", "algo.critic_hidden=[32,32]", "algo.batch_size=32",
        "algo.flow_steps=3"]


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory) -> Path:
    """Random-policy episodes of the cart-pole (50 steps each)."""
    env = robolearn.make(TASK, 4, seed=0, nthread=1, episode_length=50)
    act = uniform_policy(env.ctrl_low.double(), env.ctrl_high.double(), torch.Generator().manual_seed(0))
    episodes = collect_episodes(env, act, 8, seed=0, progress=False)
    meta = DatasetMetadata(task_id=TASK, collection="random", ref_random_return=0.0, ref_expert_return=50.0)
    path = tmp_path_factory.mktemp("fql") / "random.h5"
    Dataset.from_episodes(episodes, meta).save(path)
    return path


def test_train_algo_fql_offline_writes_a_run_that_loads_and_exports(tmp_path, dataset_path):
    run = tmp_path / "fql"
    assert main(["train", "algo=fql", f"task={TASK}", "task_overrides.episode_length=50", f"dataset={dataset_path}",
                 "total_grad_steps=20", *NETS, "runner.steps_per_iteration=10", "runner.eval_steps=20", f"run_dir={run}",
                 *FAST]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["grad_steps"] == 20 and "normalized_score" in summary
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert {"train/loss_flow", "train/loss_critic", "train/loss_actor", "train/loss_distill"} <= set(rows[-1])
    policy = robolearn.load_policy(run)
    obs = {"policy": torch.randn(3, 5)}
    torch.testing.assert_close(policy.module()(obs["policy"]), policy.act(obs), rtol=1e-5, atol=1e-6)
    assert main(["export", f"run={run}", "format=torchscript"]) == 0


def test_fql_fine_tunes_online_through_the_offline_to_online_runner(tmp_path, dataset_path):
    run = tmp_path / "o2o"
    assert main(["train", "algo=fql", f"task={TASK}", "task_overrides.episode_length=50", f"dataset={dataset_path}",
                 "total_grad_steps=20", "total_env_steps=40", "num_envs=2", *NETS, "runner.steps_per_iteration=10",
                 "runner.eval_steps=20", "+o2o={warmup_steps: 0, offline_ratio: 0.5, offline_steps_per_iteration: 10}",
                 f"run_dir={run}", *FAST]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["offline_grad_steps"] == 20 and summary["env_steps"] == 40
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    online = [r for r in rows if r.get("phase") == "2.0" and r.get("train/loss_critic")]
    assert online, "no online update was logged"


def test_the_o2o_method_composes_to_fql_with_half_offline_batches():
    from robolearn.cli.commands import compose_config
    from robolearn.runners.train_config import train_config_from_dict

    cfg = train_config_from_dict(compose_config("train", ["experiment=pointmaze_o2o", "o2o_method=fql"]))
    assert (cfg.algo_name, cfg.o2o.warmup_steps, cfg.o2o.offline_ratio, cfg.o2o.pretrain) == ("fql", 0, 0.5, None)
    assert isinstance(cfg.algo, FQLConfig) and cfg.algo.actor_hidden == (64, 64)
