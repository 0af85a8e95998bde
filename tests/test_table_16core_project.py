"""benchmarks/table_16core_project.py: the arithmetic behind BENCHMARKS.md's 16-core projection of the
published table (run times from a finished table's summaries, extrapolation of a short measurement, the
slot schedule), and one end-to-end projection over a small table written here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import table_16core_project as proj  # noqa: E402  (the benchmarks folder is not a package)


def test_run_seconds_reads_training_and_evaluation_not_the_last_attempt() -> None:
    sb3 = {"train_time_s": 100.0, "eval_time_s": 5.0}
    robolearn = {"train_time_s": 100.0, "wall_time_s": 110.0}
    resumed = {"train_time_s": 100.0, "wall_time_s": 40.0}  # a resumed run's total covers its last part only
    assert proj.run_seconds(sb3) == (100.0, 105.0)
    assert proj.run_seconds(robolearn) == (100.0, 110.0)
    assert proj.run_seconds(resumed) == (100.0, 100.0)


def test_extrapolate_carries_the_last_segments_rate() -> None:
    # SAC-like: cheap steps before learning starts, then 0.02 s per step
    assert proj.extrapolate({1000.0: 1.0, 2000.0: 21.0, 3000.0: 41.0}, 5000) == pytest.approx(81.0)
    assert proj.extrapolate({1000.0: 10.0}, 4000) == pytest.approx(40.0)  # one point: the mean rate


def test_simulate_fills_free_slots_in_order() -> None:
    assert proj.simulate([3, 3, 2, 2, 2], 2) == 7  # 3+2+2 on one slot, 3+2 on the other
    assert proj.simulate([1, 1, 4], 2) == 5  # the long run starts last
    assert proj.simulate([4, 1, 1], 2) == 4  # longest first
    assert proj.simulate([5], 16) == 5


def _metrics(path: Path, points: list[tuple[int, float]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    rows = ["step,eval/return,env_steps,time/train_s"] + [f"{s},1.0,{s}.0,{t}" for s, t in points]
    (path / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_projection_over_a_small_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """One entry, robolearn and SB3's defaults, one seed: robolearn calibrated on both machines (the
    16-core one twice as fast), SB3 measured on the 16-core machine only."""
    table = {
        "name": "tiny", "seeds": [0], "libs": ["robolearn", "sb3_default"], "eval_episodes": 2,
        "entries": [{"id": "hop_ppo", "task": "Hopper", "algo": "ppo", "experiment": "hopper_ppo",
                     "env_steps": 4000, "eval_every": 1000, "thresholds": [1.0],
                     "sb3": {"n_envs": 1, "default": {}, "zoo": None}, "zoo_reference": None}],
    }
    table_path = tmp_path / "tiny.yaml"
    table_path.write_text(json.dumps(table))  # YAML reads JSON
    vm, dev = tmp_path / "vm", tmp_path / "dev"
    _metrics(vm / "hop_ppo" / "robolearn" / "seed0", [(1000, 10.0), (2000, 20.0), (4000, 40.0)])
    (vm / "hop_ppo" / "robolearn" / "seed0" / "summary.json").write_text(
        json.dumps({"env_steps": 4000, "train_time_s": 40.0, "wall_time_s": 48.0}))
    _metrics(dev / "hop_ppo.robolearn" / "hop_ppo" / "robolearn" / "seed0", [(1000, 5.0), (2000, 10.0)])
    _metrics(dev / "hop_ppo.sb3_default" / "hop_ppo" / "sb3_default" / "seed0", [(1000, 30.0), (2000, 50.0)])
    monkeypatch.setattr(sys, "argv", ["p", "--device", str(dev), "--table-out", str(vm),
                                      "--table", str(table_path), "--jobs", "2"])
    proj.main()
    out = capsys.readouterr().out
    assert "robolearn    at     2,000 steps:    10.0 s /    20.0 s = 0.50" in out
    # robolearn: 48 s on the VM x 0.5 = 24 s; SB3: 50 + 2,000 x 0.02 = 90 s, x (48 / 40) = 108 s (the
    # VM's (training + evaluation) / training, from its only library's runs)
    assert "hop_ppo                robolearn       0.4 min   VM x k\n" in out
    assert "hop_ppo                sb3_default     1.8 min   measured to 2,000 steps, extrapolated" in out
    assert "run-hours on the 16-core machine: 0.0; / 2 slots" in out
    assert "jobs=2, plan order: 0.03 h" in out  # the two runs side by side: the longer one, 108 s
