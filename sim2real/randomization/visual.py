"""Visual randomisation: how the worlds look to their cameras (issue 16).

:class:`randomize_visual` is :class:`~.fields.randomize_field` restricted to the model fields that
change only what a camera sees (material and geom colours, lights, camera placement and field of
view), so every option of a field draw applies (distributions, operations, elements, axes, sharing)
and its draws are recorded in ``env.drawn`` like every other draw. After writing, it marks the
worlds' camera frames stale (:func:`robolearn.envs.camera.invalidate_frames`), so an event that
fires mid-episode is seen at the camera's next render even though nothing moved.

A task config says what each randomised appearance stands for::

    cfg.events = {
        # Paint and lighting spread: the cart-pole material's RGB x U(0.7, 1.3), one factor per world.
        "body_colour": EventTerm(randomize_visual, mode="reset", params={
            "field": "mat_rgba", "elements": ["body"], "axes": [0, 1, 2], "range": (0.7, 1.3), "shared": True}),
        # Room lighting: the key light's diffuse colour x U(0.5, 1.5).
        "key_light": EventTerm(randomize_visual, mode="reset", params={
            "field": "light_diffuse", "elements": ["key"], "range": (0.5, 1.5), "shared": True}),
        # Camera mounting error: +-2 cm on each axis, and +-2 degrees of field of view.
        "camera_pos": EventTerm(randomize_visual, mode="reset", params={
            "field": "cam_pos", "elements": ["fixed"], "operation": "add", "range": (-0.02, 0.02)}),
        "camera_fovy": EventTerm(randomize_visual, mode="reset", params={
            "field": "cam_fovy", "elements": ["fixed"], "operation": "add", "range": (-2.0, 2.0)}),
    }

The camera's orientation is not offered: a jittered quaternion would have to be renormalised per
draw, which a field draw does not do; jitter the position (and a ``targetbody`` camera keeps
looking at its target). Intrinsics of a world whose ``cam_fovy`` is randomised come from that
world's model: ``camera_intrinsics(env.sim.get_model(w), ...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from robolearn.envs.camera import invalidate_frames
from robolearn.sim.backend import resolve_field
from robolearn.sim2real.randomization.fields import randomize_field

if TYPE_CHECKING:
    import torch

    from robolearn.envs.batched_env import BatchedEnv

VISUAL_FIELDS: tuple[str, ...] = (
    "mat_rgba",
    "geom_rgba",
    "site_rgba",
    "light_diffuse",
    "light_ambient",
    "light_specular",
    "light_pos",
    "light_dir",
    "cam_pos",
    "cam_fovy",
)
"""Model fields :class:`randomize_visual` may draw: colours, lights, camera position and field of view."""


class randomize_visual(randomize_field):  # lower case: a task config reads it as a verb
    """Draw per-world values of an appearance field (module doc) and invalidate the held frames."""

    def __init__(self, env: BatchedEnv, *, field: str, where: str = "randomize_visual", **params: Any) -> None:
        """Refuse a field that is not one of :data:`VISUAL_FIELDS`; the other parameters are those of
        :class:`~.fields.randomize_field`.
        """
        try:
            resolved = resolve_field(field) if isinstance(field, str) else None
        except ValueError:
            resolved = None
        if resolved not in VISUAL_FIELDS:
            raise ValueError(
                f"{where}.field: expected an appearance field, one of {', '.join(VISUAL_FIELDS)}, got {field!r} "
                "(use randomize_field for physical fields)"
            )
        super().__init__(env, field=field, where=where, **params)

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> None:
        """Draw and write as :class:`~.fields.randomize_field`, then mark the worlds' frames stale."""
        if env_ids.numel() == 0:
            return
        super().__call__(env, env_ids)
        invalidate_frames(env, env_ids)
