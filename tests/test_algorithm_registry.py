"""One algorithm contract, one registry: every registered learner answers every verb.

Pins: the registry is the only table of algorithms (the CLI and load_policy name none), each
entry builds an agent that implements ``robolearn.types.Algorithm`` — offline learners explore and
store online too — ``update(batch)`` works for every learner that learns from batches, and
``configs/algo/*.yaml`` hold only what differs from the dataclass defaults.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from robolearn.algos import registry
from robolearn.data.replay import ReplayBuffer
from robolearn.data.sampler import ReplaySampler
from robolearn.types import Algorithm, Batch, Transition

REPO = Path(__file__).resolve().parents[1]
OBS = {"policy": 3, "critic": 5}
IMAGE = 16
PIXEL_ALGOS = {"drqv2"}
"""Learners whose actor reads the ``image`` group (a square uint8 RGB frame) instead of ``policy``."""
A = 2
LOW, HIGH = torch.tensor([-1.0, -2.0]), torch.tensor([1.0, 0.5])


def build(name: str, **cfg_kw):
    spec = registry.get(name)
    obs_dims = {**OBS, "image": IMAGE * IMAGE * 3} if name in PIXEL_ALGOS else OBS
    return spec.build(spec.config(**cfg_kw), obs_dims, A, action_low=LOW, action_high=HIGH, seed=3)


def obs_batch(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(n, d, generator=g) for k, d in OBS.items()}


def batch(n: int = 32, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed + 100)
    return Batch(
        obs=obs_batch(n, seed),
        action=(torch.rand(n, A, generator=g) * (HIGH - LOW) + LOW),
        reward=torch.randn(n, generator=g),
        next_obs=obs_batch(n, seed + 1),
        terminated=torch.rand(n, generator=g) < 0.1,
        truncated=torch.zeros(n, dtype=torch.bool),
        extras={"mc_return": torch.randn(n, generator=g)},
    )


def test_registry_holds_every_shipped_algorithm():
    assert list(registry.ALGORITHMS) == ["ppo", "sac", "bc", "td3bc", "iql", "cql", "calql", "distill",
                                         "diffusion", "flow", "reinflow", "dppo", "fql", "drqv2"]
    assert [n for n, s in registry.ALGORITHMS.items() if s.offline] == ["bc", "td3bc", "iql", "cql", "calql",
                                                                         "diffusion", "flow", "fql"]
    with pytest.raises(KeyError, match="valid choices: ppo, sac, bc"):
        registry.get("td3")
    # Cal-QL's config derives from CQL's: the exact type decides
    assert registry.spec_of(registry.get("calql").config()).name == "calql"
    assert registry.spec_of(registry.get("cql").config()).name == "cql"
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("sac"))


@pytest.mark.parametrize("name", list(registry.ALGORITHMS))
def test_every_agent_answers_every_verb(name):
    agent = build(name)
    assert isinstance(agent, Algorithm)
    obs = obs_batch(6)
    module_input = obs["policy"]
    if name in PIXEL_ALGOS:  # a fresh episode: the policy module reads the first frame stacked frame_stack times
        obs["image"] = torch.randint(0, 256, (6, IMAGE, IMAGE, 3), generator=torch.Generator().manual_seed(5), dtype=torch.uint8)
        module_input = obs["image"].repeat(1, 1, 1, agent.cfg.frame_stack)
    for verb in (agent.act, agent.act_inference):
        a = verb(obs)
        assert a.shape == (6, A) and torch.isfinite(a).all()
    params = agent.parameters()
    assert params and all(isinstance(p, torch.Tensor) for p in params)
    module = agent.policy_module()
    # A chunked policy (diffusion, flow) plays the next action of its chunk on each call: restarted,
    # it replays its first plan from its seeded noise, which a fresh module reproduces.
    restart = getattr(agent, "reset", None) if hasattr(agent, "sampler_module") else None
    if restart is not None:
        restart()
    # an independent CPU copy that reproduces act_inference on raw observations
    greedy = agent.act_inference(obs)
    if name in PIXEL_ALGOS:
        agent.reset(torch.ones(6, dtype=torch.bool))  # act_inference stacks frames: restart its episodes
        greedy = agent.act_inference(obs)
    torch.testing.assert_close(module(module_input), greedy, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        next(module.parameters()).add_(1.0)
    if restart is not None:
        restart()
    if name in PIXEL_ALGOS:
        agent.reset(torch.ones(6, dtype=torch.bool))
    torch.testing.assert_close(agent.act_inference(obs), greedy)


@pytest.mark.parametrize("name", ["bc", "td3bc", "iql", "cql", "calql"])
def test_offline_learners_explore_store_and_learn_from_their_sampler(name):
    agent = build(name)
    obs = obs_batch(64)
    explore, greedy = agent.act(obs), agent.act_inference(obs)
    assert not torch.allclose(explore, greedy), "an offline learner must explore when it acts online"
    assert bool(((explore >= LOW) & (explore <= HIGH)).all()), "exploration stays inside the action bounds"
    # process stores online transitions in the learner's own replay
    b = batch(8)
    agent.process(Transition(b.obs, b.action, b.reward, b.next_obs, b.terminated, b.truncated))
    assert len(agent.replay) == 8
    stored = agent.replay.gather(torch.arange(8))
    torch.testing.assert_close(stored.next_obs["policy"], b.next_obs["policy"])
    # update() without a batch needs a sampler, and then draws from it
    with pytest.raises(RuntimeError, match="no sampler"):
        agent.update()
    agent.sampler = ReplaySampler(agent.replay, seed=0)
    if name == "calql":
        with pytest.raises(KeyError, match="mc_return"):
            agent.update()
    else:
        before = [p.detach().clone() for p in agent.parameters()]
        out = agent.update()
        assert out and all(torch.isfinite(v).all() for v in out.values())
        assert any(not torch.equal(p0, p1) for p0, p1 in zip(before, agent.parameters(), strict=True))
    # the replay goes into the checkpoint, the rollback snapshot leaves it out
    assert "replay" in agent.state_dict() and "replay" not in agent.learned_state_dict()
    fresh = build(name)
    fresh.load_state_dict(agent.state_dict())
    assert len(fresh.replay) == 8


@pytest.mark.parametrize("name", ["sac", "bc", "td3bc", "iql", "cql", "calql"])
def test_update_with_an_external_batch_is_one_counted_step(name):
    agent = build(name)
    assert agent.num_updates == 0
    out = agent.update(batch())
    assert out and all(torch.isfinite(v).all() for v in out.values())
    assert agent.num_updates == 1


def test_ppo_refuses_an_external_batch():
    with pytest.raises(ValueError, match="own rollout"):
        build("ppo").update(batch())


def test_sac_policy_delay_counts_external_batches():
    # policy_delay=2: the actor moves on updates 0, 2, 4... whoever supplies the batch
    agent = build("sac", policy_delay=2, learning_starts=0)
    moved = []
    for i in range(4):
        before = [p.detach().clone() for p in agent.actor.parameters()]
        agent.update(batch(seed=i))
        moved.append(any(not torch.equal(a, b) for a, b in zip(before, agent.actor.parameters(), strict=True)))
    assert moved == [True, False, True, False]
    assert agent.num_updates == 4


def test_sac_draws_from_whatever_sampler_it_is_given():
    agent = build("sac", learning_starts=0, batch_size=16, utd_ratio=3)
    assert agent.update() == {}, "nothing stored yet: nothing to learn from"
    other = ReplayBuffer(100)
    b = batch(50)
    other.add(b.obs, b.action, b.reward, b.next_obs, b.terminated, b.truncated)
    agent.sampler = ReplaySampler(other, seed=1)
    out = agent.update()
    assert "loss_critic" in out and agent.num_updates == 3
    # the agent's own replay is still empty: only the sampler fed it
    assert len(agent.replay) == 0


def test_sac_learning_starts_still_counts_its_own_replay():
    agent = build("sac", learning_starts=10, batch_size=4)
    b = batch(6)
    agent.process(Transition(b.obs, b.action, b.reward, b.next_obs, b.terminated, b.truncated))
    assert agent.update() == {} and agent.num_updates == 0
    agent.process(Transition(b.obs, b.action, b.reward, b.next_obs, b.terminated, b.truncated))
    assert agent.update() and agent.num_updates == 1


@pytest.mark.parametrize("name", list(registry.ALGORITHMS))
def test_algo_yaml_holds_only_what_differs_from_the_dataclass(name):
    spec = registry.get(name)
    data = yaml.safe_load((REPO / "configs" / "algo" / f"{name}.yaml").read_text())
    assert data.pop("name") == name
    defaults = spec.config()
    fields = {f.name for f in dataclasses.fields(spec.config)}
    for key, value in data.items():
        assert key in fields, f"configs/algo/{name}.yaml: {key} is not a field of {spec.config.__name__}"
        default = getattr(defaults, key)
        default = list(default) if isinstance(default, tuple) else default
        assert value != default, f"configs/algo/{name}.yaml repeats the default {key}={value!r}"


def test_every_algo_yaml_is_a_registered_algorithm():
    names = {p.stem for p in (REPO / "configs" / "algo").glob("*.yaml")}
    assert names == set(registry.ALGORITHMS)


def test_nothing_outside_the_registry_names_an_algorithm_class():
    # The CLI, the runners and load_policy go through the registry; naming an agent or config class
    # there is how five places came to hold the same knowledge.
    classes = {spec.agent.__name__ for spec in registry.ALGORITHMS.values()}
    classes |= {spec.config.__name__ for spec in registry.ALGORITHMS.values()}
    offenders = []
    for folder in ("robolearn/cli", "robolearn/runners"):
        for path in (REPO / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Name) and node.id in classes:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.id}")
    assert not offenders, offenders
