"""Actuator models run in Python per physics substep: IdealPD against MuJoCo's own PD servo,
DCMotor's torque-speed envelope by hand, DelayedPD against IdealPD fed delayed targets, per-world
gain draws, checkpoints and configuration errors.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from robolearn.assets import gymnasium_asset
from robolearn.envs import ActionTerm, BatchedEnv, TaskCfg, task_cfg
from robolearn.sim2real.randomization.actuators import DCMotor, DelayedPD, IdealPD
from robolearn.sim2real.randomization.latency import ActionDelay, ControlJitter

KP = [30.0, 20.0, 10.0, 30.0, 10.0, 5.0]
KD = [1.0, 0.8, 0.5, 1.0, 0.5, 0.2]
"""HalfCheetah gains small enough that no effort reaches a motor's limit (gear * ctrlrange)."""


def _targets(steps: int, n: int, seed: int = 0, high: float = 0.6) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).uniform(-high, high, (steps, n, 6)))


def _cheetah(mjcf: str | None = None, **action: object) -> TaskCfg:
    cfg = task_cfg("HalfCheetah")
    if mjcf is not None:
        cfg.mjcf = mjcf
    cfg.actions = {"legs": ActionTerm(**action)}  # type: ignore[arg-type]
    return cfg


def _servo_vs_python(servo_xml: str | None, motor_xml: str | None, steps: int) -> tuple[float, float]:
    """Largest |qpos| and |qvel| gaps between the MuJoCo servo and IdealPD over ``steps``."""
    servo = BatchedEnv(_cheetah(servo_xml, kind="joint_pos", kp=KP, kd=KD), 8, seed=3)
    python = BatchedEnv(_cheetah(motor_xml, actuator=IdealPD(KP, KD)), 8, seed=3)
    limited = torch.as_tensor(python.model.actuator_ctrllimited).bool()
    dq = dv = 0.0
    for a in _targets(steps, 8):
        servo.step(a)
        python.step(a)
        assert (python.sim.ctrl[:, limited].abs() < 1.0).all()  # no motor reached its ctrlrange
        dq = max(dq, float((servo.sim.qpos - python.sim.qpos).abs().max()))
        dv = max(dv, float((servo.sim.qvel - python.sim.qvel).abs().max()))
    return dq, dv


def test_ideal_pd_matches_the_mujoco_servo_under_euler():
    assert _integrator_is_euler()
    # HalfCheetah's motors (gear 30-120): the effort goes to ctrl as effort / gear and MuJoCo
    # multiplies it back, which may round by one ulp; nothing else differs.
    dq, dv = _servo_vs_python(None, None, 100)
    assert dq < 1e-12 and dv < 1e-12
    # With gear-1 motors (unlimited, so they never clamp) the round trip is exact and so is the
    # match: the PD law is evaluated in MuJoCo's own order, once per substep at the same state.
    xml = re.sub(r'gear="\d+"', 'gear="1"', open(gymnasium_asset("half_cheetah.xml")).read())
    dq, dv = _servo_vs_python(xml, xml.replace('ctrllimited="true"', 'ctrllimited="false"'), 100)
    assert dq == 0.0 and dv == 0.0


def _integrator_is_euler() -> bool:
    env = BatchedEnv(task_cfg("HalfCheetah"), 1, seed=0)
    return int(env.model.opt.integrator) == 0  # mjINT_EULER: joint damping implicit, actuator bias explicit


def test_modelled_subset_next_to_a_plain_torque_term():
    # Back leg modelled (actuators out of model order), front leg plain torque: against the servo.
    back, front = ["bfoot", "bthigh", "bshin"], ["fthigh", "fshin", "ffoot"]
    kp, kd = [10.0, 30.0, 20.0], [0.5, 1.0, 0.8]
    servo_cfg, python_cfg = task_cfg("HalfCheetah"), task_cfg("HalfCheetah")
    servo_cfg.actions = {
        "back": ActionTerm(kind="joint_pos", actuators=back, kp=kp, kd=kd),
        "front": ActionTerm(actuators=front),
    }
    python_cfg.actions = {
        "back": ActionTerm(actuators=back, actuator=IdealPD(kp, kd)),
        "front": ActionTerm(actuators=front),
    }
    servo, python = BatchedEnv(servo_cfg, 4, seed=0), BatchedEnv(python_cfg, 4, seed=0)
    for a in _targets(30, 4, high=0.5):
        servo.step(a)
        python.step(a)
        torch.testing.assert_close(python.sim.qpos, servo.sim.qpos, rtol=0, atol=1e-12)
    torch.testing.assert_close(python.sim.ctrl[:, 3:], a[:, 3:])  # the torque term passes through


def test_modelled_term_is_bounded_by_joint_ranges():
    env = BatchedEnv(_cheetah(actuator=IdealPD(KP, KD), scale=2.0, offset=0.1), 2, seed=0)
    jnt = env.model.actuator_trnid[:, 0]
    rng = torch.as_tensor(env.model.jnt_range[jnt])
    torch.testing.assert_close(env.ctrl_low, (rng[:, 0] - 0.1) / 2.0)
    torch.testing.assert_close(env.ctrl_high, (rng[:, 1] - 0.1) / 2.0)


def test_dc_motor_torque_speed_envelope_by_hand():
    env = BatchedEnv(task_cfg("Cartpole-Balance"), 1, seed=0)
    # stall 10, continuous 6, no-load speed 5; kd = 0 so the PD effort is kp * (target - q).
    motor = DCMotor(kp=100.0, kd=0.0, saturation_effort=10.0, velocity_limit=5.0, effort_limit=6.0).build(env, "m", 1)
    q = torch.zeros(1, 1, dtype=torch.float64)

    def effort(target: float, qd: float) -> float:
        return float(motor(torch.tensor([[target]]).double(), q, torch.tensor([[qd]]).double()))

    # Driving forward (target far ahead): 10 * (1 - qd / 5), never above the continuous 6.
    assert effort(1.0, 0.0) == 6.0  # stall torque clipped to the continuous limit
    assert effort(1.0, 2.0) == 6.0  # 10 * 0.6 = 6
    assert effort(1.0, 2.5) == 5.0  # half speed: half the stall torque
    assert effort(1.0, 4.0) == pytest.approx(2.0)
    assert effort(1.0, 5.0) == 0.0  # at the no-load speed nothing is left
    assert effort(1.0, 7.0) == 0.0  # beyond it still nothing (never negative)
    assert effort(1.0, -3.0) == 6.0  # pushing against the motion: braking is not reduced
    # Driving backward mirrors it.
    assert effort(-1.0, -2.5) == -5.0
    assert effort(-1.0, 2.5) == -6.0
    # Inside the envelope the PD effort passes through unchanged.
    assert effort(0.03, 1.0) == pytest.approx(3.0)
    damped = DCMotor(kp=100.0, kd=2.0, saturation_effort=10.0, velocity_limit=5.0, effort_limit=6.0).build(env, "m", 1)
    out = damped(torch.tensor([[0.05]]).double(), torch.tensor([[0.01]]).double(), torch.tensor([[1.0]]).double())
    assert float(out) == pytest.approx(100.0 * 0.04 - 2.0 * 1.0)  # 2.0, below the 8.0 available
    lower, upper = damped.envelope(torch.tensor([[1.0, -1.0]]).double())
    torch.testing.assert_close(upper, torch.tensor([[6.0, 6.0]]).double())
    torch.testing.assert_close(lower, torch.tensor([[-6.0, -6.0]]).double())
    assert float(damped.envelope(torch.tensor([[4.0]]).double())[1]) == pytest.approx(2.0)


def test_ideal_pd_effort_limit_clips_symmetrically():
    env = BatchedEnv(task_cfg("Cartpole-Balance"), 1, seed=0)
    pd = IdealPD(kp=100.0, kd=0.0, effort_limit=[3.0, 4.0]).build(env, "m", 2)
    zero = torch.zeros(1, 2, dtype=torch.float64)
    torch.testing.assert_close(pd(torch.tensor([[1.0, -1.0]]).double(), zero, zero), torch.tensor([[3.0, -4.0]]).double())
    torch.testing.assert_close(pd(torch.tensor([[0.01, -0.02]]).double(), zero, zero), torch.tensor([[1.0, -2.0]]).double())


def test_dc_motor_runs_on_the_cheetah():
    motor = DCMotor(kp=KP, kd=KD, saturation_effort=60.0, velocity_limit=8.0, effort_limit=25.0)
    env = BatchedEnv(_cheetah(actuator=motor), 8, seed=0)
    plain = BatchedEnv(_cheetah(actuator=IdealPD(KP, KD)), 8, seed=0)
    for a in _targets(20, 8, high=1.0):
        env.step(a)
        plain.step(a)
    assert torch.isfinite(env.sim.qpos).all()
    gear = torch.as_tensor(env.model.actuator_gear[:, 0])
    assert (env.sim.ctrl.abs() * gear <= 25.0 + 1e-9).all()  # the continuous limit held
    assert not torch.allclose(env.sim.qpos, plain.sim.qpos)  # and the envelope mattered


@pytest.mark.parametrize("decimation", [1, 5])
def test_delayed_pd_equals_ideal_pd_fed_delayed_targets(decimation):
    n, steps = 8, 15
    delay_range = (0, 4) if decimation == 1 else (5, 5)
    delayed_cfg = _cheetah(actuator=DelayedPD(KP, KD, min_delay=delay_range[0], max_delay=delay_range[1]))
    ideal_cfg = _cheetah(actuator=IdealPD(KP, KD))
    for cfg in (delayed_cfg, ideal_cfg):
        cfg.decimation = decimation
    env, ideal = BatchedEnv(delayed_cfg, n, seed=1), BatchedEnv(ideal_cfg, n, seed=1)
    delay = env.drawn["actuator/legs/delay"][:, 0].long()
    assert ((delay >= delay_range[0]) & (delay <= delay_range[1])).all()
    if decimation == 1:
        assert delay.unique().numel() > 2  # per-world delays
    shift = delay // decimation  # whole control steps (the 5-substep delay is one step at decimation 5)
    acts = _targets(steps, n)
    for t in range(steps):
        # Before its first target has aged by the delay, a world tracks the episode's first target.
        fed = torch.stack([acts[max(0, t - int(shift[i])), i] for i in range(n)])
        env.step(acts[t])
        ideal.step(fed)
        assert torch.equal(env.sim.qpos, ideal.sim.qpos) and torch.equal(env.sim.qvel, ideal.sim.qvel), t


def test_gain_randomisation_per_world_recorded_and_reproducible():
    pd = IdealPD(KP, KD, kp_scale=(0.5, 1.5), kd_scale=(0.8, 1.2))
    cfg = _cheetah(actuator=pd)
    env = BatchedEnv(cfg, 16, seed=0)
    kp, kd = env.drawn["actuator/legs/kp"].clone(), env.drawn["actuator/legs/kd"].clone()
    nominal_kp, nominal_kd = torch.tensor(KP).double(), torch.tensor(KD).double()
    assert kp.shape == (16, 6) and ((kp >= 0.5 * nominal_kp) & (kp <= 1.5 * nominal_kp)).all()
    assert ((kd >= 0.8 * nominal_kd) & (kd <= 1.2 * nominal_kd)).all()
    assert kp[:, 0].unique().numel() == 16
    again = BatchedEnv(cfg, 16, seed=0)
    assert torch.equal(again.drawn["actuator/legs/kp"], kp)
    # A reset redraws only the reset worlds' gains; info keeps the ones the step ran under.
    env.episode_length[3] = env.max_episode_length - 1
    _, _, _, truncated, info = env.step(torch.zeros(16, 6))
    assert truncated[3] and torch.equal(info["drawn"]["actuator/legs/kp"], kp)
    now = env.drawn["actuator/legs/kp"]
    assert (now[3] != kp[3]).all() and torch.equal(now[torch.arange(16) != 3], kp[torch.arange(16) != 3])
    # The gains in use are the drawn ones: a world's effort follows its own kp.
    state = env.model_states["actuator/legs"]
    torch.testing.assert_close(state.kp, now)


def test_actuator_state_dict_resumes_exactly():
    cfg = _cheetah(actuator=DelayedPD(KP, KD, min_delay=0, max_delay=6, kp_scale=(0.7, 1.3)))
    cfg.control_jitter = ControlJitter(2)
    cfg.action_delay = ActionDelay((0, 2))
    env = BatchedEnv(cfg, 4, seed=5)
    acts = _targets(14, 4)
    for a in acts[:6]:
        env.step(a)
    other = BatchedEnv(cfg, 4, seed=6)
    other.load_state_dict(env.state_dict())
    for t, a in enumerate(acts[6:]):
        if t == 3:
            for e in (env, other):
                e.episode_length[1] = e.max_episode_length - 1
        o1, r1, *_, i1 = env.step(a)
        o2, r2, *_, i2 = other.step(a)
        assert torch.equal(o1["policy"], o2["policy"]) and torch.equal(r1, r2)
        assert all(torch.equal(i1["drawn"][k], i2["drawn"][k]) for k in i1["drawn"])
    plain = BatchedEnv(task_cfg("HalfCheetah"), 4, seed=5)
    with pytest.raises(ValueError, match="latency/actuator models"):
        plain.load_state_dict(env.state_dict())


def test_bad_actuator_configs_name_the_field():
    with pytest.raises(ValueError, match=r"actions\.legs\.actuator: an actuator model needs kind='torque'"):
        BatchedEnv(_cheetah(kind="joint_pos", actuator=IdealPD(KP, KD)), 1, seed=0)
    with pytest.raises(ValueError, match=r"actions\.legs\.actuator: the gains belong to the actuator model"):
        BatchedEnv(_cheetah(kp=1.0, actuator=IdealPD(KP, KD)), 1, seed=0)
    with pytest.raises(ValueError, match=r"actions\.legs\.actuator\.kp: expected a scalar or 6 values"):
        BatchedEnv(_cheetah(actuator=IdealPD([1.0, 2.0], KD)), 1, seed=0)
    with pytest.raises(ValueError, match=r"actions\.legs\.actuator\.effort_limit: a DC motor needs"):
        BatchedEnv(_cheetah(actuator=DCMotor(KP, KD, saturation_effort=1.0, velocity_limit=1.0)), 1, seed=0)
    with pytest.raises(ValueError, match=r"actions\.legs\.actuator\.kp_scale"):
        BatchedEnv(_cheetah(actuator=IdealPD(KP, KD, kp_scale=(2.0, 1.0))), 1, seed=0)
    with pytest.raises(ValueError, match=r"min_delay, max_delay"):
        BatchedEnv(_cheetah(actuator=DelayedPD(KP, KD, min_delay=3, max_delay=1)), 1, seed=0)
    # A servo in the MJCF is not a motor: the model would fight MuJoCo's own PD.
    xml = open(gymnasium_asset("half_cheetah.xml")).read()
    xml = xml.replace('<motor gear="120" joint="bthigh"', '<position kp="5" joint="bthigh"')
    with pytest.raises(ValueError, match=r"actuator 'bthigh' must be a motor"):
        BatchedEnv(_cheetah(xml, actuator=IdealPD(KP, KD)), 1, seed=0)
