"""MuJoCo Warp's batch renderer (robolearn.sim.warp_render) on Warp's CPU device: shapes and dtypes,
determinism for a fixed state, agreement with the OpenGL renderer, and the camera terms selecting it
on a ``backend="warp"`` env.

What is compared with the OpenGL renderer (``BatchRenderer``, which draws the same backend's worlds
through ``get_model``/``get_data``) and why: the two agree on geometry but shade differently (a ray
tracer sampling pixel centres against a rasteriser with its own lighting), so the test compares
(1) the silhouettes of the moving bodies, the cart and the pole, from each renderer's segmentation
(intersection over union > 0.9 per world: the same pose, camera pose and intrinsics), (2) the depth
on pixels where both see the same geom (within 5 mm: the same planar depth), and (3) the colour
only loosely, as a mean absolute difference below 16 of 255 (measured 2.6 at 64x64: same materials,
lights and skybox, different shading details and no rasteriser coverage of thin geoms).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import robolearn
from robolearn.envs import BatchedEnv
from robolearn.envs.camera import camera_rgb
from robolearn.sim.render import BatchRenderer, FreeCamera
from robolearn.sim.warp_render import WarpBatchRenderer
from robolearn.tasks.classic.pixels import cartpole_swingup_pixels_cfg
from robolearn.utils.hostsync import count_host_syncs

SIZE = 48
N = 3
# Cart positions and pole angles far apart: distinct silhouettes per world.
QPOS = torch.tensor([[-0.6, 0.4], [0.0, 2.2], [0.8, -1.1]], dtype=torch.float64)


@pytest.fixture(scope="module")
def env() -> BatchedEnv:
    cfg = cartpole_swingup_pixels_cfg(size=SIZE)
    # On Warp's CPU device "auto" keeps OpenGL: the task asks for the Warp renderer by name.
    cfg.observations["image"].terms["rgb"].params["renderer"] = "warp"
    e = BatchedEnv(cfg, N, seed=0, backend="warp")
    e.reset()
    e.set_state(QPOS, torch.zeros(N, 2, dtype=torch.float64))
    return e


@pytest.fixture(scope="module")
def warp_frames(env: BatchedEnv) -> dict[str, torch.Tensor]:
    with WarpBatchRenderer(env.sim, "fixed", SIZE, SIZE, modes=("rgb", "depth", "segmentation")) as r:
        first = {k: v.clone() for k, v in r.render().items()}
        again = r.render()
        for k in first:  # the same state renders to the same bytes
            assert torch.equal(first[k], again[k]), k
    return first


def test_shapes_dtypes_and_device(env, warp_frames):
    assert warp_frames["rgb"].dtype == torch.uint8 and warp_frames["rgb"].shape == (N, SIZE, SIZE, 3)
    assert warp_frames["depth"].dtype == torch.float32 and warp_frames["depth"].shape == (N, SIZE, SIZE)
    assert warp_frames["segmentation"].dtype == torch.int32 and warp_frames["segmentation"].shape == (N, SIZE, SIZE, 2)
    assert all(v.device == env.sim.device for v in warp_frames.values())


def test_deterministic_across_renderers_and_steps(env, warp_frames):
    # A second renderer on the same state gives the same bytes; a moved state gives others.
    with WarpBatchRenderer(env.sim, "fixed", SIZE, SIZE, modes=("rgb",)) as r:
        assert torch.equal(r.render()["rgb"], warp_frames["rgb"])


def test_agrees_with_the_opengl_renderer(env, warp_frames):
    with BatchRenderer(env.model, SIZE, SIZE, shadows=False, reflections=False) as gl:
        ids = list(range(N))
        seg = gl.render(env.sim, ids, "fixed", mode="segmentation")[..., 0]
        depth = gl.render(env.sim, ids, "fixed", mode="depth")
        rgb = gl.render(env.sim, ids, "fixed")
    wseg = warp_frames["segmentation"][..., 0].numpy()
    geoms = [env.model.geom("cart").id, env.model.geom("pole").id]
    for w in range(N):
        a, b = np.isin(seg[w], geoms), np.isin(wseg[w], geoms)
        iou = (a & b).sum() / (a | b).sum()
        assert a.sum() > 10 and iou > 0.9, (w, a.sum(), iou)
    # The silhouettes differ between worlds: each renderer drew each world's own state.
    assert not np.array_equal(np.isin(wseg[0], geoms), np.isin(wseg[1], geoms))
    # Whole segmentation maps (the floor, the stops, the background) agree almost everywhere; the
    # rails, thinner than a pixel, are where a ray through the pixel centre misses them.
    assert (seg == wseg).mean() > 0.95, (seg == wseg).mean()
    same = (seg == wseg) & (wseg >= 0)
    assert np.abs(depth - warp_frames["depth"].numpy())[same].max() < 5e-3
    assert np.abs(rgb.astype(np.int16) - warp_frames["rgb"].numpy().astype(np.int16)).mean() < 16


def test_camera_terms_draw_with_warp_on_a_warp_env(env, warp_frames):
    obs = env.set_state(QPOS, torch.zeros(N, 2, dtype=torch.float64))
    assert torch.equal(obs["image"], warp_frames["rgb"])
    assert {key[0] for key in env.__dict__["_camera_renderers"]} == {"warp"}
    # "auto" on Warp's CPU device, and "gl": the OpenGL frames, which differ in shading.
    with BatchRenderer(env.model, SIZE, SIZE, shadows=False, reflections=False) as gl:
        want = torch.from_numpy(gl.render(env.sim, list(range(N)), "fixed"))
    for choice in ("auto", "gl"):
        frames = camera_rgb(env, "fixed", SIZE, SIZE, renderer=choice)
        assert frames.dtype == torch.uint8 and torch.equal(frames, want) and not torch.equal(frames, warp_frames["rgb"])


def test_bad_renderer_choices_name_the_field(env):
    with pytest.raises(ValueError, match="renderer: expected one of auto, gl, warp"):
        camera_rgb(env, "fixed", SIZE, SIZE, renderer="vulkan")
    with pytest.raises(ValueError, match="model's cameras only"):
        camera_rgb(env, FreeCamera(), SIZE, SIZE, renderer="warp")
    with pytest.raises(ValueError, match="reflections"):
        camera_rgb(env, "fixed", SIZE, SIZE, reflections=True, renderer="warp")
    plain = robolearn.make("Cartpole-Swingup-Pixels", 1, observations__image__terms__rgb__params__width=8,
                           observations__image__terms__rgb__params__height=8)  # fmt: skip
    with pytest.raises(ValueError, match="backend='warp'"):
        camera_rgb(plain, "fixed", 8, 8, renderer="warp")
    with pytest.raises(ValueError, match="WarpBackend"):
        WarpBatchRenderer(plain.sim, "fixed", 8, 8)
    with pytest.raises(ValueError, match="modes"):
        WarpBatchRenderer(env.sim, "fixed", 8, 8, modes=("rgb", "normals"))


@pytest.mark.gpu
def test_on_cuda_the_frames_stay_on_the_device_and_match_the_cpu_device(warp_frames):
    """On CUDA (skipped without it, tests/conftest.py): the camera term picks the Warp renderer by
    itself ("auto"), the frames are CUDA tensors and show what Warp's CPU device draws for the same state."""
    env = BatchedEnv(cartpole_swingup_pixels_cfg(size=SIZE), N, seed=0, backend="warp", device="cuda")
    env.reset()
    obs = env.set_state(QPOS.cuda(), torch.zeros(N, 2, dtype=torch.float64, device="cuda"))
    assert obs["image"].device.type == "cuda" and obs["image"].dtype == torch.uint8
    with WarpBatchRenderer(env.sim, "fixed", SIZE, SIZE, modes=("rgb", "segmentation")) as r:
        out = r.render()
        assert out["rgb"].device.type == "cuda"
        assert torch.equal(out["segmentation"].cpu(), warp_frames["segmentation"])
        diff = (out["rgb"].cpu().to(torch.int16) - warp_frames["rgb"].to(torch.int16)).abs().float().mean()
        assert diff < 2.0, diff  # fast-math shading on the GPU rounds differently from the CPU device
        assert torch.equal(obs["image"], out["rgb"])
    assert {key[0] for key in env.__dict__["_camera_renderers"]} == {"warp"}


def test_a_camera_tracking_a_body_com_follows_the_body_away_from_qpos0():
    """The pendulum's ``track`` camera (``targetbodycom`` on the pole) is placed from the pole's
    subtree centre of mass: with the pole swung to 2.5 rad the Warp frame must show what the OpenGL
    renderer (``mj_forward`` per world) shows, not the camera aimed at the qpos0 centre of mass."""
    from robolearn.tasks.classic.pendulum import pendulum_swingup_cfg

    n, size = 2, 32
    env = BatchedEnv(pendulum_swingup_cfg(), n, seed=0, backend="warp")
    env.reset()
    env.set_state(torch.tensor([[0.0], [2.5]], dtype=torch.float64), torch.zeros(n, 1, dtype=torch.float64))
    with WarpBatchRenderer(env.sim, "track", size, size, modes=("segmentation", "depth")) as r:
        out = r.render()
        wseg, wdepth = out["segmentation"][..., 0].numpy(), out["depth"].numpy()
    with BatchRenderer(env.model, size, size, shadows=False, reflections=False) as gl:
        seg = gl.render(env.sim, list(range(n)), "track", mode="segmentation")[..., 0]
        depth = gl.render(env.sim, list(range(n)), "track", mode="depth")
    for w in range(n):
        same = seg[w] == wseg[w]
        assert same.mean() > 0.95, (w, same.mean())
        assert np.abs(depth[w] - wdepth[w])[same & (wseg[w] >= 0)].max() < 5e-3, w
    # The swung pole's world is drawn from another camera pose than the resting one's.
    assert not np.array_equal(seg[0], seg[1])


def test_render_every_holds_the_warp_frames_as_the_opengl_path_does():
    """With ``render_every=3`` a camera term on the Warp renderer draws at episode steps 0, 3, 6 and
    holds its frame in between, as the same term on OpenGL does (same backend, same actions)."""
    n, size, every = 2, 32, 3

    def make(renderer: str) -> BatchedEnv:
        cfg = cartpole_swingup_pixels_cfg(size=size)
        cfg.observations["image"].terms["rgb"].params.update(renderer=renderer, render_every=every)
        e = BatchedEnv(cfg, n, seed=0, backend="warp")
        e.reset()
        # Fast carts and poles: a ray tracer sampling pixel centres sees a move of a few cm between
        # renders (the reset state drifts too slowly for a 32-pixel frame).
        e.set_state(QPOS[:n], torch.tensor([[4.0, 8.0], [-4.0, -8.0]], dtype=torch.float64))
        return e

    warp_env, gl_env = make("warp"), make("gl")
    assert {key[0] for key in warp_env.__dict__["_camera_renderers"]} == {"warp"}
    before = {"warp": warp_env.obs["image"], "gl": gl_env.obs["image"]}
    changed: dict[str, list[bool]] = {"warp": [], "gl": []}
    push = torch.ones(n, 1)
    for _ in range(7):
        for name, e in (("warp", warp_env), ("gl", gl_env)):
            image = e.step(push)[0]["image"]
            changed[name].append(not torch.equal(image, before[name]))
            before[name] = image
        assert torch.equal(warp_env.sim.qpos, gl_env.sim.qpos)  # the renderer does not touch the state
    want = [step % every == 0 for step in range(1, 8)]
    assert changed["gl"] == want and changed["warp"] == want, changed


def test_a_warp_camera_term_keeps_the_due_worlds_without_a_host_sync():
    """On the Warp path the due worlds are selected on the device (module doc of robolearn.envs.camera,
    "Renderer"): with ``render_every=1`` a term call makes no host sync, a world that was not due
    keeps its held frame, and with ``render_every=3`` one sync (any world due?) per call remains."""
    n, size = 2, 16
    e = BatchedEnv(cartpole_swingup_pixels_cfg(size=size), n, seed=0, backend="warp")
    e.reset()
    e.set_state(QPOS[:n], torch.zeros(n, 2, dtype=torch.float64))
    held = camera_rgb(e, "fixed", size, size, renderer="warp")
    # Move world 1 only, in place (no env call): world 0's state is the one already drawn.
    e.sim.reset(torch.tensor([1]), QPOS[2:3], torch.zeros(1, 2, dtype=torch.float64))
    with count_host_syncs() as profile:
        moved = camera_rgb(e, "fixed", size, size, renderer="warp")
    assert profile.count == 0, profile.format()
    assert torch.equal(moved[0], held[0]) and not torch.equal(moved[1], held[1])
    e.set_state(QPOS[:n], torch.zeros(n, 2, dtype=torch.float64))
    with WarpBatchRenderer(e.sim, "fixed", size, size, modes=("rgb",)) as r:
        assert torch.equal(camera_rgb(e, "fixed", size, size, renderer="warp"), r.render()["rgb"])
    with count_host_syncs() as profile:
        camera_rgb(e, "fixed", size, size, render_every=3, renderer="warp")
    assert profile.count == 1, profile.format()
