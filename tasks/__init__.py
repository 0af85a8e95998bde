"""Task families; importing this package registers every task with ``robolearn.envs``."""

from robolearn.tasks import locomotion  # noqa: F401
