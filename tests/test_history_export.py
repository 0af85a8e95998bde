"""Policies whose input spans several observation groups: export, manifest and deployment.

PPO with ``history_encoder=conv`` reads one row, the ``policy`` group followed by the ``history``
group (``history_length`` frames, oldest first), through one normaliser. The exporter sizes the
network's input as both groups together and the manifest (version 3) lists them with their
columns; the deploy runtime builds each group from the robot's readings through the shared
observation processors and concatenates them in the manifest's order; every discontinuity restarts
the history as the env does at an episode start (every slot filled with the first frame, the last
action zero).

The task is Cartpole-Balance with a ``history`` group of its policy terms plus the last action,
stacked over 4 frames. The agent is built through the registry, untrained, with its actor's weights
drawn large enough that the history changes the action (an untrained PPO's output layer is nearly
zero, which would let a wrong frame order or fill pass). One export is shared by the module.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import robolearn
from robolearn.envs import ObsGroup, ObsTerm, mdp
from robolearn.envs.registry import _REGISTRY, register, task_cfg
from robolearn.export.exporter import ExportError, _content_hash, export_policy, load_manifest, read_manifest
from robolearn.sim2real.deploy.observations import ObservationAdapter
from robolearn.sim2real.deploy.policy import PolicyLoadError, load_exported
from robolearn.sim2real.deploy.runtime import DeployMismatch, DeployRuntime, check_robot
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig
from robolearn.sim2real.robots.base import Reading
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.spec import PolicySpec
from robolearn.spec.manifest import SpecError, SpecMismatch

TASK = "Test-History-Cartpole"
FRAMES = 4
POLICY_DIM = 5  # cart_pos, pole cos/sin, cart_vel, pole_ang_vel
FRAME_DIM = POLICY_DIM + 1  # the policy terms and the last action
OBS_DIM = POLICY_DIM + FRAMES * FRAME_DIM


def _history_cartpole() -> Any:
    """Cart-pole with a ``history`` group: the policy terms (one scaled) and the last action, 4 frames."""
    cfg = task_cfg("Cartpole-Balance")
    terms = {name: dataclasses.replace(term) for name, term in cfg.observations["policy"].terms.items()}
    terms["cart_vel"] = dataclasses.replace(terms["cart_vel"], scale=0.5)  # the history has its own processing
    terms["last"] = ObsTerm(mdp.last_action)
    cfg.observations["history"] = ObsGroup(terms=terms, history_length=FRAMES)
    return cfg


@pytest.fixture(scope="module")
def task() -> str:
    if TASK not in _REGISTRY:
        register(TASK, _history_cartpole, "cart-pole with a 4-frame history group (history export tests)")
    return TASK


def _agent(spec: dict, seed: int = 0) -> Any:
    """A PPO agent with the temporal-conv history encoder, built through the registry (untrained),
    its actor's weights redrawn so that every input column moves the action."""
    from robolearn.algos import registry
    from robolearn.algos.ppo.config import PPOConfig
    from robolearn.runners.policy import agent_spaces

    cfg = PPOConfig(history_encoder="conv", history_frames=FRAMES, history_channels=(8,), history_kernel=2,
                    actor_hidden=(16,), critic_hidden=(16,))
    spaces = agent_spaces(spec)
    agent = registry.spec_of(cfg).build(cfg, spaces["obs_dims"], spaces["action_dim"], action_low=spaces["action_low"],
                                        action_high=spaces["action_high"], device="cpu", seed=seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in (agent.actor_encoder, agent.actor):
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return agent


@pytest.fixture(scope="module")
def exported(task: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, nn.Module, Path, dict, dict]:
    """The agent, its deployable module, the export folder (ONNX and TorchScript), the manifest, the spec."""
    spec = robolearn.make(task, 1, seed=0).policy_spec()
    agent = _agent(spec)
    module = agent.policy_module()
    out = tmp_path_factory.mktemp("history")
    manifest = export_policy(module, spec, out, parity_samples=64)
    return agent, module, out, manifest, spec


# -- export and manifest -----------------------------------------------------------------------------
def test_the_manifest_lists_both_groups_with_their_columns(exported: tuple) -> None:
    agent, module, out, manifest, _ = exported
    assert module.obs_groups == ("policy", "history")
    assert manifest["manifest_version"] == 3 and "recurrent" not in manifest
    obs = manifest["inputs"][0]
    assert obs["name"] == "obs" and obs["shape"] == [-1, OBS_DIM] and "group" not in obs
    assert [(g["group"], g["start"], g["dim"], g["history_length"]) for g in obs["groups"]] == [
        ("policy", 0, POLICY_DIM, 0), ("history", POLICY_DIM, FRAMES * FRAME_DIM, FRAMES)]
    assert [t["name"] for t in obs["groups"][1]["terms"]] == ["cart_pos", "pole_cos_sin", "cart_vel", "pole_ang_vel", "last"]
    typed = read_manifest(out)
    assert typed.obs_groups == ("policy", "history") and typed.obs_group == "policy" and typed.multi_group
    assert typed.obs_dim == OBS_DIM and typed.group_columns() == {"policy": (0, 5), "history": (5, OBS_DIM)}
    assert typed.to_dict()["content_hash"] == manifest["content_hash"]  # it round-trips
    assert all(a["parity_max_abs_err"] <= 1e-4 for a in manifest["files"].values())


def test_onnx_and_torchscript_match_torch_on_the_two_group_row(exported: tuple) -> None:
    """The exported networks read the whole row; the agent's own act_inference on the dict is the module."""
    import onnxruntime as ort

    agent, module, out, _, _ = exported
    obs = torch.randn(33, OBS_DIM, generator=torch.Generator().manual_seed(7)) * 2.0
    with torch.no_grad():
        expected = module(obs)
    session = ort.InferenceSession(str(out / "policy.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs"] and session.get_inputs()[0].shape[1] == OBS_DIM
    torch.testing.assert_close(torch.from_numpy(session.run(None, {"obs": obs.numpy()})[0]), expected, rtol=0, atol=1e-5)
    for fmt in ("onnx", "torchscript"):
        deployed = load_exported(out, fmt)
        assert deployed.obs_dim == OBS_DIM and not deployed.recurrent
        got = np.concatenate([deployed(obs[i : i + 1].numpy()) for i in range(5)])
        np.testing.assert_allclose(got, expected[:5].numpy(), rtol=0, atol=1e-5)
    agent_actions = agent.act_inference({"policy": obs[:, :POLICY_DIM], "history": obs[:, POLICY_DIM:]})
    torch.testing.assert_close(agent_actions, expected, rtol=0, atol=1e-6)
    # the history columns matter, frame by frame: reversing the frames changes the action
    frames = obs[:, POLICY_DIM:].reshape(-1, FRAMES, FRAME_DIM).flip(1).reshape(-1, FRAMES * FRAME_DIM)
    with torch.no_grad():
        flipped = module(torch.cat([obs[:, :POLICY_DIM], frames], 1))
    assert float((flipped - expected).abs().max()) > 1e-2


def test_the_exporter_reads_the_modules_groups_and_refuses_privileged_ones(exported: tuple, tmp_path: Path) -> None:
    _, module, _, _, spec = exported
    net = nn.Linear(POLICY_DIM + 10, 1)
    net.obs_groups = ("policy", "critic")
    with pytest.raises(ValueError, match=r"exported policy: reads observation group\(s\) \['critic'\]"):
        export_policy(net, spec, tmp_path)
    with pytest.raises(ValueError, match=r"obs_group: 'history' was given, but the module's input row reads \['policy', 'history'\]"):
        export_policy(module, spec, tmp_path, obs_group="history")
    plain = robolearn.make("Cartpole-Balance", 1, seed=0).policy_spec()
    with pytest.raises(ValueError, match="obs_groups: the spec has no group 'history'"):
        export_policy(module, plain, tmp_path)
    assert not any(tmp_path.iterdir())  # nothing written


def _rewrite(folder: Path, edit: Any) -> None:
    """Edit ``manifest.json`` in ``folder`` with ``edit(data)`` and re-hash it (a hand edit that passes the hash)."""
    data = json.loads((folder / "manifest.json").read_text())
    edit(data)
    data["content_hash"] = _content_hash(data)
    (folder / "manifest.json").write_text(json.dumps(data))


def _groups(d: dict) -> list:
    return d["inputs"][0]["groups"]


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (lambda d: _groups(d)[1].update(start=4), SpecError, r"inputs\[0\]\.groups\[1\]\.start: expected 5 \(the previous groups' width\), got 4"),
        (lambda d: _groups(d)[1].update(dim=18), SpecError, r"inputs\[0\]\.groups\[1\]\.dim: expected 24 \(policy_spec\.observations\.history's width\), got 18"),
        (lambda d: _groups(d)[1].update(group="image"), SpecError, r"inputs\[0\]\.groups\[1\]\.group: expected a group of policy_spec\.observations"),
        (lambda d: _groups(d)[1].update(group="policy"), SpecError, r"inputs\[0\]\.groups\[1\]\.group: 'policy' repeats"),
        (lambda d: _groups(d)[0].update(frames=3), SpecError, r"inputs\[0\]\.groups\[0\]\.frames: not a field of an input group"),
        (lambda d: _groups(d).pop(), SpecError, r"inputs\[0\]\.groups: expected a list of two or more groups"),
        (lambda d: d["inputs"][0].update(shape=[-1, 28]), SpecError, r"inputs\[0\]\.shape: expected \[-1, 29\]"),
        (lambda d: d.update(manifest_version=2), ExportError, r"inputs\[0\]\.groups: a version-2 manifest has one input group"),
        (lambda d: d["inputs"][0].pop("groups"), ExportError, r"malformed \(KeyError: 'group'\)"),
    ],
)
def test_a_bad_groups_section_is_refused_naming_the_field(exported: tuple, tmp_path: Path, edit: Any, error: type,
                                                          message: str) -> None:
    copy_dir = tmp_path / "edited"
    shutil.copytree(exported[2], copy_dir)
    _rewrite(copy_dir, edit)
    with pytest.raises(error, match=message):
        load_manifest(copy_dir)
    with pytest.raises(PolicyLoadError, match=message):
        load_exported(copy_dir)


def test_a_privileged_group_in_the_manifest_is_refused(exported: tuple, tmp_path: Path) -> None:
    """A hand-edited manifest that feeds a critic group to the network is refused, naming the group
    (the spec's critic group added too, so that only the deployability check can refuse it)."""
    copy_dir = tmp_path / "edited"
    shutil.copytree(exported[2], copy_dir)

    def edit(d: dict) -> None:
        d["policy_spec"]["observations"]["critic"] = d["policy_spec"]["observations"]["policy"]
        _groups(d)[1].update(group="critic", dim=POLICY_DIM)
        d["inputs"][0]["shape"] = [-1, 2 * POLICY_DIM]

    _rewrite(copy_dir, edit)
    with pytest.raises(SpecError, match=r"groups\[1\]\.group: exported policy: reads observation group\(s\) \['critic'\]"):
        load_manifest(copy_dir)


def test_groups_the_robot_or_env_does_not_match_are_refused(exported: tuple, task: str) -> None:
    """The manifest's groups are compared with an env's spec (the history group and its length), and
    every term of every group the robot cannot give is listed before anything moves."""
    _, _, out, _, _ = exported
    manifest = read_manifest(out)
    plain = PolicySpec.from_dict(robolearn.make("Cartpole-Balance", 1, seed=0).policy_spec())
    with pytest.raises(SpecMismatch, match=r"observations\.history"):
        manifest.check_compatible(plain)
    shorter = PolicySpec.from_dict(robolearn.make(task, 1, seed=0, observations__history__history_length=3).policy_spec())
    assert any("history_length" in m for m in shorter.mismatches(manifest.spec, ["history"]))
    with pytest.raises(SpecMismatch, match=r"history"):
        manifest.check_compatible(shorter)
    manifest.check_compatible(PolicySpec.from_dict(robolearn.make(task, 1, seed=0).policy_spec()))  # its own task: fine
    robot = SimulatedRobot(task, seed=0)
    robot.features = dataclasses.replace(robot.features, joints=("slider", "pole"))  # no joint named "hinge"
    problems = check_robot(manifest.spec, manifest.obs_groups, robot.features)
    assert any(p.startswith("observations.policy.pole_cos_sin:") for p in problems)
    assert any(p.startswith("observations.history.pole_cos_sin:") for p in problems)
    assert any(p.startswith("observations.history.pole_ang_vel:") for p in problems)
    with pytest.raises(DeployMismatch, match=r"observations\.history\.pole_cos_sin"):
        DeployRuntime(load_exported(out), robot)


# -- deployment ---------------------------------------------------------------------------------------
def _restart_frame(frame: torch.Tensor) -> torch.Tensor:
    """A history frame as the env builds it at an episode start: the last action is zero."""
    out = frame.clone()
    out[:, POLICY_DIM:] = 0.0
    return out


def test_deploy_acts_as_the_agent_on_the_envs_observations_and_restarts_the_history(exported: tuple, task: str) -> None:
    """On a lockstep simulated robot the runtime's observation is the env's (both groups, frame order,
    the history's fill at a fresh start) and its action the agent's act_inference on the env's own
    observation dict. After an e-stop and restart, and after a lost robot, the history starts over
    (every frame the current one, the last action zero) as it does at an env episode start; carrying
    it over would have given other actions."""
    agent, _, out, _, _ = exported
    robot = SimulatedRobot(task, seed=0)
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.0, exit_s=0.0, stale_timeout_s=0.02),
                            clock=robot.clock)
    assert runtime.adapter.groups == ("policy", "history")
    window = torch.zeros(1, FRAMES * FRAME_DIM)  # the history the runtime should hold, from the env's frames
    restarts: list[int] = []
    checked = 0

    def policy_steps(n: int, env_fresh: bool) -> None:
        """``n`` policy steps from a (re)start of the runtime; ``env_fresh``: the env's episode starts too."""
        nonlocal window, checked
        for k in range(n):
            env_obs = {g: robot.env.obs[g].to(torch.float32).clone() for g in ("policy", "history")}
            frame = env_obs["history"][:, -FRAME_DIM:]  # the env's newest frame
            if k == 0:  # the runtime starts over: every slot the current frame, the last action zero
                window = _restart_frame(frame).repeat(1, FRAMES)
                restarts.append(len(runtime.telemetry))
                carried = agent.act_inference(env_obs)
            else:
                window = torch.cat([window[:, FRAME_DIM:], frame], 1)
            if env_fresh:  # the env's own history is the reference: its fill at reset is the runtime's
                torch.testing.assert_close(window, env_obs["history"], rtol=0, atol=1e-6)
            expected = agent.act_inference({"policy": env_obs["policy"], "history": window})
            assert runtime.step() == 0
            row = torch.from_numpy(runtime.telemetry.obs[-1])
            torch.testing.assert_close(row, torch.cat([env_obs["policy"], window], 1)[0], rtol=0, atol=1e-5)
            np.testing.assert_allclose(runtime.telemetry.actions[-1], expected[0].numpy(), rtol=0, atol=1e-4)
            assert float(expected.abs().max()) < 1.0  # inside the action clip: the env's last action is the policy's
            if k == 0 and not env_fresh:
                assert float((carried - expected).abs().max()) > 1e-3  # the restart changed the action
                last_actions = runtime.telemetry.obs[-1][POLICY_DIM + FRAME_DIM - 1 :: FRAME_DIM]
                assert last_actions.shape == (FRAMES,) and not last_actions.any()
            checked += 1

    with robot:
        policy_steps(25, env_fresh=True)
        runtime.estop("test")
        for _ in range(3):
            assert runtime.step() & Intervention.ESTOP
        runtime.safety.clear_estop()
        policy_steps(15, env_fresh=False)
        fresh = robot.read()
        robot.read = lambda: Reading(fresh.stamp - 1.0, fresh.joint_pos, fresh.joint_vel)  # lost: nothing sent
        assert runtime.step() is None and runtime.status == "lost"
        del robot.read
        policy_steps(15, env_fresh=False)
    assert checked == 55 and len(restarts) == 3


def test_act_does_not_advance_the_history(exported: tuple, task: str) -> None:
    _, _, out, _, _ = exported
    robot = SimulatedRobot(task, seed=1)
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.0, exit_s=0.0), clock=robot.clock)
    with robot:
        for _ in range(6):
            runtime.step()
        before = runtime.adapter.history_state()
        reading = robot.read()
        first = runtime.act(reading)
        second = runtime.act(reading)
        np.testing.assert_array_equal(first[0], second[0])
        np.testing.assert_array_equal(first[1], second[1])
        assert all(a is b for a, b in zip(runtime.adapter.history_state(), before, strict=True))
        # act()'s observation is the history advanced by this reading's frame: the older frames shift
        window = before[1].reshape(1, -1).numpy()
        np.testing.assert_array_equal(first[0][:, POLICY_DIM : OBS_DIM - FRAME_DIM], window[:, FRAME_DIM:])
        step_obs = runtime.telemetry.obs[-1]
        runtime.step()
        np.testing.assert_array_equal(runtime.telemetry.obs[-1], first[0][0])  # the step then sees the same row
        assert not np.array_equal(step_obs, first[0][0])


def test_the_adapter_concatenates_the_groups_in_the_given_order(exported: tuple, task: str) -> None:
    """One adapter over (history, policy) is the two single-group adapters concatenated in that order."""
    spec = read_manifest(exported[2]).spec
    robot = SimulatedRobot(task, seed=2)
    both = ObservationAdapter(spec, ("history", "policy"), robot.features)
    history = ObservationAdapter(spec, "history", robot.features)
    policy = ObservationAdapter(spec, "policy", robot.features)
    last = np.array([0.3])
    with robot:
        for _ in range(5):
            reading = robot.read()
            row = both(reading, last)
            np.testing.assert_array_equal(row, np.concatenate([history(reading, last), policy(reading, last)], 1))
            robot.send(np.array([0.2]))
    with pytest.raises(KeyError, match="observations.image"):
        ObservationAdapter(spec, ("policy", "image"), robot.features)


# -- load_policy ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def history_run(task: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny PPO run with the history encoder, trained through the CLI's train command."""
    from robolearn.cli.main import main

    run = tmp_path_factory.mktemp("hppo") / "run"
    code = main([
        "train", "algo=ppo", "algo.history_encoder=conv", f"algo.history_frames={FRAMES}", "algo.history_channels=[8]",
        "algo.history_kernel=2", "total_env_steps=128", f"run_dir={run}", f"task={task}", "num_envs=8",
        "eval_num_envs=2", "task_overrides.episode_length=50", "algo.num_steps=16", "algo.actor_hidden=[16]",
        "algo.critic_hidden=[16]", "runner.video=false", "runner.console=false", "runner.tensorboard=false",
    ])
    assert code == 0
    return run


def test_load_policy_of_a_history_run_acts_from_the_obs_dict(history_run: Path, task: str) -> None:
    policy = robolearn.load_policy(history_run)
    assert policy.obs_groups == ("policy", "history") and not policy.recurrent
    env = robolearn.make(task, 3, seed=0)
    env.reset()
    module = policy.module()
    for _ in range(3):
        obs = env.obs
        action = policy.act(obs)
        with torch.no_grad():
            expected = module(torch.cat([obs["policy"], obs["history"]], 1).to(torch.float32))
        torch.testing.assert_close(action, expected, rtol=0, atol=1e-6)
        env.step(action)
    with pytest.raises(KeyError, match=r"the policy reads the groups \['policy', 'history'\]; \['history'\] missing"):
        policy.act({"policy": obs["policy"]})


@pytest.mark.slow
def test_a_history_run_exports_through_the_cli_and_deploys(history_run: Path, tmp_path: Path) -> None:
    """train -> ``robolearn export`` -> the deploy policy acts as ``load_policy`` does on the two groups."""
    from robolearn.cli.main import main

    assert main(["export", f"run={history_run}", f"out={tmp_path}"]) == 0
    assert [g["group"] for g in load_manifest(tmp_path)["inputs"][0]["groups"]] == ["policy", "history"]
    deployed = load_exported(tmp_path)
    policy = robolearn.load_policy(history_run)
    obs = torch.randn(10, 1, OBS_DIM, generator=torch.Generator().manual_seed(4))
    for t in range(10):
        np.testing.assert_allclose(
            deployed(obs[t].numpy()),
            policy.act({"policy": obs[t, :, :POLICY_DIM], "history": obs[t, :, POLICY_DIM:]}).numpy(), rtol=0, atol=1e-4)


# -- a recurrent policy with a history encoder ------------------------------------------------------------
def test_a_recurrent_history_policy_exports_with_its_state_and_both_groups(task: str, tmp_path: Path) -> None:
    """GRU memory after the history encoder: the manifest has the state and the two groups, the exported
    network stepped with the state fed back matches torch, and ``LoadedPolicy`` steps the module on the
    dict's groups. TorchScript only: a second dynamo ONNX export would double this test's time (the
    multi-group ONNX graph is checked above)."""
    from robolearn.algos import registry
    from robolearn.algos.ppo.config import PPOConfig
    from robolearn.runners.policy import LoadedPolicy, agent_spaces

    env = robolearn.make(task, 2, seed=0)
    spec = env.policy_spec()
    cfg = PPOConfig(history_encoder="conv", history_frames=FRAMES, history_channels=(8,), history_kernel=2,
                    memory="gru", memory_hidden=8, actor_hidden=(16,), critic_hidden=(16,))
    spaces = agent_spaces(spec)
    agent = registry.spec_of(cfg).build(cfg, spaces["obs_dims"], spaces["action_dim"], action_low=spaces["action_low"],
                                        action_high=spaces["action_high"], device="cpu", seed=0)
    module = agent.policy_module()
    manifest = export_policy(module, spec, tmp_path, formats=["torchscript"], parity_samples=4, parity_steps=8)
    assert manifest["manifest_version"] == 3 and manifest["recurrent"]["states"][0]["shape"] == [1, 8]
    assert [g["group"] for g in manifest["inputs"][0]["groups"]] == ["policy", "history"]
    assert [i["name"] for i in manifest["inputs"]] == ["obs", "h_in"]
    typed = read_manifest(tmp_path)
    assert typed.recurrent and typed.obs_groups == ("policy", "history")
    deployed = load_exported(tmp_path, "torchscript")
    assert deployed.recurrent and deployed.obs_dim == OBS_DIM
    loaded = LoadedPolicy(agent, None, spec, tmp_path)  # the run's config and checkpoint are not needed to act
    assert loaded.recurrent and loaded.obs_groups == ("policy", "history")
    env.reset()
    h_torch = module.initial_state(2)
    for _ in range(5):
        row = torch.cat([env.obs["policy"], env.obs["history"]], 1).to(torch.float32)
        with torch.no_grad():
            expected, *h_torch = module(row, *h_torch)
        np.testing.assert_allclose(deployed(row[:1].numpy()), expected[:1].numpy(), rtol=0, atol=1e-5)  # world 0
        action = loaded.act(env.obs)
        torch.testing.assert_close(action, expected, rtol=0, atol=1e-6)
        env.step(action)
    assert bool(h_torch[0].any())  # the state was carried
