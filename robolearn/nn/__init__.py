"""Networks: MLPs, normalisers, distributions, vmapped ensembles, recurrent memories and history encoders."""

from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble, VmapEnsemble, make_target, soft_update_
from robolearn.nn.hlgauss import HLGauss, hl_gauss_probs
from robolearn.nn.mlp import ACTIVATIONS, MLP
from robolearn.nn.normalizer import EmpiricalNormalizer
from robolearn.nn.recurrent import HistoryEncoder, Memory, RecurrentPolicy

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "CriticEnsemble",
    "EmpiricalNormalizer",
    "HLGauss",
    "HistoryEncoder",
    "Memory",
    "RecurrentPolicy",
    "TanhGaussianActor",
    "VmapEnsemble",
    "hl_gauss_probs",
    "make_target",
    "soft_update_",
]
