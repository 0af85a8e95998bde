"""Domain-randomisation events on real MuJoCo physics: draws, arithmetic, reproducibility, partial
resets, distributions, effects on the dynamics, pushes and wrenches, validation when a term is
built, and the path of every draw to the privileged observations and ``info``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import robolearn
from robolearn.envs import (
    ActionTerm,
    BatchedEnv,
    EventTerm,
    InitialState,
    ObsGroup,
    ObsTerm,
    TaskCfg,
    mdp,
    task_cfg,
)
from robolearn.sim2real.randomization import (
    EventTermBase,
    apply_external_wrench,
    joint_noise_state,
    push_by_velocity,
    randomize_field,
    randomize_motor_strength,
    randomize_pd_gains,
)
from robolearn.sim2real.randomization.common import GAUSSIAN_CLIP


@pytest.fixture(autouse=True, scope="module")
def _tasks() -> None:
    robolearn.list_tasks()  # task families register on first use


def _env(task: str, n: int, seed: int = 0, backend: str = "mujoco", **events: EventTerm) -> BatchedEnv:
    cfg = task_cfg(task)
    cfg.events.update(events)
    return BatchedEnv(cfg, n, seed=seed, backend=backend, dtype=torch.float64)


def _field(**params) -> EventTerm:
    return EventTerm(randomize_field, mode="reset", params=params)


def _servo_cfg(**events: EventTerm):
    """Reacher with both actuators turned into position servos (kp 10, kd 1)."""
    cfg = task_cfg("Reacher")
    cfg.actions = {"pos": ActionTerm(kind="joint_pos", kp=10.0, kd=1.0)}
    cfg.events.update(events)
    return cfg


def _truncate(env: BatchedEnv, worlds: list[int]) -> dict:
    """Step once with the given worlds at their time limit, so exactly those reset."""
    env.episode_length[worlds] = env.max_episode_length - 1
    _, _, _, truncated, info = env.step(torch.zeros(env.num_envs, env.action_dim))
    assert truncated.nonzero().flatten().tolist() == worlds
    return info


# -- draws: ranges, seeds, partial resets ------------------------------------------------------------
def test_draws_lie_in_range_differ_across_worlds_and_follow_the_seed():
    event = _field(field="mass", elements=["torso"], range=(0.5, 2.0))
    env = _env("HalfCheetah", 8, seed=3, mass=event)
    draws = env.drawn["mass/torso"][:, 0]
    assert ((0.5 <= draws) & (draws <= 2.0)).all() and draws.unique().numel() == 8
    again = _env("HalfCheetah", 8, seed=3, mass=event).drawn["mass/torso"][:, 0]
    other = _env("HalfCheetah", 8, seed=4, mass=event).drawn["mass/torso"][:, 0]
    assert torch.equal(draws, again) and not torch.isclose(draws, other).any()
    # A world's draws do not depend on how many worlds there are.
    assert torch.equal(_env("HalfCheetah", 3, seed=3, mass=event).drawn["mass/torso"][:, 0], draws[:3])


def test_a_partial_reset_redraws_only_those_worlds_and_never_compounds():
    env = _env("Cartpole-Balance", 6, seed=1, mass=_field(field="mass", elements="cart", range=(0.5, 2.0)))
    mass0 = env.sim.get_model_field("mass").clone()
    drawn0 = env.drawn["mass/cart"].clone()
    for _ in range(3):  # repeated resets scale the template, never the previous value
        info = _truncate(env, [1, 4])
        assert torch.equal(info["drawn"]["mass/cart"], drawn0)  # the values the step ran under
        mass, drawn = env.sim.get_model_field("mass"), env.drawn["mass/cart"]
        keep = [0, 2, 3, 5]
        assert torch.equal(mass[keep], mass0[keep]) and torch.equal(drawn[keep], drawn0[keep])
        assert (drawn[[1, 4]] != drawn0[[1, 4]]).all()
        torch.testing.assert_close(mass[:, 1], float(env.model.body_mass[1]) * drawn[:, 0], rtol=0, atol=0)
        assert (mass[:, [0, 2]] == torch.from_numpy(env.model.body_mass[[0, 2]])).all()
        drawn0, mass0 = drawn.clone(), mass.clone()


def test_scale_add_and_abs_are_exact_against_the_template():
    env = _env(
        "HalfCheetah", 4, seed=2,
        fric=_field(field="friction", elements=["bfoot", "ffoot"], axes=[0], range=(0.5, 1.5)),
        com=_field(field="com", elements=["torso"], range=(-0.02, 0.02), operation="add"),
        grav=_field(field="gravity", axes=2, range=(-12.0, -8.0), operation="abs"),
    )
    m = env.model
    friction = env.sim.get_model_field("friction")
    feet = [m.geom("bfoot").id, m.geom("ffoot").id]
    f = env.drawn["friction/bfoot,ffoot/axes=0"]
    assert f.shape == (4, 2)
    torch.testing.assert_close(friction[:, feet, 0], torch.from_numpy(m.geom_friction[feet, 0]) * f, rtol=0, atol=0)
    others = [g for g in range(m.ngeom) if g not in feet]
    assert (friction[:, others] == torch.from_numpy(m.geom_friction[others])).all()
    assert (friction[:, feet, 1:] == torch.from_numpy(m.geom_friction[feet, 1:])).all()  # other columns untouched
    com, d = env.sim.get_model_field("com"), env.drawn["com/torso"]
    torso = m.body("torso").id
    torch.testing.assert_close(com[:, torso], torch.from_numpy(m.body_ipos[torso]) + d, rtol=0, atol=0)
    grav, g = env.sim.get_model_field("gravity"), env.drawn["gravity/axes=2"]
    assert ((-12.0 <= g) & (g <= -8.0)).all()
    assert torch.equal(grav[:, 2], g[:, 0]) and (grav[:, :2] == 0).all()


def test_shared_draws():
    env = _env(
        "HalfCheetah", 3, seed=0,
        all=_field(field="friction", axes=[0], range=(0.5, 1.5), shared=True),
        axes=_field(field="inertia", elements=["torso", "bthigh"], range=(0.8, 1.2), shared="axes"),
        per_axis=_field(field="com", elements=["bshin", "fshin"], range=(-0.01, 0.01), operation="add", shared="elements"),
    )
    m = env.model
    f = env.drawn["friction/axes=0"]
    assert f.shape == (3, 1)
    torch.testing.assert_close(env.sim.get_model_field("friction")[:, :, 0], torch.from_numpy(m.geom_friction[:, 0]) * f)
    ids = [m.body("torso").id, m.body("bthigh").id]
    s = env.drawn["inertia/torso,bthigh"]
    assert s.shape == (3, 2)
    torch.testing.assert_close(
        env.sim.get_model_field("inertia")[:, ids], torch.from_numpy(m.body_inertia[ids]) * s.unsqueeze(-1)
    )
    shins = [m.body("bshin").id, m.body("fshin").id]
    c = env.drawn["com/bshin,fshin"]
    assert c.shape == (3, 3)
    torch.testing.assert_close(env.sim.get_model_field("com")[:, shins], torch.from_numpy(m.body_ipos[shins]) + c.unsqueeze(1))


def test_log_uniform_and_gaussian_distributions_on_many_worlds():
    n = 4096
    env = _env(
        "Cartpole-Balance", n, seed=5,
        pole=_field(field="mass", elements="pole", range=(0.5, 2.0), distribution="log_uniform"),
        damp=_field(field="damping", elements="hinge", range=(0.01, 0.002), distribution="gaussian", operation="add"),
    )
    logs = env.drawn["mass/pole"][:, 0].log()
    assert logs.min() >= math.log(0.5) and logs.max() <= math.log(2.0)
    assert abs(logs.mean()) < 0.02  # uniform in log space: mean log = 0, std = log(4)/sqrt(12)
    assert abs(logs.std() - math.log(4.0) / math.sqrt(12)) < 0.02
    hist = torch.histc(logs, bins=4, min=math.log(0.5), max=math.log(2.0))
    assert (hist > 0.2 * n).all()
    g = env.drawn["damping/hinge"][:, 0]
    assert abs(g.mean() - 0.01) < 2e-4 and abs(g.std() - 0.002) < 2e-4
    assert g.min() >= 0.01 - GAUSSIAN_CLIP * 0.002 and g.max() <= 0.01 + GAUSSIAN_CLIP * 0.002
    assert abs(((g - 0.01).abs() < 0.002).double().mean() - 0.683) < 0.03  # one sigma holds ~68 %
    hinge = env.model.joint("hinge").dofadr[0]
    torch.testing.assert_close(env.sim.get_model_field("damping")[:, hinge], env.model.dof_damping[hinge] + g)


def test_reference_backend_gets_the_same_fields():
    events = {"mass": _field(field="mass", range=(0.5, 2.0)), "g": _field(field="gravity", range=(0.5, 1.0))}
    fast = _env("Cartpole-Balance", 3, seed=8, **events)
    ref = _env("Cartpole-Balance", 3, seed=8, backend="reference", **events)
    for name in ("mass", "gravity"):
        torch.testing.assert_close(fast.sim.get_model_field(name), ref.sim.get_model_field(name))


# -- effects on the dynamics ---------------------------------------------------------------------------
def _rollout(env: BatchedEnv, steps: int, action: float = 0.0, angle: float = 0.0) -> torch.Tensor:
    """Put every world in the same cart-pole state and run a constant action; final qpos ``[N, 2]``."""
    n = env.num_envs
    env.set_state(torch.tensor([[0.0, angle]]).expand(n, -1), torch.zeros(n, 2))
    for _ in range(steps):
        env.step(torch.full((n, 1), action))
    return env.sim.qpos.clone()


def test_a_heavier_cart_accelerates_less_and_a_stronger_motor_more():
    env = _env("Cartpole-Balance", 6, seed=0, mass=_field(field="mass", elements="cart", range=(0.5, 3.0)))
    x = _rollout(env, 20, action=1.0)[:, 0]
    assert (x > 0).all()
    mass = env.drawn["mass/cart"][:, 0]
    assert torch.equal(torch.argsort(x), torch.argsort(mass, descending=True))
    env = _env("Cartpole-Balance", 6, seed=0, strength=EventTerm(randomize_motor_strength, params={"range": (0.5, 1.5)}))
    x = _rollout(env, 20, action=1.0)[:, 0]
    assert torch.equal(torch.argsort(x), torch.argsort(env.drawn["motor_strength"][:, 0]))


def test_weaker_gravity_slows_the_pole_s_fall():
    env = _env("Cartpole-Balance", 6, seed=0, g=_field(field="gravity", axes=[2], range=(0.2, 1.5)))
    angle = _rollout(env, 30, angle=0.1)[:, 1]
    assert (angle > 0.1).all()
    assert torch.equal(torch.argsort(angle), torch.argsort(env.drawn["gravity/axes=2"][:, 0]))


def test_pd_gains_keep_servos_consistent_and_change_the_response():
    event = EventTerm(randomize_pd_gains, params={"kp_range": (0.5, 2.0), "kd_range": (0.5, 1.5)})
    env = BatchedEnv(_servo_cfg(pd=event), 5, seed=1, dtype=torch.float64)
    kp_f, kd_f = env.drawn["pd_gains"][:, :2], env.drawn["pd_gains"][:, 2:]
    gain, bias = env.sim.get_model_field("actuator_gain"), env.sim.get_model_field("actuator_bias")
    torch.testing.assert_close(gain[:, :, 0], 10.0 * kp_f)
    torch.testing.assert_close(bias[:, :, 1], -gain[:, :, 0], rtol=0, atol=0)  # the servo pairing holds
    torch.testing.assert_close(bias[:, :, 2], -1.0 * kd_f)
    assert (gain[:, :, 1:] == 0).all() and (bias[:, :, 0] == 0).all()
    # One kp factor per world (kd fixed): a stiffer servo gets closer to its target sooner.
    event = EventTerm(randomize_pd_gains, params={"kp_range": (0.3, 3.0), "kd_range": (1.0, 1.0), "shared": True})
    env = BatchedEnv(_servo_cfg(pd=event), 5, seed=2, dtype=torch.float64)
    n = env.num_envs
    env.set_state(torch.zeros(n, env.model.nq), torch.zeros(n, env.model.nv))
    for _ in range(5):
        env.step(torch.full((n, 2), 0.5))
    assert env.drawn["pd_gains"].shape == (n, 2)
    q = env.sim.qpos[:, 0]
    assert ((q > 0) & (q < 0.5)).all()
    assert torch.equal(torch.argsort(q), torch.argsort(env.drawn["pd_gains"][:, 0]))


def test_motor_strength_scales_the_whole_force():
    env = BatchedEnv(_servo_cfg(s=EventTerm(randomize_motor_strength, params={"range": (0.5, 1.5)})), 4, seed=0)
    s = env.drawn["motor_strength"]
    gain, bias = env.sim.get_model_field("actuator_gain"), env.sim.get_model_field("actuator_bias")
    torch.testing.assert_close(gain[:, :, 0], 10.0 * s)
    torch.testing.assert_close(bias[:, :, 1], -10.0 * s)
    torch.testing.assert_close(bias[:, :, 2], -1.0 * s)
    xml = """<mujoco><worldbody><body><joint name="h" type="hinge"/><geom size="0.1" mass="1"/></body></worldbody>
      <actuator><motor joint="h" gear="2" forcelimited="true" forcerange="-3 4"/></actuator></mujoco>"""
    cfg = TaskCfg(mjcf=xml, events={"s": EventTerm(randomize_motor_strength, params={"range": (0.5, 1.5)})})
    env = BatchedEnv(cfg, 3, seed=0)
    s = env.drawn["motor_strength"]
    torch.testing.assert_close(env.sim.get_model_field("actuator_forcerange")[:, 0], torch.tensor([-3.0, 4.0]) * s)
    torch.testing.assert_close(env.sim.get_model_field("actuator_gain")[:, 0, 0], s[:, 0])


# -- pushes and wrenches ---------------------------------------------------------------------------------
def test_push_changes_qvel_by_exactly_the_draw():
    env = _env("HalfCheetah", 4, seed=0)
    before = env.sim.qvel.clone()
    ids = torch.tensor([1, 3])
    push_by_velocity(env, velocity_range={"rootx": (-1.0, 1.0), "bthigh": (2.0, 3.0)})(env, ids)
    dv = env.drawn["push"][ids]
    assert ((dv[:, 0].abs() <= 1) & (dv[:, 1] >= 2) & (dv[:, 1] <= 3)).all()
    delta = env.sim.qvel - before
    torch.testing.assert_close(delta[ids][:, [0, 3]], dv, rtol=0, atol=1e-12)
    delta[ids[:, None], torch.tensor([[0, 3]])] = 0.0
    assert (delta == 0).all()
    ant = _env("Ant", 2, seed=0)
    before = ant.sim.qvel.clone()
    push_by_velocity(ant, velocity_range=(0.5, 1.0), dofs=["root/x", "root/wz"])(ant, torch.arange(2))
    torch.testing.assert_close((ant.sim.qvel - before)[:, [0, 5]], ant.drawn["push"], rtol=0, atol=1e-12)


def test_interval_push_through_the_env_on_both_backends():
    def make(rng, backend="mujoco"):
        push = EventTerm(push_by_velocity, mode="interval", interval_range_s=(0.05, 0.05),
                         params={"velocity_range": {"rootx": rng}})
        return _env("HalfCheetah", 3, seed=4, backend=backend, push=push)

    pushed, still, ref = make((0.5, 1.0)), make((0.0, 0.0)), make((0.5, 1.0), "reference")
    assert (pushed.drawn["push"] == 0).all()  # registered at construction, nothing drawn yet
    zeros = torch.zeros(3, 6)
    pushed.step(zeros), still.step(zeros), ref.step(zeros)
    dv = pushed.drawn["push"][:, 0]
    assert ((dv >= 0.5) & (dv <= 1.0)).all()
    torch.testing.assert_close(pushed.sim.qvel[:, 0] - still.sim.qvel[:, 0], dv, rtol=0, atol=1e-12)
    for _ in range(3):  # the reference backend's worlds got the same push, in their own MjData
        pushed.step(zeros), ref.step(zeros)
    torch.testing.assert_close(ref.sim.qpos, pushed.sim.qpos)
    torch.testing.assert_close(ref.drawn["push"], pushed.drawn["push"])


def test_external_wrench_persists_moves_the_body_and_resets():
    env, twin = _env("Cartpole-Balance", 3, seed=0), _env("Cartpole-Balance", 3, seed=0)
    apply_external_wrench(env, body="cart", force_range=[(5.0, 10.0), (0.0, 0.0), (0.0, 0.0)])(env, torch.arange(3))
    w = env.drawn["wrench/cart"]
    assert w.shape == (3, 6) and ((w[:, 0] >= 5) & (w[:, 0] <= 10)).all() and (w[:, 1:] == 0).all()
    cart = env.model.body("cart").id
    for _ in range(10):
        env.step(torch.zeros(3, 1)), twin.step(torch.zeros(3, 1))
    xfrc = env.sim.xfrc_applied.clone()
    torch.testing.assert_close(xfrc[:, cart], w)  # still applied after 10 steps
    xfrc[:, cart] = 0
    assert (xfrc == 0).all()
    assert (env.sim.qpos[:, 0] > twin.sim.qpos[:, 0] + 0.01).all()
    _truncate(env, [0])
    assert (env.sim.xfrc_applied[0] == 0).all() and (env.sim.xfrc_applied[1:, cart] == w[1:]).all()


# -- initial state -------------------------------------------------------------------------------------
def test_joint_noise_state_draws_per_joint():
    cfg = task_cfg("HalfCheetah")
    cfg.initial_state = InitialState(joint_noise_state, params={
        "qpos_ranges": {"bthigh": (-0.3, 0.3), "rootz": (0.0, 0.1)},
        "qvel_ranges": {"rootx": (1.0, 2.0)},
        "name": "init",
    })
    env = BatchedEnv(cfg, 5, seed=0)
    q0 = torch.from_numpy(env.model.qpos0)
    off = env.sim.qpos - q0
    assert (off[:, 3].abs() <= 0.3).all() and ((off[:, 1] >= 0) & (off[:, 1] <= 0.1)).all()
    assert off[:, 3].unique().numel() == 5
    assert (off[:, [0, 2, 4, 5, 6, 7, 8]] == 0).all()
    qvel = env.sim.qvel
    assert ((qvel[:, 0] >= 1) & (qvel[:, 0] <= 2)).all() and (qvel[:, 1:] == 0).all()
    torch.testing.assert_close(env.drawn["init"], torch.stack([off[:, 3], off[:, 1], qvel[:, 0]], dim=1))
    cfg = task_cfg("Ant")
    cfg.initial_state = InitialState(joint_noise_state, params={"qpos_ranges": {"root": (0.0, 0.1)}})
    with pytest.raises(ValueError, match=r"initial_state\.qpos_ranges: 'root': .*quaternion"):
        BatchedEnv(cfg, 2, seed=0)


# -- privileged observations -----------------------------------------------------------------------------
def test_draws_reach_the_privileged_group_and_info():
    cfg = task_cfg("Cartpole-Balance")
    cfg.events["mass"] = _field(field="mass", elements="pole", range=(0.5, 2.0))
    cfg.events["push"] = EventTerm(push_by_velocity, mode="interval", interval_range_s=(0.01, 0.01),
                                   params={"velocity_range": {"slider": (-0.1, 0.1), "hinge": (-0.1, 0.1)}})
    cfg.observations["privileged"] = ObsGroup({"drawn": ObsTerm(mdp.drawn)}, enable_noise=False)
    env = BatchedEnv(cfg, 4, seed=0, dtype=torch.float64)
    assert env.obs_dims["privileged"] == 1 + 2  # the interval push's columns exist from the start
    torch.testing.assert_close(env.obs["privileged"][:, 0], env.drawn["mass/pole"][:, 0])
    obs, _, _, _, info = env.step(torch.zeros(4, 1))
    assert set(info["drawn"]) == {"mass/pole", "push"}
    assert (info["drawn"]["push"] != 0).all()
    torch.testing.assert_close(obs["privileged"], torch.cat([info["drawn"]["mass/pole"], info["drawn"]["push"]], dim=1))


# -- validation ------------------------------------------------------------------------------------------
def _f(**params) -> EventTerm:
    base = {"field": "mass", "range": (0.8, 1.2)}
    return _field(**{**base, **params})


BAD_CONFIGS = [
    (_f(field="masss"), r"events\.x\.field: model field 'masss' cannot be set per world; expected one of .*mass"),
    (_f(elements=["cart", "nope"]), r"events\.x\.elements: unknown body 'nope'; the model's bodies are \['world', 'cart', 'pole'\]"),
    (_f(field="damping", elements=["hinge/x"]), r"events\.x\.elements: joint 'hinge' \(hinge\) has no dof 'x'"),
    (_f(elements=[7]), r"events\.x\.elements: body index 7 out of range \[0, 3\)"),
    (_f(range=(1.2, 0.8)), r"events\.x\.range: inverted range \(1\.2, 0\.8\): low 1\.2 > high 0\.8"),
    (_f(range=(0.0, 2.0), distribution="log_uniform"), r"events\.x\.range: log_uniform needs positive bounds, got \(0\.0, 2\.0\)"),
    (_f(range=(1.0, -0.1), distribution="gaussian"), r"events\.x\.range: a gaussian range is \(mean, std\) with std >= 0"),
    (_f(range=(-0.5, 1.5)), r"events\.x\.range: scale by a draw in \[-0\.5, 1\.5\] could set body_mass\[cart, 0\] \(template 1\) to -0\.5; it must stay > 0"),
    (_f(range=(1.0, 0.4), distribution="gaussian"), r"events\.x\.range: scale by a draw in \[-0\.2, 2\.2\] could set body_mass\[cart, 0\] .* to -0\.2; it must stay > 0"),
    (_f(field="friction", operation="add", range=(-2.0, 0.0)), r"events\.x\.range: add by a draw in \[-2, 0\] could set geom_friction\[floor, 0\] \(template 1\) to -1; it must stay >= 0"),
    (_f(field="armature", operation="abs", range=(-1.0, 1.0)), r"events\.x\.range: abs .* dof_armature\[slider, 0\] .* must stay >= 0"),
    (_f(field="inertia", range=(0.5, 1.5)), r"events\.x\.range: body_inertia of body 'cart' \(template \[0\.0108 0\.0167 0\.0208\]\) could break the triangle inequality I0 \+ I1 >= I2 for draws in \[0\.5, 1\.5\]; .*\(shared='axes'\)"),
    (_f(distribution="normal"), r"events\.x\.distribution: expected one of uniform, log_uniform, gaussian, got 'normal'"),
    (_f(operation="mul"), r"events\.x\.operation: expected one of scale, add, abs, got 'mul'"),
    (_f(shared="bodies"), r"events\.x\.shared: expected False, True, 'elements' or 'axes', got 'bodies'"),
    (_f(axes=[0]), r"events\.x\.axes: field 'body_mass' has one value per element; leave axes unset, got \[0\]"),
    (_f(field="com", axes=[3]), r"events\.x\.axes: column index 3 out of range \[0, 3\)"),
    (_f(field="gravity", elements=["cart"]), r"events\.x\.elements: field 'opt\.gravity' is one value per world"),
    (_f(rnage=(0.8, 1.2)), r"events\.x\.params: .*'rnage'"),
    (EventTerm(randomize_pd_gains, params={"kp_range": (0.8, 1.2), "kd_range": (0.8, 1.2)}),
     r"events\.x\.actuators: actuator 'slide' is not a position servo .* ActionTerm\(kind='joint_pos'"),
    (EventTerm(randomize_motor_strength, params={"range": (-0.1, 1.0)}), r"events\.x\.range: a strength factor must stay >= 0 .* -0\.1"),
    (EventTerm(randomize_motor_strength, params={"range": (0.9, 1.1), "actuators": ["motor"]}),
     r"events\.x\.actuators: unknown actuator 'motor'; the model's actuators are \['slide'\]"),
    (EventTerm(push_by_velocity, mode="reset", params={"velocity_range": (-1.0, 1.0)}),
     r"events\.x\.mode: push_by_velocity needs mode 'interval', got 'reset'"),
    (EventTerm(push_by_velocity, mode="interval", params={"velocity_range": {"rail": (-1.0, 1.0)}}),
     r"events\.x\.velocity_range: unknown joint 'rail'; the model's joints are \['slider', 'hinge'\]"),
    (EventTerm(push_by_velocity, mode="interval", params={"velocity_range": {"slider": (1.0, -1.0)}}),
     r"events\.x\.velocity_range\['slider'\]: inverted range"),
    (EventTerm(apply_external_wrench, mode="interval", params={"body": "world", "force_range": (-1.0, 1.0)}),
     r"events\.x\.body: the world body is static"),
    (EventTerm(apply_external_wrench, mode="interval", params={"body": "cart", "force_range": [(0, 1), (0, 1)]}),
     r"events\.x\.force_range: expected \(low, high\) or three \(low, high\) pairs"),
    (EventTerm(apply_external_wrench, mode="startup", params={"body": "cart"}), r"events\.x\.mode: apply_external_wrench needs mode 'interval'"),
    # Numbers are numbers: a bool or a NaN is refused, not coerced.
    (_f(range=(True, 2.0)), r"events\.x\.range: expected a pair of numbers, got \(True, 2\.0\)"),
    (_f(range=(0.8, math.nan)), r"events\.x\.range: expected finite numbers, got \(0\.8, nan\)"),
    (EventTerm(randomize_pd_gains, params={"kp_range": (0.8, 1.2), "kd_range": (0.8, 1.2), "shared": "axes"}),
     r"events\.x\.shared: expected True or False, got 'axes'"),
    (EventTerm(randomize_motor_strength, params={"range": (0.9, 1.1), "shared": 1}), r"events\.x\.shared: expected True or False, got 1"),
    (EventTerm(randomize_field, params={"range": (0.8, 1.2)}), r"events\.x\.params: missing a required argument: 'field'"),
    (EventTerm(push_by_velocity, mode="interval", interval_range_s=(0.1, math.inf), params={"velocity_range": (0.0, 1.0)}),
     r"events\.x\.interval_range_s\[1\]: expected a finite number, got inf"),
    (EventTerm(push_by_velocity, mode="interval", interval_range_s=(0.0, 1.0), params={"velocity_range": (0.0, 1.0)}),
     r"events\.x\.interval_range_s\[0\]: expected a number > 0, got 0\.0"),
    (EventTerm(randomize_field, mode="sometimes", params={"field": "mass", "range": (0.8, 1.2)}),
     r"events\.x\.mode: expected startup, reset or interval, got 'sometimes'"),
    (EventTerm("randomize_field"), r"events\.x\.func: expected an event class or a function"),
]


@pytest.mark.parametrize(("event", "message"), BAD_CONFIGS)
def test_every_bad_config_fails_at_construction_naming_the_param(event, message):
    cfg = task_cfg("Cartpole-Balance")
    cfg.events["ok"] = _f(field="damping", elements="hinge")  # a valid event first: nothing may run before validation ends
    cfg.events["x"] = event
    with pytest.raises(ValueError, match=message):
        BatchedEnv(cfg, 2, seed=0)


def test_a_term_is_built_once_with_the_env_and_validates_its_parameters_when_built():
    env = _env("Cartpole-Balance", 4, seed=0, mass=_f(elements="pole", range=(0.5, 2.0)))
    term = env.event_manager.calls["mass"]
    assert isinstance(term, randomize_field) and isinstance(term, EventTermBase)
    assert term.where == "events.mass" and term.mode == "reset"
    for _ in range(2):
        _truncate(env, [0, 2])
    assert env.event_manager.calls["mass"] is term  # resets fire the built term; nothing is rebuilt
    # Built on its own (outside an env's event manager) a term checks the same, under its own name.
    with pytest.raises(ValueError, match=r"^randomize_field\.range: inverted range"):
        randomize_field(env, field="mass", range=(1.2, 0.8))
    with pytest.raises(ValueError, match=r"^push_by_velocity\.mode: push_by_velocity needs mode 'interval', got 'reset'"):
        push_by_velocity(env, velocity_range=(0.0, 1.0), mode="reset")
    # A gaussian (mean 1, std 0.4) clipped at 3 std reaches 1 - 3 * 0.4 = -0.2: checked at its extremes.
    with pytest.raises(ValueError, match=r"^randomize_motor_strength\.range: a strength factor must stay >= 0 .* reaches -0\.2"):
        randomize_motor_strength(env, range=(1.0, 0.4), distribution="gaussian")
    randomize_motor_strength(env, range=(1.0, 0.3), distribution="gaussian")  # reaches 0.1: accepted


def test_a_plain_function_event_is_called_with_its_params_for_the_resetting_worlds():
    calls: list[tuple[list[int], float]] = []

    def tag(env: BatchedEnv, env_ids: torch.Tensor, *, value: float) -> None:
        calls.append((env_ids.tolist(), value))

    env = _env("Cartpole-Balance", 4, seed=0, tag=EventTerm(tag, mode="reset", params={"value": 2.5}))
    assert calls == [([0, 1, 2, 3], 2.5)]
    _truncate(env, [1, 3])
    assert calls[-1] == ([1, 3], 2.5)


def test_inertia_scaled_per_body_is_accepted():
    env = _env("Cartpole-Balance", 2, x=_f(field="inertia", range=(0.5, 1.5), shared="axes"))
    assert env.drawn["inertia"].shape == (2, 2)


def test_events_that_would_undo_each_other_are_refused():
    cfg = task_cfg("Cartpole-Balance")
    cfg.events["a"] = _f(elements=["cart"])
    cfg.events["b"] = _f(field="body_mass", range=(0.5, 1.0), name="other")
    with pytest.raises(ValueError, match=r"events\.a: writes body_mass\[cart, 0\], and so does events\.b"):
        BatchedEnv(cfg, 2, seed=0)
    cfg = task_cfg("Cartpole-Balance")
    cfg.events["a"] = EventTerm(push_by_velocity, mode="interval", params={"velocity_range": {"slider": (0, 1)}})
    cfg.events["b"] = EventTerm(push_by_velocity, mode="interval", params={"velocity_range": {"hinge": (0, 1)}})
    with pytest.raises(ValueError, match=r"events\.a: records its draws under 'push', and so does events\.b"):
        BatchedEnv(cfg, 2, seed=0)
    cfg.events["b"].params["name"] = "push_hinge"
    BatchedEnv(cfg, 2, seed=0)  # distinct names: two pushes compose
    pd = EventTerm(randomize_pd_gains, params={"kp_range": (0.8, 1.2), "kd_range": (0.8, 1.2)})
    strength = EventTerm(randomize_motor_strength, params={"range": (0.8, 1.2)})
    with pytest.raises(ValueError, match=r"events\.pd: writes actuator_biasprm\[#0, 1\], and so does events\.strength"):
        BatchedEnv(_servo_cfg(pd=pd, strength=strength), 2, seed=0)


def test_servo_gains_are_refused_to_the_generic_event_and_checked_for_sign():
    with pytest.raises(ValueError, match=r"events\.g\.field: actuator '#0' is a position servo, .* use randomize_pd_gains"):
        BatchedEnv(_servo_cfg(g=_f(field="actuator_gain", axes=[0])), 2, seed=0)
    event = EventTerm(randomize_pd_gains, params={"kp_range": (-5.0, 5.0), "kd_range": (-2.0, 0.0), "operation": "add"})
    with pytest.raises(ValueError, match=r"events\.pd\.kd_range: add over \(-2\.0, 0\.0\) could set kd of actuator '#0' \(template 1\) to -1; it must stay >= 0"):
        BatchedEnv(_servo_cfg(pd=event), 2, seed=0)
    event.params["kp_range"] = (-11.0, 5.0)
    with pytest.raises(ValueError, match=r"events\.pd\.kp_range: add over \(-11\.0, 5\.0\) could set kp of actuator '#0' \(template 10\) to -1; it must stay > 0"):
        BatchedEnv(_servo_cfg(pd=event), 2, seed=0)


def test_unnamed_elements_and_indices():
    env = _env("Reacher", 2, seed=0, damp=_f(field="damping", elements=[0, "joint1"], range=(0.5, 1.0)))
    assert env.drawn["damping/0,joint1"].shape == (2, 2)
    np.testing.assert_allclose(env.sim.get_model_field("damping")[:, 2:].numpy(), np.broadcast_to(env.model.dof_damping[2:], (2, 2)))
