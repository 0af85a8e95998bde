"""The sim2sim gate: a controller known to work nominally passes what it should and fails what it
must; added latency shifts actions and observations exactly; bad configs are named.
"""

from __future__ import annotations

import pytest
import torch

import robolearn
from robolearn.cli.config import ConfigError, Perturbation, Sim2SimConfig, to_dataclass
from robolearn.cli.sim2sim import Latency, evaluate, format_table, run_gate
from tests.test_classic_tasks import make_lqr_policy


def _make_env(extra):
    return robolearn.make("Cartpole-Balance", 4, seed=0, dtype=torch.float64, nthread=1, episode_length=300, **extra)


def _lqr():
    lqr = make_lqr_policy()
    return lambda obs: lqr(obs["policy"])


def test_gate_passes_benign_shifts_and_fails_reversed_motors():
    perturbations = {
        "half_timestep": Perturbation(timestep_scale=0.5),
        "implicitfast": Perturbation(integrator="implicitfast"),
        "heavy": Perturbation(fields={"mass": 1.3}),
        "latency_1": Perturbation(action_delay=1, obs_delay=1),
        "reversed": Perturbation(fields={"motor_strength": -1.0}),  # wired backwards: must fail
        "absolute": Perturbation(fields={"mass": 1.3}, min_return=1e6),  # an unreachable bar
    }
    rows = run_gate(_make_env, _lqr(), perturbations, episodes=4, seed=1, min_ratio=0.9)
    by_name = {r.name: r for r in rows}
    nominal = by_name["nominal"].mean_return
    assert 295 < nominal <= 300, nominal  # LQR balances: ~1 per step for 300 steps
    for name in ("half_timestep", "implicitfast", "heavy", "latency_1"):
        assert by_name[name].passed, (name, by_name[name])
        assert by_name[name].threshold == pytest.approx(0.9 * nominal)
    assert not by_name["reversed"].passed and by_name["reversed"].mean_return < 0.5 * nominal
    assert not by_name["absolute"].passed and by_name["absolute"].threshold == 1e6
    # The perturbations really changed something (not a silent no-op).
    assert by_name["half_timestep"].mean_return != nominal and by_name["heavy"].mean_return != nominal
    table = format_table(rows)
    print(table)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["condition", "change", "mean"]
    assert any(line.startswith("reversed") and line.rstrip().endswith("FAIL") for line in lines)
    assert any(line.startswith("heavy") and line.rstrip().endswith("PASS") for line in lines)
    assert lines[-1] == "sim2sim: FAIL (reversed, absolute): 4/6 perturbations passed"


def test_timestep_perturbation_keeps_the_control_rate():
    env = _make_env({})
    half = _make_env({"timestep": env.model.opt.timestep / 2, "decimation": env.sim.decimation * 2})
    assert half.dt == pytest.approx(env.dt) and half.sim.decimation == 2 * env.sim.decimation


def test_latency_shifts_actions_and_observations_exactly():
    seen: list[torch.Tensor] = []

    def act(obs):  # action = a function of the observation it was given, remembered
        seen.append(obs["policy"].clone())
        return obs["policy"][:, :1].clone()

    env = robolearn.make("Cartpole-Balance", 3, seed=2, dtype=torch.float64, nthread=1)
    obs, _ = env.reset()
    wrapped = Latency(act, 3, 1, action_delay=2, obs_delay=1)
    wrapped.start(obs)
    history, applied = [obs["policy"].clone()], []
    for _ in range(6):
        a = wrapped(obs)
        applied.append(a.clone())
        obs, *_ = env.step(a)
        history.append(obs["policy"].clone())
    # The policy at step t saw the observation of step t-1 (the first one repeated at t=0).
    for t in range(6):
        torch.testing.assert_close(seen[t], history[max(t - 1, 0)])
    # The action applied at step t was chosen at t-2; zeros before any arrived.
    assert (applied[0] == 0).all() and (applied[1] == 0).all()
    for t in range(2, 6):
        torch.testing.assert_close(applied[t], seen[t - 2][:, :1])
    # A world starting a new episode has nothing pending and sees its fresh observation.
    wrapped.restart(torch.tensor([1]), {"policy": torch.full((3, 5), 7.0, dtype=torch.float64)})
    out = wrapped({"policy": torch.full((3, 5), 9.0, dtype=torch.float64)})
    assert out[1].item() == 0.0 and out[0].item() != 0.0
    assert seen[-1][1, 0].item() == 7.0


def test_evaluate_counts_whole_episodes():
    env = _make_env({})
    stats = evaluate(env, _lqr(), episodes=6, seed=3)
    assert stats["length"] == 300 and 295 < stats["mean"] <= 300


def test_bad_gate_configs_name_the_field():
    with pytest.raises(ConfigError, match="integrator: unknown 'RK5'; valid choices: Euler, RK4"):
        Perturbation(integrator="RK5")
    with pytest.raises(ConfigError, match="timestep_scale: expected a positive factor"):
        Perturbation(timestep_scale=0.0)
    cfg = Sim2SimConfig(run="x", perturbations={"heavy": {"fields": {"mass": 1.3}}, "odd": {"dealy": 1}})
    with pytest.raises(ConfigError, match=r"perturbations\.odd\.dealy: field 'dealy' is not in Perturbation"):
        cfg.conditions()
    cfg = to_dataclass(Sim2SimConfig, {"run": "x", "perturbations": {"heavy": {}}, "only": ["hevy"]})
    with pytest.raises(ConfigError, match=r"only: unknown perturbation\(s\) \['hevy'\]; defined: heavy"):
        cfg.conditions()
    with pytest.raises(ConfigError, match="timestep_scale: 0.3 must divide the task's decimation"):
        run_gate(_make_env, _lqr(), {"t": Perturbation(timestep_scale=0.3)}, episodes=1)
    with pytest.raises(ConfigError, match=r"fields\.nope: model field 'nope' cannot be set per world"):
        run_gate(_make_env, _lqr(), {"f": Perturbation(fields={"nope": 2.0})}, episodes=1)


def test_perturbations_compose_with_a_tasks_randomisation():
    # Cartpole-Balance-DR draws pole mass x U(0.7, 1.3) around the template at every reset; the
    # gate rescales the template, so the draws must land around the perturbed mass.
    from robolearn.cli.sim2sim import apply_model_changes

    env = robolearn.make("Cartpole-Balance-DR", 64, seed=0, nthread=1)
    pole = env.model.body("pole").id
    nominal = float(env.model.body_mass[pole])
    before = env.sim.get_model_field("body_mass")[:, pole]
    assert ((0.7 * nominal <= before) & (before <= 1.3 * nominal)).all()
    apply_model_changes(env, Perturbation(fields={"mass": 2.0}))
    after = env.sim.get_model_field("body_mass")[:, pole]
    assert ((1.4 * nominal <= after) & (after <= 2.6 * nominal)).all() and after.std() > 0
