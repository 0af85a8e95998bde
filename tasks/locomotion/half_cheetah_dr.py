"""``HalfCheetah-DR``: HalfCheetah randomised for sim2real (reward and observation as ``HalfCheetah``).

Every range has a comment saying what it stands for. The policy group is HalfCheetah's 17 numbers
(with sensor noise and delay); the drawn parameters, delays and the true state form the
``privileged`` group, which the critic reads by default.
"""

from __future__ import annotations

from robolearn.envs import EventTerm, NoiseCfg, ObsGroup, ObsTerm, TaskCfg, mdp
from robolearn.sim2real.randomization import (
    ActionDelay,
    ControlJitter,
    ObservationDelay,
    push_by_velocity,
    randomize_field,
    randomize_motor_strength,
)
from robolearn.tasks.locomotion.half_cheetah import half_cheetah_cfg


def half_cheetah_dr_cfg() -> TaskCfg:
    """The task config of ``HalfCheetah-DR``."""
    cfg = half_cheetah_cfg()
    policy = cfg.observations["policy"]
    # Joint encoders: 0.01 rad (m for the root height) standard deviation.
    policy.terms["joint_pos"].noise = NoiseCfg("gaussian", 0.01)
    # Velocity estimates are noisier than positions: 0.1 rad/s (m/s).
    policy.terms["joint_vel"].noise = NoiseCfg("gaussian", 0.1)
    # Sensor pipeline latency: 0-1 control steps (0-50 ms) per world and episode.
    policy.delay = ObservationDelay(lag_range=(0, 1))
    # Actuation latency: 0-1 control steps.
    cfg.action_delay = ActionDelay(lag_range=(0, 1))
    # Scheduling jitter: a new command takes effect 0-1 physics substeps (0-10 ms) into the period.
    cfg.control_jitter = ControlJitter(max_substeps=1)
    cfg.observations["privileged"] = ObsGroup(
        {"drawn": ObsTerm(mdp.drawn), "state": ObsTerm(mdp.true_state)}, enable_noise=False
    )
    cfg.events = {
        # Build spread and payload: every body's mass x U(0.8, 1.2), one factor per world.
        "mass": EventTerm(
            randomize_field, mode="reset", params={"field": "mass", "range": (0.8, 1.2), "shared": True}
        ),
        # Ground and foot material: sliding friction x logU(0.5, 2), one factor per world.
        "friction": EventTerm(
            randomize_field,
            mode="reset",
            params={"field": "friction", "axes": [0], "range": (0.5, 2.0), "distribution": "log_uniform", "shared": True},
        ),
        # Gearbox losses: joint damping x U(0.7, 1.3) per joint.
        "damping": EventTerm(randomize_field, mode="reset", params={"field": "damping", "range": (0.7, 1.3)}),
        # Motor constants and battery level: each motor's torque x U(0.8, 1.2).
        "motor": EventTerm(randomize_motor_strength, mode="reset", params={"range": (0.8, 1.2)}),
        # Shoves: every 3-6 s the torso's forward velocity jumps by U(-0.5, 0.5) m/s.
        "push": EventTerm(
            push_by_velocity,
            mode="interval",
            interval_range_s=(3.0, 6.0),
            params={"velocity_range": {"rootx": (-0.5, 0.5)}},
        ),
    }
    cfg.description = "HalfCheetah with randomised masses, friction, damping, motors, pushes, noise and latency"
    return cfg
