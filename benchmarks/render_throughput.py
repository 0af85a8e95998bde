"""Rendered camera frames per second on this machine (issue 16): ``Cartpole-Swingup-Pixels``.

For each image size and number of worlds, in one process with one OpenGL context:

* ``render``: :meth:`BatchRenderer.render` of every world from the ``fixed`` camera (frames/s), the
  renderer alone, at the camera terms' default (no shadows, no reflections);
* ``env step``: ``BatchedEnv.step`` of the pixel task (physics, reward, the camera term at every
  step, the uint8 copy into the observation): worlds x steps / s;
* ``+shadows+reflections``: the renderer with MuJoCo's default lighting, for the cost of the two;
* two cameras (``fixed`` and ``track``) per world through one shared renderer (one context, what
  :mod:`robolearn.envs.camera` does) against one renderer per camera (a context switch per camera).

The figures are for the GL backend :func:`select_gl_backend` picks (EGL on Mesa's llvmpipe on a
machine without a GPU). Each figure is the best of ``--repeats`` timed passes after one warm-up.

    OMP_NUM_THREADS=1 python benchmarks/render_throughput.py --sizes 84 128 --worlds 16 64 256 \\
        --json /work/bench/vision_render.json

``--warp``: MuJoCo Warp's batch renderer (:class:`~robolearn.sim.warp_render.WarpBatchRenderer`)
of a ``backend="warp"`` env instead, every world in one call (RGB, the frames left on the device):
``warp render cuda`` where CUDA exists (it prints ``not run: no GPU`` otherwise) and, with
``--warp-cpu``, ``warp render cpu`` on Warp's CPU device (a ray tracer in one host thread: a
correctness path, not a fast one). The GPU figure synchronises the device before reading the clock.

    OMP_NUM_THREADS=1 python benchmarks/render_throughput.py --warp --warp-cpu --sizes 84 --worlds 16 64
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from robolearn.envs import BatchedEnv
from robolearn.sim.render import BatchRenderer
from robolearn.tasks.classic.pixels import cartpole_swingup_pixels_cfg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import call_times  # noqa: E402  (benchmarks/ is not a package)


def _best(fn: Callable[[], object], repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``fn`` after one warm-up call."""
    return min(call_times(fn, repeats))


def measure(size: int, worlds: int, steps: int, repeats: int) -> dict[str, float]:
    """Frames/s of each configuration (module doc) for ``worlds`` worlds of ``size`` x ``size``."""
    env = BatchedEnv(cartpole_swingup_pixels_cfg(size), worlds, seed=0)
    ids = list(range(worlds))
    out: dict[str, float] = {}
    with BatchRenderer(env.model, size, size, shadows=False, reflections=False) as plain:
        out["render"] = worlds / _best(lambda: plain.render(env.sim, ids, "fixed"), repeats)
        out["two_cameras_shared"] = 2 * worlds / _best(
            lambda: (plain.render(env.sim, ids, "fixed"), plain.render(env.sim, ids, "track")), repeats
        )
        with BatchRenderer(env.model, size, size, shadows=False, reflections=False) as second:
            out["two_cameras_separate"] = 2 * worlds / _best(
                lambda: (plain.render(env.sim, ids, "fixed"), second.render(env.sim, ids, "track")), repeats
            )
    with BatchRenderer(env.model, size, size, shadows=True, reflections=True) as lit:
        out["render_shadows_reflections"] = worlds / _best(lambda: lit.render(env.sim, ids, "fixed"), repeats)
    action = torch.zeros(worlds, 1)

    def run() -> None:
        for _ in range(steps):
            env.step(action)

    out["env_step"] = worlds * steps / _best(run, repeats)
    env.close()
    return out


def measure_warp(size: int, worlds: int, device: str, repeats: int) -> float:
    """Frames/s of :class:`WarpBatchRenderer` (RGB, ``fixed`` camera) over every world on ``device``."""
    from robolearn.sim.warp_render import WarpBatchRenderer

    env = BatchedEnv(cartpole_swingup_pixels_cfg(size), worlds, seed=0, backend="warp", device=device)
    env.reset()
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    with WarpBatchRenderer(env.sim, "fixed", size, size, modes=("rgb",)) as renderer:

        def run() -> None:
            renderer.render()
            sync()  # the launches are asynchronous on CUDA: time the finished frames

        fps = worlds / _best(run, repeats)
    env.close()
    return fps


def main_warp(args: argparse.Namespace) -> None:
    """The ``--warp`` mode (module doc): a Markdown table of the Warp renderer's frames/s."""
    rows = []
    devices = ["cuda"] if torch.cuda.is_available() else []
    if not devices:
        print("warp render cuda: not run: no GPU (torch.cuda.is_available() is False)")
    if args.warp_cpu:
        devices.append("cpu")
    for device in devices:
        name = torch.cuda.get_device_name() if device == "cuda" else f"Warp CPU device, {platform.processor() or platform.machine()}"
        for size in args.sizes:
            for worlds in args.worlds:
                fps = measure_warp(size, worlds, device, args.repeats)
                rows.append({"device": device, "name": name, "size": size, "worlds": worlds, "warp_render": fps})
                print(f"# warp render {device} ({name}) {size}x{size} {worlds} worlds: {fps:.0f} frames/s", flush=True)
    if rows:
        print("\n| device | size | worlds | warp render frames/s |\n|---|---|---|---|")
        for row in rows:
            print(f"| {row['device']} | {row['size']} | {row['worlds']} | {row['warp_render']:.0f} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {"mode": "warp", "cuda": torch.cuda.is_available(), "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()}
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def main() -> None:
    """Measure every size x worlds combination, print a Markdown table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[84, 128])
    parser.add_argument("--worlds", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--steps", type=int, default=2, help="env steps per timed pass")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--warp", action="store_true", help="measure MuJoCo Warp's batch renderer instead (module doc)")
    parser.add_argument("--warp-cpu", action="store_true", help="with --warp: also on Warp's CPU device")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.warp:
        main_warp(args)
        return
    from robolearn.sim.render import select_gl_backend

    backend = select_gl_backend()
    rows = []
    for size in args.sizes:
        for worlds in args.worlds:
            r = measure(size, worlds, args.steps, args.repeats)
            rows.append({"size": size, "worlds": worlds, **r})
            print(f"# {size}x{size} {worlds} worlds: " + ", ".join(f"{k} {v:.0f}" for k, v in r.items()), flush=True)
    cols = ["render", "env_step", "render_shadows_reflections", "two_cameras_shared", "two_cameras_separate"]
    print(f"\nframes/s, MUJOCO_GL={backend}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores\n")
    print("| size | worlds | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for row in rows:
        print(f"| {row['size']} | {row['worlds']} | " + " | ".join(f"{row[c]:.0f}" for c in cols) + " |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {"gl_backend": backend, "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()}
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
