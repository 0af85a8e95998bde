"""Offscreen RGB rendering of selected worlds of a batched simulation.

:class:`BatchRenderer` draws worlds of any :class:`~robolearn.sim.backend.SimBackend` with
``mujoco.Renderer``, one OpenGL context shared by all worlds: each world's own model (its
per-world fields, e.g. randomised geom sizes or colours) and state go into the scene, then one
frame is read back.

OpenGL backend. MuJoCo picks its context class from ``MUJOCO_GL`` once, when ``import mujoco``
runs, and its default on Linux is GLFW, which needs a display. When ``MUJOCO_GL`` is not set,
this module instead looks for a headless backend: EGL first (GPU drivers, or Mesa's llvmpipe
on machines without one), then OSMesa (software only). PyOpenGL binds to one platform for the
life of the process the first time it is imported, so a failed EGL attempt in this process
would rule OSMesa out; each candidate is therefore tried in a short-lived child process, and
only the first that renders is loaded here. The choice is written to ``MUJOCO_GL`` so child
processes (e.g. vectorised env workers) skip the probe and use the same backend. A value of
``MUJOCO_GL`` set by the user is always obeyed, without a fallback.
"""

from __future__ import annotations

import copy
import importlib
import logging
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import mujoco
import numpy as np
from mujoco.batch import Batch

from robolearn.sim.backend import SimBackend
from robolearn.sim.names import names_of

log = logging.getLogger(__name__)

GL_PACKAGES: dict[str, str] = {
    "egl": "libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0",
    "osmesa": "libosmesa6",
}
"""Debian/Ubuntu packages each headless OpenGL backend needs (Mesa's software rasteriser included;
with an NVIDIA driver, its own ``libEGL_nvidia`` replaces ``libegl-mesa0``/``libgl1-mesa-dri``)."""

RENDER_MODES: tuple[str, ...] = ("rgb", "depth", "segmentation")
"""What :meth:`BatchRenderer.render` can read back: colour, metric depth, object ids."""

_HEADLESS_ORDER: tuple[str, ...] = ("egl", "osmesa")
_PROBE_TIMEOUT_S = 60.0
_ALL_CATEGORIES = int(mujoco.mjtCatBit.mjCAT_ALL)

# The child process renders one frame of an empty model through the whole path this module uses
# (PyOpenGL platform, context, MjrContext, read-back), so a pass means rendering works here.
_PROBE_SCRIPT = """
import mujoco
model = mujoco.MjModel.from_xml_string("<mujoco/>")
data = mujoco.MjData(model)
with mujoco.Renderer(model, 16, 16) as renderer:
    renderer.update_scene(data)
    renderer.render()
"""

_lock = threading.Lock()
_selected: str | None = None
_selection_error: str | None = None


def _missing_packages_message(errors: dict[str, str]) -> str:
    """Build the "no backend works" message: each backend's error and the packages providing it."""
    lines = [f"  MUJOCO_GL={name}: {err}" for name, err in errors.items()]
    return (
        "offscreen rendering: no OpenGL backend could create a context:\n"
        + "\n".join(lines)
        + "\nInstall the system libraries (Debian/Ubuntu): apt-get install "
        + f"{GL_PACKAGES['egl']} (EGL) and/or {GL_PACKAGES['osmesa']} (OSMesa, software only); "
        "set MUJOCO_GL=egl or MUJOCO_GL=osmesa to force one backend."
    )


def _probe(backend: str) -> str | None:
    """Render one frame with ``backend`` in a child process; ``None`` on success, else the error."""
    env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
    try:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the test render did not finish within {_PROBE_TIMEOUT_S:.0f} s"
    except OSError as err:
        return f"could not start a test process ({err})"
    if result.returncode == 0:
        return None
    # The last line of a Python traceback is the exception itself; a crash has no traceback.
    tail = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return tail[-1] if tail else f"the test process exited with status {result.returncode}"


def _allowed_backends() -> tuple[str, ...]:
    """Headless backends still possible in this process, given PyOpenGL's platform if it is fixed."""
    loaded = sys.modules.get("OpenGL.platform")
    platform = getattr(loaded, "PLATFORM", None)
    if platform is not None:
        kind = type(platform).__name__
        by_class = {"EGLPlatform": "egl", "OSMesaPlatform": "osmesa"}
        if kind not in by_class:
            raise RuntimeError(
                f"offscreen rendering: PyOpenGL was already loaded in this process with platform {kind}, "
                "which cannot render headless; set MUJOCO_GL=egl (or osmesa) before Python starts"
            )
        return (by_class[kind],)
    requested = os.environ.get("PYOPENGL_PLATFORM", "").strip().lower()
    if requested:
        if requested not in _HEADLESS_ORDER:
            raise RuntimeError(
                f"offscreen rendering: PYOPENGL_PLATFORM={requested!r} cannot render headless; expected "
                "'egl' or 'osmesa', or leave it unset (or set MUJOCO_GL to choose the backend yourself)"
            )
        return (requested,)
    return _HEADLESS_ORDER


def _activate(backend: str) -> None:
    """Make ``mujoco.Renderer`` create ``backend`` contexts in this process."""
    saved = {key: os.environ.get(key) for key in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    os.environ["MUJOCO_GL"] = backend
    from mujoco.rendering.classic import gl_context

    try:
        # gl_context read MUJOCO_GL when ``import mujoco`` ran; re-running it is how its own
        # selection logic picks up the value chosen here (``mujoco.Renderer`` looks the class up
        # on each call).
        if getattr(gl_context, "_MUJOCO_GL", None) != backend:
            importlib.reload(gl_context)
    except BaseException:
        # A broken MUJOCO_GL would make ``import mujoco`` itself fail in every child process.
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        raise


def select_gl_backend() -> str:
    """Choose (once per process) and load the OpenGL backend for offscreen rendering; return its name.

    ``MUJOCO_GL`` set by the user wins; otherwise EGL, then OSMesa, whichever renders first.

    Raises:
        RuntimeError: no backend can create a context; the message names the Debian packages needed.
    """
    global _selected, _selection_error
    with _lock:
        if _selected is not None:
            return _selected
        if _selection_error is not None:
            raise RuntimeError(_selection_error)
        user = os.environ.get("MUJOCO_GL", "").strip().lower()
        if user in ("disable", "disabled", "off", "false", "0"):
            raise RuntimeError(f"offscreen rendering: MUJOCO_GL={user!r} turns rendering off; unset it or "
                               "set it to 'egl' or 'osmesa'")
        if user:
            candidates: tuple[str, ...] = (user,)
        else:
            candidates = _allowed_backends()
        errors: dict[str, str] = {}
        chosen = None
        for backend in candidates:
            # A single candidate (forced by MUJOCO_GL, PYOPENGL_PLATFORM or an already-loaded
            # PyOpenGL) has no alternative to fall back to: load it here and let its error speak.
            if len(candidates) == 1:
                chosen = backend
                break
            err = _probe(backend)
            if err is None:
                chosen = backend
                break
            log.info("offscreen rendering: MUJOCO_GL=%s unavailable (%s)", backend, err)
            errors[backend] = err
        if chosen is None:
            _selection_error = _missing_packages_message(errors)
            raise RuntimeError(_selection_error)
        try:
            _activate(chosen)
        except Exception as err:  # PyOpenGL fails with ImportError, AttributeError, OSError...
            errors[chosen] = f"{type(err).__name__}: {err}"
            _selection_error = _missing_packages_message(errors)
            raise RuntimeError(_selection_error) from err
        _selected = chosen
        log.info("offscreen rendering with MUJOCO_GL=%s", chosen)
        return chosen


@dataclass(frozen=True)
class FreeCamera:
    """A camera the model does not declare: MuJoCo's free camera placed explicitly, for models
    without a suitable ``<camera>`` (e.g. upstream MJCF files used unmodified). Its vertical field
    of view is the model's ``<visual><global fovy>`` (45 degrees by default).
    """

    lookat: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """The point looked at (world frame, metres)."""
    distance: float = 1.0
    """Distance from the camera to ``lookat`` (metres)."""
    azimuth: float = 90.0
    """Rotation about the world's vertical axis (degrees)."""
    elevation: float = -45.0
    """Angle above (positive) or below (negative) the horizontal (degrees); -90 looks straight down."""


class BatchRenderer:
    """RGB frames of selected worlds of a batched simulation, rendered offscreen.

    One OpenGL context and scene serve every world; each frame is drawn from that world's model
    (per-world fields) and state. Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        width: int = 320,
        height: int = 240,
        *,
        shadows: bool = True,
        reflections: bool = True,
    ) -> None:
        """Create the GL context and scene for ``model`` (the template model of the simulation).

        Args:
            model: the compiled model whose worlds will be rendered; it is not modified.
            width: frame width in pixels.
            height: frame height in pixels.
            shadows: draw shadows. With software OpenGL (llvmpipe) they are most of the cost of
                a frame: turning them off makes frames several times faster.
            reflections: draw reflections on reflective materials (e.g. checker floors).

        Raises:
            ValueError: ``width``/``height`` are not positive integers.
            RuntimeError: no OpenGL backend works (the message names the packages to install).
        """
        for name, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}: expected a positive integer number of pixels, got {value!r}")
        self.size: tuple[int, int] = (int(width), int(height))
        """Frame size as ``(width, height)``."""
        self.option = mujoco.MjvOption()
        """Visualisation flags (contacts, frames, geom groups) applied to every frame."""
        self._renderer: mujoco.Renderer | None = None
        self._scratch: tuple[mujoco.MjModel, mujoco.MjData] | None = None
        self._finalizer: weakref.finalize | None = None
        backend = select_gl_backend()

        # The offscreen framebuffer size comes from the model (<visual><global offwidth/offheight>,
        # 640x480 by default); enlarge it on a private copy rather than refuse larger frames.
        self._model = model
        buffer = model.vis.global_
        if buffer.offwidth < width or buffer.offheight < height:
            self._model = copy.copy(model)
            self._model.vis.global_.offwidth = max(buffer.offwidth, int(width))
            self._model.vis.global_.offheight = max(buffer.offheight, int(height))
            log.debug("offscreen buffer enlarged to %dx%d", self._model.vis.global_.offwidth,
                      self._model.vis.global_.offheight)
        try:
            self._renderer = mujoco.Renderer(self._model, height=int(height), width=int(width))
        except Exception as err:  # GL failures surface as many exception types
            if backend in GL_PACKAGES:
                hint = f"needed system packages (Debian/Ubuntu): {GL_PACKAGES[backend]}"
            else:
                hint = (
                    f"MUJOCO_GL={backend} may need a display; for headless rendering unset MUJOCO_GL "
                    f"or set it to egl (packages: {GL_PACKAGES['egl']}) or osmesa ({GL_PACKAGES['osmesa']})"
                )
            raise RuntimeError(
                f"offscreen rendering: could not create a {width}x{height} MUJOCO_GL={backend} context: "
                f"{type(err).__name__}: {err}; {hint}"
            ) from err
        flags = self._renderer.scene.flags
        flags[mujoco.mjtRndFlag.mjRND_SHADOW] = bool(shadows)
        flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = bool(reflections)
        # Free the context before interpreter teardown: PyOpenGL cannot release an OSMesa context
        # once its modules are being unloaded, and would print a traceback at exit.
        self._finalizer = weakref.finalize(self, self._renderer.close)

    @property
    def gl_backend(self) -> str:
        """The OpenGL backend in use (``MUJOCO_GL`` value, e.g. ``egl`` or ``osmesa``)."""
        return select_gl_backend()

    def _camera(self, camera: str | int | FreeCamera) -> mujoco.MjvCamera:
        """Build an ``MjvCamera`` for a model camera name, a camera index, ``-1`` (free camera framing
        the model) or a :class:`FreeCamera`.
        """
        model = self._model
        if isinstance(camera, FreeCamera):
            cam = mujoco.MjvCamera()
            cam.type = mujoco.mjtCamera.mjCAMERA_FREE
            cam.lookat[:] = camera.lookat
            cam.distance, cam.azimuth, cam.elevation = camera.distance, camera.azimuth, camera.elevation
            return cam
        if isinstance(camera, str):
            names = names_of(model)
            try:
                cam_id = names.id("camera", camera, "camera")
            except ValueError:
                raise ValueError(f"camera: no camera named {camera!r} in the model; expected one of "
                                 f"{names.labels('camera')} or an index in [-1, {model.ncam})") from None
        elif isinstance(camera, (int, np.integer)) and not isinstance(camera, bool):
            cam_id = int(camera)
            if not -1 <= cam_id < model.ncam:
                raise ValueError(f"camera: index {cam_id} out of range; expected -1 (free camera) or "
                                 f"an index in [0, {model.ncam})")
        else:
            raise ValueError(f"camera: expected a camera name or index, got {camera!r}")
        cam = mujoco.MjvCamera()
        if cam_id == -1:
            # Frames the whole model at its initial extent (model.stat), the same for every world.
            mujoco.mjv_defaultFreeCamera(model, cam)
        else:
            cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            cam.fixedcamid = cam_id
        return cam

    def render(
        self, sim: SimBackend, world_ids: Sequence[int], camera: str | int | FreeCamera = -1, mode: str = "rgb"
    ) -> np.ndarray:
        """Render worlds ``world_ids`` of ``sim`` from ``camera``.

        Args:
            sim: the simulation (its template model must be the one given to the constructor,
                or have the same structure).
            world_ids: indices of the worlds to draw, in the order of the output.
            camera: a camera name, a camera index, ``-1`` for the free camera framing the whole
                model, or a :class:`FreeCamera`.
            mode: ``"rgb"`` (colour), ``"depth"`` (distance along the optical axis in metres,
                between the model's near and far clipping planes) or ``"segmentation"`` (per pixel
                the drawn object's id and ``mjtObj`` type, ``-1`` for the background).

        Returns:
            ``rgb``: uint8 ``[len(world_ids), height, width, 3]``; ``depth``: float32
            ``[len(world_ids), height, width]``; ``segmentation``: int32 ``[len(world_ids), height,
            width, 2]``. Row 0 is the top of the image.

        Raises:
            RuntimeError: called after :meth:`close`.
            ValueError: a world index, the camera or the mode is invalid.
        """
        if self._renderer is None:
            raise RuntimeError("BatchRenderer.render: the renderer was closed")
        if mode not in RENDER_MODES:
            raise ValueError(f"mode: expected one of {', '.join(RENDER_MODES)}, got {mode!r}")
        ids = [int(i) for i in world_ids]
        bad = [i for i in ids if not 0 <= i < sim.num_worlds]
        if bad:
            raise ValueError(
                f"world_ids: indices {bad} out of range; expected values in [0, {sim.num_worlds})"
            )
        # The GL context holds the constructor model's meshes, textures and materials; a different
        # model would draw garbage or read out of bounds.
        sizes = ("nbody", "ngeom", "nmesh", "ntex", "nmat", "ncam", "nlight")
        theirs = {name: getattr(sim.model, name) for name in sizes}
        ours = {name: getattr(self._model, name) for name in sizes}
        if theirs != ours:
            raise ValueError(f"sim: its model does not match the renderer's (sizes {theirs} vs {ours}); "
                             "build the BatchRenderer from sim.model")
        cam = self._camera(camera)
        width, height = self.size
        shape, dtype = {
            "rgb": ((height, width, 3), np.uint8),
            "depth": ((height, width), np.float32),
            "segmentation": ((height, width, 2), np.int32),
        }[mode]
        frames = np.empty((len(ids), *shape), dtype=dtype)
        renderer = self._renderer
        # The mode is a flag of the shared renderer: set for this call, so cameras of several modes
        # can share one GL context (one renderer per resolution, not per camera).
        if mode == "depth":
            renderer.enable_depth_rendering()
        elif mode == "segmentation":
            renderer.enable_segmentation_rendering()
        else:
            renderer.disable_depth_rendering()
            renderer.disable_segmentation_rendering()
        scene = renderer.scene
        batch = getattr(sim, "_batch", None)
        fast = isinstance(batch, Batch)
        try:
            for k, world in enumerate(ids):
                if fast:
                    world_model, data = self._world_from_batch(batch, world)
                else:
                    world_model, data = sim.get_model(world), sim.get_data(world)
                mujoco.mjv_updateScene(world_model, data, self.option, None, cam, _ALL_CATEGORIES, scene)
                renderer.render(out=frames[k])
        finally:
            renderer.disable_depth_rendering()
            renderer.disable_segmentation_rendering()
        return frames

    def _world_from_batch(self, batch: Batch, world: int) -> tuple[mujoco.MjModel, mujoco.MjData]:
        """World ``world`` of a ``mujoco.batch`` simulation written into this renderer's scratch model
        and data, derived quantities computed.

        ``MujocoBackend.get_model``/``get_data`` copy the whole model (textures included) and
        allocate an ``MjData`` for every world, which costs about as much as drawing a small frame
        on a software rasteriser; writing into one reused pair gives the same model and state
        (``tests/test_camera_obs.py`` compares the bytes with a per-world-copy backend).
        """
        if self._scratch is None:
            model = copy.copy(self._model)
            self._scratch = (model, mujoco.MjData(model))
        model, data = self._scratch
        batch.get_model(world, model)
        batch.get_data(world, data)
        mujoco.mj_forward(model, data)
        return model, data

    def close(self) -> None:
        """Free the GL context; further :meth:`render` calls raise. Safe to call twice."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._renderer = None

    def __enter__(self) -> BatchRenderer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
