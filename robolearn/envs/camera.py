"""Camera observations: named MJCF cameras rendered per world into the ``image`` group.

Terms (``(env, **params) -> Tensor[N, ...]``, for :class:`~robolearn.envs.cfg.ObsTerm`):

- :func:`camera_rgb`: colour, uint8 ``[N, H, W, 3]``. Images stay uint8 through the env, the
  observation processor, replay and datasets; a network converts them to float itself.
- :func:`camera_depth`: float32 ``[N, H, W, 1]``, distance along the optical axis in metres (what
  a depth camera reports), clipped by the model's near/far planes (``<visual><map znear zfar>``).
- :func:`camera_segmentation`: int32 ``[N, H, W, 1]``, the id of the geom seen at each pixel,
  ``-1`` where no geom is (background, skybox, decorations).

Rendering rate. With ``render_every=k`` a world's camera renders when its episode step is a
multiple of ``k`` (the first observation of an episode included) and the frame is held in between,
as a camera slower than the control loop delivers it. The held frames are env buffers
(:meth:`BatchedEnv.buffer`), so checkpoints resume them exactly. A world is not rendered twice for
the same state: the env asks for observations again after resetting some worlds within a step, and
only those worlds (their episode step changed) are rendered again. A state is identified by the
control step, the episode step, ``qpos`` and the world's visual epoch; events that change how a
world looks without moving it (colours, lights, camera placement) call :func:`invalidate_frames`.
With ``render_every > 1``, ``BatchedEnv.set_state`` at an episode step that is not due returns the
held frame, as the camera would; ``env.close()`` does not yet free these renderers (they go with
the env; :func:`close_cameras` frees them now).

Batching. One :class:`~robolearn.sim.render.BatchRenderer` (one OpenGL context) per resolution and
lighting setting serves every camera and mode of an env: each call draws only the worlds that are
due, one after another into that context.

Renderer. ``renderer="auto"`` (the default) draws with OpenGL, except on an env with
``backend="warp"`` on a CUDA device: there a model camera is drawn by MuJoCo Warp's batch ray
tracer (:class:`~robolearn.sim.warp_render.WarpBatchRenderer`, one per camera, size, lighting and
mode), every world in one call on the GPU, the frames staying there (no host copy). The due worlds
are kept by a mask, so with ``render_every=1`` such a term does not sync with the host; with
``render_every > 1`` it syncs with the host once per call, to learn whether any world is due and
draw nothing when none is (an OpenGL term syncs once per call for its world list). A
:class:`~robolearn.sim.render.FreeCamera`, the free camera ``-1`` and ``reflections=True`` (which
Warp does not draw) stay on OpenGL. On Warp's CPU device ``auto`` keeps OpenGL (the ray tracer is
no faster there, ``benchmarks/render_throughput.py --warp --warp-cpu``, and the frames then match
the MuJoCo backend's byte for byte). ``"gl"`` and ``"warp"`` force one. The two renderers agree on
geometry, not on shading (``robolearn.sim.warp_render``): a policy learnt on one should be checked
on the other.

Intrinsics. MuJoCo's perspective cameras have a vertical field of view ``fovy`` and square pixels,
so ``fy = fx = (H / 2) / tan(fovy / 2)``; :func:`camera_intrinsics` states them in OpenCV's pixel
convention (pixel centres at integer coordinates, so ``cx = (W - 1) / 2``, ``cy = (H - 1) / 2``),
and :func:`project_points` maps world points to pixel coordinates ``(u, v)`` (column, row; row 0
at the top, as the rendered arrays are) and depth.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import torch

from robolearn.envs.cfg import ObsGroup, ObsTerm, TaskCfg
from robolearn.envs.sync import host_count, host_nonzero, to_host
from robolearn.spec.image_ops import CameraIntrinsics

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv
    from robolearn.sim.render import BatchRenderer, FreeCamera
    from robolearn.sim.warp_render import WarpBatchRenderer

CAMERA_KINDS: tuple[str, ...] = ("rgb", "depth", "segmentation")
"""What a camera term can deliver: colour, metric depth, geom ids."""

RENDERERS: tuple[str, ...] = ("auto", "gl", "warp")
"""A camera term's ``renderer`` choices (module doc, "Renderer")."""

_VISUAL_EPOCH = "camera/visual_epoch"
_RENDERERS = "_camera_renderers"  # env.__dict__ slot: {(width, height, shadows, reflections): BatchRenderer}
_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)


# -- intrinsics and projection -----------------------------------------------------------------
def _positive_int(name: str, value: object) -> int:
    """``value`` as a positive int, or an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def intrinsics_from_fovy(fovy_deg: float, width: int, height: int) -> CameraIntrinsics:
    """Intrinsics of a MuJoCo perspective camera of vertical field of view ``fovy_deg`` rendered at
    ``width`` x ``height`` (square pixels: the horizontal field of view follows from the aspect ratio).

    Raises:
        ValueError: ``fovy_deg`` is not in ``(0, 180)`` or the size is not positive.
    """
    width, height = _positive_int("width", width), _positive_int("height", height)
    if not 0.0 < float(fovy_deg) < 180.0:
        raise ValueError(f"fovy: expected a field of view in (0, 180) degrees, got {fovy_deg!r}")
    return CameraIntrinsics.from_fovy(float(fovy_deg), width, height)


def camera_id(model: mujoco.MjModel, camera: str | int) -> int:
    """The index of model camera ``camera`` (a name or an index), or an error listing the cameras."""
    if isinstance(camera, str):
        cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam < 0:
            names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
            raise ValueError(f"camera: no camera named {camera!r} in the model; expected one of {names}")
        return int(cam)
    if isinstance(camera, (int, np.integer)) and not isinstance(camera, bool) and 0 <= camera < model.ncam:
        return int(camera)
    raise ValueError(f"camera: expected a camera name or an index in [0, {model.ncam}), got {camera!r}")


def camera_intrinsics(model: mujoco.MjModel, camera: str | int | FreeCamera, width: int, height: int) -> CameraIntrinsics:
    """Intrinsics of model camera ``camera`` rendered at ``width`` x ``height``, from its ``fovy``.

    Pass a world's own model (``sim.get_model(world)``) when the field of view is randomised. A
    :class:`~robolearn.sim.render.FreeCamera` has the model's ``<visual><global fovy>``.

    Raises:
        ValueError: unknown camera, or one that is orthographic or declares a sensor size (its
            projection is not given by ``fovy`` alone).
    """
    from robolearn.sim.render import FreeCamera

    if isinstance(camera, FreeCamera):
        return intrinsics_from_fovy(float(model.vis.global_.fovy), width, height)
    cam = camera_id(model, camera)
    if int(model.cam_projection[cam]) != int(mujoco.mjtProjection.mjPROJ_PERSPECTIVE):
        raise ValueError(f"camera: {camera!r} is orthographic; expected a perspective camera")
    if np.any(model.cam_sensorsize[cam] > 0):
        raise ValueError(f"camera: {camera!r} declares sensorsize/focal; only fovy-defined cameras are supported")
    return intrinsics_from_fovy(float(model.cam_fovy[cam]), width, height)


def project_points(
    intrinsics: CameraIntrinsics, cam_pos: np.ndarray, cam_mat: np.ndarray, points: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates ``[P, 2]`` (``u`` column, ``v`` row) and depths ``[P]`` of world points ``[P, 3]``.

    ``cam_pos`` ``[3]`` and ``cam_mat`` (``[3, 3]`` or MuJoCo's flat ``[9]``, columns the camera's
    axes in the world) are ``MjData.cam_xpos``/``cam_xmat`` of the camera. A MuJoCo camera looks
    along its ``-z`` axis with ``+y`` up, so the depth is ``-z`` in the camera frame: the value a
    depth render holds at that pixel. Points behind the camera get a non-positive depth.
    """
    rot = np.asarray(cam_mat, dtype=np.float64).reshape(3, 3)
    local = (np.asarray(points, dtype=np.float64).reshape(-1, 3) - np.asarray(cam_pos, dtype=np.float64)) @ rot
    depth = -local[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = intrinsics.cx + intrinsics.fx * local[:, 0] / depth
        # Image rows grow downward while the camera's y axis points up.
        v = intrinsics.cy - intrinsics.fy * local[:, 1] / depth
    return np.stack([u, v], axis=1), depth


# -- rendering state -----------------------------------------------------------------------------
def _renderer(env: BatchedEnv, width: int, height: int, shadows: bool, reflections: bool) -> BatchRenderer:
    """The env's shared renderer for this size and lighting setting (created on first use)."""
    # Imported here: robolearn.envs is imported by the facade's users without any GL library.
    from robolearn.sim.render import BatchRenderer

    renderers: dict[tuple[int, int, bool, bool], BatchRenderer] = env.__dict__.setdefault(_RENDERERS, {})
    key = (width, height, shadows, reflections)
    renderer = renderers.get(key)
    if renderer is None:
        renderer = BatchRenderer(env.model, width=width, height=height, shadows=shadows, reflections=reflections)
        renderers[key] = renderer
    return renderer


def _warp_renderer(
    env: BatchedEnv, camera: str | int, kind: str, width: int, height: int, shadows: bool
) -> WarpBatchRenderer:
    """The env's Warp batch renderer for this camera, size, lighting and mode (created on first use)."""
    from robolearn.sim.warp_render import WarpBatchRenderer

    renderers: dict[tuple[object, ...], WarpBatchRenderer] = env.__dict__.setdefault(_RENDERERS, {})
    key = ("warp", camera, width, height, shadows, kind)
    renderer = renderers.get(key)
    if renderer is None:
        renderer = WarpBatchRenderer(env.sim, camera, width, height, modes=(kind,), shadows=shadows)
        renderers[key] = renderer
    return renderer


def _use_warp(env: BatchedEnv, camera: object, renderer: str, reflections: bool) -> bool:
    """Whether a camera term draws with the Warp renderer (module doc, "Renderer")."""
    from robolearn.sim.warp_render import is_warp_backend

    if renderer not in RENDERERS:
        raise ValueError(f"renderer: expected one of {', '.join(RENDERERS)}, got {renderer!r}")
    if renderer == "gl":
        return False
    warp = is_warp_backend(env.sim)
    if renderer == "warp":
        if not warp:
            raise ValueError(f"renderer: 'warp' needs an env built with backend='warp', got {type(env.sim).__name__}")
        if reflections:
            raise ValueError("reflections: the Warp renderer draws none; use renderer='gl' or reflections=False")
        return True
    model_camera = isinstance(camera, (str, int, np.integer)) and not isinstance(camera, bool) and camera != -1
    return warp and env.sim.device.type == "cuda" and not reflections and model_camera


def close_cameras(env: BatchedEnv) -> None:
    """Free the GL contexts of ``env``'s camera terms (they are otherwise freed with the env)."""
    for renderer in env.__dict__.pop(_RENDERERS, {}).values():
        renderer.close()


def invalidate_frames(env: BatchedEnv, env_ids: torch.Tensor) -> None:
    """Worlds ``env_ids`` look different without having moved (a colour, light or camera changed):
    their cameras render again at their next due step instead of reusing a frame of the same state.
    """
    epoch = env.buffer(_VISUAL_EPOCH, (), torch.long)
    epoch[env_ids] += 1


def _check_params(camera: object, width: int, height: int, render_every: int) -> tuple[int, int, int]:
    """Validated ``(width, height, render_every)``; the camera is checked by the renderer."""
    from robolearn.sim.render import FreeCamera

    if not isinstance(camera, (str, int, np.integer, FreeCamera)) or isinstance(camera, bool):
        raise ValueError(f"camera: expected a camera name or index or a FreeCamera, got {camera!r}")
    return (
        _positive_int("width", width),
        _positive_int("height", height),
        _positive_int("render_every", render_every),
    )


def _frames(
    env: BatchedEnv,
    camera: str | int | FreeCamera,
    kind: str,
    width: int,
    height: int,
    render_every: int,
    shadows: bool = False,
    reflections: bool = False,
    renderer: str = "auto",
) -> torch.Tensor:
    """The held frames of one camera term, rendered again for the worlds that are due (module doc)."""
    width, height, every = _check_params(camera, width, height, render_every)
    warp = _use_warp(env, camera, renderer, reflections)
    shape, dtype = {
        "rgb": ((height, width, 3), torch.uint8),
        "depth": ((height, width, 1), torch.float32),
        "segmentation": ((height, width, 1), torch.int32),
    }[kind]
    # The two renderers shade differently: a Warp term and an OpenGL term of the same camera hold
    # their own frames (else one would be handed the other's held frame of the same state).
    name = f"camera/{camera}/{kind}/{width}x{height}/every{every}/light{int(shadows)}{int(reflections)}"
    name += "/warp" if warp else ""
    frames = env.buffer(name, shape, dtype)
    stamp = env.buffer(f"{name}/stamp", (2,), torch.long, fill=-1)  # control step, episode step
    qpos_at = env.buffer(f"{name}/qpos", (env.model.nq,), torch.float64, fill=math.nan)
    epoch_at = env.buffer(f"{name}/epoch", (), torch.long, fill=-1)
    epoch = env.buffer(_VISUAL_EPOCH, (), torch.long)

    steps = env.episode_length
    qpos = env.sim.qpos
    same = (
        (stamp[:, 0] == env.common_step_counter)
        & (stamp[:, 1] == steps)
        & (epoch_at == epoch)
        & (qpos_at == qpos).all(dim=1)
    )
    due = (steps % every == 0) if every > 1 else torch.ones_like(same)
    need = (due & ~same) | (stamp[:, 0] < 0)
    if warp:
        _warp_frames(env, (camera, kind, width, height, shadows), every, need, (frames, stamp, qpos_at, epoch_at))
        return frames.clone()
    # Rendering runs on the host anyway (it reads each world's MjData): one sync for the world list,
    # through the env's documented sync point.
    ids = host_nonzero(need)
    if ids is not None:
        gl = _renderer(env, width, height, shadows, reflections)
        drawn = gl.render(env.sim, [int(i) for i in to_host(ids)], camera=camera, mode=kind)
        if kind == "depth":
            drawn = drawn[..., None]
        elif kind == "segmentation":
            # Keep geom ids only: other objects drawn (sites, tendons, decorations) read as -1.
            drawn = np.where(drawn[..., 1:2] == _GEOM, drawn[..., 0:1], -1).astype(np.int32)
        frames[ids] = torch.from_numpy(drawn).to(env.device)
        # The drawn worlds' state, so that they are held until due again. In-place index ops with
        # device indices: a Python scalar assigned through ``x[ids] = v`` would cost a host-to-device
        # copy (a sync on CUDA).
        stamp[:, 0].index_fill_(0, ids, env.common_step_counter)
        stamp[:, 1].index_copy_(0, ids, steps[ids])
        qpos_at.index_copy_(0, ids, qpos[ids].to(qpos_at.dtype))
        epoch_at.index_copy_(0, ids, epoch[ids])
    # A copy: the buffer is overwritten in place by later renders, an observation never changes.
    return frames.clone()


def _warp_frames(
    env: BatchedEnv,
    key: tuple[str | int, str, int, int, bool],
    every: int,
    need: torch.Tensor,
    held: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
) -> None:
    """Redraw the worlds of ``need`` of a Warp camera term into its held ``(frames, stamp, qpos,
    epoch)`` buffers, without leaving the device when ``every == 1`` (module doc, "Renderer").

    The renderer draws every world in one call whatever the mask, so the due worlds are selected by
    ``torch.where`` rather than by an index list read back to the host. With ``every > 1`` one host
    sync asks whether any world is due: on the steps in between the call then draws nothing.
    """
    frames, stamp, qpos_at, epoch_at = held
    if every > 1 and host_count(need) == 0:
        return
    camera, kind, width, height, shadows = key
    frame = _warp_renderer(env, camera, kind, width, height, shadows).render()[kind]  # type: ignore[arg-type]
    if kind == "depth":
        frame = frame.unsqueeze(-1)
    elif kind == "segmentation":
        frame = torch.where(frame[..., 1:2] == _GEOM, frame[..., 0:1], -1)
    frames.copy_(torch.where(need[:, None, None, None], frame.to(env.device), frames))
    stamp[:, 0].masked_fill_(need, env.common_step_counter)
    stamp[:, 1].copy_(torch.where(need, env.episode_length, stamp[:, 1]))
    qpos_at.copy_(torch.where(need[:, None], env.sim.qpos.to(qpos_at.dtype), qpos_at))
    epoch = env.buffer(_VISUAL_EPOCH, (), torch.long)
    epoch_at.copy_(torch.where(need, epoch, epoch_at))


# -- observation terms -----------------------------------------------------------------------------
def camera_rgb(
    env: BatchedEnv,
    camera: str | int | FreeCamera,
    width: int = 84,
    height: int = 84,
    render_every: int = 1,
    shadows: bool = False,
    reflections: bool = False,
    renderer: str = "auto",
) -> torch.Tensor:
    """Colour frames uint8 ``[N, height, width, 3]`` of model camera ``camera`` in every world.

    Args:
        env: the env.
        camera: a camera name (or index) of the task's MJCF, or a
            :class:`~robolearn.sim.render.FreeCamera` for a model that declares no suitable camera.
        width: image width in pixels.
        height: image height in pixels.
        render_every: render every this many control steps of an episode, holding the frame between.
        shadows: draw shadows. Off by default: with software OpenGL (llvmpipe) shadows and
            reflections cost several times the rest of a small frame (``benchmarks/
            render_throughput.py`` measures it), and a policy learns from the silhouettes as well.
        reflections: draw reflections on reflective materials (a checker floor); off by default.
        renderer: ``"auto"``, ``"gl"`` or ``"warp"`` (module doc, "Renderer"): ``auto`` draws with
            MuJoCo Warp's batch renderer on a ``backend="warp"`` env, with OpenGL otherwise.
    """
    return _frames(env, camera, "rgb", width, height, render_every, shadows, reflections, renderer)


def camera_depth(
    env: BatchedEnv,
    camera: str | int | FreeCamera,
    width: int = 84,
    height: int = 84,
    render_every: int = 1,
    renderer: str = "auto",
) -> torch.Tensor:
    """Depth float32 ``[N, height, width, 1]`` in metres along the optical axis of ``camera``
    (parameters as :func:`camera_rgb`).
    """
    return _frames(env, camera, "depth", width, height, render_every, renderer=renderer)


def camera_segmentation(
    env: BatchedEnv,
    camera: str | int | FreeCamera,
    width: int = 84,
    height: int = 84,
    render_every: int = 1,
    renderer: str = "auto",
) -> torch.Tensor:
    """Geom ids int32 ``[N, height, width, 1]`` seen by ``camera``, ``-1`` where no geom is
    (parameters as :func:`camera_rgb`).
    """
    return _frames(env, camera, "segmentation", width, height, render_every, renderer=renderer)


def pixel_task(cfg: TaskCfg, camera: str | int | FreeCamera, size: int = 84) -> TaskCfg:
    """``cfg`` seen through ``camera``: its observations become an ``image`` group (RGB uint8
    ``size`` x ``size``, what a pixel actor reads) and a ``critic`` group holding the state task's
    ``policy`` terms, clean (for asymmetric learners). Model, dynamics, rewards and time-outs stay.
    The task has no ``policy`` group: nothing but pixels reaches the actor.
    """
    state = cfg.observations["policy"]
    cfg.observations = {
        "image": ObsGroup(terms={"rgb": ObsTerm(camera_rgb, params={"camera": camera, "width": size, "height": size})}),
        "critic": ObsGroup(terms=dict(state.terms), enable_noise=False),
    }
    return cfg
