"""Logging for runs: the logger facade and its sinks (TensorBoard, ``metrics.csv``, progress bar,
W&B), learning-curve plots and video.

TensorBoard and matplotlib are imported only when a :class:`Logger` with TensorBoard is created or
a plot is drawn, so importing this package stays cheap.
"""

from robolearn.logging.logger import Logger
from robolearn.logging.plots import plot_learning_curve
from robolearn.logging.video import write_mp4

__all__ = ["Logger", "plot_learning_curve", "write_mp4"]
