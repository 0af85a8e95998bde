"""``robolearn train | eval | export``: Hydra-composed commands.

Each command composes its primary config (``train.yaml``, ``eval.yaml``, ``export.yaml`` in
``robolearn.configs``) with Hydra's compose API, converts it to dataclasses once
(:mod:`robolearn.cli.config`) and runs. Hydra writes nothing and changes no directory: the run
directory is the only output. ``-m``/``--multirun`` expands sweeps (``seed=0,1,2``,
``range(0,3)``) into one job per combination, each in ``<run_dir>/<swept overrides>``, run one after
the other here, or with ``hydra/launcher=joblib|submitit_slurm|submitit_local`` through Hydra's
launcher plugins (:mod:`robolearn.cli.launch`).

Plain ``key=value`` overrides are force-added (``++``) so that an unknown key reaches
:func:`~robolearn.cli.config.to_dataclass`, which names it, the valid fields and the closest match.
"""

from __future__ import annotations

import datetime as _dt
import errno
import importlib.resources
import itertools
import json
import logging
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

import robolearn
from robolearn.algos import registry
from robolearn.cli.build import EVAL_SEED_OFFSET, build_agent, build_env, load_policy, runner_class
from robolearn.cli.config import (
    CollectConfig,
    ConfigError,
    EvalConfig,
    ExportConfig,
    RecipeConfig,
    Sim2SimConfig,
    TrainConfig,
    plain,
    to_dataclass,
    train_config_from_dict,
    train_config_to_dict,
)
from robolearn.cli.launch import JobResult, LaunchError, job_defaults, quote, run_sweep, split_launcher
from robolearn.runners import CheckpointError, RunDirError, TrainingDiverged
from robolearn.runners.rollout import VideoSpec, rollout

log = logging.getLogger(__name__)

CONFIG_MODULE = "robolearn.configs"
"""The package holding the YAML config groups."""
GROUPS = frozenset({"algo", "runner", "experiment", "o2o_method"})
"""Config groups (``algo=sac`` picks a file, it does not set a value; ``o2o_method`` comes with an
offline-to-online experiment)."""
_STARTED = _dt.datetime.now()
TABLE_COLUMNS = ("run_dir", "final eval return", "env steps")
"""Columns of a sweep's summary table."""


class UsageError(ValueError):
    """A command line that cannot run; printed without a traceback."""


def run_command(command: str, argv: Sequence[str]) -> int:
    """Run ``robolearn <command> <argv>`` (``train``, ``eval``, ``export``, ``sim2sim``); return the exit status.

    A user error (a bad setting, a run directory that cannot be used, an unreadable file, a full
    disk) prints one line and returns 2; a run stopped by divergence returns 1; Ctrl-C, after the
    runner saved a checkpoint, returns 130.
    """
    args = list(argv)
    if any(a in ("-h", "--help") for a in args):
        print(_help(command))
        return 0
    multirun = any(a in ("-m", "--multirun") for a in args)
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    try:
        if command != "train" and multirun:
            raise UsageError("-m/--multirun is for train only")
        launcher, hydra_overrides, job_overrides = split_launcher(overrides)
        if launcher is not None or any(o.lstrip("+~").startswith("hydra.launcher") for o in hydra_overrides):
            if command != "train" or not multirun:
                raise UsageError(f"{' '.join(hydra_overrides)}: a launcher runs the jobs of a sweep: `robolearn train -m "
                                 "hydra/launcher=<joblib|submitit_local|submitit_slurm> seed=0,1 ...`")
            if launcher is None:
                raise UsageError(f"{' '.join(hydra_overrides)}: pick the launcher too (hydra/launcher=joblib, "
                                 "submitit_local or submitit_slurm)")
            return launched_sweep(launcher, hydra_overrides, job_overrides)
        jobs = expand_sweeps(overrides) if multirun else [(overrides, "")]
        if command == "train":
            results = [train_job(job, name) for job, name in jobs]
            if multirun:
                _print_table(list(TABLE_COLUMNS), results)
            return 0
        handlers: dict[str, Callable[[list[str]], int]] = {
            "eval": eval_command,
            "export": export_command,
            "sim2sim": sim2sim_entry,
            "data": data_entry,
        }
        return handlers[command](overrides)
    except (ConfigError, UsageError, LaunchError, HydraException, OmegaConfBaseException, RunDirError, CheckpointError) as exc:
        return _fail(command, _message(exc), 2)
    except OSError as exc:  # a missing or unreadable file, an unwritable folder, a full disk
        return _fail(command, _os_message(exc), 2)
    except TrainingDiverged as exc:
        return _fail(command, f"training stopped: {exc}", 1)
    except KeyboardInterrupt as exc:
        checkpoint = getattr(exc, "checkpoint", None)
        where = f"; the last checkpoint is {checkpoint} (continue with resume=<run dir>)" if checkpoint else ""
        return _fail(command, f"interrupted{where}", 130)


def _fail(command: str, message: str, status: int) -> int:
    """Print ``message`` as the command's one error line (the traceback goes to the debug log); return ``status``."""
    log.debug("robolearn %s failed", command, exc_info=True)
    print(f"robolearn {command}: error: {message}", file=sys.stderr)
    return status


def _os_message(exc: OSError) -> str:
    """An OS error in words, with the file it concerns and, for a full disk, what to do."""
    if exc.errno == errno.ENOSPC:
        where = f" writing {exc.filename}" if exc.filename else ""
        return f"no space left on the device{where}; free some space (old runs, checkpoints) and resume the run"
    if exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror.lower()}"
    return _message(exc)


def _message(exc: BaseException) -> str:
    """An error's message without Hydra's config search path dump."""
    text = str(exc).strip()
    return text.split("\nConfig search path", 1)[0].strip()


def expand_sweeps(overrides: Sequence[str]) -> list[tuple[list[str], str]]:
    """One ``(overrides, job name)`` per combination of the sweep overrides (``a=1,2`` ``b=range(0,2)``)."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    axes: list[list[str]] = []
    for override in parsed:
        if override.is_sweep_override():
            key = override.get_key_element()
            axes.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            axes.append([override.input_line or ""])
    swept = [i for i, o in enumerate(parsed) if o.is_sweep_override()]
    jobs = []
    for combo in itertools.product(*axes):
        name = ",".join(combo[i] for i in swept).replace("/", "_").lstrip("+")
        jobs.append((list(combo), name or "job"))
    return jobs


def compose_config(config_name: str, overrides: Sequence[str]) -> dict[str, Any]:
    """Compose ``config_name`` of :data:`CONFIG_MODULE` with ``overrides``; plain containers, resolved."""
    OmegaConf.register_new_resolver(
        "now", lambda pattern: _STARTED.strftime(pattern), replace=True, use_cache=True
    )
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose(config_name, overrides=[_force_add(o) for o in overrides])
    return plain(cfg)


def _force_add(override: str) -> str:
    """``key=value`` as ``++key=value`` unless it picks a group or already carries a prefix."""
    parsed = OverridesParser.create().parse_overrides([override])[0]
    if parsed.is_add() or parsed.is_force_add() or parsed.is_delete():
        return override
    key = parsed.key_or_group
    if key in GROUPS or key.startswith("hydra") or parsed.package is not None:
        return override
    return "++" + override


# -- train ------------------------------------------------------------------------------------
def train_job(overrides: list[str], job_name: str = "") -> list[Any]:
    """Compose, convert and run one training job; return ``[run_dir, final eval return, env steps]``."""
    return _run_train_config(job_train_config(compose_config("train", overrides), overrides, job_name))


def job_train_config(composed: dict[str, Any], overrides: Sequence[str], job_name: str = "") -> TrainConfig:
    """A job's :class:`TrainConfig` from its composed config: a resumed run's own, or in ``<run_dir>/<job_name>``."""
    if composed.get("resume"):
        composed = _resumed_config(str(composed["resume"]), overrides)
    elif job_name:
        composed["run_dir"] = str(Path(str(composed["run_dir"])) / job_name)
    return train_config_from_dict(composed)


def _run_train_config(cfg: TrainConfig) -> list[Any]:
    """Train ``cfg``; its row of the summary table."""
    summary = train(cfg)
    return [cfg.run_dir, summary.get("final_eval_return", math.nan), summary.get("env_steps", summary.get("grad_steps", 0))]


def launched_job(composed: dict[str, Any], overrides: list[str]) -> list[Any]:
    """One job of a launched sweep, in the launcher's worker: Hydra composed ``composed`` from the job's
    ``overrides`` (its run dir fixed by :func:`launched_sweep`); train it, return its table row.
    """
    return _run_train_config(job_train_config(composed, overrides))


def launched_sweep(launcher: str, hydra_overrides: list[str], overrides: list[str]) -> int:
    """``robolearn train -m hydra/launcher=<launcher> ...``: the sweep's jobs through Hydra's launcher plugin.

    Every job's config is composed and checked here first (nothing trains when one is wrong) and
    its run dir fixed, the same as the sequential sweep's (``<run_dir>/<swept overrides>``; the
    ``now`` of the default run_dir is this process's). Prints the summary table from the jobs'
    return values; returns 1 if a job failed (each failure on its own line), 0 otherwise.
    """
    jobs = []
    for job, name in expand_sweeps(overrides):
        # Force-added as compose_config does: the plugin recomposes each job from these overrides.
        job = [_force_add(o) for o in (*job_defaults(launcher, overrides), *job)]
        cfg = job_train_config(compose_config("train", job), job, name)
        if cfg.distributed:
            # Refused here, before a Slurm array is submitted: every job would fail in its worker.
            raise UsageError(
                f"distributed=true: a launched job is one process, not a torchrun group; {launcher} cannot start "
                "data-parallel jobs. Run each with `torchrun --nproc_per_node N -m robolearn.cli train ... distributed=true`"
            )
        # The job's final run dir replaces the command line's (now resolved once, here).
        kept = [o for o in job if o.lstrip("+~").split("=", 1)[0] != "run_dir"]
        jobs.append(([*kept, f"++run_dir={quote(cfg.run_dir)}"], cfg.run_dir))
    results: list[JobResult] = run_sweep(CONFIG_MODULE, "train", launcher, hydra_overrides, jobs, launched_job)
    for result in results:
        if result.pid:
            log.info("%s ran in process %d", result.run_dir, result.pid)
    _print_table(list(TABLE_COLUMNS), [r.row() for r in results])
    failed = [r for r in results if r.error is not None]
    for result in failed:
        print(f"robolearn train: error: job {result.run_dir} failed: {result.error}", file=sys.stderr)
    return 1 if failed else 0


def _resumed_config(resume: str, overrides: Sequence[str]) -> dict[str, Any]:
    """A run's saved ``config.json`` with this command line's value overrides applied on top."""
    path = Path(resume) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"resume={resume}: {path} does not exist")
    try:
        saved = OmegaConf.create(json.loads(path.read_text()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(f"resume={resume}: {path} cannot be read as a run config ({exc})") from None
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if key == "resume":
            continue
        if key in GROUPS:
            log.warning("resume: ignoring %s; the run's config.json fixes the config groups", override.input_line)
            continue
        if override.is_delete():
            raise UsageError(f"resume: cannot delete {key}")
        OmegaConf.update(saved, key, override.value(), merge=False, force_add=True)
    out = plain(saved)
    out["run_dir"] = out["resume"] = resume
    return out


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Build envs, agent and runner from ``cfg``, train (or resume), print and return the summary."""
    if cfg.torch_threads is not None:
        torch.set_num_threads(cfg.torch_threads)
    from robolearn.runners import distributed

    # Under torchrun with distributed=true: join the process group; this rank's seed and role.
    cfg = distributed.prepare(cfg)
    try:
        return _train(cfg)
    finally:
        distributed.finish()


def _train(cfg: TrainConfig) -> dict[str, Any]:
    """:func:`train` within this process's (possibly distributed) context."""
    from robolearn.runners import distributed

    if cfg.o2o is not None:
        from robolearn.cli.o2o import train_o2o

        return train_o2o(cfg)
    if cfg.offline:
        return train_offline(cfg)
    if registry.spec_of(cfg.algo).runners[0] == "distill":
        # A student needs its teacher run, which `robolearn distill` loads (and which resumes it).
        raise ConfigError(
            f"algo={cfg.algo_name}: a student is trained by `robolearn distill teacher=<teacher run> mode=dagger|aacd`"
            " and resumed by `robolearn distill resume=<student run>`, not by `robolearn train`"
        )
    try:
        env = build_env(cfg, cfg.num_envs, cfg.seed)
    except ValueError as exc:  # an unknown task or task override: the registry names the choices
        raise ConfigError(str(exc)) from exc
    eval_env = (
        build_env(cfg, cfg.eval_num_envs, cfg.seed + EVAL_SEED_OFFSET, evaluation=True) if cfg.eval_num_envs else None
    )
    try:
        agent = build_agent(cfg, env)
        runner_cls = runner_class(cfg)
        runner = runner_cls(env, agent, cfg.runner, cfg.run_dir, eval_env=eval_env, config=train_config_to_dict(cfg))
        # Under torchrun only rank 0 speaks: the others train the same learner on their own worlds.
        main = distributed.is_main()
        if main:
            print(f"{'resuming' if cfg.resume else 'training'} {cfg.algo_name} on {cfg.task} in {cfg.run_dir}")
        summary = runner.learn(resume=cfg.resume is not None)
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()
    if not main:
        return summary
    print(
        f"done: {summary['env_steps']} env steps in {summary['wall_time_s']:.1f} s ({summary['train_time_s']:.1f} s training), "
        f"final eval return {summary['final_eval_return']:.1f}, best {summary['best_eval_return']:.1f} "
        f"({cfg.run_dir})"
    )
    return summary


def train_offline(cfg: TrainConfig) -> dict[str, Any]:
    """Offline learning: the dataset checked against the task, gradient steps, evaluation in simulation."""
    from robolearn.cli.build import normalize_with, offline_reference, read_dataset
    from robolearn.runners.offline import OfflineRunner

    try:
        eval_env = build_env(cfg, max(cfg.eval_num_envs, 1), cfg.seed + EVAL_SEED_OFFSET, evaluation=True)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        dataset = read_dataset(cfg, eval_env)
        agent = build_agent(cfg, eval_env)
        if cfg.normalize_obs:
            normalize_with(agent, dataset, eval_env.obs_dims)
        runner = OfflineRunner(
            dataset,
            agent,
            cfg.runner,
            cfg.run_dir,
            eval_env=eval_env,
            total_grad_steps=cfg.total_grad_steps,
            seed=cfg.seed,
            gamma=getattr(cfg.algo, "gamma", 0.99),
            reference=offline_reference(cfg, dataset),
            config=train_config_to_dict(cfg),
        )
        print(f"{'resuming' if cfg.resume else 'training'} {cfg.algo_name} on {cfg.dataset} ({len(dataset)} transitions) in {cfg.run_dir}")
        summary = runner.learn(resume=cfg.resume is not None)
    finally:
        eval_env.close()
    score = summary.get("normalized_score")
    print(
        f"done: {summary['grad_steps']} gradient steps in {summary['wall_time_s']:.1f} s ({summary['train_time_s']:.1f} s "
        "training), final eval return "
        f"{summary['final_eval_return']:.1f}" + (f" (normalized score {score:.1f})" if score is not None else "") + f" ({cfg.run_dir})"
    )
    return summary


# -- eval -------------------------------------------------------------------------------------
def eval_command(overrides: list[str]) -> int:
    """Roll out a run's latest checkpoint deterministically; print a table of returns."""
    cfg = to_dataclass(EvalConfig, _with_run(compose_config("eval", overrides)))
    policy = load_policy(cfg.run, device=cfg.device)
    env = build_env(policy.cfg, cfg.num_envs, cfg.seed, device=cfg.device, evaluation=True)
    try:
        result = rollout(env, policy.act, episodes=cfg.episodes, seed=cfg.seed, video=_video(env, cfg))
    finally:
        env.close()
    if result.num_episodes == 0:
        raise RuntimeError(f"no episode ended within {result.steps} steps")
    returns, lengths = result.returns, result.lengths
    rows = [
        ["run", cfg.run],
        ["checkpoint", policy.checkpoint.name],
        ["task", policy.cfg.task],
        ["episodes", str(returns.numel())],
        ["mean return", f"{float(returns.mean()):.2f}"],
        ["std return", f"{float(returns.std()) if returns.numel() > 1 else 0.0:.2f}"],
        ["min / max", f"{float(returns.min()):.2f} / {float(returns.max()):.2f}"],
        ["mean length", f"{float(lengths.double().mean()):.1f}"],
    ]
    if result.frames:
        from robolearn.logging import write_mp4

        path = Path(cfg.run) / "eval_cli.mp4"
        write_mp4(path, result.frames, fps=1.0 / env.dt)
        rows.append(["video", str(path)])
    _print_table(["", ""], rows, header=False)
    return 0


def _with_run(mapping: dict[str, Any]) -> dict[str, Any]:
    if not mapping.get("run"):
        raise UsageError("missing run=<run dir>")
    return mapping


def _video(env: Any, cfg: EvalConfig) -> VideoSpec | None:
    """World 0's first episode (``cfg.video_steps`` frames at most), if asked and rendering works here."""
    if not cfg.video:
        return None
    spec = VideoSpec(320, 240, max_frames=cfg.video_steps)
    try:  # one frame first: a headless machine without EGL/OSMesa gets a warning, not a failed eval
        env.render([0], spec.width, spec.height, camera=spec.camera)
    except Exception as exc:
        log.warning("no video: rendering failed: %s", exc)
        return None
    return spec


# -- export -----------------------------------------------------------------------------------
def export_command(overrides: list[str]) -> int:
    """Export a run's deterministic policy (normalisation folded in) with its manifest: through the
    exporter that fits it (:func:`robolearn.cli.export.export_run`: a chunked generative learner's
    sampler with its noise as an input, an image policy with the camera's bytes as inputs, else
    ``obs -> action``).
    """
    from robolearn.cli.export import export_run
    from robolearn.export import FORMATS, ExportError

    cfg = to_dataclass(ExportConfig, _with_run(compose_config("export", overrides)))
    for name in ("onnxscript", "onnx_ir", "torch.onnx"):  # chatty INFO lines of the ONNX exporter
        logging.getLogger(name).setLevel(logging.ERROR)
    policy = load_policy(cfg.run, device="cpu")
    if not policy.spec:
        raise FileNotFoundError(f"{Path(cfg.run) / 'policy_spec.json'} does not exist")
    out = Path(cfg.out) if cfg.out else Path(cfg.run) / "export"
    formats = FORMATS if cfg.format == "all" else (cfg.format,)
    try:
        manifest = export_run(policy, out, formats, sampler_steps=cfg.sampler_steps, one_step=cfg.one_step)
    except (ValueError, ExportError) as exc:  # one line, not a traceback: the message names the field
        raise ConfigError(str(exc)) from exc
    rows = [
        [fmt, str(out / info["path"]), f"{info['parity_max_abs_err']:.2e}"] for fmt, info in manifest["files"].items()
    ]
    rows.append(["manifest", str(out / "manifest.json"), ""])
    _print_table(["format", "path", "parity max |err|"], rows)
    return 0


# -- sim2sim ----------------------------------------------------------------------------------
def sim2sim_entry(overrides: list[str]) -> int:
    """Compose ``sim2sim.yaml`` with ``overrides`` and run the gate (exit 1 if a condition fails)."""
    from robolearn.cli.sim2sim import sim2sim_command

    return sim2sim_command(to_dataclass(Sim2SimConfig, _with_run(compose_config("sim2sim", overrides))))


# -- data -------------------------------------------------------------------------------------
def data_entry(argv: list[str]) -> int:
    """``robolearn data collect|build|import-bag [key=value ...]``: collect, build recipes, import a bag."""
    if not argv or argv[0] not in ("collect", "build", "import-bag"):
        raise UsageError("expected `robolearn data collect key=value ...`, `robolearn data build key=value ...` or "
                         "`robolearn data import-bag bag=<file> mapping=<yaml> [out=<file.h5>]`")
    from robolearn.data import DatasetError

    try:
        if argv[0] == "import-bag":
            from robolearn.cli.bag_import import import_bag_command

            return import_bag_command(argv[1:])
        if argv[0] == "collect":
            from robolearn.cli.collect import collect_command

            collect_command(to_dataclass(CollectConfig, compose_config("collect", argv[1:])))
        else:
            from robolearn.cli.recipe import build_command

            build_command(to_dataclass(RecipeConfig, compose_config("recipe", argv[1:])), train_job)
    except DatasetError as exc:
        raise ConfigError(str(exc)) from exc
    return 0


# -- output -----------------------------------------------------------------------------------
def _print_table(columns: list[str], rows: list[list[Any]], *, header: bool = True) -> None:
    """Print ``rows`` in aligned columns under ``columns`` (floats with two decimals)."""
    cells = [[f"{v:.2f}" if isinstance(v, float) else str(v) for v in row] for row in rows]
    table = ([columns] if header else []) + cells
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _help(command: str) -> str:
    """Usage of a Hydra command: syntax, choices and the default config."""
    configs = importlib.resources.files(CONFIG_MODULE)
    usage = {
        "train": "robolearn train [-m] task=<TaskId> algo=<ppo|sac> [experiment=<name>] [key=value ...]",
        "eval": "robolearn eval run=<run dir> [episodes=N] [num_envs=N] [seed=N] [video=true]",
        "export": "robolearn export run=<run dir> format=<onnx|torchscript|all> [out=<dir>]",
        "sim2sim": "robolearn sim2sim run=<run dir> [only=[name,...]] [min_ratio=F] [perturbations.<name>.<field>=V]",
        "data": "robolearn data collect task=<TaskId> policy=<run dir|random> episodes=N [noise=F] [out=<file>]\n"
        "       robolearn data build [tasks=[Hopper]] [root=<dir>] [expert_env_steps=N] [medium_env_steps=N] (D4RL-style recipe)\n"
        "       robolearn data import-bag bag=<.bag|.db3|.mcap> mapping=<yaml> [out=<file.h5>] (robot logs, labelled by the task)",
    }[command]
    text = f"usage: {usage}\n\n"
    if command == "train":
        text += (
            "sweeps: -m seed=0,1,2 lr=range(...) runs one job per combination in <run_dir>/<swept overrides>,\n"
            "  one after the other in this process; add hydra/launcher=joblib (local processes,\n"
            "  hydra.launcher.n_jobs=N), submitit_slurm (a Slurm job array: hydra.launcher.partition=...,\n"
            "  timeout_min, gpus_per_node, cpus_per_task, mem_gb, ...) or submitit_local to run them\n"
            "  through Hydra's launcher plugins (pip install robolearn[launchers]).\n"
            "data-parallel PPO/SAC: torchrun --nproc_per_node=N -m robolearn.cli train ... distributed=true\n"
            "  (each rank its own worlds and seed, gradients averaged; rank 0 logs, evaluates, checkpoints;\n"
            "  several machines: torchrun --nnodes=M --node_rank=i --master_addr=<host> --master_port=<port>).\n"
        )
        text += f"tasks: {', '.join(robolearn.list_tasks())}\n"
        for group in sorted(GROUPS):
            choices = sorted(p.name[:-5] for p in (configs / group).iterdir() if p.name.endswith(".yaml"))
            text += f"{group}: {', '.join(choices)}\n"
        text += "\n"
    raw = (configs / f"{'collect' if command == 'data' else command}.yaml").read_text()
    return f"{text}defaults ({CONFIG_MODULE}/{command}.yaml):\n{raw}"
