"""Task families; importing this package registers every task with ``robolearn.envs``."""

from robolearn.tasks import (
    classic,  # noqa: F401
    locomotion,  # noqa: F401
    manipulation,  # noqa: F401
)
