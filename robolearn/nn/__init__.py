"""Networks: MLPs, normalisers, distributions, vmapped ensembles (more with later issues)."""

from robolearn.nn.mlp import ACTIVATIONS, MLP
from robolearn.nn.normalizer import EmpiricalNormalizer

__all__ = ["ACTIVATIONS", "MLP", "EmpiricalNormalizer"]
