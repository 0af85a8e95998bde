"""Loading MJCF into MuJoCo models, with errors that say which file failed and why."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Literal

import mujoco

RNEPOST_SITE = "robolearn_rnepost_probe"
"""Name of the marker site (and probe sensor) of a model compiled with ``contact_forces=True``."""

ContactForceMode = Literal["none", "in_step", "post_step"]
"""How a backend provides ``cfrc_ext``; see :func:`contact_force_mode`."""


class ModelError(ValueError):
    """An MJCF file or string did not load or compile."""


def load_spec(mjcf: str | os.PathLike[str]) -> mujoco.MjSpec:
    """Parse MJCF given as a path or an XML string into an editable ``MjSpec``."""
    text = str(mjcf)
    try:
        if text.lstrip().startswith("<"):
            return mujoco.MjSpec.from_string(text)
        path = Path(text)
        if not path.is_file():
            raise ModelError(f"MJCF file {str(path)!r} does not exist")
        return mujoco.MjSpec.from_file(str(path))
    except ModelError:
        raise
    except Exception as exc:  # MuJoCo raises ValueError with the parser's message
        where = "MJCF string" if text.lstrip().startswith("<") else f"MJCF file {text!r}"
        raise ModelError(f"{where} did not parse: {exc}") from exc


def compile_model(spec: mujoco.MjSpec, *, contact_forces: bool = False, source: str = "MJCF") -> mujoco.MjModel:
    """Compile a spec; with ``contact_forces`` mark the model so the backends provide ``cfrc_ext``.

    The backends give Gymnasium's contact forces: ``mj_rnePostConstraint`` run on the data as
    ``mj_step`` leaves it, after the last substep of a control step (zero after a reset, before
    any step). MuJoCo computes ``cfrc_ext`` inside ``mj_step`` only when a sensor needs it, and the
    batch API has no hook for an extra call, so the model gets a marker site (its name is how the
    backends know) and, for single-stage integrators, one accelerometer on it: that sensor makes
    the batched C step compute the forces, changes no dynamics and appends 3 numbers to
    ``sensordata``. Under RK4 the in-step value differs from Gymnasium's (``mj_step`` leaves the
    contacts of the last Runge-Kutta stage in the data), so RK4 models get no sensor and the
    backend calls ``mj_rnePostConstraint`` per world after the step (see :func:`contact_force_mode`).
    """
    if contact_forces:
        spec.worldbody.add_site(name=RNEPOST_SITE)
        if spec.option.integrator != mujoco.mjtIntegrator.mjINT_RK4:
            spec.add_sensor(
                name=RNEPOST_SITE,
                type=mujoco.mjtSensor.mjSENS_ACCELEROMETER,
                objtype=mujoco.mjtObj.mjOBJ_SITE,
                objname=RNEPOST_SITE,
            )
    try:
        with warnings.catch_warnings():
            # Gymnasium's MJCF files use 'settotalmass', which MuJoCo 4 deprecates; the model still
            # compiles to the same masses, and the Gymnasium-parity tests prove it.
            warnings.filterwarnings("ignore", message=".*settotalmass.*")
            return spec.compile()
    except Exception as exc:
        raise ModelError(f"{source} did not compile: {exc}") from exc


def load_model(mjcf: str | os.PathLike[str], *, contact_forces: bool = False) -> mujoco.MjModel:
    """Load and compile MJCF (path or XML string); raise :class:`ModelError` naming the source."""
    text = str(mjcf)
    source = "MJCF string" if text.lstrip().startswith("<") else f"MJCF file {text!r}"
    return compile_model(load_spec(mjcf), contact_forces=contact_forces, source=source)


def contact_force_mode(model: mujoco.MjModel) -> ContactForceMode:
    """How the backends must provide ``cfrc_ext`` for ``model``.

    ``none``: the model was compiled without ``contact_forces``. ``in_step``: the probe sensor makes
    ``mj_step`` compute the forces, which then equal ``mj_rnePostConstraint`` after the step
    (Euler and implicit integrators evaluate the dynamics once per substep). ``post_step``: an RK4
    model; the backend runs ``mj_rnePostConstraint`` on each world's data after the step.
    """
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, RNEPOST_SITE) < 0:
        return "none"
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, RNEPOST_SITE) >= 0:
        return "in_step"
    return "post_step"
