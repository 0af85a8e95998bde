"""``robolearn benchmark run | profile | report``: a benchmark table's runs, their profile, and its results page.

``robolearn benchmark run table=<name|path> out=<dir> [jobs=N] [entries=a,b] [libs=l1,l2] [seeds=0,1]
[dry_run=true] [rerun_stale=true]`` runs every (entry, library, seed) of the table that is not done yet
(:mod:`robolearn.benchmark.schedule`): interrupted runs resume, finished ones are skipped, so the
same command continues a table after an interruption. ``dry_run=true`` lists the plan with each
run's state and runs nothing. A finished or interrupted run whose recipe has changed since (its
``config.json`` differs from what the table's command gives it now: a recipe setting, the SB3
kwargs, a raised budget under a ``lin_`` schedule) is stale: the command refuses the table and lists
them, unless ``rerun_stale=true``, which renames each stale run's folder ``seed<S>.stale-<UTC time>``
(nothing is deleted) and runs it fresh. The comparison is with the whole config the run's fresh
command composes now (:func:`composer`: Hydra, as ``robolearn train``), so a deleted recipe line or a
changed default counts; settings that do not change training (video, checkpoint cadence, console)
do not. Every run of the table is checked: a stale run outside ``entries``/``libs``/``seeds`` is
left as it is, with a warning. A finished run short of a raised budget without a checkpoint is set
aside as ``seed<S>.short-<UTC time>`` before it reruns, one whose ``summary.json`` cannot be read as
``seed<S>.unreadable-<UTC time>``. ``benchmark report`` leaves stale runs out of
the statistics and lists them under their entry (:class:`RecipeCheck`).

``robolearn benchmark profile table=<name|path> out=<dir> [fraction=0.1]`` runs the table's profile
(:func:`~robolearn.benchmark.table.profile_table`): one short run per (entry, library), seed 0 by
default, whose second half the report reads for where the training seconds go (collection vs
updates) when the table's own runs predate that record (``time/update_s``).

``robolearn benchmark report out=<dir> [results=RESULTS.md] [figures=docs/results] [profile=<dir>]``
writes the results page from the run directories and ``<out>/table.json``
(:mod:`robolearn.benchmark.report`).

Settings are ``key=value`` like the Hydra commands, but parsed here: the benchmark is a driver of
``robolearn train`` subprocesses, not a training config.
"""

from __future__ import annotations

import difflib
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from robolearn.benchmark.schedule import (
    TABLE_FILE,
    BenchmarkResult,
    Run,
    RunState,
    SB3Settings,
    command,
    flat_config,
    plan,
    read_run_config,
    recipe_differences,
    run_benchmark,
    same_value,
)
from robolearn.benchmark.table import (
    Table,
    TableError,
    load_table,
    profile_table,
    table_from_dict,
    table_names,
)
from robolearn.utils.config import ConfigError

USAGE = """\
usage: robolearn benchmark run table=<name|path> out=<dir> [jobs=1] [entries=a,b] [libs=robolearn,sb3_default]
                               [seeds=0,1] [order=seed|entry] [dry_run=false] [rerun_stale=false]
       robolearn benchmark profile table=<name|path> out=<dir> [fraction=0.1] [jobs=1] [entries=a,b] [libs=...]
                                   [seeds=0] [dry_run=false] [rerun_stale=false]
       robolearn benchmark report out=<dir> [results=RESULTS.md] [figures=docs/results] [profile=<dir>]

run     train every (entry, library, seed) of a table that is not done yet, `jobs` at a time, one
        thread each; finished runs are skipped and interrupted ones resumed (run it again to continue);
        runs of a recipe changed since (stale) are refused, or with rerun_stale=true renamed
        seed<S>.stale-<UTC time> and run afresh; order=entry runs each entry's runs together
        (a table run over several sittings or machines: each entry's runs from one)
profile short runs of every (entry, library) at `fraction` of its budget (off-policy entries: at least
        twice their longest warm-up + 4,000 env steps), recording where the training seconds go
        (collection vs updates), for a table whose runs predate that record; resumable like run
report  write the results page (markdown + PNG curves) from the run directories of <out>; profile=<dir>:
        the profile runs' split where the table's runs did not record one

tables shipped: {tables}"""

RUN_KEYS: dict[str, str] = {
    "table": "a table name (configs/benchmark/<name>.yaml) or a path",
    "out": "the output folder (<out>/<entry>/<lib>/seed<S>)",
    "jobs": "runs at a time (default 1)",
    "entries": "comma-separated entry ids (default: all)",
    "libs": "comma-separated libraries (default: the table's)",
    "seeds": "comma-separated seeds (default: the table's)",
    "order": "seed (seed-major, the default) or entry (each entry's runs together)",
    "dry_run": "true: list the runs and their states, run nothing",
    "rerun_stale": "true: rename the folders of runs whose recipe changed since (seed<S>.stale-<UTC time>) "
                   "and run them afresh; default false: refuse the table and list them",
}
"""Settings of ``benchmark run``."""
PROFILE_KEYS: dict[str, str] = {
    **RUN_KEYS,
    "seeds": "comma-separated seeds (default: the table's first)",
    "fraction": "the part of each entry's budget a profile run takes, in (0, 1] (default 0.1)",
}
"""Settings of ``benchmark profile``."""
REPORT_KEYS: dict[str, str] = {
    "out": "the output folder of `benchmark run`",
    "results": "the markdown file to write (default RESULTS.md)",
    "figures": "the folder of the PNG curves (default docs/results)",
    "profile": "the output folder of `benchmark profile` (default: none)",
}
"""Settings of ``benchmark report``."""


class UsageError(ValueError):
    """A command line that cannot run; printed as one line, exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``robolearn benchmark <argv>``; return the exit status (0 ok, 1 a run failed, 2 bad input, 130 interrupted)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE.format(tables=", ".join(table_names()) or "none"))
        return 0 if args else 2
    commands: dict[str, Callable[[dict[str, str]], int]] = {
        "run": run_command, "profile": profile_command, "report": report_command,
    }
    keys = {"run": RUN_KEYS, "profile": PROFILE_KEYS, "report": REPORT_KEYS}
    name, rest = args[0], args[1:]
    if name not in commands:
        return _fail("benchmark", f"unknown subcommand {name!r}; expected run, profile or report (robolearn benchmark --help)")
    if any(a in ("-h", "--help") for a in rest):
        print(USAGE.format(tables=", ".join(table_names()) or "none"))
        return 0
    try:
        settings = parse_settings(rest, keys[name])
        return commands[name](settings)
    except (UsageError, ConfigError, FileNotFoundError) as exc:
        return _fail(f"benchmark {name}", str(exc))
    except OSError as exc:  # a folder that cannot be written (permissions, a full disk): one line, not a traceback
        return _fail(f"benchmark {name}", f"{exc.filename or ''}: {exc.strerror or exc}")
    except KeyboardInterrupt:  # before the runs started (while they run, the schedule handles Ctrl-C)
        print(f"robolearn benchmark {name}: interrupted", file=sys.stderr)
        return 130


def parse_settings(args: Sequence[str], keys: dict[str, str]) -> dict[str, str]:
    """``key=value`` arguments as a mapping; an unknown key is named with the valid ones.

    Raises:
        UsageError: an argument without ``=``, an unknown or repeated key.
    """
    settings: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise UsageError(f"{arg!r}: expected key=value with a key of {', '.join(keys)}")
        if key not in keys:
            close = difflib.get_close_matches(key, list(keys), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"{key}: unknown setting{hint}; expected one of {', '.join(keys)}")
        if key in settings:
            raise UsageError(f"{key}: given twice ({settings[key]!r} and {value!r})")
        settings[key] = value
    return settings


def run_command(settings: dict[str, str]) -> int:
    """``benchmark run``: load the table, check everything, run (or list) the runs; print the outcome."""
    table_arg, out = _required(settings, "table", "run"), Path(_required(settings, "out", "run"))
    return _run_table(settings, load_table(table_arg), out, default_seeds=None)


def profile_command(settings: dict[str, str]) -> int:
    """``benchmark profile``: the table's profile runs (:func:`~robolearn.benchmark.table.profile_table`),
    run, resumed or listed as ``benchmark run`` runs a table.
    """
    table_arg, out = _required(settings, "table", "profile"), Path(_required(settings, "out", "profile"))
    try:
        fraction = float(settings.get("fraction", "0.1"))
    except ValueError:
        raise UsageError(f"fraction={settings['fraction']!r}: expected a number in (0, 1]") from None
    table = load_table(table_arg)
    return _run_table(settings, profile_table(table, fraction, warmups(table, out)), out,
                      default_seeds=[table.seeds[0]])


def _run_table(settings: dict[str, str], table: Table, out: Path, default_seeds: list[int] | None) -> int:
    """Run (or with ``dry_run`` list) ``table``'s runs into ``out`` with the shared settings (jobs,
    entries, libs, seeds, order, dry_run, rerun_stale); print the plan or the outcome; the exit status.
    """
    jobs = _integer("jobs", settings.get("jobs", "1"), minimum=1)
    dry_run = _boolean("dry_run", settings.get("dry_run", "false"))
    rerun_stale = _boolean("rerun_stale", settings.get("rerun_stale", "false"))
    seeds = ([_integer("seeds", s, minimum=0) for s in _items(settings, "seeds")] if "seeds" in settings
             else default_seeds)
    result = run_benchmark(
        table, out, jobs=jobs, dry_run=dry_run, rerun_stale=rerun_stale, progress=not dry_run, seeds=seeds,
        composed=composer(table), order=settings.get("order", "seed"),
        entries=_items(settings, "entries") if "entries" in settings else None,
        libs=_items(settings, "libs") if "libs" in settings else None,
    )
    if dry_run:
        _print_plan(result)
        return 0
    return _print_outcome(result, out)


SB3_LEARNING_STARTS = 100
"""Stable-Baselines3's default ``learning_starts`` of SAC."""


def warmups(table: Table, out: Path) -> dict[str, int]:
    """Entry id -> the longest ``learning_starts`` among its libraries, for the off-policy entries:
    robolearn's recipe as composed (its ``algo.learning_starts``), SB3's kwargs or SB3's default.
    """
    composed = composer(table)
    found: dict[str, int] = {}
    for entry in table.entries:
        if entry.algo != "sac":
            continue
        values = [SB3_LEARNING_STARTS]
        for kwargs in (entry.sb3.default, entry.sb3.zoo.kwargs if entry.sb3.zoo else {}):
            if isinstance(kwargs.get("learning_starts"), int):
                values.append(int(kwargs["learning_starts"]))
        if "robolearn" in table.libs:
            run = Run(entry, "robolearn", table.seeds[0], out / entry.id / "robolearn" / f"seed{table.seeds[0]}")
            algo = composed(run).get("algo") or {}
            if isinstance(algo.get("learning_starts"), int):
                values.append(int(algo["learning_starts"]))
        found[entry.id] = max(values)
    return found


def composer(table: Table) -> Callable[[Run], dict[str, Any]]:
    """The whole ``config.json`` a robolearn run of ``table`` would get now from its fresh command
    (:data:`~robolearn.benchmark.schedule.ComposedConfig`): composed with Hydra as ``robolearn train``
    composes it, so the stale check sees every setting (a recipe line deleted, a changed default of the
    algorithm or runner, a defaults entry after ``_self_``), not only those the recipe file writes. A
    setting robolearn gained after a run was made (absent from its ``config.json``) is left out for that
    run where it composes to its default (``task=<task> algo=<algo>`` composed alone): a new setting
    defaults to the behaviour before it, so every finished run does not go stale with each new option.

    One composition per distinct command less its seed and run dir (both are the benchmark's per-run
    keys, not compared), so in practice one per experiment: a composition takes about a second. Hydra
    is imported on the first call only: a table with no done or resumable robolearn run never composes.
    A composition that fails is not tried again: every run of that command gets the same error, which
    names the experiment (not the run: the caller says which runs it concerns).
    """
    cache: dict[tuple[str, ...], dict[str, Any] | TableError] = {}

    def compose(args: Sequence[str], what: str) -> dict[str, Any] | TableError:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from robolearn.cli.commands import compose_config, job_train_config
        from robolearn.cli.config import train_config_to_dict

        try:
            return train_config_to_dict(job_train_config(compose_config("train", list(args)), list(args)))
        except (ConfigError, HydraException, OmegaConfBaseException, ValueError) as exc:
            return TableError(f"{what} cannot be composed to compare its runs with it ({exc})")

    def composed(run: Run) -> dict[str, Any]:
        cmd = command(run, table, RunState.FRESH)
        args = cmd[cmd.index("train") + 1:]  # the overrides after `python -m robolearn.cli train`
        key = tuple(a for a in args if not a.startswith(("seed=", "run_dir=")))
        if key not in cache:
            cache[key] = compose(args, f"experiment {run.entry.experiment}")
        got = cache[key]
        if isinstance(got, TableError):
            raise TableError(str(got))  # a new exception each time: one raised carries its traceback along
        # A setting added to robolearn after the run was made is missing from its config.json; at its
        # default (what a new setting must default to: the behaviour before it) the run trained as a fresh
        # run would, so it is left out of the comparison. Set by the recipe to another value, it is not.
        old = read_run_config(run.run_dir)
        if old is None:
            return got
        have, want = flat_config(old), flat_config(got)
        missing = [k for k in want if k not in have]
        if not missing:
            return got
        plain_key = (f"task={run.entry.task}", f"algo={run.entry.algo}")
        if plain_key not in cache:
            cache[plain_key] = compose(plain_key, f"task {run.entry.task} with algo {run.entry.algo}")
        defaults = cache[plain_key]
        if isinstance(defaults, TableError):
            return got  # no defaults to tell a new setting from a recipe's: every missing key is compared
        default = flat_config(defaults)
        return _without(got, [k for k in missing if k in default and same_value(want[k], default[k])])

    return composed


def _without(config: dict[str, Any], dotted: Sequence[str]) -> dict[str, Any]:
    """A copy of nested ``config`` less the dotted keys ``dotted`` (as :func:`flat_config` names them)."""
    out = json.loads(json.dumps(config))
    for key in dotted:
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return out


class RecipeCheck:
    """For the report: a finished run's differences from what a table's command gives it now (as
    ``benchmark run``'s stale check finds them), ``None`` when there are none or they cannot be found
    (a recipe that no longer composes, SB3 missing: the run is reported, and :meth:`warnings` says so).
    """

    def __init__(self, table: Table, out: Path) -> None:
        self._runs = {run.run_dir: run for run in plan(table, out)}
        self._composed = composer(table)
        self._sb3_wanted: SB3Settings = {}  # an SB3 configuration's seeds share what they are compared with
        self._unchecked: dict[str, list[str]] = {}  # why -> the runs it kept from being checked

    def __call__(self, path: Path) -> str | None:
        """The differences of the run in ``path`` (``key: was X, now Y``, joined by ``; ``), or ``None``."""
        run = self._runs.get(path)
        if run is None:
            return None
        try:
            differences = recipe_differences(run, self._composed, self._sb3_wanted)
        except (TableError, ImportError) as exc:
            self._unchecked.setdefault(str(exc), []).append(run.name)
            return None
        return "; ".join(map(str, differences)) if differences else None

    def warnings(self) -> list[str]:
        """One line per distinct reason a run was not checked, with the runs it concerns (a missing
        recipe or SB3 stops every run of an entry alike: said once, not once per seed).
        """
        return [f"warning: not checked for a changed recipe, reported as they are: {', '.join(names)} ({why})"
                for why, names in self._unchecked.items()]


def report_command(settings: dict[str, str]) -> int:
    """``benchmark report``: the results page from ``<out>/table.json`` and the run directories."""
    out = Path(_required(settings, "out", "report"))
    path = out / TABLE_FILE
    if not path.is_file():
        raise UsageError(f"out={out}: no {TABLE_FILE}; is it the out folder of a `robolearn benchmark run`?")
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: cannot be read as JSON ({exc})") from None
    table = table_from_dict(data, str(path), check_files=False)
    results, figures = Path(settings.get("results", "RESULTS.md")), Path(settings.get("figures", "docs/results"))
    # Checked before the minutes of bootstrap: a path that cannot be written is a one-line error, not a traceback.
    if results.is_dir():
        raise UsageError(f"results={results}: is a folder; expected the markdown file to write")
    _writable_folder("results", results, results.parent)
    _writable_folder("figures", figures, figures)
    from robolearn.benchmark.report import write_report  # matplotlib and rliable only when reporting

    # rliable logs one INFO line per interval through absl (a few per entry); the page has the intervals.
    logging.getLogger("absl").setLevel(logging.WARNING)
    check = RecipeCheck(table, out)
    # The table as its YAML mapping (zoo_reference.return spelt as in the table file).
    profile = Path(settings["profile"]) if "profile" in settings else None
    if profile is not None and not (profile / TABLE_FILE).is_file():
        raise UsageError(f"profile={profile}: no {TABLE_FILE}; is it the out folder of a `robolearn benchmark profile`?")
    written = write_report(table.to_dict(), out, results, figures, stale=check, profile=profile)
    for line in check.warnings():
        print(line, file=sys.stderr)
    print(f"wrote {written}")
    return 0


def _print_plan(result: BenchmarkResult) -> None:
    """The dry run's table: every run with its state and directory (``stale``: set aside, then fresh)."""
    stale = {s.run.run_dir: s for s in result.stale}
    rows = [(r.entry.id, r.lib, str(r.seed), "stale" if r.run_dir in stale else s.value, str(r.run_dir))
            for r, s in result.planned]
    header = ("entry", "lib", "seed", "state", "run dir")
    widths = [max(len(x) for x in column) for column in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    counts = {state: sum(1 for r, s in result.planned if s is state and r.run_dir not in stale) for state in RunState}
    print(f"{len(result.planned)} runs: " + ", ".join(f"{n} {state.value}" for state, n in counts.items())
          + (f", {len(stale)} stale (set aside as seed<S>.stale-<UTC time>, then fresh)" if stale else ""))
    for item in result.stale:
        print(f"stale: {item}")
    for run in result.short:
        print(f"short: {run.run_dir} finished short of the budget without a checkpoint: set aside as "
              f"{run.run_dir.name}.short-<UTC time>, then fresh")
    for run in result.unreadable:
        print(f"unreadable: {run.run_dir / 'summary.json'} cannot be read and there is no checkpoint: set aside "
              f"as {run.run_dir.name}.unreadable-<UTC time>, then fresh")
    _print_elsewhere(result, sys.stdout)
    _print_unknown(result)


def _print_outcome(result: BenchmarkResult, out: Path) -> int:
    """One line for what ran, one per failed run; the exit status."""
    skipped = sum(1 for _, s in result.planned if s is RunState.DONE)
    stopped = f", {len(result.stopped)} stopped by the interrupt" if result.interrupted else ""
    print(f"{len(result.records)} runs executed, {skipped} already done, {len(result.failed)} failed{stopped} "
          f"({out / 'runs.jsonl'})")
    for item in result.stale:
        print(f"rerun (stale, its folder set aside as {result.aside[item.run.run_dir]}): {item}")
    for run in result.short:
        print(f"rerun (finished short of the budget without a checkpoint, its folder set aside as "
              f"{result.aside[run.run_dir]}): {run.run_dir}")
    for run in result.unreadable:
        print(f"rerun ({run.run_dir / 'summary.json'} cannot be read and there is no checkpoint, its folder set "
              f"aside as {result.aside[run.run_dir]}): {run.run_dir}")
    _print_elsewhere(result)
    _print_unknown(result)
    for record in result.failed:
        print(f"failed: {record.entry}/{record.lib}/seed{record.seed} exited with {record.returncode}; "
              f"see {Path(record.run_dir) / 'benchmark.log'}", file=sys.stderr)
    if result.interrupted:
        # The stopped runs are not failures: they continue from their last checkpoint.
        print("interrupted: run the same command again to resume", file=sys.stderr)
    return result.exit_status


def _print_elsewhere(result: BenchmarkResult, file: TextIO = sys.stderr) -> None:
    """One line per stale run outside the selection (left as it is; the report leaves it out)."""
    for item in result.stale_elsewhere:
        print(f"warning: stale, not selected, left as it is (the report leaves it out): {item}", file=file)


def _print_unknown(result: BenchmarkResult) -> None:
    """One line for the done or resumable runs without a readable config.json (kept, recipe unchecked)."""
    if result.unknown_recipe:
        names = ", ".join(r.name for r in result.unknown_recipe)
        print(f"warning: unknown recipe (no readable config.json), kept as they are: {names}", file=sys.stderr)


def _writable_folder(key: str, value: Path, folder: Path) -> None:
    """Refuse ``key=value`` when ``folder`` (to be created if missing) is, or lies under, a file."""
    for part in (folder, *folder.parents):
        if part.exists():
            if not part.is_dir():
                raise UsageError(f"{key}={value}: {part} is a file; expected a folder there")
            return


def _required(settings: dict[str, str], key: str, command: str) -> str:
    if not settings.get(key):
        raise UsageError(f"missing {key}=<{RUN_KEYS.get(key) or REPORT_KEYS[key]}> (robolearn benchmark {command} --help)")
    return settings[key]


def _items(settings: dict[str, str], key: str) -> list[str]:
    """A comma-separated setting as its non-empty items; Hydra's list form ``[a,b]`` reads the same,
    since ``train`` takes lists that way and a user types them so here too.
    """
    text = settings[key].strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise UsageError(f"{key}={settings[key]!r}: expected comma-separated values ({RUN_KEYS[key]})")
    return items


def _integer(key: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{key}={text!r}: expected an integer >= {minimum}") from None
    if value < minimum:
        raise UsageError(f"{key}={text}: expected an integer >= {minimum}")
    return value


def _boolean(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise UsageError(f"{key}={text!r}: expected true or false")


def _fail(command: str, message: str) -> int:
    print(f"robolearn {command}: error: {message}", file=sys.stderr)
    return 2


__all__ = ["RecipeCheck", "composer", "main", "parse_settings", "report_command", "run_command"]

if __name__ == "__main__":
    sys.exit(main())
