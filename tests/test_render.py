"""Offscreen rendering of selected worlds (BatchRenderer) and the mp4 writer."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import imageio.v3 as iio
import mujoco
import numpy as np
import pytest
import torch

import robolearn
from robolearn.logging import write_mp4
from robolearn.sim import ReferenceBackend
from robolearn.sim import render as render_mod
from robolearn.sim.render import BatchRenderer

WIDTH, HEIGHT = 160, 120


@pytest.fixture(scope="module")
def env():
    env = robolearn.make("HalfCheetah", 4, seed=0)
    # Different constant actions per world so their states drift apart.
    action = torch.tensor([1.0, -1.0, 0.5, -0.5]).unsqueeze(1).repeat(1, env.action_dim)
    action[:, ::2] *= -1
    for _ in range(25):
        env.step(action)
    yield env
    env.close()


@pytest.fixture(scope="module")
def renderer(env):
    try:
        r = BatchRenderer(env.model, width=WIDTH, height=HEIGHT)
    except RuntimeError as err:
        # A machine without any GL library cannot render; the message names the packages.
        pytest.fail(f"no offscreen OpenGL here (scripts/setup.sh installs it): {err}")
    yield r
    r.close()


def test_render_shape_and_content(env, renderer):
    frames = renderer.render(env.sim, [0, 2])
    assert frames.shape == (2, HEIGHT, WIDTH, 3)
    assert frames.dtype == np.uint8
    assert renderer.size == (WIDTH, HEIGHT)
    assert renderer.gl_backend in ("egl", "osmesa", os.environ.get("MUJOCO_GL"))
    for frame in frames:
        assert frame.astype(np.float64).var() > 0, "blank frame"


def test_different_states_differ_same_state_matches(env, renderer):
    assert not torch.allclose(env.sim.qpos[0], env.sim.qpos[2])
    for camera in (-1, "track"):
        a = renderer.render(env.sim, [0, 2], camera=camera)
        b = renderer.render(env.sim, [0, 2], camera=camera)
        np.testing.assert_array_equal(a, b)  # rendering is deterministic
        assert np.abs(a[0].astype(int) - a[1].astype(int)).sum() > 0, f"camera {camera!r}: worlds look the same"


def test_world_copy_renders_identically():
    env = robolearn.make("HalfCheetah", 4, seed=1)
    try:
        action = torch.linspace(-1, 1, 4).unsqueeze(1).repeat(1, env.action_dim)
        for _ in range(10):
            env.step(action)
        # World 3 gets world 0's state: the two must render to the same pixels.
        env.set_state(env.sim.qpos[[0]].clone(), env.sim.qvel[[0]].clone(), env_ids=[3])
        try:
            frames = env.render([0, 3, 1], width=WIDTH, height=HEIGHT, camera="track")
        except RuntimeError as err:
            pytest.fail(f"no offscreen OpenGL here (scripts/setup.sh installs it): {err}")
        np.testing.assert_array_equal(frames[0], frames[1])
        assert not np.array_equal(frames[0], frames[2])
    finally:
        env.close()


def test_camera_by_name_and_index_agree(env, renderer):
    by_name = renderer.render(env.sim, [1], camera="track")
    by_index = renderer.render(env.sim, [1], camera=0)
    np.testing.assert_array_equal(by_name, by_index)


def test_bad_arguments(env, renderer):
    with pytest.raises(ValueError, match="no camera named 'nope'.*track"):
        renderer.render(env.sim, [0], camera="nope")
    with pytest.raises(ValueError, match=r"camera: index 5 out of range"):
        renderer.render(env.sim, [0], camera=5)
    with pytest.raises(ValueError, match=r"world_ids: indices \[4\] out of range.*\[0, 4\)"):
        renderer.render(env.sim, [0, 4])
    with pytest.raises(ValueError, match="width: expected a positive integer"):
        BatchRenderer(env.model, width=0, height=10)
    assert renderer.render(env.sim, []).shape == (0, HEIGHT, WIDTH, 3)
    other = ReferenceBackend(mujoco.MjModel.from_xml_string("<mujoco/>"), 1)
    with pytest.raises(ValueError, match="sim: its model does not match the renderer's"):
        renderer.render(other, [0])


def test_larger_than_model_offscreen_buffer(env, renderer):
    model = env.model
    before = (model.vis.global_.offwidth, model.vis.global_.offheight)
    width, height = before[0] + 64, before[1] + 32
    with BatchRenderer(model, width=width, height=height) as big:
        frames = big.render(env.sim, [3], camera="track")
    assert frames.shape == (1, height, width, 3)
    assert frames.var() > 0
    # The caller's model keeps its buffer size; only the renderer's private copy grew.
    assert (model.vis.global_.offwidth, model.vis.global_.offheight) == before


def test_shadows_and_reflections_can_be_turned_off(env, renderer):
    fancy = renderer.render(env.sim, [0], camera="track")
    with BatchRenderer(env.model, width=WIDTH, height=HEIGHT, shadows=False, reflections=False) as plain:
        fast = plain.render(env.sim, [0], camera="track")
    assert fast.var() > 0
    assert not np.array_equal(fancy, fast)


def test_render_after_close_raises(env):
    try:
        r = BatchRenderer(env.model, width=32, height=32)
    except RuntimeError as err:
        pytest.fail(f"no offscreen OpenGL here (scripts/setup.sh installs it): {err}")
    r.close()
    r.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        r.render(env.sim, [0])


def test_no_backend_error_names_packages(monkeypatch):
    monkeypatch.setattr(render_mod, "_selected", None)
    monkeypatch.setattr(render_mod, "_selection_error", None)
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(render_mod, "_allowed_backends", lambda: ("egl", "osmesa"))
    monkeypatch.setattr(render_mod, "_probe", lambda backend: f"{backend} library not found")
    with pytest.raises(RuntimeError) as info:
        render_mod.select_gl_backend()
    message = str(info.value)
    assert "MUJOCO_GL=egl: egl library not found" in message
    assert "MUJOCO_GL=osmesa: osmesa library not found" in message
    assert "libegl1" in message and "libosmesa6" in message


@pytest.mark.skipif(ctypes.util.find_library("OSMesa") is None, reason="OSMesa (libosmesa6) not installed")
def test_falls_back_to_osmesa_without_egl(tmp_path):
    # A child process in which glvnd finds no EGL vendor, and no backend is forced: the EGL probe
    # fails, so the renderer must come up on OSMesa.
    script = (
        "import mujoco, numpy as np\n"
        "from robolearn.sim.render import BatchRenderer\n"
        "from robolearn.sim import ReferenceBackend\n"
        "m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><light pos=\"0 0 2\"/>"
        "<geom type=\"sphere\" size=\".2\"/></worldbody></mujoco>')\n"
        "sim = ReferenceBackend(m, 1)\n"
        "r = BatchRenderer(m, 32, 24)\n"
        "f = r.render(sim, [0])\n"
        "assert f.shape == (1, 24, 32, 3) and f.var() > 0\n"
        "print(r.gl_backend)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env["__EGL_VENDOR_LIBRARY_FILENAMES"] = str(tmp_path / "no_vendor.json")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    backend = result.stdout.strip().splitlines()[-1]
    # setup.sh installs glvnd's libegl1, which honours the vendor override above.
    assert backend == "osmesa", f"renderer came up on {backend!r}: EGL was not disabled (not a glvnd EGL?)"


# -- write_mp4 --------------------------------------------------------------------------------
def _frames(n: int = 12, height: int = 48, width: int = 64) -> np.ndarray:
    # A moving bright square on a gradient: compressible, and frames differ.
    frames = np.zeros((n, height, width, 3), dtype=np.uint8)
    frames[..., 0] = np.linspace(0, 255, width, dtype=np.uint8)
    for t in range(n):
        frames[t, 10:20, 2 * t : 2 * t + 10] = 255
    return frames


def test_write_mp4_roundtrip(tmp_path):
    frames = _frames()
    out = write_mp4(tmp_path / "sub" / "clip.mp4", frames, fps=25)
    assert out == tmp_path / "sub" / "clip.mp4" and out.is_file()
    back = iio.imread(out)
    assert back.shape == frames.shape
    # Lossy, but close: mean absolute error of a few grey levels.
    assert np.abs(back.astype(int) - frames.astype(int)).mean() < 8
    # Only the video remains: the temporary file was moved into place.
    assert sorted(p.name for p in out.parent.iterdir()) == ["clip.mp4"]


def test_write_mp4_from_generator_and_rendered_frames(tmp_path, env, renderer):
    rendered = [renderer.render(env.sim, [0, 2], camera="track") for _ in range(3)]
    out = write_mp4(tmp_path / "worlds.mp4", (pair[k] for pair in rendered for k in range(2)), fps=30.0)
    back = iio.imread(out)
    assert back.shape == (6, HEIGHT, WIDTH, 3)
    with imageio.get_reader(out, format="FFMPEG") as reader:
        meta = reader.get_meta_data()
    assert meta["codec"] == "h264" and meta["fps"] == 30.0 and meta["pix_fmt"].startswith("yuv420p")


def test_write_mp4_replaces_existing_file(tmp_path):
    path = tmp_path / "clip.mp4"
    path.write_bytes(b"old")
    write_mp4(path, _frames(5), fps=10)
    assert iio.imread(path).shape[0] == 5


@pytest.mark.parametrize(
    ("frames", "match"),
    [
        (_frames().astype(np.float32) / 255, r"frames\[0\]: expected dtype uint8, got float32"),
        (_frames()[..., :2], r"frames\[0\]: expected shape \(height, width, 3\) RGB, got \(48, 64, 2\)"),
        (np.zeros((2, 8, 8, 4), np.uint8), r"drop alpha"),
        ([_frames(1)[0], _frames(1, 32, 32)[0]], r"frames\[1\]: expected height x width 48x64 like frames\[0\], got 32x32"),
        ([], r"frames: expected at least one frame, got none"),
        (_frames()[0], r"a single frame\? pass \[frame\]"),
    ],
    ids=["float", "two-channels", "rgba", "size-change", "empty", "single-frame"],
)
def test_write_mp4_rejects_bad_frames(tmp_path, frames, match):
    path = tmp_path / "bad.mp4"
    with pytest.raises(ValueError, match=match):
        write_mp4(path, frames, fps=30)
    # Nothing is left behind: no target, no temporary file.
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fps", [0, -1, float("nan"), float("inf"), "30"])
def test_write_mp4_rejects_bad_fps(tmp_path, fps):
    with pytest.raises(ValueError, match="fps: expected a positive finite number"):
        write_mp4(tmp_path / "x.mp4", _frames(2), fps=fps)


def test_write_mp4_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "clip.mp4"
    write_mp4(path, _frames(4), fps=10)
    before = path.read_bytes()

    def frames():
        yield from _frames(3)
        yield np.zeros((48, 64, 3), np.float64)

    with pytest.raises(ValueError, match=r"frames\[3\]"):
        write_mp4(path, frames(), fps=10)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]
    assert isinstance(path, Path)
