"""``Cartpole-Balance-DR``: Cartpole-Balance as a robot would meet it, randomised for sim2real.

The MDP (observation, reward, termination) is Cartpole-Balance's; the dynamics, the sensors and
the timing vary per world. Every range below has a comment saying what it stands for; the policy
group stays what a real cart-pole has (positions, velocities), while the drawn values and the true
state form the ``privileged`` group that the critic reads by default (asymmetric actor-critic).
"""

from __future__ import annotations

from robolearn.envs import EventTerm, NoiseCfg, ObsGroup, ObsTerm, TaskCfg, mdp
from robolearn.sim2real.randomization import (
    ActionDelay,
    ObservationDelay,
    push_by_velocity,
    randomize_field,
    randomize_motor_strength,
)
from robolearn.tasks.classic.cartpole import cartpole_balance_cfg


def cartpole_balance_dr_cfg() -> TaskCfg:
    """The task config of ``Cartpole-Balance-DR``."""
    cfg = cartpole_balance_cfg()
    policy = cfg.observations["policy"]
    for term in policy.terms.values():
        # Encoder and IMU noise: 0.01 (m, unit-circle, m/s, rad/s) standard deviation per reading.
        term.noise = NoiseCfg("gaussian", 0.01)
    # Sensor pipeline latency: the policy sees a frame 0-1 control steps (0-10 ms) old.
    policy.delay = ObservationDelay(lag_range=(0, 1))
    # Actuation latency: the command lands 0-1 control steps late.
    cfg.action_delay = ActionDelay(lag_range=(0, 1))
    cfg.observations["privileged"] = ObsGroup(
        {"drawn": ObsTerm(mdp.drawn), "state": ObsTerm(mdp.true_state)}, enable_noise=False
    )
    cfg.events = {
        # Pole build spread (length of tube, end caps): pole mass x U(0.7, 1.3) per episode.
        "pole_mass": EventTerm(
            randomize_field, mode="reset", params={"field": "mass", "elements": ["pole"], "range": (0.7, 1.3)}
        ),
        # Cart payload (cables, sensors): cart mass x U(0.8, 1.2) per episode.
        "cart_mass": EventTerm(
            randomize_field, mode="reset", params={"field": "mass", "elements": ["cart"], "range": (0.8, 1.2)}
        ),
        # Bearing and rail friction: joint damping x logU(0.5, 2) for both joints, one draw each.
        "damping": EventTerm(
            randomize_field,
            mode="reset",
            params={"field": "damping", "range": (0.5, 2.0), "distribution": "log_uniform"},
        ),
        # Motor constant and supply voltage: force per unit command x U(0.8, 1.2).
        "motor": EventTerm(randomize_motor_strength, mode="reset", params={"range": (0.8, 1.2)}),
        # Bumps: every 2-4 s the cart's velocity jumps by U(-0.2, 0.2) m/s.
        "push": EventTerm(
            push_by_velocity,
            mode="interval",
            interval_range_s=(2.0, 4.0),
            params={"velocity_range": {"slider": (-0.2, 0.2)}},
        ),
    }
    cfg.description = "Cartpole-Balance with randomised masses, damping, motor, pushes, noise and latency"
    return cfg
