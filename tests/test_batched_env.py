"""BatchedEnv contract: done semantics, reset by index, determinism, bad input, divergence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import robolearn
from robolearn.envs import (
    ActionTerm,
    BatchedEnv,
    EventTerm,
    NoiseCfg,
    ObsGroup,
    ObsTerm,
    RewardTerm,
    TerminationTerm,
    mdp,
    task_cfg,
)
from robolearn.sim import ModelError


def _actions(n: int, dim: int, steps: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).uniform(-1, 1, (steps, n, dim))).float()


def _rollout(env: BatchedEnv, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    obs_seq, rew_seq = [], []
    for a in actions:
        obs, rew, *_ = env.step(a)
        obs_seq.append(obs["policy"])
        rew_seq.append(rew)
    return torch.stack(obs_seq), torch.stack(rew_seq)


def _even_worlds_end_at(step: int):
    def func(env: BatchedEnv) -> torch.Tensor:
        return (env.episode_length == step) & (env.all_ids % 2 == 0)

    return func


# -- the step contract ------------------------------------------------------------------------
def test_step_shapes_and_dtypes():
    env = robolearn.make("HalfCheetah", 5, seed=0)
    obs, info = env.reset()
    assert set(obs) == {"policy"} and obs["policy"].shape == (5, 17) and obs["policy"].dtype == torch.float32
    obs, rew, term, trunc, info = env.step(torch.zeros(5, 6))
    assert rew.shape == (5,) and rew.dtype == torch.float32
    assert term.dtype == torch.bool and trunc.dtype == torch.bool
    assert info["reward_terms"].shape == (5, 2)
    torch.testing.assert_close(info["reward_terms"].sum(1).float(), rew)


def test_time_out_is_truncation_with_final_obs():
    env = robolearn.make("HalfCheetah", 4, seed=0, episode_length=10)
    acts = _actions(4, 6, 10)
    for t, a in enumerate(acts):
        prev_len = env.episode_length.clone()
        obs, rew, term, trunc, info = env.step(a)
        if t < 9:
            assert not trunc.any() and info["final_obs"] is obs
            assert torch.equal(env.episode_length, prev_len + 1)
    assert trunc.all() and not term.any()
    assert not torch.equal(info["final_obs"]["policy"], obs["policy"])
    assert torch.equal(env.episode_length, torch.zeros(4, dtype=torch.long))
    ep = info["episode"]
    assert torch.equal(ep["length"], torch.full((4,), 10)) and torch.equal(ep["env_ids"], torch.arange(4))
    torch.testing.assert_close(ep["return"], ep["reward/forward"] + ep["reward/ctrl_cost"])


def test_termination_resets_only_those_worlds_and_keeps_final_obs():
    cfg = task_cfg("HalfCheetah")
    cfg.terminations["even_at_5"] = TerminationTerm(_even_worlds_end_at(5))
    env = BatchedEnv(cfg, 6, seed=3, task_id="test")
    twin = robolearn.make("HalfCheetah", 6, seed=3)  # same worlds, never terminated
    acts = _actions(6, 6, 8, seed=1)
    for t, a in enumerate(acts):
        obs, rew, term, trunc, info = env.step(a)
        tobs, trew, *_ = twin.step(a)
        if t == 4:
            even, odd = torch.arange(0, 6, 2), torch.arange(1, 6, 2)
            assert term.tolist() == [True, False] * 3 and not trunc.any()
            # the pre-reset observation of every world is what the twin sees
            torch.testing.assert_close(info["final_obs"]["policy"], tobs["policy"], rtol=0, atol=0)
            torch.testing.assert_close(rew, trew, rtol=0, atol=0)
            torch.testing.assert_close(obs["policy"][odd], tobs["policy"][odd], rtol=0, atol=0)
            assert not torch.allclose(obs["policy"][even], tobs["policy"][even])
            assert env.episode_length[even].eq(0).all() and env.episode_length[odd].eq(5).all()
            assert torch.equal(info["episode"]["env_ids"], even)
            # the reset state is a fresh draw near qpos0
            dq = env.sim.qpos[even] - torch.from_numpy(env.model.qpos0.copy())
            assert dq.abs().max() <= 0.1
    # untouched worlds continued exactly as the twin's
    odd = torch.arange(1, 6, 2)
    torch.testing.assert_close(env.sim.qpos[odd], twin.sim.qpos[odd], rtol=0, atol=0)


def test_terminated_and_time_out_same_step_is_terminal():
    cfg = task_cfg("HalfCheetah", episode_length=5)
    cfg.terminations["even_at_5"] = TerminationTerm(_even_worlds_end_at(5))
    env = BatchedEnv(cfg, 4, seed=0)
    for a in _actions(4, 6, 5):
        _, _, term, trunc, _ = env.step(a)
    assert term.tolist() == [True, False, True, False]
    assert trunc.tolist() == [False, True, False, True]


def test_time_out_termination_term_counts_as_truncation():
    cfg = task_cfg("HalfCheetah")
    cfg.terminations["timeout_even"] = TerminationTerm(_even_worlds_end_at(3), time_out=True)
    env = BatchedEnv(cfg, 4, seed=0)
    for a in _actions(4, 6, 3):
        _, _, term, trunc, _ = env.step(a)
    assert not term.any() and trunc.tolist() == [True, False, True, False]


# -- determinism ------------------------------------------------------------------------------
def test_same_seed_same_trajectory_and_different_seed_differs():
    acts = _actions(4, 6, 60, seed=2)
    a = _rollout(robolearn.make("HalfCheetah", 4, seed=7, episode_length=25), acts)
    b = _rollout(robolearn.make("HalfCheetah", 4, seed=7, episode_length=25), acts)
    c = _rollout(robolearn.make("HalfCheetah", 4, seed=8, episode_length=25), acts)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.allclose(a[0], c[0])


def test_trajectory_independent_of_thread_count_and_batch_size():
    acts = _actions(8, 6, 60, seed=3)
    one = _rollout(robolearn.make("HalfCheetah", 8, seed=5, nthread=1, episode_length=25), acts)
    two = _rollout(robolearn.make("HalfCheetah", 8, seed=5, nthread=2, episode_length=25), acts)
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
    # world i's stream depends on (seed, i) only: the first 3 of 8 worlds equal a 3-world env
    few = _rollout(robolearn.make("HalfCheetah", 3, seed=5, episode_length=25), acts[:, :3])
    assert torch.equal(one[0][:, :3], few[0]) and torch.equal(one[1][:, :3], few[1])


def test_reset_with_seed_reproduces():
    env = robolearn.make("HalfCheetah", 3, seed=0)
    o1, _ = env.reset(seed=11)
    env.step(torch.zeros(3, 6))
    o2, _ = env.reset(seed=11)
    assert torch.equal(o1["policy"], o2["policy"])


def test_reference_backend_gives_the_same_env_rollout():
    acts = _actions(3, 6, 40, seed=4)
    fast = _rollout(robolearn.make("HalfCheetah", 3, seed=1, episode_length=15), acts)
    ref = _rollout(robolearn.make("HalfCheetah", 3, seed=1, episode_length=15, backend="reference"), acts)
    assert torch.equal(fast[0], ref[0]) and torch.equal(fast[1], ref[1])


# -- managers ---------------------------------------------------------------------------------
def test_observation_hooks_noise_clip_scale_and_history():
    cfg = task_cfg("HalfCheetah")
    cfg.observations = {
        "policy": ObsGroup({"vel": ObsTerm(mdp.qvel, noise=NoiseCfg("uniform", 0.5), clip=(-1.0, 1.0), scale=2.0)}),
        "critic": ObsGroup({"vel": ObsTerm(mdp.qvel)}, enable_noise=False),
        "history": ObsGroup({"pos": ObsTerm(mdp.qpos, params={"start": 1})}, history_length=3),
    }
    env = BatchedEnv(cfg, 64, seed=0, dtype=torch.float64)
    frames = []
    for a in _actions(64, 6, 4, seed=5):
        obs, *_ = env.step(a.double())
        frames.append(env.sim.qpos[:, 1:].clone())
        noisy = obs["policy"] / 2.0
        assert noisy.abs().max() <= 1.0 + 1e-12  # clipped before scaling
        inside = env.sim.qvel.abs() < 0.4
        diff = (noisy - env.sim.qvel)[inside]
        assert diff.abs().max() <= 0.5 + 1e-9 and diff.abs().max() > 0.3  # U(-0.5, 0.5) noise
        torch.testing.assert_close(obs["critic"], env.sim.qvel)
    torch.testing.assert_close(obs["history"], torch.cat(frames[-3:], dim=1))
    assert env.obs_dims == {"policy": 9, "critic": 9, "history": 24}


def test_action_term_scale_offset_clip_and_subset():
    cfg = task_cfg("HalfCheetah")
    cfg.actions = {"back": ActionTerm(actuators=["bthigh", "bshin", "bfoot"], scale=0.5, offset=0.1, clip=(-1, 1))}
    env = BatchedEnv(cfg, 2, seed=0)
    assert env.action_dim == 3
    env.step(torch.tensor([[4.0, -0.2, 0.0], [0.2, 0.4, -3.0]]))
    expected = torch.tensor([[0.6, 0.0, 0.1, 0, 0, 0], [0.2, 0.3, -0.4, 0, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(env.sim.ctrl, expected)


def test_joint_pos_action_becomes_pd_servo():
    cfg = task_cfg("HalfCheetah")
    cfg.actions = {"pd": ActionTerm(kind="joint_pos", kp=50.0, kd=2.0)}
    env = BatchedEnv(cfg, 1, seed=0)
    i = env.model.actuator("bthigh").id
    np.testing.assert_allclose(env.model.actuator_gainprm[i, :3], [50.0, 0, 0])
    np.testing.assert_allclose(env.model.actuator_biasprm[i, :3], [0.0, -50.0, -2.0])


def test_events_startup_reset_interval_and_commands():
    calls: dict[str, list[int]] = {"startup": [], "reset": [], "interval": []}

    def record(mode: str):
        def func(env: BatchedEnv, env_ids: torch.Tensor) -> None:
            calls[mode].extend(env_ids.tolist())

        return func

    cfg = task_cfg("HalfCheetah", episode_length=4)
    cfg.events = {
        "s": EventTerm(record("startup"), mode="startup"),
        "r": EventTerm(record("reset"), mode="reset"),
        "i": EventTerm(record("interval"), mode="interval", interval_range_s=(0.1, 0.1)),
    }
    from robolearn.envs import CommandTerm

    cfg.commands = {"speed": CommandTerm(lambda env, ids: env.draw_uniform(ids, 1, 1.0, 2.0), dim=1, resampling_time_s=(0.1, 0.1))}
    cfg.observations["policy"].terms["cmd"] = ObsTerm(mdp.command, params={"name": "speed"})
    env = BatchedEnv(cfg, 3, seed=0)
    assert calls["startup"] == [0, 1, 2] and calls["reset"] == [0, 1, 2]
    cmd0 = env.command_manager.values["speed"].clone()
    assert ((cmd0 >= 1) & (cmd0 < 2)).all()
    env.step(torch.zeros(3, 6))
    env.step(torch.zeros(3, 6))  # 0.1 s = 2 control steps: interval event and resample due
    assert sorted(calls["interval"]) == [0, 1, 2]
    assert not torch.equal(env.command_manager.values["speed"], cmd0)
    torch.testing.assert_close(env.obs["policy"][:, -1], env.command_manager.values["speed"][:, 0].float())
    env.step(torch.zeros(3, 6))
    env.step(torch.zeros(3, 6))  # time-out: every world resets again
    assert calls["reset"] == [0, 1, 2, 0, 1, 2]


def test_zero_weight_reward_terms_are_dropped():
    cfg = task_cfg("HalfCheetah")
    cfg.rewards["alive"] = RewardTerm(mdp.alive, weight=0.0)
    env = BatchedEnv(cfg, 2, seed=0)
    assert env.reward_manager.names == ["forward", "ctrl_cost"]


# -- bad input --------------------------------------------------------------------------------
def test_bad_actions_raise_clear_errors():
    env = robolearn.make("HalfCheetah", 4, seed=0)
    with pytest.raises(ValueError, match=r"action: expected shape \(4, 6\).*got \(4, 5\)"):
        env.step(torch.zeros(4, 5))
    with pytest.raises(ValueError, match=r"expected shape \(4, 6\)"):
        env.step(torch.zeros(6))
    with pytest.raises(TypeError, match="floating-point dtype, got torch.int64"):
        env.step(torch.zeros(4, 6, dtype=torch.long))
    bad = torch.zeros(4, 6)
    bad[2, 3] = float("nan")
    with pytest.raises(ValueError, match="non-finite value nan at world 2, index 3"):
        env.step(bad)
    bad[2, 3] = float("inf")
    with pytest.raises(ValueError, match="non-finite value inf at world 2, index 3"):
        env.step(bad)
    with pytest.raises(TypeError, match="expected a float tensor"):
        env.step("left")
    env.step(np.zeros((4, 6)))  # NumPy input is accepted


def test_unknown_task_override_and_backend():
    with pytest.raises(ValueError, match=r"unknown task 'HalfCheeta'.*did you mean HalfCheetah.*known tasks: .*HalfCheetah"):
        robolearn.make("HalfCheeta")
    with pytest.raises(ValueError, match="TaskCfg has no field 'episode_len'; choices: .*episode_length"):
        robolearn.make("HalfCheetah", episode_len=5)
    with pytest.raises(ValueError, match="'rewards.speed' is not in task 'HalfCheetah'; choices: forward, ctrl_cost"):
        robolearn.make("HalfCheetah", rewards__speed__weight=2.0)
    env = robolearn.make("HalfCheetah", 1, rewards__ctrl_cost__weight=-0.5)
    assert env.reward_manager.weights.tolist() == [1.0, -0.5]
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        robolearn.make("HalfCheetah", backend="gpu")
    with pytest.raises(ValueError, match="num_envs: expected an integer >= 1, got 0"):
        robolearn.make("HalfCheetah", 0)
    with pytest.raises(ValueError, match="MujocoBackend runs on the CPU"):
        robolearn.make("HalfCheetah", device="cuda")
    with pytest.raises(ValueError, match="observations: unknown group 'actor'"):
        cfg = task_cfg("HalfCheetah")
        cfg.observations = {"actor": cfg.observations["policy"]}
        BatchedEnv(cfg, 1)
    with pytest.raises(ValueError, match="unknown actuator 'hip'"):
        cfg = task_cfg("HalfCheetah")
        cfg.actions = {"a": ActionTerm(actuators=["hip"])}
        BatchedEnv(cfg, 1)


def test_mjcf_that_does_not_compile_names_the_task():
    with pytest.raises(ModelError, match="MJCF of task 'Broken' did not compile"):
        cfg = task_cfg("HalfCheetah")
        cfg.mjcf = "<mujoco><worldbody><body><joint/><geom type='box' size='0 0 0'/></body></worldbody></mujoco>"
        BatchedEnv(cfg, 1, task_id="Broken")
    with pytest.raises(ModelError, match="does not exist"):
        cfg = task_cfg("HalfCheetah", mjcf="/nope/robot.xml")
        BatchedEnv(cfg, 1)


# -- divergence -------------------------------------------------------------------------------
def test_diverging_world_is_reset_and_counted_not_crashing(caplog):
    env = robolearn.make("HalfCheetah", 4, seed=0)
    damping = env.sim.get_model_field("damping")
    damping[1] = -1e6
    env.sim.set_model_field("damping", damping)
    seen = torch.zeros(4, dtype=torch.bool)
    for a in _actions(4, 6, 30, seed=6):
        obs, rew, term, trunc, info = env.step(a)
        seen |= info["diverged"]
        assert torch.isfinite(obs["policy"]).all() and torch.isfinite(rew).all()
        assert (trunc | ~info["diverged"]).all()  # a diverged world ends as a truncation
        assert not term[info["diverged"]].any()
    assert seen.tolist() == [False, True, False, False]
    assert info["num_diverged"] >= 1 and env.num_diverged == info["num_diverged"]
    assert "diverged" in caplog.text


# -- every registered task --------------------------------------------------------------------
@pytest.mark.parametrize("task_id", robolearn.list_tasks())
def test_every_task_resets_and_steps_without_nan(task_id):
    env = robolearn.make(task_id, 8, seed=0, episode_length=150)
    obs, _ = env.reset()
    lo = torch.clamp(env.ctrl_low, min=-1.0).float()
    hi = torch.clamp(env.ctrl_high, max=1.0).float()
    for a in torch.rand(300, 8, env.action_dim, generator=torch.Generator().manual_seed(0)):
        obs, rew, term, trunc, info = env.step(lo + (hi - lo) * a)
        for group, value in obs.items():
            assert torch.isfinite(value).all(), f"{task_id}: non-finite {group} observation"
        assert torch.isfinite(rew).all()
    assert env.num_diverged == 0


def test_critic_defaults_to_policy_plus_privileged():
    cfg = task_cfg("HalfCheetah")
    cfg.observations["policy"].terms["joint_vel"].noise = NoiseCfg("gaussian", 0.3)
    cfg.observations["privileged"] = ObsGroup({"root_x": ObsTerm(mdp.qpos, params={"start": 0, "stop": 1})})
    env = BatchedEnv(cfg, 3, seed=0, dtype=torch.float64)
    obs, *_ = env.step(torch.zeros(3, 6))
    assert set(obs) == {"policy", "privileged", "critic"}
    assert env.obs_dims["critic"] == 17 + 1
    # the critic sees the clean state: no observation noise
    clean = torch.cat([env.sim.qpos[:, 1:], env.sim.qvel, env.sim.qpos[:, :1]], dim=1)
    torch.testing.assert_close(obs["critic"], clean)
    assert not torch.allclose(obs["policy"][:, 8:], env.sim.qvel)


def test_image_group_keeps_its_shape():
    cfg = task_cfg("Cartpole-Balance")
    cfg.observations["image"] = ObsGroup({"rgb": ObsTerm(mdp.camera_image, params={"camera": "fixed", "width": 32, "height": 24})})
    env = BatchedEnv(cfg, 2, seed=0)
    obs, *_ = env.step(torch.zeros(2, 1))
    assert obs["image"].shape == (2, 24, 32, 3) and env.obs_shapes["image"] == (24, 32, 3)
    assert obs["image"].dtype == torch.float32 and 0 <= obs["image"].min() and obs["image"].max() <= 1
    assert obs["image"].std() > 0.01  # a scene, not a blank frame
    env.close()


def test_policy_spec_describes_observations_and_actions():
    import json

    env = robolearn.make("HalfCheetah", 2, seed=0)
    spec = json.loads(json.dumps(env.policy_spec()))  # JSON-serialisable as it is
    assert spec["task_id"] == "HalfCheetah" and spec["control_rate_hz"] == pytest.approx(20.0)
    policy = spec["observations"]["policy"]
    assert policy["shape"] == [17]
    assert [(t["name"], t["start"], t["dim"]) for t in policy["terms"]] == [("joint_pos", 0, 8), ("joint_vel", 8, 9)]
    (act,) = spec["actions"]
    assert act["kind"] == "torque" and act["dim"] == 6
    assert act["actuators"] == ["bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"]
    assert spec["joint_order"] == act["joints"] == ["bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot"]
    assert act["low"] == [-1.0] * 6 and act["high"] == [1.0] * 6 and act["scale"] == [1.0] * 6
    assert spec["qpos_joints"][:3] == ["rootx", "rootz", "rooty"]


@pytest.mark.parametrize("backend", ["mujoco", "reference"])
def test_env_state_dict_resumes_exactly(backend, tmp_path):
    from robolearn.runners import load_checkpoint, save_checkpoint

    cfg = task_cfg("HalfCheetah", episode_length=30)
    cfg.observations["history"] = ObsGroup({"pos": ObsTerm(mdp.qpos, params={"start": 1})}, history_length=3)
    cfg.observations["policy"].terms["joint_vel"].noise = NoiseCfg("gaussian", 0.1)
    env = BatchedEnv(cfg, 4, seed=2, backend=backend)
    env.sim.set_model_field("mass", env.sim.get_model_field("mass") * torch.linspace(0.8, 1.2, 4)[:, None].double())
    acts = _actions(4, 6, 80, seed=9)
    for a in acts[:37]:
        env.step(a)
    save_checkpoint(tmp_path / "env.pt", {"env": env.state_dict()})
    rest = _rollout(env, acts[37:])
    fresh = BatchedEnv(cfg, 4, seed=123, backend=backend)  # different seed and fields: all restored
    fresh.load_state_dict(load_checkpoint(tmp_path / "env.pt")["env"])
    again = _rollout(fresh, acts[37:])
    assert torch.equal(rest[0], again[0]) and torch.equal(rest[1], again[1])
    with pytest.raises(ValueError, match="saved for 4 worlds, this env has 2"):
        BatchedEnv(cfg, 2, seed=0, backend=backend).load_state_dict(load_checkpoint(tmp_path / "env.pt")["env"])


def test_success_is_judged_on_the_last_state_of_each_episode():
    up = robolearn.make("Cartpole-Balance", 3, seed=0, episode_length=5)
    down = robolearn.make("Cartpole-Swingup", 3, seed=0, episode_length=5)
    for _ in range(5):
        *_, info_up = up.step(torch.zeros(3, 1))
        *_, info_down = down.step(torch.zeros(3, 1))
    assert info_up["episode"]["success"].tolist() == [True] * 3  # still within 10 degrees of upright
    assert info_down["episode"]["success"].tolist() == [False] * 3  # still hanging
    assert "success" not in robolearn.make("HalfCheetah", 1, episode_length=1).step(torch.zeros(1, 6))[4]["episode"]


def test_noise_of_several_terms_keeps_each_terms_kind_and_scale():
    # One draw per noise kind serves every term of the group; each term must keep its own scale.
    cfg = task_cfg("HalfCheetah")
    terms = cfg.observations["policy"].terms
    terms["joint_pos"].noise = NoiseCfg("gaussian", 0.05)
    terms["joint_vel"].noise = NoiseCfg("gaussian", 2.0)
    terms["pos_uniform"] = ObsTerm(mdp.qpos, params={"start": 1}, noise=NoiseCfg("uniform", 0.3))
    env = BatchedEnv(cfg, 2048, seed=0, dtype=torch.float64)
    obs = env.obs["policy"]
    clean_pos, clean_vel = env.sim.qpos[:, 1:], env.sim.qvel
    assert abs(float((obs[:, :8] - clean_pos).std()) - 0.05) < 0.003
    assert abs(float((obs[:, 8:17] - clean_vel).std()) - 2.0) < 0.1
    uniform = obs[:, 17:] - clean_pos
    assert float(uniform.abs().max()) <= 0.3 and abs(float(uniform.std()) - 0.3 / 3**0.5) < 0.01
    # the two Gaussian terms draw independent numbers, not one scaled copy of the other
    assert abs(float(torch.corrcoef(torch.stack([(obs[:, 0] - clean_pos[:, 0]), (obs[:, 8] - clean_vel[:, 0])]))[0, 1])) < 0.1


def test_a_full_reset_refills_every_flat_history_with_the_first_frame():
    """``env.reset()`` after steps starts every world's episode: a stacked flat group holds the new
    first frame in every slot, not the last episode's frames (a partial reset by index does the same)."""
    cfg = task_cfg("HalfCheetah", episode_length=30)
    cfg.observations["history"] = ObsGroup({"pos": ObsTerm(mdp.qpos, params={"start": 1})}, history_length=3)
    env = BatchedEnv(cfg, 2, seed=0)
    env.reset()
    for a in _actions(2, 6, 5, seed=1):
        env.step(a)
    obs, _ = env.reset()
    frame = env.sim.qpos[:, 1:].to(obs["history"].dtype)
    assert torch.equal(obs["history"], frame.repeat(1, 3))
    obs = env.step(torch.zeros(2, 6))[0]  # the window then rolls: two copies of the first frame, then the new one
    torch.testing.assert_close(obs["history"][:, : 2 * frame.shape[1]], frame.repeat(1, 2))
