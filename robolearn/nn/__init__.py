"""Networks: MLPs, normalisers, distributions, vmapped ensembles, recurrent memories, history encoders
and the pixel encoders (DrQ-v2 CNN, random shift, image + proprioception).
"""

from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble, VmapEnsemble, make_target, soft_update_
from robolearn.nn.hlgauss import HLGauss, hl_gauss_probs
from robolearn.nn.mlp import ACTIVATIONS, MLP
from robolearn.nn.normalizer import EmpiricalNormalizer
from robolearn.nn.recurrent import HistoryEncoder, Memory, RecurrentPolicy
from robolearn.nn.vision import CNNEncoder, MultiModalEncoder, RandomShift

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "CNNEncoder",
    "CriticEnsemble",
    "EmpiricalNormalizer",
    "HLGauss",
    "HistoryEncoder",
    "Memory",
    "MultiModalEncoder",
    "RandomShift",
    "RecurrentPolicy",
    "TanhGaussianActor",
    "VmapEnsemble",
    "hl_gauss_probs",
    "make_target",
    "soft_update_",
]
