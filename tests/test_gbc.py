"""Generative behaviour cloning (robolearn.algos.gbc): diffusion and flow policies over action chunks.

Pins: configs refuse bad values naming the field; training samples pad history and chunks inside
episodes; on a two-mode toy distribution flow and diffusion keep both modes where Gaussian BC
averages them; in a rollout the actions played are the first ``execute`` steps of successive plans,
restarted at episode ends; the checkpoint's ``model`` rebuilds the sampler without the package,
resumes exactly; the one-step head distils the multi-step sampler; ``robolearn train algo=flow``
writes a run that ``robolearn.load_policy`` acts from.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

import robolearn
from robolearn.algos import registry
from robolearn.algos.bc import BC, BCConfig
from robolearn.algos.gbc import (
    DiffusionBCConfig,
    FlowBCConfig,
    GenerativeBC,
    ema_decay,
    gather_chunks,
    one_step_distillation_loss,
)
from robolearn.cli.main import main
from robolearn.data import Dataset, DatasetMetadata
from robolearn.data.sampler import DatasetSampler
from robolearn.nn.generative import ChunkModel, ChunkModelSpec
from robolearn.runners.rollout import rollout
from robolearn.types import Algorithm, Batch

torch.set_num_threads(1)

SMALL = dict(backbone="mlp", hidden=(32, 32), time_embed_dim=8, horizon=4, execute=2, obs_history=2, sample_steps=3,
             batch_size=16)


def toy_dataset(n: int = 500, seed: int = 0) -> Dataset:
    """Observations N(0, I) in 2-D, actions +-0.6 with equal probability whatever the observation."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 2, generator=g)
    act = torch.where(torch.rand(n, 1, generator=g) < 0.5, 0.6, -0.6)
    ends = torch.zeros(n, dtype=torch.bool)
    ends[9::10] = True
    return Dataset({"policy": obs}, act, torch.zeros(n), torch.zeros(n, dtype=torch.bool), ends,
                   final_observations={"policy": obs[9::10]})


def mode_coverage(x: torch.Tensor) -> tuple[float, float, float]:
    """Fractions of samples within 0.2 of +0.6, within 0.2 of -0.6, and between (|x| < 0.3)."""
    return (float(((x - 0.6).abs() < 0.2).float().mean()), float(((x + 0.6).abs() < 0.2).float().mean()),
            float((x.abs() < 0.3).float().mean()))


@pytest.mark.parametrize(("field", "value", "match"), [
    ("execute", 5, r"execute: expected 1..horizon \(4\), got 5"),
    ("model", "diffusion", "model: expected one of flow, shortcut, got 'diffusion'"),
    ("backbone", "transformer", "backbone: expected one of mlp, unet, got 'transformer'"),
    ("ensemble", "mean", "ensemble: expected one of none, exp, got 'mean'"),
    ("ema", 1.0, "ema: expected a finite number >= 0.0 and < 1.0, got 1.0"),
    ("sample_steps", 0, "sample_steps: expected an integer >= 1, got 0"),
    ("lr", -1.0, r"lr: expected a finite number > 0.0, got -1.0"),
    ("hidden", (), r"hidden: expected a non-empty list of integers >= 1, got \[\]"),
])
def test_config_refuses_bad_values_naming_the_field(field, value, match):
    kw = {"horizon": 4, "execute": 2, field: value}
    with pytest.raises(ValueError, match=match):
        FlowBCConfig(**kw)


def test_diffusion_config_checks_its_own_fields():
    with pytest.raises(ValueError, match="model: expected one of diffusion, got 'flow'"):
        DiffusionBCConfig(model="flow")
    with pytest.raises(ValueError, match=r"sample_steps: DDIM visits at most diffusion_steps \(20\), got 30"):
        DiffusionBCConfig(diffusion_steps=20, sample_steps=30)
    with pytest.raises(ValueError, match="horizon: a U-Net with 2 levels needs a multiple of 2, got 5"):
        DiffusionBCConfig(horizon=5, execute=2)
    with pytest.raises(ValueError, match="execute: ensemble=exp replans every step"):
        FlowBCConfig(ensemble="exp", execute=2)


def test_training_samples_pad_history_and_chunks_inside_episodes():
    # two episodes: steps 0-2 and 3-6; observation = 10 * step, action = step
    obs = (10.0 * torch.arange(7)).reshape(-1, 1)
    ends = torch.tensor([False, False, True, False, False, False, True])
    ds = Dataset({"policy": obs}, torch.arange(7.0).reshape(-1, 1), torch.zeros(7), ends, torch.zeros(7, dtype=torch.bool),
                 final_observations={"policy": torch.tensor([[25.0], [65.0]])})
    frames, actions, mask = gather_chunks(ds, torch.tensor([0, 2, 4]), horizon=3, obs_history=3, group="policy")
    assert frames.tolist() == [[0, 0, 0], [0, 10, 20], [30, 30, 40]], "history: the episode's first frame repeated"
    assert actions[..., 0].tolist() == [[0, 1, 2], [2, 2, 2], [4, 5, 6]], "chunks: the episode's last action repeated"
    assert mask.tolist() == [[True, True, True], [True, False, False], [True, True, True]]


def _train(cfg, ds: Dataset, steps: int, seed: int = 0) -> GenerativeBC:
    agent = GenerativeBC({"policy": 2}, 1, cfg, seed=seed)
    agent.sampler = DatasetSampler(ds, seed=seed)
    for _ in range(steps):
        agent.update()
    return agent


TOY = dict(backbone="mlp", hidden=(128, 128), time_embed_dim=32, horizon=1, execute=1, obs_history=1, batch_size=256,
           lr=1e-2, ema=0.99, sample_steps=10)


@pytest.mark.parametrize("algo", ["flow", "diffusion"])
def test_generative_bc_keeps_both_modes_of_a_two_mode_distribution(algo):
    cfg = FlowBCConfig(**TOY) if algo == "flow" else DiffusionBCConfig(**TOY)
    agent = _train(cfg, toy_dataset(), 500)
    z = torch.randn(400, 1, 1, generator=torch.Generator().manual_seed(5))
    x = agent.sampler_module()(torch.zeros(400, 2), z)[:, 0, 0]
    up, down, mid = mode_coverage(x)
    assert up >= 0.3 and down >= 0.3 and mid <= 0.15, (up, down, mid)


def test_one_step_head_distils_the_multi_step_sampler():
    cfg = FlowBCConfig(**{**TOY, "sample_steps": 4, "batch_size": 128}, one_step_head=True, one_step_lr=1e-2)
    agent = GenerativeBC({"policy": 2}, 1, cfg, seed=0)
    agent.sampler = DatasetSampler(toy_dataset(), seed=0)
    z = torch.randn(400, 1, 1, generator=torch.Generator().manual_seed(5))
    obs = torch.zeros(400, 2)
    untrained = agent.sampler_module(one_step=True)
    for _ in range(400):
        out = agent.update()
    teacher = agent.sampler_module()(obs, z)
    untrained.model.load_state_dict({**untrained.model.state_dict(), "obs_mean": agent.model.obs_mean,
                                     "obs_std": agent.model.obs_std})
    one = agent.sampler_module(one_step=True)(obs, z)
    before = float((untrained(obs, z) - teacher).abs().mean())
    after = float((one - teacher).abs().mean())
    cover_teacher, cover_one = mode_coverage(teacher[:, 0, 0]), mode_coverage(one[:, 0, 0])
    info = (before, after, cover_teacher, cover_one)
    assert "loss_one_step" in out and after < 0.5 * before, info
    # one step from z lands where the 4-step flow lands from z (an untrained head stays near z:
    # 15% near each mode, 24% between)
    assert min(cover_teacher[:2]) >= 0.25, info
    assert all(abs(a - b) <= 0.06 for a, b in zip(cover_teacher, cover_one, strict=True)), info


def test_gaussian_bc_averages_the_two_modes():
    agent = BC({"policy": 2}, 1, BCConfig(actor_hidden=(64, 64), batch_size=256, actor_lr=3e-3), seed=0)
    agent.sampler = DatasetSampler(toy_dataset(), seed=0)
    for _ in range(300):
        agent.update()
    x = agent.act_inference({"policy": torch.randn(400, 2, generator=torch.Generator().manual_seed(5))})[:, 0]
    up, down, mid = mode_coverage(x)
    assert up + down <= 0.1 and mid >= 0.8, (up, down, mid)
    at_zero = float(agent.act_inference({"policy": torch.zeros(1, 2)}))
    assert abs(at_zero) < 0.2, at_zero


class CountEnv:
    """Two worlds whose observation is (step in the episode, world); episodes of 5 and 7 steps."""

    num_envs = 2
    device = torch.device("cpu")
    max_episode_length = 7

    def __init__(self) -> None:
        self.t = torch.zeros(2)
        self.lengths = torch.tensor([5.0, 7.0])
        self.actions: list[torch.Tensor] = []

    def _obs(self) -> dict[str, torch.Tensor]:
        return {"policy": torch.stack([self.t, torch.tensor([0.0, 1.0])], dim=-1)}

    def reset(self, seed=None):
        self.t = torch.zeros(2)
        return self._obs(), {}

    def step(self, action):
        self.actions.append(action.clone())
        self.t = self.t + 1
        done = self.t >= self.lengths
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return self._obs(), torch.zeros(2), done, torch.zeros(2, dtype=torch.bool), {}


def test_rollout_plays_the_first_k_actions_of_successive_plans_and_restarts_at_episode_ends():
    agent = GenerativeBC({"policy": 2}, 1, FlowBCConfig(**{**SMALL, "horizon": 4, "execute": 3}), seed=7)
    env = CountEnv()
    obs_seen: list[torch.Tensor] = []
    rollout(env, agent.act_inference, episodes=3, max_steps=12,
            on_step=lambda s: obs_seen.append(s.obs["policy"].clone()))
    played = torch.stack(env.actions)[:, :, 0]  # [T, 2]
    # by hand: the agent's sampler and its noise stream (seed 7), one draw [2, H, A] per step where a
    # world needs a plan: at its episode's first step, then every 3 steps
    sampler = agent.sampler_module()
    gen = torch.Generator().manual_seed(7)
    expect = torch.zeros_like(played)
    chunks = [None, None]
    since = [0, 0]
    history = [None, None]
    for t, o in enumerate(obs_seen):
        for w in range(2):
            fresh = bool(o[w, 0] == 0)
            history[w] = torch.cat([o[w], o[w]]) if fresh else torch.cat([history[w][2:], o[w]])
            if fresh:
                since[w] = 3
        need = [since[w] >= 3 for w in range(2)]
        if any(need):
            noise = torch.randn(2, 4, 1, generator=gen)
            for w in range(2):
                if need[w]:
                    chunks[w] = sampler(history[w][None], noise[w : w + 1])[0, :, 0]
                    since[w] = 0
        for w in range(2):
            expect[t, w] = chunks[w][since[w]]
            since[w] += 1
    torch.testing.assert_close(played, expect, rtol=1e-5, atol=1e-6)
    assert len(obs_seen) == 10 and len({round(float(v), 6) for v in played[:, 0]}) >= 6, "actions vary"


def test_checkpoint_rebuilds_the_model_and_resumes_exactly():
    ds = toy_dataset(100)
    cfg = FlowBCConfig(**SMALL, ema=0.9, one_step_head=True)
    agent = _train(cfg, ds, 3)
    state = copy.deepcopy(agent.state_dict())  # as a checkpoint file would be: no tensor shared with the agent
    # others rebuild the acting (EMA) flow from the checkpoint without this package
    rebuilt = ChunkModel.from_checkpoint(state["model"])
    z, obs = torch.randn(5, 4, 1), torch.randn(5, 4)
    torch.testing.assert_close(rebuilt.sample(obs, z, 3), agent.sampler_module()(obs, z))
    torch.testing.assert_close(ChunkModel.from_checkpoint(state["one_step"]).sample(obs, z, 1),
                               agent.sampler_module(one_step=True)(obs, z))
    assert not torch.equal(state["model"]["state"]["net.body.0.weight"], state["train_model"]["state"]["net.body.0.weight"])
    # a fresh agent loaded from the state takes the same next steps
    other = GenerativeBC({"policy": 2}, 1, cfg, seed=99)
    other.sampler = DatasetSampler(ds, seed=99)
    other.load_state_dict(state)
    for _ in range(2):
        agent.update()
        other.update()
    for p, q in zip(agent.parameters(), other.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    with pytest.raises(ValueError, match="model: the checkpoint's spec"):
        GenerativeBC({"policy": 2}, 1, FlowBCConfig(**{**SMALL, "horizon": 6}), seed=0).load_state_dict(state)


# the learner's own device, and the accelerator's where there is one (a CPU-only machine runs "cpu")
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.mark.parametrize("device", DEVICES)
def test_a_learner_on_its_device_hands_out_cpu_modules_that_act_as_it_does(device):
    """``sampler_module``/``policy_module`` are CPU copies whatever the learner's device: every
    tensor of the rebuilt model (the action bounds included) on the CPU, acting as the learner does."""
    ds = toy_dataset(100).to(device)
    cfg = FlowBCConfig(**SMALL, ema=0.9, one_step_head=True)
    agent = GenerativeBC({"policy": 2}, 1, cfg, action_low=-2.0, action_high=0.5, device=device, seed=4)
    agent.sampler = DatasetSampler(ds, seed=4)
    for _ in range(2):
        agent.update()
    for one_step in (False, True):
        sampler = agent.sampler_module(one_step=one_step)
        assert {t.device.type for t in [*sampler.parameters(), *sampler.buffers()]} == {"cpu"}
    module = agent.policy_module()
    obs = torch.randn(3, 2)
    for _ in range(3):
        torch.testing.assert_close(module(obs), agent.act_inference({"policy": obs.to(device)}).cpu())


def test_agent_answers_the_algorithm_verbs_and_its_module_replays_a_fresh_policy():
    for name in ("flow", "diffusion"):
        spec = registry.get(name)
        agent = spec.build(spec.config(**{**SMALL, "backbone": "unet", "unet_channels": (8, 16)}), {"policy": 3, "critic": 5}, 2,
                           action_low=torch.tensor([-1.0, -2.0]), action_high=torch.tensor([1.0, 0.5]), seed=3)
        assert isinstance(agent, Algorithm)
        obs = {"policy": torch.randn(6, 3)}
        module = agent.policy_module()
        steps = [agent.act_inference(obs) for _ in range(3)]
        assert all(a.shape == (6, 2) for a in steps)
        assert torch.equal(steps[0], module(obs["policy"])), "a fresh module replays a fresh agent"
        assert not torch.equal(steps[0], steps[1]), "the next action of the chunk"
        agent.reset()
        torch.testing.assert_close(agent.act_inference(obs), steps[0], rtol=0, atol=0)
        explore = agent.act(obs)
        assert explore.shape == (6, 2) and not torch.equal(explore, steps[0]), "collection has its own noise"
        with pytest.raises(NotImplementedError, match="offline"):
            agent.process(None)


def test_update_takes_an_external_batch_of_chunks():
    agent = GenerativeBC({"policy": 2}, 1, FlowBCConfig(**SMALL), seed=0)
    b = Batch(obs={"policy": torch.randn(8, 2, 2)}, action=torch.rand(8, 4, 1), reward=torch.zeros(8), next_obs={},
              terminated=torch.zeros(8, dtype=torch.bool), truncated=torch.zeros(8, dtype=torch.bool))
    out = agent.update(b)
    assert agent.num_updates == 1 and torch.isfinite(out["loss_bc"])
    with pytest.raises(ValueError, match=r"batch.action: expected chunks \[B, 4, 1\]"):
        agent.update(Batch(b.obs, torch.rand(8, 1), b.reward, {}, b.terminated, b.truncated))
    with pytest.raises(RuntimeError, match="no dataset sampler"):
        agent.update()


def test_ema_follows_diffusion_policy_warmup():
    assert ema_decay(0, 0.999) == 0.0
    assert ema_decay(9, 0.999) == pytest.approx(1 - 10 ** -0.75)
    assert ema_decay(10**9, 0.999) == 0.999
    agent = GenerativeBC({"policy": 2}, 1, FlowBCConfig(**SMALL, ema=0.999), seed=0)
    agent.sampler = DatasetSampler(toy_dataset(100), seed=0)
    agent.update()  # the first update copies
    torch.testing.assert_close(agent.model.net.body[0].weight, agent.train_model.net.body[0].weight, rtol=0, atol=0)
    old = agent.model.net.body[0].weight.clone()
    agent.update()
    d = 1 - 2 ** -0.75
    torch.testing.assert_close(agent.model.net.body[0].weight, d * old + (1 - d) * agent.train_model.net.body[0].weight)


class Linear(nn.Module):
    """A flow backbone ``v = a * x``."""

    def __init__(self, a: float) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(a))

    def forward(self, x, t, cond, d=None):
        return self.a * x


def test_one_step_loss_targets_the_teacher_at_its_sample_steps():
    spec = ChunkModelSpec(model="flow", obs_dim=1, action_dim=1, horizon=2, hidden=(4,), time_embed_dim=4)
    teacher, student = ChunkModel(spec), ChunkModel(spec)
    teacher.net, student.net = Linear(-0.5), Linear(0.0)
    z, obs = torch.tensor([[[0.8], [-0.4]]]), torch.zeros(1, 1)
    for k in (1, 4):
        target = z * (1 - 0.5 / k) ** k  # k Euler steps of v = -x/2
        out = one_step_distillation_loss(student, teacher, obs, z, k)
        torch.testing.assert_close(out["loss_one_step"], (z - target).square().mean())
    out["loss_one_step"].backward()
    assert student.net.a.grad is not None and teacher.net.a.grad is None


def test_train_cli_writes_a_flow_run_that_load_policy_acts_from(tmp_path):
    g = torch.Generator().manual_seed(0)
    n = 200
    ends = torch.zeros(n, dtype=torch.bool)
    ends[99::100] = True
    obs = torch.randn(n, 5, generator=g)
    ds = Dataset({"policy": obs}, torch.rand(n, 1, generator=g) * 2 - 1, torch.rand(n, generator=g), torch.zeros(n, dtype=torch.bool),
                 ends, final_observations={"policy": obs[99::100]},
                 metadata=DatasetMetadata(task_id="Cartpole-Balance", collection="random"))
    data = tmp_path / "tiny.h5"
    ds.save(data)
    run = tmp_path / "run"
    args = ["train", "algo=flow", "task=Cartpole-Balance", f"dataset={data}", "total_grad_steps=6", f"run_dir={run}",
            "runner.steps_per_iteration=3", "runner.eval_interval=1", "runner.eval_steps=20", "runner.video=false",
            "runner.console=false", "runner.tensorboard=false", "eval_num_envs=2", "algo.hidden=[32,32]",
            "algo.horizon=4", "algo.execute=2", "algo.batch_size=32", "algo.sample_steps=2"]
    assert main(args) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["grad_steps"] == 6 and math.isfinite(summary["final_eval_return"])
    policy = robolearn.load_policy(run)
    assert isinstance(policy.agent, GenerativeBC) and policy.agent.num_updates == 6
    x = {"policy": torch.randn(3, 5)}
    first = policy.act(x)
    assert first.shape == (3, 1) and bool((first.abs() <= 1).all())
    policy.act(x)
    policy.reset()  # reaches the agent's executors and noise stream
    torch.testing.assert_close(policy.act(x), first, rtol=0, atol=0)
    torch.testing.assert_close(policy.module()(x["policy"]), first, rtol=0, atol=0)
