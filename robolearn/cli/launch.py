"""``robolearn train -m hydra/launcher=<name> ...``: a sweep's jobs through one of Hydra's launcher plugins.

Without ``hydra/launcher=...`` a sweep runs its jobs one after the other in the calling process
(:func:`robolearn.cli.commands.run_command`). With it, the same jobs (the same overrides, the same
run directories ``<run_dir>/<swept overrides>``) go to the launcher plugin Hydra instantiates from
the composed config: ``joblib`` (local processes, hydra-joblib-launcher), ``submitit_slurm`` (a
Slurm job array, hydra-submitit-launcher), ``submitit_local`` (the submitit route as local
processes) or Hydra's own ``basic`` (in-process, one after the other). The groups are the plugins'
own (their ConfigStore entries), so every option a plugin exposes is set on the command line as
``hydra.launcher.<option>=<value>``.

The plugin API is used as Hydra's multirun uses it: the primary config is composed with its
``hydra`` node (``return_hydra_config=True``), ``Plugins.instantiate_launcher`` gets a
``HydraContext`` (the config loader and callbacks) and a task function, and ``launch`` gets one
list of overrides per job; each job's config is recomposed by the plugin (in its worker process)
with ``load_sweep_config`` and run by Hydra's ``run_job``.

What Hydra writes: nothing into the run directories (``hydra.output_subdir=null``: no ``.hydra/``;
``hydra/job_logging=none``: no ``<job>.log``; ``hydra.job.chdir=false``). The sweep directory
(the run_dir given, the parent of the job folders) is created by the plugin; submitit writes its
pickled jobs and each job's stdout/stderr under ``<sweep dir>/.submitit/<job id>/`` (the plugin's
``submitit_folder``), joblib writes nothing.

This module imports nothing of :mod:`robolearn.cli.commands` (which imports it): the job itself is
a function of ``commands`` handed in by reference, which pickles by name into the workers.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

log = logging.getLogger(__name__)

LAUNCHER_GROUP = "hydra/launcher"
"""The config group picking a launcher (``hydra/launcher=joblib``)."""

QUIET_HYDRA = (
    "hydra.output_subdir=null",  # no <job dir>/.hydra/{config,hydra,overrides}.yaml
    "hydra.job.chdir=false",  # jobs run in the directory the command was started from
    "hydra/job_logging=none",  # no <job dir>/<job name>.log; robolearn configures its own logging
    "hydra/hydra_logging=none",  # leaves the CLI's logging as it is (Hydra's INFO lines still show)
    # Hydra's job output dir is the job's run dir: ${run_dir} is fixed per job (see run_sweep), so
    # the dir run_job creates is the one robolearn writes, and the sweep dir is the common parent.
    "hydra.sweep.dir=${run_dir}",
    "hydra.sweep.subdir=.",
)
"""Hydra settings of every launched sweep: Hydra writes nothing into the run directories."""

FIXED_HYDRA = ("hydra.sweep", "hydra.run", "hydra.output_subdir", "hydra.job.chdir", "hydra/job_logging",
               "hydra/hydra_logging", "hydra.job_logging", "hydra.hydra_logging")
"""Hydra settings robolearn fixes (:data:`QUIET_HYDRA`): the run dirs come from ``run_dir`` alone."""

LOCAL_LAUNCHERS = frozenset({"basic", "joblib", "submitit_local"})
"""Launchers whose jobs share this machine: each job gets one torch thread unless told otherwise."""

INSTALL_HINT = "(joblib and submitit come with `pip install robolearn[launchers]`)"


class LaunchError(ValueError):
    """A launcher choice or option that cannot work; raised before any job starts."""


@dataclass
class JobResult:
    """One launched job's outcome: its row of the summary table, the process it ran in, its error."""

    run_dir: str
    final_eval_return: float = math.nan
    env_steps: int = 0
    pid: int = 0
    error: str | None = None

    def row(self) -> list[Any]:
        """``[run_dir, final eval return, env steps]`` (``failed: <error>`` in place of the return)."""
        if self.error is not None:
            return [self.run_dir, f"failed: {self.error}", ""]
        return [self.run_dir, self.final_eval_return, self.env_steps]


JobFunction = Callable[[dict[str, Any], list[str]], list[Any]]
"""Runs one job: (its composed config without ``hydra``, plain; its overrides) -> ``[run_dir, return, steps]``."""


@dataclass(frozen=True)
class _Task:
    """The task function handed to the launcher; pickled into its workers (``job`` by reference)."""

    job: JobFunction

    def __call__(self, cfg: DictConfig) -> JobResult:
        """Run one job in this (worker) process; an error is returned, not raised, so that the launcher
        delivers every other job's result (submitit's launcher stops at the first raised one).
        """
        if not logging.getLogger().handlers:  # a fresh worker process: the CLI's log format
            logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        hydra_cfg = HydraConfig.get()
        overrides = [str(o) for o in hydra_cfg.overrides.task]
        run_dir = str(cfg.get("run_dir"))
        log.info("job %s (%s) runs in process %d", hydra_cfg.job.num, run_dir, os.getpid())
        try:
            container = OmegaConf.to_container(cfg, resolve=True)
            assert isinstance(container, dict)
            row = self.job({str(k): v for k, v in container.items()}, overrides)
        except Exception as exc:  # noqa: BLE001 - a failed job is reported; the others go on
            log.debug("job %s failed", run_dir, exc_info=True)
            message = " ".join(str(exc).split())  # one line: it goes into the table
            return JobResult(run_dir, pid=os.getpid(), error=f"{type(exc).__name__}: {message}")
        return JobResult(str(row[0]), float(row[1]), int(row[2]), pid=os.getpid())


def split_launcher(overrides: Sequence[str]) -> tuple[str | None, list[str], list[str]]:
    """``(launcher name or None, hydra overrides, job overrides)`` of a command line."""
    name: str | None = None
    hydra_overrides: list[str] = []
    job_overrides: list[str] = []
    for text in overrides:
        key = text.lstrip("+~").split("=", 1)[0].split("@", 1)[0]
        if key == LAUNCHER_GROUP:
            name = text.split("=", 1)[1] if "=" in text else ""
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            hydra_overrides.append(text)
        else:
            job_overrides.append(text)
    return name, hydra_overrides, job_overrides


def quote(value: str) -> str:
    """``value`` as one quoted Hydra override value (a run dir may hold ``=`` and ``,``).

    Inside Hydra's quotes a backslash is literal except before a quote or at the end, where it is
    doubled; the quote itself is escaped.
    """
    escaped = re.sub(r"\\+(?='|$)", lambda m: m.group(0) * 2, value)
    return "'" + escaped.replace("'", "\\'") + "'"


def run_sweep(
    config_module: str,
    config_name: str,
    launcher: str,
    hydra_overrides: Sequence[str],
    jobs: Sequence[tuple[list[str], str]],
    job: JobFunction,
) -> list[JobResult]:
    """Launch ``jobs`` (each: its final overrides, its run dir) with Hydra's ``launcher`` plugin.

    ``jobs[i][0]`` must compose (the caller checked every job's config before: nothing trains when
    one is wrong) and contain ``++run_dir=<the job's run dir>``; ``jobs[i][1]`` is that run dir,
    reported if the job fails. ``hydra_overrides`` are the command line's ``hydra...`` overrides,
    ``hydra/launcher=<launcher>`` among them. Returns one :class:`JobResult` per job, in order.
    """
    with initialize_config_module(config_module=config_module, version_base="1.3", job_name="robolearn"):
        loader = GlobalHydra.instance().config_loader()
        choices = sorted(loader.get_group_options(LAUNCHER_GROUP))
        if launcher not in choices:
            raise LaunchError(
                f"hydra/launcher={launcher}: unknown launcher; expected one of {', '.join(choices)} {INSTALL_HINT}"
            )
        master = _compose_master(config_name, launcher, hydra_overrides, jobs)
        context = HydraContext(config_loader=loader, callbacks=_callbacks(master))
        # Hydra's own route: instantiate hydra.launcher (its _target_) and hand it the context,
        # the task function and the master config.
        plugin = Plugins.instance().instantiate_launcher(config=master, hydra_context=context, task_function=_Task(job))
        log.info("launching %d jobs with hydra/launcher=%s", len(jobs), launcher)
        try:
            returns = plugin.launch([list(o) for o, _ in jobs], initial_job_idx=0)
        except Exception as exc:  # e.g. submitit's results() raising for a job killed from outside
            log.debug("the launcher failed", exc_info=True)
            error = f"{type(exc).__name__}: {_first_line(exc)}"
            results = [_from_run_dir(run_dir, error) for _, run_dir in jobs]
            if all(r.error is not None for r in results):  # nothing ran (no srun, no sbatch): one line
                raise LaunchError(f"hydra/launcher={launcher}: {error}") from None
            return results  # what finished is kept, read back from the jobs' summary.json
    return [_result(ret, run_dir) for ret, (_, run_dir) in zip(returns, jobs, strict=True)]


def _compose_master(
    config_name: str, launcher: str, hydra_overrides: Sequence[str], jobs: Sequence[tuple[list[str], str]]
) -> DictConfig:
    """The sweep's config with its ``hydra`` node; each ``hydra.launcher.<option>`` checked first, so
    a bad one is named with the launcher's options instead of Hydra's composition trace.
    """
    first, _ = jobs[0]
    sweep_dir = str(Path(jobs[0][1]).parent)
    base = [*(o for o in first if not _is_run_dir(o)), f"++run_dir={quote(sweep_dir)}", *QUIET_HYDRA]
    defaults = _launcher_defaults(launcher, len(jobs))
    options = [o for o in hydra_overrides if not o.lstrip("+~").startswith(LAUNCHER_GROUP)]
    try:
        plain_cfg = compose(config_name, overrides=[*base, f"{LAUNCHER_GROUP}={launcher}"], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise LaunchError(f"hydra/launcher={launcher}: {_first_line(exc)} {INSTALL_HINT}") from None
    known = sorted(str(k) for k in plain_cfg.hydra.launcher if k != "_target_")
    for text in options:
        parsed = OverridesParser.create().parse_overrides([text])[0]
        key = parsed.key_or_group
        if key.startswith("hydra.launcher."):
            option = key.removeprefix("hydra.launcher.").split(".", 1)[0]
            if option not in known:
                raise LaunchError(
                    f"{text}: the {launcher} launcher has no option {option!r}; its options: {', '.join(known)}"
                )
        if parsed.is_sweep_override():
            raise LaunchError(f"{text}: a hydra setting cannot be swept")
        if key.startswith(FIXED_HYDRA):
            raise LaunchError(
                f"{text}: robolearn fixes Hydra's output settings (the jobs' run dirs come from run_dir; Hydra "
                "writes no .hydra/ or log file); set hydra/launcher, hydra.launcher.<option> or other hydra keys"
            )
    try:
        return compose(
            config_name,
            overrides=[*base, f"{LAUNCHER_GROUP}={launcher}", *defaults, *options],
            return_hydra_config=True,
        )
    except (HydraException, OmegaConfBaseException) as exc:
        raise LaunchError(f"{' '.join(options)}: {_first_line(exc)} (options of {launcher}: {', '.join(known)})") from None


def _launcher_defaults(launcher: str, num_jobs: int) -> list[str]:
    """Robolearn's defaults for a launcher, before the command line's (which win).

    joblib's own ``n_jobs=-1`` starts one worker per core however few jobs there are; robolearn
    starts at most one per job. (Computed, which a YAML file in the group could not be; and a
    ``configs/hydra/launcher/joblib.yaml`` shadowing the plugin's entry is merged into it only by
    Hydra's deprecated "automatic schema matching", which warns on every composition.)
    """
    if launcher == "joblib":
        return [f"hydra.launcher.n_jobs={max(1, min(num_jobs, os.cpu_count() or 1))}"]
    return []


def job_defaults(launcher: str, overrides: Sequence[str]) -> list[str]:
    """Robolearn's job settings under ``launcher``: one torch thread per job where jobs share this
    machine (torch's default, every core per process, oversubscribes it), unless the command line sets
    ``torch_threads``.
    """
    if launcher in LOCAL_LAUNCHERS and not any(o.lstrip("+").startswith("torch_threads=") for o in overrides):
        return ["++torch_threads=1"]
    return []


def _is_run_dir(override: str) -> bool:
    return override.lstrip("+~").split("=", 1)[0] == "run_dir"


def _callbacks(cfg: DictConfig) -> Any:
    """Hydra's callbacks (``hydra.callbacks``) for the context, as its multirun builds them."""
    from hydra._internal.callbacks import Callbacks

    return Callbacks(cfg)


def _result(ret: JobReturn, run_dir: str) -> JobResult:
    """A job's :class:`JobResult` from the launcher's ``JobReturn`` (a failure Hydra caught included)."""
    if ret.status == JobStatus.COMPLETED and isinstance(ret.return_value, JobResult):
        return ret.return_value
    error = ret._return_value  # the exception run_job caught (reading return_value would raise it)
    return JobResult(run_dir, error=f"{type(error).__name__}: {error}")


def _from_run_dir(run_dir: str, error: str) -> JobResult:
    """A job's result from its ``summary.json`` when the launcher itself failed after it finished."""
    import json

    path = Path(run_dir) / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return JobResult(run_dir, error=error)
    steps = summary.get("env_steps", summary.get("grad_steps", 0))
    return JobResult(run_dir, float(summary.get("final_eval_return", math.nan)), int(steps))


def _first_line(exc: BaseException) -> str:
    """The first line of a Hydra/OmegaConf error (its config search path dump dropped)."""
    text = str(exc).strip().split("\nConfig search path", 1)[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()][:1]
    if exc.__cause__ is not None:  # "Error merging override ..." says why only in its cause
        lines += [line.strip() for line in str(exc.__cause__).splitlines() if line.strip()][:1]
    return ": ".join(lines) if lines else type(exc).__name__


__all__ = [
    "LAUNCHER_GROUP",
    "LOCAL_LAUNCHERS",
    "QUIET_HYDRA",
    "JobFunction",
    "JobResult",
    "LaunchError",
    "job_defaults",
    "quote",
    "run_sweep",
    "split_launcher",
]
