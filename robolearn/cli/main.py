"""The ``robolearn`` console script: ``train``, ``eval``, ``export``, ``sim2sim``, ``compare``, ``benchmark``, ``demo`` and ``list``.

``train``/``eval``/``export``/``sim2sim`` take Hydra overrides (``key=value``, configs in ``robolearn.configs``)
and run in :mod:`robolearn.cli.commands`. ``demo`` steps a batched task with random actions,
reports throughput, and writes a video of world 0; it, ``list`` and ``compare`` (methods over seeds from
run directories, :mod:`robolearn.cli.compare`) are parsed with argparse.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import robolearn
from robolearn.cli.compare import add_parser as add_compare_parser
from robolearn.envs import BatchedEnv, task_cfg
from robolearn.sim import BACKENDS

HYDRA_COMMANDS: dict[str, str] = {
    "train": "train task=<TaskId> algo=<ppo|sac> [key=value ...] (Hydra overrides; -m sweeps, "
    "hydra/launcher=joblib|submitit_slurm runs them in parallel; --help)",
    "eval": "eval run=<run dir>: mean return of the latest checkpoint (--help)",
    "export": "export run=<run dir> format=<onnx|torchscript|all>: policy + manifest (--help)",
    "sim2sim": "sim2sim run=<run dir>: evaluate under perturbed physics and latency, pass/fail (--help)",
    "data": "data collect task=<TaskId> policy=<run dir|random> episodes=N noise=F | data build | "
    "data import-bag bag=<file> mapping=<yaml>: datasets (--help)",
}
"""Subcommands composed by Hydra (see :mod:`robolearn.cli.commands`), with their one-line help."""


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``robolearn`` command and its subcommands."""
    parser = argparse.ArgumentParser(prog="robolearn", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"robolearn {robolearn.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in HYDRA_COMMANDS.items():  # listed for --help; main() routes them before argparse
        commands.add_parser(name, help=text, add_help=False)
    commands.add_parser(  # routed before argparse too (key=value settings, robolearn.cli.deploy)
        "deploy", add_help=False,
        help="deploy run=<dir>|policy=<exported> robot=sim|ros1|ros2 [rate=...]: the policy on a robot (--help)")

    commands.add_parser(  # routed before argparse too (Hydra overrides, robolearn.cli.distill)
        "distill", add_help=False,
        help="distill teacher=<run dir> mode=dagger|aacd: a privileged teacher into a deployable student (--help)")

    commands.add_parser(  # routed before argparse too (robolearn.cli.benchmark)
        "benchmark", add_help=False,
        help="benchmark run table=<name> out=<dir> [jobs=2] | benchmark report out=<dir>: the published "
        "results table, robolearn against Stable-Baselines3 over seeds, resumable (--help)")

    demo = commands.add_parser(
        "demo",
        help="step a batched task with random actions, print throughput, write a video",
        description="Step NUM_ENVS worlds of TASK with uniform random actions for STEPS control steps, "
        "print the throughput, then render world 0 for RENDER_STEPS steps into OUT/TASK.mp4.",
    )
    demo.add_argument("--task", default="HalfCheetah", help="registered task id (see `robolearn list`)")
    demo.add_argument("--num-envs", type=_positive_int, default=64, help="number of worlds stepped together")
    demo.add_argument("--steps", type=_positive_int, default=2000, help="timed batched steps")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="folder the video is written to")
    demo.add_argument("--render-steps", type=_non_negative_int, default=200, help="video frames; 0 skips")
    demo.add_argument("--width", type=_positive_int, default=320, help="video width in pixels")
    demo.add_argument("--height", type=_positive_int, default=240, help="video height in pixels")
    demo.add_argument(
        "--camera",
        default=None,
        help="model camera name or index, -1 for the free camera (default: the model's 'track' camera, else -1)",
    )
    demo.add_argument("--backend", default="mujoco", choices=sorted(BACKENDS), help="simulation backend")
    demo.add_argument("--seed", type=int, default=0, help="seed of the worlds and of the random actions")
    demo.set_defaults(func=run_demo)

    listing = commands.add_parser("list", help="list the registered tasks", description="List the tasks.")
    listing.set_defaults(func=run_list)
    add_compare_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``robolearn`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if argv and argv[0] in HYDRA_COMMANDS:
        from robolearn.cli.commands import run_command

        return run_command(argv[0], argv[1:])
    if argv and argv[0] == "deploy":
        from robolearn.cli.deploy import deploy_command

        return deploy_command(argv[1:])
    if argv and argv[0] == "distill":
        from robolearn.cli.distill import distill_command

        return distill_command(argv[1:])
    if argv and argv[0] == "benchmark":
        from robolearn.cli.benchmark import main as benchmark_main

        return benchmark_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"robolearn {args.command}: interrupted", file=sys.stderr)
        return 130


def run_list(args: argparse.Namespace) -> int:
    """Print every registered task id with its one-line description."""
    for task_id in robolearn.list_tasks():
        print(f"{task_id:<24} {task_cfg(task_id).description}")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    """Time random-action steps of a batched task, then record world 0 (see :func:`build_parser`)."""
    try:
        env = robolearn.make(args.task, args.num_envs, backend=args.backend, seed=args.seed)
    except ValueError as exc:
        print(f"robolearn demo: error: {exc}", file=sys.stderr)
        return 2
    try:
        with torch.inference_mode():
            _time_random_steps(env, args.steps, args.seed)
            if args.render_steps == 0:
                return 0
            return _record_video(env, args)
    finally:
        env.close()


def _time_random_steps(env: BatchedEnv, steps: int, seed: int) -> None:
    """Step every world ``steps`` times with random actions and print the throughput."""
    sample = _action_sampler(env, seed)
    env.reset()
    returns: list[torch.Tensor] = []
    bar = tqdm(range(steps), desc=f"{env.task_id} x{env.num_envs}", unit="step", file=sys.stderr)
    start = time.perf_counter()
    for _ in bar:
        _, _, _, _, info = env.step(sample())
        if "episode" in info:
            returns.append(info["episode"]["return"])
    elapsed = time.perf_counter() - start
    bar.close()
    physics = env.cfg.decimation * steps * env.num_envs
    print(
        f"{env.task_id}: {steps} steps x {env.num_envs} worlds in {elapsed:.2f} s: "
        f"{steps * env.num_envs / elapsed:,.0f} env steps/s "
        f"({steps / elapsed:,.0f} batched steps/s, {physics / elapsed:,.0f} physics steps/s)"
    )
    if returns:
        done = torch.cat(returns)
        print(f"{done.numel()} episodes finished; random-action return {done.mean():.1f} +- {done.std():.1f}")
    if env.num_diverged:
        print(f"{env.num_diverged} world(s) diverged and were reset")


def _record_video(env: BatchedEnv, args: argparse.Namespace) -> int:
    """Render world 0 for ``args.render_steps`` random steps into ``args.out/<task>.mp4``."""
    from robolearn.logging.video import write_mp4

    sample = _action_sampler(env, args.seed + 1)
    camera = _camera(env, args.camera)
    frames: list[np.ndarray] = []
    try:
        for _ in tqdm(range(args.render_steps), desc="render world 0", unit="frame", file=sys.stderr):
            env.step(sample())
            frames.append(env.render([0], width=args.width, height=args.height, camera=camera)[0])
    except ValueError as exc:  # a bad camera name or index
        print(f"robolearn demo: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the GL context is the usual culprit on headless machines
        print(
            f"robolearn demo: rendering failed: {exc}\n"
            "Offscreen rendering needs EGL or OSMesa (libegl1, libosmesa6: scripts/setup.sh installs them; "
            "MUJOCO_GL=egl or osmesa picks one); --render-steps 0 skips the video.",
            file=sys.stderr,
        )
        return 1
    path = args.out / f"{env.task_id}.mp4"
    path.parent.mkdir(parents=True, exist_ok=True)
    fps = max(1, round(1.0 / env.dt))
    write_mp4(path, np.stack(frames), fps)
    print(f"wrote {path} ({len(frames)} frames of world 0 at {fps} fps)")
    return 0


def _camera(env: BatchedEnv, choice: str | None) -> str | int:
    """Resolve ``--camera``: an index, a name, or by default the model's ``track`` camera if any."""
    if choice is None:
        names = {env.model.camera(i).name for i in range(env.model.ncam)}
        return "track" if "track" in names else -1
    try:
        return int(choice)
    except ValueError:
        return choice


def _action_sampler(env: BatchedEnv, seed: int) -> Callable[[], torch.Tensor]:
    """Return a sampler of uniform actions ``[N, A]`` within the action bounds ([-1, 1] if unbounded)."""
    low = torch.where(torch.isfinite(env.ctrl_low), env.ctrl_low, torch.full_like(env.ctrl_low, -1.0))
    high = torch.where(torch.isfinite(env.ctrl_high), env.ctrl_high, torch.full_like(env.ctrl_high, 1.0))
    gen = torch.Generator().manual_seed(seed)
    shape = (env.num_envs, env.action_dim)

    def sample() -> torch.Tensor:
        return low + (high - low) * torch.rand(shape, generator=gen, dtype=torch.float64)

    return sample


def _positive_int(text: str) -> int:
    """Parse an integer >= 1 (an argparse type)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    """Parse an integer >= 0 (an argparse type)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


if __name__ == "__main__":
    sys.exit(main())
