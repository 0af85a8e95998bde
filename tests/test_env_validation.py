"""Every numeric setting of a task is checked for type and range when the env is built, naming the
field and the value; NaN/inf physics settings and model fields are refused before any step.
"""

from __future__ import annotations

import math

import pytest
import torch

import robolearn
from robolearn.envs import (
    BatchedEnv,
    CommandTerm,
    EventTerm,
    NoiseCfg,
    RewardTerm,
    task_cfg,
)
from robolearn.sim2real.randomization import ActionDelay, ControlJitter, ObservationDelay

PENDULUM = "Pendulum-Swingup"
robolearn.list_tasks()  # the task families register on first use; task_cfg below reads the registry


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"decimation": 2.5}, r"decimation: expected an integer >= 1, got 2\.5 \(float\)"),
        ({"decimation": 2.0}, r"decimation: expected an integer >= 1, got 2\.0"),
        ({"decimation": True}, r"decimation: expected an integer >= 1, got True \(bool\)"),
        ({"decimation": 0}, r"decimation: expected an integer >= 1, got 0"),
        ({"episode_length": "100"}, r"episode_length: expected an integer >= 1, got '100'"),
        ({"timestep": math.nan}, r"timestep: expected a finite number, got nan"),
        ({"timestep": math.inf}, r"timestep: expected a finite number, got inf"),
        ({"timestep": 0.0}, r"timestep: expected a number > 0, got 0\.0"),
        ({"timestep": False}, r"timestep: expected a number, got False"),
        ({"rewards__upright__weight": math.nan}, r"rewards\.upright\.weight: expected a finite number, got nan"),
        ({"observations__policy__history_length": 1.5}, r"observations\.policy\.history_length: expected an integer"),
        ({"actions__torque__scale": 0.0}, r"actions\.torque\.scale: expected a non-zero number, got 0\.0"),
        ({"actions__torque__clip": (1.0, -1.0)}, r"actions\.torque\.clip: low 1\.0 > high -1\.0"),
        ({"contact_forces": 1}, r"contact_forces: expected True or False, got 1"),
    ],
)
def test_task_settings_are_refused_with_the_field_and_value(override, message):
    with pytest.raises(ValueError, match=message):
        robolearn.make(PENDULUM, 1, **override)


def test_make_arguments_are_checked():
    with pytest.raises(ValueError, match=r"num_envs: expected an integer >= 1, got 2\.5"):
        robolearn.make(PENDULUM, 2.5)
    with pytest.raises(ValueError, match=r"num_envs: expected an integer >= 1, got True"):
        robolearn.make(PENDULUM, True)
    with pytest.raises(ValueError, match=r"seed: expected an integer >= 0, got 1\.5"):
        robolearn.make(PENDULUM, 1, seed=1.5)
    with pytest.raises(ValueError, match=r"nthread: expected an integer >= 1, got 0"):
        robolearn.make(PENDULUM, 1, nthread=0)
    env = robolearn.make(PENDULUM, 1, seed=0)
    with pytest.raises(ValueError, match=r"seed: expected an integer >= 0, got -1"):
        env.reset(seed=-1)


def test_term_settings_are_checked():
    cfg = task_cfg(PENDULUM)
    cfg.observations["policy"].terms["cos_sin"].noise = NoiseCfg("gaussian", -0.1)
    with pytest.raises(ValueError, match=r"observations\.policy\.cos_sin\.noise\.scale: expected a number >= 0"):
        BatchedEnv(cfg, 1)
    cfg = task_cfg(PENDULUM)
    cfg.events = {"noop": EventTerm(lambda env, ids: None, mode="interval", interval_range_s=(0.0, 1.0))}
    with pytest.raises(ValueError, match=r"events\.noop\.interval_range_s\[0\]: expected a number > 0, got 0\.0"):
        BatchedEnv(cfg, 1)
    cfg = task_cfg(PENDULUM)
    zero = CommandTerm(lambda env, ids: torch.zeros(ids.numel(), 1, dtype=torch.float64), dim=1,
                       resampling_time_s=(0.0, 0.0))
    cfg.commands = {"goal": zero}
    with pytest.raises(ValueError, match=r"commands\.goal\.resampling_time_s\[0\]: expected a number > 0"):
        BatchedEnv(cfg, 1)
    cfg.commands = {"goal": CommandTerm(zero.func, dim=1.0)}
    with pytest.raises(ValueError, match=r"commands\.goal\.dim: expected an integer >= 1, got 1\.0"):
        BatchedEnv(cfg, 1)
    cfg = task_cfg(PENDULUM)
    cfg.rewards["bonus"] = RewardTerm(lambda env: torch.ones(env.num_envs), weight=True)
    with pytest.raises(ValueError, match=r"rewards\.bonus\.weight: expected a number, got True"):
        BatchedEnv(cfg, 1)


def test_latency_counts_refuse_booleans_and_fractions():
    for model, message in (
        (ActionDelay(lag_range=(0, True)), r"action_delay\.lag_range: expected integers, got \(0, True\)"),
        (ActionDelay(lag_range=(0, 1.5)), r"action_delay\.lag_range: expected integers"),
    ):
        cfg = task_cfg(PENDULUM)
        cfg.action_delay = model
        with pytest.raises(ValueError, match=message):
            BatchedEnv(cfg, 1)
    cfg = task_cfg(PENDULUM)
    cfg.control_jitter = ControlJitter(max_substeps=True)
    with pytest.raises(ValueError, match=r"control_jitter\.max_substeps: expected integers"):
        BatchedEnv(cfg, 1)
    cfg = task_cfg(PENDULUM)
    cfg.observations["policy"].delay = ObservationDelay(lag_range=(0, 1), hold_prob=math.nan)
    with pytest.raises(ValueError, match=r"observations\.policy\.delay\.hold_prob: expected a probability"):
        BatchedEnv(cfg, 1)


MJCF = """<mujoco>{option}<worldbody><body name="arm"><joint name="hinge" damping="{damping}"/>
<geom size="0.1" mass="{mass}"/></body></worldbody><actuator><motor joint="hinge"/></actuator></mujoco>"""


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"option": '<option timestep="nan"/>'}, r"opt\.timestep must be a finite number > 0, got nan"),
        ({"option": '<option timestep="inf"/>'}, r"opt\.timestep must be a finite number > 0, got inf"),
        ({"option": '<option timestep="-0.01"/>'}, r"opt\.timestep must be a finite number > 0, got -0\.01"),
        ({"option": '<option gravity="0 0 nan"/>'}, r"opt\.gravity must be finite"),
        ({"damping": "nan"}, r"dof_damping\[hinge\] must be finite and >= 0, got nan"),
        ({"damping": "-1"}, r"dof_damping\[hinge\] must be finite and >= 0, got -1\.0"),
        ({"mass": "inf"}, r"body_mass\[arm\] must be finite and >= 0, got inf"),
    ],
)
def test_nonfinite_or_negative_model_fields_are_refused(fields, message):
    values = {"option": "", "damping": "0", "mass": "1", **fields}
    cfg = task_cfg(PENDULUM)
    cfg.mjcf = MJCF.format(**values)
    cfg.initial_state.func = None
    cfg.observations["policy"].terms = {"q": cfg.observations["policy"].terms["ang_vel"]}
    cfg.rewards = {}
    cfg.success = None
    with pytest.raises(ValueError, match=r"model of task 'Bad': " + message):
        BatchedEnv(cfg, 1, task_id="Bad")


def test_a_valid_small_model_builds_and_reports_divergence_per_step():
    cfg = task_cfg(PENDULUM)
    env = BatchedEnv(cfg, 3, seed=0)
    _, _, _, _, info = env.step(torch.zeros(3, env.action_dim))
    assert info["diverged"].dtype == torch.bool and info["diverged"].shape == (3,)
    assert info["num_diverged"] == 0
