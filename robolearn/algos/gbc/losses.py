"""Generative behaviour cloning losses: pure functions of the models and a batch of chunks.

The multi-step models' own losses (flow matching, shortcut, DDPM) live with the models in
:mod:`robolearn.nn.generative` (``ChunkModel.loss``); this module adds what only the learner does.
"""

from __future__ import annotations

import torch

from robolearn.nn.generative import ChunkModel


def one_step_distillation_loss(student: ChunkModel, teacher: ChunkModel, obs_history: torch.Tensor,
                               noise: torch.Tensor, teacher_steps: int) -> dict[str, torch.Tensor]:
    """RL-100's consistency step as a distillation: the one-step flow ``student`` maps ``(cond, z)``
    in one Euler step (``z + v(z, 0, cond)``) to the chunk the ``teacher`` samples from the same
    ``z`` in ``teacher_steps`` steps (no gradient into the teacher), both in the models' ``[-1, 1]``
    space; the mean squared error over the chunk. The student's output is not clipped, so a
    target on the boundary still pulls it.

    Returns ``loss_one_step`` and the detached ``one_step_abs_error``.
    """
    with torch.no_grad():
        target = teacher.sample_normalized(obs_history, noise, teacher_steps)
    pred = student.sample_normalized(obs_history, noise, 1, clip=None)
    err = pred - target
    return {"loss_one_step": err.square().mean(), "one_step_abs_error": err.detach().abs().mean()}


__all__ = ["one_step_distillation_loss"]
