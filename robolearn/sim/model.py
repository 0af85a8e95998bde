"""Loading MJCF into MuJoCo models, with errors that say which file failed and why."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import mujoco

RNEPOST_SITE = "robolearn_rnepost_probe"
"""Name of the site that carries the probe sensor which makes MuJoCo compute ``cfrc_ext``."""


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
    """Compile a spec; with ``contact_forces`` add a probe sensor so every step computes ``cfrc_ext``.

    MuJoCo fills ``cfrc_ext`` only in ``mj_rnePostConstraint``, which ``mj_step`` runs when a sensor
    needs it (accelerometer, force, torque). The batch API has no hook for an extra call, so tasks
    that observe contact forces get one accelerometer on a world site: it triggers the computation
    inside the batched C step, changes no dynamics, and appends 3 numbers to ``sensordata``. Its
    cost (one extra pass per substep) is measured in the throughput benchmark.
    """
    if contact_forces:
        spec.worldbody.add_site(name=RNEPOST_SITE)
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
