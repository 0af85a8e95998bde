"""Pixel encoder, random shift and image-policy export on the CPU, one thread (issue 16).

* DrQ-v2's encoder (:class:`robolearn.nn.vision.CNNEncoder`) forward on ``--batch`` stacks of three
  84x84 RGB frames (uint8 ``[B, 9, 84, 84]``), no grad: ms per batch and images/s (mean of
  ``--forward-repeats`` calls after a warm-up);
* :class:`robolearn.nn.vision.RandomShift` (pad 4) on that batch as uint8 and as float32 (one
  integer gather), against DrQ-v2's own formulation: replicate padding then ``grid_sample``
  (bilinear, at integer shifts the same images), float32; mean of ``--shift-repeats`` calls;
* a DrQ-v2-size actor (that encoder on ``[B, 84, 84, 9]`` HWC uint8, the 50-wide trunk of
  :class:`~robolearn.nn.vision.MultiModalEncoder`, a 1024-1024 MLP head, tanh; ``Cartpole-Balance``'s
  spec with an 84x84x3 ``image`` group) through :func:`robolearn.export.vision.export_image_policy`
  (ONNX + TorchScript, parity on ``--parity-samples`` random images): export seconds, parity errors,
  ONNX file size, and the batch-1 latency of ONNX Runtime (one intra- and inter-op thread) against
  the eager module (mean of ``--latency-repeats`` calls after a warm-up).

    OMP_NUM_THREADS=1 python benchmarks/vision_encoder.py
    OMP_NUM_THREADS=1 python benchmarks/vision_encoder.py --quick
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import robolearn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_line  # noqa: E402  (benchmarks/ is not a package)

from robolearn.export.vision import export_image_policy, image_input_of
from robolearn.nn.vision import CNNEncoder, MultiModalEncoder, RandomShift


def mean_time(fn: Callable[[], object], repeats: int) -> float:
    """Mean seconds of ``repeats`` calls of ``fn`` after one untimed warm-up call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def grid_shift(x: torch.Tensor, generator: torch.Generator, pad: int = 4) -> torch.Tensor:
    """DrQ-v2's random shift: replicate padding, then ``grid_sample`` of each image at a random
    integer offset in ``[0, 2 * pad]`` (bilinear, on pixel centres, so no interpolation happens)."""
    b, _, h, w = x.shape
    padded = F.pad(x, (pad,) * 4, mode="replicate")
    s = torch.randint(0, 2 * pad + 1, (b, 2), generator=generator).float()
    gx = (2 * (torch.arange(w)[None] + s[:, :1]) + 1) / (w + 2 * pad) - 1
    gy = (2 * (torch.arange(h)[None] + s[:, 1:]) + 1) / (h + 2 * pad) - 1
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), -1)
    return F.grid_sample(padded, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class Actor(nn.Module):
    """A DrQ-v2-size deterministic actor on stacked HWC uint8 frames: encoder, trunk, MLP, tanh."""

    def __init__(self, frames: int = 3, hidden: int = 1024, action_dim: int = 1) -> None:
        """``frames``: stacked RGB frames (the encoder sees ``3 * frames`` channels)."""
        super().__init__()
        self.front = MultiModalEncoder(CNNEncoder((84, 84, 3 * frames), layout="HWC"), proprio_dim=0, feature_dim=50)
        self.head = nn.Sequential(nn.Linear(50, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                  nn.Linear(hidden, action_dim))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """``image``: uint8 ``[B, 84, 84, 3 * frames]`` -> actions ``[B, action_dim]`` in [-1, 1]."""
        return torch.tanh(self.head(self.front(image)))


def encoder_and_shift(batch: int, forward_repeats: int, shift_repeats: int) -> dict[str, float]:
    """Encoder forward and the three random shifts (module doc), in ms per batch."""
    x8 = torch.randint(0, 256, (batch, 9, 84, 84), dtype=torch.uint8)
    xf = x8.float()
    enc = CNNEncoder((9, 84, 84))
    with torch.no_grad():
        forward = mean_time(lambda: enc(x8), forward_repeats)
    aug = RandomShift(4)
    g = torch.Generator().manual_seed(0)
    return {
        "encoder_forward_ms": forward * 1e3,
        "images_per_s": batch / forward,
        "shift_gather_uint8_ms": mean_time(lambda: aug(x8, generator=g), shift_repeats) * 1e3,
        "shift_gather_float_ms": mean_time(lambda: aug(xf, generator=g), shift_repeats) * 1e3,
        "shift_grid_sample_float_ms": mean_time(lambda: grid_shift(xf, g), shift_repeats) * 1e3,
    }


def export(parity_samples: int, latency_repeats: int) -> dict[str, Any]:
    """Export the actor (module doc) and time its batch-1 latency in ONNX Runtime and eager."""
    import onnxruntime as ort

    spec = copy.deepcopy(robolearn.make("Cartpole-Balance", 1, seed=0).policy_spec())
    frame_dim = 84 * 84 * 3
    spec["observations"]["image"] = {"shape": [84, 84, 3], "frame_dim": frame_dim, "history_length": 0,
                                     "terms": [{"name": "camera", "start": 0, "dim": frame_dim,
                                                "source": "robolearn.envs.camera.rgb"}]}
    torch.manual_seed(0)
    actor = Actor().eval()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        manifest = export_image_policy(actor, spec, d, images=[image_input_of(actor.front.encoder)],
                                       parity_samples=parity_samples)
        out["export_s"] = time.perf_counter() - t0
        out["parity"] = {k: v["parity_max_abs_err"] for k, v in manifest["files"].items()}
        onnx_path = os.path.join(d, "policy.onnx")
        out["onnx_mb"] = os.path.getsize(onnx_path) / 1e6
        one = torch.randint(0, 256, (1, 84, 84, 9), dtype=torch.uint8)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
        feed = {"image": one.numpy()}
        out["onnxruntime_ms"] = mean_time(lambda: sess.run(["action"], feed), latency_repeats) * 1e3
        out["onnxruntime_version"] = ort.__version__
    with torch.no_grad():
        out["eager_ms"] = mean_time(lambda: actor(one), latency_repeats) * 1e3
    return out


def machine() -> str:
    """One line: processor, cores, load, versions, commit, threads."""
    return machine_line(None)


def main() -> None:
    """Run the three measurements and print them as a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256, help="stacked frames per encoder / shift batch (default 256)")
    parser.add_argument("--forward-repeats", type=int, default=3, help="timed encoder forwards (default 3)")
    parser.add_argument("--shift-repeats", type=int, default=10, help="timed random shifts each (default 10)")
    parser.add_argument("--parity-samples", type=int, default=8, help="export parity images (default 8)")
    parser.add_argument("--latency-repeats", type=int, default=50, help="timed batch-1 calls each (default 50)")
    parser.add_argument("--skip-export", action="store_true", help="encoder and shifts only")
    parser.add_argument("--quick", action="store_true", help="smoke: batch 32, 1 forward, 3 shifts, 10 latency calls")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.forward_repeats, args.shift_repeats, args.latency_repeats = 32, 1, 3, 10
    torch.set_num_threads(1)
    r = encoder_and_shift(args.batch, args.forward_repeats, args.shift_repeats)
    e = None if args.skip_export else export(args.parity_samples, args.latency_repeats)
    print(machine() + ("" if e is None else f", ONNX Runtime {e['onnxruntime_version']} (1 thread)"))
    print(f"\nbatch {args.batch} of uint8 9x84x84 (3 stacked RGB frames); forward: mean of {args.forward_repeats}, "
          f"shifts: mean of {args.shift_repeats}, batch-1 latency: mean of {args.latency_repeats}\n")
    print("| measurement | value |")
    print("|---|---:|")
    print(f"| encoder forward, batch {args.batch} (ms) | {r['encoder_forward_ms']:.1f} |")
    print(f"| encoder images/s | {r['images_per_s']:.0f} |")
    print(f"| random shift, gather, uint8 (ms) | {r['shift_gather_uint8_ms']:.2f} |")
    print(f"| random shift, gather, float32 (ms) | {r['shift_gather_float_ms']:.2f} |")
    print(f"| random shift, pad + grid_sample (DrQ-v2), float32 (ms) | {r['shift_grid_sample_float_ms']:.2f} |")
    if e is not None:
        parity = ", ".join(f"{k} {v:.2g}" for k, v in e["parity"].items())
        print(f"| export ONNX + TorchScript, parity on {args.parity_samples} images (s) | {e['export_s']:.1f} |")
        print(f"| parity max abs error | {parity} |")
        print(f"| ONNX size (MB) | {e['onnx_mb']:.1f} |")
        print(f"| batch-1 latency, ONNX Runtime (ms) | {e['onnxruntime_ms']:.2f} |")
        print(f"| batch-1 latency, eager torch (ms) | {e['eager_ms']:.2f} |")


if __name__ == "__main__":
    main()
