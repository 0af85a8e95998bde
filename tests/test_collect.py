"""Dataset collection: whole episodes with the right flags, final observations and returns, drawn
values in the infos, and the ``robolearn data collect`` command writing a file the reader accepts.
"""

from __future__ import annotations

import re

import h5py
import pytest
import torch

import robolearn
from robolearn.cli.collect import collect_command
from robolearn.cli.config import CollectConfig, ConfigError
from robolearn.cli.main import main
from robolearn.data import Dataset, DatasetMetadata, d4rl_reference_returns
from robolearn.envs import BatchedEnv, EventTerm, task_cfg
from robolearn.runners.collect import collect_episodes, noisy_policy, uniform_policy
from robolearn.sim2real.randomization.events import randomize_field


def _returns_seen(env, act, episodes):
    """The episode returns the env itself reports, in end order, over the same rollout."""
    obs, _ = env.reset(seed=5)
    seen = []
    while len(seen) < episodes:
        obs, _, _, _, info = env.step(act(obs))
        if "episode" in info:
            seen += info["episode"]["return"].double().tolist()
    return seen[:episodes]


def test_episodes_keep_flags_final_obs_and_returns():
    env = robolearn.make("Hopper", 4, seed=0, dtype=torch.float64, episode_length=20)
    low, high = env.ctrl_low.double(), env.ctrl_high.double()
    eps = collect_episodes(env, uniform_policy(low, high, torch.Generator().manual_seed(1)), 12, seed=5, progress=False)
    assert len(eps) == 12
    kinds = set()
    for ep in eps:
        t = ep["rewards"].shape[0]
        assert ep["observations"]["policy"].shape == (t + 1, 11) and ep["actions"].shape == (t, 3)
        flags = ep["terminals"] | ep["timeouts"]
        assert flags[-1] and not flags[:-1].any() and not (ep["terminals"] & ep["timeouts"]).any()
        kinds.add("terminal" if ep["terminals"][-1] else "timeout")
        if ep["timeouts"][-1]:
            assert t == 20
        assert ((ep["actions"] >= low.float()) & (ep["actions"] <= high.float())).all()
    assert kinds == {"terminal", "timeout"}, "random hopper falls sometimes and survives 20 steps sometimes"
    # The same rollout again: the env's own episode returns equal the collected reward sums.
    env2 = robolearn.make("Hopper", 4, seed=0, dtype=torch.float64, episode_length=20)
    seen = _returns_seen(env2, uniform_policy(low, high, torch.Generator().manual_seed(1)), 12)
    torch.testing.assert_close(torch.tensor([float(e["rewards"].sum()) for e in eps]), torch.tensor(seen))
    ds = Dataset.from_episodes(eps)
    assert len(ds) == sum(e["rewards"].shape[0] for e in eps) and ds.num_episodes == 12


def test_next_observation_after_the_last_step_is_the_true_final_one():
    env = robolearn.make("Cartpole-Balance", 2, seed=0, dtype=torch.float64, episode_length=5)
    eps = collect_episodes(env, lambda obs: torch.zeros(2, 1), 2, seed=1, progress=False)
    ref = robolearn.make("Cartpole-Balance", 2, seed=0, dtype=torch.float64, episode_length=5)
    obs, _ = ref.reset(seed=1)
    rows = [obs["policy"].clone()]
    for _ in range(5):
        obs, _, _, truncated, info = ref.step(torch.zeros(2, 1))
        rows.append(info["final_obs"]["policy"].clone())
    assert truncated.all()
    for i, ep in enumerate(eps):  # both worlds end at step 5; episode order is by world index
        torch.testing.assert_close(ep["observations"]["policy"].double(), torch.stack(rows)[:, i])


def test_drawn_values_go_into_the_infos():
    cfg = task_cfg("Cartpole-Balance", episode_length=20)
    cfg.events["mass"] = EventTerm(randomize_field, mode="reset", params={"field": "mass", "range": (0.5, 1.5), "shared": True})
    env = BatchedEnv(cfg, 3, seed=2)
    eps = collect_episodes(env, lambda obs: torch.zeros(3, 1), 6, seed=2, progress=False)
    for ep in eps:
        (name,) = [k for k in ep["infos"] if k.startswith("drawn/")]
        drawn = ep["infos"][name]
        assert drawn.shape[0] == ep["rewards"].shape[0]
        assert (drawn == drawn[0]).all(), "one draw per episode (redrawn at reset)"
        assert ((0.5 <= drawn) & (drawn <= 1.5)).all()
    firsts = torch.stack([ep["infos"][name][0, 0] for ep in eps])
    assert firsts.unique().numel() == 6
    ds = Dataset.from_episodes(eps)
    assert name in ds.infos and ds.infos[name].shape[0] == len(ds)


def test_noisy_policy_stays_in_bounds_and_is_noisy():
    low, high = torch.tensor([-1.0, -2.0], dtype=torch.float64), torch.tensor([1.0, 2.0], dtype=torch.float64)
    act = noisy_policy(lambda obs: torch.full((4000, 2), 0.9), low, high, 0.5, torch.Generator().manual_seed(0))
    a = act({"policy": torch.zeros(4000, 3)})
    assert (a[:, 0] <= 1.0).all() and (a[:, 0] >= -1.0).all() and (a[:, 1].abs() <= 2.0).all()
    # Exactly base + 0.5 x half range x N(0, 1) from the same stream, clipped.
    eps = torch.randn((4000, 2), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want = torch.minimum(torch.maximum(0.9 + 0.5 * torch.tensor([1.0, 2.0]) * eps, low), high).float()
    torch.testing.assert_close(a, want)
    assert float(a[:, 1].std()) > 0.8


def test_data_collect_command_writes_a_dataset(tmp_path, capsys):
    out = tmp_path / "hop.h5"
    assert main(["data", "collect", "task=Hopper", "episodes=3", "num_envs=2", f"out={out}", "task_overrides.episode_length=30"]) == 0
    assert "wrote" in capsys.readouterr().out
    ds = Dataset.load(out, expect_obs_dim=11, expect_action_dim=3, task_id="Hopper")
    assert ds.num_episodes == 3 and ds.metadata.collection == "random"
    assert (ds.metadata.ref_random_return, ds.metadata.ref_expert_return) == d4rl_reference_returns("Hopper")
    before = out.stat().st_mtime_ns
    assert main(["data", "collect", "task=Hopper", "episodes=3", "num_envs=2", f"out={out}"]) == 0
    assert "kept existing" in capsys.readouterr().out and out.stat().st_mtime_ns == before
    assert main(["data", "collect", "episodes=3"]) == 2
    assert "task: required with policy=random" in capsys.readouterr().err
    assert main(["data", "gather"]) == 2


def test_d4rl_style_recipe_builds_resumably(tmp_path, capsys):
    root = tmp_path / "recipe"
    train = [
        "num_envs=2", "eval_num_envs=2", "runner.video=false", "runner.console=false", "runner.tensorboard=false",
        "algo.learning_starts=100", "runner.steps_per_iteration=50", "algo.actor_hidden=[32,32]",
        "algo.critic_hidden=[32,32]", "task_overrides.episode_length=50",
    ]  # fmt: skip
    args = [
        "data", "build", f"root={root}", "tasks=[Cartpole-Balance]", "expert_env_steps=400", "medium_env_steps=200",
        "transitions=200", "num_envs=2", "train_overrides=[" + ",".join(f"'{a}'" for a in train) + "]",
    ]  # fmt: skip
    assert main(args) == 0
    folder = root / "Cartpole-Balance"
    sets = {name: Dataset.load(folder / f"{name}.h5") for name in ("random", "medium", "medium-replay", "expert", "medium-expert")}
    refs = {(d.metadata.ref_random_return, d.metadata.ref_expert_return) for d in sets.values()}
    assert len(refs) == 1, "every dataset of a task carries the same reference returns"
    rand, expert = refs.pop()
    assert rand == pytest.approx(float(sets["random"].episode_returns().mean()))
    assert expert == pytest.approx(float(sets["expert"].episode_returns().mean()))
    for name in ("random", "medium", "expert"):
        assert len(sets[name]) >= 200 and (sets[name].episode_lengths == 50).all(), name
    # medium-replay is the medium run's whole history: 200 env steps over 2 worlds, 50-step episodes
    assert len(sets["medium-replay"]) == 200 and sets["medium-replay"].num_episodes == 4
    assert len(sets["medium-expert"]) == len(sets["medium"]) + len(sets["expert"])
    # A second build keeps everything (resumable); a deleted file is rebuilt alone.
    (folder / "medium-expert.h5").unlink()
    mtime = (folder / "expert.h5").stat().st_mtime_ns
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "kept finished run" in out and "wrote" in out and "medium-expert.h5" in out and "expert.h5:" not in out.replace("medium-expert.h5:", "")
    assert (folder / "expert.h5").stat().st_mtime_ns == mtime


def _tiny_dataset(task: str, collection: str = "random", episodes: int = 3) -> Dataset:
    """``episodes`` one-step episodes of a 2-number observation, as a dataset of ``task``."""
    return Dataset(
        torch.zeros(episodes, 2),
        torch.zeros(episodes, 1),
        torch.zeros(episodes),
        torch.ones(episodes, dtype=torch.bool),
        torch.zeros(episodes, dtype=torch.bool),
        final_observations=torch.zeros(episodes, 2),
        metadata=DatasetMetadata(task_id=task, collection=collection),
    )


# An override the task refuses when the env is built: an error about it would mean the check of
# the output file came after the env (and its rollout) had started.
_LATE = "task_overrides.episode_length=-5"


@pytest.mark.parametrize(
    ("existing", "extra", "message"),
    [
        (lambda p: _tiny_dataset("Cartpole-Balance").save(p), [],
         r"out: {out} already holds another dataset: task 'Cartpole-Balance' \(asked: 'Hopper'\); choose another out= or pass overwrite=true"),
        (lambda p: _tiny_dataset("Hopper", "sac-expert").save(p), [],
         r"already holds another dataset: collection 'sac-expert' \(asked: 'random'\)"),
        (lambda p: _tiny_dataset("Hopper", episodes=5).save(p), [],
         r"already holds another dataset: episodes 5 \(asked: 3\)"),
        (lambda p: p.write_text("my notes\n"), [],
         r"out: {out} is not a robolearn dataset: it is not an HDF5 file \(it starts with b'my notes\\n'\); choose another out="),
        (lambda p: p.write_text("my notes\n"), ["overwrite=true"],
         r"{out} is not a robolearn dataset: .*overwrite=true replaces only a robolearn dataset"),
        (lambda p: h5py.File(p, "w").close(), ["overwrite=true"],
         r"{out} is not a robolearn dataset: it is an HDF5 file with top-level entries \[\]"),
    ],
)  # fmt: skip
def test_collect_into_another_file_fails_before_any_rollout(tmp_path, capsys, existing, extra, message):
    out = tmp_path / "hop.h5"
    existing(out)
    before = out.read_bytes()
    assert main(["data", "collect", "task=Hopper", "episodes=3", "num_envs=2", f"out={out}", _LATE, *extra]) == 2
    err = capsys.readouterr().err
    assert re.search(message.format(out=re.escape(str(out))), err), err
    assert out.read_bytes() == before


def test_collect_overwrite_replaces_a_dataset_of_another_task(tmp_path, capsys):
    out = tmp_path / "hop.h5"
    _tiny_dataset("Cartpole-Balance").save(out)
    args = ["data", "collect", "task=Hopper", "episodes=2", "num_envs=2", f"out={out}", "task_overrides.episode_length=20"]
    assert main([*args, "overwrite=true"]) == 0
    assert "wrote" in capsys.readouterr().out
    ds = Dataset.load(out, task_id="Hopper", expect_obs_dim=11)
    assert ds.num_episodes == 2 and ds.metadata.collection == "random"


def test_collect_output_under_a_file_is_refused(tmp_path, capsys):
    blocker = tmp_path / "data"
    blocker.write_text("a file where a folder should be")
    out = blocker / "hop.h5"
    assert main(["data", "collect", "task=Hopper", "episodes=3", f"out={out}", _LATE]) == 2
    assert f"out: cannot create {out}: {blocker} is a file, not a directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # CollectConfig's own check or the command's: either names the field and the value.
        ("episodes=0", r"episodes.* >= 1, got 0"),
        ("num_envs=0", r"num_envs.* >= 1, got .*\b0\b"),
        ("ref_episodes=0", r"ref_episodes.* >= 1, got .*\b0$"),
        ("noise=-0.1", r"noise: expected .*>= 0.*, got -0\.1"),
        ("episodes=2.5", r"episodes: expected int, got 2\.5"),
        ("episodes=true", r"episodes: expected int, got True"),
        ("seed=-1", r"seed: expected an integer >= 0, got -1"),
        ("noise=nan", r"noise: expected a finite number >= 0 \(a fraction of the half action range\), got nan"),
        ("noise=inf", r"noise: expected a finite number >= 0 .*, got inf"),
        ("ref_random=nan", r"ref_random: expected a finite number or null, got nan"),
        ("ref_expert=-inf", r"ref_expert: expected a finite number or null, got -inf"),
        ("ref_expert=0", r"ref_expert: equals ref_random \(0\.0\)"),
        ("device=gpu0", r"device: 'gpu0' is not a torch device"),
        # Options this collection would not use.
        ("noise=0.1", r"noise: 0\.1 is not used with policy=random \(uniform actions\)"),
        ("ref_episodes=4", r"ref_episodes: 4 is not used: the random reference return comes from D4RL's reference returns for Hopper"),
    ],
)
def test_collect_settings_are_validated_before_any_rollout(tmp_path, capsys, override, message):
    out = tmp_path / "hop.h5"
    extra = ["ref_random=0"] if override == "ref_expert=0" else []
    assert main(["data", "collect", "task=Hopper", f"out={out}", _LATE, override, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err), err
    assert not out.exists()


@pytest.mark.parametrize("field", ["episodes", "num_envs", "ref_episodes", "seed"])
def test_collect_config_built_in_code_refuses_booleans_as_counts(tmp_path, field):
    cfg = CollectConfig(task="Hopper", out=str(tmp_path / "hop.h5"))
    setattr(cfg, field, True)  # bool is an int subclass: a plain `< 1` check lets it through
    with pytest.raises(ConfigError, match=f"{field}: expected an integer >= ., got True"):
        collect_command(cfg)


def test_collect_from_a_trained_run_with_noise(tmp_path, capsys):
    run = tmp_path / "ppo"
    train = [
        "train", "algo=ppo", "task=Cartpole-Balance", "total_env_steps=256", f"run_dir={run}", "num_envs=4",
        "eval_num_envs=2", "task_overrides.episode_length=20", "algo.num_steps=16", "algo.actor_hidden=[16]",
        "algo.critic_hidden=[16]", "runner.video=false", "runner.console=false", "runner.tensorboard=false",
    ]  # fmt: skip
    assert main(train) == 0
    out = tmp_path / "pole.h5"
    args = ["data", "collect", f"policy={run}", "episodes=2", "num_envs=2", "noise=0.2", f"out={out}", "ref_random=0"]
    assert main(args) == 0
    ds = Dataset.load(out, task_id="Cartpole-Balance")
    # The run's task and task overrides (20-step episodes), and a collection name from the run and the noise.
    assert ds.metadata.collection == "ppo-ppo-noise0.2" and (ds.episode_lengths == 20).all()
    assert ds.metadata.extra["noise"] == 0.2 and ds.metadata.ref_random_return == 0.0
    capsys.readouterr()
    assert main([*args[:-1], "task=Hopper", _LATE]) == 2
    assert "task: the policy was trained on 'Cartpole-Balance', not 'Hopper'" in capsys.readouterr().err
