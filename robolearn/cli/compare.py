"""``robolearn compare``: compare methods over seeds from their run directories.

Everything is read, grouped, checked and computed, and the report rendered in memory, before the
first file is written; a bad argument is an error naming it and nothing is written.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from robolearn.utils.config import ConfigError

EPILOG = """\
runs are run directories (config.json + metrics.csv), folders of them (a `train -m` sweep),
or NAME=DIR[,DIR...] groups. Unnamed runs are grouped by --group-by keys, or by default by
the algorithm's name and the config keys that differ between them (seed, paths and logging
settings left out); the runs of a group are its seeds.

examples:
  robolearn compare runs/sac_sweep runs/ppo_sweep --metric eval/return --out cmp
  robolearn compare wsrl=runs/w0,runs/w1,runs/w2 rlpd=runs/r0,runs/r1,runs/r2 --at 10000,50000
  robolearn compare runs/sweep --group-by algo.name,algo.utd --metric eval/success_rate
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand to the ``robolearn`` parser."""
    p = commands.add_parser(
        "compare",
        help="compare runs over seeds: IQM curves with bootstrap CIs, a table, probability of improvement",
        description="Compare methods over seeds: IQM curves with 95% stratified-bootstrap intervals, a table of "
        "IQM at fixed steps, final IQM/mean/median, probability of improvement for every pair, and PNG plots "
        "(rliable; pip install 'robolearn[compare]'). Writes comparison.md, comparison.json and the PNGs to --out.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directory, folder of runs, or NAME=DIR[,DIR...]")
    p.add_argument("--metric", default="eval/return", help="metrics.csv column to compare (default: eval/return)")
    p.add_argument("--out", type=Path, default=Path("comparison"), help="output folder (default: ./comparison)")
    p.add_argument("--group-by", type=_keys, default=None, metavar="KEY[,KEY]",
                   help="group unnamed runs by these dotted config.json keys (e.g. algo.name)")
    p.add_argument("--at", type=_steps, default=None, metavar="STEP[,STEP]",
                   help="steps of the table (default: a quarter, half, three quarters and the final step)")
    p.add_argument("--x", default=None, metavar="COLUMN",
                   help="step-axis column (default: the step column, counted in the runs' unit)")
    p.add_argument("--phase", default=None, help="keep only metrics.csv rows whose phase column is this value")
    p.add_argument("--align", choices=("last", "linear"), default="last",
                   help="read curves between evaluations as the last value (default) or by linear interpolation")
    p.add_argument("--points", type=int, default=50,
                   help="grid steps when runs were evaluated at different steps (default: 50)")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples per interval (default: 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: 0)")
    p.set_defaults(func=run_compare)


def _keys(text: str) -> list[str]:
    """Parse ``a.b,c`` (an argparse type)."""
    keys = [k.strip() for k in text.split(",")]
    if not all(keys):
        raise argparse.ArgumentTypeError(f"expected dotted config keys separated by commas, got {text!r}")
    return keys


def _steps(text: str) -> list[float]:
    """Parse ``10000,50000`` (an argparse type)."""
    try:
        steps = [float(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected steps separated by commas, got {text!r}") from None
    if any(s < 0 for s in steps):
        raise argparse.ArgumentTypeError(f"expected steps >= 0, got {text!r}")
    return steps


def run_compare(args: argparse.Namespace) -> int:
    """Run ``robolearn compare`` (see :func:`add_parser`); 2 on bad input, with nothing written."""
    from robolearn.analysis.compare import compare, report_files, write_files
    from robolearn.analysis.runs import make_groups, parse_group_args

    # rliable logs one INFO line per interval through absl; the summary below says what matters.
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out: {args.out} exists and is not a folder")
        groups = make_groups(parse_group_args(args.runs), args.metric, group_by=args.group_by, x=args.x,
                             phase=args.phase)
        result = compare(groups, args.metric, at=args.at, align=args.align, points=args.points,
                         reps=args.reps, seed=args.seed)
        files = report_files(result)
    except (ValueError, FileNotFoundError, ConfigError, ImportError) as exc:
        print(f"robolearn compare: error: {exc}", file=sys.stderr)
        return 2
    written = write_files(args.out, files)
    width = max(len(m.name) for m in result.methods)
    for m in result.methods:
        f = m.final["iqm"]
        print(f"{m.name:<{width}}  {len(m.runs)} runs  final IQM {f.value:.4g} [{f.low:.4g}, {f.high:.4g}]")
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0
