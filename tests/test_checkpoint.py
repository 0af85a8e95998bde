"""Checkpoints: atomic save, weights_only load, RNG state, rotation, clear errors."""

from __future__ import annotations

import logging
import random
import traceback
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch

from robolearn.runners import (
    CheckpointError,
    CheckpointManager,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from robolearn.runners.checkpoint import content_digest


def _draws():
    return (torch.rand(4), np.random.rand(4), np.random.randn(3), [random.random() for _ in range(4)],
            random.gauss(0.0, 1.0))


def _state(value: float = 1.0) -> dict:
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters())
    net(torch.randn(5, 3)).sum().backward()
    opt.step()
    return {
        "model": net.state_dict(),
        "optim": opt.state_dict(),
        "step": 123,
        "nested": {"x": torch.full((2, 2), value), "items": [1, 2.5, "s", None, (True, torch.int64)]},
        "ordered": OrderedDict(a=torch.arange(3)),
    }


def _assert_equal(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for key in a:
            _assert_equal(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_equal(x, y)
    else:
        assert a == b


def test_round_trip_with_rng_states(tmp_path):
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    np.random.randn()  # leaves a cached Gaussian in NumPy's state
    random.gauss(0.0, 1.0)  # and one in random's
    state = _state()
    state["rng"] = rng_state()
    path = save_checkpoint(tmp_path / "a.pt", state)
    expected = _draws()

    loaded = load_checkpoint(path)
    _assert_equal(state, loaded)
    _draws()  # move every generator on, so restoring must actually rewind them
    set_rng_state(loaded["rng"])
    got = _draws()
    assert torch.equal(expected[0], got[0])
    np.testing.assert_array_equal(expected[1], got[1])
    np.testing.assert_array_equal(expected[2], got[2])
    assert expected[3:] == got[3:]


def test_crash_mid_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path)
    first = manager.save(_state(1.0), step=1)
    real_save = torch.save

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(OSError, match="disk full"):
        manager.save(_state(2.0), step=2)
    monkeypatch.setattr(torch, "save", real_save)

    assert not manager.path_for(2).exists()
    assert sorted(p.name for p in manager.dir.iterdir()) == ["ckpt_000001.pt", "latest"]
    assert manager.latest() == first
    assert torch.equal(manager.load_latest()["nested"]["x"], torch.full((2, 2), 1.0))


def test_stale_temp_files_are_removed(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / ".ckpt_000005.pt.0123456789ab.tmp").write_bytes(b"half")
    CheckpointManager(tmp_path)
    assert not list(folder.iterdir())


def test_pruning_keeps_newest_and_latest_pointer(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    assert manager.latest() is None and manager.load_latest() is None
    for step in (5, 10, 1500000, 20):
        manager.save({"step": step}, step=step)
    # 1500000 has more than six digits: order is numeric, not by name.
    assert [p.name for p in manager.checkpoints()] == ["ckpt_000020.pt", "ckpt_1500000.pt"]
    assert manager.latest() == manager.path_for(20)  # the last one written, even if not the highest
    assert (manager.dir / "latest").read_text() == "ckpt_000020.pt\n"
    assert manager.load_latest() == {"step": 20}

    (manager.dir / "latest").write_text("ckpt_000999.pt\n")  # names a file that is gone
    assert manager.latest() == manager.path_for(1500000)

    keep_all = CheckpointManager(tmp_path / "all", keep=None)
    for step in range(5):
        keep_all.save({"step": step}, step=step)
    assert len(keep_all.checkpoints()) == 5
    with pytest.raises(ValueError, match="keep"):
        CheckpointManager(tmp_path, keep=0)


def test_corrupt_or_truncated_file_names_the_file(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt.pt", _state())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"ckpt\.pt: corrupt or truncated"):
        load_checkpoint(path)
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"ckpt\.pt: corrupt or truncated"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"missing\.pt: no such file"):
        load_checkpoint(tmp_path / "missing.pt")


class Payload:
    """An arbitrary class: unpickling it would run code of the file's choosing."""


def test_weights_only_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"x": Payload()}, path)  # written behind save_checkpoint's back
    with pytest.raises(CheckpointError, match=r"evil\.pt: holds .*Payload, an object that robolearn does not load") as info:
        load_checkpoint(path)
    # Our own message only: torch's (chained) advice to load the file with weights_only=False is
    # what a user would copy, and it runs the file's code.
    shown = "".join(traceback.format_exception(info.value))
    assert "weights_only=False" not in shown and "trust" not in shown
    assert info.value.__cause__ is None and info.value.__suppress_context__


def _rewrite_member(path, pick, change):
    """Copy the zip at ``path`` with ``change(bytes)`` applied to the first member ``pick`` selects."""
    src = zipfile.ZipFile(path)
    members = [(info, src.read(info.filename)) for info in src.infolist()]
    src.close()
    done = False
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as dst:
        for info, data in members:
            if not done and pick(info.filename):
                data, done = change(data), True
            dst.writestr(info, data)
    assert done


def test_content_digest_refuses_a_file_changed_after_writing(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt.pt", {"w": torch.arange(8, dtype=torch.float32), "step": 3})
    assert set(load_checkpoint(path)) == {"w", "step"}  # the digest is not part of the state given back
    # One tensor byte changed, zip intact (new CRCs): torch loads it, the digest must not match.
    _rewrite_member(path, lambda name: "/data/" in name and not name.endswith(".pkl"),
                    lambda data: bytes([data[0] ^ 0xFF]) + data[1:])
    loaded = torch.load(path, weights_only=True)
    assert not torch.equal(loaded["w"], torch.arange(8, dtype=torch.float32))  # the change is real
    with pytest.raises(CheckpointError, match=r"ckpt\.pt: content digest mismatch"):
        load_checkpoint(path)


def test_content_digest_sees_structure_dtype_and_values():
    base = {"a": torch.zeros(2), "b": [1, 2]}
    digest = content_digest(base)
    assert content_digest({"a": torch.zeros(2), "b": [1, 2]}) == digest
    for other in ({"a": torch.zeros(2), "b": (1, 2)}, {"a": torch.zeros(2, dtype=torch.float64), "b": [1, 2]},
                  {"a": torch.zeros(1, 2), "b": [1, 2]}, {"a": torch.tensor([0.0, 1e-30]), "b": [1, 2]},
                  {"b": [1, 2], "a": torch.zeros(2)}, {"a": torch.zeros(2), "b": [1, "2"]}):
        assert content_digest(other) != digest, other


def test_a_truncated_latest_checkpoint_falls_back_to_the_newest_readable(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep=None)
    for step in (1, 2, 3):
        manager.save({"step": step}, step=step)
    latest = manager.latest()
    latest.write_bytes(latest.read_bytes()[:100])  # a kill mid-copy, a full disk
    with caplog.at_level(logging.WARNING, logger="robolearn.runners.checkpoint"):
        path, state = manager.load_newest_readable()
    assert path == manager.path_for(2) and state == {"step": 2}
    assert "ckpt_000003.pt: corrupt or truncated" in caplog.text and "ckpt_000002.pt" in caplog.text
    manager.path_for(2).write_bytes(b"")
    assert manager.load_latest() == {"step": 1}
    manager.path_for(1).write_bytes(b"junk")
    with pytest.raises(CheckpointError, match=r"no readable checkpoint in .*ckpt_000003.*ckpt_000002.*ckpt_000001"):
        manager.load_latest()


def test_a_manager_that_only_looks_creates_nothing(tmp_path):
    manager = CheckpointManager(tmp_path / "run")
    assert manager.latest() is None and manager.checkpoints() == [] and manager.load_latest() is None
    assert not (tmp_path / "run").exists()


def test_save_refuses_what_could_not_be_loaded(tmp_path):
    with pytest.raises(TypeError, match=r"state\['algo'\]\['lr'\]: numpy.float64"):
        save_checkpoint(tmp_path / "a.pt", {"algo": {"lr": np.float64(3e-4)}})
    with pytest.raises(TypeError, match=r"state\['obj'\]: .*Payload"):
        save_checkpoint(tmp_path / "a.pt", {"obj": Payload()})
    assert not list(tmp_path.iterdir())
