"""The safety layer: properties over any policy output (hypothesis), hand-computed cases, timing.

The properties are what a robot owner relies on: whatever the policy emits (NaN, infinity, huge
values, nothing), whatever the readings do (stale, missing, NaN, past the limits), every emitted
command is finite, inside the absolute limits and, outside the e-stop transition, within the
per-step change of the previous one. The property test also runs a plain-Python, joint-by-joint
reference of the documented semantics next to the layer and compares commands, flags and state
at every step. Time is a simulated clock passed to the layer, so the watchdog and e-stop timing
are exact here; their measured distributions are printed, and one e-stop test presses from
another thread on the real clock with a generous bound.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig, SafetyConfigError, SafetyLayer
from robolearn.sim2real.robots.base import Reading, RobotFeatures

EPS = 1e-9
"""Rounding allowance of ``prev + max_delta`` (the change limit is exact up to one float step)."""

I = Intervention  # noqa: E741 (short: the flags appear in most asserts)


def features(kind: str = "torque", n: int = 2, rate: float = 100.0, pos: float = 1.0, vel: float = 2.0,
             eff: float = 5.0) -> RobotFeatures:
    names = tuple(f"j{i}" for i in range(n))
    return RobotFeatures("r", names, names, kind, rate, tuple((-pos, pos) for _ in names), tuple(vel for _ in names),
                         tuple(eff for _ in names), tuple(0.0 for _ in names))


def reading(pos: list[float] | np.ndarray, vel: list[float] | np.ndarray, t: float = 0.0) -> Reading:
    return Reading(t, np.asarray(pos, dtype=np.float64), np.asarray(vel, dtype=np.float64), received=t)


# -- a joint-by-joint reference of the documented semantics -----------------------------------------
class Reference:
    """The module doc's rules, one joint at a time in plain floats (no NumPy, no shared code)."""

    def __init__(self, feats: RobotFeatures, cfg: SafetyConfig) -> None:
        self.kind, self.cfg, self.n = feats.command_kind, cfg, len(feats.command_joints)
        m = cfg.position_margin
        self.lo = [lo + m if math.isfinite(lo) else lo for lo, _ in feats.position_limits]
        self.hi = [hi - m if math.isfinite(hi) else hi for _, hi in feats.position_limits]
        self.vel, self.eff = list(feats.velocity_limits), list(feats.effort_limits)
        md = cfg.max_delta if isinstance(cfg.max_delta, tuple) else (cfg.max_delta,) * self.n
        kd = cfg.damping if isinstance(cfg.damping, tuple) else (cfg.damping,) * self.n
        self.kd = [float(k) for k in kd]
        self.delta = [min(d, v * feats.period) if self.kind == "joint_pos" else float(d) for d, v in zip(md, self.vel, strict=True)]
        if self.kind == "joint_pos":
            self.blo, self.bhi, self.abs_flag = self.lo, self.hi, I.POSITION
        elif self.kind == "joint_vel":
            self.blo, self.bhi, self.abs_flag = [-v for v in self.vel], self.vel, I.VELOCITY
        else:
            self.blo, self.bhi, self.abs_flag = [-e for e in self.eff], self.eff, I.EFFORT
        self.default = list(feats.default_pose)
        self.prev = [self.clamp(i, 0.0) for i in range(self.n)]
        self.emitted, self.mode, self.estopped = False, "idle", False
        self.latched: list[float] | None = None
        self.ramp_start, self.ramp_from = 0.0, [0.0] * self.n

    @property
    def state(self) -> str:
        return "estop" if self.estopped else self.mode

    def clamp(self, i: int, x: float) -> float:
        return min(max(x, self.blo[i]), self.bhi[i])

    def start(self, pos: list[float], t: float) -> None:
        if self.kind == "joint_pos":
            self.ramp_from = [self.clamp(i, p) for i, p in enumerate(pos)]
            if not self.emitted:
                self.prev = list(self.ramp_from)
        elif not self.emitted:
            self.prev = [self.clamp(i, 0.0) for i in range(self.n)]
        self.ramp_start, self.latched = t, None
        self.mode = "ramp" if self.cfg.ramp_s > 0 else "run"

    def damp(self, r: Reading | None) -> list[float]:
        out = []
        for i in range(self.n):
            if self.kind == "joint_vel":
                out.append(0.0)
            elif self.kind == "torque":
                x = 0.0 if r is None else -self.kd[i] * float(r.joint_vel[i])
                out.append(x if math.isfinite(x) else 0.0)
            else:
                p = self.prev[i] if r is None else float(r.joint_pos[i])
                out.append(p if math.isfinite(p) else self.prev[i])
        return out

    def hold(self, r: Reading | None) -> list[float]:
        if self.kind != "joint_pos" or self.cfg.hold_mode == "damp":
            return self.damp(r)
        if self.latched is None:
            self.latched = self.damp(r)
        return list(self.latched)

    def emit(self, target: list[float], flags: int, rate: bool) -> tuple[list[float], int]:
        out = []
        for i, x in enumerate(target):
            if not math.isfinite(x):  # an overflow on the way (huge values and unlimited joints)
                x, flags = (self.prev[i] if self.kind == "joint_pos" else 0.0), flags | I.NONFINITE
            b = self.clamp(i, x)
            if b != x:
                flags |= self.abs_flag
            if rate and not self.prev[i] - self.delta[i] <= b <= self.prev[i] + self.delta[i]:
                b = self.clamp(i, min(max(b, self.prev[i] - self.delta[i]), self.prev[i] + self.delta[i]))
                flags |= I.RATE
            out.append(b)
        self.prev, self.emitted = out, True
        return out, int(flags)

    def filter(self, command: list[float] | None, r: Reading | None, t: float) -> tuple[list[float], int]:
        if self.estopped:
            return self.emit(self.damp(r), I.ESTOP, rate=False)
        usable = (r is not None and t - r.age_reference <= self.cfg.stale_timeout_s
                  and all(math.isfinite(float(x)) for x in [*r.joint_pos, *r.joint_vel]))
        if self.mode == "idle" and usable:
            self.start([float(p) for p in r.joint_pos], t)
        flags = 0
        if command is None:
            target, flags = self.hold(r), I.HOLD
        elif not all(math.isfinite(x) for x in command):
            target, flags = self.hold(r), I.NONFINITE
        else:
            target = list(command)
        if not usable:
            if not flags:
                target = self.hold(r)
            flags |= I.STALE
        holding = flags != 0
        if not holding:
            self.latched = None
            if self.mode == "ramp":
                frac = (t - self.ramp_start) / self.cfg.ramp_s
                if frac >= 1.0:
                    self.mode = "run"
                else:
                    frac = max(frac, 0.0)
                    if self.kind == "joint_pos":
                        target = [a + frac * (d - a) for a, d in zip(self.ramp_from, self.default, strict=True)]
                    else:
                        target = [x * frac for x in target]
                    flags |= I.RAMP
            else:
                self.mode = "run"
        elif self.mode not in ("ramp", "idle"):
            self.mode = "hold"
        if r is not None and self.kind != "joint_pos":
            for i in range(self.n):
                p, v = float(r.joint_pos[i]), float(r.joint_vel[i])
                if (p >= self.hi[i] and target[i] > 0) or (p <= self.lo[i] and target[i] < 0):
                    target[i], flags = 0.0, flags | I.POSITION
                if self.kind == "torque" and abs(v) > self.vel[i] and target[i] * v > 0:
                    target[i], flags = 0.0, flags | I.VELOCITY
        a = self.cfg.smoothing
        if a > 0 and not holding:
            smoothed = [a * p + (1.0 - a) * x for p, x in zip(self.prev, target, strict=True)]
            if smoothed != target:
                flags |= I.SMOOTHED
            target = smoothed
        return self.emit(target, flags, rate=True)

    def exit(self, r: Reading | None) -> tuple[list[float], int]:
        if self.estopped:
            return self.emit(self.damp(r), I.ESTOP, rate=False)
        self.mode = "exit"
        return self.emit(self.damp(r), I.EXIT, rate=True)


# -- properties -------------------------------------------------------------------------------------
policy_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.floats(min_value=-10.0, max_value=10.0),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300]),
)
# a broken sensor may report NaN or infinite speed now and then (one joint, one step): the layer must cope
glitches = st.sampled_from(["none"] * 8 + ["pos nan", "vel nan", "vel inf", "vel -inf"])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:
    kind = draw(st.sampled_from(["torque", "joint_pos", "joint_vel"]))
    n = draw(st.integers(1, 4))
    lim = st.floats(min_value=0.05, max_value=20.0)
    names = tuple(f"j{i}" for i in range(n))
    pos = []
    for _ in names:
        lo = draw(st.floats(-5.0, 0.0))
        pos.append((lo, lo + draw(st.floats(0.01, 5.0))) if draw(st.integers(0, 4)) else (-math.inf, math.inf))
    feats = RobotFeatures("r", names, names, kind, draw(st.sampled_from([50.0, 100.0, 500.0])), tuple(pos),
                          tuple(draw(lim) for _ in names), tuple(draw(st.one_of(lim, st.just(math.inf))) for _ in names),
                          tuple(draw(st.floats(-6.0, 6.0)) for _ in names))
    finite_widths = [hi - lo for lo, hi in pos if math.isfinite(lo)]
    margin = draw(st.floats(0.0, 0.45 * min(finite_widths))) if finite_widths and draw(st.booleans()) else 0.0
    one_delta = st.one_of(st.just(math.inf), st.floats(0.001, 3.0))
    cfg = SafetyConfig(
        max_delta=draw(st.one_of(one_delta, st.tuples(*[one_delta] * n))),
        smoothing=draw(st.sampled_from([0.0, 0.3, 0.9])),
        stale_timeout_s=0.05,
        hold_mode=draw(st.sampled_from(["hold", "damp"])),
        damping=draw(st.one_of(st.floats(0.0, 5.0), st.tuples(*[st.floats(0.0, 5.0)] * n))),
        ramp_s=draw(st.sampled_from([0.0, 0.05, 0.2])),
        position_margin=margin,
    )
    start = draw(st.lists(st.floats(-10.0, 10.0), min_size=n, max_size=n))
    steps = draw(st.lists(st.tuples(
        st.one_of(st.none(), *[st.lists(policy_floats, min_size=n, max_size=n)] * 3),  # the policy's (None: nothing)
        st.lists(st.floats(-10.0, 10.0), min_size=n, max_size=n),
        st.lists(st.floats(-50.0, 50.0), min_size=n, max_size=n),
        st.tuples(glitches, st.integers(0, n - 1)),
        st.sampled_from(["fresh", "fresh", "fresh", "fresh", "stale", "missing", "nan-stamp"]),
        st.sampled_from(["step"] * 12 + ["estop", "clear", "exit"]),
        st.floats(0.5, 1.5),  # tick jitter, in periods
    ), min_size=5, max_size=30))
    return feats, cfg, start, steps


@settings(max_examples=250, deadline=None)
@given(scenarios())
def test_no_command_ever_leaves_the_limits_or_jumps_and_all_follows_the_reference(scenario: tuple) -> None:
    feats, cfg, start, steps = scenario
    layer, ref = SafetyLayer(feats, cfg, clock=lambda: pytest.fail("the layer read its clock")), Reference(feats, cfg)
    n = len(feats.command_joints)
    # the bounds, straight from the robot's declaration (not from the layer)
    m = cfg.position_margin
    lo = np.array([a + m if math.isfinite(a) else a for a, _ in feats.position_limits])
    hi = np.array([b - m if math.isfinite(b) else b for _, b in feats.position_limits])
    vel, eff = np.array(feats.velocity_limits), np.array(feats.effort_limits)
    bound_lo, bound_hi = {"torque": (-eff, eff), "joint_vel": (-vel, vel), "joint_pos": (lo, hi)}[feats.command_kind]
    delta = np.broadcast_to(np.asarray(cfg.max_delta, dtype=np.float64), (n,))
    if feats.command_kind == "joint_pos":
        delta = np.minimum(delta, vel * feats.period)
    t = 0.0
    first = reading(start, np.zeros(n), t)
    layer.start(first, t)
    ref.start(start, t)
    prev = layer.last_command
    assert prev.tolist() == ref.prev
    for command, pos, v, (glitch, joint), freshness, action, jitter in steps:
        t += feats.period * jitter
        if glitch != "none":
            which, value = glitch.split()
            (pos if which == "pos" else v)[joint] = float(value)
        age_ref = {"fresh": t, "stale": t - 1.0, "missing": t, "nan-stamp": math.nan}[freshness]
        r = None if freshness == "missing" else Reading(age_ref, np.array(pos), np.array(v), received=age_ref)
        if action == "estop":
            layer.estop("test")
            ref.estopped = True
        elif action == "clear":
            layer.clear_estop()
            if ref.estopped:
                ref.estopped, ref.mode, ref.latched = False, "idle", None
        if action == "exit":
            cmd, flags = layer.exit_command(r, t)
            expected, expected_flags = ref.exit(r)
        else:
            cmd, flags = layer.filter(None if command is None else np.array(command), r, t)
            expected, expected_flags = ref.filter(command, r, t)
        # the promises, checked against the declaration alone
        assert cmd.shape == (n,) and cmd.dtype == np.float64 and np.isfinite(cmd).all()
        assert (cmd >= bound_lo).all() and (cmd <= bound_hi).all(), (cmd, bound_lo, bound_hi)
        if flags & I.ESTOP:
            assert ref.estopped
        else:
            assert (np.abs(cmd - prev) <= delta * (1 + EPS) + EPS).all(), (cmd, prev, delta)
        usable = r is not None and freshness == "fresh" and np.isfinite(pos).all() and np.isfinite(v).all()
        if not ref.estopped and action != "exit":
            assert bool(flags & I.STALE) == (not usable)
            if command is not None and not np.isfinite(command).all():
                assert flags & I.NONFINITE
        # and the step, against the reference
        np.testing.assert_allclose(cmd, expected, rtol=1e-12, atol=1e-12)
        assert flags == expected_flags, (I(flags), I(expected_flags))
        assert layer.state == ref.state
        prev = cmd
    assert layer.last_command.tolist() == prev.tolist()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["torque", "joint_vel"]), st.floats(0.01, 1.0), st.lists(policy_floats, min_size=2, max_size=2),
       st.integers(1, 40))
def test_a_hold_without_a_sensor_winds_down_to_zero_at_the_change_limit(kind: str, step: float, command: list,
                                                                         k: int) -> None:
    """No reading at all: the command moves to zero by exactly ``max_delta`` a step, never away."""
    layer = SafetyLayer(features(kind, vel=20.0, eff=20.0), SafetyConfig(max_delta=step, ramp_s=0.0))
    r = reading([0.0, 0.0], [0.0, 0.0])
    layer.start(r, 0.0)
    for j in range(80):
        layer.filter(np.array([15.0, -15.0]), reading([0.0, 0.0], [0.0, 0.0], 0.01 * j), 0.01 * j)
    before = layer.last_command
    for j in range(k):
        cmd, flags = layer.filter(np.array(command), None, 1.0 + 0.01 * j)
        assert flags & I.STALE
    expected = np.sign(before) * np.maximum(np.abs(before) - k * step, 0.0)
    np.testing.assert_allclose(cmd, expected, atol=1e-9)


# -- hand-computed cases ----------------------------------------------------------------------------
def test_torque_limits_change_limit_and_smoothing_values() -> None:
    layer = SafetyLayer(features(eff=5.0), SafetyConfig(max_delta=1.0, ramp_s=0.0))
    r = reading([0.0, 0.0], [0.0, 0.0])
    layer.start(r, 0.0)
    cmd, flags = layer.filter(np.array([10.0, -0.5]), r, 0.0)
    assert cmd.tolist() == [1.0, -0.5] and flags == I.EFFORT | I.RATE  # 10 -> 5 -> +1 from 0
    cmd, _ = layer.filter(np.array([10.0, -0.5]), r, 0.01)
    assert cmd.tolist() == [2.0, -0.5]
    for j in range(5):
        cmd, _ = layer.filter(np.array([10.0, -0.5]), r, 0.02 + 0.01 * j)
    assert cmd.tolist() == [5.0, -0.5]  # at the effort limit, not beyond
    smooth = SafetyLayer(features(), SafetyConfig(smoothing=0.75, ramp_s=0.0))
    smooth.start(r, 0.0)
    cmd, flags = smooth.filter(np.array([4.0, -4.0]), r, 0.0)
    assert cmd.tolist() == [1.0, -1.0] and flags == I.SMOOTHED  # 0.75 * 0 + 0.25 * 4
    cmd, _ = smooth.filter(np.array([4.0, -4.0]), r, 0.01)
    assert cmd.tolist() == pytest.approx([1.75, -1.75])  # 0.75 * 1 + 0.25 * 4
    per_joint = SafetyLayer(features(), SafetyConfig(max_delta=(0.5, 2.0), ramp_s=0.0))
    per_joint.start(r, 0.0)
    cmd, flags = per_joint.filter(np.array([3.0, -3.0]), r, 0.0)
    assert cmd.tolist() == [0.5, -2.0] and flags == I.RATE


def test_nonfinite_and_stale_commands_become_the_damping_hold() -> None:
    layer = SafetyLayer(features(), SafetyConfig(damping=2.0, ramp_s=0.0, stale_timeout_s=0.05))
    r = reading([0.1, -0.2], [0.5, -1.5], t=0.0)
    layer.start(r, 0.0)
    cmd, flags = layer.filter(np.array([math.nan, 1.0]), r, 0.0)
    assert cmd.tolist() == [-1.0, 3.0] and flags == I.NONFINITE and layer.state == "hold"  # -kd * v
    cmd, flags = layer.filter(np.array([1.0, 1.0]), r, 0.049)
    assert cmd.tolist() == [1.0, 1.0] and flags == 0 and layer.state == "run"
    cmd, flags = layer.filter(np.array([1.0, 1.0]), r, 0.051)  # the same reading, now 51 ms old
    assert cmd.tolist() == [-1.0, 3.0] and flags == I.STALE and layer.state == "hold"
    cmd, flags = layer.filter(None, None, 0.06)  # no reading at all: zero effort
    assert cmd.tolist() == [0.0, 0.0] and flags == I.HOLD | I.STALE
    cmd, flags = layer.filter(np.array([1.0, 1.0]), reading([0.1, -0.2], [0.0, 0.0], 0.07), 0.07)
    assert flags == 0 and layer.state == "run"
    counts = layer.counts  # steps per flag: the HOLD | STALE step counts under both
    assert (counts["nonfinite"], counts["stale"], counts["hold"]) == (1, 2, 1)
    assert sum(counts.values()) == 4 and set(counts) >= {"position", "rate", "estop", "ramp", "exit", "smoothed"}


def test_a_sensor_reporting_nan_is_no_sensor_and_never_keeps_the_last_effort() -> None:
    layer = SafetyLayer(features(eff=5.0), SafetyConfig(damping=2.0, ramp_s=0.0))
    layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
    cmd, _ = layer.filter(np.array([4.0, -4.0]), reading([0.0, 0.0], [0.0, 0.0]), 0.0)
    assert cmd.tolist() == [4.0, -4.0]
    # a fresh reading with a NaN position: unusable (the guards could not see a limit)
    cmd, flags = layer.filter(np.array([4.0, -4.0]), reading([math.nan, 0.0], [0.5, 0.0], 0.01), 0.01)
    assert flags == I.STALE and cmd.tolist() == [-1.0, 0.0]  # damping where the velocity is known
    # NaN velocity: no damping to compute, so zero effort for that joint, not the last 4.0
    cmd, flags = layer.filter(np.array([math.nan, 1.0]), reading([0.0, 0.0], [math.nan, 1.0], 0.02), 0.02)
    assert flags == I.NONFINITE | I.STALE and cmd.tolist() == [0.0, -2.0]
    cmd, flags = layer.exit_command(reading([0.0, 0.0], [math.inf, -0.5], 0.03), 0.03)
    assert flags == I.EXIT and cmd.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("kind", ["torque", "joint_pos", "joint_vel"])
def test_garbage_in_raises_no_numpy_warnings(kind: str) -> None:
    """NaN and infinity from the policy or the sensors are handled, not computed with (a warning
    per step at 500 Hz would cost more than the step).
    """
    layer = SafetyLayer(features(kind), SafetyConfig(ramp_s=0.05, smoothing=0.5, max_delta=0.1, damping=0.0))
    layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
    bad = [math.nan, math.inf, -math.inf, 1e308, -1e308]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k, (x, y) in enumerate(itertools.product(bad + [0.5], repeat=2)):
            r = reading([x, y], [y, x], 0.01 * k)
            cmd, _ = layer.filter(np.array([x, y]), r, 0.01 * k)
            assert np.isfinite(cmd).all()
            cmd, _ = layer.exit_command(r, 0.01 * k)
            assert np.isfinite(cmd).all()


def test_guards_remove_only_the_push_past_a_limit_or_along_an_overspeed() -> None:
    layer = SafetyLayer(features(pos=1.0, vel=2.0), SafetyConfig(ramp_s=0.0))
    layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
    past = reading([1.2, 1.2], [0.0, 0.0])
    cmd, flags = layer.filter(np.array([3.0, -3.0]), past, 0.0)
    assert cmd.tolist() == [0.0, -3.0] and flags == I.POSITION  # outward zeroed, inward kept
    at = reading([-1.0, 1.0], [0.0, 0.0])  # exactly at a limit counts as past it
    cmd, flags = layer.filter(np.array([-3.0, 3.0]), at, 0.0)
    assert cmd.tolist() == [0.0, 0.0] and flags == I.POSITION
    cmd, flags = layer.filter(np.array([3.0, -3.0]), at, 0.0)
    assert cmd.tolist() == [3.0, -3.0] and flags == 0
    fast = reading([0.0, 0.0], [2.5, 2.5])
    cmd, flags = layer.filter(np.array([1.0, -1.0]), fast, 0.01)
    assert cmd.tolist() == [0.0, -1.0] and flags == I.VELOCITY  # along the motion zeroed, braking kept
    at_speed = reading([0.0, 0.0], [2.0, -2.0])  # at the limit, not past it: no guard
    cmd, flags = layer.filter(np.array([1.0, -1.0]), at_speed, 0.02)
    assert cmd.tolist() == [1.0, -1.0] and flags == 0
    vel = SafetyLayer(features("joint_vel", pos=1.0, vel=2.0), SafetyConfig(ramp_s=0.0))
    vel.start(past, 0.0)
    cmd, flags = vel.filter(np.array([1.5, -3.0]), past, 0.0)
    assert cmd.tolist() == [0.0, -2.0] and flags == I.POSITION | I.VELOCITY  # outward zeroed; inward clamped to 2


def test_guards_and_damping_read_the_command_joints_columns() -> None:
    """Measured joints ("x", "a", "b"), commanded ("b", "a"): each command entry uses its own joint."""
    feats = RobotFeatures("r", ("x", "a", "b"), ("b", "a"), "torque", 100.0, ((-1.0, 1.0), (-5.0, 5.0)),
                          (10.0, 10.0), (9.0, 9.0), (0.0, 0.0))
    layer = SafetyLayer(feats, SafetyConfig(damping=(2.0, 3.0), ramp_s=0.0))
    r = reading([7.0, 0.0, 1.5], [0.0, 0.25, -1.0])  # b is past its high limit 1; a is inside +-5
    layer.start(r, 0.0)
    cmd, flags = layer.filter(np.array([4.0, 4.0]), r, 0.0)
    assert cmd.tolist() == [0.0, 4.0] and flags == I.POSITION
    cmd, flags = layer.filter(None, r, 0.01)
    # b's damping, -2 * (-1.0) = 2, would push it further out: the guard removes that too
    assert cmd.tolist() == [0.0, -0.75] and flags == I.HOLD | I.POSITION  # a: -3 * 0.25
    cmd, flags = layer.filter(None, reading([7.0, 0.0, 0.5], [0.0, 0.25, -1.0]), 0.02)
    assert cmd.tolist() == [2.0, -0.75] and flags == I.HOLD


def test_position_robot_ramps_to_the_default_pose_then_follows_the_policy() -> None:
    feats = RobotFeatures("arm", ("a",), ("a",), "joint_pos", 100.0, ((-2.0, 2.0),), (100.0,), (10.0,), (1.0,))
    layer = SafetyLayer(feats, SafetyConfig(ramp_s=1.0))
    layer.start(reading([-1.0], [0.0]), 10.0)
    assert layer.last_command.tolist() == [-1.0] and layer.state == "ramp"
    cmd, flags = layer.filter(np.array([1.9]), reading([-1.0], [0.0], 10.5), 10.5)
    assert cmd.tolist() == [0.0] and flags == I.RAMP and layer.state == "ramp"  # halfway from -1 to 1
    cmd, flags = layer.filter(np.array([1.9]), reading([0.0], [0.0], 10.75), 10.75)
    assert cmd.tolist() == [0.5]
    cmd, flags = layer.filter(np.array([1.9]), reading([0.5], [0.0], 11.0), 11.0)
    # the ramp is over: the policy's 1.9, at most 100 rad/s * 10 ms = 1.0 from the previous 0.5
    assert cmd.tolist() == [1.5] and flags == I.RATE and layer.state == "run"
    cmd, flags = layer.filter(np.array([3.0]), reading([1.0], [0.0], 11.01), 11.01)
    assert cmd.tolist() == [2.0] and flags == I.POSITION


def test_position_targets_stay_inside_the_margin_and_move_no_faster_than_the_joint() -> None:
    feats = RobotFeatures("arm", ("a",), ("a",), "joint_pos", 50.0, ((-1.0, 1.0),), (2.0,), (10.0,), (0.0,))
    layer = SafetyLayer(feats, SafetyConfig(ramp_s=0.0, position_margin=0.1, max_delta=1.0))
    layer.start(reading([0.95], [0.0]), 0.0)
    assert layer.last_command.tolist() == [0.9]  # the measured 0.95 is outside the shrunk range
    cmd, flags = layer.filter(np.array([-5.0]), reading([0.95], [0.0]), 0.0)
    assert cmd.tolist() == pytest.approx([0.86]) and flags == I.POSITION | I.RATE  # 2 rad/s * 20 ms = 0.04 a step


def test_torque_robot_soft_start_scales_the_command() -> None:
    layer = SafetyLayer(features(), SafetyConfig(ramp_s=0.2))
    layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
    cmd, flags = layer.filter(np.array([4.0, -2.0]), reading([0.0, 0.0], [0.0, 0.0], 0.05), 0.05)
    assert cmd.tolist() == [1.0, -0.5] and flags == I.RAMP
    cmd, flags = layer.filter(np.array([4.0, -2.0]), reading([0.0, 0.0], [0.0, 0.0], 0.2), 0.2)
    assert cmd.tolist() == [4.0, -2.0] and flags == 0 and layer.state == "run"


def test_a_layer_that_was_not_started_starts_itself_on_the_first_usable_reading() -> None:
    layer = SafetyLayer(features(), SafetyConfig(ramp_s=0.2), clock=lambda: 3.0)
    assert layer.state == "idle"
    cmd, flags = layer.filter(np.array([4.0, -2.0]), None)  # nothing to start from: hold
    assert cmd.tolist() == [0.0, 0.0] and flags == I.STALE and layer.state == "idle"
    cmd, flags = layer.filter(np.array([4.0, -2.0]), reading([0.0, 0.0], [0.0, 0.0], 3.0))
    assert cmd.tolist() == [0.0, 0.0] and flags == I.RAMP and layer.state == "ramp"  # ramp factor 0 at its start


def test_a_position_robot_does_not_start_from_an_unknown_pose() -> None:
    pos = SafetyLayer(features("joint_pos"), SafetyConfig())
    with pytest.raises(ValueError, match=r"safety.start: measured positions \{'j1': nan\} are not finite"):
        pos.start(reading([0.0, math.nan], [0.0, 0.0]), 0.0)
    assert pos.state == "idle"
    torque = SafetyLayer(features("torque"), SafetyConfig())
    torque.start(reading([0.0, math.nan], [0.0, 0.0]), 0.0)  # a torque start needs no pose
    assert torque.state == "ramp" and torque.last_command.tolist() == [0.0, 0.0]


def test_position_hold_keeps_the_pose_where_the_hold_began() -> None:
    feats = RobotFeatures("arm", ("a",), ("a",), "joint_pos", 100.0, ((-2.0, 2.0),), (100.0,), (10.0,), (0.0,))
    layer = SafetyLayer(feats, SafetyConfig(ramp_s=0.0))
    layer.start(reading([0.3], [0.0]), 0.0)
    layer.filter(np.array([0.4]), reading([0.3], [0.0], 0.0), 0.0)
    cmd, _ = layer.filter(np.array([math.inf]), reading([0.35], [0.0], 0.01), 0.01)
    assert cmd.tolist() == [0.35]
    cmd, _ = layer.filter(np.array([math.nan]), reading([0.5], [0.0], 0.02), 0.02)
    assert cmd.tolist() == [0.35]  # latched at the first held step, not following the drift
    damp = SafetyLayer(feats, SafetyConfig(ramp_s=0.0, hold_mode="damp"))
    damp.start(reading([0.3], [0.0]), 0.0)
    damp.filter(np.array([math.nan]), reading([0.35], [0.0], 0.0), 0.0)
    cmd, _ = damp.filter(np.array([math.nan]), reading([0.5], [0.0], 0.01), 0.01)
    assert cmd.tolist() == [0.5]  # damp mode follows the measured position


def test_exit_damps_under_the_change_limit() -> None:
    layer = SafetyLayer(features(eff=5.0), SafetyConfig(damping=2.0, ramp_s=0.0, max_delta=1.0))
    r = reading([0.0, 0.0], [1.0, 0.25])
    layer.start(r, 0.0)
    for j in range(5):
        layer.filter(np.array([3.0, 3.0]), r, 0.01 * j)
    cmd, flags = layer.exit_command(r, 0.1)
    assert cmd.tolist() == [2.0, 2.0] and flags == I.EXIT | I.RATE and layer.state == "exit"  # toward -2, -0.5
    for j in range(4):
        cmd, flags = layer.exit_command(r, 0.11 + 0.01 * j)
    assert cmd.tolist() == [-2.0, -0.5] and flags == I.EXIT
    pos = SafetyLayer(features("joint_pos", vel=100.0), SafetyConfig(ramp_s=0.0))
    pos.start(reading([0.2, -0.2], [0.0, 0.0]), 0.0)
    cmd, flags = pos.exit_command(reading([0.25, -0.5], [1.0, 1.0], 0.0), 0.0)
    assert cmd.tolist() == [0.25, -0.5] and flags == I.EXIT  # the target is the measured position


# -- e-stop and watchdog timing ---------------------------------------------------------------------
def test_estop_latches_until_cleared_then_restarts_under_the_change_limit() -> None:
    layer = SafetyLayer(features(), SafetyConfig(damping=1.0, ramp_s=0.0, max_delta=0.1))
    r = reading([0.0, 0.0], [1.0, -1.0])
    layer.start(r, 0.0)
    for k in range(5):
        layer.filter(np.array([5.0, 5.0]), r, 0.01 * k)
    assert layer.last_command.tolist() == pytest.approx([0.5, 0.5])
    layer.estop("operator")
    for k in range(50):  # good commands and fresh readings do not release it
        cmd, flags = layer.filter(np.array([1.0, 1.0]), reading([0.0, 0.0], [1.0, -1.0], 1 + k * 0.01), 1 + k * 0.01)
        assert flags == I.ESTOP and cmd.tolist() == [-1.0, 1.0]  # straight to damping, no change limit
    assert layer.state == "estop" and layer.estop_reason == "operator"
    layer.start(r, 1.6)  # a start does not release it either
    cmd, flags = layer.exit_command(r, 2.0)
    assert flags == I.ESTOP and layer.state == "estop"  # nor does exiting
    assert layer.counts["estop"] == 51 and layer.counts["rate"] == 5
    layer.clear_estop()
    assert layer.state == "idle" and layer.estop_reason == ""
    cmd, flags = layer.filter(np.array([1.0, 1.0]), reading([0.0, 0.0], [0.0, 0.0], 2.0), 2.0)
    assert flags == I.RATE and cmd.tolist() == pytest.approx([-0.9, 1.0])  # resumes from the damping, 0.1 a step
    assert layer.state == "run"
    soft = SafetyLayer(features(), SafetyConfig(ramp_s=0.2))
    soft.start(r, 0.0)
    soft.estop()
    soft.filter(np.array([1.0, 1.0]), r, 0.1)
    soft.clear_estop()
    cmd, flags = soft.filter(np.array([4.0, 4.0]), reading([0.0, 0.0], [0.0, 0.0], 0.15), 0.15)
    assert flags == I.RAMP and cmd.tolist() == [0.0, 0.0] and soft.state == "ramp"  # a new staged start


class _PressingReading(Reading):
    """A reading whose age is looked up while the layer steps; looking presses the e-stop, as a
    second thread could at that moment.
    """

    layer: SafetyLayer | None = None

    @property
    def age_reference(self) -> float:
        if self.layer is not None:
            self.layer.estop("pressed mid-step")
        return self.stamp


def test_an_estop_pressed_during_a_step_is_not_lost() -> None:
    layer = SafetyLayer(features(), SafetyConfig(ramp_s=0.0))
    layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
    r = _PressingReading(0.0, np.zeros(2), np.zeros(2))
    r.layer = layer
    layer.filter(np.array([1.0, 1.0]), r, 0.0)
    assert layer.state == "estop"
    _, flags = layer.filter(np.array([1.0, 1.0]), reading([0.0, 0.0], [0.0, 0.0], 0.01), 0.01)
    assert flags == I.ESTOP


def test_estop_takes_effect_at_the_next_step_on_jittered_clocks() -> None:
    """Presses at random moments between jittered 2 ms ticks: the first e-stopped command is the
    next tick's, whatever the policy asks for.
    """
    rng = np.random.default_rng(1)
    latencies, gaps = [], []
    for _ in range(200):
        layer = SafetyLayer(features(rate=500.0), SafetyConfig(ramp_s=0.0, max_delta=0.01))
        layer.start(reading([0.0, 0.0], [0.0, 0.0]), 0.0)
        press_at, pressed, t, tick_before = rng.uniform(0.05, 0.1), None, 0.0, 0.0
        while True:
            tick = 0.002 * rng.uniform(0.7, 1.3)
            if pressed is None and t + tick > press_at:
                layer.estop("button")
                pressed, tick_before = press_at, t
            t += tick
            _, flags = layer.filter(np.array([5.0, 5.0]), reading([0.0, 0.0], [0.0, 0.0], t), t)
            if flags & I.ESTOP:
                latencies.append(t - pressed)
                gaps.append(t - tick_before)
                break
            assert pressed is None
    lat = np.array(latencies)
    print(f"e-stop latency, press to first safe command (ms, simulated): min {lat.min() * 1e3:.3f} p50 "
          f"{np.percentile(lat, 50) * 1e3:.3f} p99 {np.percentile(lat, 99) * 1e3:.3f} max {lat.max() * 1e3:.3f}")
    assert (lat > 0).all() and (lat <= np.array(gaps)).all() and lat.max() <= 0.0026


def test_estop_from_another_thread_reaches_the_stepping_thread() -> None:
    """A second thread presses while this one steps every ~0.5 ms on the real clock; generous bound."""
    rng = np.random.default_rng(2)
    latencies = []
    for _ in range(20):
        layer = SafetyLayer(features(rate=1000.0), SafetyConfig(ramp_s=0.0))
        layer.start(reading([0.0, 0.0], [0.0, 0.0], time.monotonic()))
        pressed: list[float] = []
        delay = float(rng.uniform(0.001, 0.005))

        def press(layer: SafetyLayer = layer, pressed: list[float] = pressed, delay: float = delay) -> None:
            time.sleep(delay)
            pressed.append(time.monotonic())
            layer.estop("thread")

        presser = threading.Thread(target=press)
        presser.start()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            _, flags = layer.filter(np.array([1.0, 1.0]), reading([0.0, 0.0], [0.0, 0.0], time.monotonic()))
            if flags & I.ESTOP:
                latencies.append(time.monotonic() - pressed[0])
                break
            time.sleep(0.0005)
        presser.join()
    lat = np.array(latencies)
    print(f"e-stop latency across threads (ms, real clock): min {lat.min() * 1e3:.3f} p50 "
          f"{np.percentile(lat, 50) * 1e3:.3f} max {lat.max() * 1e3:.3f}")
    assert len(lat) == 20 and (lat >= 0).all() and lat.max() < 1.0


def test_watchdog_boundary_is_exact() -> None:
    layer = SafetyLayer(features(), SafetyConfig(ramp_s=0.0, stale_timeout_s=0.25))
    r = reading([0.0, 0.0], [0.0, 0.0], 1.0)
    layer.start(r, 1.0)
    assert layer.filter(np.ones(2), r, 1.25)[1] == 0  # exactly the timeout old: still fresh
    assert layer.filter(np.ones(2), r, 1.2500001)[1] == I.STALE
    late = Reading(0.0, np.zeros(2), np.zeros(2), received=1.3)  # staleness counts from receipt when known
    assert layer.filter(np.ones(2), late, 1.5)[1] == 0
    assert layer.filter(np.ones(2), Reading(math.nan, np.zeros(2), np.zeros(2)), 1.5)[1] == I.STALE


def test_watchdog_trips_after_the_timeout_and_not_before() -> None:
    """Readings arrive every 2 ms with jitter, then stop; the trip latency after the last reading
    is measured over many simulated runs and must sit in ``(timeout, timeout + one tick]``.
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
            if flags & I.STALE:
                latencies.append(t - last.age_reference)
                break
            assert t - last.age_reference <= 0.05
    lat = np.array(latencies)
    print(f"watchdog trip latency after the last reading (ms): min {lat.min() * 1e3:.2f} p50 "
          f"{np.percentile(lat, 50) * 1e3:.2f} p99 {np.percentile(lat, 99) * 1e3:.2f} max {lat.max() * 1e3:.2f}")
    assert (lat > 0.05).all() and (lat <= 0.05 + 0.0023).all()


# -- configuration ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"smoothing": 1.0}, r"safety.smoothing: expected a weight in \[0, 1\), got 1.0"),
        ({"max_delta": 0}, r"safety.max_delta: expected a positive number \(or inf\), got 0.0"),
        ({"max_delta": [0.1, -1]}, r"safety.max_delta\[1\]: expected a positive number \(or inf\), got -1.0"),
        ({"max_delta": []}, r"safety.max_delta: expected a number or one per command joint, got an empty list"),
        ({"stale_timeout_s": "soon"}, r"safety.stale_timeout_s: expected a number, got 'soon'"),
        ({"stale_timeout_s": 0}, r"safety.stale_timeout_s: expected seconds > 0, got 0.0"),
        ({"hold_mode": "freeze"}, r"safety.hold_mode: expected 'hold' or 'damp', got 'freeze'"),
        ({"ramp_s": -1}, r"safety.ramp_s: expected a finite number >= 0, got -1.0"),
        ({"exit_s": "inf"}, r"safety.exit_s: expected a finite number >= 0, got inf"),
        ({"damping": "nan"}, r"safety.damping: expected a number, got NaN"),
        ({"damping": [1.0, -2]}, r"safety.damping\[1\]: expected a finite gain >= 0, got -2.0"),
        ({"position_margin": True}, r"safety.position_margin: expected a number, got True"),
        ({"brakes": True}, r"safety: unknown settings \['brakes'\]"),
    ],
)
def test_config_errors_name_the_field_and_value(data: dict, message: str) -> None:
    with pytest.raises(SafetyConfigError, match=message):
        SafetyConfig.from_dict(data)


def test_config_errors_name_where_the_mapping_came_from() -> None:
    with pytest.raises(SafetyConfigError, match=r"^deploy.safety.smoothing: expected a weight in \[0, 1\), got 2.0"):
        SafetyConfig.from_dict({"smoothing": 2}, where="deploy.safety")
    with pytest.raises(SafetyConfigError, match=r"^robot.yaml:safety: expected a mapping"):
        SafetyConfig.from_dict([1, 2], where="robot.yaml:safety")  # type: ignore[arg-type]


def test_config_round_trips_through_json() -> None:
    cfg = SafetyConfig(max_delta=(0.1, math.inf), damping=(1.0, 2.0), smoothing=0.5, stale_timeout_s=math.inf,
                       hold_mode="damp", ramp_s=0.0, exit_s=0.25, position_margin=0.01)
    text = json.dumps(cfg.to_dict(), allow_nan=False)  # strict JSON: no Infinity
    assert json.loads(text)["max_delta"] == [0.1, "inf"]
    assert SafetyConfig.from_dict(json.loads(text)) == cfg
    assert SafetyConfig.from_dict({"max_delta": "inf", "damping": [1, 2]}) == SafetyConfig(damping=(1.0, 2.0))
    assert SafetyConfig(max_delta=[0.5, 1.0]).max_delta == (0.5, 1.0)  # type: ignore[arg-type]


def test_width_mismatches_are_refused() -> None:
    with pytest.raises(SafetyConfigError, match=r"safety.max_delta: expected one value or 2"):
        SafetyLayer(features(n=2), SafetyConfig(max_delta=(0.1, 0.2, 0.3)))
    with pytest.raises(SafetyConfigError, match=r"safety.position_margin: 1.5 leaves no room"):
        SafetyLayer(features(n=2, pos=1.0), SafetyConfig(position_margin=1.5))
    layer = SafetyLayer(features(n=2), SafetyConfig())
    with pytest.raises(ValueError, match=r"expected a command of 2 values"):
        layer.filter(np.zeros(3), reading([0, 0], [0, 0]), 0.0)
