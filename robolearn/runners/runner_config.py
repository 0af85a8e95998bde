"""The training loop's settings, checked for type and range when the config is made.

Every setting is validated in ``__post_init__``, so a bad value stops the run before it builds
anything, and a setting used only at the end of a run (video size, evaluation length) fails at
the start, not after hours of training. Errors are :class:`~robolearn.utils.config.ConfigError`
(a ``ValueError``) naming the field, the value and what was expected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from robolearn.utils.config import ConfigError


@dataclass
class RunnerConfig:
    """Loop settings shared by the training runners."""

    total_env_steps: int = 1_000_000
    """Stop after this many environment steps (worlds x control steps); online runners."""
    eval_interval: int = 20
    """Iterations between evaluations; the run also evaluates once at the end."""
    eval_steps: int | None = None
    """Control steps of an evaluation episode; ``None``: the eval env's episode length."""
    checkpoint_interval: int = 20
    """Iterations between checkpoints; the run also checkpoints at the end."""
    keep_checkpoints: int = 3
    """Checkpoints kept on disk (older ones are pruned)."""
    video: bool = True
    """Record world 0 of the final evaluation as ``eval.mp4`` (needs offscreen GL)."""
    video_size: tuple[int, int] = (320, 240)
    """Width and height of the evaluation video in pixels."""
    video_camera: str | int = -1
    """Camera of the video: a name in the model, an index, or -1 for the free camera."""
    steps_per_iteration: int = 50
    """Off-policy runners: control steps of every world per iteration; offline: gradient steps."""
    max_bad_updates: int = 5
    """Stop after this many consecutive updates with non-finite losses or parameters."""
    divergence_fraction: float = 0.5
    """A control step counts as diverged when more than this fraction of the worlds diverged."""
    divergence_patience: int = 10
    """Stop the run after this many consecutive diverged control steps (see ``divergence_fraction``)."""
    overwrite: bool = False
    """Start a new run in a directory that holds another one, removing that run's files first."""
    console: bool = True
    """Show a progress bar."""
    tensorboard: bool = True
    """Write TensorBoard events."""

    def __post_init__(self) -> None:
        """Check every field's type and range; the message names the field, the value and what is expected."""
        for name in ("total_env_steps", "eval_interval", "checkpoint_interval", "keep_checkpoints",
                     "steps_per_iteration", "max_bad_updates", "divergence_patience"):
            _count(name, getattr(self, name))
        if self.eval_steps is not None:
            _count("eval_steps", self.eval_steps)
        for name in ("video", "overwrite", "console", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"runner.{name}: expected true or false, got {getattr(self, name)!r}")
        size = self.video_size
        if not isinstance(size, (tuple, list)) or len(size) != 2:
            raise ConfigError(f"runner.video_size: expected [width, height], got {size!r}")
        for what, value in zip(("width", "height"), size, strict=True):
            _count(f"video_size ({what})", value)
        self.video_size = (int(size[0]), int(size[1]))
        camera = self.video_camera
        if isinstance(camera, bool) or not isinstance(camera, (str, int)) or (isinstance(camera, int) and camera < -1):
            raise ConfigError(f"runner.video_camera: expected a camera name, an index >= 0 or -1 (free camera), got {camera!r}")
        if isinstance(camera, str) and not camera:
            raise ConfigError("runner.video_camera: expected a camera name, an index >= 0 or -1, got an empty name")
        fraction = self.divergence_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction) \
                or not 0.0 <= fraction < 1.0:
            raise ConfigError(f"runner.divergence_fraction: expected a number in [0, 1), got {fraction!r}")


def _count(name: str, value: Any) -> None:
    """Refuse anything but an integer >= 1 (a bool is not a count, nor is 2.5 or 0)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"runner.{name}: expected an integer >= 1, got {value!r}")
