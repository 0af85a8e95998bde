"""Camera observations (robolearn.envs.camera): intrinsics and projection against rendered pixels,
uint8 frames end to end, determinism, the render rate, depth and segmentation, and the
``Cartpole-Swingup-Pixels`` task.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

import robolearn
from robolearn.envs import BatchedEnv
from robolearn.envs.camera import (
    camera_depth,
    camera_intrinsics,
    camera_segmentation,
    intrinsics_from_fovy,
    project_points,
)
from robolearn.sim import MujocoBackend
from robolearn.sim.render import BatchRenderer
from robolearn.tasks.classic.pixels import cartpole_swingup_pixels_cfg
from robolearn.tasks.manipulation.reacher_pixels import reacher_pixels_cfg

SIZE = 32  # small frames keep the rendering tests fast on a software rasteriser

# A tilted camera, a black background (no skybox, no lights: only emission shows) and a small
# self-lit red ball on a free joint, placed per world through qpos.
BALL_XML = """
<mujoco>
  <statistic extent="5" center="0 0 0"/>  <!-- clipping planes at 0.05 and 250 m (znear/zfar x extent) -->
  <visual><headlight active="0" ambient="0 0 0" diffuse="0 0 0"/></visual>
  <asset><material name="glow" rgba="1 0 0 1" emission="1"/></asset>
  <worldbody>
    <camera name="eye" pos="0.5 -3 1" xyaxes="1 0.2 0 0 0.3 1" fovy="50"/>
    <body name="ball" pos="0 0 0">
      <freejoint/>
      <geom name="ball" type="sphere" size="0.06" material="glow"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_intrinsics_from_the_vertical_field_of_view():
    k = intrinsics_from_fovy(90.0, 64, 48)
    # fy = (H / 2) / tan(45 deg) = 24; square pixels; OpenCV pixel centres: (W - 1) / 2, (H - 1) / 2.
    assert (k.fx, k.fy, k.cx, k.cy) == (pytest.approx(24.0), pytest.approx(24.0), 31.5, 23.5)
    np.testing.assert_allclose(k.matrix(), [[24.0, 0, 31.5], [0, 24.0, 23.5], [0, 0, 1]])
    # A point on the optical axis lands on the principal point; one 1 m right at 2 m, fx / 2 right of it.
    uv, depth = project_points(k, np.zeros(3), np.eye(3), np.array([[0.0, 0.0, -2.0], [1.0, 0.5, -2.0]]))
    np.testing.assert_allclose(uv, [[31.5, 23.5], [31.5 + 12.0, 23.5 - 6.0]])
    np.testing.assert_allclose(depth, [2.0, 2.0])
    with pytest.raises(ValueError, match="fovy"):
        intrinsics_from_fovy(180.0, 64, 48)
    with pytest.raises(ValueError, match="width"):
        intrinsics_from_fovy(45.0, 0, 48)


def test_a_projected_world_point_lands_on_the_rendered_pixel():
    model = mujoco.MjModel.from_xml_string(BALL_XML)
    width, height = 96, 72
    sim = MujocoBackend(model, 3)
    data = sim.get_data(0)
    cam_pos, cam_mat = data.cam_xpos[0].copy(), data.cam_xmat[0].copy()
    # Points given in the camera frame (x right, y up, looking along -z), off-centre in each world.
    local = np.array([[0.5, 0.3, -3.0], [-0.7, -0.2, -2.5], [0.1, -0.45, -2.0]])
    points = cam_pos + local @ cam_mat.reshape(3, 3).T
    qpos = torch.zeros(3, 7, dtype=torch.float64)
    qpos[:, :3] = torch.from_numpy(points)
    qpos[:, 3] = 1.0
    sim.reset(torch.arange(3), qpos, torch.zeros(3, 6, dtype=torch.float64))
    k = camera_intrinsics(model, "eye", width, height)
    assert k.fy == pytest.approx(36.0 / math.tan(math.radians(25.0)))
    uv, depth = project_points(k, cam_pos, cam_mat, points)
    with BatchRenderer(model, width, height, shadows=False) as renderer:
        rgb = renderer.render(sim, [0, 1, 2], camera="eye")
        depth_map = renderer.render(sim, [0, 1, 2], camera="eye", mode="depth")
        seg = renderer.render(sim, [0, 1, 2], camera="eye", mode="segmentation")
    for w in range(3):
        weight = rgb[w, :, :, 0].astype(np.float64)  # anti-aliased edges: partial coverage, partial red
        red = weight > 0
        assert 3 <= red.sum() < 60 and (rgb[w, :, :, 1:] == 0).all()  # a small disc on black, drawn once
        # The disc's coverage-weighted centroid is the projected centre (a small, far sphere is
        # nearly a disc, centred on the projection of its centre).
        rows, cols = np.mgrid[:height, :width]
        centroid = ((weight * cols).sum() / weight.sum(), (weight * rows).sum() / weight.sum())
        assert centroid == (pytest.approx(uv[w, 0], abs=0.25), pytest.approx(uv[w, 1], abs=0.25))
        u, v = int(round(uv[w, 0])), int(round(uv[w, 1]))
        assert weight[v, u] == weight.max()
        # Depth at that pixel: the sphere's front, about one radius nearer than its centre.
        assert depth_map[w, v, u] == pytest.approx(depth[w] - 0.06, abs=0.01)
        assert tuple(seg[w, v, u]) == (0, int(mujoco.mjtObj.mjOBJ_GEOM))  # geom 0, the ball
        assert (seg[w][~red] == -1).all()  # the rest is background


def _pixels_env(num_envs: int = 2, render_every: int = 1, episode_length: int = 1000) -> BatchedEnv:
    cfg = cartpole_swingup_pixels_cfg(size=SIZE)
    cfg.observations["image"].terms["rgb"].params["render_every"] = render_every
    cfg.episode_length = episode_length
    return BatchedEnv(cfg, num_envs, seed=0)


def _state(cart: float, angle: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([[cart, angle]], dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64)


def test_pixel_task_builds_steps_resets_and_keeps_uint8():
    env = robolearn.make("Cartpole-Swingup-Pixels", 2, seed=0)
    obs, _ = env.reset()
    assert set(obs) == {"image", "critic"}
    assert obs["image"].shape == (2, 84, 84, 3) and obs["image"].dtype == torch.uint8
    assert env.obs_shapes == {"image": (84, 84, 3), "critic": (5,)}
    assert obs["critic"].shape == (2, 5)
    obs, reward, terminated, truncated, info = env.step(torch.ones(2, 1))
    assert obs["image"].dtype == torch.uint8 and info["final_obs"]["image"].dtype == torch.uint8
    # The same reward as the state task at the same state (smooth_balance, the only term).
    state = robolearn.make("Cartpole-Swingup", 2, seed=0)
    state.reset()
    _, state_reward, *_ = state.step(torch.ones(2, 1))
    torch.testing.assert_close(reward, state_reward)
    torch.testing.assert_close(obs["critic"], state.obs["policy"])
    env.close()
    state.close()


def test_same_state_same_bytes_and_the_image_follows_the_state():
    env = _pixels_env(3)
    qpos = torch.tensor([[0.3, 0.0], [0.3, 0.0], [0.3, math.pi]], dtype=torch.float64)
    obs = env.set_state(qpos, torch.zeros(3, 2, dtype=torch.float64))
    image = obs["image"]
    assert torch.equal(image[0], image[1])  # two worlds in one state: identical bytes
    assert not torch.equal(image[0], image[2])
    again = _pixels_env(1).set_state(qpos[:1], torch.zeros(1, 2, dtype=torch.float64))["image"]
    assert torch.equal(again[0], image[0])  # another env, another context: the same bytes
    # Where the pole's upper half projects, the frame is pole-coloured (orange: red > blue) when
    # the pole is up and sky (blue > red) when it hangs down.
    model = env.model
    data = env.sim.get_data(0)
    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "fixed")
    k = camera_intrinsics(model, "fixed", SIZE, SIZE)
    uv, _ = project_points(k, data.cam_xpos[cam], data.cam_xmat[cam], np.array([[0.3, 0.0, 1.8]]))
    u, v = (int(round(c)) for c in uv[0])
    up, down = image[0, v, u].int(), image[2, v, u].int()
    assert up[0] > up[2] + 40 and down[2] > down[0] + 40
    env.close()


def test_render_every_holds_the_frame_between_renders_and_reset_renders_afresh():
    env = _pixels_env(2, render_every=3, episode_length=5)
    renderer_calls: list[int] = []
    env.reset()
    renderer = next(iter(env.__dict__["_camera_renderers"].values()))
    inner = renderer.render

    def counting(sim, ids, **kw):
        renderer_calls.append(len(ids))
        return inner(sim, ids, **kw)

    renderer.render = counting
    first = env.obs["image"]
    frames = []
    push = torch.ones(2, 1)
    for _ in range(5):
        obs, *_, info = env.step(push)
        frames.append((obs["image"], info["final_obs"]["image"]))
    # Episode steps 1 and 2 hold the frame of step 0; step 3 renders the moved cart; step 4 holds it.
    assert torch.equal(frames[0][0], first) and torch.equal(frames[1][0], first)
    assert not torch.equal(frames[2][0], first)
    assert torch.equal(frames[3][0], frames[2][0])
    # Step 5 ends the episodes (time-out): the final observation is still the held frame of step 3,
    # the new episode's first observation is a fresh render of the reset state.
    final, fresh = frames[4][1], frames[4][0]
    assert torch.equal(final, frames[2][0]) and not torch.equal(fresh, final)
    with BatchRenderer(env.model, SIZE, SIZE, shadows=False, reflections=False) as reference:
        torch.testing.assert_close(fresh, torch.from_numpy(reference.render(env.sim, [0, 1], camera="fixed")), rtol=0, atol=0)
    # Renders: step 3 (both worlds), then only the two reset worlds at step 5, never twice a state.
    assert renderer_calls == [2, 2]
    env.close()


def test_depth_and_segmentation_terms():
    env = _pixels_env(1)
    env.set_state(*_state(0.0, math.pi))
    depth = camera_depth(env, "fixed", SIZE, SIZE)
    seg = camera_segmentation(env, "fixed", SIZE, SIZE)
    assert depth.shape == seg.shape == (1, SIZE, SIZE, 1)
    assert depth.dtype == torch.float32 and seg.dtype == torch.int32
    data = env.sim.get_data(0)
    cam = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_CAMERA, "fixed")
    k = camera_intrinsics(env.model, "fixed", SIZE, SIZE)
    uv, (z,) = project_points(k, data.cam_xpos[cam], data.cam_xmat[cam], np.array([[0.0, 0.0, 1.0]]))
    u, v = (int(round(c)) for c in uv[0])
    # The cart's centre: its front face is 0.15 m nearer than the centre (the box is 0.3 m deep).
    assert float(depth[0, v, u, 0]) == pytest.approx(z - 0.15, abs=0.02)
    assert int(seg[0, v, u, 0]) == mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_GEOM, "cart")
    assert int(seg[0, 0, 0, 0]) == -1  # the top corner sees the sky
    env.close()


def test_bad_camera_parameters_name_the_field():
    env = _pixels_env(1)
    with pytest.raises(ValueError, match="render_every"):
        camera_depth(env, "fixed", SIZE, SIZE, render_every=0)
    with pytest.raises(ValueError, match="no camera named 'nope'"):
        camera_depth(env, "nope", SIZE, SIZE)
    with pytest.raises(ValueError, match="camera"):
        camera_intrinsics(env.model, "nope", SIZE, SIZE)
    env.close()


class _ProtocolOnly:
    """A backend seen through the SimBackend protocol alone (no ``mujoco.batch`` to read from)."""

    def __init__(self, sim: MujocoBackend) -> None:
        self.model, self.num_worlds = sim.model, sim.num_worlds
        self.get_model, self.get_data = sim.get_model, sim.get_data


def test_batch_fast_path_frames_match_the_protocol_path():
    # The renderer reads mujoco.batch worlds into one reused model/data pair; the protocol hands
    # out a fresh model and data per world. Same states, per-world colours: same bytes.
    env = _pixels_env(2)
    model = env.model
    env.sim.reset(torch.arange(2), torch.tensor([[0.4, 0.3], [-0.6, 2.0]], dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64))
    rgba = torch.from_numpy(np.repeat(model.mat_rgba[None], 2, axis=0).copy())
    rgba[1, mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MATERIAL, "body")] = torch.tensor([0.1, 0.9, 0.1, 1.0], dtype=torch.float64)
    env.sim.set_model_field("mat_rgba", rgba)
    with BatchRenderer(model, SIZE, SIZE, shadows=False) as renderer:
        fast = renderer.render(env.sim, [1, 0, 1], camera="fixed")
        slow = renderer.render(_ProtocolOnly(env.sim), [1, 0, 1], camera="fixed")
    np.testing.assert_array_equal(fast, slow)
    green = (fast[..., 1].astype(int) - fast[..., 0] > 60).reshape(3, -1).sum(1)
    assert green[0] > 5 and green[1] == 0 and green[2] == green[0]  # world 1's green cart and pole
    env.close()


def test_reacher_pixels_sees_the_arm_move():
    env = BatchedEnv(reacher_pixels_cfg(size=SIZE), 2, seed=0)
    obs, _ = env.reset()
    assert obs["image"].shape == (2, SIZE, SIZE, 3) and obs["image"].dtype == torch.uint8
    assert obs["critic"].shape == (2, 10) and "policy" not in obs
    before = obs["image"].clone()
    for _ in range(5):
        obs, *_ = env.step(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    # World 0's arm swung, world 1's barely moved (zero torque, damped joints at rest).
    changed = (obs["image"].int() - before.int()).abs().amax(dim=3).gt(30).flatten(1).sum(1)
    assert changed[0] > 5 and changed[1] == 0
    env.close()


def test_held_frames_resume_from_a_checkpoint():
    env = _pixels_env(2, render_every=3)
    push = torch.tensor([[1.0], [-1.0]])
    env.step(push)
    state = env.state_dict()
    later = [env.step(push)[0]["image"] for _ in range(3)]
    env.load_state_dict(state)
    again = [env.step(push)[0]["image"] for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(later, again, strict=True))
    # Episode step 2 holds the frame of step 0, step 3 renders, step 4 holds it.
    assert not torch.equal(later[0], later[1]) and torch.equal(later[1], later[2])
    env.close()
