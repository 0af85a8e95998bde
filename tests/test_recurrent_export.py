"""Recurrent policies exported with their hidden state as explicit inputs and outputs.

The exported graph takes ``obs``, ``h_in`` (, ``c_in``) and returns ``action``, ``h_out`` (,
``c_out``), batch first; the manifest (version 3) lists each state; the deploy side carries the state
from call to call and starts it over at every discontinuity; ``load_policy`` of a recurrent run
carries it too. Most tests use a small GRUCell policy written here to the contract of
``robolearn.nn.recurrent.RecurrentPolicy``; the last ones use recurrent PPO's own module.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import robolearn
from robolearn.export.exporter import ExportError, _content_hash, export_policy, load_manifest, read_manifest
from robolearn.sim2real.deploy.policy import PolicyLoadError, load_exported
from robolearn.sim2real.deploy.runtime import DeployRuntime
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig
from robolearn.sim2real.robots.base import Reading
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.spec.manifest import SpecError, StateSpec
from robolearn.spec.schema import schema_errors

HIDDEN = 16


class GRUPolicy(nn.Module):
    """``(obs, h) -> (tanh(head(h')), h')`` with ``h' = GRUCell(obs, h)``: the recurrent contract."""

    state_names = ("h",)
    state_shapes = ((HIDDEN,),)

    def __init__(self, obs_dim: int = 5, act_dim: int = 1, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.cell = nn.GRUCell(obs_dim, HIDDEN)
        self.head = nn.Linear(HIDDEN, act_dim)
        with torch.no_grad():  # a long memory: the state matters for many steps
            self.cell.weight_hh.mul_(3.0)

    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        return (torch.zeros(batch, HIDDEN),)

    def forward(self, obs: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.cell(obs, h)
        return torch.tanh(self.head(h)), h


class LSTMPolicy(nn.Module):
    """Two states (``h``, ``c``) through an LSTMCell, per-world shape ``(1, 8)``."""

    state_names = ("h", "c")
    state_shapes = ((1, 8), (1, 8))

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.cell = nn.LSTMCell(5, 8)
        self.head = nn.Linear(8, 1)

    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        return (torch.zeros(batch, 1, 8), torch.zeros(batch, 1, 8))

    def forward(self, obs: torch.Tensor, *states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, c = self.cell(obs, (states[0][:, 0], states[1][:, 0]))
        return self.head(h), h.unsqueeze(1), c.unsqueeze(1)


def _torch_steps(policy: nn.Module, obs: torch.Tensor, feed_back: bool = True) -> torch.Tensor:
    """Actions ``[T, B, A]`` of stepping ``obs[T, B, D]`` from the initial state (carried or not)."""
    state = policy.initial_state(obs.shape[1])
    first = state
    out = []
    with torch.no_grad():
        for t in range(obs.shape[0]):
            action, *new = policy(obs[t], *(state if feed_back else first))
            state = tuple(new)
            out.append(action)
    return torch.stack(out)


def _onnx_steps(path: Path, obs: torch.Tensor, inputs: list[str], outputs: list[str], shapes: list[tuple],
                feed_back: bool = True) -> torch.Tensor:
    """The same through ONNX Runtime: each ``*_out`` fed back as the next ``*_in`` (or zeros every step)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    zeros = [np.zeros((obs.shape[1], *s), np.float32) for s in shapes]
    state = zeros
    out = []
    for t in range(obs.shape[0]):
        action, *new = session.run(outputs, {"obs": obs[t].numpy(), **dict(zip(inputs, state if feed_back else zeros, strict=True))})
        state = new
        out.append(torch.from_numpy(action))
    return torch.stack(out)


@pytest.fixture(scope="module")
def spec() -> dict:
    return robolearn.make("Cartpole-Balance", 1, seed=0).policy_spec()


@pytest.fixture(scope="module")
def gru(tmp_path_factory: pytest.TempPathFactory, spec: dict) -> tuple[GRUPolicy, Path, dict]:
    """The GRU policy exported for Cartpole-Balance (ONNX and TorchScript) with its manifest."""
    policy = GRUPolicy().eval()
    out = tmp_path_factory.mktemp("gru")
    manifest = export_policy(policy, spec, out, parity_samples=32)
    return policy, out, manifest


# -- export ------------------------------------------------------------------------------------
def test_manifest_lists_the_state_and_the_graph_has_it_as_inputs_and_outputs(gru: tuple) -> None:
    import onnxruntime as ort

    _, out, manifest = gru
    assert manifest["manifest_version"] == 3
    assert manifest["recurrent"] == {
        "states": [{"name": "h", "input": "h_in", "output": "h_out", "shape": [HIDDEN], "dtype": "float32",
                    "initial": "zeros", "reset": "episode_start"}],
        "parity_steps": 50,
    }
    assert [i["name"] for i in manifest["inputs"]] == ["obs", "h_in"]
    assert [o["name"] for o in manifest["outputs"]] == ["action", "h_out"]
    assert manifest["inputs"][1]["shape"] == [-1, HIDDEN] and manifest["outputs"][1]["state"] == "h"
    for entry in manifest["files"].values():
        assert 0.0 <= entry["parity_max_abs_err"] <= 1e-4
    assert schema_errors(manifest["recurrent"]["states"][0], StateSpec.json_schema()) == []
    session = ort.InferenceSession(str(out / "policy.onnx"), providers=["CPUExecutionProvider"])
    ins = {i.name: i.shape for i in session.get_inputs()}
    outs = {o.name: o.shape for o in session.get_outputs()}
    assert list(ins) == ["obs", "h_in"] and list(outs) == ["action", "h_out"]
    # one dynamic batch axis, shared by every input and output
    assert {str(shape[0]) for shape in [*ins.values(), *outs.values()]} == {str(ins["obs"][0])}
    assert isinstance(ins["obs"][0], str) and ins["h_in"][1:] == [HIDDEN]
    typed = read_manifest(out)
    assert typed.recurrent and typed.states == (StateSpec("h", "h_in", "h_out", (HIDDEN,)),)


def test_onnx_stepping_with_the_state_fed_back_equals_torch(gru: tuple) -> None:
    """50 steps at a batch the export never saw: ONNX Runtime, its ``h_out`` fed back as ``h_in``,
    gives the torch module's actions within the parity tolerance; forgetting to feed it back does not."""
    policy, out, _ = gru
    obs = torch.randn(50, 3, 5, generator=torch.Generator().manual_seed(7)) * 2.0
    expected = _torch_steps(policy, obs)
    got = _onnx_steps(out / "policy.onnx", obs, ["h_in"], ["action", "h_out"], [(HIDDEN,)])
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)
    stateless = _onnx_steps(out / "policy.onnx", obs, ["h_in"], ["action", "h_out"], [(HIDDEN,)], feed_back=False)
    assert float((stateless - expected).abs().max()) > 0.1
    torch.testing.assert_close(stateless, _torch_steps(policy, obs, feed_back=False), rtol=0, atol=1e-4)
    scripted = torch.jit.load(str(out / "policy.pt"))
    torch.testing.assert_close(_torch_steps(_Scripted(scripted, policy), obs), expected, rtol=0, atol=1e-5)


class _Scripted(nn.Module):
    """A loaded TorchScript policy with the eager one's ``initial_state`` (for :func:`_torch_steps`)."""

    def __init__(self, scripted: torch.jit.ScriptModule, eager: nn.Module) -> None:
        super().__init__()
        self.scripted, self.initial_state = scripted, eager.initial_state

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.scripted(*args))


def test_two_states_export_as_h_and_c(tmp_path: Path, spec: dict) -> None:
    policy = LSTMPolicy().eval()
    manifest = export_policy(policy, spec, tmp_path, parity_samples=8, parity_steps=20)
    assert [s["name"] for s in manifest["recurrent"]["states"]] == ["h", "c"]
    assert [i["name"] for i in manifest["inputs"]] == ["obs", "h_in", "c_in"]
    assert [o["name"] for o in manifest["outputs"]] == ["action", "h_out", "c_out"]
    assert manifest["recurrent"]["parity_steps"] == 20
    obs = torch.randn(30, 2, 5, generator=torch.Generator().manual_seed(3))
    got = _onnx_steps(tmp_path / "policy.onnx", obs, ["h_in", "c_in"], ["action", "h_out", "c_out"], [(1, 8), (1, 8)])
    torch.testing.assert_close(got, _torch_steps(policy, obs), rtol=0, atol=1e-4)
    for fmt in ("onnx", "torchscript"):  # the deploy side carries both states
        deployed = load_exported(tmp_path, fmt)
        actions = [deployed(obs[t, :1].numpy()) for t in range(30)]
        torch.testing.assert_close(torch.from_numpy(np.stack(actions)), _torch_steps(policy, obs[:, :1]), rtol=0, atol=1e-4)
        assert [s.shape for s in deployed.state] == [(1, 1, 8), (1, 1, 8)]


class _NonZeroStart(GRUPolicy):
    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        return (torch.full((batch, HIDDEN), 0.5),)


class _WrongShape(GRUPolicy):
    state_shapes = ((2, HIDDEN),)


class _NoShapes(GRUPolicy):
    state_shapes = ()


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (_NonZeroStart(), "initial state h is not zeros"),
        (_WrongShape(), r"initial_state\(2\) gives h of shape \[2, 16\], expected \[2, 2, 16\]"),
        (_NoShapes(), "do not give one shape per state name"),
        (GRUPolicy(obs_dim=7), r"forward\(obs \[2, 5\], \*initial_state\(2\)\) failed"),
    ],
)
def test_exporter_refuses_a_module_that_breaks_the_contract(tmp_path: Path, spec: dict, module: nn.Module,
                                                            message: str) -> None:
    with pytest.raises(ExportError, match=message):
        export_policy(module, spec, tmp_path)
    assert not any(tmp_path.iterdir())


# -- the manifest --------------------------------------------------------------------------------
def _rewrite(folder: Path, edit: object) -> None:
    """Edit ``manifest.json`` in ``folder`` with ``edit(data)`` and re-hash it (a hand edit that passes the hash)."""
    data = json.loads((folder / "manifest.json").read_text())
    edit(data)
    data["content_hash"] = _content_hash(data)
    (folder / "manifest.json").write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (lambda d: d["recurrent"]["states"][0].update(shape=[0]), SpecError,
         r"recurrent\.states\[0\]\.shape: expected one or more sizes >= 1, got \[0\]"),
        (lambda d: d["recurrent"]["states"][0].update(shape="16"), SpecError, r"recurrent\.states\[0\]\.shape: expected a list"),
        (lambda d: d["recurrent"]["states"][0].update(dtype="float16"), SpecError,
         r"recurrent\.states\[0\]\.dtype: expected one of float32, got 'float16'"),
        (lambda d: d["recurrent"]["states"][0].update(reset="never"), SpecError,
         r"recurrent\.states\[0\]\.reset: expected one of 'episode_start', got 'never'"),
        (lambda d: d["recurrent"]["states"][0].update(output="action"), SpecError,
         r"recurrent\.states\[0\]\.output: 'action' is already used"),
        (lambda d: d["recurrent"]["states"][0].update(input="hidden_in"), ExportError,
         r"inputs: expected the tensors \['obs', 'hidden_in'\]"),
        (lambda d: d.pop("recurrent"), SpecError, r"\.recurrent: expected an object with states"),
        (lambda d: d.update(manifest_version=2), ExportError, "a version-2 manifest has no recurrent section"),
    ],
)
def test_a_bad_state_section_is_refused_naming_the_field(gru: tuple, tmp_path: Path, edit: object, error: type,
                                                         message: str) -> None:
    copy_dir = tmp_path / "edited"
    shutil.copytree(gru[1], copy_dir)
    _rewrite(copy_dir, edit)
    with pytest.raises(error, match=message):
        load_manifest(copy_dir)
    with pytest.raises(PolicyLoadError, match=message):
        load_exported(copy_dir)


def test_a_state_shape_that_is_not_the_networks_is_refused_at_load(gru: tuple, tmp_path: Path) -> None:
    copy_dir = tmp_path / "edited"
    shutil.copytree(gru[1], copy_dir)

    def edit(d: dict) -> None:
        d["recurrent"]["states"][0]["shape"] = [17]
        d["inputs"][1]["shape"] = d["outputs"][1]["shape"] = [-1, 17]

    _rewrite(copy_dir, edit)
    assert read_manifest(copy_dir).states[0].shape == (17,)  # a valid manifest ...
    with pytest.raises(PolicyLoadError, match=r"input h_in is \[batch, 16\], the manifest's recurrent state h has shape \[17\]"):
        load_exported(copy_dir)  # ... that does not describe its network


def test_feedforward_manifests_stay_version_2_and_old_ones_load(tmp_path: Path, spec: dict) -> None:
    """A policy without state is written as before (version 2, no recurrent section) and loads with
    no state; the deploy policy's reset does nothing."""
    net = nn.Sequential(nn.Linear(5, 1), nn.Tanh())
    manifest = export_policy(net, spec, tmp_path, formats=["onnx"], parity_samples=8)
    assert manifest["manifest_version"] == 2 and "recurrent" not in manifest
    assert [i["name"] for i in manifest["inputs"]] == ["obs"]
    typed = read_manifest(tmp_path)
    assert typed.states == () and not typed.recurrent and typed.to_dict()["content_hash"] == manifest["content_hash"]
    policy = load_exported(tmp_path)
    assert not policy.recurrent and policy.state == ()
    obs = np.full((1, 5), 0.3, np.float32)
    first = policy(obs)
    policy.reset()
    np.testing.assert_array_equal(policy(obs), first)
    np.testing.assert_allclose(first, net(torch.from_numpy(obs)).detach().numpy(), atol=1e-6)


# -- the deploy side -------------------------------------------------------------------------------
def test_exported_policy_carries_its_state_and_resets(gru: tuple) -> None:
    policy, out, _ = gru
    obs = torch.randn(12, 1, 5, generator=torch.Generator().manual_seed(1))
    expected = _torch_steps(policy, obs)
    for fmt in ("onnx", "torchscript"):
        deployed = load_exported(out, fmt)
        assert deployed.recurrent and [s.shape for s in deployed.state] == [(1, HIDDEN)]
        assert not deployed.state[0].any()  # the load-time probe left no state behind
        got = [deployed(obs[t].numpy()) for t in range(12)]
        torch.testing.assert_close(torch.from_numpy(np.stack(got)), expected, rtol=0, atol=1e-4)
        deployed.reset()
        assert not deployed.state[0].any()
        np.testing.assert_allclose(deployed(obs[0].numpy()), expected[0].numpy(), atol=1e-5)
        with pytest.raises(ValueError, match=r"expected arrays of shapes \[\(1, 16\)\]"):
            deployed.state = (np.zeros((1, 3)),)


def _reference(policy: nn.Module, obs: list[np.ndarray], starts: set[int]) -> list[np.ndarray]:
    """The torch module stepped on ``obs``, its state starting over at the indices in ``starts``."""
    state = policy.initial_state(1)
    actions = []
    with torch.no_grad():
        for k, o in enumerate(obs):
            if k in starts:
                state = policy.initial_state(1)
            action, *state = policy(torch.from_numpy(o).reshape(1, -1), *state)
            actions.append(action.numpy().reshape(-1))
    return actions


def test_runtime_carries_the_state_and_starts_it_over_at_discontinuities(gru: tuple) -> None:
    """On a lockstep simulated robot, the runtime's actions are the torch module stepped on the same
    observations with the state carried; after an e-stop and restart, a stale reading (hold) and a
    lost robot the state starts from zeros (carrying it across would give other actions)."""
    policy, out, _ = gru
    robot = SimulatedRobot("Cartpole-Balance", seed=0)
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.0, exit_s=0.0, stale_timeout_s=0.02),
                            clock=robot.clock)
    ran: list[int] = []  # telemetry rows whose action the policy computed
    with robot:
        for _ in range(30):
            runtime.step()
            ran.append(len(runtime.telemetry) - 1)
        runtime.estop("test")
        for _ in range(3):
            assert runtime.step() & Intervention.ESTOP
        runtime.safety.clear_estop()
        restart = len(ran)
        for _ in range(10):
            runtime.step()
            ran.append(len(runtime.telemetry) - 1)
        kept = runtime.policy.state
        obs_seen, action_seen, _ = runtime.act(robot.read())  # act() leaves the carried state alone
        np.testing.assert_array_equal(runtime.policy.state[0], kept[0])
        fresh = robot.read()
        robot.read = lambda: Reading(fresh.stamp - 0.05, fresh.joint_pos, fresh.joint_vel)  # stale, not lost
        assert runtime.step() & Intervention.STALE  # the policy does not run on a stale reading
        del robot.read
        after_stale = len(ran)
        for _ in range(10):
            runtime.step()
            ran.append(len(runtime.telemetry) - 1)
        fresh = robot.read()
        robot.read = lambda: Reading(fresh.stamp - 1.0, fresh.joint_pos, fresh.joint_vel)  # lost: nothing sent
        assert runtime.step() is None and runtime.status == "lost"
        del robot.read
        after_lost = len(ran)
        for _ in range(10):
            runtime.step()
            ran.append(len(runtime.telemetry) - 1)
    obs = [runtime.telemetry.obs[i] for i in ran]
    actions = np.stack([runtime.telemetry.actions[i] for i in ran])
    starts = (restart, after_stale, after_lost)
    expected = np.stack(_reference(policy, obs, set(starts)))
    np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-4)
    np.testing.assert_allclose(action_seen, _reference(policy, [*obs[:after_stale], obs_seen.reshape(-1)],
                                                       {restart})[-1], atol=1e-4)
    carried = np.stack(_reference(policy, obs, set()))
    for start in starts:  # each reset changed what the policy did
        assert np.abs(carried[start] - expected[start]).max() > 1e-3
    stateless = np.stack(_reference(policy, obs, set(range(len(obs)))))
    assert np.abs(stateless - expected).max() > 0.1  # and the state was carried in between


# -- recurrent PPO's own module --------------------------------------------------------------------
def _ppo_module(memory: str, spec: dict) -> nn.Module:
    """Recurrent PPO's deployable module, from an agent built through the registry (untrained)."""
    from robolearn.algos import registry
    from robolearn.algos.ppo.config import PPOConfig
    from robolearn.runners.policy import agent_spaces

    cfg = PPOConfig(memory=memory, memory_hidden=12, memory_layers=1, actor_hidden=(16,), critic_hidden=(16,))
    spaces = agent_spaces(spec)
    agent = registry.spec_of(cfg).build(cfg, spaces["obs_dims"], spaces["action_dim"], action_low=spaces["action_low"],
                                        action_high=spaces["action_high"], device="cpu", seed=0)
    return agent.policy_module()


@pytest.mark.parametrize("memory", ["gru", pytest.param("lstm", marks=pytest.mark.slow)])
def test_recurrent_ppo_module_exports_with_its_state(tmp_path: Path, spec: dict, memory: str) -> None:
    module = _ppo_module(memory, spec)
    names = ("h",) if memory == "gru" else ("h", "c")
    assert module.state_names == names
    manifest = export_policy(module, spec, tmp_path, formats=["onnx"], parity_samples=8, parity_steps=20)
    assert [(s["name"], s["shape"]) for s in manifest["recurrent"]["states"]] == [(n, [1, 12]) for n in names]
    obs = torch.randn(25, 2, 5, generator=torch.Generator().manual_seed(5)) * 2.0
    ins, outs = [f"{n}_in" for n in names], ["action", *(f"{n}_out" for n in names)]
    got = _onnx_steps(tmp_path / "policy.onnx", obs, ins, outs, [(1, 12)] * len(names))
    expected = _torch_steps(module, obs)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)
    stateless = _onnx_steps(tmp_path / "policy.onnx", obs, ins, outs, [(1, 12)] * len(names), feed_back=False)
    assert float((stateless - expected).abs().max()) > 1e-3


@pytest.fixture(scope="module")
def gru_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny recurrent PPO run (GRU), trained through the CLI's train command."""
    from robolearn.cli.main import main

    run = tmp_path_factory.mktemp("rppo") / "run"
    code = main([
        "train", "algo=ppo", "algo.memory=gru", "algo.memory_hidden=16", "total_env_steps=256", f"run_dir={run}",
        "task=Cartpole-Balance", "num_envs=8", "eval_num_envs=2", "task_overrides.episode_length=50",
        "algo.num_steps=16", "algo.actor_hidden=[32]", "algo.critic_hidden=[32]", "runner.video=false",
        "runner.console=false", "runner.tensorboard=false",
    ])
    assert code == 0
    return run


def test_load_policy_of_a_recurrent_run_carries_its_state_and_resets(gru_run: Path) -> None:
    policy = robolearn.load_policy(gru_run)
    assert policy.recurrent and policy.state == ()
    module = policy.module()
    obs = torch.randn(6, 3, 5, generator=torch.Generator().manual_seed(2))
    acts = torch.stack([policy.act({"policy": obs[t], "critic": obs[t]}) for t in range(6)])
    expected = _torch_steps(module, obs)
    torch.testing.assert_close(acts, expected, rtol=0, atol=1e-6)
    assert [tuple(s.shape) for s in policy.state] == [(3, 1, 16)] and bool(policy.state[0].any())
    assert float((acts - _torch_steps(module, obs, feed_back=False)).abs().max()) > 1e-4  # the state mattered
    with pytest.raises(ValueError, match="carried state is for 3"):
        policy.act({"policy": obs[0, :2], "critic": obs[0, :2]})
    # reset(done): the flagged worlds start over, the others keep their state
    before = copy.deepcopy(policy.state)
    policy.reset(torch.tensor([True, False, False]))
    row = policy.act({"policy": obs[0], "critic": obs[0]})
    with torch.no_grad():
        partial = (torch.cat([torch.zeros(1, 1, 16), before[0][1:]]),)
        torch.testing.assert_close(row, module(obs[0], *partial)[0], rtol=0, atol=1e-6)
    # reset(): the initial state again, for any batch
    policy.reset()
    assert policy.state == ()
    torch.testing.assert_close(policy.act({"policy": obs[0], "critic": obs[0]}), expected[0], rtol=0, atol=1e-6)
    policy.reset()
    assert policy.act({"policy": obs[0, :1], "critic": obs[0, :1]}).shape == (1, 1)


@pytest.mark.slow
def test_a_recurrent_run_exports_through_the_cli_and_deploys(gru_run: Path, tmp_path: Path) -> None:
    """train -> ``robolearn export`` -> the deploy policy acts as ``load_policy`` does, state carried."""
    from robolearn.cli.main import main

    assert main(["export", f"run={gru_run}", f"out={tmp_path}"]) == 0
    assert load_manifest(tmp_path)["recurrent"]["states"][0]["shape"] == [1, 16]
    deployed = load_exported(tmp_path)
    policy = robolearn.load_policy(gru_run)
    obs = torch.randn(20, 1, 5, generator=torch.Generator().manual_seed(4))
    for t in range(20):
        np.testing.assert_allclose(deployed(obs[t].numpy()), policy.act({"policy": obs[t], "critic": obs[t]}).numpy(),
                                   rtol=0, atol=1e-4)


def test_an_evaluation_rollout_restarts_the_loaded_policy_at_episode_ends(gru_run: Path) -> None:
    """``rollout(env, policy.act)`` finds the loaded policy's ``reset(done)``: every episode starts from
    the initial state, as replaying the rollout's observations through the module shows."""
    from robolearn.runners.rollout import rollout

    policy = robolearn.load_policy(gru_run)
    env = robolearn.make("Cartpole-Balance", 2, seed=0, episode_length=10)
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def record(step: object) -> None:
        seen.append((step.obs["policy"].clone(), step.action.clone(), (step.terminated | step.truncated).clone()))

    rollout(env, policy.act, episodes=4, max_steps=40, on_step=record)
    assert sum(int(done.sum()) for *_, done in seen) >= 4  # both worlds crossed episode ends
    module = policy.module()
    state = module.initial_state(2)
    carried = module.initial_state(2)
    differs = 0.0
    with torch.no_grad():
        for obs, action, done in seen:
            expected, *state = module(obs, *state)
            torch.testing.assert_close(action, expected, rtol=0, atol=1e-6)
            without_reset, *carried = module(obs, *carried)
            differs = max(differs, float((without_reset - expected).abs().max()))
            state = [torch.where(done.reshape(-1, 1, 1), torch.zeros_like(s), s) for s in state]
    assert differs > 1e-5  # carrying the state across episodes would have acted otherwise
