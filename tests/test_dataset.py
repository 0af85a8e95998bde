"""The offline Dataset type: robolearn files, validation, sampling, n-step and Monte-Carlo returns (issue 6)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from robolearn.data import (
    D4RL_REF_RETURNS,
    Dataset,
    DatasetError,
    DatasetMetadata,
    d4rl_reference_returns,
    normalized_score,
)
from robolearn.data import formats as formats_mod


def make_dataset(lengths=(3, 2), ends=("terminal", "timeout"), obs_dim=2, seed=0, groups=("policy",)):
    """Episodes of the given lengths and end kinds; observations are distinct per row."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    term = np.zeros(n, bool)
    tout = np.zeros(n, bool)
    last = np.cumsum(lengths) - 1
    for i, kind in zip(last, ends, strict=True):
        (term if kind == "terminal" else tout)[i] = True
    obs = {g: rng.normal(size=(n, obs_dim)).astype(np.float32) for g in groups}
    fin = {g: rng.normal(size=(len(lengths), obs_dim)).astype(np.float32) for g in groups}
    return Dataset(
        obs,
        rng.uniform(-1, 1, size=(n, 3)).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
        term,
        tout,
        final_observations=fin,
    )


def test_episode_boundaries_from_flags():
    ds = make_dataset(lengths=(3, 1, 4), ends=("terminal", "timeout", "terminal"))
    assert ds.episode_starts.tolist() == [0, 3, 4]
    assert ds.episode_lengths.tolist() == [3, 1, 4]
    assert ds.episode_index.tolist() == [0, 0, 0, 1, 2, 2, 2, 2]
    assert ds.episode_last.tolist() == [2, 2, 2, 3, 7, 7, 7, 7]
    # A step flagged terminal and time-out at once is a terminal (no bootstrap) in batches.
    both = Dataset(
        np.zeros((2, 1)),
        np.zeros((2, 1)),
        np.ones(2),
        [False, True],
        [False, True],
        final_observations=np.zeros((1, 1)),
    )
    b = both.gather(torch.tensor([1]))
    assert bool(b.terminated[0]) and not bool(b.truncated[0])


def test_last_transition_must_end_an_episode():
    with pytest.raises(DatasetError, match=r"last transition \(index 2\) ends no episode"):
        Dataset(
            np.zeros((3, 1)),
            np.zeros((3, 1)),
            np.ones(3),
            [True, False, False],
            [False] * 3,
            final_observations=np.zeros((1, 1)),
        )


def full_dataset(next_obs: bool = False) -> Dataset:
    """Every field: three groups (one uint8 image), nested infos of several dtypes, metadata."""
    rng = np.random.default_rng(1)
    lengths = (4, 3, 5)
    n, e = sum(lengths), len(lengths)
    term = np.zeros(n, bool)
    tout = np.zeros(n, bool)
    term[3] = True
    tout[6] = True
    term[11] = tout[11] = True
    obs = {
        "policy": rng.normal(size=(n, 5)).astype(np.float32),
        "privileged": rng.normal(size=(n, 3)).astype(np.float32),
        "image": rng.integers(0, 255, size=(n, 2, 4, 4), dtype=np.uint8),
    }
    kwargs = {}
    if next_obs:
        kwargs["next_observations"] = {k: (v + 1 if v.dtype != np.uint8 else v) for k, v in obs.items()}
    else:
        kwargs["final_observations"] = {k: v[:e] * 2 for k, v in obs.items()}
    return Dataset(
        obs,
        rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
        term,
        tout,
        infos={
            "privileged/qpos": rng.normal(size=(n, 7)),  # float64 stays float64
            "randomization/friction": rng.uniform(size=(n, 1)).astype(np.float32),
            "timestamp_ns": np.arange(n, dtype=np.int64) * 20_000_000,
            "contact": rng.integers(0, 2, size=(n, 4)).astype(bool),
        },
        metadata=DatasetMetadata(
            task_id="HalfCheetah-v5",
            collection="sac-expert",
            ref_random_return=-280.178953,
            ref_expert_return=12135.0,
            extra={"seed": 7, "note": "test", "nested": {"a": [1, 2]}},
        ),
        **kwargs,
    )


def assert_same(a: Dataset, b: Dataset) -> None:
    for name in ("observations", "final_observations", "infos"):
        da, db = getattr(a, name), getattr(b, name)
        assert set(da) == set(db), name
        for k in da:
            assert da[k].dtype == db[k].dtype, f"{name}/{k}"
            assert torch.equal(da[k].cpu(), db[k].cpu()), f"{name}/{k}"
    assert (a.next_observations is None) == (b.next_observations is None)
    for k in a.next_observations or {}:
        assert torch.equal(a.next_observations[k].cpu(), b.next_observations[k].cpu())
    for name in ("actions", "rewards", "terminals", "timeouts", "episode_starts", "episode_lengths"):
        ta, tb = getattr(a, name).cpu(), getattr(b, name).cpu()
        assert ta.dtype == tb.dtype and torch.equal(ta, tb), name
    assert a.metadata == b.metadata


@pytest.mark.parametrize("next_obs", [False, True])
@pytest.mark.parametrize("compression", ["gzip", "lzf", None])
def test_robolearn_file_round_trip(tmp_path, next_obs, compression):
    ds = full_dataset(next_obs)
    path = ds.save(tmp_path / "sub" / "data.h5", compression=compression)
    with h5py.File(path, "r") as f:
        assert f.attrs["format_version"] == formats_mod.FORMAT_VERSION
        assert f["actions"].chunks is not None and f["actions"].compression == compression
    back = Dataset.load(
        path, expect_obs_dim={"policy": 5, "privileged": 3}, expect_action_dim=2, task_id="HalfCheetah-v5"
    )
    assert_same(ds, back)
    assert back.observations["image"].dtype == torch.uint8
    assert back.infos["privileged/qpos"].dtype == torch.float64
    assert back.infos["contact"].dtype == torch.bool
    assert back.metadata.extra["nested"] == {"a": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["data.h5"]  # no temporary left


@pytest.mark.parametrize("existing", [False, True])
def test_interrupted_write_leaves_target_untouched(tmp_path, monkeypatch, existing):
    target = tmp_path / "data.h5"
    if existing:
        make_dataset().save(target)
        before = target.read_bytes()
    real_put = formats_mod._put
    calls = []

    def failing_put(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 4:  # midway: some arrays already written to the temporary file
            raise OSError("disk full (simulated)")
        return real_put(*args, **kwargs)

    monkeypatch.setattr(formats_mod, "_put", failing_put)
    with pytest.raises(OSError, match="simulated"):
        full_dataset().save(target)
    assert len(calls) == 4
    if existing:
        assert target.read_bytes() == before
        monkeypatch.setattr(formats_mod, "_put", real_put)
        assert len(Dataset.load(target)) == len(make_dataset())
    else:
        assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["data.h5"] if existing else [])


def test_load_onto_device(tmp_path):
    path = make_dataset().save(tmp_path / "d.h5")
    assert Dataset.load(path, device="cpu").device == torch.device("cpu")
    if torch.cuda.is_available():
        ds = Dataset.load(path, device="cuda")
        assert ds.observations["policy"].is_cuda and ds.episode_starts.is_cuda
        g = torch.Generator(device="cuda").manual_seed(0)
        assert ds.sample(8, g).reward.is_cuda


# ---------------------------------------------------------------- malformed robolearn files


def _set(name, value):
    def edit(f):
        if name in f:
            del f[name]
        f[name] = value

    return edit


def _delete(name):
    def edit(f):
        del f[name]

    return edit


def _nan_at(name, row):
    def edit(f):
        a = f[name][()]
        a[row, 1] = np.nan
        del f[name]
        f[name] = a

    return edit


N_FULL = 12
MALFORMED = {
    "wrong length": (_set("actions", np.zeros((N_FULL - 1, 2), np.float32)), r"actions: expected 12 rows"),
    "nan with index": (
        _nan_at("observations/policy", 7),
        r"observations/policy: non-finite value nan at index 7 \(element \[7, 1\]\)",
    ),
    "inf in info": (
        _set("infos/randomization/friction", np.full((N_FULL, 1), np.inf, np.float32)),
        r"infos/randomization/friction: non-finite value inf at index 0",
    ),
    "wrong dtype": (
        _set("actions", np.zeros((N_FULL, 2), np.int64)),
        r"actions: expected a floating-point dtype, got torch.int64",
    ),
    "string dtype": (
        _set("rewards", np.array(["x"] * N_FULL, dtype="S1")),
        r"rewards: expected a numeric or bool array",
    ),
    "wrong shape": (
        _set("rewards", np.zeros((N_FULL, 2), np.float32)),
        r"rewards: expected shape \[N\], got \(12, 2\)",
    ),
    "missing field": (_delete("timeouts"), r"timeouts: missing from"),
    "missing group": (_delete("final_observations"), r"final_observations: missing from"),
    "flag not boolean": (
        _set("terminals", np.array([0, 0, 0, 2] + [0] * 7 + [1], np.int8)),
        r"terminals: expected bool \(or 0/1\) flags, got 2 at index 3",
    ),
    "final obs shape": (
        _set("final_observations/policy", np.zeros((3, 4), np.float32)),
        r"final_observations/policy: expected rows of shape \(5,\)",
    ),
    "episode lengths": (
        _set("episode_lengths", np.array([4, 4, 4])),
        r"episode_lengths: the stored lengths .* disagree .* first at episode 1",
    ),
    "unknown group": (
        _set("observations/foo", np.zeros((N_FULL, 1), np.float32)),
        r"observations: unknown observation group\(s\) \['foo'\]",
    ),
    "newer version": (lambda f: f.attrs.__setitem__("format_version", 99), r"format_version: .* version 99"),
    "not robolearn": (lambda f: f.attrs.__delitem__("format"), r"format: .* is not a robolearn dataset file"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_robolearn_file_names_field_and_index(tmp_path, case):
    edit, message = MALFORMED[case]
    path = full_dataset().save(tmp_path / "bad.h5")
    with h5py.File(path, "r+") as f:
        edit(f)
    with pytest.raises(DatasetError, match=message):
        Dataset.load(path)


def test_not_hdf5_and_missing_file(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not an hdf5 file")
    with pytest.raises(DatasetError, match="not a readable HDF5 file"):
        Dataset.load(junk)
    with pytest.raises(FileNotFoundError):
        Dataset.load(tmp_path / "absent.h5")


def test_expectations_obs_dim_with_task_version_hint(tmp_path):
    # A D4RL-era Ant observation (111 numbers) loaded for Gymnasium Ant-v5 (105).
    ds = make_dataset(obs_dim=111)
    path = ds.save(tmp_path / "ant.h5")
    with pytest.raises(DatasetError) as err:
        Dataset.load(path, expect_obs_dim=105, task_id="Ant-v5")
    text = str(err.value)
    assert "observations/policy: expected 105 numbers per step (task 'Ant-v5'), got 111" in text
    assert "older" in text and "Ant-v2/v3" in text and "Ant-v5" in text
    with pytest.raises(DatasetError, match=r"actions: expected 8 numbers per step, got 3"):
        Dataset.load(path, expect_action_dim=8)
    with pytest.raises(DatasetError, match=r"observations/privileged: missing"):
        Dataset.load(path, expect_obs_dim={"privileged": 4})
    # No hint where no version change explains the size.
    with pytest.raises(DatasetError) as err:
        Dataset.load(path, expect_obs_dim=17, task_id="HalfCheetah-v5")
    assert "older" not in str(err.value)
    # The file's own task id must match the caller's.
    path2 = full_dataset().save(tmp_path / "cheetah.h5")
    with pytest.raises(
        DatasetError,
        match=r"metadata.task_id: the file was collected on task 'HalfCheetah-v5', the caller expects 'Hopper-v5'",
    ):
        Dataset.load(path2, task_id="Hopper-v5")


def test_from_episodes_rules():
    ep = {"observations": np.zeros((4, 2)), "actions": np.zeros((3, 1)), "rewards": np.ones(3)}
    ds = Dataset.from_episodes([ep, {**ep, "terminals": [False, False, True]}])
    assert ds.timeouts.tolist() == [False, False, True, False, False, False]  # unflagged end -> time-out
    assert ds.terminals.tolist() == [False] * 5 + [True]
    with pytest.raises(
        DatasetError, match=r"episode 1: terminals/timeouts: flag at step 0 before the episode's last step 2"
    ):
        Dataset.from_episodes([ep, {**ep, "terminals": [True, False, False]}])
    with pytest.raises(DatasetError, match=r"episode 1: actions: expected 3 rows, got shape \(2, 1\)"):
        Dataset.from_episodes([ep, {**ep, "actions": np.zeros((2, 1))}])
    with pytest.raises(DatasetError, match=r"episode 0: observations/policy: expected T \+ 1 = 4 rows"):
        Dataset.from_episodes([{**ep, "observations": np.zeros((3, 2))}])


# ---------------------------------------------------------------- sampling and returns


def hand_dataset() -> Dataset:
    # Episode 0: rewards 1, 2, 3 ending in a terminal; episode 1: rewards 4, 5, 6, 7 ending in a time-out.
    obs = torch.arange(7, dtype=torch.float32)[:, None] * 10
    return Dataset(
        obs,
        torch.arange(7, dtype=torch.float32)[:, None],
        torch.tensor([1.0, 2, 3, 4, 5, 6, 7]),
        torch.tensor([0, 0, 1, 0, 0, 0, 0], dtype=torch.bool),
        torch.tensor([0, 0, 0, 0, 0, 0, 1], dtype=torch.bool),
        final_observations=torch.tensor([[-1.0], [-2.0]]),
    )


def test_nstep_returns_by_hand_at_episode_ends():
    ds, g = hand_dataset(), 0.5
    b = ds.gather_nstep(torch.arange(7), 3, g)
    expected = [
        1 + g * 2 + g * g * 3,  # 0: whole episode, ends at the terminal
        2 + g * 3,  # 1: stops at the terminal after 2 steps
        3,  # 2: the terminal step itself
        4 + g * 5 + g * g * 6,  # 3: full 3 steps inside episode 1
        5 + g * 6 + g * g * 7,  # 4: reaches the time-out exactly
        6 + g * 7,  # 5: stops at the time-out
        7,  # 6: the time-out step
    ]
    torch.testing.assert_close(b.reward, torch.tensor(expected))
    assert b.extras["steps"].tolist() == [3, 2, 1, 3, 3, 2, 1]
    torch.testing.assert_close(b.extras["discount"], torch.tensor([g**3, g**2, g, g**3, g**3, g**2, g]))
    assert b.terminated.tolist() == [True, True, True, False, False, False, False]
    assert b.truncated.tolist() == [False, False, False, False, True, True, True]
    # n-step next observation: the row after the window, or the episode's true final observation.
    assert b.next_obs["policy"][:, 0].tolist() == [-1, -1, -1, 60, -2, -2, -2]
    # Bootstrap: a terminal never, a time-out from the final observation with gamma^k.
    mask = b.extras["discount"] * (~b.terminated)
    torch.testing.assert_close(mask, torch.tensor([0, 0, 0, g**3, g**3, g**2, g]))
    one = ds.gather(torch.arange(7))
    assert one.next_obs["policy"][:, 0].tolist() == [10, 20, -1, 40, 50, 60, -2]
    assert one.terminated.tolist() == [False, False, True] + [False] * 4
    assert one.truncated.tolist() == [False] * 6 + [True]


def test_monte_carlo_returns_to_go_by_hand():
    ds, g = hand_dataset(), 0.9
    plain = [
        1 + g * 2 + g * g * 3,
        2 + g * 3,
        3,
        4 + g * 5 + g**2 * 6 + g**3 * 7,
        5 + g * 6 + g**2 * 7,
        6 + g * 7,
        7,
    ]
    torch.testing.assert_close(ds.returns_to_go(g), torch.tensor(plain))
    # Bootstrapping time-out ends with a value V: only episode 1 (the time-out) changes, by g^(k) V.
    v = 100.0
    boot = plain[:3] + [plain[3] + g**4 * v, plain[4] + g**3 * v, plain[5] + g**2 * v, plain[6] + g * v]
    torch.testing.assert_close(ds.returns_to_go(g, v), torch.tensor(boot))
    torch.testing.assert_close(ds.returns_to_go(g, torch.tensor([555.0, v])), torch.tensor(boot))
    torch.testing.assert_close(ds.episode_returns(), torch.tensor([6.0, 22.0], dtype=torch.float64))


def test_returns_to_go_matches_a_plain_loop_on_long_episodes():
    ds = make_dataset(lengths=(300, 1, 77, 513), ends=("timeout", "terminal", "terminal", "timeout"), seed=3)
    g = 0.99
    r = ds.rewards.double().tolist()
    last = ds.episode_last.tolist()
    want = [0.0] * len(r)
    for t in reversed(range(len(r))):
        want[t] = r[t] + (g * want[t + 1] if last[t] != t else 0.0)
    torch.testing.assert_close(ds.returns_to_go(g), torch.tensor(want, dtype=torch.float32))


def test_windows_never_cross_episodes():
    ds = make_dataset(
        lengths=(5, 1, 9, 3, 12), ends=("timeout", "terminal", "terminal", "timeout", "terminal"), seed=4
    )
    h = 6
    w = ds.sample_windows(2000, h, torch.Generator().manual_seed(0))
    start = w.index[:, 0]
    ep = ds.episode_index[w.index]
    assert torch.equal(
        ep, ds.episode_index[start][:, None].expand(-1, h)
    )  # every row from the start's episode
    steps = start[:, None] + torch.arange(h)
    assert torch.equal(w.mask, steps <= ds.episode_last[start][:, None])
    assert bool((w.rewards[~w.mask] == 0).all())
    assert not bool(w.terminals[~w.mask].any()) and not bool(w.timeouts[~w.mask].any())
    # Padding repeats the episode's last real step.
    last = ds.episode_last[start]
    pad = ~w.mask
    assert torch.equal(w.index[pad], last[:, None].expand(-1, h)[pad])
    assert torch.equal(w.actions[pad], ds.actions[last][:, None].expand(-1, h, -1)[pad])
    # Inside a window, next_obs of step j is obs of step j+1; at the episode end, the final observation.
    inner = w.mask[:, :-1] & w.mask[:, 1:]
    assert torch.equal(w.next_obs["policy"][:, :-1][inner], w.obs["policy"][:, 1:][inner])
    full = ds.sample_windows(500, h, torch.Generator().manual_seed(1), pad=False)
    assert bool(full.mask.all())
    assert bool((ds.episode_lengths[ds.episode_index[full.index[:, 0]]] >= h).all())
    with pytest.raises(DatasetError, match="no episode holds a whole window of 20 steps"):
        ds.sample_windows(4, 20, pad=False)


def test_sampling_is_reproducible_with_a_generator():
    ds = make_dataset(lengths=(40, 25, 35), ends=("terminal", "timeout", "timeout"), seed=5)

    def draw(seed):
        g = torch.Generator().manual_seed(seed)
        a = ds.sample(64, g)
        b = ds.sample_nstep(64, 3, 0.99, g)
        c = ds.sample_windows(16, 4, g)
        return a, b, c

    (a1, b1, c1), (a2, b2, c2), (a3, _, _) = draw(0), draw(0), draw(1)
    assert torch.equal(a1.extras["index"], a2.extras["index"]) and torch.equal(
        a1.obs["policy"], a2.obs["policy"]
    )
    assert torch.equal(b1.reward, b2.reward) and torch.equal(c1.index, c2.index)
    assert not torch.equal(a1.extras["index"], a3.extras["index"])
    # Uniform batches carry the right next observation for every draw.
    idx = a1.extras["index"]
    for i, nxt in zip(idx.tolist(), a1.next_obs["policy"], strict=True):
        e = int(ds.episode_index[i])
        want = (
            ds.final_observations["policy"][e]
            if i == int(ds.episode_last[i])
            else ds.observations["policy"][i + 1]
        )
        assert torch.equal(nxt, want)


def test_next_observations_array_wins_when_present():
    ds = full_dataset(next_obs=True)
    idx = torch.arange(len(ds))
    assert torch.equal(ds.next_obs(idx)["policy"], ds.observations["policy"] + 1)
    assert torch.equal(
        ds.final_observations["policy"],
        ds.observations["policy"][ds.episode_starts + ds.episode_lengths - 1] + 1,
    )


def test_normalized_score_and_d4rl_reference_table():
    assert D4RL_REF_RETURNS["hopper"] == (-20.272305, 3234.3)
    assert d4rl_reference_returns("halfcheetah-medium-v2") == (-280.178953, 12135.0)
    assert d4rl_reference_returns("Walker2d-v5") == (1.629008, 4592.3)
    rnd, exp = d4rl_reference_returns("hopper-expert-v2")
    assert normalized_score(rnd, rnd, exp) == 0.0
    assert normalized_score(exp, rnd, exp) == pytest.approx(100.0)
    assert normalized_score(1000.0, -20.0, 1980.0) == pytest.approx(51.0)
    torch.testing.assert_close(
        normalized_score(torch.tensor([-20.0, 980.0]), -20.0, 1980.0), torch.tensor([0.0, 50.0])
    )
    with pytest.raises(KeyError, match="known task families"):
        d4rl_reference_returns("pen-human-v1")
    with pytest.raises(ValueError):
        normalized_score(1.0, 2.0, 2.0)


def test_metadata_json_keeps_unknown_keys():
    meta = DatasetMetadata.from_json('{"task_id": "Hopper-v5", "future_field": 3, "extra": {"a": 1}}')
    assert meta.task_id == "Hopper-v5" and meta.extra == {"a": 1, "future_field": 3}
    with pytest.raises(DatasetError, match="JSON-serialisable"):
        DatasetMetadata(extra={"x": object()}).to_json()


def test_task_version_mismatch_is_named(tmp_path):
    ds = make_dataset()
    ds.metadata.task_id = "Ant-v2"
    path = ds.save(tmp_path / "old.h5")
    with pytest.raises(
        DatasetError,
        match=r"collected on task 'Ant-v2', the caller expects 'Ant-v5'\. The file comes from an older version",
    ):
        Dataset.load(path, task_id="Ant-v5")
    assert len(Dataset.load(path, expect_obs_dim=np.int64(2), task_id="Ant-v2")) == 5
