"""D4RL HDF5 and Minari readers/writers on real files written by the tests (issue 6)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from robolearn.data import (
    Dataset,
    DatasetError,
    DatasetMetadata,
    export_minari,
    inspect_robolearn,
    read_d4rl,
    read_minari,
)
from robolearn.data import minari_io as minari_io_mod


@pytest.fixture
def minari():
    """The real Minari package (a dev dependency); only the Minari tests need it."""
    return pytest.importorskip("minari")


# Three episodes as D4RL lays them out: A (3 steps) ends in a terminal, B (4 steps) in a time-out,
# C (2 steps) is cut by the end of the file with no flag.
LENGTHS = (3, 4, 2)
N = sum(LENGTHS)


def d4rl_arrays(obs_dim: int = 3):
    obs = (np.arange(N, dtype=np.float32)[:, None] * 10 + np.arange(obs_dim, dtype=np.float32)).astype(
        np.float32
    )
    nxt = obs + 10  # inside an episode next obs is the following row ...
    nxt[2] = -1.0  # ... after A's terminal, the true (post-terminal) observation
    nxt[6] = -2.0  # ... after B's time-out, the true final observation
    nxt[8] = -3.0  # ... after C's last row
    terminals = np.zeros(N, bool)
    timeouts = np.zeros(N, bool)
    terminals[2] = True
    timeouts[6] = True
    return {
        "observations": obs,
        "next_observations": nxt,
        "actions": np.linspace(-1, 1, N * 2, dtype=np.float32).reshape(N, 2),
        "rewards": np.arange(1, N + 1, dtype=np.float32),
        "terminals": terminals,
        "timeouts": timeouts,
        "infos/qpos": np.arange(N, dtype=np.float64)[:, None].repeat(2, 1),
    }


def write_d4rl(path, arrays, drop=(), meta=True):
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            if k not in drop:
                f.create_dataset(k, data=v)
        if meta:
            f["metadata/algorithm"] = "SAC"
            f["metadata/policy/fc0/weight"] = np.zeros((4, 4))  # non-scalar: not copied
    return path


def test_d4rl_with_next_observations(tmp_path):
    ds = read_d4rl(write_d4rl(tmp_path / "d.hdf5", d4rl_arrays()), task_id="hopper-medium-v2")
    assert len(ds) == N and ds.episode_lengths.tolist() == list(LENGTHS)
    assert ds.terminals.nonzero().reshape(-1).tolist() == [2]
    assert ds.timeouts.nonzero().reshape(-1).tolist() == [6, 8]  # C's unflagged end became a time-out
    # Next observations agree with the file everywhere, and only E final rows are stored.
    assert ds.next_observations is None
    want = torch.from_numpy(d4rl_arrays()["next_observations"])
    assert torch.equal(ds.next_obs(torch.arange(N))["policy"], want)
    assert ds.final_observations["policy"][:, 0].tolist() == [-1.0, -2.0, -3.0]
    assert ds.infos["qpos"].dtype == torch.float64 and ds.infos["qpos"].shape == (N, 2)
    assert ds.metadata.source == "d4rl" and ds.metadata.task_id == "hopper-medium-v2"
    assert ds.metadata.extra["d4rl"] == {"algorithm": "SAC"}
    # Batches: the time-out bootstraps from the true final observation, the terminal does not.
    b = ds.gather(torch.tensor([2, 6]))
    assert b.terminated.tolist() == [True, False] and b.truncated.tolist() == [False, True]
    assert b.next_obs["policy"][:, 0].tolist() == [-1.0, -2.0]


def test_d4rl_without_next_observations_drops_unknown_time_out_steps(tmp_path):
    arrays = d4rl_arrays()
    ds = read_d4rl(write_d4rl(tmp_path / "d.hdf5", arrays, drop=("next_observations",)))
    # B's time-out step (row 6) and C's last row (8) have no known next observation: dropped.
    assert len(ds) == N - 2
    assert ds.episode_lengths.tolist() == [3, 3, 1]
    assert ds.rewards.tolist() == [1, 2, 3, 4, 5, 6, 8]
    assert ds.terminals.tolist() == [False, False, True, False, False, False, False]
    # The step before each dropped one is now the episode's time-out end ...
    assert ds.timeouts.tolist() == [False, False, False, False, False, True, True]
    obs = arrays["observations"]
    # ... whose final observation is the dropped step's observation; the terminal keeps a copy of its own.
    assert torch.equal(ds.final_observations["policy"], torch.from_numpy(obs[[2, 6, 8]]))
    nxt = ds.next_obs(torch.arange(len(ds)))["policy"]
    file_rows = [0, 1, 2, 3, 4, 5, 7]
    for i, row in enumerate(file_rows):
        if row != 2:  # the terminal's next observation is unknown (never bootstrapped from)
            assert torch.equal(nxt[i], torch.from_numpy(obs[row + 1]))
    assert ds.infos["qpos"][:, 0].tolist() == file_rows
    assert ds.metadata.extra["dropped_transitions"] == 2


def test_d4rl_next_observations_that_differ_are_kept_whole(tmp_path, minari):
    arrays = d4rl_arrays()
    arrays["next_observations"] = arrays["next_observations"] + 0.5  # e.g. noisy re-rendered next states
    ds = read_d4rl(write_d4rl(tmp_path / "d.hdf5", arrays))
    assert ds.next_observations is not None
    assert torch.equal(ds.next_obs(torch.arange(N))["policy"], torch.from_numpy(arrays["next_observations"]))
    path = ds.save(tmp_path / "ours.h5")
    assert Dataset.load(path).next_observations is not None
    with pytest.raises(DatasetError, match="next_observations: Minari stores one observation sequence"):
        export_minari(ds, "test/noisy-v0", root=tmp_path / "minari")


def test_d4rl_missing_timeouts_need_max_episode_steps(tmp_path):
    arrays = d4rl_arrays()
    arrays["terminals"] = np.zeros(N, bool)
    path = write_d4rl(tmp_path / "v0.hdf5", arrays, drop=("timeouts", "next_observations"))
    with pytest.raises(DatasetError, match="timeouts: missing .* pass max_episode_steps"):
        read_d4rl(path)
    ds = read_d4rl(path, max_episode_steps=4)
    # Time-outs every 4 steps (rows 3, 7; row 8 is the file's cut end), their last steps dropped.
    assert ds.episode_lengths.tolist() == [3, 3]
    assert ds.rewards.tolist() == [1, 2, 3, 5, 6, 7]


D4RL_BAD = {
    "missing field": (lambda a: a.pop("actions"), r"actions: missing from"),
    "nan index is the file row": (
        lambda a: a["observations"].__setitem__((6, 0), np.nan),
        r"observations: non-finite value nan at index 6",
    ),
    "wrong length": (
        lambda a: a.__setitem__("timeouts", a["timeouts"][:-1]),
        r"timeouts: expected 9 rows .* got 8",
    ),
    "bad flag": (
        lambda a: a.__setitem__("terminals", np.full(N, 0.5, np.float32)),
        r"terminals: expected bool \(or 0/1\) flags, got 0.5 at index 0",
    ),
    "info length": (lambda a: a.__setitem__("infos/qpos", np.zeros((3, 2))), r"infos/qpos: expected 9 rows"),
    "action dtype": (
        lambda a: a.__setitem__("actions", np.zeros((N, 2), np.int32)),
        r"actions: expected a floating-point dtype",
    ),
}


@pytest.mark.parametrize("case", sorted(D4RL_BAD))
def test_d4rl_malformed(tmp_path, case):
    edit, message = D4RL_BAD[case]
    arrays = d4rl_arrays()
    edit(arrays)
    with pytest.raises(DatasetError, match=message):
        read_d4rl(write_d4rl(tmp_path / "bad.hdf5", arrays))


def test_d4rl_ant_v2_file_for_ant_v5_says_older_version(tmp_path):
    path = write_d4rl(tmp_path / "ant-medium-v2.hdf5", d4rl_arrays(obs_dim=111))
    with pytest.raises(DatasetError) as err:
        read_d4rl(path, expect_obs_dim=105, expect_action_dim=2, task_id="Ant-v5")
    assert "expected 105 numbers per step (task 'Ant-v5'), got 111" in str(err.value)
    assert "older" in str(err.value) and "D4RL-era Ant" in str(err.value)


# ---------------------------------------------------------------- Minari


def our_dataset(groups=("policy",), seed=0) -> Dataset:
    rng = np.random.default_rng(seed)
    lengths = (5, 3, 6)
    n = sum(lengths)
    term = np.zeros(n, bool)
    tout = np.zeros(n, bool)
    term[4] = True
    tout[7] = True
    tout[13] = True
    return Dataset(
        {g: rng.normal(size=(n, 4 + i)).astype(np.float32) for i, g in enumerate(groups)},
        rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
        term,
        tout,
        final_observations={g: rng.normal(size=(3, 4 + i)).astype(np.float32) for i, g in enumerate(groups)},
        infos={"privileged/mass": rng.uniform(size=(n, 1)), "timestamp": np.arange(n, dtype=np.int64)},
        metadata=DatasetMetadata(
            task_id="Hopper-v5",
            collection="ppo",
            ref_random_return=-20.272305,
            ref_expert_return=3234.3,
            extra={"seed": 3},
        ),
    )


def assert_equal(a: Dataset, b: Dataset) -> None:
    for name in ("observations", "final_observations", "infos"):
        assert set(getattr(a, name)) == set(getattr(b, name)), name
        for k, v in getattr(a, name).items():
            w = getattr(b, name)[k]
            assert v.dtype == w.dtype and torch.equal(v, w), f"{name}/{k}"
    for name in ("actions", "rewards", "terminals", "timeouts", "episode_lengths"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.metadata == b.metadata


@pytest.mark.parametrize("groups", [("policy",), ("policy", "privileged")])
def test_minari_round_trip(tmp_path, monkeypatch, groups, minari):
    ds = our_dataset(groups)
    root = tmp_path / "minari"
    out = export_minari(ds, "robolearn/hopper/test-v0", root=root, author="tester")
    assert out == root / "robolearn/hopper/test-v0"
    assert [p.name for p in out.parent.iterdir()] == ["test-v0"]  # no temporary directory left
    # The real Minari package reads it back through its own root resolution.
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    m = minari.load_dataset("robolearn/hopper/test-v0")
    assert m.total_episodes == 3 and m.total_steps == len(ds)
    episodes = list(m.iterate_episodes())
    obs0 = episodes[0].observations if len(groups) == 1 else episodes[0].observations["policy"]
    assert obs0.shape == (6, 4)  # T + 1 rows: the final observation appended
    np.testing.assert_array_equal(obs0[-1], ds.final_observations["policy"][0].numpy())
    assert episodes[0].terminations.tolist() == [False] * 4 + [True]
    assert episodes[1].truncations.tolist() == [False, False, True]
    np.testing.assert_array_equal(
        episodes[2].infos["privileged"]["mass"], ds.infos["privileged/mass"][8:].numpy()
    )
    assert m.storage.metadata["ref_max_score"] == 3234.3
    # And our reader gives back exactly what was exported (root from the environment variable here).
    back = read_minari("robolearn/hopper/test-v0", expect_obs_dim=4, expect_action_dim=2, task_id="Hopper-v5")
    assert_equal(ds, back)
    with pytest.raises(FileExistsError):
        export_minari(ds, "robolearn/hopper/test-v0", root=root)


def test_minari_dataset_made_by_minari(tmp_path, monkeypatch, minari):
    """A dataset written by Minari's own tools (reset info first, Box spaces, an env spec)."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    rng = np.random.default_rng(0)
    buffers = []
    for e, (t, cut) in enumerate([(4, "term"), (3, "trunc")]):
        buffers.append(
            EpisodeBuffer(
                id=e,
                observations=rng.normal(size=(t + 1, 11)),
                actions=rng.uniform(-1, 1, size=(t, 3)).astype(np.float32),
                rewards=rng.normal(size=t),
                terminations=np.array([False] * (t - 1) + [cut == "term"]),
                truncations=np.array([False] * (t - 1) + [cut == "trunc"]),
                infos={"x_position": np.arange(t + 1, dtype=np.float64)},  # reset info + one per step
            )
        )
    with pytest.warns(UserWarning):  # Minari warns about the missing eval env
        minari.create_dataset_from_buffers(
            "test/hopper/made-v0",
            buffers,
            env="Hopper-v5",
            algorithm_name="random",
            ref_min_score=-20.0,
            ref_max_score=3000.0,
        )
    ds = read_minari("test/hopper/made-v0", root=tmp_path, expect_obs_dim=11, expect_action_dim=3)
    assert ds.episode_lengths.tolist() == [4, 3]
    assert ds.terminals.tolist() == [False] * 3 + [True] + [False] * 3
    assert ds.timeouts.tolist() == [False] * 6 + [True]
    assert ds.observations["policy"].dtype == torch.float32  # float64 on disk, float32 here
    assert ds.infos["x_position"].tolist() == [0, 1, 2, 3, 0, 1, 2]  # infos[t] goes with observations[t]
    assert ds.metadata.task_id == "Hopper-v5" and ds.metadata.collection == "random"
    assert (ds.metadata.ref_random_return, ds.metadata.ref_expert_return) == (-20.0, 3000.0)
    assert ds.metadata.source == "minari"
    with pytest.raises(DatasetError, match=r"metadata.task_id: the file was collected on task 'Hopper-v5'"):
        read_minari("test/hopper/made-v0", root=tmp_path, task_id="Walker2d-v5")


def test_minari_never_downloads(tmp_path, monkeypatch, minari):
    def no_download(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(minari, "download_dataset", no_download)
    with pytest.raises(FileNotFoundError, match="never downloads"):
        read_minari("D4RL/door/human-v2", root=tmp_path)


def test_failed_minari_export_leaves_nothing(tmp_path, monkeypatch, minari):
    from minari.dataset.minari_storage import MinariStorage

    def fail(self, episodes):
        next(iter(episodes))
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(MinariStorage, "update_episodes", fail, raising=False)
    for cls in MinariStorage.__subclasses__():
        monkeypatch.setattr(cls, "update_episodes", fail)
    with pytest.raises(OSError, match="simulated"):
        export_minari(our_dataset(), "test/fail-v0", root=tmp_path)
    assert list(tmp_path.iterdir()) == [tmp_path / "test"]
    assert list((tmp_path / "test").iterdir()) == []
    assert minari_io_mod.minari_root(tmp_path) == tmp_path


def test_minari_dict_observations_need_a_group_map(tmp_path, monkeypatch, minari):
    import gymnasium as gym
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    space = gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
            "desired_goal": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        }
    )
    obs = {"observation": np.ones((4, 4), np.float32), "desired_goal": np.zeros((4, 2), np.float32)}
    buf = EpisodeBuffer(
        id=0,
        observations=obs,
        actions=np.zeros((3, 1), np.float32),
        rewards=np.ones(3),
        terminations=np.array([False, False, False]),
        truncations=np.array([False, False, True]),
    )
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers(
            "test/goal-v0",
            [buf],
            observation_space=space,
            action_space=gym.spaces.Box(-1, 1, (1,), np.float32),
        )
    with pytest.raises(DatasetError, match=r"Dict keys \['desired_goal', 'observation'\] .* group_map"):
        read_minari("test/goal-v0")
    ds = read_minari("test/goal-v0", group_map={"observation": "policy", "desired_goal": "privileged"})
    assert ds.obs_dims == {"policy": 4, "privileged": 2} and ds.metadata.task_id == ""


def test_d4rl_reader_names_the_file_it_cannot_read(tmp_path):
    junk = tmp_path / "hopper-medium-v2.hdf5"
    junk.write_bytes(b"<html>404 Not Found</html>")  # what a failed download leaves
    with pytest.raises(DatasetError, match=f"{junk}: not a readable HDF5 file"):
        read_d4rl(junk)
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'absent.hdf5'}: no such dataset file"):
        read_d4rl(tmp_path / "absent.hdf5")
    with pytest.raises(IsADirectoryError, match=f"{tmp_path}: is a directory, not a dataset file"):
        read_d4rl(tmp_path)
    ours = our_dataset().save(tmp_path / "ours.h5")
    with pytest.raises(DatasetError, match=f"{ours} is a robolearn dataset file, not a D4RL one; read it with Dataset.load"):
        read_d4rl(ours)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("hdf5 junk", r"test/broken-v0: {data}/main_data.hdf5 is not a readable HDF5 file"),
        ("hdf5 missing", r"test/broken-v0: Minari cannot open {data} \(ValueError: No data found"),
        ("metadata junk", r"test/broken-v0: Minari cannot open {data} \(JSONDecodeError: "),
        ("metadata list", r"test/broken-v0: Minari cannot open {data} \(AttributeError: "),
        ("episode missing", r"test/broken-v0: Minari cannot read the episodes in {data} \(KeyError: "),
    ],
)
def test_minari_reader_names_the_dataset_it_cannot_read(tmp_path, minari, damage, message):
    data = export_minari(our_dataset(), "test/broken-v0", root=tmp_path) / "data"
    main = data / "main_data.hdf5"
    if damage == "hdf5 junk":
        main.write_bytes(b"not an HDF5 file")
    elif damage == "hdf5 missing":
        main.unlink()
    elif damage == "metadata junk":
        (data / "metadata.json").write_text("{truncated")
    elif damage == "metadata list":
        (data / "metadata.json").write_text("[1]")
    else:
        with h5py.File(main, "a") as f:
            del f["episode_1"]
    with pytest.raises(DatasetError, match=message.format(data=data)):
        read_minari("test/broken-v0", root=tmp_path)


def test_inspect_reads_the_header_and_says_what_other_files_hold(tmp_path):
    ds = our_dataset()
    info = inspect_robolearn(ds.save(tmp_path / "ours.h5"))
    assert (info.transitions, info.episodes, info.format_version) == (len(ds), ds.num_episodes, 1)
    assert info.metadata == ds.metadata
    d4rl = write_d4rl(tmp_path / "d4rl.hdf5", d4rl_arrays())
    with pytest.raises(DatasetError, match=f"{d4rl} is not a robolearn dataset: it is a D4RL-style HDF5 file \\(arrays \\['actions', "):
        inspect_robolearn(d4rl)
    (tmp_path / "empty.h5").touch()
    with pytest.raises(DatasetError, match="empty.h5 is not a robolearn dataset: it is an empty file"):
        inspect_robolearn(tmp_path / "empty.h5")
