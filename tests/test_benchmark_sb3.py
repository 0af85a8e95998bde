"""The SB3 side of the benchmark table: Zoo translation, the runner's run directory, evaluation
wiring and resume (robolearn.benchmark.sb3_zoo, robolearn.benchmark.sb3_run).

Runs are tiny (Reacher: 50-step episodes; a few hundred env steps) so the file stays fast.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch import nn

from robolearn.analysis.runs import load_run
from robolearn.benchmark import sb3_run, sb3_zoo
from robolearn.benchmark.sb3_zoo import LinearSchedule, ZooError, parse_python_literal, translate

HOPPER_PPO = {  # rl-baselines3-zoo hyperparams/ppo.yml, Hopper-v4 (as YAML loads it)
    "normalize": True,
    "n_envs": 1,
    "policy": "MlpPolicy",
    "n_timesteps": 1e6,
    "batch_size": 32,
    "n_steps": 512,
    "gamma": 0.999,
    "learning_rate": 9.80828e-05,
    "ent_coef": 0.00229519,
    "clip_range": 0.2,
    "n_epochs": 5,
    "gae_lambda": 0.99,
    "max_grad_norm": 0.7,
    "vf_coef": 0.835671,
    "policy_kwargs": "dict(\n log_std_init=-2,\n ortho_init=False,\n activation_fn=nn.ReLU,\n"
    " net_arch=dict(pi=[256, 256], vf=[256, 256])\n )",
}


# -- the Zoo translation ----------------------------------------------------------------------
def test_linear_schedules_against_hand_values() -> None:
    kw = translate("ppo", {"learning_rate": "lin_0.001", "clip_range": "lin_0.2", "clip_range_vf": 0.5}).kwargs
    lr, clip = kw["learning_rate"], kw["clip_range"]
    assert isinstance(lr, LinearSchedule)
    assert [lr(p) for p in (1.0, 0.5, 0.0)] == pytest.approx([1e-3, 5e-4, 0.0], abs=1e-15)
    assert [clip(p) for p in (1.0, 0.5, 0.0)] == pytest.approx([0.2, 0.1, 0.0], abs=1e-15)
    assert kw["clip_range_vf"] == 0.5 and isinstance(kw["clip_range_vf"], float)
    assert str(lr) == "lin_0.001"
    with pytest.raises(ZooError, match="learning_rate.*lin_<number>"):
        translate("ppo", {"learning_rate": "cosine_0.1"})
    with pytest.raises(ZooError, match="clip_range"):
        translate("ppo", {"clip_range": "lin_abc"})


def test_zoo_hopper_block_translates_to_sb3_kwargs() -> None:
    tr = translate("ppo", HOPPER_PPO)
    assert tr.n_envs == 1 and tr.n_timesteps == 1e6
    assert tr.normalize == {"gamma": 0.999}  # obs and reward (VecNormalize defaults) with the PPO gamma
    assert set(tr.kwargs) == set(HOPPER_PPO) - {"normalize", "n_envs", "policy", "n_timesteps"}
    assert tr.kwargs["n_steps"] == 512 and tr.kwargs["learning_rate"] == 9.80828e-05
    pk = tr.kwargs["policy_kwargs"]
    assert pk == {
        "log_std_init": -2, "ortho_init": False, "activation_fn": nn.ReLU,
        "net_arch": {"pi": [256, 256], "vf": [256, 256]},
    }
    assert tr.described["policy_kwargs"]["activation_fn"] == "nn.ReLU"
    json.dumps(tr.described)  # config.json must be able to hold it
    # The result is what SB3 itself accepts.
    sb3_zoo.sb3_class("ppo")  # importable
    assert set(tr.kwargs) <= sb3_zoo.constructor_params("ppo")


def test_sac_block_train_freq_ints_and_normalize_forms() -> None:
    tr = translate("sac", {
        "buffer_size": 3e5, "learning_starts": 1e4, "train_freq": [1, "episode"], "gradient_steps": -1,
        "ent_coef": "auto_0.1", "use_sde": True, "normalize": "dict(norm_obs=True, norm_reward=False)",
        "policy_kwargs": "dict(log_std_init=-3.67, net_arch=[64, 64])",
    })
    assert tr.kwargs["buffer_size"] == 300000 and isinstance(tr.kwargs["buffer_size"], int)
    assert tr.kwargs["learning_starts"] == 10000 and tr.kwargs["train_freq"] == (1, "episode")
    assert tr.kwargs["ent_coef"] == "auto_0.1" and tr.kwargs["use_sde"] is True
    assert tr.kwargs["policy_kwargs"] == {"log_std_init": -3.67, "net_arch": [64, 64]}
    assert tr.normalize == {"norm_obs": True, "norm_reward": False}
    assert translate("sac", {"normalize": False}).normalize is None


def test_parser_reads_zoo_forms() -> None:
    assert parse_python_literal("dict(a=[1, -2.5], b=(3,), c={'x': None}, d=True, e='s', f=nn.Tanh)") == {
        "a": [1, -2.5], "b": (3,), "c": {"x": None}, "d": True, "e": "s", "f": nn.Tanh,
    }


@pytest.mark.parametrize(
    "code",
    [
        "__import__('os').system('echo hi')",
        "dict(a=__import__('os'))",
        "dict(activation_fn=nn.Module)",
        "os.system('ls')",
        "dict(a=open('/etc/passwd').read())",
        "(lambda: 1)()",
        "dict(**{'a': 1})",
        "[x for x in range(3)]",
        "dict(a=1 + 2)",
        "nn.ReLU.__subclasses__",
    ],
)
def test_parser_rejects_code(code: str) -> None:
    with pytest.raises(ZooError, match="policy_kwargs"):
        translate("ppo", {"policy_kwargs": code})


def test_translation_errors_name_the_field() -> None:
    with pytest.raises(ZooError, match=r"kwargs\.n_stepz.*not an argument of stable_baselines3\.PPO"):
        translate("ppo", {"n_stepz": 5})
    with pytest.raises(ZooError, match=r"kwargs\.buffer_size.*not an argument"):
        translate("ppo", {"buffer_size": 5})  # a SAC argument given to PPO
    with pytest.raises(ZooError, match=r"kwargs\.n_steps: expected an integer, got 1.5"):
        translate("ppo", {"n_steps": 1.5})
    with pytest.raises(ZooError, match=r"kwargs\.env_wrapper: not supported"):
        translate("ppo", {"env_wrapper": "gymnasium.wrappers.TimeLimit"})
    with pytest.raises(ZooError, match=r"kwargs\.policy: only 'MlpPolicy'"):
        translate("ppo", {"policy": "CnnPolicy"})
    with pytest.raises(ZooError, match=r"activation_fn: expected one of"):
        translate("ppo", {"policy_kwargs": {"activation_fn": "nn.Linear"}})
    with pytest.raises(ZooError, match="algo: expected one of ppo, sac"):
        translate("dqn", {})


# -- the runner ---------------------------------------------------------------------------------
PPO_TINY = {"n_steps": 64, "batch_size": 64, "n_epochs": 1, "policy_kwargs": "dict(net_arch=[16])"}
SAC_TINY = {
    "learning_starts": 40, "batch_size": 16, "buffer_size": 1000, "train_freq": 1, "gradient_steps": 1,
    "policy_kwargs": "dict(net_arch=[16])",
}


def _argv(out: Path, algo: str, kwargs: dict[str, Any], steps: int, every: int, *extra: str) -> list[str]:
    return [
        "--task", "Reacher", "--algo", algo, "--lib", "sb3_zoo", "--seed", "3", "--env-steps", str(steps),
        "--eval-every", str(every), "--eval-episodes", "2", "--out", str(out), "--kwargs", json.dumps(kwargs),
        *extra,
    ]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_ppo_run_writes_a_run_dir_load_run_reads(tmp_path: Path) -> None:
    out = tmp_path / "hopper_ppo" / "sb3_zoo" / "seed3"
    assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 192, 128, "--normalize")) == 0
    rows = _rows(out)
    # Evaluations at the first rollout boundary (64 steps) at or past 128, then at the end (192).
    assert [int(r["step"]) for r in rows] == [128, 192]
    assert all(r["env_steps"] == str(float(r["step"])) for r in rows)
    for col in ("eval/return", "time/train_s", "time/env_steps_per_s", "eval/episode_length"):
        assert all(r[col] != "" for r in rows), col
    assert float(rows[0]["eval/episode_length"]) == 50.0  # one full Reacher episode per eval world
    curve = load_run(out, "eval/return")
    assert curve.unit == "env_steps" and list(curve.steps) == [128.0, 192.0]
    config = json.loads((out / "config.json").read_text())
    assert config["algo"] == {"name": "ppo"} and config["lib"] == "sb3_zoo" and config["seed"] == 3
    assert config["task"] == "Reacher" and config["n_envs"] == 1 and config["normalize"] == {}
    assert config["sb3_kwargs"]["policy_kwargs"] == {"net_arch": [16]} and config["sb3_version"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 192
    assert summary["final_eval_return"] == pytest.approx(float(rows[-1]["eval/return"]))
    assert summary["best_eval_return"] == pytest.approx(max(float(r["eval/return"]) for r in rows))
    assert summary["train_time_s"] == pytest.approx(float(rows[-1]["time/train_s"]))
    ckpt = out / sb3_run.CHECKPOINT
    assert {p.name for p in ckpt.iterdir()} == {"model.zip", "vecnormalize.pkl", "state.json", "metrics.csv"}
    # A finished run is left alone.
    before = (out / "metrics.csv").read_text()
    assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 192, 128, "--normalize")) == 0
    assert (out / "metrics.csv").read_text() == before


def test_eval_protocol_wiring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eval worlds seeded 10000 + seed, reset with that seed, deterministic actions, one episode
    per world, frozen obs normalisation, and evaluation time outside ``time/train_s``."""
    spec = sb3_run.parse_args(_argv(tmp_path / "r", "ppo", PPO_TINY, 128, 64, "--normalize"))
    session = sb3_run.SB3Run(spec, resume=False)
    try:
        assert session.eval_env.seed == sb3_run.EVAL_SEED_OFFSET + 3
        assert session.eval_env.num_envs == 2

        class Model:
            calls: list[bool] = []

            def predict(self, x: np.ndarray, deterministic: bool = False) -> tuple[np.ndarray, None]:
                self.calls.append(deterministic)
                assert x.shape == (2, 10)
                return np.zeros((2, 2), dtype=np.float32), None

        norm = session.norm
        count_before = norm.obs_rms.count
        first = sb3_run.evaluate(Model(), norm, session.eval_env)
        again = sb3_run.evaluate(Model(), norm, session.eval_env)
        assert Model.calls == [True] * 100  # 50 steps (the episode) per evaluation, all deterministic
        assert first == again  # the same start states each time (reset with the eval seed)
        assert norm.obs_rms.count == count_before  # frozen statistics
    finally:
        session.close()

    # Evaluations advance a fake clock by 1000 s each: none of it may reach time/train_s.
    real = sb3_run.time.perf_counter
    offset = [0.0]
    real_evaluate = sb3_run.evaluate

    def slow_evaluate(*args: Any) -> dict[str, float]:
        offset[0] += 1000.0
        return real_evaluate(*args)

    monkeypatch.setattr(sb3_run.time, "perf_counter", lambda: real() + offset[0])
    monkeypatch.setattr(sb3_run, "evaluate", slow_evaluate)
    assert sb3_run.main(_argv(tmp_path / "t", "ppo", PPO_TINY, 128, 64)) == 0
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["evaluations"] == 2
    assert summary["eval_time_s"] >= 2000.0
    assert summary["train_time_s"] < 1000.0


@pytest.mark.parametrize(("algo", "kwargs", "trains"), [("ppo", PPO_TINY, 2), ("sac", SAC_TINY, 128 - 40)])
def test_update_seconds_are_sb3s_train_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algo: str, kwargs: dict[str, Any], trains: int
) -> None:
    """``time/update_s`` is the time in SB3's ``train()`` (each call advances a fake clock by 500 s),
    the rest of ``time/train_s`` is ``collect_rollouts``: none of the 500 s may land there."""
    cls = sb3_run.sb3_class(algo)
    real_train, real = cls.train, sb3_run.time.perf_counter
    offset, calls = [0.0], [0]

    def slow_train(self: Any, *args: Any, **kw: Any) -> None:
        offset[0] += 500.0
        calls[0] += 1
        real_train(self, *args, **kw)

    monkeypatch.setattr(sb3_run.time, "perf_counter", lambda: real() + offset[0])
    monkeypatch.setattr(cls, "train", slow_train)
    out = tmp_path / algo
    assert sb3_run.main(_argv(out, algo, kwargs, 128, 64)) == 0
    # PPO trains after each 64-step rollout; SAC after every step once 40 are stored (train_freq 1).
    assert calls[0] == trains
    summary = json.loads((out / "summary.json").read_text())
    assert 500.0 * trains <= summary["update_time_s"] < 500.0 * trains + 100.0
    assert 0.0 < summary["train_time_s"] - summary["update_time_s"] < 100.0
    rows = _rows(out)
    assert float(rows[-1]["time/update_s"]) == pytest.approx(summary["update_time_s"])
    assert float(rows[0]["time/update_s"]) < float(rows[-1]["time/update_s"])


def test_sac_resume_continues_rows_counters_and_replay_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "sac"
    argv = _argv(out, "sac", SAC_TINY, 150, 50)
    real_checkpoint = sb3_run.SB3Run.checkpoint
    saved: list[dict[str, Any]] = []

    def crash_on_third(self: sb3_run.SB3Run) -> None:
        if len(saved) == 2:  # the third evaluation's row is logged, its checkpoint never written
            raise RuntimeError("simulated crash")
        real_checkpoint(self)
        saved.append(json.loads((self.ckpt / "state.json").read_text()))

    monkeypatch.setattr(sb3_run.SB3Run, "checkpoint", crash_on_third)
    with pytest.raises(RuntimeError, match="simulated crash"):
        sb3_run.main(argv)
    assert [int(r["step"]) for r in _rows(out)] == [50, 100, 150]  # the torn evaluation's row is there
    assert not (out / "summary.json").exists()
    assert [s["replay_size"] for s in saved] == [50, 100]
    monkeypatch.setattr(sb3_run.SB3Run, "checkpoint", real_checkpoint)

    loaded: list[int] = []
    real_init = sb3_run.SB3Run.__init__

    def spy_init(self: sb3_run.SB3Run, spec: sb3_run.RunSpec, resume: bool) -> None:
        real_init(self, spec, resume)
        loaded.append(int(self.model.replay_buffer.size()) if resume else -1)
        assert self.counters.train_s == pytest.approx(saved[-1]["train_s"])
        assert self.counters.collect_s == pytest.approx(saved[-1]["collect_s"])  # the profile carries over

    monkeypatch.setattr(sb3_run.SB3Run, "__init__", spy_init)
    assert sb3_run.main(argv) == 0
    assert loaded == [100]  # resumed, with the checkpoint's replay buffer
    rows = _rows(out)
    assert [int(r["step"]) for r in rows] == [50, 100, 150]  # the torn row replaced, not repeated
    train_s = [float(r["time/train_s"]) for r in rows]
    assert train_s[1] == pytest.approx(saved[-1]["train_s"]) and train_s[2] > train_s[1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 150 and summary["evaluations"] == 3
    state = json.loads((out / sb3_run.CHECKPOINT / "state.json").read_text())
    assert state["replay_size"] == 150 and state["env_steps"] == 150
    assert math.isfinite(summary["final_eval_return"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--algo": "dqn"}, "--algo: expected ppo or sac"),
        ({"--lib": "sb3"}, "--lib: expected one of sb3_default, sb3_zoo"),
        ({"--task": "Hoper"}, "--task: unknown task 'Hoper'"),
        ({"--env-steps": "0"}, "--env-steps: expected an integer >= 1"),
        ({"--kwargs": "{not json"}, "--kwargs: not JSON"),
        ({"--kwargs": '{"policy_kwargs": "__import__(\\"os\\")"}'}, "policy_kwargs"),
        ({"--kwargs": '{"n_envs": 4}', "--n-envs": "2"}, "--n-envs: 2 contradicts"),
        ({"--kwargs": '{"batch_size": 0}'}, "--kwargs: stable_baselines3.PPO rejected"),
    ],
)
def test_bad_input_fails_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str], message: str
) -> None:
    out = tmp_path / "run"
    argv = _argv(out, "ppo", PPO_TINY, 128, 64)
    for flag, value in change.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    assert sb3_run.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_ppo_resume_restores_vecnormalize_statistics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ppo"
    argv = _argv(out, "ppo", PPO_TINY, 192, 64, "--normalize")
    real_checkpoint = sb3_run.SB3Run.checkpoint
    counts: list[float] = []

    def crash_after_second(self: sb3_run.SB3Run) -> None:
        real_checkpoint(self)
        counts.append(float(self.norm.obs_rms.count))
        if len(counts) == 2:
            raise KeyboardInterrupt  # as a scheduler's Ctrl-C would, after a complete checkpoint

    monkeypatch.setattr(sb3_run.SB3Run, "checkpoint", crash_after_second)
    assert sb3_run.main(argv) == 130  # stopped, as a robolearn run that checkpointed exits
    assert f"resumes from the last checkpoint ({out / sb3_run.CHECKPOINT})" in capsys.readouterr().err
    monkeypatch.setattr(sb3_run.SB3Run, "checkpoint", real_checkpoint)
    restored: list[tuple[float, int]] = []
    real_init = sb3_run.SB3Run.__init__

    def spy_init(self: sb3_run.SB3Run, spec: sb3_run.RunSpec, resume: bool) -> None:
        real_init(self, spec, resume)
        restored.append((float(self.norm.obs_rms.count), int(self.model.num_timesteps)))

    monkeypatch.setattr(sb3_run.SB3Run, "__init__", spy_init)
    assert sb3_run.main(argv) == 0
    assert restored == [(counts[1], 128)]
    assert [int(r["step"]) for r in _rows(out)] == [64, 128, 192]
    assert json.loads((out / "summary.json").read_text())["evaluations"] == 3


# -- the recipe's MDP and the replay buffer's size ------------------------------------------------
def test_task_overrides_shape_training_and_eval_envs_and_are_recorded(tmp_path: Path) -> None:
    out = tmp_path / "o"
    argv = _argv(out, "ppo", PPO_TINY, 64, 64, "--task-overrides", json.dumps({"episode_length": 20}))
    spec = sb3_run.parse_args(argv)
    session = sb3_run.SB3Run(spec, resume=False)
    try:
        # Reacher's registered episode is 50 steps: both envs must run the recipe's 20.
        assert session.eval_env.max_episode_length == 20
        assert session.venv.batched_env.max_episode_length == 20
    finally:
        session.close()
    assert sb3_run.main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["task_overrides"] == {"episode_length": 20}
    assert float(_rows(out)[-1]["eval/episode_length"]) == 20.0
    # Another recipe's MDP does not resume this run's checkpoint.
    (out / "summary.json").unlink()
    other = _argv(out, "ppo", PPO_TINY, 128, 64, "--task-overrides", "{}")
    assert sb3_run.main(other) == 2


def test_bad_task_overrides_fail_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 64, 64, "--task-overrides", '{"episode_lenght": 3}')) == 2
    assert "--task-overrides: override 'episode_lenght'" in capsys.readouterr().err
    assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 64, 64, "--task-overrides", "[1]")) == 2
    assert "--task-overrides: expected a JSON object" in capsys.readouterr().err
    assert not out.exists()


def test_replay_capacity_caps_sb3_default_at_what_the_budget_stores(tmp_path: Path) -> None:
    def spec(steps: int, n_envs: int, **kwargs: Any) -> sb3_run.RunSpec:
        return sb3_run.RunSpec("Reacher", "sac", "sb3_default", 0, steps, steps, 2, tmp_path, kwargs, {}, n_envs, None)

    assert sb3_run.replay_capacity(spec(60_000, 1), 1000) == 60_001  # budget + the last step's overshoot
    assert sb3_run.replay_capacity(spec(150, 2, train_freq=3), 50) == 156  # 150 + 2 worlds x 3, a multiple of 2
    assert sb3_run.replay_capacity(spec(151, 2, train_freq=(2, "episode")), 50) == 352  # 151 + 2 x 2 x 50 -> 176 rows
    assert sb3_run.replay_capacity(spec(3_000_000, 1), 1000) == 1_000_000  # never above SB3's default


def test_sac_buffer_is_capped_recorded_and_grows_with_a_raised_budget(tmp_path: Path) -> None:
    out = tmp_path / "sac"
    tiny = {k: v for k, v in SAC_TINY.items() if k != "buffer_size"}
    assert sb3_run.main(_argv(out, "sac", tiny, 100, 50)) == 0
    assert json.loads((out / "config.json").read_text())["replay_buffer_size"] == 101
    # An explicit buffer_size is the hyperparameters' and is kept.
    assert sb3_run.main(_argv(tmp_path / "explicit", "sac", SAC_TINY, 50, 50)) == 0
    assert json.loads((tmp_path / "explicit" / "config.json").read_text())["replay_buffer_size"] == 1000

    sizes: list[tuple[int, int, bool]] = []
    real_train = sb3_run.SB3Run.train

    def spy_train(self: sb3_run.SB3Run) -> dict[str, Any]:
        summary = real_train(self)
        buffer = self.model.replay_buffer
        sizes.append((int(buffer.buffer_size), int(buffer.size()), bool(buffer.full)))
        return summary

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sb3_run.SB3Run, "train", spy_train)
        assert sb3_run.main(_argv(out, "sac", tiny, 200, 50)) == 0  # the budget raised: resumed, grown
    assert sizes == [(201, 200, False)]  # no transition overwritten
    assert json.loads((out / "config.json").read_text())["replay_buffer_size"] == 201


def test_grow_replay_buffer_keeps_the_stored_rows() -> None:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    def filled(size: int, adds: int) -> ReplayBuffer:
        buffer = ReplayBuffer(size, spaces.Box(-1, 1, (2,)), spaces.Box(-1, 1, (1,)), n_envs=2)
        for k in range(adds):
            obs = np.full((2, 2), k, dtype=np.float32)
            buffer.add(obs, obs + 1, np.zeros((2, 1)), np.array([k, -k]), np.zeros(2), [{}, {}])
        return buffer

    buffer = filled(8, 3)  # 4 rows of 2 worlds, 3 used
    sb3_run.grow_replay_buffer(buffer, 10)
    assert buffer.buffer_size == 5 and buffer.pos == 3 and buffer.size() == 3 and not buffer.full
    assert buffer.rewards.shape == (5, 2) and buffer.rewards[:3].tolist() == [[0, 0], [1, -1], [2, -2]]
    assert buffer.next_observations[2].tolist() == [[3, 3], [3, 3]]
    buffer.add(*(np.zeros((2, 2)),) * 2, np.zeros((2, 1)), np.ones(2), np.zeros(2), [{}, {}])
    buffer.add(*(np.zeros((2, 2)),) * 2, np.zeros((2, 1)), np.ones(2), np.zeros(2), [{}, {}])
    assert buffer.pos == 0 and buffer.full  # the fifth row existed
    with pytest.raises(sb3_run.RunError, match="full"):
        sb3_run.grow_replay_buffer(filled(4, 3), 10)  # 2 rows, wrapped: its oldest row is gone


def test_a_corrupt_checkpoint_or_summary_is_a_clear_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = _argv(out, "ppo", PPO_TINY, 64, 64)
    assert sb3_run.main(argv) == 0
    ckpt = out / sb3_run.CHECKPOINT
    capsys.readouterr()
    (out / "summary.json").write_text('{"env_steps": 6')  # torn: read as no summary, so the run resumes
    for name, garbage in [("model.zip", b"\x94not a zip"), ("state.json", b"\x94\x00")]:
        original = (ckpt / name).read_bytes()
        (ckpt / name).write_bytes(garbage)
        assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 128, 64)) == 2, name
        err = capsys.readouterr().err
        assert f"sb3_run: error: --out: the checkpoint in {ckpt} cannot be read" in err, err
        assert f"remove {out} to train this run afresh" in err and "Traceback" not in err
        (ckpt / name).write_bytes(original)
    assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 128, 64)) == 0  # the intact checkpoint resumes
    assert [int(r["step"]) for r in _rows(out)] == [64, 128]


def test_a_checkpoint_without_the_split_leaves_the_profile_unknown(tmp_path: Path) -> None:
    """A run resumed from a checkpoint written before ``collect_s`` was counted has no profile
    (``nan``, no ``time/update_s``), rather than calling all its earlier seconds updates."""
    old = {"env_steps": 64, "train_s": 3.0, "eval_s": 1.0, "evaluations": 1, "next_eval": 128,
           "best_eval": -5.0, "last_eval": -5.0, "replay_size": None}
    (tmp_path / "state.json").write_text(json.dumps(old))
    counters = sb3_run._read_counters(tmp_path / "state.json")
    assert math.isnan(counters.collect_s) and counters.train_s == 3.0
    assert sb3_run._counters_json(counters)["collect_s"] is None


def test_gymnasium_trains_on_the_twin_and_evaluates_on_robolearns_task(tmp_path: Path) -> None:
    from stable_baselines3.common.monitor import Monitor

    from robolearn.envs.batched_env import BatchedEnv

    out = tmp_path / "g"
    argv = _argv(out, "ppo", PPO_TINY, 128, 64, "--gymnasium", "Reacher-v5")
    session = sb3_run.SB3Run(sb3_run.parse_args(argv), resume=False)
    try:
        env = session.venv.envs[0]
        # Gymnasium's own env (SB3's usual Monitor on top), not the adapter; evaluation stays robolearn's.
        assert isinstance(env, Monitor) and env.unwrapped.spec.id == "Reacher-v5"
        assert not hasattr(session.venv, "batched_env")
        assert isinstance(session.eval_env, BatchedEnv) and session.eval_env.num_envs == 2
    finally:
        session.close()
    assert sb3_run.main(argv) == 0
    assert json.loads((out / "config.json").read_text())["gymnasium"] == "Reacher-v5"
    assert [int(r["step"]) for r in _rows(out)] == [64, 128]
    assert float(_rows(out)[-1]["eval/episode_length"]) == 50.0
    # The adapter's run of the same settings is another run: this checkpoint does not resume it.
    (out / "summary.json").unlink()
    assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 192, 64)) == 2
    # With the same flags it resumes to a raised budget, on Gymnasium's env again (SAC: its replay buffer too).
    assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 192, 64, "--gymnasium", "Reacher-v5")) == 0
    assert [int(r["step"]) for r in _rows(out)] == [64, 128, 192]
    sac = tmp_path / "sac"
    assert sb3_run.main(_argv(sac, "sac", SAC_TINY, 64, 64, "--gymnasium", "Reacher-v5", "--normalize")) == 0
    (sac / "summary.json").unlink()
    assert sb3_run.main(_argv(sac, "sac", SAC_TINY, 128, 64, "--gymnasium", "Reacher-v5", "--normalize")) == 0
    assert [int(r["step"]) for r in _rows(sac)] == [64, 128]
    assert json.loads((sac / "summary.json").read_text())["env_steps"] == 128


@pytest.mark.parametrize(("extra", "message"), [
    (("--gymnasium", "Hopper-v5"), "--gymnasium: expected 'Reacher-v5', the Gymnasium env Reacher reproduces, got 'Hopper-v5'"),
    (("--gymnasium", "Reacher-v5", "--task-overrides", '{"episode_length": 20}'),
     '--gymnasium: Reacher-v5 is Reacher as registered; --task-overrides {"episode_length": 20} make another MDP'),
])
def test_a_gymnasium_env_that_is_not_the_tasks_twin_fails_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "run"
    assert sb3_run.main(_argv(out, "ppo", PPO_TINY, 64, 64, *extra)) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
