"""Logger facade (TensorBoard, metrics.csv, progress bar, W&B) and learning-curve plots."""

from __future__ import annotations

import csv
import logging
import sys
import types

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from robolearn.logging import Logger, plot_learning_curve


def _rows(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_tensorboard_scalars_round_trip(tmp_path):
    with Logger(tmp_path, csv=False, console=False) as logger:
        logger.log({"train/loss": torch.tensor(0.25), "train/return": 3.5}, step=10)
        logger.log({"train/loss": torch.tensor(0.125)}, step=20)
    files = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"train/loss", "train/return"}
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(10, 0.25), (20, 0.125)]
    assert [(e.step, e.value) for e in acc.Scalars("train/return")] == [(10, 3.5)]


def test_csv_round_trip_with_a_key_that_appears_later(tmp_path):
    with Logger(tmp_path, tensorboard=False, console=False) as logger:
        out = logger.log({"env_steps": 100, "train/loss": torch.tensor(0.5, dtype=torch.float64)}, step=1)
        assert out == {"env_steps": 100.0, "train/loss": 0.5}
        logger.log({"env_steps": 200, "train/loss": torch.tensor(0.25), "eval/return": 12.0}, step=2)
        logger.log({"env_steps": 300, "train/loss": 1 / 3}, step=3)
    path = tmp_path / "metrics.csv"
    assert path.read_text().splitlines()[0] == "step,env_steps,train/loss,eval/return"
    rows = _rows(path)
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    assert [r["env_steps"] for r in rows] == ["100.0", "200.0", "300.0"]
    assert float(rows[2]["train/loss"]) == 1 / 3  # repr keeps floats exact
    assert [r["eval/return"] for r in rows] == ["", "12.0", ""]
    assert not list(tmp_path.glob(".*.tmp"))


def test_csv_resumes_columns_and_drops_a_torn_row(tmp_path):
    with Logger(tmp_path, tensorboard=False, console=False) as logger:
        logger.log({"a": 1.0}, step=1)
    path = tmp_path / "metrics.csv"
    with path.open("a") as f:
        f.write("2,0.")  # a crash mid-row
    with Logger(tmp_path, tensorboard=False, console=False) as logger:
        logger.log({"a": 3.0, "b": 4.0}, step=3)
    assert path.read_text().splitlines() == ["step,a,b", "1,1.0,", "3,3.0,4.0"]


def test_tensor_values_must_be_scalars(tmp_path):
    with Logger(tmp_path, tensorboard=False, console=False) as logger:
        with pytest.raises(ValueError, match=r"metrics\['x'\].*shape \(2,\)"):
            logger.log({"x": torch.zeros(2)}, step=0)
        with pytest.raises(ValueError, match="reserved"):
            logger.log({"step": 1.0}, step=0)


def test_progress_bar_and_close(tmp_path):
    logger = Logger(tmp_path, total=100, progress_keys=("train/return",))
    logger.log({"train/return": 7.0}, step=40)
    logger.progress(60, fps=123.0)
    assert logger._bar is not None and logger._bar.n == 60
    assert logger._bar.postfix is not None and "train/return" in logger._bar.postfix
    logger.close()
    logger.close()  # idempotent
    assert logger._csv is not None and logger._csv.file.closed
    with pytest.raises(RuntimeError, match="closed"):
        logger.log({"x": 1.0}, step=61)


def test_wandb_missing_warns_and_present_is_used(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` raise ImportError
    with caplog.at_level(logging.WARNING, logger="robolearn.logging.logger"):
        with Logger(tmp_path / "a", tensorboard=False, csv=False, console=False, wandb=True) as logger:
            logger.log({"x": 1.0}, step=0)
    assert "wandb package is not installed" in caplog.text

    calls = []

    class FakeRun:
        def log(self, values, step):
            calls.append(("log", values, step))

        def finish(self):
            calls.append(("finish",))

    def init(**kwargs):
        calls.append(("init", kwargs))
        return FakeRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    with Logger(tmp_path / "b", tensorboard=False, csv=False, console=False, wandb={"project": "p"}) as logger:
        logger.log({"x": torch.tensor(2.0)}, step=5)
    assert calls[0][0] == "init"
    assert calls[0][1]["mode"] == "offline" and calls[0][1]["project"] == "p"
    assert calls[1:] == [("log", {"x": 2.0}, 5), ("finish",)]


def test_plot_learning_curve_writes_png(tmp_path):
    with Logger(tmp_path, tensorboard=False, console=False) as logger:
        for i in range(5):
            metrics = {"env_steps": 1000 * i, "train/return": float(i)}
            if i % 2 == 0:
                metrics["eval/return"] = 2.0 * i
            logger.log(metrics, step=i)
    out = plot_learning_curve(tmp_path / "metrics.csv", tmp_path / "plots" / "curve.png",
                              y=("eval/return", "train/return"))
    assert out == tmp_path / "plots" / "curve.png"
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    assert not list(out.parent.glob(".*.tmp"))


def test_plot_learning_curve_missing_column(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,env_steps,train/return\n1,10,0.5\n")
    with pytest.raises(ValueError, match=r"no column 'eval/return'.*'step', 'env_steps', 'train/return'"):
        plot_learning_curve(path, tmp_path / "out.png")
    assert not (tmp_path / "out.png").exists()


def test_plot_learning_curve_skips_missing_columns_when_asked(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,env_steps,eval/return\n1,10,0.5\n2,20,0.7\n")
    out = plot_learning_curve(path, tmp_path / "out.png", y=("eval/return", "train/return"), skip_missing=True)
    assert out.read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match=r"none of the columns \['train/return'\] exists"):
        plot_learning_curve(path, tmp_path / "none.png", y=("train/return",), skip_missing=True)
    assert not (tmp_path / "none.png").exists()


def test_progress_bar_counts_in_the_given_unit(tmp_path):
    with Logger(tmp_path, tensorboard=False, csv=False, total=10, unit="grad_steps") as logger:
        assert logger._bar is not None and logger._bar.unit == "grad_steps"
