"""``robolearn compare``: IQM, stratified-bootstrap intervals, probability of improvement, the table
at fixed steps, grouping of runs into methods, the report files and the errors on bad input.

Run directories are written the way a runner writes them: ``config.json`` and a ``metrics.csv``
from the real :class:`robolearn.logging.Logger` (step column, unit column, sparse evaluations).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from rliable import metrics

from robolearn.analysis.compare import compare, iqm, poi, probability_of_improvement
from robolearn.analysis.runs import Group, load_run, make_groups, parse_group_args
from robolearn.cli.main import main
from robolearn.logging import Logger

REPS = 300  # enough for stable intervals on a handful of runs, fast on a loaded machine
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(
    path: Path,
    evals: dict[int, float],
    *,
    algo: str = "sac",
    seed: int = 0,
    unit: str = "env_steps",
    extra: dict | None = None,
    every: int = 500,
    phases: dict[int, int] | None = None,
) -> Path:
    """A run directory: config.json, and metrics.csv logged by the real Logger every ``every`` steps,
    with ``eval/return`` only at the steps of ``evals`` (as a runner's sparse evaluations)."""
    algo_cfg = {"name": algo, "lr": 3e-4, "hidden": [256, 256], **(extra or {})}
    config = {"task": "Cartpole-Balance", "seed": seed, "run_dir": str(path), "num_envs": 8,
              "algo": algo_cfg, "runner": {"console": False, "eval_interval": 2}}
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    with Logger(path, tensorboard=False, console=False) as logger:
        for step in range(every, max(evals) + 1, every):
            metrics = {unit: float(step), "train/loss": 1.0 / step}
            if phases is not None:
                metrics["phase"] = float(phases[step])
            if step in evals:
                metrics["eval/return"] = evals[step]
            logger.log(metrics, step=step)
    return path


def sweep(root: Path, name: str, finals: Sequence[float], steps: Sequence[int] = (1000, 2000, 3000, 4000),
          **kw) -> list[Path]:
    """One run per seed; seed k's return at step s is finals[k] * s / steps[-1] (a straight line)."""
    return [
        write_run(root / name / f"seed={k}", {s: v * s / steps[-1] for s in steps}, seed=k, **kw)
        for k, v in enumerate(finals)
    ]


def test_iqm_matches_the_hand_computation_and_rliable():
    # 8 runs: cut 2 from each end, mean of 3, 4, 5, 6.
    assert iqm(np.arange(1.0, 9.0)) == pytest.approx(4.5)
    # 5 runs: floor(5/4) = 1 cut from each end: mean of 2, 3, 4; the outlier has no say.
    assert iqm(np.array([1.0, 2.0, 3.0, 4.0, 100.0])) == pytest.approx(3.0)
    for runs in (1, 2, 3, 4, 7, 10):  # cuts of 0, 0, 0, 1, 1, 2 runs from each end
        scores = np.random.default_rng(runs).normal(size=(runs, 5))
        expected = [metrics.aggregate_iqm(scores[:, t]) for t in range(5)]
        np.testing.assert_allclose(iqm(scores), expected, rtol=1e-12)


def test_poi_matches_rliable():
    rng = np.random.default_rng(0)
    cases = [(rng.integers(0, 4, size=(n, 1)).astype(float), rng.integers(0, 4, size=(m, 1)).astype(float))
             for n, m in ((3, 3), (5, 2), (1, 4))]  # small integers: many ties
    cases.append((np.array([[1.0], [2.0]]), np.array([[2.0], [1.0]])))  # the same runs in another order
    for x, y in cases:
        assert poi(x, y) == pytest.approx(metrics.probability_of_improvement(x, y), abs=1e-12)


def test_curve_and_table_at_fixed_steps_hold_the_hand_values(tmp_path):
    finals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]  # IQM 4.5 at the end
    runs = sweep(tmp_path, "a", finals)
    groups = make_groups(parse_group_args([str(tmp_path / "a")]), "eval/return")
    assert [g.name for g in groups] == ["sac"] and len(groups[0].runs) == 8
    result = compare(groups, "eval/return", at=[2000, 2500, 4000], reps=REPS)
    assert result.unit == "env_steps"
    assert result.grid == [1000.0, 2000.0, 3000.0, 4000.0]  # the runs' own evaluation steps
    m = result.methods[0]
    assert [e.value for e in m.curve] == pytest.approx([4.5 * s / 4000 for s in result.grid])
    # 2500 lies between evaluations: the last one logged (2000) is what the runs had measured then.
    assert [e.value for e in m.at] == pytest.approx([2.25, 2.25, 4.5])
    linear = compare(groups, "eval/return", at=[2500], align="linear", reps=REPS)
    assert linear.methods[0].at[0].value == pytest.approx(4.5 * 2500 / 4000)
    assert m.final["iqm"].value == pytest.approx(4.5)
    assert m.final["mean"].value == pytest.approx(4.5)
    assert m.final["median"].value == pytest.approx(4.5)
    assert m.at[-1] == m.curve[-1] == m.final["iqm"]  # one step, one interval, wherever it is shown
    assert m.runs == [str(p) for p in runs]


def test_interval_contains_the_estimate_and_shrinks_with_more_runs(tmp_path):
    values = [1.0, 2.0, 3.0, 4.0]
    few = Group("few", tuple(load_run(p, "eval/return") for p in sweep(tmp_path, "few", values)))
    many = Group("many", tuple(load_run(p, "eval/return") for p in sweep(tmp_path, "many", values * 4)))
    result = compare([few, many], "eval/return", reps=REPS)
    widths = []
    for m in result.methods:
        for est in [*m.curve, *m.at, *m.final.values()]:
            assert est.low <= est.value <= est.high
        f = m.final["iqm"]
        assert f.value == pytest.approx(2.5)  # the same IQM: the 16 runs are the 4 repeated
        widths.append(f.high - f.low)
    assert widths[0] > 0 and widths[1] < 0.75 * widths[0]


def test_probability_of_improvement(tmp_path):
    a = sweep(tmp_path, "a", [10.0, 11.0, 12.0])
    b = sweep(tmp_path, "b", [1.0, 2.0, 3.0])
    same = sweep(tmp_path, "same", [1.0, 2.0, 3.0])
    result = compare(make_groups([("a", a), ("b", b), ("same", same)], "eval/return"), "eval/return", reps=REPS)
    poi = {(p.x, p.y): p.poi for p in result.pairs}
    assert list(poi) == [("a", "b"), ("a", "same"), ("b", "same")]  # X before Y in the given order
    assert (poi["a", "b"].value, poi["a", "b"].low, poi["a", "b"].high) == (1.0, 1.0, 1.0)  # on every resample
    assert poi["b", "same"].value == 0.5
    # [2, 3] vs [2, 1]: 2 vs 2 ties (1/2), 2 > 1, 3 > 2, 3 > 1: 3.5 of 4 pairs.
    mixed = probability_of_improvement(np.array([2.0, 3.0]), np.array([2.0, 1.0]), REPS, 0, 0.95)
    assert mixed.value == pytest.approx(0.875)
    assert mixed.low < 0.875 <= mixed.high


def test_the_same_seed_gives_the_same_intervals(tmp_path):
    finals = np.random.default_rng(0).normal(size=8).tolist()  # many distinct resampled IQMs
    groups = make_groups([("x", sweep(tmp_path, "x", finals))], "eval/return")
    first = compare(groups, "eval/return", reps=REPS, seed=3).to_json()
    assert compare(groups, "eval/return", reps=REPS, seed=3).to_json() == first
    other = compare(groups, "eval/return", reps=REPS, seed=4).to_json()
    assert other["methods"][0]["final"]["iqm"] != first["methods"][0]["final"]["iqm"]


def test_default_labels_name_the_differing_config_keys(tmp_path):
    sweep(tmp_path, "lo", [1.0, 2.0], extra={"lr": 1e-3})
    sweep(tmp_path, "hi", [3.0, 4.0], extra={"lr": 1e-4})
    sweep(tmp_path, "ppo", [0.0, 1.0], algo="ppo", extra={"lr": 1e-3})
    groups = make_groups(parse_group_args([str(tmp_path / n) for n in ("lo", "hi", "ppo")]), "eval/return")
    # seed and run_dir differ too, but never name a method.
    assert {g.name: len(g.runs) for g in groups} == {"sac algo.lr=0.001": 2, "sac algo.lr=0.0001": 2,
                                                    "ppo algo.lr=0.001": 2}
    by = make_groups(parse_group_args([str(tmp_path / n) for n in ("lo", "hi", "ppo")]), "eval/return",
                     group_by=["algo.name"])
    assert {g.name: len(g.runs) for g in by} == {"algo.name=sac": 4, "algo.name=ppo": 2}


def test_unequal_runs_are_clipped_to_the_shortest(tmp_path):
    short = sweep(tmp_path, "s", [1.0, 2.0], steps=(1000, 2000))
    long = sweep(tmp_path, "l", [1.0, 2.0, 3.0], steps=(1000, 2000, 3000, 4000))
    result = compare(make_groups([("s", short), ("l", long)], "eval/return"), "eval/return", reps=REPS)
    assert result.final_step == 2000.0 and result.grid[-1] == 2000.0
    assert any("clipped to the shortest" in note and str(long[0]) in note for note in result.notes)
    # Different evaluation steps: an evenly spaced grid of the common range.
    assert len(result.grid) == 50 and result.grid[0] == 1000.0


def test_phase_keeps_only_that_phases_rows(tmp_path):
    phases = {s: (0 if s <= 2000 else 1) for s in range(500, 4001, 500)}
    run = sweep(tmp_path, "o2o", [4.0], phases=phases)[0]
    online = load_run(run, "eval/return", phase="1")
    assert online.steps.tolist() == [3000.0, 4000.0]
    assert load_run(run, "eval/return").steps.tolist() == [1000.0, 2000.0, 3000.0, 4000.0]


def test_an_axis_that_stands_still_is_read_at_its_last_row(tmp_path):
    # An offline-to-online run: env_steps stays 0 through the offline phase, whose last evaluation is
    # the offline score at env step 0; a step column that goes back is refused.
    path = tmp_path / "o2o"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"task": "T", "seed": 0, "algo": {"name": "sac"}}))
    with Logger(path, tensorboard=False, console=False) as logger:
        for step, env_steps, ret in ((100, 0, 1.0), (200, 0, 2.0), (300, 100, 3.0), (400, 200, 4.0)):
            logger.log({"env_steps": float(env_steps), "eval/return": ret}, step=step)
    run = load_run(path, "eval/return", x="env_steps")
    assert run.steps.tolist() == [0.0, 100.0, 200.0] and run.values.tolist() == [2.0, 3.0, 4.0]
    with Logger(path, tensorboard=False, console=False) as logger:
        logger.log({"env_steps": 50.0, "eval/return": 5.0}, step=500)
    with pytest.raises(ValueError, match="goes back"):
        load_run(path, "eval/return", x="env_steps")


def test_cli_writes_the_report(tmp_path, capsys):
    a = sweep(tmp_path, "runs_a", [5.0, 6.0, 7.0])
    b = sweep(tmp_path, "runs_b", [1.0, 2.0, 3.0])
    out = tmp_path / "cmp"
    args = ["compare", f"wsrl={','.join(map(str, a))}", f"sac={','.join(map(str, b))}", "--metric", "eval/return",
            "--at", "2000,4000", "--reps", str(REPS), "--out", str(out)]
    assert main(args) == 0
    assert sorted(p.name for p in out.iterdir()) == ["comparison.json", "comparison.md", "iqm_curves.png",
                                                   "probability_of_improvement.png"]
    for png in ("iqm_curves.png", "probability_of_improvement.png"):
        assert (out / png).read_bytes().startswith(PNG_MAGIC)
    md = (out / "comparison.md").read_text()
    assert "| method | runs | 2,000 | 4,000 (final) |" in md
    assert "| wsrl | 3 | 3.00 [" in md  # IQM of 2.5, 3, 3.5 at 2000
    assert "| wsrl | sac | 1.00 [1.00, 1.00] |" in md
    data = json.loads((out / "comparison.json").read_text())
    assert [m["name"] for m in data["methods"]] == ["wsrl", "sac"]
    assert data["methods"][1]["final"]["iqm"]["value"] == pytest.approx(2.0)
    assert data["reps"] == REPS and data["unit"] == "env_steps" and data["library"].startswith("rliable")
    assert "wsrl" in capsys.readouterr().out
    # Run again: the files are replaced, no temporary file is left behind.
    assert main(args) == 0
    assert len(list(out.iterdir())) == 4


def test_one_method_has_no_improvement_to_report(tmp_path, capsys):
    out = tmp_path / "cmp"
    run = sweep(tmp_path, "x", [1.0])[0]
    assert main(["compare", str(run), "--reps", "50", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["comparison.json", "comparison.md", "iqm_curves.png"]
    md = (out / "comparison.md").read_text()
    assert "Probability of improvement" not in md and "one run only" in md


def _error(args: list[str], capsys) -> str:
    assert main(["compare", *args, "--reps", "50"]) == 2
    return capsys.readouterr().err


def test_bad_input_names_the_problem_and_writes_nothing(tmp_path, capsys):
    good = sweep(tmp_path, "good", [1.0, 2.0])
    out = tmp_path / "out"
    empty = tmp_path / "empty"
    empty.mkdir()
    err = _error([str(empty), "--out", str(out)], capsys)
    assert str(empty) in err and "not a run directory" in err
    for missing in (tmp_path / "missing", tmp_path / "good" / "seed=7"):
        err = _error([str(missing), "--out", str(out)], capsys)
        assert str(missing) in err and "no such run directory" in err
    err = _error([str(tmp_path / "good"), "--metric", "eval/retrun", "--out", str(out)], capsys)
    assert "'eval/retrun'" in err and "did you mean 'eval/return'" in err and "train/loss" in err
    offline = write_run(tmp_path / "offline", {1000: 1.0, 2000: 2.0}, algo="iql", unit="grad_steps")
    err = _error([str(good[0]), str(offline), "--out", str(out)], capsys)
    assert "different units" in err and "grad_steps" in err and "env_steps" in err
    err = _error(["a=", str(good[0]), "--out", str(out)], capsys)
    assert "'a='" in err and "NAME=RUN_DIR" in err
    err = _error([str(tmp_path / "good"), "--at", "99999", "--out", str(out)], capsys)
    assert "--at" in err and "99999" in err and "1000..4000" in err
    err = _error([str(tmp_path / "good"), "--group-by", "algo.nme", "--out", str(out)], capsys)
    assert "--group-by" in err and "algo.nme" in err and "algo.name" in err
    err = _error([str(good[0]), f"again={good[0]}", "--out", str(out)], capsys)
    assert "given twice" in err
    err = _error([f"sac={good[0]}", str(good[1]), "--out", str(out)], capsys)  # good[1]'s label is "sac"
    assert "group name 'sac'" in err
    assert not out.exists()


def test_real_training_runs(tmp_path, monkeypatch, capsys):
    """Two tiny PPO runs trained by `robolearn train -m`, compared as two methods by seed."""
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "sweep"
    tiny = ["task=Cartpole-Balance", "num_envs=8", "eval_num_envs=2", "task_overrides.episode_length=50",
            "algo.num_steps=16", "algo.actor_hidden=[32]", "algo.critic_hidden=[32]", "runner.video=false",
            "runner.console=false", "runner.tensorboard=false", "runner.eval_interval=1"]
    assert main(["train", "-m", "seed=0,1", "total_env_steps=384", f"run_dir={runs}", *tiny]) == 0
    out = tmp_path / "cmp"
    assert main(["compare", str(runs), "--group-by", "seed", "--reps", "50", "--out", str(out)]) == 0
    data = json.loads((out / "comparison.json").read_text())
    assert data["unit"] == "env_steps" and data["grid"] == [128.0, 256.0, 384.0]
    assert [m["name"] for m in data["methods"]] == ["seed=0", "seed=1"]
    for m, seed in zip(data["methods"], (0, 1), strict=True):
        metrics = (runs / f"seed={seed}" / "metrics.csv").read_text().splitlines()
        header = metrics[0].split(",")
        last = metrics[-1].split(",")
        assert m["final"]["iqm"]["value"] == pytest.approx(float(last[header.index("eval/return")]))
