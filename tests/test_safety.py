"""The safety layer: properties over any policy output (hypothesis), hand-computed cases, timing.

The properties are what a robot owner relies on: whatever the policy emits (NaN, infinity, huge
values, nothing), whatever the readings do (stale, missing, past the limits), every emitted
command is finite, inside the absolute limits and, outside an e-stop, within the per-step change
of the previous one. Time is a simulated clock passed to the layer, so the watchdog and e-stop
timing are exact here and their measured distributions are printed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig, SafetyConfigError, SafetyLayer
from robolearn.sim2real.robots.base import Reading, RobotFeatures

EPS = 1e-9
"""Rounding allowance of ``prev + max_delta`` (the change limit is exact up to one float step)."""


def features(kind: str = "torque", n: int = 2, rate: float = 100.0, pos: float = 1.0, vel: float = 2.0,
             eff: float = 5.0) -> RobotFeatures:
    names = tuple(f"j{i}" for i in range(n))
    return RobotFeatures("r", names, names, kind, rate, tuple((-pos, pos) for _ in names), tuple(vel for _ in names),
                         tuple(eff for _ in names), tuple(0.0 for _ in names))


def reading(pos: list[float] | np.ndarray, vel: list[float] | np.ndarray, t: float = 0.0) -> Reading:
    return Reading(t, np.asarray(pos, dtype=np.float64), np.asarray(vel, dtype=np.float64), received=t)


# -- properties -------------------------------------------------------------------------------------
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.floats(min_value=-10.0, max_value=10.0),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300]),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:
    kind = draw(st.sampled_from(["torque", "joint_pos", "joint_vel"]))
    n = draw(st.integers(1, 4))
    lim = st.floats(min_value=0.05, max_value=20.0)
    names = tuple(f"j{i}" for i in range(n))
    lows = [draw(st.floats(-5.0, 0.0)) for _ in names]
    pos = tuple((lo, lo + draw(st.floats(0.01, 5.0))) for lo in lows)
    feats = RobotFeatures("r", names, names, kind, draw(st.sampled_from([50.0, 100.0, 500.0])), pos,
                          tuple(draw(lim) for _ in names), tuple(draw(lim) for _ in names),
                          tuple(draw(st.floats(-1.0, 1.0)) for _ in names))
    cfg = SafetyConfig(
        max_delta=draw(st.one_of(st.just(math.inf), st.floats(0.001, 3.0))),
        smoothing=draw(st.sampled_from([0.0, 0.3, 0.9])),
        stale_timeout_s=0.05,
        hold_mode=draw(st.sampled_from(["hold", "damp"])),
        damping=draw(st.floats(0.0, 5.0)),
        ramp_s=draw(st.sampled_from([0.0, 0.05])),
        position_margin=0.0,
    )
    steps = draw(st.lists(st.tuples(
        st.one_of(st.none(), st.lists(floats, min_size=n, max_size=n)),  # the policy's command (None: nothing)
        # measured positions and velocities (a broken sensor may report NaN: the layer must cope)
        st.lists(st.one_of(st.floats(-10.0, 10.0), st.just(math.nan)), min_size=n, max_size=n),
        st.lists(st.one_of(st.floats(-50.0, 50.0), st.just(math.nan)), min_size=n, max_size=n),
        st.sampled_from(["fresh", "fresh", "fresh", "stale", "missing"]),
        st.booleans(),  # e-stop pressed this step (rarely matters: it latches)
    ), min_size=1, max_size=30))
    return feats, cfg, steps


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_no_command_ever_leaves_the_limits_or_jumps(scenario: tuple) -> None:
    feats, cfg, steps = scenario
    layer = SafetyLayer(feats, cfg)
    lo = np.array([p[0] for p in feats.position_limits])
    hi = np.array([p[1] for p in feats.position_limits])
    vel = np.array(feats.velocity_limits)
    eff = np.array(feats.effort_limits)
    bound_lo, bound_hi = {"torque": (-eff, eff), "joint_vel": (-vel, vel), "joint_pos": (lo, hi)}[feats.command_kind]
    delta = np.full(len(lo), cfg.max_delta, dtype=np.float64)
    if feats.command_kind == "joint_pos":
        delta = np.minimum(delta, vel * feats.period)
    t = 0.0
    layer.start(reading(np.zeros(len(lo)), np.zeros(len(lo))), t)
    prev = layer.last_command
    estopped = False
    for command, pos, v, freshness, press in steps:
        t += feats.period
        r = None if freshness == "missing" else reading(pos, v, t if freshness == "fresh" else t - 1.0)
        if press and len(pos) % 3 == 0:
            layer.estop("test")
            estopped = True
        cmd, flags = layer.filter(None if command is None else np.array(command), r, t)
        assert cmd.shape == (len(lo),) and np.isfinite(cmd).all()
        assert (cmd >= bound_lo - EPS).all() and (cmd <= bound_hi + EPS).all()
        if estopped:
            assert flags & Intervention.ESTOP
        else:
            assert (np.abs(cmd - prev) <= delta * (1 + EPS) + EPS).all(), (cmd, prev, delta)
        if command is not None and not np.isfinite(np.array(command)).all() and not estopped:
            assert flags & Intervention.NONFINITE
        prev = cmd
    out, _ = layer.exit_command(reading(np.zeros(len(lo)), np.ones(len(lo)), t + feats.period), t + feats.period)
    assert np.isfinite(out).all() and (out >= bound_lo - EPS).all() and (out <= bound_hi + EPS).all()
    if not estopped:
        assert (np.abs(out - prev) <= delta * (1 + EPS) + EPS).all()


# -- hand-computed cases ----------------------------------------------------------------------------
def test_torque_limits_change_limit_and_smoothing_values() -> None:
    layer = SafetyLayer(features(eff=5.0), SafetyConfig(max_delta=1.0, ramp_s=0.0))
    r = reading([0.0, 0.0], [0.0, 0.0])
    layer.start(r, 0.0)
    cmd, flags = layer.filter(np.array([10.0, -0.5]), r, 0.0)
    assert cmd.tolist() == [1.0, -0.5] and flags == Intervention.EFFORT | Intervention.RATE  # 10 -> 5 -> +1 from 0
    cmd, _ = layer.filter(np.array([10.0, -0.5]), r, 0.01)
    assert cmd.tolist() == [2.0, -0.5]
    smooth = SafetyLayer(features(), SafetyConfig(smoothing=0.75, ramp_s=0.0))
    smooth.start(r, 0.0)
    cmd, flags = smooth.filter(np.array([4.0, -4.0]), r, 0.0)
    assert cmd.tolist() == [1.0, -1.0] and flags == Intervention.SMOOTHED  # 0.75 * 0 + 0.25 * 4
    cmd, _ = smooth.filter(np.array([4.0, -4.0]), r, 0.01)
    assert cmd.tolist() == pytest.approx([1.75, -1.75])  # 0.75 * 1 + 0.25 * 4


def test_nonfinite_and_stale_commands_become_the_damping_hold() -> None:
    layer = SafetyLayer(features(), SafetyConfig(damping=2.0, ramp_s=0.0, stale_timeout_s=0.05))
    r = reading([0.1, -0.2], [0.5, -1.5], t=0.0)
    layer.start(r, 0.0)
    cmd, flags = layer.filter(np.array([math.nan, 1.0]), r, 0.0)
    assert cmd.tolist() == [-1.0, 3.0] and flags == Intervention.NONFINITE  # -kd * v
    cmd, flags = layer.filter(np.array([1.0, 1.0]), r, 0.049)
    assert cmd.tolist() == [1.0, 1.0] and flags == 0 and layer.state == "run"
    cmd, flags = layer.filter(np.array([1.0, 1.0]), r, 0.051)  # the same reading, now 51 ms old
    assert cmd.tolist() == [-1.0, 3.0] and flags == Intervention.STALE and layer.state == "hold"
    cmd, flags = layer.filter(None, None, 0.06)  # no reading at all: zero effort
    assert cmd.tolist() == [0.0, 0.0] and flags == Intervention.HOLD | Intervention.STALE
    cmd, flags = layer.filter(np.array([1.0, 1.0]), reading([0.1, -0.2], [0.0, 0.0], 0.07), 0.07)
    assert flags == 0 and layer.state == "run"


def test_guards_remove_only_the_push_past_a_limit_or_along_an_overspeed() -> None:
    layer = SafetyLayer(features(pos=1.0, vel=2.0), SafetyConfig(ramp_s=0.0))
    layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
    past = reading([1.2, 1.2], [0.0, 0.0])
    cmd, flags = layer.filter(np.array([3.0, -3.0]), past, 0.0)
    assert cmd.tolist() == [0.0, -3.0] and flags == Intervention.POSITION  # outward zeroed, inward kept
    fast = reading([0.0, 0.0], [2.5, 2.5])
    cmd, flags = layer.filter(np.array([1.0, -1.0]), fast, 0.01)
    assert cmd.tolist() == [0.0, -1.0] and flags == Intervention.VELOCITY  # along the motion zeroed, braking kept


def test_position_robot_ramps_to_the_default_pose_then_follows_the_policy() -> None:
    feats = RobotFeatures("arm", ("a",), ("a",), "joint_pos", 100.0, ((-2.0, 2.0),), (100.0,), (10.0,), (1.0,))
    layer = SafetyLayer(feats, SafetyConfig(ramp_s=1.0))
    layer.start(reading([-1.0], [0.0]), 10.0)
    cmd, flags = layer.filter(np.array([1.9]), reading([-1.0], [0.0], 10.5), 10.5)
    assert cmd.tolist() == [0.0] and flags == Intervention.RAMP and layer.state == "ramp"  # halfway from -1 to 1
    cmd, flags = layer.filter(np.array([1.9]), reading([0.0], [0.0], 10.75), 10.75)
    assert cmd.tolist() == [0.5]
    cmd, flags = layer.filter(np.array([1.9]), reading([0.5], [0.0], 11.0), 11.0)
    # the ramp is over: the policy's 1.9, at most 100 rad/s * 10 ms = 1.0 from the previous 0.5
    assert cmd.tolist() == [1.5] and flags == Intervention.RATE and layer.state == "run"
    cmd, flags = layer.filter(np.array([3.0]), reading([1.0], [0.0], 11.01), 11.01)
    assert cmd.tolist() == [2.0] and flags == Intervention.POSITION


def test_torque_robot_soft_start_scales_the_command() -> None:
    layer = SafetyLayer(features(), SafetyConfig(ramp_s=0.2))
    layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
    cmd, flags = layer.filter(np.array([4.0, -2.0]), reading([0.0, 0.0], [0.0, 0.0], 0.05), 0.05)
    assert cmd.tolist() == [1.0, -0.5] and flags == Intervention.RAMP


def test_position_hold_keeps_the_pose_where_the_hold_began() -> None:
    feats = RobotFeatures("arm", ("a",), ("a",), "joint_pos", 100.0, ((-2.0, 2.0),), (100.0,), (10.0,), (0.0,))
    layer = SafetyLayer(feats, SafetyConfig(ramp_s=0.0))
    layer.start(reading([0.3], [0.0]), 0.0)
    layer.filter(np.array([0.4]), reading([0.3], [0.0], 0.0), 0.0)
    cmd, _ = layer.filter(np.array([math.inf]), reading([0.35], [0.0], 0.01), 0.01)
    assert cmd.tolist() == [0.35]
    cmd, _ = layer.filter(np.array([math.nan]), reading([0.5], [0.0], 0.02), 0.02)
    assert cmd.tolist() == [0.35]  # latched at the first held step, not following the drift


# -- e-stop and watchdog timing ---------------------------------------------------------------------
def test_estop_latches_until_cleared() -> None:
    layer = SafetyLayer(features(), SafetyConfig(damping=1.0, ramp_s=0.0, max_delta=0.1))
    r = reading([0.0, 0.0], [1.0, -1.0])
    layer.start(r, 0.0)
    for k in range(5):
        layer.filter(np.array([5.0, 5.0]), r, 0.01 * k)
    assert layer.last_command.tolist() == pytest.approx([0.5, 0.5])
    layer.estop("operator")
    for k in range(50):  # good commands and fresh readings do not release it
        cmd, flags = layer.filter(np.array([1.0, 1.0]), reading([0.0, 0.0], [1.0, -1.0], 1 + k * 0.01), 1 + k * 0.01)
        assert flags == Intervention.ESTOP and cmd.tolist() == [-1.0, 1.0]  # straight to damping, no change limit
    assert layer.state == "estop" and layer.estop_reason == "operator"
    cmd, flags = layer.exit_command(r, 2.0)
    assert flags == Intervention.ESTOP  # exiting does not leave the e-stop either
    layer.clear_estop()
    cmd, flags = layer.filter(np.array([1.0, 1.0]), reading([0.0, 0.0], [0.0, 0.0], 2.0), 2.0)
    assert flags == Intervention.RATE and cmd.tolist() == pytest.approx([-0.9, 1.0])  # resumes from the damping, 0.1 a step


def test_watchdog_trips_after_the_timeout_and_not_before() -> None:
    """Readings arrive every 10 ms with jitter, then stop; the trip latency after the last reading
    is measured over many simulated runs and must sit in ``[timeout, timeout + one tick]``.
    """
    rng = np.random.default_rng(0)
    latencies = []
    for _ in range(200):
        layer = SafetyLayer(features(rate=500.0), SafetyConfig(ramp_s=0.0, stale_timeout_s=0.05))
        t, last = 0.0, None
        layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
        stop_at = rng.uniform(0.2, 0.5)
        tick = 0.002 * rng.uniform(0.9, 1.1)
        while True:
            t += tick
            if t < stop_at:
                last = reading([0.0, 0.0], [0.0, 0.0], t - rng.uniform(0.0, 0.003))  # transport delay
            _, flags = layer.filter(np.zeros(2), last, t)
            if flags & Intervention.STALE:
                latencies.append(t - last.age_reference)
                break
            assert t - last.age_reference <= 0.05
    lat = np.array(latencies)
    print(f"watchdog trip latency after the last reading (ms): min {lat.min() * 1e3:.2f} p50 "
          f"{np.percentile(lat, 50) * 1e3:.2f} p99 {np.percentile(lat, 99) * 1e3:.2f} max {lat.max() * 1e3:.2f}")
    assert (lat > 0.05).all() and (lat <= 0.05 + 0.0023).all()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"smoothing": 1.0}, r"safety.smoothing: expected a weight in \[0, 1\), got 1.0"),
        ({"max_delta": 0}, r"safety.max_delta: expected a positive number \(or inf\), got 0.0"),
        ({"max_delta": [0.1, -1]}, r"safety.max_delta\[1\]: expected a positive number"),
        ({"stale_timeout_s": "soon"}, r"safety.stale_timeout_s: expected a number, got 'soon'"),
        ({"hold_mode": "freeze"}, r"safety.hold_mode: expected 'hold' or 'damp', got 'freeze'"),
        ({"ramp_s": -1}, r"safety.ramp_s: expected a finite number >= 0, got -1.0"),
        ({"damping": "nan"}, r"safety.damping: expected a number, got NaN"),
        ({"brakes": True}, r"safety: unknown settings \['brakes'\]"),
    ],
)
def test_config_errors_name_the_field_and_value(data: dict, message: str) -> None:
    with pytest.raises(SafetyConfigError, match=message):
        SafetyConfig.from_dict(data)
    assert SafetyConfig.from_dict({"max_delta": "inf", "damping": [1, 2]}) == SafetyConfig(max_delta=math.inf, damping=(1.0, 2.0))


def test_width_mismatches_are_refused() -> None:
    with pytest.raises(SafetyConfigError, match=r"safety.max_delta: expected one value or 2"):
        SafetyLayer(features(n=2), SafetyConfig(max_delta=(0.1, 0.2, 0.3)))
    layer = SafetyLayer(features(n=2), SafetyConfig())
    with pytest.raises(ValueError, match=r"expected a command of 2 values"):
        layer.filter(np.zeros(3), reading([0, 0], [0, 0]), 0.0)
