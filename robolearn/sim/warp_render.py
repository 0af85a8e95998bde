"""Batch rendering of every world of a :class:`~robolearn.sim.warp_backend.WarpBackend` with MuJoCo
Warp's ray-traced renderer (``mujoco_warp.render``), on the backend's device.

:class:`WarpBatchRenderer` draws one model camera at one resolution in all N worlds with one set of
kernel launches and hands the frames to torch as views of device arrays it owns (no host copy):

- ``rgb``: uint8 ``[N, H, W, 3]`` (R, G, B; row 0 the top of the image, as the OpenGL renderer);
- ``depth``: float32 ``[N, H, W]``, metres along the optical axis (planar depth, what a depth camera
  and :class:`~robolearn.sim.render.BatchRenderer` report); where no geom is hit, the far plane
  ``zfar * extent`` (MuJoCo Warp writes 0 there; the OpenGL depth buffer holds the far plane);
- ``segmentation``: int32 ``[N, H, W, 2]``, ``(geom id, mjOBJ_GEOM)`` per pixel, ``(-1, -1)`` where
  no geom is (the OpenGL renderer's layout).

Each call first computes the worlds' kinematics, subtree centres of mass and camera and light poses
(``kinematics``, ``com_pos``, ``camlight``; ``com_pos`` places ``trackcom`` and ``targetbodycom``
cameras and lights) at their current ``qpos`` on a private ``Data`` and refits the scene's bounding
volumes: a frame shows the state the env observes, as :class:`~robolearn.sim.render.BatchRenderer`
(which runs ``mj_forward`` per world), while the backend's own derived quantities stay as its step
left them. Per-world model fields
(randomised colours, sizes, camera field of view) are read from the backend's batched model.

Against the OpenGL renderer. The geometry is the same (camera pose, intrinsics, occlusion), the
shading is not: MuJoCo Warp ray-casts each pixel centre (no rasteriser coverage, so geoms thinner
than a pixel can vanish), its lighting model differs in detail, and it draws no reflections.
``tests/test_warp_render.py`` states the agreement measured (the silhouette of the moving bodies
and the depth). A policy trained on one renderer's frames should be checked on the other's.

The returned tensors are overwritten by the next :meth:`WarpBatchRenderer.render` call; copy them
to keep them (the camera terms copy into their frame buffers).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
import torch

WARP_RENDER_MODES: tuple[str, ...] = ("rgb", "depth", "segmentation")
"""What :class:`WarpBatchRenderer` renders: colour, planar depth, geom ids."""


@functools.cache
def _kernels(wp: Any) -> dict[str, Any]:
    """The unpacking kernels, built once (``warp`` is imported on demand: ``robolearn.sim`` must not need it)."""

    @wp.kernel
    def unpack_rgb(  # noqa: ANN202 - a Warp kernel returns nothing
        packed: wp.array2d(dtype=wp.uint32), adr: int, width: int, out: wp.array4d(dtype=wp.uint8)
    ):
        # MuJoCo Warp packs a pixel as (a << 24) | (r << 16) | (g << 8) | b.
        world, pixel = wp.tid()
        value = packed[world, adr + pixel]
        y = pixel // width
        x = pixel - y * width
        out[world, y, x, 0] = wp.uint8((value >> wp.uint32(16)) & wp.uint32(255))
        out[world, y, x, 1] = wp.uint8((value >> wp.uint32(8)) & wp.uint32(255))
        out[world, y, x, 2] = wp.uint8(value & wp.uint32(255))

    @wp.kernel
    def unpack_depth(  # noqa: ANN202
        depth: wp.array2d(dtype=wp.float32), adr: int, width: int, far: float, out: wp.array3d(dtype=wp.float32)
    ):
        world, pixel = wp.tid()
        value = depth[world, adr + pixel]
        y = pixel // width
        x = pixel - y * width
        # A miss is written as 0: the far plane instead, as an OpenGL depth buffer holds it.
        if value <= 0.0:
            value = far
        out[world, y, x] = value

    @wp.kernel
    def unpack_segmentation(  # noqa: ANN202
        seg: wp.array2d(dtype=wp.vec2i), adr: int, width: int, out: wp.array4d(dtype=wp.int32)
    ):
        world, pixel = wp.tid()
        value = seg[world, adr + pixel]
        y = pixel // width
        x = pixel - y * width
        out[world, y, x, 0] = value[0]
        out[world, y, x, 1] = value[1]

    return {"rgb": unpack_rgb, "depth": unpack_depth, "segmentation": unpack_segmentation}


def _positive(name: str, value: object) -> int:
    """``value`` as a positive int, or an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive integer number of pixels, got {value!r}")
    return int(value)


def model_camera(model: mujoco.MjModel, camera: object) -> int:
    """The index of model camera ``camera`` (a name or an index), or a ValueError listing the cameras
    (MuJoCo Warp renders the model's cameras only: no free camera).
    """
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
    if isinstance(camera, str):
        cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam >= 0:
            return int(cam)
    elif isinstance(camera, (int, np.integer)) and not isinstance(camera, bool) and 0 <= camera < model.ncam:
        return int(camera)
    raise ValueError(
        f"camera: the Warp renderer draws the model's cameras only; expected one of {names} or an index in "
        f"[0, {model.ncam}), got {camera!r}"
    )


def is_warp_backend(sim: object) -> bool:
    """Whether ``sim`` is a :class:`~robolearn.sim.warp_backend.WarpBackend` (that module imports
    Warp only when a backend is built, so asking costs no Warp import).
    """
    from robolearn.sim.warp_backend import WarpBackend

    return isinstance(sim, WarpBackend)


class WarpBatchRenderer:
    """Frames of one model camera in every world of a Warp backend, on its device (module doc).

    Use as a context manager or call :meth:`close` (which drops the device buffers).
    """

    def __init__(
        self,
        sim: Any,
        camera: str | int,
        width: int = 84,
        height: int = 84,
        *,
        modes: Sequence[str] = ("rgb",),
        shadows: bool = False,
        skybox: bool = True,
        textures: bool = True,
    ) -> None:
        """Build the render context (scene bounding volumes, rays, output buffers) for ``sim``.

        Args:
            sim: a :class:`~robolearn.sim.warp_backend.WarpBackend`.
            camera: a camera name or index of the model.
            width: frame width in pixels.
            height: frame height in pixels.
            modes: what each :meth:`render` call produces, any of :data:`WARP_RENDER_MODES`; one ray
                cast serves them all (depth and segmentation cost little next to colour shading).
            shadows: cast shadow rays (off by default, as the camera terms' OpenGL default).
            skybox: shade missed rays with the model's skybox texture, as the OpenGL renderer draws
                it (MuJoCo Warp's default is a black background).
            textures: sample material textures (the checker floor).

        Raises:
            ValueError: ``sim`` is not a Warp backend, or a bad camera, size or mode.
        """
        if not is_warp_backend(sim):
            raise ValueError(f"sim: the Warp renderer needs a WarpBackend (backend='warp'), got {type(sim).__name__}")
        width, height = _positive("width", width), _positive("height", height)
        modes = tuple(modes)
        if not modes or any(m not in WARP_RENDER_MODES for m in modes) or len(set(modes)) != len(modes):
            raise ValueError(f"modes: expected distinct entries of {', '.join(WARP_RENDER_MODES)}, got {list(modes)}")
        self.sim = sim
        self.camera = model_camera(sim.model, camera)
        self.size: tuple[int, int] = (width, height)
        """Frame size as ``(width, height)``."""
        self.modes = modes
        model = sim.model
        n = sim.num_worlds
        from robolearn.sim.warp_backend import _import_warp

        wp, mjw = _import_warp()
        self._wp, self._mjw = wp, mjw
        self._kernels = _kernels(wp)
        self._far = float(model.vis.map.zfar * model.stat.extent)
        with sim.warp_scope():
            self._rc = mjw.create_render_context(
                model,
                nworld=n,
                cam_res=(width, height),
                render_rgb="rgb" in modes,
                render_depth="depth" in modes,
                render_seg="segmentation" in modes,
                use_textures=bool(textures),
                use_shadows=bool(shadows),
                cam_active=[self.camera],
                render_skybox=bool(skybox),
            )
            # A private Data for the kinematics at the current qpos (module doc): contacts and
            # constraint rows are never computed on it, so it allocates almost none.
            host = mujoco.MjData(model)
            mujoco.mj_forward(model, host)
            self._d = mjw.put_data(model, host, nworld=n, nconmax=1, njmax=1)
            self._out: dict[str, Any] = {}
            if "rgb" in modes:
                self._out["rgb"] = wp.zeros((n, height, width, 3), dtype=wp.uint8)
            if "depth" in modes:
                self._out["depth"] = wp.zeros((n, height, width), dtype=wp.float32)
            if "segmentation" in modes:
                self._out["segmentation"] = wp.zeros((n, height, width, 2), dtype=wp.int32)
        self._views = {m: wp.to_torch(a) for m, a in self._out.items()}
        self._adr = {
            "rgb": int(self._rc.rgb_adr.numpy()[0]),
            "depth": int(self._rc.depth_adr.numpy()[0]),
            "segmentation": int(self._rc.seg_adr.numpy()[0]),
        }
        self._closed = False

    @property
    def device(self) -> torch.device:
        """Where the frames live (the backend's device)."""
        return self.sim.device

    def render(self) -> dict[str, torch.Tensor]:
        """Render every world at its current state; ``{mode: frames}`` (module doc for the layouts).

        The tensors are views of this renderer's buffers, overwritten by the next call.

        Raises:
            RuntimeError: called after :meth:`close`.
        """
        if self._closed:
            raise RuntimeError("WarpBatchRenderer.render: the renderer was closed")
        sim, wp, mjw = self.sim, self._wp, self._mjw
        m, src, d, rc = sim.warp_model, sim.warp_data, self._d, self._rc
        width = self.size[0]
        with sim.warp_scope():
            wp.copy(d.qpos, src.qpos)
            if sim.model.nmocap:
                wp.copy(d.mocap_pos, src.mocap_pos)
                wp.copy(d.mocap_quat, src.mocap_quat)
            mjw.kinematics(m, d)
            # camlight places trackcom/targetbodycom cameras and lights from subtree_com, which
            # kinematics leaves at the put_data state (qpos0): com_pos brings it to this qpos.
            mjw.com_pos(m, d)
            mjw.camlight(m, d)
            mjw.refit_bvh(m, d, rc)
            mjw.render(m, d, rc)
            n, pixels = sim.num_worlds, self.size[0] * self.size[1]
            k = self._kernels
            if "rgb" in self._out:
                wp.launch(k["rgb"], dim=(n, pixels), inputs=[rc.rgb_data, self._adr["rgb"], width], outputs=[self._out["rgb"]])
            if "depth" in self._out:
                wp.launch(
                    k["depth"], dim=(n, pixels), inputs=[rc.depth_data, self._adr["depth"], width, self._far],
                    outputs=[self._out["depth"]],
                )  # fmt: skip
            if "segmentation" in self._out:
                wp.launch(
                    k["segmentation"], dim=(n, pixels), inputs=[rc.seg_data, self._adr["segmentation"], width],
                    outputs=[self._out["segmentation"]],
                )  # fmt: skip
        return dict(self._views)

    def close(self) -> None:
        """Drop the render context and buffers; further :meth:`render` calls raise. Safe to call twice."""
        self._closed = True
        self._views = {}
        self._out = {}
        self._rc = None
        self._d = None

    def __enter__(self) -> WarpBatchRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
