"""Networks: MLPs, normalisers, distributions, vmapped ensembles (more with later issues)."""

from robolearn.nn.actors import TanhGaussianActor
from robolearn.nn.ensemble import CriticEnsemble, VmapEnsemble, make_target, soft_update_
from robolearn.nn.hlgauss import HLGauss, hl_gauss_probs
from robolearn.nn.mlp import ACTIVATIONS, MLP
from robolearn.nn.normalizer import EmpiricalNormalizer

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "CriticEnsemble",
    "EmpiricalNormalizer",
    "HLGauss",
    "TanhGaussianActor",
    "VmapEnsemble",
    "hl_gauss_probs",
    "make_target",
    "soft_update_",
]
