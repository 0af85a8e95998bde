"""Legged robots: a 12-DoF Go1-class quadruped (``Quadruped-Flat``, ``Quadruped-Rough``)."""
