"""Export and deployment of chunked generative policies (issue 14).

The exported network is the sampler: ``obs`` (stacked frames) and ``noise`` in, the env-unit chunk
out, with a fixed number of steps; parity is checked at non-zero noise; the manifest (version 4)
records the chunk execution and the sampler, and only chunked policies change the manifest layout;
the deploy runtime runs the chunk execution (``ChunkExecutor``), plans only when it asks, draws the
noise from its own seeded generator and restarts at every discontinuity.

The models are small ``ChunkModel`` s trained for a few dozen steps on a toy chunk distribution, so
their chunks sit inside the action bounds (an untrained diffusion model's chunks are clipped to
the bounds, where any two samplers agree and parity would prove nothing).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import robolearn
from robolearn.export import (
    ExportError,
    ExportManifest,
    export_chunk_policy,
    export_generative,
    load_manifest,
    read_manifest,
)
from robolearn.export.chunked import PARITY_ATOL
from robolearn.export.exporter import Artifact, _content_hash
from robolearn.nn.generative import ChunkModel, ChunkModelSpec, ChunkSampler
from robolearn.sim2real.deploy.policy import load_exported
from robolearn.sim2real.deploy.runtime import DeployRuntime
from robolearn.sim2real.deploy.safety import Intervention, SafetyConfig
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.spec import PolicySpec, SpecError
from robolearn.spec.chunking import ChunkExecutor, ChunkSpec
from robolearn.spec.manifest import ChunkPolicySpec, SamplerSpec, StateSpec
from robolearn.spec.schema import schema_errors

TASK = "Cartpole-Balance"
OBS, ACT, H, K, HIST = 5, 1, 8, 4, 2
DATA = Path(__file__).parent / "data" / "policy_spec_v1_cartpole_dr.json"


def _train(model: str, backbone: str = "mlp", steps: int = 60, seed: int = 0) -> ChunkModel:
    """A small chunk model fitted for ``steps`` Adam steps to chunks that depend on the observation
    (a smooth ramp from ``0.6 tanh(w . obs)``), so its samples are interior to the bounds."""
    torch.manual_seed(seed)
    spec = ChunkModelSpec(model, OBS, ACT, horizon=H, obs_history=HIST, backbone=backbone, hidden=(32, 32),
                          unet_channels=(8, 16), diffusion_steps=20)
    m = ChunkModel(spec, -1.0, 1.0)
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(512, HIST * OBS, generator=gen)
    w = torch.randn(HIST * OBS, generator=gen) / 3.0
    ramp = torch.linspace(0.0, 0.3, H).reshape(1, H, 1)
    chunks = 0.6 * torch.tanh(obs @ w).reshape(-1, 1, 1) + ramp - 0.15
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(steps):
        idx = torch.randint(0, 512, (128,), generator=gen)
        loss = m.loss(obs[idx], chunks[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


@pytest.fixture(scope="module")
def spec() -> dict:
    return robolearn.make(TASK, 1, seed=0).policy_spec()


@pytest.fixture(scope="module")
def models() -> dict[str, ChunkModel]:
    return {"flow": _train("flow"), "diffusion": _train("diffusion")}


@pytest.fixture(scope="module")
def flow4(models: dict, spec: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[ChunkSampler, Path, dict]:
    """The flow sampler at 4 steps, exported (ONNX and TorchScript) with H=8, k=4, 2 frames."""
    sampler = ChunkSampler(models["flow"], 4)
    out = tmp_path_factory.mktemp("flow4")
    return sampler, out, export_chunk_policy(sampler, ChunkSpec(H, K, HIST), spec, out, parity_draws=4)


def _ort(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


# -- export parity with noise ----------------------------------------------------------------------
@pytest.mark.parametrize("model,steps", [("flow", 1), ("flow", 4), ("diffusion", 4), ("diffusion", 10), ("unet", 4)])
def test_onnx_matches_torch_at_nonzero_noise(models: dict, spec: dict, tmp_path: Path, model: str, steps: int) -> None:
    """Several noise draws, each over several observations: ONNX Runtime equals the eager sampler,
    the recorded parity error is that difference, and the chunks are interior (not all clipped).
    ``unet``: DDIM over the 1-D U-Net backbone (trained here, its own cost)."""
    sampler = ChunkSampler(_train("diffusion", "unet", steps=30) if model == "unet" else models[model], steps)
    manifest = export_chunk_policy(sampler, ChunkSpec(H, K, HIST), spec, tmp_path, formats=["onnx"], parity_draws=3)
    assert manifest["manifest_version"] == 4 and manifest["sampler"]["steps"] == steps
    kind = "flow" if model == "flow" else "diffusion"
    tolerance = PARITY_ATOL[kind]  # flow 1e-4; DDIM amplifies float32 rounding near t = T (PARITY_ATOL's doc)
    assert 0.0 <= manifest["files"]["onnx"]["parity_max_abs_err"] <= tolerance
    session = _ort(tmp_path / "policy.onnx")
    assert [i.name for i in session.get_inputs()] == ["obs", "noise"]
    gen = torch.Generator().manual_seed(123)
    obs = torch.randn(16, HIST * OBS, generator=gen)
    for _ in range(3):
        noise = torch.randn(16, H, ACT, generator=gen)
        got = session.run(["chunk"], {"obs": obs.numpy(), "noise": noise.numpy()})[0]
        with torch.no_grad():
            want = sampler(obs, noise).numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=tolerance)
        assert (np.abs(want) < 0.99).mean() > 0.5  # parity on actual values, not on the clip bounds


def test_the_noise_input_changes_the_chunk(flow4: tuple) -> None:
    """Different noise gives a different chunk through the exported graph (and TorchScript), the same
    noise the same chunk: the noise is an input, not a constant baked in at trace time."""
    sampler, out, _ = flow4
    session = _ort(out / "policy.onnx")
    ts = torch.jit.load(str(out / "policy.pt"))
    obs = torch.randn(1, HIST * OBS, generator=torch.Generator().manual_seed(5))
    a, b = torch.randn(2, 1, H, ACT, generator=torch.Generator().manual_seed(6))
    run = [session.run(["chunk"], {"obs": obs.numpy(), "noise": n.numpy()})[0] for n in (a, b, a)]
    assert np.abs(run[0] - run[1]).max() > 0.05
    np.testing.assert_array_equal(run[0], run[2])
    with torch.no_grad():
        np.testing.assert_allclose(ts(obs, b).numpy(), run[1], atol=1e-5)
        np.testing.assert_allclose(sampler(obs, b).numpy(), run[1], atol=1e-5)


class _NoiseIgnored(torch.nn.Module):
    """A sampler that draws from a fixed internal noise instead of its input (a broken contract)."""

    def __init__(self, sampler: ChunkSampler) -> None:
        super().__init__()
        self.inner, self.model, self.steps = sampler, sampler.model, sampler.steps
        self.register_buffer("fixed", torch.full((1, H, ACT), 0.3))

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.inner(obs, self.fixed.expand(obs.shape[0], H, ACT))


def test_a_sampler_that_ignores_its_noise_is_refused(models: dict, spec: dict, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="does it read its noise"):
        export_chunk_policy(_NoiseIgnored(ChunkSampler(models["flow"], 2)), ChunkSpec(H, K, HIST), spec, tmp_path,
                            formats=["onnx"])


class _BranchOnNoise(torch.nn.Module):
    """A sampler with a Python branch on its noise's sign: a trace keeps the branch of the example it
    was traced at, so the exported graph differs from torch for the noise draws of the other sign."""

    def __init__(self, sampler: ChunkSampler) -> None:
        super().__init__()
        self.inner, self.model, self.steps = sampler, sampler.model, sampler.steps

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        chunk = self.inner(obs, noise)
        return chunk + 0.1 if float(noise[0, 0, 0]) > 0 else chunk


def test_parity_is_checked_over_several_nonzero_noise_draws(models: dict, spec: dict, tmp_path: Path) -> None:
    """Parity at zero noise, or at the one noise it was traced with, would pass this graph."""
    with pytest.raises(ExportError, match=r"onnx parity: max \|exported - eager\| over 8 noise draws = 0\.1 exceeds"):
        export_chunk_policy(_BranchOnNoise(ChunkSampler(models["flow"], 1)), ChunkSpec(H, K, HIST), spec, tmp_path,
                            formats=["onnx"])


def test_export_refuses_a_sampler_that_does_not_fit(models: dict, spec: dict, tmp_path: Path) -> None:
    sampler = ChunkSampler(models["flow"], 2)
    with pytest.raises(ValueError, match="sampler horizon: the sampler's is 8, the chunk spec's is 6"):
        export_chunk_policy(sampler, ChunkSpec(6, 2, HIST), spec, tmp_path)
    with pytest.raises(ValueError, match="sampler obs_history: the sampler's is 2, the chunk spec's is 3"):
        export_chunk_policy(sampler, ChunkSpec(H, K, 3), spec, tmp_path)
    with pytest.raises(ValueError, match="parity_draws: expected >= 2"):
        export_chunk_policy(sampler, ChunkSpec(H, K, HIST), spec, tmp_path, parity_draws=1)
    with pytest.raises(SpecError, match="one_step: the one-step head is a flow sampled in 1 step"):
        export_chunk_policy(sampler, ChunkSpec(H, K, HIST), spec, tmp_path, one_step=True)


class _Learner:
    """The learner side of the contract (``sampler_module(steps, one_step)``, ``chunk``, ``one_step``)
    as ``robolearn.algos.gbc.GenerativeBC`` exposes it."""

    def __init__(self, model: ChunkModel, one_step: ChunkModel | None, sample_steps: int = 4) -> None:
        self.model, self.one_step, self.sample_steps = model, one_step, sample_steps
        self.chunk = ChunkSpec(H, K, HIST, ensemble="none")

    def sampler_module(self, steps: int | None = None, one_step: bool = False) -> ChunkSampler:
        if one_step:
            return ChunkSampler(copy.deepcopy(self.one_step), 1)
        return ChunkSampler(copy.deepcopy(self.model), steps or self.sample_steps)


def test_a_learner_exports_with_a_chosen_step_count_and_its_one_step_head(models: dict, spec: dict, tmp_path: Path) -> None:
    learner = _Learner(models["diffusion"], models["flow"])
    for steps in (1, 10):
        m = export_generative(learner, spec, tmp_path / f"s{steps}", formats=["onnx"], sampler_steps=steps, parity_draws=2)
        assert (m["sampler"]["model"], m["sampler"]["steps"], m["sampler"]["one_step"]) == ("diffusion", steps, False)
    m = export_generative(learner, spec, tmp_path / "default", formats=["onnx"], parity_draws=2)
    assert m["sampler"]["steps"] == 4
    m = export_generative(learner, spec, tmp_path / "one", formats=["onnx"], one_step=True, parity_draws=2)
    assert (m["sampler"]["model"], m["sampler"]["steps"], m["sampler"]["one_step"]) == ("flow", 1, True)
    obs, noise = torch.zeros(1, HIST * OBS), torch.randn(1, H, ACT, generator=torch.Generator().manual_seed(0))
    got = _ort(tmp_path / "one" / "policy.onnx").run(["chunk"], {"obs": obs.numpy(), "noise": noise.numpy()})[0]
    with torch.no_grad():  # the one-step head's graph, not the multi-step model's
        np.testing.assert_allclose(got, models["flow"].sample(obs, noise, 1).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="one_step: the learner has no one-step head"):
        export_generative(_Learner(models["flow"], None), spec, tmp_path / "x", one_step=True)
    with pytest.raises(ValueError, match="sampler_steps: the one-step head samples in 1 step, got 4"):
        export_generative(learner, spec, tmp_path / "x", one_step=True, sampler_steps=4)


# -- the manifest --------------------------------------------------------------------------------
def test_the_manifest_records_the_chunk_spec_and_the_sampler_and_round_trips(flow4: tuple) -> None:
    _, out, manifest = flow4
    assert manifest["chunking"] == ChunkSpec(H, K, HIST).to_dict()
    assert manifest["sampler"] == {
        "model": "flow", "backbone": "mlp", "steps": 4, "one_step": False, "noise_input": "noise",
        "noise_shape": [H, ACT], "noise_distribution": "standard_normal", "output": "chunk", "parity_draws": 4,
    }
    assert [i["name"] for i in manifest["inputs"]] == ["obs", "noise"]
    assert manifest["inputs"][0]["shape"] == [-1, HIST * OBS] and manifest["inputs"][0]["chunk_history"] == HIST
    assert manifest["inputs"][1]["shape"] == [-1, H, ACT] and manifest["inputs"][1]["distribution"] == "standard_normal"
    assert [o["name"] for o in manifest["outputs"]] == ["chunk"] and manifest["outputs"][0]["shape"] == [-1, H, ACT]
    assert load_manifest(out)["content_hash"] == manifest["content_hash"]
    typed = read_manifest(out)
    assert typed.chunk == ChunkPolicySpec(ChunkSpec(H, K, HIST), SamplerSpec("flow", "mlp", 4, False, "noise", (H, ACT),
                                                                             parity_draws=4))
    assert (typed.version, typed.obs_dim, typed.frame_dim) == (4, HIST * OBS, OBS)
    again = typed.to_dict()
    assert again["content_hash"] == manifest["content_hash"] and again == {**manifest, "created": again["created"]}


def test_the_schema_validates_the_chunk_sections(flow4: tuple) -> None:
    _, _, manifest = flow4
    schema = ChunkPolicySpec.json_schema()
    sections = copy.deepcopy({k: manifest[k] for k in ("chunking", "sampler")})
    assert schema_errors(sections, schema) == []
    for path, value, error in [
        (("chunking", "execute"), 0, "$.chunking.execute: 0 is below the minimum 1"),
        (("chunking", "ensemble"), "mean", "$.chunking.ensemble: expected one of ['none', 'exp']"),
        (("sampler", "noise_distribution"), "uniform", "$.sampler.noise_distribution: expected one of ['standard_normal']"),
        (("sampler", "steps"), 0, "$.sampler.steps: 0 is below the minimum 1"),
    ]:
        bad = copy.deepcopy(sections)
        bad[path[0]][path[1]] = value
        assert any(e.startswith(error) for e in schema_errors(bad, schema)), (path, schema_errors(bad, schema))
    del sections["chunking"]["horizon"]
    assert schema_errors(sections, schema) == ["$.chunking.horizon: required, missing"]


def _edited(manifest: dict, edit: Any) -> dict:
    data = copy.deepcopy(manifest)
    edit(data)
    data["content_hash"] = _content_hash(data)
    return data


@pytest.mark.parametrize("edit,match", [
    (lambda m: m["chunking"].update(execute=9), r"manifest\.chunking\.execute: expected 1\.\.horizon \(8\), got 9"),
    (lambda m: m["chunking"].pop("obs_history"), r"manifest\.chunking\.obs_history: missing"),
    (lambda m: m["chunking"].update(ensemble="mean"), r"manifest\.chunking\.ensemble: expected one of none, exp"),
    (lambda m: m["sampler"].update(noise_shape=[4, 1]), r"manifest\.sampler\.noise_shape: expected \[8, 1\]"),
    (lambda m: m["sampler"].update(one_step=True), r"manifest\.sampler\.one_step: the one-step head is a flow sampled in 1 step"),
    (lambda m: m["sampler"].update(noise_distribution="uniform"), r"manifest\.sampler\.noise_distribution: expected one of"),
    (lambda m: m["sampler"].update(model="gan"), r"manifest\.sampler\.model: expected one of"),
    (lambda m: m["inputs"][0].update(shape=[-1, OBS]), r"manifest\.inputs\[0\]\.shape: expected \[-1, 10\]"),
    (lambda m: m["inputs"][1].update(name="eps"), r"manifest\.inputs: expected the tensors \['obs', 'noise'\] \(sampler\)"),
    (lambda m: m.pop("sampler"), r"manifest\.sampler: expected an object"),
])
def test_a_bad_chunk_section_is_refused_naming_the_field(flow4: tuple, edit: Any, match: str) -> None:
    with pytest.raises((SpecError, ExportError), match=match):
        ExportManifest.from_dict(_edited(flow4[2], edit))


def test_an_older_layout_with_a_chunk_section_is_refused(flow4: tuple) -> None:
    """A chunked manifest relabelled version 2 or 3 would let an older runtime play a chunk as one
    action: the chunk sections exist only in version 4."""
    for version in (2, 3):
        with pytest.raises(ExportError, match=rf"manifest\.chunking: a version-{version} manifest has no chunking section"):
            ExportManifest.from_dict(_edited(flow4[2], lambda m, v=version: m.update(manifest_version=v)))


# Written by the exporter before chunked policies existed (commit c940d8c) for the fixed inputs of
# _pinned_manifests: the bytes of manifest.json. A deliberate change of the v2/v3 layout updates them.
V2_SHA256 = "2f4bdc238288531b50f239256f33a63cdb1069f5f7b0182d5d230944fbbd1843"
V3_SHA256 = "2cdfcfb39de1b8739e88b22ec679557c1b55d43ee362cd61e3938261d2d499b7"


def _pinned_manifests() -> tuple[dict, dict]:
    spec = PolicySpec.from_dict(json.loads(DATA.read_text()))
    files = {"onnx": Artifact("policy.onnx", "ab" * 32, 1.5e-7)}
    kw: dict[str, Any] = {"created": "2026-01-01T00:00:00+00:00", "robolearn_version": "0.0.0"}
    v2 = ExportManifest(spec, "policy", files, 16, **kw).to_dict()
    v3 = ExportManifest(spec, "policy", files, 4, states=(StateSpec("h", "h_in", "h_out", (16,)),), parity_steps=50, **kw).to_dict()
    return v2, v3


def test_manifests_of_policies_that_are_not_chunked_are_unchanged_byte_for_byte() -> None:
    v2, v3 = _pinned_manifests()
    assert (v2["manifest_version"], v3["manifest_version"]) == (2, 3)
    assert not {"chunking", "sampler"} & (set(v2) | set(v3))
    assert hashlib.sha256(json.dumps(v2, indent=2).encode()).hexdigest() == V2_SHA256
    assert hashlib.sha256(json.dumps(v3, indent=2).encode()).hexdigest() == V3_SHA256


# -- deployment ----------------------------------------------------------------------------------
def _runtime(out: Path, **kw: Any) -> tuple[DeployRuntime, SimulatedRobot]:
    robot = SimulatedRobot(TASK, seed=0)
    runtime = DeployRuntime(load_exported(out), robot, SafetyConfig(ramp_s=0.0, exit_s=0.0, stale_timeout_s=0.02),
                            clock=robot.clock, **kw)
    return runtime, robot


def _reference(sampler: ChunkSampler, chunk: ChunkSpec, frames: list[np.ndarray], starts: set[int], seed: int = 0,
               zero: bool = False) -> tuple[np.ndarray, int]:
    """The torch sampler run through a ``ChunkExecutor`` on ``frames``, restarted at ``starts``, its
    noise drawn per plan from ``torch.Generator().manual_seed(seed)`` (zeros with ``zero``)."""
    ex = ChunkExecutor(chunk, 1, OBS, ACT)
    gen = torch.Generator().manual_seed(seed)
    actions, plans = [], 0
    with torch.no_grad():
        for i, frame in enumerate(frames):
            if i in starts:
                ex.reset()
            cond = ex.observe(torch.from_numpy(frame).reshape(1, -1))
            if ex.needs_plan()[0]:
                noise = torch.zeros(1, H, ACT) if zero else torch.randn((1, H, ACT), generator=gen)
                ex.plan(sampler(cond, noise))
                plans += 1
            actions.append(ex.act().numpy().reshape(-1))
    return np.stack(actions), plans


def _drive(runtime: DeployRuntime, robot: SimulatedRobot, n: int, ran: list[int]) -> None:
    for _ in range(n):
        assert runtime.step() == 0
        ran.append(len(runtime.telemetry) - 1)


@pytest.mark.parametrize("ensemble", ["none", "exp"])
def test_runtime_equals_the_torch_sampler_under_the_same_noise(models: dict, spec: dict, tmp_path: Path,
                                                                ensemble: str) -> None:
    """On a lockstep simulated robot the runtime's actions are the torch sampler's through a
    ChunkExecutor fed the same frames and the same noise sequence (drawn only when a plan is due);
    an e-stop and a stale reading restart the execution (history refilled, queue dropped)."""
    chunk = ChunkSpec(H, K, HIST) if ensemble == "none" else ChunkSpec(H, 1, HIST, ensemble="exp", ensemble_decay=0.3)
    sampler = ChunkSampler(models["flow"], 4)
    export_chunk_policy(sampler, chunk, spec, tmp_path, formats=["onnx"], parity_draws=2)
    runtime, robot = _runtime(tmp_path, seed=7)
    ran: list[int] = []
    with robot:
        _drive(runtime, robot, 11, ran)
        runtime.estop("test")
        assert runtime.step() & Intervention.ESTOP
        runtime.safety.clear_estop()
        restart = len(ran)
        _drive(runtime, robot, 6, ran)
        fresh = robot.read()
        robot.read = lambda: type(fresh)(fresh.stamp - 0.05, fresh.joint_pos, fresh.joint_vel)  # stale
        assert runtime.step() & Intervention.STALE
        del robot.read
        after_stale = len(ran)
        _drive(runtime, robot, 5, ran)
    frames = [runtime.telemetry.obs[i] for i in ran]
    played = np.stack([runtime.telemetry.actions[i] for i in ran])
    want, plans = _reference(sampler, chunk, frames, {restart, after_stale}, seed=7)
    np.testing.assert_allclose(played, want, rtol=0, atol=1e-4)
    assert runtime.plans == plans == (len(ran) if ensemble == "exp" else 3 + 2 + 2)
    carried, _ = _reference(sampler, chunk, frames, set(), seed=7)  # the restarts changed what was played
    assert np.abs(carried - want).max() > 1e-3


def test_played_actions_are_the_first_k_of_each_plan_and_a_restart_refills_the_history(flow4: tuple) -> None:
    _, out, _ = flow4
    runtime, robot = _runtime(out, seed=1)
    calls: list[tuple[np.ndarray, np.ndarray]] = []
    run = runtime.policy._run

    def spy(obs: np.ndarray, noise: np.ndarray) -> np.ndarray:
        chunk = run(obs, noise)
        calls.append((obs.copy(), chunk.copy()))
        return chunk

    runtime.policy._run = spy
    ran: list[int] = []
    with robot:
        _drive(runtime, robot, 10, ran)  # plans at steps 0, 4, 8
        runtime.estop("test")
        runtime.step()
        runtime.safety.clear_estop()
        _drive(runtime, robot, 3, ran)  # a plan at the restart, although 2 of the last plan's actions were left
    actions = np.stack([runtime.telemetry.actions[i] for i in ran])
    frames = [runtime.telemetry.obs[i] for i in ran]
    assert len(calls) == 4
    for t in range(10):
        np.testing.assert_allclose(actions[t], calls[t // K][1][0, t % K], rtol=0, atol=1e-6)
    np.testing.assert_allclose(actions[10:], calls[3][1][0, :3], rtol=0, atol=1e-6)
    # the history: the two newest frames, oldest first; after the restart the new frame twice
    np.testing.assert_allclose(calls[1][0].reshape(HIST, OBS), np.stack([frames[3], frames[4]]), atol=1e-6)
    np.testing.assert_allclose(calls[3][0].reshape(HIST, OBS), np.stack([frames[10], frames[10]]), atol=1e-6)


def test_noise_modes_and_seeds(flow4: tuple) -> None:
    """``noise="zero"`` is deterministic (any seed) and equals the sampler at zero noise; seeded
    normal noise differs between seeds and repeats for the same seed; ``act`` leaves no trace."""
    sampler, out, _ = flow4

    def play(**kw: Any) -> tuple[np.ndarray, list[np.ndarray]]:
        runtime, robot = _runtime(out, **kw)
        ran: list[int] = []
        with robot:
            _drive(runtime, robot, 3, ran)
            runtime.act(robot.read())  # neither the queue, the history nor the noise stream moves
            _drive(runtime, robot, 6, ran)
        return np.stack([runtime.telemetry.actions[i] for i in ran]), [runtime.telemetry.obs[i] for i in ran]

    zero_a, frames = play(seed=1, noise="zero")
    zero_b, _ = play(seed=2, noise="zero")
    np.testing.assert_array_equal(zero_a, zero_b)
    np.testing.assert_allclose(zero_a, _reference(sampler, ChunkSpec(H, K, HIST), frames, set(), zero=True)[0], atol=1e-4)
    seeded, frames = play(seed=1)
    np.testing.assert_allclose(seeded, _reference(sampler, ChunkSpec(H, K, HIST), frames, set(), seed=1)[0], atol=1e-4)
    np.testing.assert_array_equal(play(seed=1)[0], seeded)
    assert np.abs(play(seed=2)[0] - seeded).max() > 1e-2
    with pytest.raises(ValueError, match="noise: expected one of normal, zero, got 'mode'"):
        _runtime(out, noise="mode")


def test_the_deployed_policy_loads_the_sampler_and_refuses_a_missing_noise(flow4: tuple) -> None:
    sampler, out, _ = flow4
    for fmt in ("onnx", "torchscript"):
        policy = load_exported(out, fmt)
        assert policy.chunked and (policy.obs_dim, policy.frame_dim, policy.action_dim) == (HIST * OBS, OBS, ACT)
        obs = np.full((1, HIST * OBS), 0.2, np.float32)
        noise = np.random.default_rng(0).standard_normal((1, H, ACT)).astype(np.float32)
        with torch.no_grad():
            want = sampler(torch.from_numpy(obs), torch.from_numpy(noise)).numpy()
        np.testing.assert_allclose(policy(obs, noise), want, atol=1e-5)
        with pytest.raises(ValueError, match=r"noise: a chunked policy's sampler takes its noise \[1, H, A\]"):
            policy(obs)


# -- the GBC learner (robolearn.algos.gbc) ---------------------------------------------------------
def test_a_gbc_learner_exports_and_deploys_as_its_policy_module_acts(spec: dict, tmp_path: Path) -> None:
    """``GenerativeBC`` exported through its ``sampler_module`` and run by the deploy runtime (seeded
    like the learner) plays the actions of the learner's own ``policy_module`` on the same frames,
    its noise stream included; both restart at an e-stop (``reset(done)`` on the learner's side)."""
    from robolearn.algos.gbc.agent import GenerativeBC
    from robolearn.algos.gbc.config import FlowBCConfig

    cfg = FlowBCConfig(horizon=H, execute=K, obs_history=HIST, hidden=(32, 32), sample_steps=3, one_step_head=True)
    agent = GenerativeBC({"policy": OBS}, ACT, cfg, action_low=-1.0, action_high=1.0, seed=3)
    manifest = export_generative(agent, spec, tmp_path, formats=["onnx"], parity_draws=2)
    assert manifest["chunking"] == agent.chunk.to_dict() and manifest["sampler"]["steps"] == 3
    runtime, robot = _runtime(tmp_path, seed=agent.seed)
    ran: list[int] = []
    with robot:
        _drive(runtime, robot, 6, ran)
        runtime.estop("test")
        runtime.step()
        runtime.safety.clear_estop()
        restart = len(ran)
        _drive(runtime, robot, 6, ran)
    policy = agent.policy_module()
    want = []
    for i, row in enumerate(ran):
        if i == restart:
            policy.reset(torch.ones(1, dtype=torch.bool))
        want.append(policy(torch.from_numpy(runtime.telemetry.obs[row]).reshape(1, -1)).numpy().reshape(-1))
    played = np.stack([runtime.telemetry.actions[i] for i in ran])
    np.testing.assert_allclose(played, np.stack(want), rtol=0, atol=1e-4)
    assert np.abs(np.diff(played[:, 0])).max() > 1e-3  # the actions vary: the comparison has content
