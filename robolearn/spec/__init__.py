"""The contract between training and deployment, importable without the simulator.

* :mod:`robolearn.spec.manifest`: the policy spec as a typed, versioned manifest
  (:class:`PolicySpec` and its parts), JSON in and out, validation on load, compatibility checks;
* :mod:`robolearn.spec.schema`: its JSON schema, generated from the dataclasses;
* :mod:`robolearn.spec.processors`: observation and action processors in plain torch (scale,
  clip, noise, history, delay, last action), shared by the env and the deploy runtime.

Imports only ``robolearn.types`` and ``robolearn.utils`` (DESIGN.md's layer table).
"""

from robolearn.spec.manifest import (
    READABLE_VERSIONS,
    SPEC_VERSION,
    ActionTermSpec,
    DelaySpec,
    ModelSpec,
    NoiseSpec,
    ObsGroupSpec,
    ObsTermSpec,
    PolicySpec,
    SpecError,
    SpecMismatch,
)
from robolearn.spec.processors import (
    ActionProcessor,
    Delay,
    GeneratorSource,
    History,
    LastAction,
    ObservationProcessor,
    RandomSource,
    TermProcessor,
)

__all__ = [
    "READABLE_VERSIONS",
    "SPEC_VERSION",
    "ActionProcessor",
    "ActionTermSpec",
    "Delay",
    "DelaySpec",
    "GeneratorSource",
    "History",
    "LastAction",
    "ModelSpec",
    "NoiseSpec",
    "ObsGroupSpec",
    "ObsTermSpec",
    "ObservationProcessor",
    "PolicySpec",
    "RandomSource",
    "SpecError",
    "SpecMismatch",
    "TermProcessor",
]
