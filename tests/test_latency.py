"""Latency models on real physics: observation delay (lag, jitter, holds), action delay and
control-period jitter; per-world draws, reproducibility, resets, checkpoints and ``env.drawn``.

The undelayed reference for an observation delay is a ``critic`` group with the same terms and no
delay in the same env: both groups see the same physics, so any difference is the delay's doing.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from robolearn.envs import BatchedEnv, ObsGroup, ObsTerm, TaskCfg, mdp, task_cfg
from robolearn.sim2real.randomization.latency import ActionDelay, ControlJitter, ObservationDelay


def _actions(steps: int, n: int, dim: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).uniform(-1, 1, (steps, n, dim)))


def _delayed_cfg(task: str, delay: ObservationDelay) -> TaskCfg:
    """``task`` with its policy group delayed and an undelayed copy of it as the critic group."""
    cfg = task_cfg(task)
    policy = cfg.observations["policy"]
    cfg.observations["critic"] = ObsGroup(dict(policy.terms), enable_noise=False)
    policy.delay = delay
    return cfg


class _Reference:
    """Per-world undelayed frames since each world's episode start, to look delayed ones up in."""

    def __init__(self, first: torch.Tensor) -> None:
        self.frames = [[row] for row in first]

    def push(self, frame: torch.Tensor, reset: torch.Tensor) -> None:
        for i, row in enumerate(frame):
            if reset[i]:
                self.frames[i] = [row]
            else:
                self.frames[i].append(row)

    def aged(self, i: int, age: int) -> torch.Tensor:
        """World ``i``'s frame ``age`` steps ago (the episode's first before its start)."""
        seq = self.frames[i]
        return seq[max(0, len(seq) - 1 - age)]


# -- observation delay -------------------------------------------------------------------------
def test_fixed_lag_shifts_observations_exactly_k_steps():
    k, n = 3, 4
    env = BatchedEnv(_delayed_cfg("HalfCheetah", ObservationDelay((k, k))), n, seed=0)
    plain = BatchedEnv(task_cfg("HalfCheetah"), n, seed=0)
    delayed, undelayed = [env.obs["policy"]], [plain.obs["policy"]]
    for a in _actions(12, n, 6):
        delayed.append(env.step(a)[0]["policy"])
        undelayed.append(plain.step(a)[0]["policy"])
    for t in range(len(delayed)):
        # Before k steps have passed the episode's first frame is delivered (the buffer is
        # filled with it at reset), never zeros.
        assert torch.equal(delayed[t], undelayed[max(0, t - k)]), t
    assert (env.drawn["obs_delay/policy"] == k).all()
    # A fixed lag draws nothing: the physics and every other draw are those of the plain env.
    assert torch.equal(env.sim.qpos, plain.sim.qpos)


def test_per_world_lags_distinct_in_range_and_reproducible():
    n = 64
    cfg = _delayed_cfg("Cartpole-Balance", ObservationDelay((0, 5)))
    env = BatchedEnv(cfg, n, seed=1)
    lags = env.drawn["obs_delay/policy"][:, 0]
    assert ((lags >= 0) & (lags <= 5)).all() and lags.unique().numel() == 6
    assert torch.equal(lags, BatchedEnv(cfg, n, seed=1).drawn["obs_delay/policy"][:, 0])
    assert not torch.equal(lags, BatchedEnv(cfg, n, seed=2).drawn["obs_delay/policy"][:, 0])
    # World i's frame is always the undelayed one lags[i] steps back.
    ref = _Reference(env.obs["critic"])
    for a in _actions(10, n, 1):
        obs, _, term, trunc, _ = env.step(a)
        ref.push(obs["critic"], term | trunc)
        for i in range(n):
            assert torch.equal(obs["policy"][i], ref.aged(i, int(lags[i])))


def test_reset_redraws_lags_per_world_and_leaves_other_buffers_alone():
    n = 8
    env = BatchedEnv(_delayed_cfg("Cartpole-Balance", ObservationDelay((1, 4))), n, seed=3)
    ref = _Reference(env.obs["critic"])
    before = env.drawn["obs_delay/policy"][:, 0].clone()
    redrawn = torch.zeros(n, dtype=torch.bool)
    acts = _actions(20, n, 1)
    for t, a in enumerate(acts):
        if t in (6, 13):  # worlds 0-1, then 5, time out at this step
            ids = torch.tensor([0, 1]) if t == 6 else torch.tensor([5])
            env.episode_length[ids] = env.max_episode_length - 1
        lags = env.drawn["obs_delay/policy"][:, 0].clone()
        obs, _, term, trunc, info = env.step(a)
        done = term | trunc
        assert torch.equal(info["drawn"]["obs_delay/policy"][:, 0], lags)  # what this step ran under
        ref.push(obs["critic"], done)
        now = env.drawn["obs_delay/policy"][:, 0]
        assert torch.equal(now[~done], lags[~done])
        redrawn |= done & (now != lags)
        for i in range(n):
            # A reset world restarts with its fresh frame; the others keep their own windows.
            assert torch.equal(obs["policy"][i], ref.aged(i, int(now[i]))), (t, i)
    assert redrawn.any()  # at least one of the three resets drew a different lag
    assert torch.equal(env.drawn["obs_delay/policy"][2:5, 0], before[2:5])


def test_history_stacks_the_delivered_frames():
    n, k, h = 4, 2, 3
    cfg = _delayed_cfg("Cartpole-Balance", ObservationDelay((k, k)))
    cfg.observations["policy"].history_length = h
    env = BatchedEnv(cfg, n, seed=0)
    ref = _Reference(env.obs["critic"])
    for a in _actions(8, n, 1):
        obs, *_ = env.step(a)
        ref.push(obs["critic"], torch.zeros(n, dtype=torch.bool))
        window = obs["policy"].reshape(n, h, -1)  # oldest first
        for i in range(n):
            for j in range(h):
                assert torch.equal(window[i, j], ref.aged(i, k + h - 1 - j))


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_hold_probability_extremes(p):
    n, k = 4, 2
    env = BatchedEnv(_delayed_cfg("Cartpole-Balance", ObservationDelay((k, k), hold_prob=p)), n, seed=0)
    first = env.obs["policy"].clone()
    ref = _Reference(env.obs["critic"])
    for t, a in enumerate(_actions(8, n, 1), start=1):
        obs, *_ = env.step(a)
        ref.push(obs["critic"], torch.zeros(n, dtype=torch.bool))
        if p == 0.0:  # never held: exactly the fixed lag
            assert all(torch.equal(obs["policy"][i], ref.aged(i, k)) for i in range(n))
        else:  # always held: the reset frame forever, its age growing by one per step
            assert (env.drawn["obs_age/policy"][:, 0] == t).all()
            assert torch.equal(obs["policy"], first)


def test_intermediate_hold_probability_holds_about_p_of_the_steps():
    n, p, steps = 256, 0.3, 40
    env = BatchedEnv(_delayed_cfg("Cartpole-Balance", ObservationDelay((0, 0), hold_prob=p)), n, seed=5)
    ref = _Reference(env.obs["critic"])
    held = 0
    for a in _actions(steps, n, 1):
        obs, *_ = env.step(a)
        ref.push(obs["critic"], torch.zeros(n, dtype=torch.bool))
        age = env.drawn["obs_age/policy"][:, 0].long()
        held += int((age > 0).sum())  # lag 0: a world is behind exactly when it was held
        assert all(torch.equal(obs["policy"][i], ref.aged(i, int(age[i]))) for i in range(n))
    assert abs(held / (n * steps) - p) < 0.02  # 3 sigma is about 0.014 for 10240 draws


def test_jitter_redraws_the_lag_every_step_and_never_goes_back_in_time():
    n = 16
    env = BatchedEnv(_delayed_cfg("Cartpole-Balance", ObservationDelay((0, 4), jitter=True)), n, seed=2)
    ref = _Reference(env.obs["critic"])
    stamps = torch.zeros(n, dtype=torch.long)  # step index of each world's delivered frame
    prev_age = torch.zeros(n, dtype=torch.long)
    lags_seen = []
    for t, a in enumerate(_actions(30, n, 1), start=1):
        obs, *_ = env.step(a)
        ref.push(obs["critic"], torch.zeros(n, dtype=torch.bool))
        lag = env.drawn["obs_delay/policy"][:, 0].long()
        age = env.drawn["obs_age/policy"][:, 0].long()
        lags_seen.append(lag)
        assert ((0 <= lag) & (lag <= 4)).all()
        assert torch.equal(age, torch.minimum(lag, prev_age + 1))  # the rule of the module doc
        prev_age = age
        stamp = t - age
        assert (stamp >= stamps).all()  # delivered timestamps never decrease
        stamps = stamp
        for i in range(n):
            assert torch.equal(obs["policy"][i], ref.aged(i, int(age[i])))
    lags = torch.stack(lags_seen)
    assert (lags[1:] != lags[:-1]).any(dim=0).all()  # every world's lag changed at some step


def test_observation_delay_state_dict_resumes_exactly():
    cfg = _delayed_cfg("Cartpole-Balance", ObservationDelay((0, 3), jitter=True, hold_prob=0.2))
    cfg.action_delay = ActionDelay((0, 2))
    env = BatchedEnv(cfg, 6, seed=4)
    acts = _actions(20, 6, 1)
    for a in acts[:7]:
        env.step(a)
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)
    buf.seek(0)
    other = BatchedEnv(cfg, 6, seed=99)
    other.load_state_dict(torch.load(buf, weights_only=True))
    for t, a in enumerate(acts[7:]):
        if t == 4:  # a reset inside the continuation redraws from the restored streams
            for e in (env, other):
                e.episode_length[:3] = e.max_episode_length - 1
        o1, r1, *_, i1 = env.step(a)
        o2, r2, *_, i2 = other.step(a)
        assert all(torch.equal(o1[g], o2[g]) for g in o1) and torch.equal(r1, r2)
        assert all(torch.equal(i1["drawn"][k], i2["drawn"][k]) for k in i1["drawn"])


def test_env_reset_restarts_every_model_like_a_fresh_env():
    cfg = _delayed_cfg("Cartpole-Balance", ObservationDelay((0, 3), jitter=True, hold_prob=0.3))
    cfg.action_delay = ActionDelay((0, 2))
    cfg.control_jitter = ControlJitter(1)
    env = BatchedEnv(cfg, 5, seed=0)
    acts = _actions(8, 5, 1)
    for a in acts[:5]:
        env.step(a)
    obs, _ = env.reset(seed=0)
    fresh = BatchedEnv(cfg, 5, seed=0)
    assert all(torch.equal(obs[g], fresh.obs[g]) for g in obs)
    for a in acts:
        o1, r1, *_, i1 = env.step(a)
        o2, r2, *_, i2 = fresh.step(a)
        assert all(torch.equal(o1[g], o2[g]) for g in o1) and torch.equal(r1, r2)
        assert all(torch.equal(i1["drawn"][k], i2["drawn"][k]) for k in i1["drawn"])


def test_drawn_delays_reach_env_drawn_info_and_the_privileged_group():
    cfg = _delayed_cfg("Cartpole-Balance", ObservationDelay((0, 5)))
    cfg.action_delay = ActionDelay((0, 3))
    cfg.observations["privileged"] = ObsGroup({"drawn": ObsTerm(mdp.drawn)}, enable_noise=False)
    env = BatchedEnv(cfg, 8, seed=0)
    assert {"obs_delay/policy", "action_delay"} <= set(env.drawn)
    _, _, _, _, info = env.step(torch.zeros(8, 1))
    for key in ("obs_delay/policy", "action_delay"):
        assert torch.equal(info["drawn"][key], env.drawn[key])
    expected = torch.cat([env.drawn[k] for k in sorted(env.drawn)], dim=1).float()
    assert torch.equal(env.obs["privileged"], expected)


def test_delay_draws_are_per_world_streams():
    # World i's draws depend on the seed and i only, not on how many worlds there are.
    cfg = _delayed_cfg("Cartpole-Balance", ObservationDelay((0, 9)))
    cfg.action_delay = ActionDelay((0, 9))
    small, large = BatchedEnv(cfg, 3, seed=7), BatchedEnv(cfg, 9, seed=7)
    for key in ("obs_delay/policy", "action_delay"):
        assert torch.equal(small.drawn[key], large.drawn[key][:3])


# -- action delay ------------------------------------------------------------------------------
def test_action_delay_shifts_applied_controls_exactly_k_steps_per_world():
    n, steps = 8, 12
    cfg = task_cfg("HalfCheetah")
    cfg.action_delay = ActionDelay((0, 3))
    env = BatchedEnv(cfg, n, seed=0)
    plain = BatchedEnv(task_cfg("HalfCheetah"), n, seed=0)
    lag = env.drawn["action_delay"][:, 0].long()
    assert lag.unique().numel() > 1 and ((0 <= lag) & (lag <= 3)).all()
    acts = _actions(steps, n, 6)
    for t in range(steps):
        # Until the first action arrives the zero action is applied (zero torque here).
        shifted = torch.stack([acts[t - lag[i], i] if t >= lag[i] else torch.zeros(6) for i in range(n)])
        env.step(acts[t])
        plain.step(shifted)
        assert torch.equal(env.sim.ctrl, plain.sim.ctrl), t
        assert torch.equal(env.sim.qpos, plain.sim.qpos), t
        assert torch.equal(env.action, acts[t])  # env.action stays the policy's choice


def test_action_delay_restarts_with_zero_actions_after_a_reset():
    n = 4
    cfg = task_cfg("HalfCheetah")
    cfg.action_delay = ActionDelay((2, 2))
    env = BatchedEnv(cfg, n, seed=0)
    acts = _actions(6, n, 6) + 2.0  # never zero, so a zero control is the reset's doing
    for t, a in enumerate(acts):
        if t == 2:
            env.episode_length[0] = env.max_episode_length - 1
        env.step(a)
        if t in (3, 4):  # world 0 restarted after step 2: its first two steps apply zeros
            assert (env.sim.ctrl[0] == 0).all() and (env.sim.ctrl[1:] != 0).all()
    assert (env.sim.ctrl != 0).all()


# -- control-period jitter ---------------------------------------------------------------------
def _manual_jitter_step(plain: BatchedEnv, prev: torch.Tensor, new: torch.Tensor, late: torch.Tensor) -> None:
    """One control step of ``plain`` substep by substep: world i holds ``prev`` for ``late[i]``."""
    for s in range(plain.cfg.decimation):
        plain.sim.step(torch.where((late > s).unsqueeze(1), prev, new), nstep=1)


def test_zero_jitter_reproduces_the_plain_env_bit_for_bit():
    n = 4
    cfg = task_cfg("HalfCheetah", episode_length=6)  # crosses a reset too
    cfg.control_jitter = ControlJitter(0)
    env, plain = BatchedEnv(cfg, n, seed=0), BatchedEnv(task_cfg("HalfCheetah", episode_length=6), n, seed=0)
    for a in _actions(10, n, 6):
        o1, r1, te1, tr1, _ = env.step(a)
        o2, r2, te2, tr2, _ = plain.step(a)
        assert torch.equal(o1["policy"], o2["policy"]) and torch.equal(r1, r2)
        assert torch.equal(tr1, tr2) and torch.equal(env.sim.qpos, plain.sim.qpos)


def test_jitter_realises_the_drawn_substep_split():
    n, steps = 8, 10
    cfg = task_cfg("HalfCheetah")
    cfg.control_jitter = ControlJitter(3)
    env = BatchedEnv(cfg, n, seed=0)
    plain = BatchedEnv(task_cfg("HalfCheetah"), n, seed=0)
    prev = torch.zeros(n, 6, dtype=torch.float64)  # the zero action's control before the first step
    lates = []
    for a in _actions(steps, n, 6):
        _, _, _, _, info = env.step(a)
        late = info["drawn"]["control_jitter"][:, 0].long()
        lates.append(late)
        _manual_jitter_step(plain, prev, a, late)
        prev = a
        assert torch.equal(env.sim.qpos, plain.sim.qpos) and torch.equal(env.sim.qvel, plain.sim.qvel)
    lates = torch.stack(lates)
    assert ((0 <= lates) & (lates <= 3)).all() and lates.unique().numel() == 4
    # ... and late commands change the trajectory against the on-time plain env.
    ontime = BatchedEnv(task_cfg("HalfCheetah"), n, seed=0)
    for a in _actions(steps, n, 6):
        ontime.step(a)
    assert not torch.allclose(env.sim.qpos, ontime.sim.qpos)


def test_jitter_state_dict_resumes_exactly():
    cfg = task_cfg("HalfCheetah")
    cfg.control_jitter = ControlJitter(4)
    cfg.action_delay = ActionDelay((0, 1))
    env = BatchedEnv(cfg, 4, seed=1)
    acts = _actions(12, 4, 6)
    for a in acts[:5]:
        env.step(a)
    other = BatchedEnv(cfg, 4, seed=2)
    other.load_state_dict(env.state_dict())
    for a in acts[5:]:
        o1, r1, *_ = env.step(a)
        o2, r2, *_ = other.step(a)
        assert torch.equal(o1["policy"], o2["policy"]) and torch.equal(r1, r2)


# -- configuration errors ----------------------------------------------------------------------
def test_bad_latency_configs_name_the_field():
    def delay(model: ObservationDelay):
        return lambda c: setattr(c.observations["policy"], "delay", model)

    bad = [
        ("observations.policy.delay.lag_range", delay(ObservationDelay((3, 1)))),
        ("observations.policy.delay.hold_prob", delay(ObservationDelay(hold_prob=1.5))),
        ("action_delay.lag_range", lambda c: setattr(c, "action_delay", ActionDelay((-1, 2)))),
        ("control_jitter.max_substeps", lambda c: setattr(c, "control_jitter", ControlJitter(6))),
        ("action_delay: expected a model", lambda c: setattr(c, "action_delay", 3)),
    ]
    for match, edit in bad:
        cfg = task_cfg("HalfCheetah")
        edit(cfg)
        with pytest.raises(ValueError, match=match):
            BatchedEnv(cfg, 2, seed=0)


def test_plain_env_has_no_model_state():
    env = BatchedEnv(task_cfg("HalfCheetah"), 2, seed=0)
    assert not env.model_states and not env._substepped
    assert "models" not in env.state_dict() and "prev_ctrl" not in env.state_dict()
