"""Running benchmark tables (robolearn.benchmark.schedule, robolearn benchmark run): the interleaved
order, the run states, the command lines, skipping done runs, resuming, refusing another table's
folder, failures, parallel jobs and interruption.

Most tests stand in a tiny fake child (a Python script that writes what a run writes) for the
training subprocesses, through the launcher hook; the command lines themselves are checked by
composing robolearn's config from them, and two slow tests run real robolearn and SB3 training.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from robolearn.benchmark import schedule
from robolearn.benchmark.schedule import Run, RunState, command, plan, run_benchmark, run_state
from robolearn.benchmark.table import Table, TableError, ZooHyperparams, load_table, table_from_dict
from robolearn.cli.benchmark import composer
from robolearn.cli.benchmark import main as benchmark_main


def _wait_for(done: Callable[[], bool], what: str, alive: Callable[[], bool] = lambda: True,
              timeout_s: float = 60.0) -> None:
    """Poll ``done`` until it holds; fail the test naming ``what`` if ``alive`` stops holding or
    ``timeout_s`` passes first (a hang guard, not a speed check)."""
    give_up = time.monotonic() + timeout_s
    while not done():
        if not alive() or time.monotonic() > give_up:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


FAKE_CHILD = r'''
import json, os, signal, sys, time
from pathlib import Path

args = sys.argv[1:]


def value(key):
    for i, arg in enumerate(args):
        if arg.startswith(key + "="):
            return arg.split("=", 1)[1]
        if arg == key:
            return args[i + 1]
    return None


run_dir = Path(value("run_dir") or value("resume") or value("--out"))
budget = int(value("total_env_steps") or value("--env-steps"))
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
run_dir.mkdir(parents=True, exist_ok=True)
(run_dir / "child.json").write_text(json.dumps({
    "args": args, "threads": [os.environ.get("OMP_NUM_THREADS"), os.environ.get("MKL_NUM_THREADS")],
    "files": sorted(p.name for p in run_dir.iterdir()),
}))
(run_dir / "ready").write_text("")
if os.environ.get("FAKE_FAIL") and os.environ["FAKE_FAIL"] in str(run_dir):
    sys.exit(3)
end = time.monotonic() + float(os.environ.get("FAKE_SLEEP", "0"))
while time.monotonic() < end and not stop:
    time.sleep(0.01)
sb3 = "--out" in args
ckpt = run_dir / ("sb3_checkpoint" if sb3 else "checkpoints")
ckpt.mkdir(exist_ok=True)
(ckpt / ("model.zip" if sb3 else "ckpt_000001.pt")).write_text("x")
if stop:
    sys.exit(130)
(run_dir / "summary.json").write_text(json.dumps({"env_steps": budget}))
'''


class FakeLauncher:
    """Runs the fake child in place of each command (through the real :func:`schedule.launch`),
    recording the commands and how many children were alive at each start."""

    def __init__(self, script: Path, env: Mapping[str, str] | None = None, interrupt_at: int | None = None) -> None:
        self.script, self.env, self.interrupt_at = script, dict(env or {}), interrupt_at
        self.commands: list[list[str]] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.max_alive = 0

    def __call__(self, cmd: Sequence[str], log_file: IO[bytes], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        self.commands.append(list(cmd))
        alive = sum(p.poll() is None for p in self.procs)
        self.max_alive = max(self.max_alive, alive + 1)
        proc = schedule.launch([sys.executable, str(self.script), *cmd[3:]], log_file, {**env, **self.env})
        self.procs.append(proc)
        if self.interrupt_at == len(self.commands):
            ready = _run_dir_of(cmd) / "ready"
            deadline = time.monotonic() + 60
            while not ready.exists() and time.monotonic() < deadline:  # its SIGINT handler is set
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C in the terminal would reach the benchmark
        return proc

    @property
    def runs(self) -> list[str]:
        """``entry/lib/seedS`` of each launch, in order."""
        return ["/".join(_run_dir_of(c).parts[-3:]) for c in self.commands]


def _run_dir_of(cmd: Sequence[str]) -> Path:
    for i, arg in enumerate(cmd):
        for key in ("run_dir=", "resume="):
            if arg.startswith(key):
                return Path(arg[len(key):])
        if arg == "--out":
            return Path(cmd[i + 1])
    raise AssertionError(f"no run dir in {cmd}")


def never_composed(run: Run) -> Mapping[str, Any]:
    """The composer (``composed``) of a test that compares no robolearn run: its runs are fresh, SB3's, or
    the fake child's (which writes no config.json). A call means the test is not what it says."""
    raise AssertionError(f"{run.name}: composed, but this test compares no robolearn run")


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    return script


@pytest.fixture(scope="module")
def smoke() -> Table:
    return load_table("smoke", check_tasks=False)


def three_lib_table() -> Table:
    """Two entries (the first with Zoo hyperparameters), three seeds, three libraries."""
    entry = {"task": "Cartpole-Balance", "algo": "ppo", "experiment": "cartpole_ppo", "env_steps": 100, "eval_every": 50}
    zoo = {"source": "zoo", "n_envs": 8, "normalize": True, "kwargs": {"n_steps": 32, "learning_rate": "lin_1e-3"}}
    return table_from_dict({
        "name": "three", "seeds": [0, 1, 2], "libs": ["robolearn", "sb3_default", "sb3_zoo"], "eval_episodes": 5,
        "entries": [{**entry, "id": "a", "sb3": {"n_envs": 2, "default": {"gamma": 0.9}, "zoo": zoo}}, {**entry, "id": "b"}],
    }, "three")


# -- the plan ---------------------------------------------------------------------------------
def test_plan_is_seed_major_entries_in_order_libs_rotated_by_seed(tmp_path: Path) -> None:
    runs = plan(three_lib_table(), tmp_path)
    got = [(r.seed, r.entry.id, r.lib) for r in runs]
    assert got == [
        (0, "a", "robolearn"), (0, "a", "sb3_default"), (0, "a", "sb3_zoo"), (0, "b", "robolearn"), (0, "b", "sb3_default"),
        (1, "a", "sb3_default"), (1, "a", "sb3_zoo"), (1, "a", "robolearn"), (1, "b", "sb3_default"), (1, "b", "robolearn"),
        (2, "a", "sb3_zoo"), (2, "a", "robolearn"), (2, "a", "sb3_default"), (2, "b", "robolearn"), (2, "b", "sb3_default"),
    ]
    assert runs[7].run_dir == tmp_path / "a" / "robolearn" / "seed1"


def test_entry_order_runs_each_entrys_runs_together_in_the_seed_order(tmp_path: Path) -> None:
    table = three_lib_table()
    by_seed = plan(table, tmp_path)
    by_entry = plan(table, tmp_path, order="entry")
    assert sorted(map(str, by_entry)) == sorted(map(str, by_seed))  # the same runs
    assert [r.entry.id for r in by_entry] == ["a"] * 9 + ["b"] * 6
    # Within an entry: seed-major, the libraries rotated by seed, as in the default order.
    assert [(r.seed, r.lib) for r in by_entry[:9]] == [(r.seed, r.lib) for r in by_seed if r.entry.id == "a"]
    assert [(r.seed, r.lib) for r in by_entry[:4]] == [
        (0, "robolearn"), (0, "sb3_default"), (0, "sb3_zoo"), (1, "sb3_default")]
    with pytest.raises(TableError, match=r"order=lib: expected one of seed, entry, got 'lib'"):
        plan(table, tmp_path, order="lib")
    assert benchmark_main(["run", "table=smoke", f"out={tmp_path / 'o'}", "order=lib", "dry_run=true"]) == 2
    assert not (tmp_path / "o").exists()


def test_plan_filters_and_refuses_what_the_table_lacks(tmp_path: Path) -> None:
    table = three_lib_table()
    runs = plan(table, tmp_path, entries=["b"], libs=["robolearn"], seeds=[2, 0])
    assert [(r.seed, r.entry.id, r.lib) for r in runs] == [(0, "b", "robolearn"), (2, "b", "robolearn")]
    with pytest.raises(TableError, match=r"seeds=3: expected seeds of table 'three' \(0, 1, 2\), got 3"):
        plan(table, tmp_path, seeds=[3])
    with pytest.raises(TableError, match=r"libs=sb3: expected libs of table 'three' .*got 'sb3'"):
        plan(table, tmp_path, libs=["sb3"])
    with pytest.raises(TableError, match=r"entries=a,c: .*got 'c'"):
        plan(table, tmp_path, entries=["a", "c"])


# -- command lines ----------------------------------------------------------------------------
def test_sb3_command_lines_follow_the_contract(tmp_path: Path) -> None:
    table = three_lib_table()
    runs = {(r.entry.id, r.lib, r.seed): r for r in plan(table, tmp_path)}
    default = command(runs["a", "sb3_default", 1], table, RunState.FRESH)
    assert default == [
        sys.executable, "-m", "robolearn.benchmark.sb3_run", "--task", "Cartpole-Balance", "--algo", "ppo",
        "--lib", "sb3_default", "--seed", "1", "--env-steps", "100", "--eval-every", "50", "--eval-episodes", "5",
        "--out", str(tmp_path / "a" / "sb3_default" / "seed1"), "--kwargs", '{"gamma": 0.9}', "--n-envs", "2",
    ]
    zoo = command(runs["a", "sb3_zoo", 2], table, RunState.RESUME)
    assert zoo[zoo.index("--kwargs") + 1] == '{"learning_rate": "lin_1e-3", "n_steps": 32}'
    assert zoo[zoo.index("--n-envs") + 1] == "8" and zoo[-1] == "--normalize"
    plain = command(runs["b", "sb3_default", 0], table, RunState.FRESH)
    assert plain[plain.index("--kwargs") + 1] == "{}" and "--normalize" not in plain


def test_robolearn_command_lines_compose_the_recipe_and_resume_in_place(tmp_path: Path, smoke: Table) -> None:
    from robolearn.cli.commands import compose_config, job_train_config
    from robolearn.cli.config import train_config_to_dict

    run = next(r for r in plan(smoke, tmp_path) if r.lib == "robolearn" and r.seed == 1)
    fresh = command(run, smoke, RunState.FRESH)
    assert fresh[:4] == [sys.executable, "-m", "robolearn.cli", "train"]
    cfg = job_train_config(compose_config("train", fresh[4:]), fresh[4:])
    assert (cfg.task, cfg.algo_name, cfg.num_envs, cfg.seed) == ("Cartpole-Balance", "ppo", 64, 1)  # the recipe's
    assert (cfg.run_dir, cfg.total_env_steps, cfg.torch_threads, cfg.sim_threads) == (str(run.run_dir), 4096, 1, 1)
    assert cfg.eval_num_envs == smoke.eval_episodes == 2  # the SB3 side's eval worlds, not the recipe's 8
    assert not (cfg.runner.video or cfg.runner.console or cfg.runner.tensorboard)
    assert cfg.resume is None

    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.json").write_text(json.dumps(train_config_to_dict(cfg)))
    bigger = dataclasses.replace(run, entry=dataclasses.replace(run.entry, env_steps=8192))
    resume = command(bigger, smoke, RunState.RESUME)
    assert f"resume={run.run_dir}" in resume and not any(a.startswith("experiment=") for a in resume)
    again = job_train_config(compose_config("train", resume[4:]), resume[4:])
    assert (again.resume, again.run_dir, again.total_env_steps) == (str(run.run_dir), str(run.run_dir), 8192)
    assert (again.seed, again.num_envs, again.torch_threads, again.sim_threads, again.runner.video) == (1, 64, 1, 1, False)
    assert again.eval_num_envs == 2  # kept by the resume (the run's config.json)


RECIPE_WITH_OVERRIDES = """# @package _global_
# a recipe of another MDP: shorter episodes
defaults:
  - override /algo: ppo
task: Cartpole-Balance
task_overrides:
  episode_length: 20
  rewards: {smooth_balance: {weight: 2.0}}
"""


def test_sb3_runs_get_the_recipes_task_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from robolearn.benchmark import sb3_run, table

    spec = three_lib_table().to_dict()
    recipes = tmp_path / "experiment"
    recipes.mkdir()
    (recipes / "short.yaml").write_text(RECIPE_WITH_OVERRIDES)
    (recipes / "plain.yaml").write_text("# @package _global_\ntask: Cartpole-Balance\n")
    monkeypatch.setattr(table, "experiments_dir", lambda: recipes)
    spec["entries"][0]["experiment"] = "short"
    spec["entries"][1]["experiment"] = "plain"
    t = table_from_dict(spec, "three")
    runs = {(r.entry.id, r.lib, r.seed): r for r in plan(t, tmp_path)}
    for lib in ("sb3_default", "sb3_zoo"):
        cmd = command(runs["a", lib, 0], t, RunState.FRESH)
        overrides = json.loads(cmd[cmd.index("--task-overrides") + 1])
        assert overrides == {"episode_length": 20, "rewards": {"smooth_balance": {"weight": 2.0}}}
        # sb3_run reads it back as the same nested overrides, applied to the task.
        parsed = sb3_run.parse_args(cmd[3:])
        assert parsed.task_overrides == overrides
    assert "--task-overrides" not in command(runs["b", "sb3_default", 0], t, RunState.FRESH)

    # A recipe the reader cannot follow stops the benchmark before any run starts.
    (recipes / "plain.yaml").write_text("# @package foo\ntask: Cartpole-Balance\n")
    launcher = FakeLauncher(tmp_path / "never.py")
    with pytest.raises(TableError, match="plain.*@package _global_"):
        run_benchmark(t, tmp_path / "out", launcher=launcher, composed=never_composed)
    assert launcher.commands == [] and not (tmp_path / "out").exists()


def test_recipe_task_overrides_read_as_hydra_composes_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from robolearn.benchmark import table
    from robolearn.cli.commands import compose_config

    # Every shipped recipe with task_overrides, and one without: the reader agrees with Hydra's composition.
    shipped = sorted(p.stem for p in table.experiments_dir().glob("*.yaml") if "task_overrides" in p.read_text())
    assert shipped  # the drqv2 recipes set some
    for name in [*shipped, "cartpole_ppo"]:
        composed = compose_config("train", [f"experiment={name}"])
        assert table.recipe_task_overrides(name) == composed["task_overrides"], name

    recipes = tmp_path / "experiment"
    recipes.mkdir()
    monkeypatch.setattr(table, "experiments_dir", lambda: recipes)
    # Without the _global_ header Hydra puts the file under `experiment.`: it overrides no task.
    (recipes / "nested.yaml").write_text(RECIPE_WITH_OVERRIDES.split("\n", 1)[1])
    assert table.recipe_task_overrides("nested") == {}
    (recipes / "pulls.yaml").write_text("# @package _global_\ndefaults:\n  - /experiment/short\n")
    with pytest.raises(TableError, match="pulls in another recipe"):
        table.recipe_task_overrides("pulls")
    (recipes / "interp.yaml").write_text("# @package _global_\ntask_overrides:\n  episode_length: ${x}\n")
    with pytest.raises(TableError, match="interpolations"):
        table.recipe_task_overrides("interp")
    (recipes / "other.yaml").write_text("# @package foo\ntask_overrides: {}\n")
    with pytest.raises(TableError, match="@package _global_"):
        table.recipe_task_overrides("other")


# -- states -----------------------------------------------------------------------------------
def test_run_state_from_the_run_directory(tmp_path: Path, smoke: Table) -> None:
    runs = {(r.entry.id, r.lib, r.seed): r for r in plan(smoke, tmp_path)}
    rl, sb = runs["cartpole_ppo", "robolearn", 0], runs["cartpole_ppo", "sb3_default", 0]
    assert run_state(rl) is RunState.FRESH  # no directory
    rl.run_dir.mkdir(parents=True)
    (rl.run_dir / "config.json").write_text("{}")
    (rl.run_dir / "metrics.csv").write_text("step\n")
    assert run_state(rl) is RunState.FRESH  # partial files, no checkpoint
    (rl.run_dir / "checkpoints").mkdir()
    (rl.run_dir / "checkpoints" / "latest").write_text("")
    assert run_state(rl) is RunState.FRESH  # an empty checkpoint folder does not resume
    (rl.run_dir / "checkpoints" / "ckpt_002048.pt").write_text("x")
    assert run_state(rl) is RunState.RESUME
    (rl.run_dir / "summary.json").write_text(json.dumps({"env_steps": 2048}))
    assert run_state(rl) is RunState.RESUME  # finished a smaller budget: continues to 4096
    (rl.run_dir / "summary.json").write_text(json.dumps({"env_steps": 4096}))
    assert run_state(rl) is RunState.DONE
    (rl.run_dir / "summary.json").write_text("{not json")
    assert run_state(rl) is RunState.RESUME

    sb.run_dir.mkdir(parents=True)
    (sb.run_dir / "checkpoints").mkdir()
    (sb.run_dir / "checkpoints" / "ckpt_000001.pt").write_text("x")
    assert run_state(sb) is RunState.FRESH  # an SB3 run resumes from sb3_checkpoint/ only
    (sb.run_dir / ".sb3_checkpoint.old").mkdir()
    (sb.run_dir / ".sb3_checkpoint.old" / "model.zip").write_text("x")
    assert run_state(sb) is RunState.RESUME  # a swap cut short: sb3_run restores it
    (sb.run_dir / "summary.json").write_text(json.dumps({"env_steps": 5000}))
    assert run_state(sb) is RunState.DONE


# -- execution --------------------------------------------------------------------------------
def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]


def test_run_executes_every_run_then_skips_them_all(tmp_path: Path, fake: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    partial = out / "cartpole_sac" / "robolearn" / "seed1"
    partial.mkdir(parents=True)
    (partial / "metrics.csv").write_text("step\n1\n")  # a run killed before its first checkpoint
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))
    launcher = FakeLauncher(fake)
    result = run_benchmark(smoke, out, launcher=launcher, composed=never_composed)
    assert result.exit_status == 0 and not result.failed and not result.interrupted
    assert launcher.runs == [
        "cartpole_ppo/robolearn/seed0", "cartpole_ppo/sb3_default/seed0", "cartpole_sac/robolearn/seed0",
        "cartpole_sac/sb3_default/seed0", "cartpole_ppo/sb3_default/seed1", "cartpole_ppo/robolearn/seed1",
        "cartpole_sac/sb3_default/seed1", "cartpole_sac/robolearn/seed1",
    ]
    records = _records(out)
    assert [(r["entry"], r["lib"], r["seed"], r["state"], r["returncode"]) for r in records][:2] == [
        ("cartpole_ppo", "robolearn", 0, "fresh", 0), ("cartpole_ppo", "sb3_default", 0, "fresh", 0)]
    run_seconds = [r["wall_s"] for r in records]
    assert all(len(r["load_before"]) == 3 for r in records) and len(records) == 8 and min(run_seconds) >= 0
    # Where each run ran, recorded with it.
    where = schedule.provenance()
    assert all((r["machine"], r["versions"], r["git_commit"]) == (where["machine"], where["versions"], where["git_commit"])
               for r in records)
    assert records[0]["machine"]["logical_cores"] == os.cpu_count() and records[0]["versions"]["python"]
    child = json.loads((partial / "child.json").read_text())
    assert child["files"] == ["benchmark.log"]  # the partial metrics were removed before it started
    assert child["threads"] == ["1", "1"]
    assert "# " in (partial / "benchmark.log").read_text().splitlines()[0]
    assert json.loads((out / "table.json").read_text()) == smoke.to_dict()
    assert not (out / ".benchmark.lock").exists()

    again = FakeLauncher(fake)
    second = run_benchmark(smoke, out, launcher=again, composed=never_composed)
    assert again.commands == [] and second.records == [] and second.exit_status == 0
    assert {s for _, s in second.planned} == {RunState.DONE} and len(second.planned) == 8
    assert len(_records(out)) == 8


def test_a_failed_run_is_reported_and_the_others_go_on(tmp_path: Path, fake: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    launcher = FakeLauncher(fake, env={"FAKE_FAIL": "cartpole_ppo/sb3_default/seed0"})
    result = run_benchmark(smoke, out, launcher=launcher, seeds=[0], composed=never_composed)
    assert len(launcher.commands) == 4 and result.exit_status == 1
    assert [(r.entry, r.lib, r.returncode) for r in result.failed] == [("cartpole_ppo", "sb3_default", 3)]
    assert [r["returncode"] for r in _records(out)].count(3) == 1
    retry = FakeLauncher(fake)
    assert run_benchmark(smoke, out, launcher=retry, seeds=[0], composed=never_composed).exit_status == 0
    assert retry.runs == ["cartpole_ppo/sb3_default/seed0"]


def test_jobs_run_side_by_side_never_more(tmp_path: Path, fake: Path, smoke: Table) -> None:
    launcher = FakeLauncher(fake, env={"FAKE_SLEEP": "0.5"})
    result = run_benchmark(smoke, tmp_path / "out", jobs=2, launcher=launcher, entries=["cartpole_ppo"], poll_s=0.05, composed=never_composed)
    assert result.exit_status == 0 and len(result.records) == 4
    assert launcher.max_alive == 2


def test_interrupt_stops_starting_runs_and_the_rerun_resumes(tmp_path: Path, fake: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    launcher = FakeLauncher(fake, env={"FAKE_SLEEP": "60"}, interrupt_at=1)
    result = run_benchmark(smoke, out, launcher=launcher, seeds=[0], poll_s=0.05, composed=never_composed)
    assert result.interrupted and result.exit_status == 130
    assert len(launcher.commands) == 1  # nothing started after the signal
    assert [(r.lib, r.returncode) for r in result.records] == [("robolearn", 130)]  # it stopped, with a checkpoint
    assert result.failed == [] and result.stopped == result.records  # stopped by the interrupt is no failure
    assert _records(out)[0]["signalled"] is True
    first = Run(smoke.entry("cartpole_ppo"), "robolearn", 0, out / "cartpole_ppo" / "robolearn" / "seed0")
    assert run_state(first) is RunState.RESUME
    rerun = FakeLauncher(fake)
    assert run_benchmark(smoke, out, launcher=rerun, seeds=[0], composed=never_composed).exit_status == 0
    assert len(rerun.commands) == 4 and f"resume={first.run_dir}" in rerun.commands[0]
    assert [r["state"] for r in _records(out)] == ["fresh", "resume", "fresh", "fresh", "fresh"]


def test_another_tables_folder_is_refused_a_superset_accepted(tmp_path: Path, fake: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    assert run_benchmark(smoke, out, launcher=FakeLauncher(fake), seeds=[0], entries=["cartpole_sac"], composed=never_composed).exit_status == 0
    ppo = smoke.entry("cartpole_ppo")
    # (An entry's sb3 block may change: the stale guard compares each SB3 run's own config.json.)
    changed = dataclasses.replace(ppo, task="Cartpole-Swingup")
    sac = smoke.entry("cartpole_sac")
    for bad, reason in [
        (dataclasses.replace(smoke, name="other", entries=(changed, sac)), "entry cartpole_ppo: task was"),
        (dataclasses.replace(smoke, entries=(ppo, dataclasses.replace(sac, experiment="cartpole_ppo"))),
         "entry cartpole_sac: experiment was 'cartpole_sac', now 'cartpole_ppo'"),
        (dataclasses.replace(smoke, entries=(ppo, dataclasses.replace(sac, env_steps=500))),
         "entry cartpole_sac: env_steps was 1000, now 500"),
        (dataclasses.replace(smoke, entries=(ppo,)), "entry cartpole_sac of the folder is not in the new table"),
        (dataclasses.replace(smoke, seeds=(1,)), "seeds [0] of the folder are not in the new table"),
        (dataclasses.replace(smoke, eval_episodes=3), "eval_episodes was 2, now 3"),
    ]:
        launcher = FakeLauncher(fake)
        with pytest.raises(TableError) as info:
            run_benchmark(bad, out, launcher=launcher, composed=never_composed)
        assert "not a compatible superset" in str(info.value) and reason in str(info.value), str(info.value)
        assert launcher.commands == []
    # A superset (more seeds, a raised budget, renamed) runs into the folder and becomes its table.
    grown = dataclasses.replace(smoke, name="grown", seeds=(0, 1, 2),
                                entries=(ppo, dataclasses.replace(sac, env_steps=2000)))
    launcher = FakeLauncher(fake)
    assert run_benchmark(grown, out, launcher=launcher, entries=["cartpole_sac"], libs=["robolearn"], composed=never_composed).exit_status == 0
    assert launcher.runs == [f"cartpole_sac/robolearn/seed{s}" for s in (0, 1, 2)]
    assert "resume=" in launcher.commands[0][4]  # the done 1000-step run continues to 2000
    assert json.loads((out / "table.json").read_text())["name"] == "grown"


def test_a_folder_with_runs_but_no_table_or_a_live_lock_is_refused(tmp_path: Path, fake: Path, smoke: Table) -> None:
    (tmp_path / "a" / "cartpole_ppo").mkdir(parents=True)
    with pytest.raises(TableError, match=r"holds run folders \(cartpole_ppo\) but no table.json"):
        run_benchmark(smoke, tmp_path / "a", launcher=FakeLauncher(fake), composed=never_composed)
    out = tmp_path / "b"
    out.mkdir()
    (out / ".benchmark.lock").write_text(f"{os.getpid()}\n")  # this process: alive
    with pytest.raises(TableError, match=rf"another `robolearn benchmark run` \(process {os.getpid()}\)"):
        run_benchmark(smoke, out, launcher=FakeLauncher(fake), composed=never_composed)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    (out / ".benchmark.lock").write_text(gone.stdout)  # a process that has exited: taken over
    launcher = FakeLauncher(fake)
    assert run_benchmark(smoke, out, launcher=launcher, seeds=[1], entries=["cartpole_sac"], composed=never_composed).exit_status == 0
    assert len(launcher.commands) == 2 and not (out / ".benchmark.lock").exists()


# -- the command line -------------------------------------------------------------------------
def test_cli_dry_run_lists_states_and_bad_settings_exit_2(
    tmp_path: Path, smoke: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    done = out / "cartpole_sac" / "sb3_default" / "seed1"
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"env_steps": 1000}))
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))
    assert benchmark_main(["run", "table=smoke", f"out={out}", "dry_run=true", "entries=cartpole_sac"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["entry", "lib", "seed", "state", "run", "dir"]
    assert lines[3].split()[:4] == ["cartpole_sac", "sb3_default", "1", "done"]  # seed 1: SB3 first
    assert lines[1].split()[:4] == ["cartpole_sac", "robolearn", "0", "fresh"]
    assert lines[-1] == "4 runs: 1 done, 0 resume, 3 fresh"
    assert not (out / "cartpole_sac" / "robolearn").exists()  # a dry run writes nothing
    # Hydra's list form selects the same runs as the comma form.
    assert benchmark_main(["run", "table=smoke", f"out={out}", "dry_run=true", "entries=[cartpole_sac]",
                           "seeds=[0, 1]"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == lines[1:]

    for argv, message in [
        (["run", "table=smoke", f"out={out}", "job=2"], "job: unknown setting (did you mean jobs?)"),
        (["run", "table=smoke", f"out={out}", "jobs=0"], "jobs=0: expected an integer >= 1"),
        (["run", f"out={out}"], "missing table="),
        (["run", "table=smoke", f"out={out}", "seeds=0,x"], "seeds='x': expected an integer >= 0"),
        (["run", "table=smoke", f"out={out}", "entries=[]"], "entries='[]': expected comma-separated values"),
        (["run", "table=nope", f"out={out}"], "table=nope: expected the name of a table"),
        (["report", f"out={tmp_path / 'empty'}"], "no table.json"),
        (["bench"], "unknown subcommand 'bench'"),
    ]:
        assert benchmark_main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv


# -- real runs ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_real_robolearn_run_resumes_in_its_directory_to_a_raised_budget(tmp_path: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    ppo = smoke.entry("cartpole_ppo")
    small = dataclasses.replace(smoke, entries=(dataclasses.replace(ppo, env_steps=2048),))
    first = run_benchmark(small, out, entries=["cartpole_ppo"], libs=["robolearn"], seeds=[0], composed=never_composed)
    assert first.exit_status == 0, (out / "cartpole_ppo/robolearn/seed0/benchmark.log").read_text()
    run_dir = out / "cartpole_ppo" / "robolearn" / "seed0"
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 2048
    full = dataclasses.replace(smoke, entries=(ppo,))
    composed = composer(full)  # the run is compared with what its fresh command composes now
    assert run_benchmark(full, out, dry_run=True, libs=["robolearn"], seeds=[0], composed=composed).planned[0][1] is RunState.RESUME
    second = run_benchmark(full, out, entries=["cartpole_ppo"], libs=["robolearn"], seeds=[0], composed=composed)
    assert second.exit_status == 0, (run_dir / "benchmark.log").read_text()
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 4096
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    steps = [float(r.split(",")[header.index("env_steps")]) for r in rows[1:]]
    train_s = [float(r.split(",")[header.index("time/train_s")]) for r in rows[1:]]
    assert steps == [2048.0, 4096.0]  # the rows continue, nothing repeated
    assert train_s[1] > train_s[0] > 0  # training time carried over the resume
    assert [r["state"] for r in _records(out)] == ["fresh", "resume"]
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt_*.pt")) == ["ckpt_002048.pt", "ckpt_004096.pt"]
    assert run_benchmark(full, out, entries=["cartpole_ppo"], libs=["robolearn"], seeds=[0], composed=composed).records == []


@pytest.mark.slow
def test_real_sb3_run_finishes_and_is_then_skipped(tmp_path: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    result = run_benchmark(smoke, out, entries=["cartpole_sac"], libs=["sb3_default"], seeds=[0], composed=never_composed)
    run_dir = out / "cartpole_sac" / "sb3_default" / "seed0"
    assert result.exit_status == 0, (run_dir / "benchmark.log").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 1000
    assert json.loads((run_dir / "config.json").read_text())["lib"] == "sb3_default"
    assert run_benchmark(smoke, out, entries=["cartpole_sac"], libs=["sb3_default"], seeds=[0], composed=never_composed).records == []


@pytest.mark.slow
def test_real_robolearn_run_interrupted_by_a_signal_checkpoints_and_resumes(tmp_path: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    ppo = dataclasses.replace(smoke.entry("cartpole_ppo"), env_steps=61440)  # 30 iterations of 2048
    table = dataclasses.replace(smoke, entries=(ppo,))
    run_dir = out / "cartpole_ppo" / "robolearn" / "seed0"

    def interrupting(cmd: Sequence[str], log_file: IO[bytes], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        proc = schedule.launch(cmd, log_file, env)
        deadline = time.monotonic() + 120
        metrics = run_dir / "metrics.csv"
        while time.monotonic() < deadline and proc.poll() is None:  # the first iteration's row is written
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
                break
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)  # as `kill <benchmark pid>` would
        return proc

    first = run_benchmark(table, out, libs=["robolearn"], seeds=[0], launcher=interrupting, poll_s=0.05, composed=never_composed)
    log_text = (run_dir / "benchmark.log").read_text()
    assert first.interrupted and [r.returncode for r in first.records] == [130], log_text
    assert not (run_dir / "summary.json").exists()
    stopped_at = [int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("ckpt_*.pt")]
    assert len(stopped_at) == 1 and 0 < stopped_at[0] < 61440  # the checkpoint written on the signal
    assert run_state(Run(ppo, "robolearn", 0, run_dir)) is RunState.RESUME

    second = run_benchmark(table, out, libs=["robolearn"], seeds=[0], composed=composer(table))
    assert second.exit_status == 0, (run_dir / "benchmark.log").read_text()
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 61440
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    column = rows[0].split(",").index("env_steps")
    steps = [float(r.split(",")[column]) for r in rows[1:]]
    assert steps == [2048.0 * k for k in range(1, 31)]  # one row per iteration, none lost or repeated
    assert [r["state"] for r in _records(out)] == ["fresh", "resume"]


def test_provenance_names_the_checkout_only_when_robolearn_is_one(tmp_path: Path) -> None:
    not_git = schedule.provenance(tmp_path)
    assert not_git["git_commit"] is None and not_git["git_dirty"] is None
    assert set(not_git["versions"]) == {"python", "torch", "mujoco", "stable_baselines3", "robolearn"}
    assert not_git["machine"]["logical_cores"] == os.cpu_count()
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("a")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert (schedule.provenance(repo)["git_commit"], schedule.provenance(repo)["git_dirty"]) == (head, False)
    (repo / "a.txt").write_text("b")
    assert schedule.provenance(repo)["git_dirty"] is True
    # A copy installed inside another repository is not a checkout of its own.
    assert schedule.provenance(repo / "pkg")["git_commit"] is None


# -- hostile use: where out points, a benchmark killed with SIGKILL ----------------------------
def test_out_that_is_a_file_or_a_foreign_folder_is_refused_before_anything_is_written(
    tmp_path: Path, fake: Path, smoke: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    for dry_run in (True, False):
        with pytest.raises(TableError, match=r"notes.txt: is a file; expected a folder"):
            run_benchmark(smoke, a_file, launcher=FakeLauncher(fake), dry_run=dry_run, composed=never_composed)
    assert benchmark_main(["run", "table=smoke", f"out={a_file}"]) == 2
    assert "is a file; expected a folder" in capsys.readouterr().err and a_file.read_text() == "mine"
    # A robolearn training run directory (or any folder of other files) is not a benchmark's folder.
    train_run = tmp_path / "train_run"
    (train_run / "checkpoints").mkdir(parents=True)
    (train_run / "config.json").write_text("{}")
    (train_run / "metrics.csv").write_text("step\n")
    launcher = FakeLauncher(fake)
    with pytest.raises(TableError, match=r"not empty \(checkpoints, config.json, metrics.csv\) and no table.json"):
        run_benchmark(smoke, train_run, launcher=launcher, composed=never_composed)
    assert launcher.commands == [] and sorted(p.name for p in train_run.iterdir()) == [
        "checkpoints", "config.json", "metrics.csv"]
    # An empty folder, or one holding only a stale lock (a benchmark killed before its table.json), is fine.
    (tmp_path / "empty" / ".benchmark.lock").parent.mkdir()
    (tmp_path / "empty" / ".benchmark.lock").write_text("999999999\n")
    assert run_benchmark(smoke, tmp_path / "empty", launcher=FakeLauncher(fake), seeds=[0],
                         entries=["cartpole_sac"], composed=never_composed).exit_status == 0


KILLED_BENCHMARK = r'''
import sys
from pathlib import Path
from robolearn.benchmark import schedule
from robolearn.benchmark.table import load_table

fake, out = sys.argv[1], Path(sys.argv[2])

def launcher(cmd, log_file, env):
    return schedule.launch([sys.executable, fake, *cmd[3:]], log_file, {**env, "FAKE_SLEEP": "60"})

def uncalled(run):
    raise AssertionError(run.name)  # a fresh run: nothing to compare

schedule.run_benchmark(load_table("smoke", check_tasks=False), out, launcher=launcher, seeds=[0],
                       entries=["cartpole_sac"], libs=["robolearn"], poll_s=0.05, composed=uncalled)
'''


def test_a_benchmark_killed_with_sigkill_leaves_its_running_runs_listed_and_the_rerun_waits_for_them(
    tmp_path: Path, fake: Path, smoke: Table
) -> None:
    out = tmp_path / "out"
    script = tmp_path / "bench.py"
    script.write_text(KILLED_BENCHMARK)
    bench = subprocess.Popen([sys.executable, str(script), str(fake), str(out)])
    run = out / "cartpole_sac" / "robolearn" / "seed0"
    lock = out / ".benchmark.lock"
    try:
        _wait_for(lambda: (run / "ready").exists() and "child" in (lock.read_text() if lock.exists() else ""),
                  "the benchmark's child to start", alive=lambda: bench.poll() is None)
    finally:
        bench.kill()  # SIGKILL: no cleanup; the child runs on in its own session
        bench.wait()
    child = int(lock.read_text().splitlines()[1].split()[1])
    try:
        launcher = FakeLauncher(fake)
        with pytest.raises(TableError, match=rf"still run: {run} \(process {child}\).*kill -INT {child}"):
            run_benchmark(smoke, out, launcher=launcher, seeds=[0], entries=["cartpole_sac"], libs=["robolearn"], composed=never_composed)
        assert launcher.commands == [] and (run / "ready").exists()  # its run directory untouched
    finally:
        os.kill(child, signal.SIGINT)  # as the message says: it checkpoints and exits
    _wait_for(lambda: not schedule._alive(child) or _reaped(child), "the orphaned child to exit")
    launcher = FakeLauncher(fake)
    assert run_benchmark(smoke, out, launcher=launcher, seeds=[0], entries=["cartpole_sac"],
                         libs=["robolearn"], composed=never_composed).exit_status == 0
    assert launcher.runs == ["cartpole_sac/robolearn/seed0"] and f"resume={run}" in launcher.commands[0]
    assert not lock.exists()


def _reaped(pid: int) -> bool:
    """Whether ``pid`` is a zombie (an orphan's exit that init has not collected yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def test_a_misspelt_sb3_hyperparameter_stops_the_benchmark_before_anything_is_written(
    tmp_path: Path, fake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = three_lib_table().to_dict()
    data["entries"][0]["sb3"]["zoo"]["kwargs"]["n_stepz"] = 32  # a typo of n_steps
    path = tmp_path / "typo.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    table = load_table(path, check_tasks=False)
    out = tmp_path / "out"
    for dry_run in (True, False):
        launcher = FakeLauncher(fake)
        with pytest.raises(TableError) as info:
            run_benchmark(table, out, launcher=launcher, dry_run=dry_run, composed=never_composed)
        assert str(info.value) == f"{path}: entries[0] (a).sb3.zoo.kwargs.n_stepz: not an argument of stable_baselines3.PPO (got 32)"
        assert launcher.commands == [] and not out.exists()
    # The robolearn side alone does not need SB3's hyperparameters.
    assert run_benchmark(table, out, launcher=FakeLauncher(fake), libs=["robolearn"], seeds=[0], composed=never_composed).exit_status == 0
    assert benchmark_main(["run", f"table={path}", f"out={tmp_path / 'out2'}", "dry_run=true"]) == 2
    assert "n_stepz: not an argument of stable_baselines3.PPO" in capsys.readouterr().err


def test_runs_the_interrupt_stopped_are_not_reported_as_failures(capsys: pytest.CaptureFixture[str]) -> None:
    from robolearn.cli.benchmark import _print_outcome

    def record(lib: str, code: int) -> schedule.RunRecord:
        return schedule.RunRecord("cp", lib, 0, f"/o/cp/{lib}/seed0", "fresh", code, 1.0, (0.0,) * 3, (0.0,) * 3, "t")

    # SB3 ends by the forwarded SIGINT's KeyboardInterrupt (-2), robolearn with 130, a child signalled while it
    # still imported fails its import (1); a crash (1) the benchmark did not signal is a failure.
    records = [record("robolearn", 130), record("sb3_default", -signal.SIGINT), record("sb3_zoo", 1),
               dataclasses.replace(record("importing", 1), signalled=True)]
    result = schedule.BenchmarkResult([], records, interrupted=True)
    assert [r.lib for r in result.stopped] == ["robolearn", "sb3_default", "importing"]
    assert [r.lib for r in result.failed] == ["sb3_zoo"]
    assert _print_outcome(result, Path("/o")) == 130
    captured = capsys.readouterr()
    assert "4 runs executed, 0 already done, 1 failed, 3 stopped by the interrupt" in captured.out
    assert [line for line in captured.err.splitlines() if line.startswith("failed:")] == [
        "failed: cp/sb3_zoo/seed0 exited with 1; see /o/cp/sb3_zoo/seed0/benchmark.log"]
    # Without an interrupt, a run killed by SIGINT (someone else's signal) is a failure.
    assert [r.lib for r in schedule.BenchmarkResult([], records, interrupted=False).failed] == [
        "robolearn", "sb3_default", "sb3_zoo", "importing"]


# -- stale runs: made by another recipe than the table's command gives them now -------------------
MY_RECIPE = """# @package _global_
defaults:
  - override /algo: ppo
task: Cartpole-Balance
"""
"""A recipe of a tmp folder: the table's check reads its task and algorithm. Hydra cannot compose it
(it is not in robolearn.configs), so the tests of stale runs stand :func:`_composing` in for Hydra."""


def _my_config(run_dir: Path) -> dict[str, Any]:
    """A robolearn run's config.json as the ``mine`` recipe under the benchmark's command made it."""
    return {
        "task": "Cartpole-Balance", "task_overrides": {}, "seed": 0, "num_envs": 64, "eval_num_envs": 2,
        "total_env_steps": 4096, "run_dir": str(run_dir), "resume": None, "torch_threads": 1, "sim_threads": 1,
        "algo": {"name": "ppo", "learning_rate": 0.0003, "gamma": 1.0, "entropy_coef": 0.01, "actor_hidden": [64, 64],
                 "num_steps": 24},
        "runner": {"eval_interval": 25, "video": False, "console": False, "tensorboard": False},
    }


def _composing(**algo: Any) -> schedule.ComposedConfig:
    """A stand-in for :func:`robolearn.cli.benchmark.composer`: the ``mine`` recipe now composes
    :func:`_my_config` with the ``algo`` settings given, spelt otherwise (``gamma: 1``, not ``1.0``)
    and with other values of the keys that are not compared: those the benchmark sets per run and those
    that do not change training."""

    def composed(run: Run) -> dict[str, Any]:
        now = _my_config(Path("another") / "run_dir")
        now.update(seed=7, total_env_steps=run.entry.env_steps, eval_num_envs=8, overwrite=True)
        now["algo"] = {**now["algo"], "gamma": 1, **algo}
        now["runner"] = {**now["runner"], "video": True, "video_size": [64, 64], "checkpoint_interval": 5}
        return now

    return composed


def _finished(run_dir: Path, config: Mapping[str, Any] | None, steps: int, sb3: bool = False) -> None:
    """A run directory that finished ``steps`` env steps, with its checkpoint and config.json."""
    ckpt = run_dir / ("sb3_checkpoint" if sb3 else "checkpoints")
    ckpt.mkdir(parents=True)
    (ckpt / ("model.zip" if sb3 else "ckpt_004096.pt")).write_text("weights")
    if config is not None:
        (run_dir / "config.json").write_text(json.dumps(config))
    (run_dir / "summary.json").write_text(json.dumps({"env_steps": steps}))


def _files(path: Path) -> dict[str, str]:
    """Every file under ``path`` with its content."""
    return {str(p.relative_to(path)): p.read_text() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def mine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Table]:
    """A one-run table of the ``mine`` recipe (MY_RECIPE, in a recipes folder of its own), and its output
    folder with that run done as the recipe composes it (:func:`_my_config`)."""
    from robolearn.benchmark import table as table_module

    recipes = tmp_path / "experiment"
    recipes.mkdir()
    (recipes / "mine.yaml").write_text(MY_RECIPE)
    monkeypatch.setattr(table_module, "experiments_dir", lambda: recipes)
    path = tmp_path / "mine_table.yaml"
    path.write_text(json.dumps({
        "name": "mine", "seeds": [0], "libs": ["robolearn"], "eval_episodes": 2,
        "entries": [{"id": "e", "task": "Cartpole-Balance", "algo": "ppo", "experiment": "mine", "env_steps": 4096,
                     "eval_every": 2048}],
    }))
    table = load_table(path, check_tasks=False)
    out = tmp_path / "out"
    run = out / "e" / "robolearn" / "seed0"
    _finished(run, _my_config(run), 4096)
    (out / "table.json").write_text(json.dumps(table.to_dict()))
    return out, table


def test_values_are_compared_not_their_spelling() -> None:
    from robolearn.benchmark.schedule import same_value

    assert same_value(3e-4, 0.0003) and same_value(1, 1.0) and same_value((64, 64), [64, 64])
    assert same_value({"a": [1, {"b": 2.0}]}, {"a": [1, {"b": 2}]}) and same_value(None, None)
    assert not same_value(True, 1) and not same_value(0, False)  # JSON and YAML keep booleans apart
    assert not same_value([64], [64, 64]) and not same_value({"a": 1}, {"a": 1, "b": 1})
    assert not same_value(0.0003, 0.0004) and not same_value("3e-4", 0.0003)


def test_an_unchanged_recipe_is_not_stale_and_its_done_run_is_skipped(mine: tuple[Path, Table], fake: Path) -> None:
    out, table = mine
    run = plan(table, out)[0]
    # 1 is 1.0; the benchmark's own keys (seed, run_dir, budget, eval worlds) and video, checkpoint
    # cadence and overwrite aside.
    assert schedule.recipe_differences(run, _composing()) == []
    launcher = FakeLauncher(fake)
    result = run_benchmark(table, out, launcher=launcher, composed=_composing())
    assert launcher.commands == [] and result.stale == [] and result.planned == [(run, RunState.DONE)]
    # robolearn's PPO has no schedule over total_env_steps: a raised budget resumes the run.
    bigger = dataclasses.replace(table, entries=(dataclasses.replace(table.entries[0], env_steps=8192),))
    result = run_benchmark(bigger, out, launcher=launcher, composed=_composing())
    assert result.stale == [] and [r.state for r in result.records] == ["resume"]
    assert f"resume={run.run_dir}" in launcher.commands[0]


def test_a_robolearn_run_annealing_its_learning_rate_is_stale_under_a_raised_budget(
    mine: tuple[Path, Table], fake: Path
) -> None:
    """``algo.schedule: linear`` anneals over the budget the run started with: the same budget skips
    the done run, a raised one refuses it (resumed, the rate would step up) naming why."""
    out, table = mine
    run = plan(table, out)[0]
    config = _my_config(run.run_dir)
    config["algo"]["schedule"] = "linear"
    (run.run_dir / "config.json").write_text(json.dumps(config))
    linear = _composing(schedule="linear")
    assert schedule.recipe_differences(run, linear) == []
    bigger = dataclasses.replace(table, entries=(dataclasses.replace(table.entries[0], env_steps=8192),))
    grown = plan(bigger, out)[0]
    assert [str(d) for d in schedule.recipe_differences(grown, linear) or []] == [
        "total_env_steps: was 4096, now 8192 (algo.schedule: linear anneals the learning rate over the budget the "
        "run started with: continued to another budget the rate jumps)"]
    launcher = FakeLauncher(fake)
    with pytest.raises(TableError, match=r"seed0 \(resume\): total_env_steps: was 4096, now 8192"):
        run_benchmark(bigger, out, launcher=launcher, composed=linear)
    assert launcher.commands == []


def test_a_changed_recipe_value_is_stale_and_refused_before_anything_runs_or_is_written(
    mine: tuple[Path, Table], fake: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from robolearn.cli import benchmark as cli_benchmark

    out, table = mine
    now = _composing(entropy_coef=0.02)  # the recipe composes another entropy coefficient now
    monkeypatch.setattr(cli_benchmark, "composer", lambda table: now)  # for the command line below
    before = _files(out)
    run_dir = out / "e" / "robolearn" / "seed0"
    for dry_run in (True, False):
        launcher = FakeLauncher(fake)
        with pytest.raises(TableError) as info:
            run_benchmark(table, out, launcher=launcher, dry_run=dry_run, composed=now)
        message = str(info.value)
        assert f"{run_dir} (done): algo.entropy_coef: was 0.01, now 0.02\n" in message, message
        assert "learning_rate" not in message and "gamma" not in message and "eval_num_envs" not in message
        assert "Move those run folders aside, restore the recipe" in message and "rerun_stale=true" in message
        assert launcher.commands == [] and _files(out) == before  # nothing started, written or moved
        assert sorted(p.name for p in run_dir.parent.iterdir()) == ["seed0"]
    # The same through the command line: one error, exit status 2; a bad rerun_stale is named.
    path = table.source
    assert benchmark_main(["run", f"table={path}", f"out={out}"]) == 2
    assert "algo.entropy_coef: was 0.01, now 0.02" in capsys.readouterr().err
    assert benchmark_main(["run", f"table={path}", f"out={out}", "rerun_stale=maybe"]) == 2
    assert "rerun_stale='maybe': expected true or false" in capsys.readouterr().err
    assert _files(out) == before


def test_rerun_stale_sets_the_folder_aside_and_starts_the_run_fresh(
    mine: tuple[Path, Table], fake: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from robolearn.cli import benchmark as cli_benchmark

    out, table = mine
    now = _composing(actor_hidden=[64, 64, 64])
    monkeypatch.setattr(cli_benchmark, "composer", lambda table: now)
    run_dir = out / "e" / "robolearn" / "seed0"
    old_files = _files(run_dir)
    # A dry run lists it as stale and moves nothing.
    assert benchmark_main(["run", f"table={table.source}", f"out={out}", "dry_run=true", "rerun_stale=true"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[1].split()[3] == "stale" and "1 runs: 0 done, 0 resume, 0 fresh, 1 stale" in printed
    assert "algo.actor_hidden: was [64, 64], now [64, 64, 64]" in printed and _files(run_dir) == old_files

    launcher = FakeLauncher(fake)
    result = run_benchmark(table, out, launcher=launcher, rerun_stale=True, composed=now)
    assert result.exit_status == 0 and [s.run.run_dir for s in result.stale] == [run_dir]
    assert result.planned[0][1] is RunState.FRESH and [r.state for r in result.records] == ["fresh"]
    assert "experiment=mine" in launcher.commands[0] and not any(a.startswith("resume=") for a in launcher.commands[0])
    assert json.loads((run_dir / "child.json").read_text())["files"] == ["benchmark.log"]  # a new, empty folder
    aside = [p for p in run_dir.parent.iterdir() if p.name != "seed0"]
    assert len(aside) == 1 and re.fullmatch(r"seed0\.stale-\d{8}T\d{6}", aside[0].name), aside
    assert _files(aside[0]) == old_files  # the old run, every file of it, kept
    assert result.aside == {run_dir: aside[0]}
    assert cli_benchmark._print_outcome(result, out) == 0  # the real new folder, not a placeholder
    assert f"rerun (stale, its folder set aside as {aside[0]}): {run_dir} (done)" in capsys.readouterr().out
    assert not (out / ".benchmark.lock").exists()
    # The new run (the fake child writes no config.json: its recipe is unknown) is done and kept.
    again = run_benchmark(table, out, launcher=launcher, composed=now)
    assert len(launcher.commands) == 1 and again.stale == [] and [r.name for r in again.unknown_recipe] == ["e/robolearn/seed0"]
    assert _files(aside[0]) == old_files


def test_set_aside_all_names_the_folder_by_utc_time_and_never_overwrites(tmp_path: Path, smoke: Table) -> None:
    import datetime as dt

    run = plan(smoke, tmp_path / "out")[0]
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    for expected in ("seed0.stale-20260102T030405", "seed0.stale-20260102T030405-1"):
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "summary.json").write_text(expected)
        moved, = schedule.set_aside_all([(run, schedule.STALE_SUFFIX)], tmp_path / "out", when)
        assert moved.name == expected and (moved / "summary.json").read_text() == expected
    with pytest.raises(TableError, match=r"cartpole_ppo/robolearn/seed0: .* is not inside out="):
        schedule.set_aside_all([(run, schedule.STALE_SUFFIX)], tmp_path / "elsewhere", when)
    # A time of another zone is named in UTC (03:04:05 at UTC+2 is 01:04:05 UTC).
    run.run_dir.mkdir(parents=True)
    later = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert schedule.set_aside_all([(run, schedule.STALE_SUFFIX)], tmp_path / "out", later)[0].name == "seed0.stale-20260102T010405"
    # Every target is checked before any folder moves: one that cannot be set aside moves none.
    first, second = plan(smoke, tmp_path / "out")[:2]
    first.run_dir.mkdir(parents=True)
    with pytest.raises(TableError, match=rf"{second.name}: .* is not a folder"):
        schedule.set_aside_all([(first, schedule.STALE_SUFFIX), (second, schedule.STALE_SUFFIX)], tmp_path / "out", when)
    assert first.run_dir.is_dir()


LIN_RECIPE = """# @package _global_
defaults:
  - override /algo: ppo
task: Cartpole-Balance
task_overrides:
  episode_length: 20
"""


def _recipe_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> Path:
    """A folder of experiment recipes holding ``<name>.yaml``, which the table reads instead of configs/experiment."""
    from robolearn.benchmark import table as table_module

    recipes = tmp_path / "experiment"
    recipes.mkdir()
    (recipes / f"{name}.yaml").write_text(text)
    monkeypatch.setattr(table_module, "experiments_dir", lambda: recipes)
    return recipes


def test_sb3_runs_stale_by_task_overrides_or_by_a_raised_budget_under_a_lin_schedule(
    tmp_path: Path, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from robolearn.benchmark import sb3_run

    recipes = _recipe_dir(tmp_path, monkeypatch, "lin", LIN_RECIPE)
    zoo = {"source": "zoo", "n_envs": 4, "normalize": True,
           "kwargs": {"n_steps": 32, "gamma": 0.95, "learning_rate": "lin_1e-3"}}
    spec = {"name": "lin", "seeds": [0], "libs": ["sb3_default", "sb3_zoo"], "eval_episodes": 2, "entries": [
        {"id": "a", "task": "Cartpole-Balance", "algo": "ppo", "experiment": "lin", "env_steps": 100, "eval_every": 50,
         "sb3": {"n_envs": 2, "default": {"gamma": 0.9}, "zoo": zoo}}]}
    table = table_from_dict(spec, "lin")
    out = tmp_path / "out"
    runs = {r.lib: r for r in plan(table, out)}
    for lib, run in runs.items():
        recorded = sb3_run.parse_args(command(run, table, RunState.FRESH)[3:]).config()  # what sb3_run writes
        keys = ("sb3_kwargs", "n_envs", "normalize", "task_overrides", "gymnasium")
        assert schedule.sb3_settings(run) == {k: recorded[k] for k in keys}, lib  # the mirror of sb3_run
        _finished(run.run_dir, recorded, 100, sb3=True)
    assert json.loads((runs["sb3_zoo"].run_dir / "config.json").read_text())["normalize"] == {"gamma": 0.95}
    (out / "table.json").write_text(json.dumps(table.to_dict()))
    launcher = FakeLauncher(fake)
    assert run_benchmark(table, out, launcher=launcher, composed=never_composed).stale == [] and launcher.commands == []

    # A raised budget: the lin_ schedule would jump if resumed; the run without one resumes.
    bigger = table_from_dict({**spec, "entries": [{**spec["entries"][0], "env_steps": 200}]}, "lin")
    planned = [(r, run_state(r)) for r in plan(bigger, out)]
    assert [s for _, s in planned] == [RunState.RESUME, RunState.RESUME]
    stale, unknown = schedule.find_stale(planned, never_composed)
    assert unknown == [] and [s.run.lib for s in stale] == ["sb3_zoo"]
    assert [str(d) for d in stale[0].differences] == [
        "total_env_steps: was 100, now 200 (sb3_kwargs.learning_rate decays linearly over the budget the run "
        "started with: continued to another budget the schedule jumps)"]
    with pytest.raises(TableError, match=r"sb3_zoo/seed0 \(resume\): total_env_steps: was 100, now 200"):
        run_benchmark(bigger, out, launcher=launcher, composed=never_composed)
    assert launcher.commands == []
    result = run_benchmark(bigger, out, launcher=launcher, libs=["sb3_default"], composed=never_composed)
    assert result.stale == [] and [(r.lib, r.state) for r in result.records] == [("sb3_default", "resume")]
    # The stale zoo run, not selected, is checked too: left as it is, with a warning.
    assert [str(s) for s in result.stale_elsewhere] == [str(stale[0])] and runs["sb3_zoo"].run_dir.is_dir()

    # An entry's SB3 block edited (kwargs, n_envs, normalize): the table still runs into the folder
    # (no "compatible superset" refusal), and the stale check names each SB3 run it changed.
    edited = {**spec["entries"][0], "env_steps": 200,
              "sb3": {"n_envs": 3, "default": {"gamma": 0.95}, "zoo": {**zoo, "normalize": False}}}
    edited_table = table_from_dict({**spec, "entries": [edited]}, "lin")
    with pytest.raises(TableError) as info:
        run_benchmark(edited_table, out, launcher=launcher, libs=["sb3_default"], composed=never_composed)
    assert "not a compatible superset" not in str(info.value)
    assert "sb3_default/seed0 (done): sb3_kwargs.gamma: was 0.9, now 0.95; n_envs: was 2, now 3\n" in str(info.value)
    stale, _ = schedule.find_stale([(r, run_state(r)) for r in plan(edited_table, out)], never_composed)
    assert [str(d) for d in stale[1].differences][:1] == ['normalize: was {"gamma": 0.95}, now null']
    result = run_benchmark(edited_table, out, launcher=launcher, rerun_stale=True, composed=never_composed)
    assert sorted(s.run.lib for s in result.stale) == ["sb3_default", "sb3_zoo"]
    assert sorted(r.state for r in result.records) == ["fresh", "fresh"]
    for lib in ("sb3_default", "sb3_zoo"):
        assert result.aside[runs[lib].run_dir].name.startswith("seed0.stale-")
        assert json.loads((result.aside[runs[lib].run_dir] / "config.json").read_text()) is not None
    (recipes / "lin.yaml").write_text(LIN_RECIPE)
    table, out = edited_table, tmp_path / "out2"
    runs = {r.lib: r for r in plan(table, out)}
    for run in runs.values():
        _finished(run.run_dir, sb3_run.parse_args(command(run, table, RunState.FRESH)[3:]).config(), 200, sb3=True)
    (out / "table.json").write_text(json.dumps(table.to_dict()))

    # The recipe's MDP changed: both SB3 runs trained another task than robolearn's now.
    (recipes / "lin.yaml").write_text(LIN_RECIPE.replace("episode_length: 20", "episode_length: 30"))
    stale, _ = schedule.find_stale([(r, RunState.DONE) for r in plan(table, out)], never_composed)
    assert {s.run.lib: [str(d) for d in s.differences] for s in stale} == {
        lib: ['task_overrides: was {"episode_length": 20}, now {"episode_length": 30}']
        for lib in ("sb3_default", "sb3_zoo")}


def test_sb3_settings_are_computed_once_per_entry_and_lib_in_one_check(
    tmp_path: Path, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from robolearn.benchmark import sb3_run
    from robolearn.cli import benchmark as cli_benchmark

    table = three_lib_table()  # 3 SB3 configurations (a/sb3_default, a/sb3_zoo, b/sb3_default), 3 seeds
    out = tmp_path / "out"
    sb3_runs = [r for r in plan(table, out) if r.lib != "robolearn"]
    for run in sb3_runs:
        _finished(run.run_dir, sb3_run.parse_args(command(run, table, RunState.FRESH)[3:]).config(),
                  run.entry.env_steps, sb3=True)
    (out / "table.json").write_text(json.dumps(table.to_dict()))
    # One seed's run made with other n_envs: the settings shared by its seeds still find it.
    odd = next(r for r in sb3_runs if (r.entry.id, r.lib, r.seed) == ("a", "sb3_zoo", 2))
    config = json.loads((odd.run_dir / "config.json").read_text())
    (odd.run_dir / "config.json").write_text(json.dumps({**config, "n_envs": 4}))
    calls: list[str] = []
    real = schedule.sb3_settings
    monkeypatch.setattr(schedule, "sb3_settings", lambda run: calls.append(run.name) or real(run))
    launcher = FakeLauncher(fake)
    result = run_benchmark(table, out, launcher=launcher, seeds=[0], libs=["sb3_default", "sb3_zoo"], composed=never_composed)
    assert launcher.commands == [] and result.stale == []
    assert [str(s) for s in result.stale_elsewhere] == [f"{odd.run_dir} (done): n_envs: was 4, now 8"]
    # 9 runs compared (3 selected, 6 elsewhere), each configuration's settings computed once.
    assert sorted(calls) == ["a/sb3_default/seed0", "a/sb3_zoo/seed0", "b/sb3_default/seed0"]
    calls.clear()
    check = cli_benchmark.RecipeCheck(table, out)  # the report's check: once per configuration too
    assert [check(r.run_dir) for r in sb3_runs] == [None if r != odd else "n_envs: was 4, now 8" for r in sb3_runs]
    assert len(calls) == 3


def test_runs_outside_the_selection_that_cannot_be_checked_are_warned_of_once_per_reason(
    tmp_path: Path, smoke: Table, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    out = tmp_path / "out"
    others = plan(smoke, out, seeds=[1], libs=["robolearn"])
    for run in others:
        _finished(run.run_dir, {"algo": {"name": run.entry.algo}}, run.entry.env_steps)
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))

    def cannot(run: Run) -> Mapping[str, Any]:
        raise TableError("no Hydra here")

    caplog.set_level(logging.WARNING, logger=schedule.__name__)
    result = run_benchmark(smoke, out, dry_run=True, seeds=[0], libs=["robolearn"], composed=cannot)
    assert result.stale_elsewhere == [] and len(others) == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"{', '.join(r.name for r in others)}: not selected, and cannot be checked for a changed recipe: no Hydra here"]


def test_the_report_reads_seed_folders_only_not_those_set_aside(tmp_path: Path, smoke: Table) -> None:
    from robolearn.benchmark.report import write_report
    from robolearn.logging import Logger

    out = tmp_path / "out"
    run = next(r for r in plan(smoke, out) if (r.entry.id, r.lib, r.seed) == ("cartpole_sac", "robolearn", 0))
    run.run_dir.mkdir(parents=True)
    with Logger(run.run_dir, tensorboard=False, console=False) as logger:
        logger.log({"env_steps": 1000.0, "time/train_s": 10.0, "eval/return": 987.0}, step=1000)
    (run.run_dir / "summary.json").write_text(json.dumps({"env_steps": 1000, "train_time_s": 10.0}))
    (run.run_dir / "config.json").write_text(json.dumps({"algo": {"name": "sac"}}))  # a run directory needs one
    schedule.set_aside_all([(run, schedule.STALE_SUFFIX)], out)
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))
    page = write_report(smoke.to_dict(), out, tmp_path / "RESULTS.md", tmp_path / "figures", reps=20).read_text()
    # Read, the run set aside would give cartpole_sac a row with a final return of 987.
    assert "Not run yet (no finished run of any library): cartpole_ppo, cartpole_sac." in page, page
    assert "987" not in page


def test_the_report_leaves_a_stale_run_out_and_lists_it_under_its_entry(
    tmp_path: Path, smoke: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    from robolearn.benchmark.report import write_report
    from robolearn.cli import benchmark as cli_benchmark
    from robolearn.logging import Logger

    out = tmp_path / "out"
    run = next(r for r in plan(smoke, out) if (r.entry.id, r.lib, r.seed) == ("cartpole_sac", "robolearn", 0))
    run.run_dir.mkdir(parents=True)
    budget = run.entry.env_steps
    with Logger(run.run_dir, tensorboard=False, console=False) as logger:
        logger.log({"env_steps": float(budget), "time/train_s": 10.0, "eval/return": 987.0}, step=budget)
    (run.run_dir / "summary.json").write_text(json.dumps({"env_steps": budget, "train_time_s": 10.0}))
    (run.run_dir / "config.json").write_text(json.dumps({"algo": {"name": "sac"}}))
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))

    def page(stale: Any) -> str:
        return write_report(smoke.to_dict(), out, tmp_path / "RESULTS.md", tmp_path / "figures", reps=20,
                            stale=stale).read_text()

    plain = page(None)
    assert "987" in plain and page(lambda path: None) == plain  # nothing stale: the same bytes
    stale = page(lambda path: 'algo.tau: was 0.005, now 0.01' if path == run.run_dir else None)
    assert "987" not in stale and "| cartpole_sac | robolearn | 0/2 |" in stale, stale
    assert ("- robolearn seed 0: stale: made by another recipe (algo.tau: was 0.005, now 0.01); rerun with "
            "`benchmark run ... rerun_stale=true`") in stale
    # The command line's check: the run's config.json against what its recipe composes now.
    check = cli_benchmark.RecipeCheck(smoke, out)
    (run.run_dir / "config.json").unlink()
    assert check(run.run_dir) is None  # no config.json: its recipe is unknown, the run is reported
    (run.run_dir / "config.json").write_text(json.dumps({"algo": {"name": "ppo"}, "task_overrides": {}}))
    assert check(run.run_dir) is not None and 'algo.name: was "ppo", now "sac"' in str(check(run.run_dir))


def test_runs_as_the_real_commands_record_them_are_not_stale(tmp_path: Path, fake: Path, smoke: Table) -> None:
    from robolearn.benchmark import sb3_run
    from robolearn.cli.commands import compose_config, job_train_config
    from robolearn.cli.config import train_config_to_dict

    out = tmp_path / "out"
    for run in plan(smoke, out, seeds=[0]):
        cmd = command(run, smoke, RunState.FRESH)
        if run.lib == "robolearn":  # config.json as `robolearn train` writes it from the command line
            config = train_config_to_dict(job_train_config(compose_config("train", cmd[4:]), cmd[4:]))
        else:
            config = sb3_run.parse_args(cmd[3:]).config()
        _finished(run.run_dir, config, run.entry.env_steps, sb3=run.lib != "robolearn")
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))
    launcher = FakeLauncher(fake)
    result = run_benchmark(smoke, out, launcher=launcher, seeds=[0], composed=composer(smoke))
    assert launcher.commands == [] and result.stale == [] and result.unknown_recipe == []
    assert [s for _, s in result.planned] == [RunState.DONE] * 4


def test_a_listed_child_is_recognised_by_its_whole_run_dir_argument_not_a_prefix_of_another(tmp_path: Path) -> None:
    # seed1's leftover check must not take seed10's live run (or the reverse) for its own.
    seed10 = str(tmp_path / "e" / "robolearn" / "seed10")
    sleeper = "import time; time.sleep(30)"
    procs = [
        subprocess.Popen([sys.executable, "-c", sleeper, f"run_dir={seed10}"]),
        subprocess.Popen([sys.executable, "-c", sleeper, "--out", seed10]),
    ]
    try:
        for proc in procs:
            # Right after exec the kernel shows an empty command line for a moment: wait for the real one.
            _wait_for(lambda pid=proc.pid: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(sys.executable.encode()),
                      "the sleeper's command line")
            assert schedule._runs_in(proc.pid, seed10)
            assert not schedule._runs_in(proc.pid, seed10[:-1])  # .../seed1
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert not schedule._runs_in(procs[0].pid, seed10)  # exited: not running any run


def test_same_value_is_total() -> None:
    from robolearn.benchmark.schedule import same_value

    assert not same_value(10**400, 1) and not same_value(10**400, 1.0) and same_value(10**400, 10**400)
    assert same_value(float("nan"), float("nan")) and not same_value(float("nan"), 1)


def test_the_composed_config_catches_a_deleted_recipe_line_or_a_changed_default(
    tmp_path: Path, fake: Path, smoke: Table, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from robolearn.cli import benchmark as cli_benchmark
    from robolearn.cli import commands

    calls: list[list[str]] = []
    real = commands.compose_config
    monkeypatch.setattr(commands, "compose_config", lambda name, args: calls.append(list(args)) or real(name, args))
    out = tmp_path / "out"
    composed = cli_benchmark.composer(smoke)
    seed0, seed1 = (r for r in plan(smoke, out, entries=["cartpole_ppo"], libs=["robolearn"]))
    now = composed(seed0)
    assert composed(seed1) is now and len(calls) == 1  # one composition per experiment, not per seed
    # The run was made when its recipe still said `schedule: fixed` (cartpole_ppo now sets no schedule:
    # PPO's default, adaptive, applies); it also differs in keys that do not change training.
    was = json.loads(json.dumps(now))
    was["algo"]["schedule"] = "fixed"
    was["runner"].update(checkpoint_interval=7, keep_checkpoints=9, video_camera="track", video_size=[8, 8],
                         overwrite=True)
    was.update(overwrite=True, seed=0, run_dir=str(seed0.run_dir))
    # Settings added since the run was made: at its default (desired_kl) a new setting is what the run
    # trained with, so it is not a difference; set by the recipe to another value (cartpole_ppo's gamma
    # 0.98, PPO's default 0.99) it is.
    del was["algo"]["desired_kl"], was["algo"]["gamma"]
    _finished(seed0.run_dir, was, seed0.entry.env_steps)
    assert [str(d) for d in schedule.recipe_differences(seed0, composed)] == [
        "algo.gamma: was not set, now 0.98", 'algo.schedule: was "fixed", now "adaptive"']
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))
    before = _files(out)
    # Through the command line (it composes with Hydra): refused before anything is written.
    assert benchmark_main(["run", f"table={smoke.source}", f"out={out}", "seeds=0", "libs=robolearn",
                           "entries=cartpole_ppo", "dry_run=true"]) == 2
    assert 'algo.schedule: was "fixed", now "adaptive"' in capsys.readouterr().err and _files(out) == before
    # A brand-new folder never composes (nothing to compare): no Hydra call for it.
    calls.clear()
    assert run_benchmark(smoke, tmp_path / "new", launcher=FakeLauncher(fake), seeds=[0], libs=["robolearn"],
                         composed=cli_benchmark.composer(smoke)).exit_status == 0
    assert calls == []


def test_a_recipe_with_defaults_after_self_is_compared_as_it_composes(tmp_path: Path, smoke: Table) -> None:
    from robolearn.cli import benchmark as cli_benchmark

    entry = dataclasses.replace(smoke.entries[0], id="o2o", experiment="hopper_o2o", env_steps=100_000)
    table = dataclasses.replace(smoke, entries=(entry,), libs=("robolearn",))
    run = plan(table, tmp_path / "out")[0]
    composed = cli_benchmark.composer(table)
    _finished(run.run_dir, dict(composed(run)), entry.env_steps)
    assert schedule.recipe_differences(run, composed) == []
    # A setting of the o2o_method group that hopper_o2o's defaults compose after _self_ is compared too.
    was = json.loads(json.dumps(composed(run)))
    assert was["o2o"]["warmup_steps"] == 5000  # configs/o2o_method/wsrl.yaml's
    was["o2o"]["warmup_steps"] = 0
    (run.run_dir / "config.json").write_text(json.dumps(was))
    assert [str(d) for d in schedule.recipe_differences(run, composed) or []] == ["o2o.warmup_steps: was 0, now 5000"]


def test_a_finished_run_short_of_a_raised_budget_without_a_checkpoint_is_set_aside_not_deleted(
    tmp_path: Path, fake: Path, smoke: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    from robolearn.cli.benchmark import _print_plan

    out = tmp_path / "out"
    run = plan(smoke, out, seeds=[0], libs=["robolearn"], entries=["cartpole_sac"])[0]
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "summary.json").write_text(json.dumps({"env_steps": run.entry.env_steps - 1}))
    (run.run_dir / "config.json").write_text("[1, 2]")  # not a mapping: its recipe is unknown
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))
    old = _files(run.run_dir)
    assert run_state(run) is RunState.FRESH
    with pytest.raises(TableError, match="holds a summary.json"):
        schedule.clear_run_dir(run, out)  # the last guard: a finished run is never rmtree'd
    dry = run_benchmark(smoke, out, dry_run=True, seeds=[0], libs=["robolearn"], entries=["cartpole_sac"], composed=never_composed)
    assert dry.short == [run] and dry.aside == {} and _files(run.run_dir) == old
    _print_plan(dry)
    assert f"short: {run.run_dir} finished short of the budget" in capsys.readouterr().out
    launcher = FakeLauncher(fake)
    result = run_benchmark(smoke, out, launcher=launcher, seeds=[0], libs=["robolearn"], entries=["cartpole_sac"], composed=never_composed)
    moved = result.aside[run.run_dir]
    assert re.fullmatch(r"seed0\.short-\d{8}T\d{6}", moved.name) and _files(moved) == old
    assert [r.state for r in result.records] == ["fresh"]
    assert json.loads((run.run_dir / "child.json").read_text())["files"] == ["benchmark.log"]


def test_a_run_with_an_unreadable_summary_is_set_aside_under_a_name_that_says_so(
    tmp_path: Path, fake: Path, smoke: Table, capsys: pytest.CaptureFixture[str]
) -> None:
    from robolearn.cli.benchmark import _print_outcome, _print_plan

    out = tmp_path / "out"
    selection: dict[str, Any] = {"seeds": [0], "libs": ["robolearn"], "entries": ["cartpole_sac"]}
    run = plan(smoke, out, **selection)[0]
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "summary.json").write_text('{"env_steps": 40')  # a write cut short: not JSON
    (out / "table.json").write_text(json.dumps(smoke.to_dict()))
    old = _files(run.run_dir)
    assert run_state(run) is RunState.FRESH
    dry = run_benchmark(smoke, out, dry_run=True, **selection, composed=never_composed)
    assert (dry.unreadable, dry.short, dry.aside) == ([run], [], {}) and _files(run.run_dir) == old
    _print_plan(dry)
    assert (f"unreadable: {run.run_dir / 'summary.json'} cannot be read and there is no checkpoint: set aside as "
            "seed0.unreadable-<UTC time>, then fresh") in capsys.readouterr().out
    result = run_benchmark(smoke, out, launcher=FakeLauncher(fake), **selection, composed=never_composed)
    moved = result.aside[run.run_dir]
    assert re.fullmatch(r"seed0\.unreadable-\d{8}T\d{6}", moved.name) and _files(moved) == old
    assert (result.unreadable, result.short, [r.state for r in result.records]) == ([run], [], ["fresh"])
    assert _print_outcome(result, out) == 0
    assert f"cannot be read and there is no checkpoint, its folder set aside as {moved}): {run.run_dir}" in (
        capsys.readouterr().out)


def test_a_stale_run_outside_the_selection_is_warned_of_and_a_refused_table_is_not_written(
    mine: tuple[Path, Table], fake: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from robolearn.cli import benchmark as cli_benchmark

    out, table = mine
    now = _composing(entropy_coef=0.02)
    monkeypatch.setattr(cli_benchmark, "composer", lambda table: now)
    path = table.source
    assert path is not None
    grown = json.loads(Path(path).read_text())
    Path(path).write_text(json.dumps({**grown, "seeds": [0, 1]}))
    table_json = (out / "table.json").read_text()
    # Selected, the stale run refuses the grown table: its table.json is not rewritten.
    assert benchmark_main(["run", f"table={path}", f"out={out}"]) == 2
    assert "algo.entropy_coef: was 0.01, now 0.02" in capsys.readouterr().err
    assert (out / "table.json").read_text() == table_json
    # Not selected: listed in the dry run, warned of in a real run, left as it is.
    assert benchmark_main(["run", f"table={path}", f"out={out}", "seeds=1", "dry_run=true"]) == 0
    printed = capsys.readouterr().out
    assert "warning: stale, not selected, left as it is (the report leaves it out): " in printed
    assert "e/robolearn/seed0 (done): algo.entropy_coef: was 0.01, now 0.02" in printed
    launcher = FakeLauncher(fake)
    result = run_benchmark(load_table(path, check_tasks=False), out, launcher=launcher, seeds=[1], composed=now)
    assert launcher.runs == ["e/robolearn/seed1"] and [s.run.seed for s in result.stale_elsewhere] == [0]
    assert result.aside == {} and (out / "e" / "robolearn" / "seed0" / "config.json").is_file()


# -- the profile --------------------------------------------------------------------------------
def test_profile_table_sizes_each_entry_past_its_warmup(smoke: Table) -> None:
    from robolearn.benchmark.table import profile_table

    short = profile_table(smoke, 0.25, {"cartpole_sac": 100})
    assert short.name == "smoke-profile" and short.seeds == smoke.seeds and short.libs == smoke.libs
    ppo, sac = short.entries
    assert (ppo.env_steps, ppo.eval_every) == (1024, 128)  # a quarter of 4,096; 8 rows
    # SAC: at least 2 x 100 + 4,000, capped at the entry's budget of 1,000.
    assert (sac.env_steps, sac.eval_every) == (1000, 125)
    bigger = dataclasses.replace(smoke, entries=(dataclasses.replace(smoke.entries[1], env_steps=60_000),))
    assert profile_table(bigger, 0.01, {"cartpole_sac": 10_000}).entries[0].env_steps == 24_000
    assert profile_table(bigger, 0.5, {"cartpole_sac": 10_000}).entries[0].env_steps == 30_000
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(TableError, match="fraction: expected a number in"):
            profile_table(smoke, bad)


def test_warmups_take_the_longest_learning_starts_of_an_entrys_libraries(tmp_path: Path, smoke: Table) -> None:
    from robolearn.cli.benchmark import warmups

    # cartpole_sac: the recipe's algo.learning_starts (2,000, composed) against SB3's 200 here.
    assert warmups(smoke, tmp_path / "out") == {"cartpole_sac": 2000}
    zoo = ZooHyperparams(source="zoo", kwargs={"learning_starts": 10_000})
    sac = dataclasses.replace(smoke.entries[1], sb3=dataclasses.replace(smoke.entries[1].sb3, zoo=zoo))
    with_zoo = dataclasses.replace(smoke, libs=("robolearn", "sb3_default", "sb3_zoo"), entries=(sac,))
    assert warmups(with_zoo, tmp_path / "out") == {"cartpole_sac": 10_000}


def test_cli_profile_runs_the_short_table_and_records_the_split(tmp_path: Path) -> None:
    out = tmp_path / "profile"
    # dry_run lists the short table's runs, as `benchmark run` does, and trains nothing.
    assert benchmark_main(["profile", "table=smoke", f"out={out}", "entries=cartpole_ppo", "fraction=0.5",
                           "dry_run=true"]) == 0
    assert not (out / "cartpole_ppo").exists()
    assert benchmark_main(["profile", "table=smoke", f"out={out}", "entries=cartpole_ppo", "fraction=0.5"]) == 0
    written = json.loads((out / "table.json").read_text())
    assert written["name"] == "smoke-profile" and written["entries"][0]["env_steps"] == 2048
    for lib in ("robolearn", "sb3_default"):
        run_dir = out / "cartpole_ppo" / lib / "seed0"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["env_steps"] >= 2048
        assert 0 < summary["update_time_s"] < summary["train_time_s"], lib
        assert "time/update_s" in (run_dir / "metrics.csv").read_text().splitlines()[0]
    assert not (out / "cartpole_ppo" / "robolearn" / "seed1").exists()  # seed 0 only, by default
    assert benchmark_main(["profile", "table=smoke", f"out={out}", "fraction=2"]) == 2


REACH_RECIPE = """# @package _global_
defaults:
  - override /algo: ppo
task: Reacher
"""


def test_an_sb3_side_on_gymnasium_is_commanded_recorded_and_checked(
    tmp_path: Path, fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from robolearn.benchmark import sb3_run

    recipes = _recipe_dir(tmp_path, monkeypatch, "reach", REACH_RECIPE)
    entry = {"id": "r", "task": "Reacher", "algo": "ppo", "experiment": "reach", "env_steps": 100, "eval_every": 50,
             "sb3": {"n_envs": 1, "gymnasium": "Reacher-v5", "default": {}}}
    spec = {"name": "g", "seeds": [0], "libs": ["sb3_default"], "eval_episodes": 2, "entries": [entry]}
    table = table_from_dict(spec, "g", check_tasks=True)
    run = plan(table, tmp_path / "out")[0]
    cmd = command(run, table, RunState.FRESH)
    assert cmd[cmd.index("--gymnasium") + 1] == "Reacher-v5"
    recorded = sb3_run.parse_args(cmd[3:]).config()
    assert recorded["gymnasium"] == "Reacher-v5"
    assert schedule.sb3_settings(run)["gymnasium"] == "Reacher-v5"
    # A run made through the adapter (before the table named the Gymnasium env) is stale, by that key alone.
    _finished(run.run_dir, {**recorded, "gymnasium": None}, 100, sb3=True)
    stale, _ = schedule.find_stale([(run, RunState.DONE)], never_composed)
    assert [str(d) for s in stale for d in s.differences] == ['gymnasium: was null, now "Reacher-v5"']
    old = dict(recorded)
    del old["gymnasium"]  # a config.json from before sb3_run recorded the key: trained through the adapter
    (run.run_dir / "config.json").write_text(json.dumps(old))
    assert [str(d) for s in schedule.find_stale([(run, RunState.DONE)], never_composed)[0] for d in s.differences] == [
        'gymnasium: was null, now "Reacher-v5"']

    # The table names the task's twin or nothing.
    for bad, expected in (("Hopper-v5", "expected 'Reacher-v5' (the Gymnasium env Reacher reproduces) or null"),):
        wrong = {**spec, "entries": [{**entry, "sb3": {**entry["sb3"], "gymnasium": bad}}]}
        with pytest.raises(TableError, match=re.escape(f"entries[0] (r).sb3.gymnasium: {expected}, got {bad!r}")):
            table_from_dict(wrong, "g", check_tasks=True)
    # A recipe that overrides the task trains another MDP than Gymnasium's: refused before anything is written.
    (recipes / "reach.yaml").write_text(REACH_RECIPE + "task_overrides:\n  episode_length: 20\n")
    out = tmp_path / "out2"
    launcher = FakeLauncher(fake)
    with pytest.raises(TableError, match=r"entries\[0\] \(r\)\.sb3\.gymnasium: expected null, got 'Reacher-v5': "
                                         r"recipe reach overrides the task"):
        run_benchmark(table, out, launcher=launcher, composed=never_composed)
    assert launcher.commands == [] and not out.exists()
