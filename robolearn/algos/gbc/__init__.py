"""Generative behaviour cloning: diffusion (``algo=diffusion``) and flow-matching (``algo=flow``)
policies over action chunks, with an optional distilled one-step head.
"""

from robolearn.algos.gbc.agent import ChunkPolicy, GenerativeBC, ema_decay, gather_chunks
from robolearn.algos.gbc.config import DiffusionBCConfig, FlowBCConfig, GenerativeBCConfig
from robolearn.algos.gbc.losses import one_step_distillation_loss

__all__ = [
    "ChunkPolicy",
    "DiffusionBCConfig",
    "FlowBCConfig",
    "GenerativeBC",
    "GenerativeBCConfig",
    "ema_decay",
    "gather_chunks",
    "one_step_distillation_loss",
]
