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
from robolearn.benchmark.table import Table, TableError, load_table, table_from_dict
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
        run_benchmark(t, tmp_path / "out", launcher=launcher)
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
    result = run_benchmark(smoke, out, launcher=launcher)
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
    second = run_benchmark(smoke, out, launcher=again)
    assert again.commands == [] and second.records == [] and second.exit_status == 0
    assert {s for _, s in second.planned} == {RunState.DONE} and len(second.planned) == 8
    assert len(_records(out)) == 8


def test_a_failed_run_is_reported_and_the_others_go_on(tmp_path: Path, fake: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    launcher = FakeLauncher(fake, env={"FAKE_FAIL": "cartpole_ppo/sb3_default/seed0"})
    result = run_benchmark(smoke, out, launcher=launcher, seeds=[0])
    assert len(launcher.commands) == 4 and result.exit_status == 1
    assert [(r.entry, r.lib, r.returncode) for r in result.failed] == [("cartpole_ppo", "sb3_default", 3)]
    assert [r["returncode"] for r in _records(out)].count(3) == 1
    retry = FakeLauncher(fake)
    assert run_benchmark(smoke, out, launcher=retry, seeds=[0]).exit_status == 0
    assert retry.runs == ["cartpole_ppo/sb3_default/seed0"]


def test_jobs_run_side_by_side_never_more(tmp_path: Path, fake: Path, smoke: Table) -> None:
    launcher = FakeLauncher(fake, env={"FAKE_SLEEP": "0.5"})
    result = run_benchmark(smoke, tmp_path / "out", jobs=2, launcher=launcher, entries=["cartpole_ppo"], poll_s=0.05)
    assert result.exit_status == 0 and len(result.records) == 4
    assert launcher.max_alive == 2


def test_interrupt_stops_starting_runs_and_the_rerun_resumes(tmp_path: Path, fake: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    launcher = FakeLauncher(fake, env={"FAKE_SLEEP": "60"}, interrupt_at=1)
    result = run_benchmark(smoke, out, launcher=launcher, seeds=[0], poll_s=0.05)
    assert result.interrupted and result.exit_status == 130
    assert len(launcher.commands) == 1  # nothing started after the signal
    assert [(r.lib, r.returncode) for r in result.records] == [("robolearn", 130)]  # it stopped, with a checkpoint
    assert result.failed == [] and result.stopped == result.records  # stopped by the interrupt is no failure
    assert _records(out)[0]["signalled"] is True
    first = Run(smoke.entry("cartpole_ppo"), "robolearn", 0, out / "cartpole_ppo" / "robolearn" / "seed0")
    assert run_state(first) is RunState.RESUME
    rerun = FakeLauncher(fake)
    assert run_benchmark(smoke, out, launcher=rerun, seeds=[0]).exit_status == 0
    assert len(rerun.commands) == 4 and f"resume={first.run_dir}" in rerun.commands[0]
    assert [r["state"] for r in _records(out)] == ["fresh", "resume", "fresh", "fresh", "fresh"]


def test_another_tables_folder_is_refused_a_superset_accepted(tmp_path: Path, fake: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    assert run_benchmark(smoke, out, launcher=FakeLauncher(fake), seeds=[0], entries=["cartpole_sac"]).exit_status == 0
    ppo = smoke.entry("cartpole_ppo")
    changed = dataclasses.replace(ppo, sb3=dataclasses.replace(ppo.sb3, default={"n_steps": 64}))
    sac = smoke.entry("cartpole_sac")
    for bad, reason in [
        (dataclasses.replace(smoke, name="other", entries=(changed, sac)), "entry cartpole_ppo: sb3 was"),
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
            run_benchmark(bad, out, launcher=launcher)
        assert "not a compatible superset" in str(info.value) and reason in str(info.value), str(info.value)
        assert launcher.commands == []
    # A superset (more seeds, a raised budget, renamed) runs into the folder and becomes its table.
    grown = dataclasses.replace(smoke, name="grown", seeds=(0, 1, 2),
                                entries=(ppo, dataclasses.replace(sac, env_steps=2000)))
    launcher = FakeLauncher(fake)
    assert run_benchmark(grown, out, launcher=launcher, entries=["cartpole_sac"], libs=["robolearn"]).exit_status == 0
    assert launcher.runs == [f"cartpole_sac/robolearn/seed{s}" for s in (0, 1, 2)]
    assert "resume=" in launcher.commands[0][4]  # the done 1000-step run continues to 2000
    assert json.loads((out / "table.json").read_text())["name"] == "grown"


def test_a_folder_with_runs_but_no_table_or_a_live_lock_is_refused(tmp_path: Path, fake: Path, smoke: Table) -> None:
    (tmp_path / "a" / "cartpole_ppo").mkdir(parents=True)
    with pytest.raises(TableError, match=r"holds run folders \(cartpole_ppo\) but no table.json"):
        run_benchmark(smoke, tmp_path / "a", launcher=FakeLauncher(fake))
    out = tmp_path / "b"
    out.mkdir()
    (out / ".benchmark.lock").write_text(f"{os.getpid()}\n")  # this process: alive
    with pytest.raises(TableError, match=rf"another `robolearn benchmark run` \(process {os.getpid()}\)"):
        run_benchmark(smoke, out, launcher=FakeLauncher(fake))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    (out / ".benchmark.lock").write_text(gone.stdout)  # a process that has exited: taken over
    launcher = FakeLauncher(fake)
    assert run_benchmark(smoke, out, launcher=launcher, seeds=[1], entries=["cartpole_sac"]).exit_status == 0
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

    for argv, message in [
        (["run", "table=smoke", f"out={out}", "job=2"], "job: unknown setting (did you mean jobs?)"),
        (["run", "table=smoke", f"out={out}", "jobs=0"], "jobs=0: expected an integer >= 1"),
        (["run", f"out={out}"], "missing table="),
        (["run", "table=smoke", f"out={out}", "seeds=0,x"], "seeds='x': expected an integer >= 0"),
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
    first = run_benchmark(small, out, entries=["cartpole_ppo"], libs=["robolearn"], seeds=[0])
    assert first.exit_status == 0, (out / "cartpole_ppo/robolearn/seed0/benchmark.log").read_text()
    run_dir = out / "cartpole_ppo" / "robolearn" / "seed0"
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 2048
    full = dataclasses.replace(smoke, entries=(ppo,))
    assert run_benchmark(full, out, dry_run=True, libs=["robolearn"], seeds=[0]).planned[0][1] is RunState.RESUME
    second = run_benchmark(full, out, entries=["cartpole_ppo"], libs=["robolearn"], seeds=[0])
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
    assert run_benchmark(full, out, entries=["cartpole_ppo"], libs=["robolearn"], seeds=[0]).records == []


@pytest.mark.slow
def test_real_sb3_run_finishes_and_is_then_skipped(tmp_path: Path, smoke: Table) -> None:
    out = tmp_path / "out"
    result = run_benchmark(smoke, out, entries=["cartpole_sac"], libs=["sb3_default"], seeds=[0])
    run_dir = out / "cartpole_sac" / "sb3_default" / "seed0"
    assert result.exit_status == 0, (run_dir / "benchmark.log").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] >= 1000
    assert json.loads((run_dir / "config.json").read_text())["lib"] == "sb3_default"
    assert run_benchmark(smoke, out, entries=["cartpole_sac"], libs=["sb3_default"], seeds=[0]).records == []


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

    first = run_benchmark(table, out, libs=["robolearn"], seeds=[0], launcher=interrupting, poll_s=0.05)
    log_text = (run_dir / "benchmark.log").read_text()
    assert first.interrupted and [r.returncode for r in first.records] == [130], log_text
    assert not (run_dir / "summary.json").exists()
    stopped_at = [int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("ckpt_*.pt")]
    assert len(stopped_at) == 1 and 0 < stopped_at[0] < 61440  # the checkpoint written on the signal
    assert run_state(Run(ppo, "robolearn", 0, run_dir)) is RunState.RESUME

    second = run_benchmark(table, out, libs=["robolearn"], seeds=[0])
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
            run_benchmark(smoke, a_file, launcher=FakeLauncher(fake), dry_run=dry_run)
    assert benchmark_main(["run", "table=smoke", f"out={a_file}"]) == 2
    assert "is a file; expected a folder" in capsys.readouterr().err and a_file.read_text() == "mine"
    # A robolearn training run directory (or any folder of other files) is not a benchmark's folder.
    train_run = tmp_path / "train_run"
    (train_run / "checkpoints").mkdir(parents=True)
    (train_run / "config.json").write_text("{}")
    (train_run / "metrics.csv").write_text("step\n")
    launcher = FakeLauncher(fake)
    with pytest.raises(TableError, match=r"not empty \(checkpoints, config.json, metrics.csv\) and no table.json"):
        run_benchmark(smoke, train_run, launcher=launcher)
    assert launcher.commands == [] and sorted(p.name for p in train_run.iterdir()) == [
        "checkpoints", "config.json", "metrics.csv"]
    # An empty folder, or one holding only a stale lock (a benchmark killed before its table.json), is fine.
    (tmp_path / "empty" / ".benchmark.lock").parent.mkdir()
    (tmp_path / "empty" / ".benchmark.lock").write_text("999999999\n")
    assert run_benchmark(smoke, tmp_path / "empty", launcher=FakeLauncher(fake), seeds=[0],
                         entries=["cartpole_sac"]).exit_status == 0


KILLED_BENCHMARK = r'''
import sys
from pathlib import Path
from robolearn.benchmark import schedule
from robolearn.benchmark.table import load_table

fake, out = sys.argv[1], Path(sys.argv[2])

def launcher(cmd, log_file, env):
    return schedule.launch([sys.executable, fake, *cmd[3:]], log_file, {**env, "FAKE_SLEEP": "60"})

schedule.run_benchmark(load_table("smoke", check_tasks=False), out, launcher=launcher, seeds=[0],
                       entries=["cartpole_sac"], libs=["robolearn"], poll_s=0.05)
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
            run_benchmark(smoke, out, launcher=launcher, seeds=[0], entries=["cartpole_sac"], libs=["robolearn"])
        assert launcher.commands == [] and (run / "ready").exists()  # its run directory untouched
    finally:
        os.kill(child, signal.SIGINT)  # as the message says: it checkpoints and exits
    _wait_for(lambda: not schedule._alive(child) or _reaped(child), "the orphaned child to exit")
    launcher = FakeLauncher(fake)
    assert run_benchmark(smoke, out, launcher=launcher, seeds=[0], entries=["cartpole_sac"],
                         libs=["robolearn"]).exit_status == 0
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
            run_benchmark(table, out, launcher=launcher, dry_run=dry_run)
        assert str(info.value) == f"{path}: entries[0] (a).sb3.zoo.kwargs.n_stepz: not an argument of stable_baselines3.PPO (got 32)"
        assert launcher.commands == [] and not out.exists()
    # The robolearn side alone does not need SB3's hyperparameters.
    assert run_benchmark(table, out, launcher=FakeLauncher(fake), libs=["robolearn"], seeds=[0]).exit_status == 0
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
