"""TrainConfig: the one gate every training setting passes (types, ranges, options the algorithm
does not use, old run directories, unreadable files)."""

from __future__ import annotations

import json

import pytest

from robolearn.runners.train_config import (
    read_train_config,
    saved_config,
    train_config_from_dict,
    train_config_to_dict,
)
from robolearn.utils.config import ConfigError


def cfg(**kw):
    base = {"task": "Cartpole-Balance", "algo": {"name": "sac"}}
    base.update(kw)
    return train_config_from_dict(base)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("dataset", "data.h5", "dataset: algo=sac learns online"),
        ("total_grad_steps", 1000, "total_grad_steps: algo=sac learns online"),
        ("normalize_obs", False, "normalize_obs: algo=sac learns online"),
        ("torch_threads", 0, "torch_threads: expected an integer >= 1"),
        ("torch_threads", 1.5, "torch_threads: expected"),
        ("num_envs", True, "num_envs: expected int, got True"),
        ("num_envs", 2.5, "num_envs: expected int"),
        ("num_envs", 0, "num_envs: expected an integer >= 1"),
        ("eval_num_envs", -1, "eval_num_envs: expected an integer >= 0"),
        ("seed", -3, "seed: expected an integer >= 0"),
    ],
)
def test_bad_run_settings_are_named(key, value, match):
    with pytest.raises(ConfigError, match=match):
        cfg(**{key: value})


def test_offline_settings_default_only_for_offline_algorithms():
    online = cfg()
    assert online.dataset is None and online.total_grad_steps is None and online.normalize_obs is None
    offline = train_config_from_dict({"task": "Cartpole-Balance", "algo": {"name": "iql"}, "dataset": "d.h5"})
    assert offline.offline and offline.total_grad_steps == 1_000_000 and offline.normalize_obs is True
    with pytest.raises(ConfigError, match="dataset: algo=cql learns offline and needs dataset"):
        train_config_from_dict({"task": "Cartpole-Balance", "algo": {"name": "cql"}})
    with pytest.raises(ConfigError, match="total_grad_steps: expected an integer >= 1"):
        train_config_from_dict({"task": "T", "algo": {"name": "bc"}, "dataset": "d.h5", "total_grad_steps": 0})


def test_round_trip_through_config_json():
    c = cfg(torch_threads=2, num_envs=8)
    back = train_config_from_dict(json.loads(json.dumps(train_config_to_dict(c))))
    assert back == c and back.torch_threads == 2


def test_a_run_written_by_robolearn_0_1_still_reads(tmp_path):
    # 0.1 wrote the offline-only settings at their defaults for online runs too
    old = train_config_to_dict(cfg())
    old.update({"dataset": None, "total_grad_steps": 1_000_000, "normalize_obs": True})
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert read_train_config(tmp_path) == cfg()
    # ...but a value 0.1 never wrote is still an error
    old["total_grad_steps"] = 5
    (tmp_path / "config.json").write_text(json.dumps(old))
    with pytest.raises(ConfigError, match="config.json: total_grad_steps"):
        read_train_config(tmp_path)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "\x00\x01"])
def test_an_unreadable_config_json_names_the_file(tmp_path, text):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError, match=f"{tmp_path / 'config.json'}"):
        saved_config(tmp_path)
    with pytest.raises(FileNotFoundError, match="robolearn run directory"):
        saved_config(tmp_path / "missing")


@pytest.mark.parametrize(
    ("cls", "field", "value", "match"),
    [
        ("EvalConfig", "episodes", True, "episodes: expected an integer >= 1, got True"),
        ("EvalConfig", "num_envs", 0, "num_envs: expected an integer >= 1, got 0"),
        ("EvalConfig", "video_steps", 2.5, "video_steps: expected an integer >= 1"),
        ("EvalConfig", "seed", -1, "seed: expected an integer >= 0"),
        ("RecipeConfig", "num_envs", True, "num_envs: expected an integer >= 1, got True"),
        ("RecipeConfig", "expert_noise", float("nan"), "expert_noise: expected a finite number >= 0"),
        ("CollectConfig", "episodes", True, "episodes: expected an integer >= 1, got True"),
        ("CollectConfig", "noise", float("inf"), "noise: expected a finite number >= 0"),
    ],
)
def test_command_configs_check_each_number_when_built_in_code(cls, field, value, match):
    import robolearn.cli.config as config

    kwargs = {"run": "r"} if cls == "EvalConfig" else {}
    with pytest.raises(ConfigError, match=match):
        getattr(config, cls)(**kwargs, **{field: value})
