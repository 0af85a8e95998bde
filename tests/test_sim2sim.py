"""The sim2sim gate: a controller known to work nominally passes what it should and fails what it
must; each perturbation means what the randomisation module means by it (added latency is the
env's own delay models, a motor strength or field factor is the randomisation terms' operation
with a degenerate range); every perturbation is checked before any rollout; bad configs are named.
"""

from __future__ import annotations

import math

import pytest
import torch

import robolearn
from robolearn.cli.config import ConfigError, Perturbation, Sim2SimConfig, to_dataclass
from robolearn.cli.sim2sim import (
    apply_model_changes,
    condition_overrides,
    evaluate,
    format_table,
    latency_overrides,
    run_gate,
)
from robolearn.envs import ActionTerm, BatchedEnv, EventTerm, TaskCfg, task_cfg
from robolearn.sim2real.randomization import (
    ActionDelay,
    ObservationDelay,
    randomize_field,
    randomize_motor_strength,
)
from tests.test_classic_tasks import make_lqr_policy


def _make_env(extra):
    return robolearn.make("Cartpole-Balance", 4, seed=0, dtype=torch.float64, nthread=1, episode_length=300, **extra)


def _lqr():
    lqr = make_lqr_policy()
    return lambda obs: lqr(obs["policy"])


def test_gate_passes_benign_shifts_and_fails_cut_motors():
    perturbations = {
        "half_timestep": Perturbation(timestep_scale=0.5),
        "implicitfast": Perturbation(integrator="implicitfast"),
        "heavy": Perturbation(fields={"mass": 1.3}),
        "latency_1": Perturbation(action_delay=1, obs_delay=1),
        "cut": Perturbation(fields={"motor_strength": 0.0}),  # no force at all: must fail
        "absolute": Perturbation(fields={"mass": 1.3}, min_return=1e6),  # an unreachable bar
    }
    rows = run_gate(_make_env, _lqr(), perturbations, episodes=4, seed=1, min_ratio=0.9)
    by_name = {r.name: r for r in rows}
    nominal = by_name["nominal"].mean_return
    assert 295 < nominal <= 300, nominal  # LQR balances: ~1 per step for 300 steps
    for name in ("half_timestep", "implicitfast", "heavy", "latency_1"):
        assert by_name[name].passed, (name, by_name[name])
        assert by_name[name].threshold == pytest.approx(0.9 * nominal)
    assert not by_name["cut"].passed and by_name["cut"].mean_return < 0.8 * nominal  # measured: 0.70
    assert not by_name["absolute"].passed and by_name["absolute"].threshold == 1e6
    # The perturbations really changed something (not a silent no-op).
    for name in ("half_timestep", "heavy", "latency_1"):
        assert by_name[name].mean_return != nominal, name
    table = format_table(rows)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["condition", "change", "mean"]
    assert any(line.startswith("cut") and line.rstrip().endswith("FAIL") for line in lines)
    assert any(line.startswith("heavy") and line.rstrip().endswith("PASS") for line in lines)
    assert lines[-1] == "sim2sim: FAIL (cut, absolute): 4/6 perturbations passed"


def test_timestep_perturbation_keeps_the_control_rate():
    env = _make_env({})
    half = _make_env({"timestep": env.model.opt.timestep / 2, "decimation": env.sim.decimation * 2})
    assert half.dt == pytest.approx(env.dt) and half.sim.decimation == 2 * env.sim.decimation


# -- latency: the env's own delay models ---------------------------------------------------------
def _open_loop(env: BatchedEnv, actions: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Policy observations (the reset one first) and qpos after every step of fixed actions."""
    obs, _ = env.reset(seed=7)
    seen, qpos = [obs["policy"].clone()], []
    for a in actions:
        obs, *_ = env.step(a)
        seen.append(obs["policy"].clone())
        qpos.append(env.sim.qpos.clone())
    return seen, qpos


def test_added_latency_delays_observations_and_actions_exactly():
    nominal = _make_env({})
    overrides = condition_overrides("lat", Perturbation(action_delay=2, obs_delay=3), nominal)
    assert overrides == {
        "action_delay": ActionDelay(lag_range=(2, 2)),
        "observations__policy__delay": ObservationDelay(lag_range=(3, 3)),
    }
    delayed = _make_env(overrides)
    gen = torch.Generator().manual_seed(0)
    actions = [torch.rand(4, 1, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(12)]
    zero = torch.zeros(4, 1, dtype=torch.float64)
    # Undelayed reference: the same actions, each applied two steps later (zero until then).
    plain_obs, plain_q = _open_loop(_make_env({}), [zero, zero, *actions[:-2]])
    seen, qpos = _open_loop(delayed, actions)
    for t in range(len(actions)):
        torch.testing.assert_close(qpos[t], plain_q[t], rtol=0, atol=0)
        # After step t the policy is delivered the frame of step t + 1 - 3 (the reset frame before).
        torch.testing.assert_close(seen[t + 1], plain_obs[max(t + 1 - 3, 0)], rtol=0, atol=0)
    assert torch.equal(seen[0], plain_obs[0])  # a fresh episode starts from its own first frame


def test_gate_latency_is_the_same_as_a_task_configured_with_those_delays():
    nominal = _make_env({})
    gated = _make_env(condition_overrides("lat", Perturbation(action_delay=1, obs_delay=2), nominal))
    cfg = task_cfg("Cartpole-Balance", episode_length=300)
    cfg.observations["policy"].delay = ObservationDelay(lag_range=(2, 2))
    cfg.action_delay = ActionDelay(lag_range=(1, 1))
    configured = BatchedEnv(cfg, 4, seed=0, dtype=torch.float64, nthread=1)
    for env in (gated, configured):
        env.reset(seed=3)
    act = _lqr()
    for _ in range(150):  # closed loop: any difference in what the policy sees would compound
        a, b = gated.step(act(gated.obs)), configured.step(act(configured.obs))
        assert torch.equal(a[0]["policy"], b[0]["policy"]) and torch.equal(a[1], b[1])
    assert torch.equal(gated.sim.qpos, configured.sim.qpos)


def test_added_latency_adds_to_the_task_s_own_lags():
    dr = robolearn.make("Cartpole-Balance-DR", 2, seed=0, nthread=1)  # its own lags: (0, 1) each
    assert latency_overrides(Perturbation(action_delay=1, obs_delay=2), dr.cfg) == {
        "action_delay": ActionDelay(lag_range=(1, 2)),
        "observations__policy__delay": ObservationDelay(lag_range=(2, 3)),
    }
    cfg = task_cfg("Cartpole-Balance")
    cfg.observations["policy"].delay = ObservationDelay(lag_range=(1, 2), jitter=True, hold_prob=0.1)
    shifted = latency_overrides(Perturbation(obs_delay=1), cfg)["observations__policy__delay"]
    assert shifted == ObservationDelay(lag_range=(2, 3), jitter=True, hold_prob=0.1)
    assert latency_overrides(Perturbation(), cfg) == {}


# -- model changes: the randomisation terms' operations ----------------------------------------------
_MOTORS = """<mujoco><worldbody><body name="b"><joint name="h" type="hinge"/><geom size="0.1" mass="1"/>
  <body name="c"><joint name="s" type="slide"/><geom size="0.1" mass="2"/></body></body></worldbody>
  <actuator><motor joint="h" gear="2" forcelimited="true" forcerange="-3 4"/>
  <position joint="s" kp="10" kv="1"/></actuator></mujoco>"""
"""A force-limited motor (its force range must scale too) and a position servo (kp in two places)."""


def test_motor_strength_is_randomize_motor_strength_with_a_degenerate_range():
    drawn = BatchedEnv(TaskCfg(mjcf=_MOTORS, events={
        "s": EventTerm(randomize_motor_strength, params={"range": (0.7, 0.7)}),
        "m": EventTerm(randomize_field, params={"field": "mass", "range": (1.3, 1.3)}),
    }), 3, seed=0)
    gated = BatchedEnv(TaskCfg(mjcf=_MOTORS), 3, seed=0)
    apply_model_changes(gated, Perturbation(fields={"motor_strength": 0.7, "mass": 1.3}), "weak")
    for field in ("actuator_gainprm", "actuator_biasprm", "actuator_forcerange", "body_mass"):
        assert torch.equal(gated.sim.get_model_field(field), drawn.sim.get_model_field(field)), field
    # Hand-computed: the force range and the servo's kp (in gain and bias) and kd scaled together.
    torch.testing.assert_close(gated.sim.get_model_field("actuator_forcerange")[:, 0], torch.tensor([-2.1, 2.8], dtype=torch.float64).expand(3, 2),
                               rtol=0, atol=1e-12)
    servo = gated.sim.get_model_field("actuator_biasprm")[0, 1, :3]
    torch.testing.assert_close(servo, torch.tensor([0.0, -7.0, -0.7], dtype=torch.float64), rtol=0, atol=1e-12)
    assert gated.model.actuator_gainprm[1, 0] == pytest.approx(7.0)  # the template follows


def test_perturbations_compose_with_a_tasks_randomisation():
    # Cartpole-Balance-DR draws pole mass x U(0.7, 1.3) around the template at every reset; the
    # gate rescales the template and rebuilds the events, so the draws land around the new mass.
    env = robolearn.make("Cartpole-Balance-DR", 64, seed=0, nthread=1)
    pole = env.model.body("pole").id
    nominal = float(env.model.body_mass[pole])
    before = env.sim.get_model_field("body_mass")[:, pole]
    assert ((0.7 * nominal <= before) & (before <= 1.3 * nominal)).all()
    apply_model_changes(env, Perturbation(fields={"mass": 2.0}))
    after = env.sim.get_model_field("body_mass")[:, pole]
    assert ((1.4 * nominal <= after) & (after <= 2.6 * nominal)).all() and after.std() > 0
    torch.testing.assert_close(after, 2.0 * nominal * env.drawn["mass/pole"][:, 0], rtol=0, atol=1e-12)
    # A start-up event draws again around the new template too (as when the env was built).
    cfg = task_cfg("Cartpole-Balance")
    cfg.events["damp"] = EventTerm(randomize_field, mode="startup", params={"field": "damping", "range": (0.5, 1.5)})
    env = BatchedEnv(cfg, 8, seed=0)
    template = torch.from_numpy(env.model.dof_damping.copy())
    apply_model_changes(env, Perturbation(fields={"damping": 3.0}))
    torch.testing.assert_close(env.sim.get_model_field("damping"), 3.0 * template * env.drawn["damping"], rtol=0, atol=1e-12)
    assert env.drawn["damping"].std() > 0


# -- validation --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fields", "message"), [
    ({"mass": -1.0}, r"perturbations\.p\.fields\.mass: scale by -1 could set body_mass\[cart, 0\] \(template 1\) to -1; it must stay > 0"),
    ({"motor_strength": -1.0}, r"perturbations\.p\.fields\.motor_strength: a strength factor must stay >= 0 .* reaches -1"),
    ({"friction": -0.5}, r"perturbations\.p\.fields\.friction: scale by -0\.5 could set geom_friction\[floor, 0\] .* must stay >= 0"),
    ({"nope": 2.0}, r"perturbations\.p\.fields\.nope: model field 'nope' cannot be set per world; .*; or 'motor_strength'"),
])
def test_a_bad_model_factor_is_refused_before_any_rollout(fields, message):
    built: list[dict] = []

    def make_env(extra):
        built.append(extra)
        return _make_env(extra)

    def act(obs):
        raise AssertionError("a rollout ran before every perturbation was checked")

    perturbations = {"ok": Perturbation(fields={"mass": 1.3}), "p": Perturbation(fields=fields)}
    with pytest.raises(ConfigError, match=message):
        run_gate(make_env, act, perturbations, episodes=1)
    assert built == [{}]  # only the nominal env, to read the model


def test_servo_gain_factors_go_through_the_randomisation_checks():
    cfg = task_cfg("Reacher")
    cfg.actions = {"pos": ActionTerm(kind="joint_pos", kp=10.0, kd=1.0)}
    env = BatchedEnv(cfg, 2, seed=0)
    with pytest.raises(ConfigError, match=r"fields\.actuator_gain: actuator '#0' is a position servo, .* randomize_motor_strength"):
        apply_model_changes(env, Perturbation(fields={"actuator_gain": 1.5}))


@pytest.mark.parametrize(("values", "message"), [
    ({"timestep_scale": 0.0}, r"timestep_scale: expected a finite positive factor, got 0\.0"),
    ({"timestep_scale": math.nan}, r"timestep_scale: expected a finite positive factor, got nan"),
    ({"timestep_scale": math.inf}, r"timestep_scale: expected a finite positive factor, got inf"),
    ({"timestep_scale": -0.5}, r"timestep_scale: expected a finite positive factor"),
    ({"fields": {"mass": math.nan}}, r"fields\.mass: expected a finite number, got nan"),
    ({"fields": {"mass": True}}, r"fields\.mass: expected a finite number, got True"),
    ({"fields": {"mass": "2"}}, r"fields\.mass: expected a finite number, got '2'"),
    ({"action_delay": -1}, r"action_delay: expected an integer >= 0 control steps, got -1"),
    ({"obs_delay": 1.5}, r"obs_delay: expected an integer >= 0 control steps, got 1\.5"),
    ({"obs_delay": True}, r"obs_delay: expected an integer >= 0 control steps, got True"),
    ({"min_ratio": 0.0}, r"min_ratio: expected a finite number > 0, got 0\.0"),
    ({"min_return": math.inf}, r"min_return: expected a finite number, got inf"),
    ({"integrator": "RK5"}, r"integrator: unknown 'RK5'; valid choices: Euler, RK4"),
])
def test_bad_perturbation_values_are_named(values, message):
    with pytest.raises(ConfigError, match=message):
        Perturbation(**values)
    # From a config file, the condition's place comes first.
    cfg = Sim2SimConfig(run="x", perturbations={"p": values})
    with pytest.raises(ConfigError, match=r"perturbations\.p"):
        cfg.conditions()


def test_bad_gate_configs_name_the_field():
    cfg = Sim2SimConfig(run="x", perturbations={"heavy": {"fields": {"mass": 1.3}}, "odd": {"dealy": 1}})
    with pytest.raises(ConfigError, match=r"perturbations\.odd\.dealy: field 'dealy' is not in Perturbation"):
        cfg.conditions()
    cfg = to_dataclass(Sim2SimConfig, {"run": "x", "perturbations": {"heavy": {}}, "only": ["hevy"]})
    with pytest.raises(ConfigError, match=r"only: unknown perturbation\(s\) \['hevy'\]; defined: heavy"):
        cfg.conditions()
    for key, value in (("episodes", 0), ("num_envs", 2.0), ("seed", -1), ("min_ratio", math.nan)):
        with pytest.raises(ConfigError, match=rf"{key}: expected"):
            Sim2SimConfig(run="x", **{key: value})
    with pytest.raises(ConfigError, match=r"perturbations\.t\.timestep_scale: 0\.3 must divide the task's decimation"):
        run_gate(_make_env, _lqr(), {"t": Perturbation(timestep_scale=0.3)}, episodes=1)


def test_evaluate_counts_whole_episodes():
    stats = evaluate(_make_env({}), _lqr(), episodes=6, seed=3)
    assert stats["length"] == 300 and 295 < stats["mean"] <= 300
