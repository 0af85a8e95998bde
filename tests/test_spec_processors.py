"""Observation and action processors (robolearn.spec.processors): hand-computed numerics, and the
env's observations reproduced exactly by the processors applied to the raw terms, as a deploy
runtime would apply them (built from the spec read back from JSON, no env in the loop)."""

from __future__ import annotations

import pytest
import torch

import robolearn
from robolearn.envs import ActionTerm, BatchedEnv, NoiseCfg, ObsGroup, ObsTerm, mdp
from robolearn.sim2real.randomization import ObservationDelay
from robolearn.spec import (
    ActionProcessor,
    Delay,
    GeneratorSource,
    History,
    LastAction,
    NoiseSpec,
    ObservationProcessor,
    ObsGroupSpec,
    ObsTermSpec,
    PolicySpec,
    TermProcessor,
)
from robolearn.tasks.locomotion.half_cheetah import half_cheetah_cfg
from robolearn.tasks.locomotion.half_cheetah_dr import half_cheetah_dr_cfg
from robolearn.utils.rng import WorldRNG


class _Replica:
    """The env's random streams replayed from a copy of its generator state (what the env's
    managers hand their processors): per-step streams for every world, counters for reset rows."""

    def __init__(self, env: BatchedEnv) -> None:
        self.rng = WorldRNG(env.seed, env.num_envs)
        self.rng.load_state_dict(env.rng.state_dict())
        self.rows: torch.Tensor | None = None

    def uniform(self, name: str, size: int) -> torch.Tensor:
        return self.rng.step_uniform(name, size) if self.rows is None else self.rng.uniform(self.rows, size)

    def normal(self, name: str, size: int) -> torch.Tensor:
        return self.rng.step_normal(name, size) if self.rows is None else self.rng.normal(self.rows, size)


class _HandDelay:
    """A spec Delay driven like the env drives it: lags as the env drew them, restarts on rows."""

    def __init__(self, proc: Delay, lags: torch.Tensor, source: _Replica, name: str) -> None:
        self.proc, self.source, self.name, self.started = proc, source, name, False
        proc.lag.copy_(lags)

    def __call__(self, frame: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        if not self.started or rows is not None:
            self.proc.restart(self.proc.rows if rows is None else rows, frame)
            self.started = True
            return frame
        k = self.proc.draws_per_step
        return self.proc(frame, self.source.uniform(self.name, k) if k else None)


def _processed_cfg():
    cfg = half_cheetah_dr_cfg()
    cfg.episode_length = 1000
    policy = cfg.observations["policy"].terms
    policy["joint_vel"].clip = (-3.0, 3.0)
    policy["joint_pos"].scale = [0.5 + 0.1 * i for i in range(8)]
    policy["last_action"] = ObsTerm(mdp.last_action, noise=NoiseCfg("uniform", 0.2), scale=2.0)
    history = ObsGroup(
        {
            "pos": ObsTerm(mdp.qpos, params={"start": 1}, noise=NoiseCfg("uniform", 0.05), clip=(-0.5, 0.5)),
            "vel": ObsTerm(mdp.qvel, noise=NoiseCfg("gaussian", 0.3), scale=0.1),
        },
        history_length=4,
        delay=ObservationDelay((0, 2), jitter=True, hold_prob=0.2),
    )
    # Before the privileged group, whose drawn values then include this step's delay draws both in
    # the env and when the terms are read again after the step.
    cfg.observations = {"policy": cfg.observations["policy"], "history": history, "privileged": cfg.observations["privileged"]}
    return cfg


def test_env_observations_equal_the_processors_applied_to_the_raw_terms():
    """HalfCheetah-DR with noise (both kinds), clip, per-element scale, a last-action term, delays
    (fixed per episode; jittered with holds) and history: 300 steps and a mid-run restart of some
    worlds, bit for bit."""
    n = 6
    env = BatchedEnv(_processed_cfg(), n, seed=11)
    source = _Replica(env)  # before the reset, whose observation draws this step's noise
    obs, _ = env.reset()
    spec = PolicySpec.from_json(PolicySpec.from_dict(env.policy_spec()).to_json())  # the deploy side's copy
    last = LastAction(n, env.action_dim)
    procs = {}
    for g, gspec in spec.observations.items():
        delay = None
        if gspec.delay is not None:
            delay = _HandDelay(Delay.from_spec(gspec.delay, n), env.drawn[f"obs_delay/{g}"][:, 0].long(), source, f"obs_delay/{g}")
        procs[g] = ObservationProcessor(g, gspec, dtype=env.dtype, delay=delay)
    groups = env.observation_manager.groups  # the raw terms' functions (the critic's default included)

    def by_hand(rows: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        out = {}
        for g, proc in procs.items():
            raw = []
            for term in groups[g].terms.values():
                # On a robot the last action is the runtime's own record, not an env attribute.
                value = last.value if term.func is mdp.last_action else term.func(env, **term.params)
                raw.append(value if rows is None else value[rows])
            out[g] = proc(raw, source if groups[g].enable_noise else None, rows)
        return out

    expected = by_hand()
    for g in obs:
        assert torch.equal(obs[g], expected[g]), g
    gen = torch.Generator().manual_seed(0)
    for t in range(300):
        action = torch.rand(n, env.action_dim, generator=gen) * 2 - 1
        obs, *_, info = env.step(action)
        assert "episode" not in info  # no resets inside the window: the rows path is tested below
        last.record(action)
        expected = by_hand()
        for g in obs:
            assert torch.equal(obs[g], expected[g]), (t, g)
        if t == 150:
            ids = torch.tensor([1, 4])
            source = _Replica(env)  # the counters as they are now (events have drawn since)
            for p in procs.values():
                if isinstance(p.delay, _HandDelay):
                    p.delay.source = source
            qpos, qvel = env.sim.qpos[ids] * 0.9, env.sim.qvel[ids] * 0.5
            fresh = env.set_state(qpos, qvel, ids)
            source.rows = ids
            rows = by_hand(ids)
            source.rows = None
            for g in fresh:
                assert torch.equal(fresh[g][ids], rows[g]), g
    # the history group really stacks delayed, noisy frames (not a pass-through)
    assert obs["history"].shape == (n, 4 * 17) and not torch.equal(obs["history"][:, :17], obs["history"][:, -17:])


def test_term_processor_order_is_noise_then_clip_then_scale():
    term = ObsTermSpec("x", 0, 2, scale=(3.0, -1.0), clip=(-1.0, 2.0), noise=NoiseSpec("gaussian", 0.5))
    proc = TermProcessor(term)
    value = torch.tensor([[2.0, 0.2]], dtype=torch.float64)
    noise = torch.tensor([[1.0, -4.0]], dtype=torch.float64)  # scale 1; the term's 0.5 applies
    # x0: 2 + 0.5 = 2.5 -> clip 2 -> *3 = 6; x1: 0.2 - 2 = -1.8 -> clip -1 -> *-1 = 1
    assert proc(value, noise).tolist() == [[6.0, 1.0]]
    assert proc(value).tolist() == [[6.0, -0.2]]  # no draws (a robot's reading): clip and scale only
    assert value.tolist() == [[2.0, 0.2]]  # the input is not written to


def test_group_processor_draws_one_block_per_noise_kind_and_stacks_history():
    group = ObsGroupSpec(
        shape=(2 * 3,),
        frame_dim=2,
        terms=(
            ObsTermSpec("a", 0, 1, noise=NoiseSpec("uniform", 0.1)),
            ObsTermSpec("b", 1, 1, noise=NoiseSpec("uniform", 10.0)),
        ),
        history_length=3,
    )
    proc = ObservationProcessor("policy", group, dtype=torch.float64)
    zeros = [torch.zeros(4, 1, dtype=torch.float64), torch.zeros(4, 1, dtype=torch.float64)]
    gen = torch.Generator().manual_seed(3)
    u = torch.rand(4, 2, generator=gen, dtype=torch.float64)
    out = proc(zeros, GeneratorSource(4, torch.Generator().manual_seed(3)))
    unit = 2 * u - 1  # one uniform block of width 2 split between the terms, each at its own scale
    frame = torch.cat([unit[:, :1] * 0.1, unit[:, 1:] * 10.0], dim=1)
    torch.testing.assert_close(out, frame.repeat(1, 3), rtol=0, atol=0)
    assert out.abs()[:, 1].max() > 1.0 > out.abs()[:, 0].max()


def test_history_restarts_rows_without_touching_earlier_observations():
    hist = History(3)
    f = [torch.full((2, 1), float(v)) for v in range(1, 5)]
    assert hist(f[0]).tolist() == [[1, 1, 1]] * 2
    assert hist(f[1]).tolist() == [[1, 1, 2]] * 2
    before = hist(f[2])
    assert before.tolist() == [[1, 2, 3]] * 2
    fresh = hist(f[3][:1], rows=torch.tensor([1]))
    assert fresh.tolist() == [[4, 4, 4]]
    assert before.tolist() == [[1, 2, 3]] * 2  # the final observation handed out keeps its values
    assert hist(torch.tensor([[5.0], [6.0]])).tolist() == [[2, 3, 5], [4, 4, 6]]
    with pytest.raises(ValueError, match="history_length: expected an integer >= 1"):
        History(0)


def test_delay_fixed_lag_jitter_and_holds():
    frames = [torch.full((3, 1), float(t)) for t in range(12)]
    fixed = Delay(2, 2, batch=3)
    fixed.restart(fixed.rows, frames[0])
    assert [fixed(frames[t])[0, 0].item() for t in range(1, 6)] == [0, 0, 1, 2, 3]
    # Jitter: lags redrawn each step from the caller's uniforms; delivered frames never go back.
    jit = Delay(0, 3, jitter=True, batch=3)
    jit.restart(jit.rows, frames[0])
    u = torch.tensor([[0.99], [0.0], [0.3]])  # lags 3, 0, 1
    assert jit(frames[1], u).flatten().tolist() == [0, 1, 0]  # world 0: frame -2 is before the start
    u = torch.tensor([[0.0], [0.99], [0.6]])  # lags 0, 3, 2
    assert jit(frames[2], u).flatten().tolist() == [2, 1, 0]  # world 1 holds frame 1 (never back)
    assert jit.age.tolist() == [0, 1, 2]
    held = Delay(0, 0, hold_prob=1.0, batch=3)
    held.restart(held.rows, frames[0])
    assert [held(frames[t], torch.zeros(3, 1))[0, 0].item() for t in range(1, 4)] == [0, 0, 0]
    assert held(frames[4], torch.ones(3, 1))[0, 0].item() == 4  # u >= p: refreshed


def test_action_processor_from_spec_matches_the_env():
    cfg = half_cheetah_cfg()
    cfg.actions = {
        "back": ActionTerm(actuators=["bthigh", "bshin", "bfoot"], scale=[2.0, 1.0, 0.5], offset=0.25, clip=(-0.5, 0.5)),
        "front": ActionTerm(actuators=["fthigh", "fshin", "ffoot"], scale=3.0),
    }
    env = BatchedEnv(cfg, 4, seed=0)
    spec = PolicySpec.from_dict(env.policy_spec())
    proc = ActionProcessor.from_spec(spec.actions)
    a = torch.linspace(-2, 2, 24).reshape(4, 6)
    ctrl = env.action_manager.process(a)[:, env.action_manager.index]
    assert torch.equal(proc(a), ctrl)
    # hand-computed: back clips to +-0.5 then 0.25 + scale * a; front 3 * a without a clip
    out = proc(torch.tensor([[1.0, -1.0, 0.2, 1.0, -1.0, 0.1]], dtype=torch.float64))
    assert out[0].tolist() == pytest.approx([1.25, -0.25, 0.35, 3.0, -3.0, 0.3], abs=1e-12)


def test_last_action_resets_rows_and_copies():
    last = LastAction(3, 2)
    a = torch.ones(3, 2)
    last.record(a)
    a.add_(1.0)  # the caller reuses its tensor
    assert last.value.tolist() == [[1, 1]] * 3
    last.reset(torch.tensor([1]))
    assert last.value.tolist() == [[1, 1], [0, 0], [1, 1]]


def test_last_action_term_reads_the_env_action():
    env = robolearn.make("HalfCheetah", 2, seed=0)
    last = LastAction(2, 6)
    a = torch.rand(2, 6)
    env.step(a)
    last.record(a)
    assert torch.equal(mdp.last_action(env), last.value)
