"""uint8 image observation groups in datasets: robolearn HDF5, lazy frames, Minari, refusals (issue 16)."""

from __future__ import annotations

import json
import pickle

import gymnasium
import h5py
import numpy as np
import pytest
import torch

from robolearn.data import Dataset, DatasetError, export_minari, inspect_robolearn, read_d4rl, read_minari
from robolearn.data import formats as formats_mod
from robolearn.data.dataset import ImageLayout
from robolearn.data.formats import HDF5Frames

EPISODES, STEPS, SIDE = 3, 20, 32
N = EPISODES * STEPS


def frames(order: str = "HWC", n: int = N, seed: int = 0) -> np.ndarray:
    """Random uint8 frames: incompressible noise is the hardest case for a bit-exact round trip."""
    shape = (n, SIDE, SIDE, 3) if order == "HWC" else (n, 3, SIDE, SIDE)
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def image_dataset(order: str = "HWC", **kwargs) -> Dataset:
    """3 episodes x 20 steps: a float policy group and a 32x32 RGB image group."""
    rng = np.random.default_rng(1)
    obs = {"policy": rng.normal(size=(N, 4)).astype(np.float32), "image": frames(order)}
    term = np.zeros(N, bool)
    tout = np.zeros(N, bool)
    term[STEPS - 1] = True
    tout[2 * STEPS - 1] = tout[N - 1] = True
    final = {
        "policy": rng.normal(size=(EPISODES, 4)).astype(np.float32),
        "image": frames(order, EPISODES, seed=2),
    }
    return Dataset(
        obs,
        rng.uniform(-1, 1, size=(N, 2)).astype(np.float32),
        rng.normal(size=N).astype(np.float32),
        term,
        tout,
        final_observations=final,
        **kwargs,
    )


@pytest.mark.parametrize("order", ["HWC", "CHW"])
@pytest.mark.parametrize(("compression", "level"), [("gzip", 4), ("gzip", 1), ("lzf", None)])
def test_robolearn_round_trip_is_bit_exact_chunked_and_compressed(tmp_path, order, compression, level):
    ds = image_dataset(order, image_layouts={"image": ImageLayout(frames(order).shape[1:], order, "rgb")})
    assert ds.observations["image"].dtype == torch.uint8  # never converted to float
    path = ds.save(tmp_path / "img.h5", compression=compression, compression_level=level)
    frame = (SIDE, SIDE, 3) if order == "HWC" else (3, SIDE, SIDE)
    with h5py.File(path, "r") as f:
        for key, rows in (("observations/image", N), ("final_observations/image", EPISODES)):
            node = f[key]
            assert node.dtype == np.uint8 and node.shape == (rows, *frame)
            assert node.chunks == (formats_mod.IMAGE_CHUNK_FRAMES, *frame)  # whole frames per chunk
            assert node.compression == compression
            assert node.compression_opts == level
            assert not node.shuffle  # one-byte elements: shuffling would only cost time
            assert json.loads(node.attrs["image_layout"]) == {
                "shape": list(frame),
                "layout": order,
                "color": "rgb",
                "dtype": "uint8",
            }
    assert inspect_robolearn(path).image_layouts == {"image": ImageLayout(frame, order, "rgb")}
    for lazy in (False, True):
        back = Dataset.load(path, lazy_images=lazy)
        image = back.observations["image"]
        image = image.materialize() if lazy else image
        assert image.dtype == torch.uint8 and torch.equal(image, ds.observations["image"])
        assert torch.equal(back.final_observations["image"], ds.final_observations["image"])
        assert torch.equal(back.observations["policy"], ds.observations["policy"])
        assert back.image_layouts == ds.image_layouts
    assert [p.name for p in tmp_path.iterdir()] == ["img.h5"]  # no staging file left


def test_image_chunk_frames_option(tmp_path):
    ds = image_dataset()
    path = ds.save(tmp_path / "img.h5", compression="gzip", compression_level=6, image_chunk_frames=16)
    with h5py.File(path, "r") as f:
        assert f["observations/image"].chunks == (16, SIDE, SIDE, 3)
        assert f["final_observations/image"].chunks == (
            EPISODES,
            SIDE,
            SIDE,
            3,
        )  # never more rows than stored
    lazy = Dataset.load(path, lazy_images=True)
    idx = torch.tensor([17, 40, 3, 59])
    assert torch.equal(lazy.observations["image"][idx], ds.observations["image"][idx])
    with pytest.raises(DatasetError, match=r"image_chunk_frames: expected an integer >= 1, got 0"):
        ds.save(tmp_path / "other.h5", image_chunk_frames=0)


def test_layouts_are_inferred_or_declared():
    assert image_dataset("HWC").image_layouts == {"image": ImageLayout((SIDE, SIDE, 3), "HWC")}
    assert image_dataset("CHW").image_layouts == {"image": ImageLayout((3, SIDE, SIDE), "CHW")}
    layout = image_dataset("HWC", image_layouts={"image": "HWC"}).image_layouts["image"]
    assert (layout.height, layout.width, layout.num_channels) == (SIDE, SIDE, 3)
    chw = ImageLayout((3, 16, 8), "CHW", "bgr")
    assert (chw.height, chw.width, chw.num_channels) == (16, 8, 3)
    assert ImageLayout.from_dict(chw.to_dict()) == chw
    assert ImageLayout.infer((4, 4, 4)).layout == "HWC"  # a tie is channels-last
    assert ImageLayout((SIDE, SIDE, 9), "HWC", "rgb").frames == 3  # three stacked RGB frames
    assert ImageLayout((SIDE, SIDE, 3)).frames is None  # colour not declared
    with pytest.raises(
        DatasetError, match=r"color: 3 channels are not whole 'rgba' frames \(4 channels each\)"
    ):
        ImageLayout((SIDE, SIDE, 3), "HWC", "rgba")
    with pytest.raises(DatasetError, match=r"color: expected one of .* got 'RGB'"):
        ImageLayout((SIDE, SIDE, 3), "HWC", "RGB")
    with pytest.raises(DatasetError, match=r"image layout: expected one of \['HWC', 'CHW'\], got 'WHC'"):
        ImageLayout((SIDE, SIDE, 3), "WHC")


def _spy_reads(monkeypatch) -> list[tuple[str, int]]:
    """Record every row h5py reads from an image array, as (array name, row)."""
    reads: list[tuple[str, int]] = []
    original = h5py.Dataset.__getitem__

    def spy(self, args, new_dtype=None):
        if self.name.endswith("/image"):
            n = self.shape[0]
            key = args[0] if isinstance(args, tuple) and args else args
            if args == () or args is Ellipsis:
                rows = range(n)  # a whole-array read, obj[()]
            elif isinstance(key, slice):
                rows = range(*key.indices(n))
            else:
                rows = np.atleast_1d(np.arange(n)[key]).tolist()
            reads.extend((self.name, int(r)) for r in rows)
        return original(self, args, new_dtype=new_dtype)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    return reads


def test_lazy_batch_reads_only_its_own_frames(tmp_path, monkeypatch):
    ds = image_dataset()
    path = ds.save(tmp_path / "img.h5")
    reads = _spy_reads(monkeypatch)
    lazy = Dataset.load(path, lazy_images=True)
    source = lazy.observations["image"]
    assert isinstance(source, HDF5Frames)
    # Loading read the E final frames (kept in memory) and not one row of the [N] frames.
    assert sorted(r for name, r in reads if name == "/final_observations/image") == list(range(EPISODES))
    assert not [r for name, r in reads if name == "/observations/image"]
    reads.clear()

    batch = lazy.sample(8, torch.Generator().manual_seed(3))
    idx = batch.extras["index"]
    following = (idx + 1).clamp(max=N - 1)
    rows = [r for name, r in reads if name == "/observations/image"]
    # Exactly the batch's frames and the frames after them (next observations), each once per request.
    assert sorted(rows) == sorted([*set(idx.tolist()), *set(following.tolist())])
    assert len(rows) <= 16 < N and source.frames_read == len(rows)
    eager = ds.gather(idx)
    assert torch.equal(batch.obs["image"], eager.obs["image"])
    assert torch.equal(batch.next_obs["image"], eager.next_obs["image"])  # final frames at episode ends

    windows = lazy.gather_windows(torch.tensor([0, STEPS - 2]), 4)
    assert torch.equal(windows.obs["image"], ds.gather_windows(torch.tensor([0, STEPS - 2]), 4).obs["image"])


def test_file_without_layout_attributes_reads_eagerly_and_lazily(tmp_path):
    # A file written before layouts were recorded: the layout is inferred, frames still read lazily.
    ds = image_dataset("CHW")
    path = ds.save(tmp_path / "old.h5")
    with h5py.File(path, "r+") as f:
        for key in ("observations/image", "final_observations/image"):
            del f[key].attrs["image_layout"]
    assert inspect_robolearn(path).image_layouts == {}
    for lazy in (False, True):
        back = Dataset.load(path, lazy_images=lazy)
        assert back.image_layouts == {"image": ImageLayout((3, SIDE, SIDE), "CHW")}
        assert isinstance(back.observations["image"], HDF5Frames) == lazy
        idx = torch.tensor([0, 33, 59])
        assert torch.equal(back.observations["image"][idx], ds.observations["image"][idx])


def test_frame_source_indexing_and_pickling(tmp_path):
    ds = image_dataset()
    path = ds.save(tmp_path / "img.h5", compression="lzf")
    src = Dataset.load(path, lazy_images=True).observations["image"]
    full = ds.observations["image"]
    assert torch.equal(src[5], full[5]) and torch.equal(src[-1], full[-1])
    assert torch.equal(src[3:9], full[3:9]) and torch.equal(src[50::-7], full.flip(0)[N - 1 - 50 :: 7])
    idx = torch.tensor([[7, 7, 0], [N - 1, 2, 7]])
    before = src.frames_read
    assert torch.equal(src[idx], full[idx]) and src.frames_read - before == 4  # distinct rows read once
    with pytest.raises(IndexError, match="out of range for 60 frames"):
        src[torch.tensor([N])]
    with pytest.raises(IndexError, match="index -61 out of range for 60 frames"):
        src[-N - 1]
    src[0]  # opens the file; a pickled copy (a data-loader worker) opens its own
    clone = pickle.loads(pickle.dumps(src))
    assert torch.equal(clone[torch.tensor([1, 2])], full[1:3])
    src.close()
    clone.close()
    path.unlink()
    with pytest.raises(
        DatasetError,
        match=r"observations/image: frames are read on demand from .*img.h5, which cannot be opened",
    ):
        src[0]


@pytest.mark.parametrize("order", ["HWC", "CHW"])
def test_minari_round_trip_of_images(tmp_path, monkeypatch, order):
    minari = pytest.importorskip("minari")
    ds = image_dataset(order, image_layouts={"image": ImageLayout(frames(order).shape[1:], order, "rgb")})
    root = tmp_path / "minari"
    # From lazily read frames, so the export streams episode by episode.
    lazy = Dataset.load(ds.save(tmp_path / "img.h5"), lazy_images=True)
    export_minari(lazy, "robolearn/pixels/test-v0", root=root)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    m = minari.load_dataset("robolearn/pixels/test-v0")
    space = m.observation_space["image"]
    assert space.dtype == np.uint8 and space.shape == tuple(frames(order).shape[1:])
    first = next(iter(m.iterate_episodes())).observations["image"]
    assert first.dtype == np.uint8 and first.shape == (STEPS + 1, *space.shape)
    np.testing.assert_array_equal(first[:-1], ds.observations["image"][:STEPS].numpy())
    back = read_minari("robolearn/pixels/test-v0")
    assert torch.equal(back.observations["image"], ds.observations["image"])
    assert torch.equal(back.final_observations["image"], ds.final_observations["image"])
    assert back.image_layouts == ds.image_layouts


def test_minari_made_jpeg_images_are_flagged_lossy(tmp_path, monkeypatch):
    minari = pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    from minari.data_collector.episode_buffer import EpisodeBuffer

    # Smooth frames, as JPEG is meant for; Minari's default encoding is JPEG (lossy).
    ramp = np.linspace(0, 255, SIDE, dtype=np.float32)
    smooth = np.stack([np.broadcast_to(ramp, (SIDE, SIDE))] * 3, -1)
    obs = np.stack([np.roll(smooth, t, axis=1) for t in range(5)]).astype(np.uint8)
    buf = EpisodeBuffer(
        id=0,
        observations=obs,
        actions=np.zeros((4, 1), np.float32),
        rewards=np.zeros(4),
        terminations=np.array([False, False, False, True]),
        truncations=np.zeros(4, bool),
    )
    space = gymnasium.spaces.Box(0, 255, (SIDE, SIDE, 3), np.uint8)
    act_space = gymnasium.spaces.Box(-1, 1, (1,), np.float32)
    with pytest.warns(UserWarning):  # no env spec given
        minari.create_dataset_from_buffers(
            "test/pixels/jpeg-v0", [buf], observation_space=space, action_space=act_space, algorithm_name="x"
        )
    ds = read_minari("test/pixels/jpeg-v0")
    assert ds.metadata.extra["minari"]["jpeg_encoding"] is True
    assert ds.image_layouts == {
        "policy": ImageLayout((SIDE, SIDE, 3), "HWC")
    }  # a Box space is the policy group
    got = ds.observations["policy"]
    assert got.dtype == torch.uint8 and got.shape == (4, SIDE, SIDE, 3)
    assert np.abs(got.numpy().astype(int) - obs[:4].astype(int)).mean() < 8  # close, not necessarily equal


def test_bad_image_groups_are_named():
    ok = image_dataset()
    obs = {"policy": ok.observations["policy"], "image": ok.observations["image"].float()}
    args = (ok.actions, ok.rewards, ok.terminals, ok.timeouts)
    with pytest.raises(
        DatasetError, match=r"observations/image: an image group must be uint8 .* got torch.float32"
    ):
        Dataset(obs, *args, final_observations={k: v[:EPISODES] for k, v in obs.items()})
    flat = {"policy": obs["policy"], "image": ok.observations["image"][..., 0]}
    with pytest.raises(
        DatasetError, match=r"observations/image: an image group holds frames .* got shape \(60, 32, 32\)"
    ):
        Dataset(flat, *args, final_observations={k: v[:EPISODES] for k, v in flat.items()})
    bad_final = {"policy": ok.final_observations["policy"], "image": ok.final_observations["image"][:, :16]}
    with pytest.raises(DatasetError, match=r"final_observations/image: expected rows of shape \(32, 32, 3\)"):
        Dataset(ok.observations, *args, final_observations=bad_final)
    with pytest.raises(
        DatasetError, match=r"observations/image: frames of shape \(32, 32, 3\) do not match .* \(3, 32, 32\)"
    ):
        image_dataset(image_layouts={"image": ImageLayout((3, SIDE, SIDE), "CHW")})
    with pytest.raises(DatasetError, match=r"observations/policy: an image group must be uint8"):
        image_dataset(image_layouts={"policy": "HWC"})
    episodes = [
        {
            "observations": {"policy": np.zeros((3, 1), np.float32), "image": frames(n=3)},
            "actions": np.zeros((2, 1)),
            "rewards": np.zeros(2),
        },
        {
            "observations": {"policy": np.zeros((3, 1), np.float32), "image": frames(n=3)[:, :8]},
            "actions": np.zeros((2, 1)),
            "rewards": np.zeros(2),
        },
    ]
    with pytest.raises(DatasetError, match=r"observations/image: episodes disagree in shape"):
        Dataset.from_episodes(episodes)


def test_writer_checks_images_before_creating_a_file(tmp_path):
    ds = image_dataset()
    ds.observations["image"] = ds.observations["image"].float()  # replaced after validation
    with pytest.raises(DatasetError, match=r"observations/image: an image group must be uint8"):
        ds.save(tmp_path / "img.h5")
    ds = image_dataset()
    ds.final_observations["image"] = ds.final_observations["image"][:, :, :16]
    with pytest.raises(
        DatasetError, match=r"final_observations/image: frames of shape \(32, 16, 3\) do not match"
    ):
        ds.save(tmp_path / "img.h5")
    assert list(tmp_path.iterdir()) == []  # neither the file nor a staging file


def test_d4rl_refuses_images(tmp_path):
    path = tmp_path / "pixels.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = frames()
        f["actions"] = np.zeros((N, 2), np.float32)
        f["rewards"] = np.zeros(N, np.float32)
        f["terminals"] = np.zeros(N, bool)
        f["timeouts"] = np.r_[np.zeros(N - 1, bool), True]
    with pytest.raises(
        DatasetError,
        match=r"observations: .* uint8 frames of shape \(60, 32, 32, 3\); images are not part of the D4RL",
    ):
        read_d4rl(path)
