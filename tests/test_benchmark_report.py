"""``robolearn.benchmark.report``: RESULTS.md and the figures from synthetic run directories.

The run directories follow the issue 17 contract (``<out>/<entry>/<lib>/seed<S>/`` with
``config.json``, a ``metrics.csv`` written by the real Logger and ``summary.json``), with returns and
training seconds chosen so that every figure on the page can be worked out by hand (below).
"""

from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path
from typing import Any

import pytest

from robolearn.benchmark.report import write_report
from robolearn.benchmark.table import table_from_dict
from robolearn.logging import Logger

REPS = 200  # enough for a stable interval on three runs, fast on a loaded machine
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

TABLE: dict[str, Any] = {
    "name": "synthetic",
    "seeds": [0, 1, 2],
    "libs": ["robolearn", "sb3_default", "sb3_zoo"],
    "eval_episodes": 10,
    "entries": [
        {
            "id": "alpha_ppo", "task": "Hopper", "algo": "ppo", "experiment": "hopper_ppo",
            "env_steps": 4000, "eval_every": 1000, "thresholds": [100, 300],
            "sb3": {"n_envs": 1, "default": {}, "gymnasium": "Hopper-v5",
                    "zoo": {"source": "zoo ppo.yml Hopper-v3", "n_envs": 1, "normalize": True, "kwargs": {}}},
            "zoo_reference": {"return": 380.0, "env_steps": 4000, "source": "zoo benchmark.md"},
        },
        {
            # No Zoo hyperparameters: no sb3_zoo runs, though the table's libs list it.
            "id": "beta_sac", "task": "Reacher", "algo": "sac", "experiment": "reacher_sac",
            "env_steps": 3000, "eval_every": 1000, "thresholds": [50],
            "sb3": {"n_envs": 1, "default": {}, "zoo": None},
            "zoo_reference": None,
        },
    ],
}

# entry -> lib -> (training seconds per env step, {seed: returns at the evaluations}).
RUNS: dict[str, dict[str, tuple[float, dict[int, list[float]]]]] = {
    "alpha_ppo": {
        "robolearn": (0.01, {0: [50, 150, 320, 400], 1: [80, 120, 250, 350], 2: [110, 200, 310, 500]}),
        "sb3_default": (0.1, {0: [20, 60, 110, 200], 1: [30, 90, 150, 310], 2: [10, 40, 80, 120]}),
        "sb3_zoo": (0.05, {0: [60, 140, 220, 290], 1: [70, 160, 260, 305], 2: [90, 130, 300, 330]}),
    },
    "beta_sac": {
        # robolearn seed 1 is unfinished (written below without a summary); sb3_default seed 2 is missing.
        "robolearn": (0.02, {0: [10, 40, 60], 2: [20, 55, 70]}),
        "sb3_default": (0.01, {0: [30, 55, 90], 1: [40, 60, 100]}),
    },
}


VERSIONS = {"python": "3.11.7", "torch": "2.13.0+cpu", "mujoco": "4.0.0", "stable_baselines3": "2.9.9",
            "robolearn": "0.1.0"}
# Where the runs ran, as the schedule records it: seeds 0 and 1 on one machine, seed 2 on another
# with a newer torch and uncommitted changes.
PROVENANCE: list[dict[str, Any]] = [
    {"machine": {"cpu": "AMD EPYC", "logical_cores": 2, "platform": "Linux-6.1-x86_64"}, "versions": VERSIONS,
     "git_commit": "0123456789abcdef0123", "git_dirty": False},
    {"machine": {"cpu": "AMD EPYC", "logical_cores": 2, "platform": "Linux-6.1-x86_64"}, "versions": VERSIONS,
     "git_commit": "0123456789abcdef0123", "git_dirty": False},
    {"machine": {"cpu": "Intel Xeon", "logical_cores": 16, "platform": "Linux-6.2-x86_64"},
     "versions": {**VERSIONS, "torch": "2.14.0"}, "git_commit": "0123456789abcdef0123", "git_dirty": True},
]


def seconds_per_step(lib_rate: float, seed: int) -> float:
    """Seed S of a lib trains at its lib's rate x (1 + S / 10): the seeds' clocks differ, so the median
    seconds to a threshold need not belong to the seed with the median steps."""
    return lib_rate * (1 + seed / 10)


UPDATE_SHARE = 0.25
"""The part of robolearn's training seconds its synthetic runs spent in updates (SB3's record none)."""


def write_run(path: Path, lib: str, seed: int, per_step: float, returns: list[float], *, finished: bool = True) -> None:
    """A run directory as a runner writes it: rows every 500 env steps, evaluations every 1000."""
    path.mkdir(parents=True)
    config: dict[str, Any] = {"task": "Hopper", "seed": seed, "algo": {"name": "ppo"}}
    if lib != "robolearn":
        config.update(lib=lib, sb3_kwargs={}, sb3_version="2.9.9", n_envs=1)
    (path / "config.json").write_text(json.dumps(config))
    last = 1000 * len(returns)
    with Logger(path, tensorboard=False, console=False) as logger:
        for step in range(500, last + 1, 500):
            row = {"env_steps": float(step), "time/train_s": step * per_step,
                   "time/env_steps_per_s": 1.0 / per_step}
            if lib == "robolearn":  # the profile: robolearn's runs record their update seconds, SB3's here do not
                row["time/update_s"] = UPDATE_SHARE * step * per_step
            if step % 1000 == 0:
                row["eval/return"] = float(returns[step // 1000 - 1])
            logger.log(row, step=step)
    if finished:
        summary: dict[str, Any] = {"env_steps": last, "train_time_s": last * per_step,
                                   "final_eval_return": returns[-1], "best_eval_return": max(returns)}
        if lib == "robolearn":  # SB3 summaries leave the rate out: the report divides steps by seconds
            summary["env_steps_per_s"] = 1.0 / per_step
        (path / "summary.json").write_text(json.dumps(summary))


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench") / "out"
    for entry, libs in RUNS.items():
        for lib, (per_step, seeds) in libs.items():
            for seed, returns in seeds.items():
                write_run(root / entry / lib / f"seed{seed}", lib, seed, seconds_per_step(per_step, seed), returns)
    write_run(root / "beta_sac" / "robolearn" / "seed1", "robolearn", 1, 0.02, [90, 95], finished=False)
    (root / "table.json").write_text(json.dumps(TABLE))
    # runs.jsonl as robolearn.benchmark.schedule writes it (RunRecord.to_dict).
    lines = [{"entry": "alpha_ppo", "lib": "robolearn", "seed": s, "run_dir": "x", "state": "fresh",
              "returncode": 0, "wall_s": 60.0, "load_before": [float(s + 1), 1.0, 1.0],
              "load_after": [4.0, 1.0, 1.0], "started": f"2026-11-26T0{s}:00:00Z", **PROVENANCE[s]} for s in range(3)]
    (root / "runs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


@pytest.fixture(scope="module")
def page(out: Path) -> tuple[Path, str]:
    md = write_report(TABLE, out, out.parent / "site" / "RESULTS.md", out.parent / "site" / "docs" / "results",
                      reps=REPS)
    return md, md.read_text()


def row(text: str, entry: str, lib: str) -> list[str]:
    """The summary row of ``entry`` x ``lib``, split into its cells."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if cells[:2] == [entry, lib]:
            return cells
    raise AssertionError(f"no row {entry} | {lib} in:\n{text}")


def test_final_iqm_and_interval(page: tuple[Path, str]) -> None:
    _, text = page
    # IQM of three runs cuts floor(3/4) = 0 from each end: the mean. The percentile interval of a
    # bootstrap over the runs lies within their lowest and highest final.
    cells = row(text, "alpha_ppo", "robolearn")
    point, interval = cells[3].split(" [")
    assert point == "416.7"  # (400 + 350 + 500) / 3
    low, high = (float(v) for v in interval.rstrip("]").split(", "))
    assert 350 <= low < 416.7 < high <= 500
    assert row(text, "alpha_ppo", "sb3_default")[3].startswith("210.0 [")  # (200 + 310 + 120) / 3
    assert row(text, "alpha_ppo", "sb3_zoo")[3].startswith("308.3 [")  # (290 + 305 + 330) / 3
    # beta_sac robolearn: the unfinished seed 1 does not count; two runs -> their mean.
    assert row(text, "beta_sac", "robolearn")[3].startswith("65.0 [")


def test_steps_and_seconds_to_threshold(page: tuple[Path, str]) -> None:
    _, text = page
    ours = row(text, "alpha_ppo", "robolearn")
    # Seconds per step 0.01, 0.011, 0.012. >=100 first reached at 2000, 2000, 1000 steps (20, 22, 12 s);
    # >=300 at 3000, 4000, 3000 steps (30, 44, 36 s).
    assert ours[4] == "≥100: 2,000 (3/3)<br>≥300: 3,000 (3/3)"
    assert ours[5] == "≥100: 20.0 s (3/3)<br>≥300: 36.0 s (3/3)"
    assert ours[6] == "91"  # median of the summaries' 100, 90.9, 83.3 env steps per training second
    default = row(text, "alpha_ppo", "sb3_default")
    # 0.1, 0.11, 0.12 s per step: >=100 at 3000, 3000, 4000 steps (300, 330, 480 s); >=300 reached by
    # seed 1 only: the median of (never, 4000, never) is never.
    assert default[4] == "≥100: 3,000 (3/3)<br>≥300: not reached (1/3)"
    assert default[5] == "≥100: 330 s (3/3)<br>≥300: not reached (1/3)"
    assert default[6] == "9"  # no rate in the SB3 summaries: 4000 steps / 400, 440, 480 s -> median 9.09
    zoo = row(text, "alpha_ppo", "sb3_zoo")
    # 0.05, 0.055, 0.06 s per step: >=100 at 2000 steps each (100, 110, 120 s); >=300 at (never, 4000,
    # 3000) steps, (never, 220, 180) s: the middle value, "never" counting as the largest.
    assert zoo[4] == "≥100: 2,000 (3/3)<br>≥300: 4,000 (2/3)"
    assert zoo[5] == "≥100: 110 s (3/3)<br>≥300: 220 s (2/3)"
    beta = row(text, "beta_sac", "robolearn")
    # Seeds 0 and 2 (0.02 and 0.024 s per step) reach 50 at 3000 steps (60 s) and 2000 steps (48 s).
    assert beta[4] == "≥50: 2,500 (2/2)"
    assert beta[5] == "≥50: 54.0 s (2/2)"


def test_ratio_and_verdict(page: tuple[Path, str]) -> None:
    _, text = page
    ours = row(text, "alpha_ppo", "robolearn")
    # SB3 best is sb3_zoo (final IQM 308.3 > 210.0): 110 s / 20 s and 220 s / 36 s; IQM 416.7 >= 308.3.
    assert ours[7] == "≥100: 5.5x<br>≥300: 6.1x (vs sb3_zoo)"
    # Met, but robolearn's seed 2 ran on another CPU (PROVENANCE): the verdict carries it.
    assert ours[8] == "met, runs on 2 machines"
    assert ours[9] == "380.0 @ 4,000 (robolearn +36.7)"
    beta = row(text, "beta_sac", "robolearn")
    assert beta[7] == "≥50: 0.4x (vs sb3_default)"  # median(20, 22) s / 54 s
    assert beta[8] == "missed, incomplete (robolearn 2/3, sb3_default 2/3 seeds)"
    assert beta[9] == "—"
    # Only the robolearn row carries the comparison.
    assert row(text, "alpha_ppo", "sb3_zoo")[7:9] == ["", ""]


def test_why_takes_each_time_ratio_apart_and_profiles_the_seconds(page: tuple[Path, str]) -> None:
    _, text = page
    alpha = text.split("## alpha_ppo")[1].split("## beta_sac")[0]
    # >=100 against sb3_zoo (the soonest there): 110 s over 20 s = 5.50x; both at 2,000 env steps
    # (1.00x), so all of it is seconds per env step: 110 s / 2,000 = 55,000 µs against 20 s / 2,000.
    assert "- ≥100, sb3_zoo / robolearn = 5.50x: 1.00x the env steps (2,000 vs 2,000) x 5.50x the " \
           "training seconds per env step (55,000 µs vs 10,000 µs)" in alpha
    # >=300: 220 s / 36 s = 6.11x = 4,000 / 3,000 env steps (1.33x) x 55,000 / 12,000 µs (4.58x).
    assert "- ≥300, sb3_zoo / robolearn = 6.11x: 1.33x the env steps (4,000 vs 3,000) x 4.58x the " \
           "training seconds per env step (55,000 µs vs 12,000 µs)" in alpha
    # Second halves (2,000 -> 4,000 env steps): robolearn's seeds at 10,000 / 11,000 / 12,000 µs per
    # env step, a quarter in updates: medians 8,250 collecting and 2,750 updating. SB3's runs recorded
    # no split and there is no profile folder: SB3 is not in the line.
    assert ("- training seconds per env step, second half of each run, median over seeds: robolearn 8,250 µs "
            "collecting + 2,750 µs updating (25% updates)\n") in alpha
    beta = text.split("## beta_sac")[1]
    # beta: sb3_default's seeds reached 50 at 2,000 steps (20 and 22 s: median 21 s) against robolearn's
    # median 2,500 steps and 54 s: 0.39x = 0.80x the steps x 0.49x the seconds per step (10,500 / 21,600 µs).
    assert "- ≥50, sb3_default / robolearn = 0.39x: 0.80x the env steps (2,000 vs 2,500) x 0.49x the training " \
           "seconds per env step (10,500 µs vs 21,600 µs)" in beta


def test_a_profile_folder_fills_the_split_the_table_runs_lack(out: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    # One finished profile run of sb3_zoo: rows every 500 env steps to 4,000, 40 ms a step, 30 of them
    # updating; its second half (2,000 -> 4,000) gives 10,000 µs collecting + 30,000 updating (75%).
    run = profile / "alpha_ppo" / "sb3_zoo" / "seed0"
    run.mkdir(parents=True)
    with Logger(run, tensorboard=False, console=False) as logger:
        for step in range(500, 4001, 500):
            logger.log({"env_steps": float(step), "time/train_s": 0.04 * step, "time/update_s": 0.03 * step},
                       step=step)
    (run / "summary.json").write_text(json.dumps({"env_steps": 4000}))
    # A set-aside run of sb3_default is not read.
    aside = profile / "alpha_ppo" / "sb3_default" / "seed0.stale-20261127T000000Z"
    shutil.copytree(run, aside)
    text = write_report(TABLE, out, tmp_path / "site" / "RESULTS.md", tmp_path / "site" / "fig", reps=REPS,
                        profile=profile).read_text()
    alpha = text.split("## alpha_ppo")[1].split("## beta_sac")[0]
    assert ("robolearn 8,250 µs collecting + 2,750 µs updating (25% updates); sb3_zoo (profile run) "
            "10,000 µs collecting + 30,000 µs updating (75% updates)\n") in alpha
    assert "sb3_default (profile run)" not in text


def test_missing_and_unfinished_runs_are_shown(page: tuple[Path, str]) -> None:
    _, text = page
    assert row(text, "beta_sac", "robolearn")[2] == "2/3"
    assert row(text, "beta_sac", "sb3_default")[2] == "2/3"
    assert row(text, "alpha_ppo", "sb3_default")[2] == "3/3"
    assert "- robolearn seed 1: unfinished (no summary.json yet)" in text
    assert "- sb3_default seed 2: missing" in text
    # An entry without Zoo hyperparameters has no sb3_zoo row.
    assert not any(line.startswith("| beta_sac | sb3_zoo |") for line in text.splitlines())


def test_header(page: tuple[Path, str]) -> None:
    _, text = page
    assert text.startswith("# Benchmark results: synthetic\n")
    assert ("- Commit: `0123456789ab`, `0123456789ab` (with uncommitted changes) (recorded by the runs)\n"
            "- Machine: AMD EPYC, 2 logical cores, Linux-6.1-x86_64; Intel Xeon, 16 logical cores, Linux-6.2-x86_64 "
            "(recorded by the runs)\n"
            "- Versions: Python 3.11.7, torch 2.13.0+cpu, 2.14.0, mujoco 4.0.0, Stable-Baselines3 2.9.9, "
            "robolearn 0.1.0 (recorded by the runs)\n") in text
    assert ("1-minute load average when runs started: median 2.00, min 1.00, max 3.00 over 3 runs; "
            "1-minute load average when runs ended: median 4.00, min 4.00, max 4.00 over 3 runs; "
            "0.05 h of run wall-clock in total over 3 runs; "  # 3 x 60 s
            "runs started from 2026-11-26T00:00:00Z to 2026-11-26T02:00:00Z") in text


def test_header_without_recorded_provenance_says_it_is_this_machines(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_run(out / "alpha_ppo" / "robolearn" / "seed0", "robolearn", 0, 0.01, [50, 150, 320, 400])
    text = write_report({**TABLE, "seeds": [0]}, out, tmp_path / "R.md", tmp_path / "fig", reps=REPS).read_text()
    machine = next(line for line in text.splitlines() if line.startswith("- Machine: "))
    assert machine.endswith("logical cores, " + platform.platform()
                            + " (not recorded by the runs: where this page was generated)")
    commit = next(line for line in text.splitlines() if line.startswith("- Commit: "))
    assert "(not recorded by the runs" in commit  # this checkout's HEAD, or unknown outside a checkout
    versions = next(line for line in text.splitlines() if line.startswith("- Versions: "))
    assert versions.endswith("(not recorded by the runs: where this page was generated)")


def test_figures_are_linked_pngs(page: tuple[Path, str]) -> None:
    md, text = page
    for entry in ("alpha_ppo", "beta_sac"):
        link = f"docs/results/{entry}.png"
        assert f"]({link})" in text
        assert (md.parent / link).read_bytes().startswith(PNG_MAGIC)
    assert not list((md.parent / "docs" / "results").glob(".*.tmp"))


def test_regenerating_is_byte_identical(out: Path, page: tuple[Path, str], tmp_path: Path) -> None:
    md, text = page
    again = write_report(TABLE, out, md, md.parent / "docs" / "results", reps=REPS)
    assert again.read_bytes() == text.encode()
    # From table.json and from a dataclass table alike: the same page.
    from_json = write_report(None, out, md, md.parent / "docs" / "results", reps=REPS)
    assert from_json.read_bytes() == text.encode()

    # From the Table of robolearn.benchmark.table (its to_dict spells the YAML keys).
    table = table_from_dict(TABLE, check_files=False)
    from_table = write_report(table, out, md, md.parent / "docs" / "results", reps=REPS)
    assert from_table.read_bytes() == text.encode()
    assert "| 380.0 @ 4,000 (robolearn +36.7) |" in text  # the Zoo reference survives the Table (zoo_reference.return)


def test_an_entry_without_runs_is_named_as_not_run_yet(out: Path, tmp_path: Path) -> None:
    entry = {**TABLE["entries"][1], "id": "gamma_sac"}  # nothing under out/gamma_sac
    md = write_report({**TABLE, "entries": [entry]}, out, tmp_path / "R.md", tmp_path / "fig", reps=REPS)
    text = md.read_text()
    assert "Finished runs: 0 of 6. Not run yet (no finished run of any library): gamma_sac." in text
    assert "| gamma_sac |" not in text and "## gamma_sac" not in text
    assert not (tmp_path / "fig" / "gamma_sac.png").exists()
    # beside an entry with runs: only the empty one is listed, the count covers both
    both = write_report({**TABLE, "entries": [TABLE["entries"][0], entry]}, out, tmp_path / "R2.md",
                        tmp_path / "fig2", reps=REPS).read_text()
    assert "Not run yet (no finished run of any library): gamma_sac." in both
    assert row(both, TABLE["entries"][0]["id"], "robolearn")[2] == "3/3"
    assert "Finished runs: " in both and " of 15." in both


def test_bad_input(out: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such benchmark output folder"):
        write_report(TABLE, tmp_path / "nowhere", tmp_path / "R.md", tmp_path / "fig")
    with pytest.raises(ValueError, match="'entries'"):
        write_report({"name": "x"}, out, tmp_path / "R.md", tmp_path / "fig")


def test_verdict_faces_the_soonest_sb3_and_bounds_thresholds_sb3_missed(tmp_path: Path) -> None:
    """SB3 at its best per claim: the configuration soonest to a threshold (not the one with the best
    final return), and a threshold SB3 never reached counts only if its whole budget took 3x longer."""
    out = tmp_path / "out"
    runs = {  # entry -> lib -> (seconds per env step, returns at 1000, 2000 env steps)
        # sb3_default reaches 100 as soon as robolearn (20 s each); sb3_zoo, with the better final, at 200 s.
        "gamma_ppo": {"robolearn": (0.01, [50, 500]), "sb3_default": (0.02, [150, 160]), "sb3_zoo": (0.1, [50, 400])},
        # SB3 never reaches 100; its whole budget took 20 s against robolearn's 10 s to it: only 2x.
        "delta_ppo": {"robolearn": (0.01, [150, 200]), "sb3_default": (0.01, [50, 60])},
        # The same with SB3's budget taking 40 s: at least 4x.
        "eps_ppo": {"robolearn": (0.01, [150, 200]), "sb3_default": (0.02, [50, 60])},
    }
    zoo = {"source": "z", "n_envs": 1, "normalize": False, "kwargs": {}}
    entries = []
    for entry, libs in runs.items():
        for lib, (per_step, returns) in libs.items():
            write_run(out / entry / lib / "seed0", lib, 0, per_step, returns)
        entries.append({**TABLE["entries"][0], "id": entry, "env_steps": 2000, "thresholds": [100],
                        "sb3": {"n_envs": 1, "default": {}, "zoo": zoo if "sb3_zoo" in libs else None},
                        "zoo_reference": None})
    table = {**TABLE, "seeds": [0], "entries": entries}
    text = write_report(table, out, tmp_path / "R.md", tmp_path / "fig", reps=REPS).read_text()
    assert row(text, "gamma_ppo", "robolearn")[7:9] == ["≥100: 1.0x (vs sb3_default)", "missed"]
    assert row(text, "delta_ppo", "robolearn")[7:9] == ["≥100: SB3 not reached (≥ 2.0x) (vs sb3_default)", "missed"]
    assert row(text, "eps_ppo", "robolearn")[7:9] == ["≥100: SB3 not reached (≥ 4.0x) (vs sb3_default)", "met"]


def test_a_crashed_run_is_told_from_one_under_way(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_run(out / "alpha_ppo" / "robolearn" / "seed0", "robolearn", 0, 0.01, [50, 150], finished=False)
    write_run(out / "alpha_ppo" / "robolearn" / "seed1", "robolearn", 1, 0.01, [50, 150], finished=False)
    write_run(out / "alpha_ppo" / "sb3_default" / "seed0", "sb3_default", 0, 0.01, [50, 150], finished=False)
    records = [("robolearn", 0, 0), ("robolearn", 0, 1), ("robolearn", 1, 130), ("sb3_default", 0, 0)]
    (out / "runs.jsonl").write_text("".join(
        json.dumps({"entry": "alpha_ppo", "lib": lib, "seed": s, "returncode": code}) + "\n" for lib, s, code in records))
    text = write_report({**TABLE, "seeds": [0, 1], "entries": TABLE["entries"][:1]}, out, tmp_path / "R.md",
                        tmp_path / "fig", reps=REPS).read_text()
    assert ("- robolearn seed 0: unfinished (no summary.json yet); its last attempt failed (exit status 1, "
            "see alpha_ppo/robolearn/seed0/benchmark.log)") in text  # the latest record counts
    assert "- robolearn seed 1: unfinished (no summary.json yet); its last attempt interrupted (exit status 130" in text
    assert "- sb3_default seed 0: unfinished (no summary.json yet)\n" in text


def test_cli_report_paths_that_cannot_be_written_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from robolearn.benchmark.table import load_table
    from robolearn.cli.benchmark import main as benchmark_main

    out = tmp_path / "out"
    out.mkdir()
    (out / "table.json").write_text(json.dumps(load_table("smoke", check_tasks=False).to_dict()))
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    for argv, message in [
        ([f"results={a_file}/RESULTS.md"], f"results={a_file}/RESULTS.md: {a_file} is a file; expected a folder there"),
        ([f"results={tmp_path / 'R.md'}", f"figures={a_file}/figs"], f"figures={a_file}/figs: {a_file} is a file"),
        ([f"results={tmp_path / 'R.md'}", f"figures={a_file}"], f"figures={a_file}: {a_file} is a file"),
        ([f"results={out}"], f"results={out}: is a folder; expected the markdown file to write"),
        ([f"results={tmp_path / 'R.md'}", f"profile={tmp_path}"],
         f"profile={tmp_path}: no table.json; is it the out folder of a `robolearn benchmark profile`?"),
    ]:
        assert benchmark_main(["report", f"out={out}", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    assert a_file.read_text() == "mine" and not (tmp_path / "R.md").exists()


def test_header_states_the_protocol(page: tuple[Path, str]) -> None:
    _, text = page
    protocol = next(line for line in text.splitlines() if line.startswith("- Protocol: "))
    assert "mean over 10 evaluation worlds, one episode each" in protocol  # the table's eval_episodes
    assert "one torch thread and one MuJoCo thread" in protocol and "exclude evaluation" in protocol


def test_what_an_entry_shows_is_counted_not_searched_in_the_notes(tmp_path: Path) -> None:
    """A failed attempt, a stale run or an unreadable finished run puts an entry on the page; an
    interrupted one does not, though its note and the output folder's path say "failed"/"unfinished"."""
    out = tmp_path / "failed_unfinished_runs" / "out"
    table = {**TABLE, "seeds": [0], "entries": TABLE["entries"][:1]}
    write_run(out / "alpha_ppo" / "robolearn" / "seed0", "robolearn", 0, 0.01, [50], finished=False)
    (out / "runs.jsonl").write_text(json.dumps({"entry": "alpha_ppo", "lib": "robolearn", "seed": 0, "returncode": 130}))
    text = write_report(table, out, tmp_path / "R.md", tmp_path / "fig", reps=REPS).read_text()
    assert "Not run yet (no finished run of any library): alpha_ppo." in text and "## alpha_ppo" not in text
    # A run that says it finished but whose curve is gone is shown, as unreadable and not as a failure.
    shutil.rmtree(out / "alpha_ppo" / "robolearn" / "seed0")
    write_run(out / "alpha_ppo" / "robolearn" / "seed0", "robolearn", 0, 0.01, [50, 150, 200, 250])
    (out / "alpha_ppo" / "robolearn" / "seed0" / "metrics.csv").unlink()
    (out / "runs.jsonl").write_text(json.dumps({"entry": "alpha_ppo", "lib": "robolearn", "seed": 0, "returncode": 0}))
    text = write_report(table, out, tmp_path / "R.md", tmp_path / "fig", reps=REPS).read_text()
    assert "## alpha_ppo" in text and "Not run yet" not in text
    unreadable = next(line for line in text.splitlines() if line.startswith("- robolearn seed 0: unreadable ("))
    assert "metrics.csv" in unreadable and "its last attempt" not in unreadable
    # The same entry with a failed attempt (an unfinished run whose last exit was 1) is shown, with the note.
    write_run(out / "alpha_ppo" / "sb3_default" / "seed0", "sb3_default", 0, 0.01, [50], finished=False)
    (out / "runs.jsonl").write_text("".join(json.dumps({"entry": "alpha_ppo", "lib": lib, "seed": 0, "returncode": 1}) + "\n"
                                            for lib in ("robolearn", "sb3_default")))
    text = write_report(table, out, tmp_path / "R.md", tmp_path / "fig", reps=REPS).read_text()
    assert "## alpha_ppo" in text and "Not run yet" not in text
    assert "- sb3_default seed 0: unfinished (no summary.json yet); its last attempt failed (exit status 1" in text


def test_cli_report_says_each_reason_a_run_went_unchecked_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import logging

    from robolearn.cli import commands
    from robolearn.cli.benchmark import main as benchmark_main

    out = tmp_path / "out"
    table = {**TABLE, "seeds": [0, 1], "entries": [{**TABLE["entries"][0], "experiment": "gone_recipe"}]}
    for lib in ("robolearn", "sb3_default", "sb3_zoo"):
        for seed in (0, 1):
            write_run(out / "alpha_ppo" / lib / f"seed{seed}", lib, seed, 0.01, [50, 150, 320, 400])
    (out / "table.json").write_text(json.dumps(table))
    calls: list[list[str]] = []
    real = commands.compose_config
    monkeypatch.setattr(commands, "compose_config", lambda name, args: calls.append(list(args)) or real(name, args))
    caplog.set_level(logging.INFO)
    assert benchmark_main(["report", f"out={out}", f"results={tmp_path / 'R.md'}", f"figures={tmp_path / 'fig'}"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    # The recipe is gone: every run went unchecked, for two reasons (Hydra cannot compose it for the
    # robolearn runs, the file cannot be read for the SB3 runs' task overrides), each said once.
    assert [w.split(" (")[0] for w in warnings] == [
        "warning: not checked for a changed recipe, reported as they are: alpha_ppo/robolearn/seed0, "
        "alpha_ppo/robolearn/seed1",
        "warning: not checked for a changed recipe, reported as they are: alpha_ppo/sb3_default/seed0, "
        "alpha_ppo/sb3_default/seed1, alpha_ppo/sb3_zoo/seed0, alpha_ppo/sb3_zoo/seed1",
    ], warnings
    assert "experiment gone_recipe cannot be composed" in warnings[0] and "gone_recipe.yaml" in warnings[1]
    assert len(calls) == 1  # a composition that failed is not tried again for the next seed
    assert not [r for r in caplog.records if r.name == "absl"]  # rliable's per-interval INFO lines
    assert "| alpha_ppo | robolearn | 2/2 |" in (tmp_path / "R.md").read_text()  # reported as they are


def test_an_entry_whose_runs_ran_on_two_cpus_says_so_one_cpu_does_not(out: Path, tmp_path: Path) -> None:
    # Every run of alpha_ppo recorded: all on one CPU, two kernel builds (the platform string is not the machine).
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    rows = []
    for lib, (_, seeds) in RUNS["alpha_ppo"].items():
        for s in seeds:
            platform_ = "Linux-6.1-x86_64" if s else "Linux-6.9-x86_64"
            rows.append({"entry": "alpha_ppo", "lib": lib, "seed": s, "returncode": 0,
                         "machine": {"cpu": "AMD EPYC", "logical_cores": 2, "platform": platform_}})
    (copy / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = write_report(TABLE, copy, tmp_path / "one" / "RESULTS.md", tmp_path / "one" / "fig", reps=REPS).read_text()
    assert row(text, "alpha_ppo", "robolearn")[8] == "met"
    assert "more than one machine" not in text
    assert "ran on AMD EPYC" not in text  # the page has one CPU: the header names it, the entry need not
    # Where SB3 trained: it sets SB3's seconds per env step (benchmarks/sb3_env_overhead.py).
    assert "- sb3_default: SB3's defaults with {}, 1 env(s) of Gymnasium's Hopper-v5" in text
    assert "- sb3_zoo: zoo ppo.yml Hopper-v3, 1 env(s) of Gymnasium's Hopper-v5" in text
    assert "- sb3_default: SB3's defaults with {}, 1 env(s) of robolearn's Reacher through the SB3 adapter" in text
    # sb3_zoo's seed 1 resumed on a 16-core Xeon: its seconds compare two CPUs.
    rows.append({"entry": "alpha_ppo", "lib": "sb3_zoo", "seed": 1, "returncode": 0,
                 "machine": {"cpu": "Intel Xeon", "logical_cores": 16, "platform": "Linux-6.1-x86_64"}})
    (copy / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = write_report(TABLE, copy, tmp_path / "two" / "RESULTS.md", tmp_path / "two" / "fig", reps=REPS).read_text()
    assert row(text, "alpha_ppo", "robolearn")[8] == "met, runs on 2 machines"
    fact = next(line for line in text.splitlines() if "more than one machine" in line)
    assert fact.endswith("AMD EPYC, 2 logical cores: robolearn seed 0, robolearn seed 1, robolearn seed 2, "
                         "sb3_default seed 0, sb3_default seed 1, sb3_default seed 2, sb3_zoo seed 0, sb3_zoo seed 1, "
                         "sb3_zoo seed 2; Intel Xeon, 16 logical cores: sb3_zoo seed 1"), fact
    assert row(text, "beta_sac", "robolearn")[8] == "missed, incomplete (robolearn 2/3, sb3_default 2/3 seeds)"
    # The Xeon attempt is followed by a fresh start on the EPYC (the run set aside as stale, or failed,
    # and made again): the run in the folder is the EPYC's alone.
    rows.append({"entry": "alpha_ppo", "lib": "sb3_zoo", "seed": 1, "returncode": 0, "state": "fresh",
                 "machine": {"cpu": "AMD EPYC", "logical_cores": 2, "platform": "Linux-6.1-x86_64"}})
    (copy / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = write_report(TABLE, copy, tmp_path / "three" / "RESULTS.md", tmp_path / "three" / "fig", reps=REPS).read_text()
    assert row(text, "alpha_ppo", "robolearn")[8] == "met"
    assert "more than one machine" not in text
    # beta_sac's runs ran on the Xeon: the page spans two CPUs, so each entry names its own.
    rows += [{"entry": "beta_sac", "lib": lib, "seed": s, "returncode": 0, "state": "fresh",
              "machine": {"cpu": "Intel Xeon", "logical_cores": 16, "platform": "Linux-6.1-x86_64"}}
             for lib, (_, seeds) in RUNS["beta_sac"].items() for s in seeds]
    (copy / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = write_report(TABLE, copy, tmp_path / "four" / "RESULTS.md", tmp_path / "four" / "fig", reps=REPS).read_text()
    alpha, beta = text.split("\n## alpha_ppo\n")[1].split("\n## beta_sac\n")
    assert "- ran on AMD EPYC, 2 logical cores: all its runs" in alpha and "Intel Xeon" not in alpha
    assert "- ran on Intel Xeon, 16 logical cores: all its runs" in beta and "AMD EPYC" not in beta
    assert "more than one machine" not in text


def test_why_sets_the_final_return_beside_the_late_and_best_evaluations(tmp_path: Path) -> None:
    """A final IQM below SB3's reads as a plateau or a swing: the page gives each library's IQM of the
    last evaluation, of each seed's mean over the last quarter of its budget, and of each seed's best."""
    out = tmp_path / "out"
    runs = {  # lib -> seed -> returns at 1000..4000 env steps; the last quarter is 3000 and 4000
        "robolearn": {0: [100, 600, 500, 200], 1: [100, 300, 700, 400], 2: [50, 200, 300, 300],
                      3: [0, 900, 100, 100]},
        "sb3_default": {0: [100, 200, 300, 350], 1: [100, 200, 300, 360], 2: [100, 200, 300, 370],
                        3: [100, 200, 300, 380]},
    }
    for lib, seeds in runs.items():
        for seed, returns in seeds.items():
            write_run(out / "alpha_ppo" / lib / f"seed{seed}", lib, seed, 0.01, returns)
    entry = {**TABLE["entries"][0], "sb3": {"n_envs": 1, "default": {}, "zoo": None}, "zoo_reference": None}
    table = {**TABLE, "seeds": [0, 1, 2, 3], "entries": [entry]}
    text = write_report(table, out, tmp_path / "R.md", tmp_path / "fig", reps=REPS).read_text()
    # Four seeds: the IQM drops the lowest and the highest and averages the middle two.
    # robolearn finals 200 / 400 / 300 / 100 -> (200 + 300) / 2 = 250; late means 350 / 550 / 300 / 100
    # -> (300 + 350) / 2 = 325; bests 600 / 700 / 300 / 900 -> (600 + 700) / 2 = 650.
    # sb3_default finals 350..380 -> 365; late means 325 / 330 / 335 / 340 -> 332.5; bests = finals -> 365.
    assert ("- final return, IQM over seeds of the last evaluation / the mean of each seed's evaluations in the "
            "last quarter of its budget / each seed's best evaluation: robolearn 250.0 / 325.0 / 650.0; "
            "sb3_default 365.0 / 332.5 / 365.0\n") in text
