"""Data: on-policy rollout storage, the device replay buffer and offline datasets (issue 6).

Samplers (:mod:`robolearn.data.sampler`) say where a learner's batches come from: its replay, a
dataset, or a mix of them at fixed ratios.

Offline datasets are one type, :class:`Dataset`, produced by every reader (robolearn HDF5 via
:meth:`Dataset.load`, D4RL HDF5 via :func:`read_d4rl`, local Minari datasets via
:func:`read_minari`) and validated by all of them; :meth:`Dataset.save` and
:func:`export_minari` write it.
"""

from robolearn.data.dataset import Dataset, DatasetMetadata, FrameSource, ImageLayout, WindowBatch
from robolearn.data.formats import (
    FORMAT_VERSION,
    DatasetFileInfo,
    HDF5Frames,
    inspect_robolearn,
    read_d4rl,
    read_robolearn,
    write_robolearn,
)
from robolearn.data.minari_io import export_minari, minari_root, read_minari
from robolearn.data.replay import ReplayBuffer
from robolearn.data.rollout import RolloutBatch, RolloutStorage
from robolearn.data.sampler import DatasetSampler, MixedSampler, ReplaySampler, Sampler
from robolearn.data.scores import D4RL_REF_RETURNS, d4rl_reference_returns, normalized_score
from robolearn.data.validation import DatasetError

__all__ = [
    "D4RL_REF_RETURNS",
    "FORMAT_VERSION",
    "Dataset",
    "DatasetError",
    "DatasetFileInfo",
    "DatasetMetadata",
    "DatasetSampler",
    "FrameSource",
    "HDF5Frames",
    "ImageLayout",
    "MixedSampler",
    "ReplayBuffer",
    "ReplaySampler",
    "RolloutBatch",
    "RolloutStorage",
    "Sampler",
    "WindowBatch",
    "d4rl_reference_returns",
    "export_minari",
    "inspect_robolearn",
    "minari_root",
    "normalized_score",
    "read_d4rl",
    "read_minari",
    "read_robolearn",
    "write_robolearn",
]
