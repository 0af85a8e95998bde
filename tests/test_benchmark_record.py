"""The record of a benchmark table in the repository: what ``results/.gitignore`` keeps of a table's
output folder is a finished table on a fresh clone (every recorded run skipped, the same page).

Real runs of the smoke table, a real git repository with the repository's own ``results/.gitignore``,
a real clone: the files git keeps are what a machine that never ran the table gets.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from robolearn.benchmark.schedule import plan, run_state
from robolearn.benchmark.table import load_table
from robolearn.cli.benchmark import main as benchmark_main

REPO = Path(__file__).resolve().parents[1]
GITIGNORE = REPO / "results" / ".gitignore"


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main",
                           *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout


@pytest.fixture(scope="module")
def table_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose ``results/smoke`` holds real finished runs of the smoke table's PPO entry."""
    repo = tmp_path_factory.mktemp("record") / "repo"
    out = repo / "results" / "smoke"
    assert benchmark_main(["run", "table=smoke", f"out={out}", "entries=cartpole_ppo", "seeds=0"]) == 0
    shutil.copy(GITIGNORE, repo / "results" / ".gitignore")
    # Folders set aside (a rerun of a changed recipe, a raised budget) and sb3_run's swap folders, each
    # holding copies of the record's files, are the machine's, not the record.
    for aside in ("seed0.stale-20261127T000000", "seed0.short-20261127T000000"):
        shutil.copytree(out / "cartpole_ppo" / "robolearn" / "seed0", out / "cartpole_ppo" / "robolearn" / aside)
    sb3 = out / "cartpole_ppo" / "sb3_default" / "seed0"
    for swap in (".sb3_checkpoint.tmp", ".sb3_checkpoint.old"):
        shutil.copytree(sb3 / "sb3_checkpoint", sb3 / swap)
    assert (sb3 / ".sb3_checkpoint.tmp" / "metrics.csv").is_file()
    return out


def test_the_record_git_keeps_is_a_finished_table_on_a_fresh_clone(table_out: Path, tmp_path: Path) -> None:
    repo = table_out.parents[1]
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "record")
    kept = sorted(_git(repo, "ls-files").split())
    runs = [f"results/smoke/cartpole_ppo/{lib}/seed0/{name}" for lib in ("robolearn", "sb3_default")
            for name in ("config.json", "metrics.csv", "summary.json")]
    # Exactly the record: no checkpoint (robolearn's checkpoints/, SB3's sb3_checkpoint/), log, lock or
    # policy spec, and nothing of the folder set aside.
    assert kept == sorted(["results/.gitignore", "results/smoke/runs.jsonl", "results/smoke/table.json", *runs])

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    record = clone / "results" / "smoke"
    table = load_table("smoke")
    states = {(r.entry.id, r.lib): run_state(r).value for r in plan(table, record, entries=["cartpole_ppo"], seeds=[0])}
    assert states == {("cartpole_ppo", "robolearn"): "done", ("cartpole_ppo", "sb3_default"): "done"}
    # Running the table on the clone trains nothing more: runs.jsonl gains no line.
    before = (record / "runs.jsonl").read_text()
    assert benchmark_main(["run", "table=smoke", f"out={record}", "entries=cartpole_ppo", "seeds=0"]) == 0
    assert (record / "runs.jsonl").read_text() == before
    assert not (record / "cartpole_ppo" / "robolearn" / "seed0" / "checkpoints").exists()

    # The page from the clone's record is the page from the machine that ran the table, byte for byte.
    pages = {}
    for name, folder in (("ran", table_out), ("clone", record)):
        md = tmp_path / name / "RESULTS.md"
        assert benchmark_main(["report", f"out={folder}", f"results={md}", f"figures={tmp_path / name / 'fig'}"]) == 0
        pages[name] = md.read_text()
        assert "Finished runs: 2 of 8. Not run yet (no finished run of any library): cartpole_sac." in pages[name]
    assert pages["clone"] == pages["ran"]
    summary = json.loads((record / "cartpole_ppo" / "robolearn" / "seed0" / "summary.json").read_text())
    assert summary["env_steps"] >= 4096
