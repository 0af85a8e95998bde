"""Dataset collection: whole episodes with the right flags, final observations and returns, drawn
values in the infos, and the ``robolearn data collect`` command writing a file the reader accepts.
"""

from __future__ import annotations

import pytest
import torch

import robolearn
from robolearn.cli.main import main
from robolearn.data import Dataset, d4rl_reference_returns
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
