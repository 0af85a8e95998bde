"""Export of chunked generative policies: a sampler with a fixed number of steps, its noise an input.

A flow or diffusion policy over action chunks (``robolearn.nn.generative``) is a *sampler*: given
the stacked observation frames and an initial noise chunk it returns an action chunk, and it is a
deterministic function of both (Euler steps for flows, DDIM with ``eta = 0`` for diffusion). What is
exported is that function, with the number of steps baked in (``sampler_steps``: 1, 4, 10 ...; or
the distilled one-step head), and the noise as an explicit input so that the caller -- the deploy
runtime, a benchmark, a test -- owns the randomness::

    obs   [B, obs_history * D]   float32   the last obs_history frames of the policy group, oldest first
    noise [B, H, A]              float32   i.i.d. standard normal (zeros: a deterministic deployment)
    ->
    chunk [B, H, A]              float32   env-unit actions, the chunk's steps in order

The batch axis is dynamic. The caller runs the chunk execution the policy was trained and
evaluated with (``robolearn.spec.chunking.ChunkExecutor``: history stacking, execute ``k`` of
``H``, temporal ensembling); the manifest (version 4) records it (``chunking``) beside the sampler
(``sampler``: model kind, backbone, steps, one-step head, the noise input's name, shape and
distribution).

**Parity** is measured at non-zero noise: ``parity_draws`` independent standard-normal noise
draws, each over ``parity_samples`` random observations, torch against ONNX Runtime (and
TorchScript); the largest absolute difference is recorded and must be within ``atol``. A graph
whose output ignored the noise (a noise input traced as a constant) fails it, since every draw
differs.

The ONNX graph comes from the TorchScript-based exporter (``dynamo=False``): the DDIM sampler
picks its timesteps and coefficients with Python arithmetic on tensors (``int(k)``, ``float(ab)``),
which a trace bakes in as the constants they are for a fixed number of steps, whereas
``torch.export`` refuses them as data-dependent; it also exports a 10-step sampler in about a
second where ``torch.export`` takes several.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robolearn.export.exporter import (
    FILENAMES,
    FORMATS,
    Artifact,
    ExportError,
    ExportManifest,
    _atomic_write_bytes,
    input_groups,
    sha256_file,
)
from robolearn.export.exporter import (
    _export_torchscript as export_torchscript,
)
from robolearn.spec import PolicySpec
from robolearn.spec.chunking import ChunkSpec
from robolearn.spec.manifest import ChunkPolicySpec, SamplerSpec
from robolearn.types import assert_reads

log = logging.getLogger(__name__)

ONNX_OPSET = 17
"""Opset of the exported sampler graphs (what ONNX Runtime 1.1x runs everywhere)."""
NOISE_INPUT = "noise"
"""Name of the sampler graph's noise input."""
CHUNK_OUTPUT = "chunk"
"""Name of the sampler graph's output."""


def sampler_info(sampler: nn.Module) -> tuple[str, str, int, int, int, int, int]:
    """``(model, backbone, steps, obs_dim, action_dim, horizon, obs_history)`` of a chunk sampler:
    a module with ``steps`` and ``model.spec`` (a ``robolearn.nn.generative.ChunkSampler``).

    Raises:
        ExportError: the module does not say what it samples.
    """
    spec = getattr(getattr(sampler, "model", None), "spec", None)
    steps = getattr(sampler, "steps", None)
    needed = ("model", "backbone", "obs_dim", "action_dim", "horizon", "obs_history")
    if spec is None or isinstance(steps, bool) or not isinstance(steps, int) or any(not hasattr(spec, k) for k in needed):
        raise ExportError(
            "chunk sampler: expected a module with an integer `steps` and `model.spec` "
            f"({', '.join(needed)}), e.g. robolearn.nn.generative.ChunkSampler; got {type(sampler).__name__}"
        )
    return (str(spec.model), str(spec.backbone), int(steps), int(spec.obs_dim), int(spec.action_dim),
            int(spec.horizon), int(spec.obs_history))


def _export_onnx(sampler: nn.Module, obs: torch.Tensor, noise: torch.Tensor, path: Path) -> None:
    """Trace ``sampler`` at ``(obs, noise)`` to ONNX at ``path`` (batch axis dynamic; module doc)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
        torch.onnx.export(
            sampler,
            (obs, noise),
            buffer,
            input_names=["obs", NOISE_INPUT],
            output_names=[CHUNK_OUTPUT],
            dynamic_axes={name: {0: "batch"} for name in ("obs", NOISE_INPUT, CHUNK_OUTPUT)},
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
    _atomic_write_bytes(path, buffer.getvalue())


def _export_torchscript(sampler: nn.Module, obs: torch.Tensor, noise: torch.Tensor, path: Path) -> None:
    """Trace ``sampler`` to TorchScript at ``path`` (the exporter's trace, the noise a second input)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings: the step loop's Python numbers become constants
        export_torchscript(sampler, obs, path, example_states=(noise,))


def chunk_runner(fmt: str, path: str | os.PathLike[str], threads: int = 0) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A callable ``(obs, noise) -> chunk`` (torch tensors) running the exported sampler at ``path``
    in format ``fmt`` (ONNX Runtime with ``threads`` intra-op threads, 0: its default; or TorchScript).

    Raises:
        ExportError: the ONNX graph's inputs are not ``obs`` and ``noise`` (a noise input the
            exporter dropped as unused: the sampler ignores its noise).
    """
    if fmt == "torchscript":
        module = torch.jit.load(str(path))

        def run_ts(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return module(obs, noise)

        return run_ts
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    if names != ["obs", NOISE_INPUT]:
        raise ExportError(f"onnx: the sampler graph's inputs are {names}, expected ['obs', '{NOISE_INPUT}'] (does it read its noise?)")

    def run_onnx(obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run([CHUNK_OUTPUT], {"obs": obs.numpy(), NOISE_INPUT: noise.numpy()})[0])

    return run_onnx


PARITY_ATOL: dict[str, float] = {"flow": 1e-4, "diffusion": 1e-3}
"""The default parity tolerance by sampler kind. A DDIM step estimates the clean chunk as
``(x_t - sqrt(1 - ab) eps) / sqrt(ab)``: near ``t = T`` (``ab`` ~ 1e-4) it multiplies the float32
difference between two runtimes' ``eps`` by ~100 before later steps shrink it, so a diffusion
sampler's exported-vs-eager difference is ~10-100x a flow's (measured: 1e-6 for a 4-step flow,
1e-5 to 1.3e-4 for 4- and 10-step DDIM over the same MLP, the largest on an Intel Xeon's ONNX
Runtime kernels). A graph that is wrong (the noise traced as a constant, a step dropped) misses by
the chunks' spread over noise draws, ~0.1-1, so 1e-3 still tells it from rounding."""


def export_chunk_policy(
    sampler: nn.Module,
    chunk: ChunkSpec,
    spec: PolicySpec | Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    formats: Sequence[str] = FORMATS,
    *,
    one_step: bool = False,
    obs_group: str | None = None,
    parity_draws: int = 8,
    parity_samples: int = 32,
    atol: float | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Export a chunk sampler (``(obs [B, obs_history * D], noise [B, H, A]) -> chunk [B, H, A]``,
    env units, the model's normalisation inside; module doc) and write the version-4 manifest.

    Args:
        sampler: the eager sampler (``robolearn.nn.generative.ChunkSampler``: ``steps`` and
            ``model.spec`` say what it samples); put in eval mode.
        chunk: how the policy's chunks are executed (horizon, execute, history, ensembling); its
            horizon and observation history must be the sampler's.
        spec: the run's policy spec (a :class:`~robolearn.spec.PolicySpec` or its JSON mapping).
        out_dir: folder for ``policy.onnx`` / ``policy.pt`` / ``manifest.json``.
        formats: any of ``onnx``, ``torchscript``.
        one_step: the sampler is the distilled one-step head (a flow in one step; recorded).
        obs_group: the observation group of one frame (default ``policy``; one group only).
        parity_draws: independent standard-normal noise draws the parity check compares (>= 2).
        parity_samples: random observations per draw.
        atol: largest accepted ``|exported - eager|`` over every draw (default: :data:`PARITY_ATOL`
            of the sampler's model kind).
        seed: seed of the parity observations and noise.

    Returns:
        The manifest (:meth:`ExportManifest.to_dict`), also written to ``out_dir/manifest.json``.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"format: expected one or more of {', '.join(FORMATS)}, got {list(formats)}")
    if parity_draws < 2:
        raise ValueError(f"parity_draws: expected >= 2 (parity must hold for more than one noise), got {parity_draws}")
    if parity_samples < 1:
        raise ValueError(f"parity_samples: expected >= 1, got {parity_samples}")
    if not isinstance(spec, PolicySpec):
        spec = PolicySpec.from_dict(spec, "policy spec")
    groups = input_groups(sampler, obs_group)
    if len(groups) != 1:
        raise ValueError(f"obs_groups: a chunk sampler reads one observation group per frame, got {list(groups)}")
    assert_reads("exported policy", groups)
    group = groups[0]
    if group not in spec.observations:
        raise ValueError(f"obs_group: the spec has no group {group!r}; groups: {', '.join(spec.observations)}")
    model, backbone, steps, obs_dim, action_dim, horizon, history = sampler_info(sampler)
    if atol is None:
        atol = PARITY_ATOL.get(model, min(PARITY_ATOL.values()))
    frame = math.prod(spec.observations[group].shape)
    for name, got, want in (("horizon", horizon, chunk.horizon), ("obs_history", history, chunk.obs_history),
                            ("obs_dim", obs_dim, frame), ("action_dim", action_dim, spec.action_dim)):
        if got != want:
            source = "the policy spec's" if name in ("obs_dim", "action_dim") else "the chunk spec's"
            raise ValueError(f"sampler {name}: the sampler's is {got}, {source} is {want}")
    sampler_spec = SamplerSpec(model, backbone, steps, bool(one_step), NOISE_INPUT, (horizon, action_dim),
                               output=CHUNK_OUTPUT, parity_draws=parity_draws)
    sampler_spec.validate("sampler")
    sampler = sampler.eval()

    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(parity_samples, history * frame, generator=gen) * 2.0
    noises = torch.randn(parity_draws, parity_samples, horizon, action_dim, generator=gen)
    with torch.no_grad():
        eager = torch.stack([sampler(obs, noise) for noise in noises])
    if eager.shape[1:] != (parity_samples, horizon, action_dim):
        raise ExportError(f"chunk sampler: returns {tuple(eager.shape[2:])} chunks, expected [B, {horizon}, {action_dim}]")
    spread = float((eager - eager[:1]).abs().max())
    if spread == 0.0:
        log.warning("chunk sampler: its chunks do not depend on the noise at these observations (an untrained model?)")
    out = Path(out_dir)
    files: dict[str, Artifact] = {}
    for fmt in formats:
        path = out / FILENAMES[fmt]
        # Traced at batch 2: a size-1 axis could be specialised to a constant.
        try:
            (_export_onnx if fmt == "onnx" else _export_torchscript)(sampler, obs[:2], noises[0, :2], path)
        except Exception as exc:
            raise ExportError(f"{fmt} export failed: {exc}") from exc
        run = chunk_runner(fmt, path)
        exported = torch.stack([run(obs, noise) for noise in noises])
        err = float((exported - eager).abs().max())
        if not err <= atol:
            raise ExportError(
                f"{fmt} parity: max |exported - eager| over {parity_draws} noise draws = {err:.3g} exceeds atol {atol:g}"
            )
        files[fmt] = Artifact(path.name, sha256_file(path), err)
        log.info("exported %s %d-step %s sampler to %s (parity over %d noise draws: max abs err %.3g)",
                 fmt, steps, model, path, parity_draws, err)
    manifest = ExportManifest(spec, group, files, parity_samples, chunk=ChunkPolicySpec(chunk, sampler_spec)).to_dict()
    _atomic_write_bytes(out / "manifest.json", json.dumps(manifest, indent=2).encode())
    return manifest


def export_generative(
    learner: Any,
    spec: PolicySpec | Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    formats: Sequence[str] = FORMATS,
    *,
    sampler_steps: int | None = None,
    one_step: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Export a chunked generative learner's sampler (:func:`export_chunk_policy`): the learner
    exposes ``sampler_module(steps, one_step)`` (an independent CPU eval copy) and ``chunk`` (its
    :class:`~robolearn.spec.chunking.ChunkSpec`), as ``robolearn.algos.gbc.GenerativeBC`` does.

    Args:
        learner: the agent.
        spec: the run's policy spec.
        out_dir: output folder.
        formats: any of ``onnx``, ``torchscript``.
        sampler_steps: sampling steps baked in (``None``: the learner's inference default).
        one_step: export the distilled one-step head instead (``sampler_steps`` must be ``None`` or 1).
        **kwargs: passed on (``parity_draws``, ``parity_samples``, ``atol``, ``seed``, ``obs_group``).
    """
    if not callable(getattr(learner, "sampler_module", None)) or not isinstance(getattr(learner, "chunk", None), ChunkSpec):
        raise ValueError(f"policy: {type(learner).__name__} is not a chunked generative learner (no sampler_module and chunk)")
    if sampler_steps is not None and (isinstance(sampler_steps, bool) or not isinstance(sampler_steps, int) or sampler_steps < 1):
        raise ValueError(f"sampler_steps: expected an integer >= 1 or null, got {sampler_steps!r}")
    if one_step:
        if sampler_steps not in (None, 1):
            raise ValueError(f"sampler_steps: the one-step head samples in 1 step, got {sampler_steps}")
        if getattr(learner, "one_step", None) is None:
            raise ValueError("one_step: the learner has no one-step head (train it with one_step_head=true)")
    sampler = learner.sampler_module(steps=sampler_steps, one_step=one_step)
    return export_chunk_policy(sampler, learner.chunk, spec, out_dir, formats, one_step=one_step, **kwargs)


__all__ = ["CHUNK_OUTPUT", "NOISE_INPUT", "PARITY_ATOL", "chunk_runner", "export_chunk_policy", "export_generative", "sampler_info"]
