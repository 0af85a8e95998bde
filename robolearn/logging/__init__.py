"""Logging for runs: the logger facade and its sinks (TensorBoard, W&B, console), plots and video.

Only :func:`write_mp4` lives here so far; the facade and sinks join it in later issues.
"""

from robolearn.logging.video import write_mp4

__all__ = ["write_mp4"]
