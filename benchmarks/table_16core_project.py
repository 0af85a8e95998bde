"""Project the published table's wall-clock on a 16-core machine from a short measurement there.

``benchmarks/table_16core.sh`` runs 16 of the table's runs at once on the lent machine for a few minutes
(one per core, one thread each: the load ``benchmark run jobs=16`` puts on it). This reads their
``metrics.csv`` files and a table directory finished elsewhere (this workplace's 2-core VM) and
estimates every run's time on the 16-core machine:

- an (entry, library) pair measured on both machines: its runs' times on the VM (training and evaluation
  seconds from their ``summary.json``) times ``k``, the ratio of
  the training seconds the two machines took to reach the same env step (the last one both logged);
- a pair measured on the VM only: the same with the median ``k`` of its library's pairs;
- a pair measured on the 16-core machine only: its training seconds extrapolated to the entry's budget
  at the rate between its last two logged points, times the median (training + evaluation) / training of the VM's runs of its library;
- a pair measured on neither: the SB3 library's other configuration of the same entry, if measured.

The table's wall-clock at ``jobs`` slots is then simulated twice: in :func:`robolearn.benchmark.schedule.plan`'s
order (what ``benchmark run`` does) and longest-first (the best order for that many slots). The longest
run bounds both from below.

    python benchmarks/table_16core_project.py --device /work/bench/dev19 --table-out /work/bench/table17
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import statistics
from collections import defaultdict
from pathlib import Path

from robolearn.benchmark.schedule import plan
from robolearn.benchmark.table import load_table

Pair = tuple[str, str]


def train_curve(metrics: Path) -> dict[float, float]:
    """Env steps -> training seconds, from a run's ``metrics.csv`` (rows that log both)."""
    out: dict[float, float] = {}
    if not metrics.is_file():
        return out
    with metrics.open() as f:
        for row in csv.DictReader(f):
            steps, secs = row.get("env_steps"), row.get("time/train_s")
            if steps and secs:
                out[float(steps)] = float(secs)
    return out


def kind(lib: str) -> str:
    """The library: its runs' per-step cost moves alike between machines (the Zoo's PPO settings, 256-wide
    networks and 5-20 epochs of minibatches of 32-64, do not move like SB3's defaults)."""
    return lib


def run_seconds(summary: dict) -> tuple[float, float]:
    """(training seconds, training + evaluation seconds) of a finished run, from its ``summary.json``.

    Not ``runs.jsonl``'s ``wall_s``: for a run resumed after an interruption that is the last part only.
    """
    train = float(summary["train_time_s"])
    if "eval_time_s" in summary:  # the SB3 side
        return train, train + float(summary["eval_time_s"])
    return train, max(train, float(summary.get("wall_time_s", train)))


def vm_runs(table_out: Path, budget: dict[str, int]) -> tuple[dict[Pair, list[float]], dict[str, float]]:
    """Seconds of each finished run of the VM's table by pair, and the median (total / training seconds)
    of each library's runs (evaluations, checkpoints)."""
    totals: dict[Pair, list[float]] = defaultdict(list)
    ratios: dict[str, list[float]] = defaultdict(list)
    for summary_path in table_out.glob("*/*/seed[0-9]*/summary.json"):
        run = summary_path.parent
        entry, lib = run.parent.parent.name, run.parent.name
        if not run.name[4:].isdigit() or entry not in budget:
            continue  # a set-aside folder (seed0.stale-...), or an entry no longer in the table
        summary = json.loads(summary_path.read_text())
        if float(summary.get("env_steps", 0)) < budget[entry]:
            continue
        train, total = run_seconds(summary)
        totals[(entry, lib)].append(total)
        ratios[kind(lib)].append(total / train)
        ratios["any"].append(total / train)  # for a library with no finished run on the VM yet
    return totals, {k: statistics.median(v) for k, v in ratios.items()}


def device_curves(device: Path) -> dict[Pair, dict[float, float]]:
    """The seed-0 training curve of each pair the 16-core measurement ran."""
    curves = {}
    for metrics in device.glob("*/*/*/seed0/metrics.csv"):
        lib, entry = metrics.parent.parent.name, metrics.parent.parent.parent.name
        curve = train_curve(metrics)
        if curve:
            curves[(entry, lib)] = curve
    return curves


def extrapolate(curve: dict[float, float], budget: float) -> float:
    """Training seconds at ``budget`` env steps: the rate between the last two logged points carried on
    (a SAC run's first steps, before learning starts, are cheaper than the rest); the mean rate from
    the start where only one point exists."""
    steps = sorted(curve)
    last = steps[-1]
    if len(steps) == 1:
        return curve[last] * budget / last
    prev = steps[-2]
    return curve[last] + (budget - last) * (curve[last] - curve[prev]) / (last - prev)


def simulate(durations: list[float], jobs: int) -> float:
    """Wall-clock of running ``durations`` in this order on ``jobs`` slots, each starting when a slot frees."""
    slots = [0.0] * jobs
    heapq.heapify(slots)
    end = 0.0
    for d in durations:
        start = heapq.heappop(slots)
        heapq.heappush(slots, start + d)
        end = max(end, start + d)
    return end


def main() -> None:
    """Print the calibration, each pair's projected run time and the table's projected wall-clock."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", type=Path, required=True, help="the extracted runs.tgz of table_16core.sh")
    ap.add_argument("--table-out", type=Path, required=True, help="a table directory finished on the VM")
    ap.add_argument("--table", default="table")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--libs", nargs="+", help="project only these libraries' runs (default: the table's)")
    args = ap.parse_args()

    table = load_table(args.table)
    budget = {e.id: e.env_steps for e in table.entries}
    vm_seconds, overhead = vm_runs(args.table_out, budget)
    dev = device_curves(args.device)

    ks: dict[Pair, float] = {}
    print("calibration: training seconds to the same env step, 16-core machine / VM (seed 0)")
    for pair, curve in sorted(dev.items()):
        vm_curve = train_curve(args.table_out / pair[0] / pair[1] / "seed0" / "metrics.csv")
        common = sorted(set(curve) & set(vm_curve))
        if common:
            s = common[-1]
            ks[pair] = curve[s] / vm_curve[s]
            print(f"  {pair[0]:22s} {pair[1]:12s} at {s:>9,.0f} steps: {curve[s]:7.1f} s / {vm_curve[s]:7.1f} s = {ks[pair]:.2f}")
    k_kind = {
        k: statistics.median([v for p, v in ks.items() if kind(p[1]) == k]) for k in {kind(p[1]) for p in ks}
    }
    print("  median k:", {k: round(v, 2) for k, v in k_kind.items()}, " VM (training + evaluation) / training:", {k: round(v, 3) for k, v in overhead.items()})

    per_pair: dict[Pair, tuple[float, str]] = {}
    for e in table.entries:
        for lib in e.libs(table.libs):
            pair = (e.id, lib)
            if pair in vm_seconds:
                k = ks.get(pair, k_kind[kind(lib)])
                per_pair[pair] = (statistics.median(vm_seconds[pair]) * k, "VM x k" + ("" if pair in ks else " (the median of its library)"))
            elif pair in dev:
                last = max(dev[pair])
                per_pair[pair] = (extrapolate(dev[pair], budget[e.id]) * overhead.get(kind(lib), overhead.get("any", 1.0)), f"measured to {last:,.0f} steps, extrapolated")
    for e in table.entries:  # neither: the same entry's other SB3 configuration
        for lib in e.libs(table.libs):
            pair = (e.id, lib)
            if pair not in per_pair and lib != "robolearn":
                other = (e.id, "sb3_default" if lib == "sb3_zoo" else "sb3_zoo")
                if other in per_pair:
                    per_pair[pair] = (per_pair[other][0], f"as {other[1]}")

    runs = plan(table, args.table_out, libs=args.libs)
    missing = sorted({(r.entry.id, r.lib) for r in runs} - set(per_pair))
    durations = [per_pair[(r.entry.id, r.lib)][0] for r in runs if (r.entry.id, r.lib) in per_pair]
    print("\nprojected run time on the 16-core machine (one run; each pair's seeds alike)")
    shown = {(r.entry.id, r.lib) for r in runs}
    for pair, (secs, how) in sorted(per_pair.items(), key=lambda kv: -kv[1][0]):
        if pair not in shown:
            continue
        print(f"  {pair[0]:22s} {pair[1]:12s} {secs / 60:6.1f} min   {how}")
    total = sum(durations)
    print(f"\n{len(durations)} runs projected ({len(missing)} pairs without any figure: {missing})")
    print(f"  run-hours on the 16-core machine: {total / 3600:.1f}; / {args.jobs} slots = {total / args.jobs / 3600:.2f} h")
    print(f"  longest run: {max(durations) / 60:.0f} min")
    print(f"  jobs={args.jobs}, plan order: {simulate(durations, args.jobs) / 3600:.2f} h")
    print(f"  jobs={args.jobs}, longest first: {simulate(sorted(durations, reverse=True), args.jobs) / 3600:.2f} h")


if __name__ == "__main__":
    main()
