"""Visual randomisation (sim2real/randomization/visual.py): draws recorded and in range, written to
the appearance fields, seen by the camera (also mid-episode, when nothing moved), and refused for
physical fields.
"""

from __future__ import annotations

import math

import mujoco
import pytest
import torch

from robolearn.envs import BatchedEnv, EventTerm
from robolearn.envs.camera import camera_intrinsics
from robolearn.sim2real.randomization.fields import randomize_field
from robolearn.sim2real.randomization.visual import randomize_visual
from robolearn.tasks.classic.pixels import cartpole_swingup_pixels_cfg

SIZE = 32
N = 4


def _env(**events: EventTerm) -> BatchedEnv:
    cfg = cartpole_swingup_pixels_cfg(size=SIZE)
    cfg.events.update(events)
    return BatchedEnv(cfg, N, seed=0)


def _same_state(env: BatchedEnv) -> dict[str, torch.Tensor]:
    return env.set_state(torch.tensor([[0.2, 0.4]] * N, dtype=torch.float64), torch.zeros(N, 2, dtype=torch.float64))


def test_colour_and_light_draws_are_recorded_in_range_written_and_seen():
    env = _env(
        body=EventTerm(
            randomize_visual,
            params={"field": "mat_rgba", "elements": ["body"], "axes": [0, 1, 2], "range": (0.3, 1.3), "shared": True, "name": "paint"},
        ),
        light=EventTerm(randomize_visual, params={"field": "light_diffuse", "elements": ["key"], "range": (0.5, 1.5), "shared": True}),
    )
    env.reset()
    paint = env.drawn["paint"][:, 0]
    assert paint.shape == (N,) and bool(((paint >= 0.3) & (paint <= 1.3)).all()) and paint.unique().numel() == N
    model = env.model
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MATERIAL, "body")
    rgba = env.sim.get_model_field("mat_rgba")[:, body]
    template = torch.as_tensor(model.mat_rgba[body], dtype=rgba.dtype)
    torch.testing.assert_close(rgba[:, :3], template[:3] * paint[:, None].to(rgba.dtype))
    assert bool((rgba[:, 3] == template[3]).all())  # alpha untouched (axes 0-2 only)
    key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_LIGHT, "key")
    light = env.drawn["light_diffuse/key"][:, 0]
    torch.testing.assert_close(env.sim.get_model_field("light_diffuse")[:, key, 0].double(), model.light_diffuse[key, 0] * light)
    # Same state in every world: the frames differ only by the drawn appearance.
    image = _same_state(env)["image"]
    assert all(not torch.equal(image[0], image[w]) for w in range(1, N))


def test_a_mid_episode_draw_is_seen_although_nothing_moved():
    env = _env()
    before = _same_state(env)["image"]
    for field, term in (("plain", randomize_field), ("visual", randomize_visual)):
        event = term(env, field="mat_rgba", elements=["body"], axes=[0], range=(0.0, 0.0), operation="abs", mode=None)
        event(env, env.all_ids)
        after = env.observation_manager.compute()["image"]
        if field == "plain":
            # A physical field draw does not tell the cameras: the same state keeps its frame.
            assert torch.equal(after, before)
        else:
            assert not torch.equal(after, before)  # red channel of the cart and pole gone
            assert after[..., 0].int().sum() < before[..., 0].int().sum()


def test_camera_fovy_and_position_jitter_reach_the_intrinsics_and_the_frames():
    env = _env(
        fovy=EventTerm(randomize_visual, params={"field": "cam_fovy", "elements": ["fixed"], "operation": "add", "range": (-5.0, 5.0)}),
        pos=EventTerm(randomize_visual, params={"field": "cam_pos", "elements": ["fixed"], "operation": "add", "range": (-0.05, 0.05)}),
    )
    env.reset()
    fovy = env.drawn["cam_fovy/fixed"][:, 0]
    assert bool(((fovy >= -5) & (fovy <= 5)).all()) and env.drawn["cam_pos/fixed"].shape == (N, 3)
    for w in range(N):
        k = camera_intrinsics(env.sim.get_model(w), "fixed", SIZE, SIZE)
        expected = 0.5 * SIZE / math.tan(math.radians(45.0 + float(fovy[w])) / 2.0)
        assert k.fy == pytest.approx(expected)
    image = _same_state(env)["image"]
    assert all(not torch.equal(image[0], image[w]) for w in range(1, N))


def test_physical_fields_are_refused():
    env = _env()
    with pytest.raises(ValueError, match=r"events\.m\.field: expected an appearance field.*got 'mass'"):
        randomize_visual(env, field="mass", range=(0.9, 1.1), where="events.m")
    with pytest.raises(ValueError, match="appearance field"):
        randomize_visual(env, field="nonsense", range=(0.9, 1.1))
