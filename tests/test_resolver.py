"""The one MuJoCo name resolver (robolearn.sim.names): tables built once, clear errors, and every
term, event and action term resolving through it.
"""

from __future__ import annotations

import mujoco
import pytest

import robolearn
from robolearn.sim import load_model, names_of

MJCF = """<mujoco><worldbody>
  <body name="base"><freejoint name="root"/><geom size="0.1"/>
    <body name="arm"><joint name="elbow" type="hinge"/><geom size="0.05"/>
      <body name="wrist"><joint name="ball" type="ball"/><geom size="0.02"/></body>
    </body>
  </body>
  <body><joint type="slide"/><geom size="0.03"/></body>
</worldbody><actuator><motor name="m_elbow" joint="elbow"/></actuator></mujoco>"""


def test_tables_resolve_names_indices_dofs_and_qpos_addresses():
    model = load_model(MJCF)
    names = names_of(model)
    assert names_of(model) is names  # built once per model
    assert names.ids("body", ["wrist", "base", 0], "x") == [3, 1, 0]
    assert names.label("body", 4) == "#4"  # unnamed
    assert names.ids("actuator", None, "x") == [0]
    # Free joint: 6 dofs (x y z wx wy wz) and 7 qpos (xyz + quaternion); then hinge, ball (3 dofs).
    assert names.dofs("root", "x") == [0, 1, 2, 3, 4, 5]
    assert names.dofs("root/wz", "x") == [5]
    assert names.dofs("elbow", "x") == [6]
    assert names.dofs("ball/wy", "x") == [8]
    assert [names.dof_label(d) for d in (2, 6, 9, 10)] == ["root/z", "elbow", "ball/wz", "#3"]
    assert names.qpos_address("root/z", "x") == 2
    assert names.qpos_address("elbow", "x") == 7  # after the free joint's 7 coordinates
    # Identical to MuJoCo's own lookup for every named element of every kind it has.
    for kind, obj in (("body", mujoco.mjtObj.mjOBJ_BODY), ("joint", mujoco.mjtObj.mjOBJ_JOINT)):
        for label in names.labels(kind):
            if not label.startswith("#"):
                assert names.id(kind, label, "x") == mujoco.mj_name2id(model, obj, label)


def test_unknown_names_list_the_valid_ones():
    names = names_of(load_model(MJCF))
    with pytest.raises(ValueError, match=r"events\.e\.body: unknown body 'hand'; the model's bodies are \['world', 'base', 'arm', 'wrist', '#4'\]"):
        names.id("body", "hand", "events.e.body")
    with pytest.raises(ValueError, match=r"w: joint 'elbow' \(hinge\) has no dof 'x'; expected the bare name 'elbow'"):
        names.dofs("elbow/x", "w")
    with pytest.raises(ValueError, match=r"w: joint 'root' \(free\) has no dof 'q'; expected one of"):
        names.dofs("root/q", "w")
    with pytest.raises(ValueError, match=r"w: actuator index 3 out of range \[0, 1\)"):
        names.id("actuator", 3, "w")
    with pytest.raises(ValueError, match=r"w: expected body names or indices, got True"):
        names.id("body", True, "w")
    with pytest.raises(ValueError, match="a quaternion cannot take it"):
        names.qpos_address("ball", "w")


def test_env_terms_use_the_envs_resolver():
    env = robolearn.make("Reacher", 2, seed=0)
    assert env.names is names_of(env.model)
    with pytest.raises(ValueError, match=r"unknown body 'hand'; the model's bodies are \[.*'fingertip'"):
        robolearn.make("Reacher", 1, observations__policy__terms__fingertip_to_target__params={
            "body": "hand", "reference": "target", "dims": 2})
    with pytest.raises(ValueError, match=r"actions\.torque\.actuators: unknown actuator 'elbow'; the model's actuators are"):
        robolearn.make("Reacher", 1, actions__torque__actuators=["elbow"])
