"""The quadruped (issue 13): its model against its constants, standing under PD, foot contact
sensors, velocity commands, the generated terrain and its levels, and the registered tasks."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

import robolearn
from robolearn.assets import quadruped as go1
from robolearn.tasks.legged import mdp as legged
from robolearn.tasks.legged.curriculum import walk_score
from robolearn.tasks.legged.terrain import Terrain, TerrainCfg, build_terrain

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(go1.MJCF))


def test_model_matches_constants(model: mujoco.MjModel) -> None:
    # Joint order: the free joint, then FR/FL/RR/RL x hip/thigh/calf; actuators in the same order.
    joints = [model.joint(i).name for i in range(model.njnt)]
    assert joints == ["root", *go1.JOINT_NAMES]
    assert [model.actuator(i).name for i in range(model.nu)] == list(go1.JOINT_NAMES)
    assert [model.joint(model.actuator_trnid[i, 0]).name for i in range(model.nu)] == list(go1.JOINT_NAMES)
    for i, name in enumerate(go1.JOINT_NAMES):
        kind = name.split("_")[1]
        np.testing.assert_allclose(model.jnt_range[i + 1], go1.JOINT_RANGE[kind])
        limit = go1.TORQUE_LIMIT[kind]
        np.testing.assert_allclose(model.actuator_forcerange[i], (-limit, limit))
        assert not model.actuator_ctrllimited[i]  # a joint_pos term's ctrl is a target angle
    assert sum(model.body_mass) == pytest.approx(go1.TOTAL_MASS, abs=1e-9)
    assert model.body("trunk").mass[0] == pytest.approx(go1.TRUNK_MASS)
    # The home keyframe is the default pose at the spawn height.
    key = model.key("home").qpos
    np.testing.assert_allclose(key[7:], go1.DEFAULT_JOINT_POS)
    assert key[2] == pytest.approx(go1.SPAWN_HEIGHT, abs=1e-3)
    # Default pose by hand: hips splay outwards (+0.1 left, -0.1 right), thighs 0.8 front / 1.0 rear.
    assert go1.DEFAULT_JOINT_POS[:6] == (-0.1, 0.8, -1.5, 0.1, 0.8, -1.5)
    assert go1.DEFAULT_JOINT_POS[6:] == (-0.1, 1.0, -1.5, 0.1, 1.0, -1.5)


def test_stand_height_is_the_forward_kinematics(model: mujoco.MjModel) -> None:
    data = mujoco.MjData(model)
    data.qpos[:] = model.key("home").qpos
    data.qpos[2] = 1.0
    mujoco.mj_kinematics(model, data)
    hip_z = {leg: data.xpos[model.body(f"{leg}_hip").id][2] for leg in go1.LEGS}
    for leg in go1.LEGS:
        foot = data.geom_xpos[model.geom(f"{leg}_foot").id][2] - go1.FOOT_RADIUS
        kind = "front" if leg.startswith("F") else "rear"
        # go1._leg_height is the hip's height over the sole, by hand-written trigonometry.
        assert hip_z[leg] - foot == pytest.approx(go1._leg_height(*go1.STAND_POSE[kind]), abs=1e-9)
    # Hand-computed for the front leg: 0.213 (cos 0.8 + cos 0.7) cos 0.1 - 0.08 sin 0.1 + 0.02.
    assert go1._leg_height(0.1, 0.8, -1.5) == pytest.approx(0.213 * (math.cos(0.8) + math.cos(0.7)) * math.cos(0.1) - 0.008 + 0.02, abs=1e-3)


def test_actions_map_to_the_default_pose() -> None:
    env = robolearn.make("Quadruped-Flat-NoDR", 2, seed=0, nthread=1)
    ctrl = env.action_manager.process(torch.zeros(2, 12, dtype=torch.float64))
    np.testing.assert_allclose(ctrl[0].numpy(), go1.DEFAULT_JOINT_POS)
    ctrl = env.action_manager.process(torch.ones(2, 12, dtype=torch.float64))
    np.testing.assert_allclose(ctrl[0].numpy(), np.array(go1.DEFAULT_JOINT_POS) + go1.ACTION_SCALE)
    spec = env.policy_spec()
    assert tuple(spec["joint_order"]) == go1.JOINT_NAMES
    # The servos are kp 20 / kd 0.5 on every joint.
    np.testing.assert_allclose(env.model.actuator_gainprm[:, 0], go1.KP)
    np.testing.assert_allclose(env.model.actuator_biasprm[:, 1:3], np.tile([-go1.KP, -go1.KD], (12, 1)))


def test_default_pose_stands_for_five_seconds() -> None:
    env = robolearn.make("Quadruped-Flat-NoDR", 4, seed=1, nthread=1)
    zeros = torch.zeros(4, 12)
    heights = []
    for _ in range(250):  # 5 s at 50 Hz
        _, _, terminated, truncated, _ = env.step(zeros)
        assert not terminated.any() and not truncated.any()
        heights.append(env.sim.qpos[:, 2].clone())
    z = env.sim.qpos[:, 2]
    # The PD loop (kp 20) sags under 12.9 kg: below the kinematic height, within 6 cm of it ...
    assert (z < go1.STAND_HEIGHT).all() and (z > go1.STAND_HEIGHT - 0.06).all(), z
    # ... and settled: less than 1 cm of drift over the last second.
    assert (heights[-1] - heights[-51]).abs().max() < 0.01
    tilt = torch.rad2deg(torch.acos(-legged.projected_gravity(env)[:, 2]))
    assert (tilt < 5.0).all(), tilt
    # All four feet carry the weight (touch sensors), nothing else touches.
    forces = legged.foot_forces(env)
    assert (forces > 5.0).all()
    weight = float(env.sim.get_model_field("body_mass")[0].sum()) * 9.81
    assert forces.sum(1).numpy() == pytest.approx(weight, rel=0.02)
    assert (env.sim.sensordata[:, 4:] == 0).all()


def _settled(env: robolearn.envs.BatchedEnv) -> tuple[torch.Tensor, torch.Tensor]:
    for _ in range(50):
        env.step(torch.zeros(env.num_envs, 12))
    return env.sim.qpos.clone(), torch.zeros(env.num_envs, env.model.nv, dtype=torch.float64)


def test_contact_sensors_report_the_feet_that_touch() -> None:
    env = robolearn.make("Quadruped-Flat-NoDR", 4, seed=2, nthread=1)
    qpos, qvel = _settled(env)
    env.set_state(qpos, qvel)
    np.testing.assert_array_equal(legged.foot_contacts(env).numpy(), np.ones((4, 4)))
    # World k folds leg k's knee fully (its foot lifts off); the other three feet still touch.
    lifted = qpos.clone()
    for k in range(4):
        lifted[k, 7 + 3 * k + 2] = -2.7
    env.set_state(lifted, qvel)
    np.testing.assert_array_equal(legged.foot_contacts(env).numpy(), 1.0 - np.eye(4))
    # The whole robot 5 cm up: nothing touches.
    up = qpos.clone()
    up[:, 2] += 0.05
    env.set_state(up, qvel)
    assert (env.sim.sensordata == 0).all()
    # On its back, legs up, the trunk 7 mm into the ground: only the trunk sensor fires, and both
    # terminations with it.
    back = qpos.clone()
    back[:, 2] = 0.05
    back[:, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)  # 180 degrees about x
    env.set_state(back, qvel)
    assert legged.trunk_contact(env).all()
    assert (env.sim.sensordata[:, :4] == 0).all() and (env.sim.sensordata[:, 5:] == 0).all()
    assert legged.flipped(env).all()


def test_velocity_commands_stay_in_range_and_follow_the_params() -> None:
    env = robolearn.make("Quadruped-Flat", 64, seed=3, nthread=1)
    cm = env.command_manager
    params = cm.terms["base_velocity"].params
    for _ in range(5):
        cm.resample("base_velocity", env.all_ids)
        cmd = cm.values["base_velocity"]
        for col, key in enumerate(("lin_vel_x", "lin_vel_y", "ang_vel_z")):
            lo, hi = params[key]
            assert (cmd[:, col] >= lo).all() and (cmd[:, col] <= hi).all()
        planar = torch.linalg.vector_norm(cmd[:, :2], dim=1)
        assert ((planar == 0) | (planar >= 0.2)).all()  # small planar commands become "stand"
        assert (planar == 0).any() and (planar > 0).any()
        assert (cm.timers["base_velocity"] == 10.0).all()
    params["lin_vel_x"] = [1.5, 1.6]  # what the command curriculum writes
    params["lin_vel_y"] = [0.0, 0.0]
    cm.resample("base_velocity", env.all_ids)
    x = cm.values["base_velocity"][:, 0]
    assert (x >= 1.5).all() and (x <= 1.6).all()


def info_value(env: robolearn.envs.BatchedEnv, name: str) -> float:
    """What the curriculum term ``name`` reports now."""
    return float(env.curriculum_manager.calls[name](env, env.all_ids[:0]))


def test_command_curriculum_widens_on_good_tracking() -> None:
    env = robolearn.make("Quadruped-Flat", 16, seed=4, nthread=1)
    gate = env.curriculum_manager.calls["command_lin_vel_x"]
    ids = env.all_ids
    rm = env.reward_manager
    k = rm.names.index("track_lin_vel_xy")
    full = env.max_episode_length * env.dt
    for _ in range(16):  # 256 episodes of perfect tracking: one widening
        rm.episode_sums[:, k] = rm.weights[k] * env.max_episode_length  # 1.0 per second at weight 0.02
        gate(env, ids)
    assert list(env.cfg.commands["base_velocity"].params["lin_vel_x"]) == pytest.approx([-1.1, 1.1])
    assert info_value(env, "command_lin_vel_x") == pytest.approx(1.1)  # logged: the range's upper end
    for _ in range(16):  # poor tracking (0.5 of the maximum): no change
        rm.episode_sums[:, k] = 0.5 * rm.weights[k] * full / env.dt
        gate(env, ids)
    assert list(env.cfg.commands["base_velocity"].params["lin_vel_x"]) == pytest.approx([-1.1, 1.1])


def test_terrain_is_deterministic_and_graded() -> None:
    cfg = TerrainCfg(num_levels=4, num_cols=4, tile_size=2.0, platform=0.6, seed=7)
    a, b = Terrain(cfg), Terrain(cfg)
    np.testing.assert_array_equal(a.heights, b.heights)
    assert build_terrain(cfg) is build_terrain(cfg)
    other = Terrain(TerrainCfg(num_levels=4, num_cols=4, tile_size=2.0, platform=0.6, seed=8))
    assert not np.array_equal(a.heights, other.heights)  # the rough tiles follow the seed
    # Stairs up, level 3 of 4 (d = 1): steps of 0.02 + 0.12 m, 2 of 0.35 m treads between the
    # 0.6 m platform and the 1 m half-tile: the platform stands 2 steps up.
    centre = a.tile_center(torch.tensor([3.0]), torch.tensor([2]))
    assert a.height_at(centre).item() == pytest.approx(2 * 0.14)
    assert a.height_at(a.tile_center(torch.tensor([0.0]), torch.tensor([2]))).item() == pytest.approx(2 * 0.02)
    # Slope, level 2 of 4: rise 0.3 * 2/3 over the 0.7 m from platform to rim.
    assert a.height_at(a.tile_center(torch.tensor([2.0]), torch.tensor([0]))).item() == pytest.approx(0.2 * 0.7)
    with pytest.raises(ValueError, match="terrain.num_levels"):
        TerrainCfg(num_levels=0)


def test_terrain_heights_match_mujoco() -> None:
    cfg = TerrainCfg(num_levels=3, num_cols=4, tile_size=2.0, platform=0.6, seed=1)
    terrain = Terrain(cfg)
    model = mujoco.MjModel.from_xml_string(terrain.mjcf(go1.MJCF))
    data = mujoco.MjData(model)
    data.qpos[:3] = (-5.0, -5.0, 1.0)  # the robot out of the rays' way
    mujoco.mj_forward(model, data)
    rng = np.random.default_rng(0)
    geom = np.zeros(1, dtype=np.int32)
    terrain_id = model.geom("terrain").id
    nx, ny = terrain.heights.shape
    # At the samples (where MuJoCo's triangles and the bilinear lookup agree) the heights match:
    # the hfield's orientation, normalisation and placement are right.
    for i, j in zip(rng.integers(0, nx, 200), rng.integers(0, ny, 200), strict=True):
        x, y = i * cfg.resolution, j * cfg.resolution
        dist = mujoco.mj_ray(model, data, np.array([x, y, 3.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom)
        assert geom[0] == terrain_id
        assert 3.0 - dist == pytest.approx(terrain.heights[i, j], abs=1e-5)
        assert terrain.height_at(torch.tensor([x, y], dtype=torch.float64)).item() == pytest.approx(terrain.heights[i, j])


def test_rough_spawn_follows_the_level() -> None:
    env = robolearn.make("Quadruped-Rough", 8, seed=5, nthread=1)
    levels = env.task_params["terrain_level"]
    assert levels.shape == (8,) and (levels == 0).all()
    terrain = env.cfg.initial_state.params["terrain"]
    levels[:] = torch.tensor([0.0, 0, 0, 0, 5, 5, 5, 5])
    qpos, _ = legged.stand_state(env, env.all_ids, **env.cfg.initial_state.params)
    centre = terrain.tile_center(levels, env.all_ids % 4)
    assert (qpos[:, :2] - centre).abs().max() <= 0.1 + 1e-9
    ground = terrain.height_at(qpos[:, :2], footprint=True)
    np.testing.assert_allclose(qpos[:, 2].numpy(), (ground + go1.SPAWN_HEIGHT).numpy())
    # Level 5 (d = 1) stairs up stand higher than level 0's, stairs down lower; slopes higher.
    assert qpos[6, 2] > qpos[2, 2] + 0.2 and qpos[7, 2] < qpos[3, 2] - 0.2 and qpos[4, 2] > qpos[0, 2] + 0.2


def test_walk_score_promotes_and_demotes() -> None:
    env = robolearn.make("Quadruped-Rough", 3, seed=6, nthread=1)
    start = legged.gait_state(env).start_xy
    qpos = env.sim.qpos.clone()
    qpos[:, :2] = start + torch.tensor([[2.5, 0.0], [0.1, 0.0], [1.5, 0.0]], dtype=torch.float64)
    env.set_state(qpos, torch.zeros(3, env.model.nv, dtype=torch.float64))
    cmd = torch.tensor([[0.5, 0.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.1, 0.0]], dtype=torch.float64)
    env.command_manager.values["base_velocity"][:] = cmd
    # Walked 2.5 m > half a 4 m tile: 2; 0.1 m < half of 0.5 m/s x 20 s: 0; 1.5 m, between 2 m and
    # half of 0.1 m/s x 20 s: 1.
    np.testing.assert_array_equal(walk_score(env, env.all_ids, tile_size=4.0).numpy(), [2.0, 0.0, 1.0])
    levels = env.curriculum_manager.calls["terrain_levels"]
    env.task_params["terrain_level"][:] = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    levels(env, env.all_ids)
    np.testing.assert_array_equal(env.task_params["terrain_level"].numpy(), [2.0, 0.0, 1.0])


@pytest.mark.parametrize("task", ["Quadruped-Flat", "Quadruped-Flat-NoDR", "Quadruped-Rough"])
def test_registered_tasks_step_without_nan(task: str) -> None:
    assert task in robolearn.list_tasks()
    env = robolearn.make(task, 4, seed=0, nthread=1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(torch.randn(4, 12, generator=gen))
        assert torch.isfinite(reward).all()
        for group in obs.values():
            assert torch.isfinite(group).all()
    assert env.obs_dims["policy"] == 45  # 3 + 3 + 3 + 12 + 12 + 12
    assert "command_lin_vel_x" in info["curriculum"]


class _Stub:
    """The few env attributes the gait terms read, set by hand (the buffers are BatchedEnv's own)."""

    buffer = robolearn.envs.BatchedEnv.buffer
    has_buffer = robolearn.envs.BatchedEnv.has_buffer

    def __init__(self, n: int) -> None:
        self.num_envs, self.device, self.dt = n, torch.device("cpu"), 0.02
        self._buffers: dict[str, torch.Tensor] = {}
        self.episode_length = torch.zeros(n, dtype=torch.long)
        self.sim = type("Sim", (), {})()
        self.sim.qpos = torch.zeros(n, 19, dtype=torch.float64)
        self.sim.qpos[:, 3] = 1.0
        self.sim.qvel = torch.zeros(n, 18, dtype=torch.float64)
        self.sim.sensordata = torch.zeros(n, 13, dtype=torch.float64)
        self.command_manager = type("Commands", (), {})()
        self.command_manager.values = {"base_velocity": torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)}


def test_feet_air_time_by_hand() -> None:
    env = _Stub(2)
    rewards = []
    # Foot FR in the air for 30 steps (0.6 s), then down; the other feet stay down.
    for step in range(1, 40):
        env.episode_length += 1
        down = torch.ones(2, 4, dtype=torch.float64) * 50.0
        if step <= 30:
            down[:, 0] = 0.0
        env.sim.sensordata[:, :4] = down
        rewards.append(legged.feet_air_time(env, target=0.5))  # type: ignore[arg-type]
    r = torch.stack(rewards)
    # The landing step (31) pays air time - 0.5 = 31 x 0.02 - 0.5 = 0.12 s (the air time counts the
    # landing step, as legged_gym's); every other step pays nothing; a zero command pays nothing.
    assert r[30, 0].item() == pytest.approx(31 * 0.02 - 0.5)
    assert r[:, 0].abs().sum().item() == pytest.approx(31 * 0.02 - 0.5)
    assert (r[:, 1] == 0).all()


def test_tracking_kernels_by_hand() -> None:
    env = _Stub(2)
    env.sim.qvel[:, 0] = torch.tensor([1.0, 0.5], dtype=torch.float64)  # world-frame vx, trunk level
    env.sim.qvel[:, 5] = 0.3
    # World 0 tracks (1, 0) exactly; world 1 is 0.5 m/s short of nothing: err^2 = 0.25.
    env.command_manager.values["base_velocity"][1] = torch.tensor([0.0, 0.0, 0.0], dtype=torch.float64)
    lin = legged.track_lin_vel_xy(env, std=0.5)  # type: ignore[arg-type]
    np.testing.assert_allclose(lin.numpy(), [1.0, math.exp(-0.25 / 0.25)])
    yaw = legged.track_ang_vel_z(env, std=0.5)  # type: ignore[arg-type]
    np.testing.assert_allclose(yaw.numpy(), [math.exp(-0.09 / 0.25)] * 2)
    # A trunk yawed 90 degrees: world-frame +y velocity is body-frame +x.
    half = math.pi / 4
    env.sim.qpos[:, 3:7] = torch.tensor([math.cos(half), 0.0, 0.0, math.sin(half)], dtype=torch.float64)
    env.sim.qvel[:, :3] = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    np.testing.assert_allclose(legged.base_lin_vel(env).numpy(), [[1.0, 0.0, 0.0]] * 2, atol=1e-12)  # type: ignore[arg-type]
    np.testing.assert_allclose(legged.projected_gravity(env).numpy(), [[0.0, 0.0, -1.0]] * 2, atol=1e-12)  # type: ignore[arg-type]


def test_env_state_round_trip_continues_the_gait_memory_exactly():
    # Feet air time and episode start positions are per-world memory across steps: a resumed env
    # (state_dict -> a fresh env's load_state_dict) must continue with them, rewards included.
    torch.manual_seed(0)
    actions = [0.5 * torch.randn(4, 12) for _ in range(40)]
    env = robolearn.make("Quadruped-Flat", 4, seed=3, nthread=1)
    env.reset()
    for a in actions[:25]:
        env.step(a)
    saved = env.state_dict()
    assert {"gait/air_time", "gait/last_contact", "gait/start_xy"} <= set(saved["buffers"])
    assert saved["buffers"]["gait/air_time"].abs().sum() > 0  # some foot has been in the air
    expected = [env.step(a)[1].clone() for a in actions[25:]]
    resumed = robolearn.make("Quadruped-Flat", 4, seed=99, nthread=1)
    resumed.reset()
    for a in actions[:5]:  # its own memory differs before the load
        resumed.step(a)
    resumed.load_state_dict(saved)
    got = [resumed.step(a)[1].clone() for a in actions[25:]]
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
