"""Small shared helpers: counter-based per-world random numbers, seeding."""

from robolearn.utils.rng import WorldRNG

__all__ = ["WorldRNG"]
