"""Benchmark tables (robolearn.benchmark.table): the smoke table's values, the round trip through
table.json, and every validation error naming the field, the value and what was expected."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from robolearn.benchmark.table import (
    Entry,
    SB3Side,
    TableError,
    ZooHyperparams,
    load_table,
    table_from_dict,
    tables_dir,
)


def smoke_dict() -> dict[str, Any]:
    """The shipped smoke table as its raw mapping."""
    return yaml.safe_load((tables_dir() / "smoke.yaml").read_text())


def test_smoke_table_by_name_reads_every_field() -> None:
    table = load_table("smoke", check_tasks=False)
    assert table.name == "smoke"
    assert table.seeds == (0, 1)
    assert table.libs == ("robolearn", "sb3_default")
    assert table.eval_episodes == 2
    assert table.ids == ("cartpole_ppo", "cartpole_sac")
    ppo = table.entry("cartpole_ppo")
    assert (ppo.task, ppo.algo, ppo.experiment, ppo.env_steps, ppo.eval_every) == (
        "Cartpole-Balance", "ppo", "cartpole_ppo", 4096, 2048)
    assert ppo.thresholds == (100.0, 500.0)
    assert ppo.sb3 == SB3Side(n_envs=1, default={"n_steps": 512, "batch_size": 64}, zoo=None)
    assert ppo.zoo_reference is None
    assert table.entry("cartpole_sac").algo == "sac"
    assert Path(table.source) == tables_dir() / "smoke.yaml"


def test_smoke_tasks_are_registered() -> None:
    assert load_table("smoke", check_tasks=True).ids == ("cartpole_ppo", "cartpole_sac")


def test_table_by_path_and_round_trip_through_to_dict(tmp_path: Path) -> None:
    data = smoke_dict()
    data["entries"][0]["sb3"]["zoo"] = {
        "source": "rl-baselines3-zoo hyperparams/ppo.yml CartPole-v1", "n_envs": 8, "normalize": True,
        "kwargs": {"n_steps": 32, "learning_rate": "lin_0.001"},
    }
    data["entries"][0]["zoo_reference"] = {"return": 500, "env_steps": 100000, "source": "benchmark.md"}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    table = load_table(path, check_tasks=False)
    entry = table.entry("cartpole_ppo")
    assert entry.sb3.zoo == ZooHyperparams(
        source="rl-baselines3-zoo hyperparams/ppo.yml CartPole-v1", n_envs=8, normalize=True,
        kwargs={"n_steps": 32, "learning_rate": "lin_0.001"},
    )
    assert entry.zoo_reference is not None and entry.zoo_reference.mean_return == 500.0
    assert entry.libs(("robolearn", "sb3_default", "sb3_zoo")) == ("robolearn", "sb3_default", "sb3_zoo")
    assert table.entry("cartpole_sac").libs(("sb3_zoo", "robolearn")) == ("robolearn",)  # no Zoo block
    as_dict = table.to_dict()
    assert as_dict["entries"][0]["zoo_reference"] == {"return": 500.0, "env_steps": 100000, "source": "benchmark.md"}
    again = table_from_dict(as_dict, "table.json")
    assert again.entries == table.entries and again.seeds == table.seeds and again.libs == table.libs
    assert again.source == "table.json"


def _set(path: str, value: Any) -> Any:
    """A mutation of the smoke table's mapping: ``path`` like ``entries.0.algo``; ``value`` ``DELETE`` removes it."""
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value == "DELETE":
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return mutate


def _duplicate(data: dict[str, Any]) -> None:
    data["entries"][1]["id"] = "cartpole_ppo"


BAD_TABLES = [
    # (mutation, substrings of the message: the field, the value, what was expected)
    (_set("sedes", [0]), ["sedes", "did you mean 'seeds'", "valid fields"]),
    (_set("entries.0.envsteps", 5), ["entries[0] (cartpole_ppo).envsteps", "did you mean 'env_steps'"]),
    (_duplicate, ["entries[1].id", "'cartpole_ppo'", "unique"]),
    (_set("entries.0.algo", "dqn"), ["entries[0] (cartpole_ppo)", "algo", "'dqn'", "ppo, sac"]),
    (_set("entries.1.experiment", "nope"), ["entries[1] (cartpole_sac).experiment", "'nope'", "nope.yaml does not exist"]),
    (_set("entries.0.task", "Cartpole-Swingup"), ["entries[0] (cartpole_ppo).task", "'Cartpole-Swingup'",
                                                 "task of experiment cartpole_ppo ('Cartpole-Balance')"]),
    (_set("entries.1.algo", "ppo"), ["entries[1] (cartpole_sac).algo", "'ppo'", "algorithm of experiment cartpole_sac ('sac')"]),
    (_set("entries.0.thresholds", [100, "high"]), ["entries[0] (cartpole_ppo).thresholds[1]", "expected float", "'high'"]),
    (_set("entries.0.thresholds", 100), ["entries[0] (cartpole_ppo).thresholds", "expected a list of numbers", "100"]),
    (_set("entries.0.thresholds", [True]), ["thresholds[0]", "expected float", "True"]),
    (_set("seeds", []), ["seeds", "at least one seed", "[]"]),
    (_set("seeds", [0, 0]), ["seeds", "distinct", "[0, 0]"]),
    (_set("seeds", 3), ["seeds", "expected a list", "3"]),
    (_set("libs", ["robolearn", "sb3"]), ["libs", "'sb3'", "robolearn, sb3_default, sb3_zoo"]),
    (_set("eval_episodes", 0), ["eval_episodes", ">= 1", "0"]),
    (_set("entries.0.env_steps", 0), ["entries[0] (cartpole_ppo)", "env_steps", ">= 1", "0"]),
    (_set("entries.0.env_steps", "1e6"), ["entries[0] (cartpole_ppo).env_steps", "expected int", "'1e6'"]),
    (_set("entries.0.eval_every", "DELETE"), ["entries[0] (cartpole_ppo)", "missing required field(s) eval_every"]),
    (_set("entries.0.id", "Cartpole-PPO"), ["id", "'Cartpole-PPO'", "lower-case letters, digits and '_'"]),
    (_set("entries.0.sb3.zoo", {"n_envs": 1}), ["entries[0] (cartpole_ppo).sb3.zoo", "missing required field(s) source"]),
    (_set("entries.0.sb3.n_envs", 0), ["entries[0] (cartpole_ppo).sb3", "n_envs", ">= 1", "0"]),
    (_set("entries.0.sb3.default", [1]), ["entries[0] (cartpole_ppo).sb3.default", "expected dict", "[1]"]),
    (_set("entries.0.zoo_reference", {"return": "high", "env_steps": 10, "source": "x"}),
     ["entries[0] (cartpole_ppo).zoo_reference.return", "expected a number", "'high'"]),
    (_set("entries.0.zoo_reference", {"return": 1.0, "steps": 10, "source": "x"}),
     ["zoo_reference", "'steps'", "valid fields: return, env_steps, source"]),
    (_set("entries", []), ["entries", "at least one entry"]),
    (_set("entries", {"id": "x"}), ["entries", "expected a list of entries"]),
]


@pytest.mark.parametrize(("mutate", "expected"), BAD_TABLES, ids=[", ".join(e[:1]) for _, e in BAD_TABLES])
def test_bad_table_is_refused_naming_field_value_and_expectation(
    tmp_path: Path, mutate: Any, expected: list[str]
) -> None:
    data = copy.deepcopy(smoke_dict())
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TableError) as info:
        load_table(path, check_tasks=False)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_unknown_task_is_refused_against_the_registry(tmp_path: Path) -> None:
    data = smoke_dict()
    data["entries"][1]["task"] = "Cartpole-Balanse"
    # Without the experiment check (its recipe names Cartpole-Balance and would refuse first), the
    # registry is what refuses the misspelt task.
    table = table_from_dict(data, "t", check_files=False, check_tasks=False)
    assert table.entry("cartpole_sac").task == "Cartpole-Balanse"
    with pytest.raises(TableError) as info:
        table_from_dict(data, "t", check_files=False, check_tasks=True)
    message = str(info.value)
    assert "entries[1] (cartpole_sac).task" in message and "'Cartpole-Balanse'" in message
    assert "registered task" in message and "Cartpole-Balance" in message


def test_unknown_table_name_lists_the_shipped_tables() -> None:
    with pytest.raises(TableError) as info:
        load_table("no_such_table")
    assert "table=no_such_table" in str(info.value) and "smoke" in str(info.value)


def test_unreadable_yaml_is_named(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(TableError, match="broken.yaml: cannot be read as YAML"):
        load_table(path)


def test_entry_checks_run_without_a_file() -> None:
    with pytest.raises(ValueError, match=r"eval_every: expected an integer >= 1, got 0"):
        Entry(id="a", task="T", algo="ppo", experiment="e", env_steps=1, eval_every=0)
    with pytest.raises(ValueError, match=r"thresholds: expected finite numbers, got nan"):
        Entry(id="a", task="T", algo="ppo", experiment="e", env_steps=1, eval_every=1, thresholds=(float("nan"),))


def test_a_recipe_is_read_as_hydra_reads_it_and_its_algorithm_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from robolearn.benchmark import table

    assert table.recipe_algo(table.read_recipe("cartpole_sac")) == "sac"  # a shipped recipe
    recipes = tmp_path / "experiment"
    recipes.mkdir()
    monkeypatch.setattr(table, "experiments_dir", lambda: recipes)
    (recipes / "a.yaml").write_text("defaults:\n  - override /algo: sac\nalgo:\n  learning_rate: 3e-4\n")
    (recipes / "b.yaml").write_text("defaults:\n  - _self_\n  - algo: ppo\n")
    (recipes / "c.yaml").write_text("task: Hopper\n")
    (recipes / "d.yaml").write_text("- a list\n")
    assert table.read_recipe("a")["algo"] == {"learning_rate": 0.0003}  # a float, as Hydra reads 3e-4
    assert [table.recipe_algo(table.read_recipe(n)) for n in "abc"] == ["sac", "ppo", None]
    with pytest.raises(TableError, match=r"experiment d \(.*d\.yaml\): expected a mapping of config keys, got list"):
        table.read_recipe("d")
    with pytest.raises(TableError, match=r"experiment gone \(.*gone\.yaml\): cannot be read as YAML"):
        table.read_recipe("gone")
    # The table's own check reads it the same way, naming the entry's field.
    spec = {**smoke_dict(), "entries": [{**smoke_dict()["entries"][0], "experiment": "d"}]}
    with pytest.raises(TableError, match=r"entries\[0\] \(cartpole_ppo\)\.experiment: experiment d .*got list"):
        table_from_dict(spec, "t")
