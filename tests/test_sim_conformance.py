"""Backend conformance: every fast backend reproduces the reference backend exactly.

The suite is parametrised over ``FAST_BACKENDS``; MJX, MuJoCo Warp and Isaac backends join that
list when they land and must pass the same checks (with tolerances instead of exact equality).
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from robolearn.sim import ReferenceBackend, load_model, make_backend
from robolearn.sim.model import contact_force_mode
from tests.conftest import FAST_BACKENDS

N = 6


def _pair(name: str, model: mujoco.MjModel, decimation: int = 5, **kw: object):
    return make_backend(name, model, N, decimation=decimation, **kw), ReferenceBackend(model, N, decimation=decimation, **kw)


def _start_state(model: mujoco.MjModel, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    qpos = np.tile(model.qpos0, (N, 1)) + rng.uniform(-0.1, 0.1, (N, model.nq))
    qvel = rng.normal(0, 0.1, (N, model.nv))
    return torch.from_numpy(qpos), torch.from_numpy(qvel)


def _controls(model: mujoco.MjModel, steps: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.uniform(-1, 1, (steps, N, model.nu)))


STATE = ("qpos", "qvel", "ctrl", "time", "xpos", "xquat", "cvel", "sensordata", "cfrc_ext")


def _assert_same(a, b, fields=STATE) -> None:
    for f in fields:
        torch.testing.assert_close(getattr(a, f), getattr(b, f), rtol=0, atol=0, msg=f"field {f} differs")


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_trajectories_match_reference(backend, cheetah_xml):
    model = load_model(cheetah_xml)
    fast, ref = _pair(backend, model)
    qpos, qvel = _start_state(model, 0)
    fast.reset(None, qpos, qvel)
    ref.reset(None, qpos, qvel)
    _assert_same(fast, ref)
    for u in _controls(model, 300, 1):
        assert not fast.step(u).any()
        ref.step(u)
    _assert_same(fast, ref)
    assert (fast.qpos[:, 0] != fast.qpos[0, 0]).any(), "worlds should have drifted apart"


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_contact_rich_trajectories_and_contact_forces(backend, ant_xml):
    # Ant in contact with the floor for hundreds of steps: the solver's warm start must be carried
    # between calls, or trajectories drift (the reason mujoco.rollout is not used).
    model = load_model(ant_xml, contact_forces=True)
    fast, ref = _pair(backend, model)
    qpos, qvel = _start_state(model, 2)
    fast.reset(None, qpos, qvel)
    ref.reset(None, qpos, qvel)
    for u in _controls(model, 400, 3):
        fast.step(u)
        ref.step(u)
    _assert_same(fast, ref)
    assert fast.cfrc_ext.abs().sum() > 0, "Ant on the floor must feel contact forces"


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_in_step_contact_forces_equal_post_step_call(backend, cheetah_xml):
    # HalfCheetah integrates with Euler, so the probe sensor's in-step cfrc_ext must equal what the
    # reference computes with mj_rnePostConstraint after mj_step (Gymnasium's call).
    model = load_model(cheetah_xml, contact_forces=True)
    assert contact_force_mode(model) == "in_step"
    assert contact_force_mode(load_model(cheetah_xml)) == "none"
    fast, ref = _pair(backend, model)
    qpos, qvel = _start_state(model, 4)
    fast.reset(None, qpos, qvel)
    ref.reset(None, qpos, qvel)
    touched = 0.0
    for u in _controls(model, 200, 5):
        fast.step(u)
        ref.step(u)
        torch.testing.assert_close(fast.cfrc_ext, ref.cfrc_ext, rtol=0, atol=0)
        touched += float(fast.cfrc_ext.abs().sum())
    assert touched > 0, "the cheetah's feet must touch the floor"


@pytest.mark.parametrize("backend", FAST_BACKENDS)
@pytest.mark.parametrize("xml", ["cheetah_xml", "ant_xml"])
def test_contact_forces_zero_after_reset_and_kept_by_state_dict(backend, xml, request):
    model = load_model(request.getfixturevalue(xml), contact_forces=True)
    fast, ref = _pair(backend, model)
    for sim in (fast, ref):
        sim.reset(None, *_start_state(model, 6))
        assert (sim.cfrc_ext == 0).all(), "no step yet, so no contact forces (as Gymnasium after reset)"
        for u in _controls(model, 60, 7):
            sim.step(u)
    _assert_same(fast, ref)
    for sim in (fast, ref):
        saved = sim.state_dict()
        forces = sim.cfrc_ext.clone()
        assert forces.abs().sum() > 0
        sim.reset(torch.tensor([0, 2]))
        assert (sim.cfrc_ext[[0, 2]] == 0).all()
        assert (sim.cfrc_ext[1] == forces[1]).all(), "resetting worlds 0 and 2 must not touch world 1"
        sim.load_state_dict(saved)
        torch.testing.assert_close(sim.cfrc_ext, forces, rtol=0, atol=0)


def test_data_field_gives_any_output_field(cheetah_xml):
    model = load_model(cheetah_xml)
    names = ("xipos", "qfrc_actuator", "subtree_com")
    fast, ref = _pair("mujoco", model, data_fields=names)
    for sim in (fast, ref):
        sim.reset(None, *_start_state(model, 8))
        sim.data_field("cinert")  # asked for before stepping: read after every step from then on
        for u in _controls(model, 20, 9):
            sim.step(u)
    with pytest.raises(RuntimeError, match="'cacc' was first asked for after stepping"):
        fast.data_field("cacc")
    for name in ("cinert", *names):
        got = fast.data_field(name)
        assert got.shape[0] == N
        torch.testing.assert_close(got, ref.data_field(name), rtol=0, atol=0, msg=name)
    with pytest.raises(ValueError, match="unknown MjData field 'nope'"):
        fast.data_field("nope")


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_reset_by_index_leaves_other_worlds_alone(backend, cheetah_xml):
    model = load_model(cheetah_xml)
    fast, ref = _pair(backend, model)
    control = make_backend(backend, model, N, decimation=5)  # never reset mid-way
    qpos, qvel = _start_state(model, 4)
    for b in (fast, ref, control):
        b.reset(None, qpos, qvel)
    us = _controls(model, 200, 5)
    ids = torch.tensor([1, 4])
    q_new, v_new = _start_state(model, 6)
    for t, u in enumerate(us):
        if t == 100:
            fast.reset(ids, q_new[ids], v_new[ids])
            ref.reset(ids, q_new[ids], v_new[ids])
            torch.testing.assert_close(fast.qpos[ids], q_new[ids], rtol=0, atol=0)
            torch.testing.assert_close(fast.time[ids], torch.zeros(2, dtype=torch.float64))
        for b in (fast, ref, control):
            b.step(u)
    _assert_same(fast, ref)
    others = torch.tensor([0, 2, 3, 5])
    torch.testing.assert_close(fast.qpos[others], control.qpos[others], rtol=0, atol=0)
    assert not torch.equal(fast.qpos[ids], control.qpos[ids])


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_reset_without_state_restores_model_defaults(backend, cheetah_xml):
    model = load_model(cheetah_xml)
    fast = make_backend(backend, model, N, decimation=5)
    for u in _controls(model, 20, 7):
        fast.step(u)
    fast.reset(torch.tensor([3]))
    torch.testing.assert_close(fast.qpos[3], torch.from_numpy(model.qpos0.copy()), rtol=0, atol=0)
    torch.testing.assert_close(fast.qvel[3], torch.zeros(model.nv, dtype=torch.float64), rtol=0, atol=0)


@pytest.mark.parametrize("backend", FAST_BACKENDS)
@pytest.mark.parametrize(
    ("field", "make_values"),
    [
        ("mass", lambda m: np.outer(np.linspace(0.5, 2.0, N), m.body_mass)),
        ("friction", lambda m: np.broadcast_to(m.geom_friction, (N, *m.geom_friction.shape)) * np.linspace(0.2, 1.5, N)[:, None, None]),
        ("damping", lambda m: np.outer(np.linspace(0.0, 5.0, N), np.ones(m.nv))),
        ("armature", lambda m: np.outer(np.linspace(0.0, 0.5, N), np.ones(m.nv))),
        ("actuator_gain", lambda m: m.actuator_gainprm[None] * np.linspace(0.5, 1.5, N)[:, None, None]),
        ("gravity", lambda m: np.stack([np.array([0.0, 0.0, -g]) for g in np.linspace(1.0, 15.0, N)])),
    ],
)
def test_per_world_field_writes(backend, field, make_values, cheetah_xml):
    model = load_model(cheetah_xml)
    fast, ref = _pair(backend, model)
    values = torch.from_numpy(np.ascontiguousarray(make_values(model)))
    fast.set_model_field(field, values)
    ref.set_model_field(field, values)
    torch.testing.assert_close(fast.get_model_field(field), values)
    torch.testing.assert_close(ref.get_model_field(field), values)
    qpos, qvel = _start_state(model, 8)
    qpos[:] = qpos[0]  # identical start: any spread comes from the field
    qvel[:] = qvel[0]
    fast.reset(None, qpos, qvel)
    ref.reset(None, qpos, qvel)
    u = _controls(model, 100, 9)
    for t in range(100):
        fast.step(u[t, :1].expand(N, -1))
        ref.step(u[t, :1].expand(N, -1))
    _assert_same(fast, ref, ("qpos", "qvel"))
    assert len({tuple(np.round(q, 9)) for q in fast.qpos.numpy()}) == N, f"{field}: worlds should differ"


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_field_write_on_subset(backend, cheetah_xml):
    model = load_model(cheetah_xml)
    fast = make_backend(backend, model, N, decimation=5)
    fast.set_model_field("gravity", torch.tensor([0.0, 0.0, -3.0]), torch.tensor([2, 5]))
    g = fast.get_model_field("gravity")
    assert torch.equal(g[[2, 5], 2], torch.tensor([-3.0, -3.0], dtype=torch.float64))
    assert torch.equal(g[[0, 1, 3, 4], 2], torch.full((4,), model.opt.gravity[2], dtype=torch.float64))
    # the per-world model handed to a renderer carries the write
    assert fast.get_model(2).opt.gravity[2] == -3.0
    assert fast.get_model(0).opt.gravity[2] == model.opt.gravity[2]


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_forward_after_step_makes_derived_fields_current(backend, cheetah_xml):
    model = load_model(cheetah_xml)
    fast, ref = _pair(backend, model, forward_after_step=True)
    lagging = make_backend(backend, model, N, decimation=5)
    for u in _controls(model, 50, 10):
        for b in (fast, ref, lagging):
            b.step(u)
    _assert_same(fast, ref, ("qpos", "qvel", "xpos", "xquat", "cvel"))
    data = fast.get_data(0)  # mj_forward at the current state
    np.testing.assert_allclose(fast.xpos[0].numpy(), data.xpos, rtol=0, atol=1e-12)
    assert not np.allclose(lagging.xpos[0].numpy(), data.xpos), "default mode lags one substep, as mj_step"


@pytest.mark.parametrize("backend", [*FAST_BACKENDS, "reference"])
def test_divergence_is_detected_and_contained(backend, cheetah_xml):
    model = load_model(cheetah_xml)
    sim = make_backend(backend, model, N, decimation=5)
    damping = np.tile(model.dof_damping, (N, 1))
    damping[3] = -1e6  # negative damping: world 3 blows up, the others are untouched
    sim.set_model_field("damping", torch.from_numpy(damping))
    flagged = torch.zeros(N, dtype=torch.bool)
    u = _controls(model, 50, 11)
    for t in range(50):
        flagged |= sim.step(u[t])
    assert flagged.tolist() == [False, False, False, True, False, False]
    assert torch.isfinite(sim.qpos).all() and torch.isfinite(sim.qvel).all()


def test_bad_model_errors():
    from robolearn.sim import ModelError

    with pytest.raises(ModelError, match="did not parse|did not compile"):
        load_model("<mujoco><worldbody><body><geom type='sphere'/></body></worldbody>")
    with pytest.raises(ModelError, match="does not exist"):
        load_model("/no/such/model.xml")
    with pytest.raises(ModelError, match="did not compile|did not parse"):
        load_model("<mujoco><worldbody><body><joint type='hinge'/><geom type='box' size='-1 1 1'/></body></worldbody></mujoco>")
    model = load_model("<mujoco><worldbody><body><joint/><geom size='.1'/></body></worldbody></mujoco>")
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        make_backend("nope", model, 2)
    with pytest.raises(ValueError, match="cannot be set per world"):
        make_backend("mujoco", model, 2).set_model_field("colour", 1.0)
    with pytest.raises(ValueError, match="qpos: expected shape"):
        make_backend("mujoco", model, 2).reset(None, torch.zeros(2, 5))


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_applied_wrenches_and_substep_counts(backend, cheetah_xml):
    model = load_model(cheetah_xml)
    fast, ref = _pair(backend, model)
    qpos, qvel = _start_state(model, 10)
    wrench = torch.zeros(2, model.nbody, 6, dtype=torch.float64)
    wrench[:, 1, 2] = torch.tensor([300.0, -200.0])  # push the torso up / down in worlds 1 and 4
    for sim in (fast, ref):
        sim.reset(None, qpos, qvel)
        sim.set_xfrc_applied(wrench, torch.tensor([1, 4]))
        assert sim.xfrc_applied[[1, 4], 1, 2].tolist() == [300.0, -200.0] and (sim.xfrc_applied[0] == 0).all()
    u = _controls(model, 30, 11)
    for k in range(30):
        fast.step(u[k], nstep=1 + k % 3)
        ref.step(u[k], nstep=1 + k % 3)
    _assert_same(fast, ref)
    assert fast.time[0].item() == pytest.approx(model.opt.timestep * sum(1 + k % 3 for k in range(30)))
    plain = make_backend(backend, model, N, decimation=5)
    plain.reset(None, qpos, qvel)
    for k in range(30):
        plain.step(u[k], nstep=1 + k % 3)
    assert plain.qpos[1, 1] < fast.qpos[1, 1] and plain.qpos[4, 1] > fast.qpos[4, 1], "the wrenches must act"
    fast.reset(torch.tensor([1]))
    assert (fast.xfrc_applied[1] == 0).all() and (fast.xfrc_applied[4, 1, 2] == -200.0), "reset clears its world only"


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_add_qvel_pushes_selected_worlds_and_dofs(backend, cheetah_xml):
    model = load_model(cheetah_xml)
    fast, ref = _pair(backend, model)
    qpos, qvel = _start_state(model, 12)
    dv = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
    for sim in (fast, ref):
        sim.reset(None, qpos, qvel)
        sim.add_qvel(dv, torch.tensor([1, 4]), [0, 3])
    want = qvel.clone()
    want[1, 0] += 0.5
    want[1, 3] -= 1.0
    want[4, 0] += 2.0
    want[4, 3] += 0.25
    torch.testing.assert_close(fast.qvel, want, rtol=0, atol=0)
    u = _controls(model, 20, 13)
    for k in range(20):
        fast.step(u[k])
        ref.step(u[k])
    _assert_same(fast, ref)


@pytest.mark.parametrize("backend", FAST_BACKENDS)
def test_reset_sets_actuator_activations_like_the_reference(backend):
    # The quadrotor's motors are first-order filters (MuJoCo activations): a reset with `act`
    # starts them there on both backends, only for the worlds reset, and both step alike from it.
    from robolearn.assets import asset_path

    model = load_model(str(asset_path("crazyflie2.xml")))
    assert model.na == 4
    fast, ref = _pair(backend, model, decimation=2)
    qpos, qvel = torch.tensor(model.qpos0).repeat(N, 1), torch.zeros(N, model.nv, dtype=torch.float64)
    fast.reset(None, qpos, qvel)
    ref.reset(None, qpos, qvel)
    ids = torch.tensor([1, 4])
    act = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]], dtype=torch.float64)
    fast.reset(ids, qpos[ids], qvel[ids], act)
    ref.reset(ids, qpos[ids], qvel[ids], act)
    for b in (fast, ref):
        torch.testing.assert_close(b.data_field("act")[ids], act, rtol=0, atol=0)
        assert (b.data_field("act")[[0, 2, 3, 5]] == 0).all()
    u = torch.full((N, model.nu), 0.5, dtype=torch.float64)
    for _ in range(5):
        fast.step(u)
        ref.step(u)
    torch.testing.assert_close(fast.data_field("act"), ref.data_field("act"), rtol=0, atol=0)
    _assert_same(fast, ref)
    with pytest.raises(ValueError, match="act"):
        _pair(backend, load_model(str(asset_path("cartpole.xml"))))[0].reset(None, None, None, torch.zeros(N, 1))
