"""Resuming compares policy specs by content: a version-1 spec of the same env resumes, another env does not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import robolearn
from robolearn.runners.rundir import RunDirError, check_resume_spec

V1 = Path(__file__).parent / "data" / "policy_spec_v1_cartpole_dr.json"


def test_a_version_1_spec_of_the_same_env_resumes(tmp_path):
    shutil.copy(V1, tmp_path / "policy_spec.json")
    env = robolearn.make("Cartpole-Balance-DR", 2, seed=0)
    check_resume_spec(tmp_path, env.policy_spec())  # no error: same layout, older spec version


def test_another_env_is_named(tmp_path):
    shutil.copy(V1, tmp_path / "policy_spec.json")
    env = robolearn.make("Pendulum-Swingup", 2, seed=0)
    with pytest.raises(RunDirError, match=r"does not match the run's policy_spec.json: task_id: saved 'Cartpole-Balance-DR', now 'Pendulum-Swingup'"):
        check_resume_spec(tmp_path, env.policy_spec())


def test_a_changed_observation_layout_is_named(tmp_path):
    env = robolearn.make("Cartpole-Balance", 2, seed=0)
    (tmp_path / "policy_spec.json").write_text(__import__("json").dumps(env.policy_spec()))
    longer = robolearn.make("Cartpole-Balance", 2, seed=0, observations__policy__history_length=3)
    with pytest.raises(RunDirError, match=r"observations.policy.shape: expected \(5,\), got \(15,\)"):
        check_resume_spec(tmp_path, longer.policy_spec())
