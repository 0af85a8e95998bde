"""Data-parallel training on ``torch.distributed`` (issue 15; filled in by the distributed work).

``prepare`` is called by ``robolearn train`` before anything is built; ``finish`` after the run.
"""

from __future__ import annotations

from typing import Any


def prepare(cfg: Any) -> Any:
    """Join the process group when ``cfg.distributed`` is set; return the config this rank trains with."""
    return cfg


def finish() -> None:
    """Leave the process group, if this process joined one."""
