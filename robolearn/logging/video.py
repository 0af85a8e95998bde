"""Write RGB frames to an H.264 mp4 file with the ffmpeg binary that imageio-ffmpeg ships.

The file appears atomically: frames are encoded into a hidden temporary file next to the target
and moved over it only when ffmpeg succeeded, so a crashed or interrupted run never leaves a
truncated video where a reader (TensorBoard, W&B, a browser) expects a complete one.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from fractions import Fraction
from pathlib import Path

import imageio_ffmpeg
import numpy as np

log = logging.getLogger(__name__)


def _frames(frames: Iterable[np.ndarray] | np.ndarray) -> Iterator[np.ndarray]:
    """Yield each frame as a NumPy array; reject an array that is not a stack of frames."""
    if isinstance(frames, np.ndarray):
        if frames.ndim != 4:
            hint = " (a single frame? pass [frame])" if frames.ndim == 3 else ""
            raise ValueError(
                f"frames: expected an array [num_frames, height, width, 3], got shape {frames.shape}{hint}"
            )
    elif isinstance(frames, (str, bytes)) or not isinstance(frames, Iterable):
        raise ValueError(f"frames: expected an array or an iterable of HxWx3 uint8 frames, got {type(frames).__name__}")
    for frame in frames:
        yield np.asarray(frame)


def _check_frame(index: int, frame: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    """Return ``frame`` as C-contiguous uint8 ``[H, W, 3]`` or raise naming the frame and the problem."""
    if frame.dtype != np.uint8:
        raise ValueError(
            f"frames[{index}]: expected dtype uint8, got {frame.dtype}; convert floats in [0, 1] with "
            "(frame * 255).round().clip(0, 255).astype(np.uint8)"
        )
    if frame.ndim != 3 or frame.shape[2] != 3:
        hint = "; drop alpha with frame[..., :3]" if frame.ndim == 3 and frame.shape[2] == 4 else ""
        raise ValueError(f"frames[{index}]: expected shape (height, width, 3) RGB, got {frame.shape}{hint}")
    if frame.shape[0] < 1 or frame.shape[1] < 1:
        raise ValueError(f"frames[{index}]: expected a non-empty image, got shape {frame.shape}")
    if size is not None and frame.shape[:2] != size:
        raise ValueError(
            f"frames[{index}]: expected height x width {size[0]}x{size[1]} like frames[0], "
            f"got {frame.shape[0]}x{frame.shape[1]}"
        )
    return np.ascontiguousarray(frame)


def _ffmpeg_command(out: Path, height: int, width: int, fps: float, crf: int) -> list[str]:
    """Build the ffmpeg command: raw RGB24 frames on stdin, H.264/yuv420p mp4 at ``out``."""
    rate = Fraction(fps).limit_denominator(1001)
    cmd = [
        imageio_ffmpeg.get_ffmpeg_exe(),
        "-y",
        "-loglevel", "error",
        "-f", "rawvideo",
        "-pix_fmt", "rgb24",
        "-s", f"{width}x{height}",
        "-r", f"{rate.numerator}/{rate.denominator}",
        "-i", "-",
        "-an",
        "-c:v", "libx264",
        "-crf", str(crf),
        # yuv420p is what browsers and most players decode; it needs even sides, so odd frames
        # gain one black row/column instead of being rescaled.
        "-pix_fmt", "yuv420p",
    ]
    if height % 2 or width % 2:
        log.warning("write_mp4: %dx%d frames padded to even size for yuv420p", width, height)
        cmd += ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]
    # The index at the front lets players start before the whole file has arrived.
    cmd += ["-movflags", "+faststart", "-f", "mp4", str(out)]
    return cmd


def write_mp4(
    path: str | os.PathLike[str],
    frames: Iterable[np.ndarray] | np.ndarray,
    fps: float,
    *,
    crf: int = 20,
) -> Path:
    """Encode RGB frames as an H.264 mp4 at ``path`` and return the path.

    Frames are streamed to ffmpeg one at a time, so a generator of frames is never held in
    memory. The parent folder is created if needed; an existing file is replaced atomically.

    Args:
        path: the output file.
        frames: uint8 frames ``[H, W, 3]`` (RGB), all the same size, as an iterable or an
            array ``[T, H, W, 3]``. Odd sizes are padded by one black row/column.
        fps: frames per second, positive.
        crf: H.264 constant rate factor, 0 (lossless) to 51 (worst); 18-23 look clean.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: bad ``fps``/``crf``, no frames, or a frame with the wrong dtype, channel
            count or size (the message names the frame index).
        RuntimeError: ffmpeg failed (its error output is included).
    """
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.integer, np.floating)) or not (
        math.isfinite(fps) and fps > 0
    ):
        raise ValueError(f"fps: expected a positive finite number, got {fps!r}")
    if isinstance(crf, bool) or not isinstance(crf, (int, np.integer)) or not 0 <= crf <= 51:
        raise ValueError(f"crf: expected an integer in [0, 51], got {crf!r}")
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"path: expected a file path, got the directory {str(target)!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    # A unique name in the target's folder (same filesystem, so os.replace is atomic); ffmpeg
    # creates it with the usual permissions, unlike a mkstemp file (0600).
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    proc: subprocess.Popen[bytes] | None = None
    count = 0
    try:
        with tempfile.TemporaryFile() as errors:
            size: tuple[int, int] | None = None
            for count, raw in enumerate(_frames(frames)):
                frame = _check_frame(count, raw, size)
                if proc is None:
                    size = (frame.shape[0], frame.shape[1])
                    cmd = _ffmpeg_command(tmp, size[0], size[1], float(fps), int(crf))
                    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors)
                assert proc.stdin is not None
                try:
                    proc.stdin.write(memoryview(frame).cast("B"))
                except BrokenPipeError:
                    break  # ffmpeg exited early; its exit status and message are reported below
            else:
                if proc is None:
                    raise ValueError("frames: expected at least one frame, got none")
            assert proc is not None and proc.stdin is not None
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass  # reported through the exit status below
            status = proc.wait()
            if status != 0:
                errors.seek(0)
                message = errors.read().decode(errors="replace").strip()
                raise RuntimeError(f"write_mp4: ffmpeg failed with status {status} writing {str(target)!r}: {message}")
        os.replace(tmp, target)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        tmp.unlink(missing_ok=True)
    log.debug("wrote %d frames to %s", count + 1, target)
    return target
