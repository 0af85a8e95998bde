"""DrQ-v2's replay: each frame stored once (``replay="frames"``) against both stacks per transition
(``replay="stacked"``).

Two measurements:

``memory``
    Bytes per transition and in all for ``--capacity`` transitions (62,500 by default) at 84x84 RGB,
    ``frame_stack=3``, ``n_step=3``, one action dimension (cart-pole), pixel mode: the sum of every
    storage tensor each replay allocates, built on PyTorch's ``meta`` device (shapes and dtypes
    without the memory, so the 7.9 GB stacked replay is counted, not filled).
``sample``
    Milliseconds per ``sample(256)`` (and per ``process`` call while filling) of two real DrQ-v2
    agents on the CPU, fed the same env-like stream (``--worlds`` worlds, 84x84 random frames,
    staggered 125-step episodes) until both hold ``--fill`` transitions; rounds alternate the two
    replays, the figure is the median call.

    OMP_NUM_THREADS=1 python benchmarks/drqv2_replay.py [--capacity 62500] [--fill 5000] [--worlds 16] [--device cpu]

With ``--device cuda`` the agents, replays and the stream's tensors live on the GPU and every timed
call ends with ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import fields

import torch
from torch.utils._pytree import tree_map

from robolearn.algos.drqv2 import DrQV2, DrQV2Config
from robolearn.algos.drqv2.agent import DISCOUNT
from robolearn.algos.drqv2.replay import FrameReplay
from robolearn.data.replay import ReplayBuffer
from robolearn.types import Transition

SIZE, K, N_STEP, CHANNELS = 84, 3, 3, 3


def stacked_bytes(capacity: int) -> int:
    """Bytes a stacked ReplayBuffer of ``capacity`` allocates for DrQ-v2's fields."""
    meta = torch.device("meta")
    replay = ReplayBuffer(capacity, meta)
    img = torch.empty((1, SIZE, SIZE, K * CHANNELS), dtype=torch.uint8, device=meta)
    one = torch.empty(1, device=meta)
    replay.add({"image": img}, torch.empty((1, 1), device=meta), one, {"image": img}, one.bool(), one.bool(),
               extras={DISCOUNT: one})  # fmt: skip
    return sum(t.numel() * t.element_size() for v in replay.storage.values()
               for t in (v.values() if isinstance(v, dict) else [v]))  # fmt: skip


def frame_bytes(capacity: int, worlds: int) -> tuple[int, int]:
    """Bytes a FrameReplay of ``capacity`` over ``worlds`` worlds allocates, and of those the frames'."""
    meta = torch.device("meta")
    replay = FrameReplay(capacity, K, N_STEP, "image", meta)
    frame = torch.empty((worlds, SIZE, SIZE, CHANNELS), dtype=torch.uint8, device=meta)
    done = torch.empty(worlds, dtype=torch.bool, device=meta)
    obs_idx, next_idx = replay.write_frames(frame, frame, done)
    per_slot = torch.empty((N_STEP, worlds), device=meta)
    replay.add([0, -1, -1], per_slot.bool(), {"image": obs_idx.expand(N_STEP, -1, -1)}, per_slot.unsqueeze(-1),
               per_slot, {"image": next_idx}, done, done, {DISCOUNT: per_slot})  # fmt: skip
    assert replay.frames is not None
    return replay.nbytes(), replay.frames.numel()


def stream(worlds: int, seed: int = 0):
    """Endless env-like steps of ``worlds`` worlds (staggered 125-step episodes, every 3rd a termination)."""
    g = torch.Generator().manual_seed(seed)
    left = torch.arange(worlds) * 7 % 125 + 1
    episode = torch.zeros(worlds, dtype=torch.long)

    def frame() -> torch.Tensor:
        return torch.randint(0, 256, (worlds, SIZE, SIZE, CHANNELS), generator=g, dtype=torch.uint8)

    obs = frame()
    while True:
        left = left - 1
        done = left == 0
        term = done & (episode % 3 == 2)
        nxt = frame()
        final = torch.where(done.view(-1, 1, 1, 1), frame(), nxt)
        yield Transition({"image": obs}, torch.rand(worlds, 1, generator=g) * 2 - 1, torch.randn(worlds, generator=g),
                         {"image": final}, term, done & ~term)  # fmt: skip
        episode = episode + done.long()
        left = torch.where(done, torch.full_like(left, 125), left)
        obs = nxt


def timed(fn, device: torch.device) -> float:  # noqa: ANN001 (a zero-argument callable)
    """Seconds ``fn()`` takes, the device's queue drained before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    """Print the memory table and the timing table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=62_500, help="transitions for the memory table")
    parser.add_argument("--fill", type=int, default=5_000, help="transitions held by the timed replays")
    parser.add_argument("--worlds", type=int, default=16)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10, help="sample calls per replay and round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)

    print(f"## memory: {args.capacity:,} transitions, {SIZE}x{SIZE}x{CHANNELS} uint8 frames, frame_stack={K}, n_step={N_STEP}, 1-D action")
    print("| replay | worlds | bytes allocated | bytes / transition | frames stored |")
    print("|---|---:|---:|---:|---:|")
    old = stacked_bytes(args.capacity)
    print(f"| stacked | any | {old:,} ({old / 1e9:.2f} GB) | {old / args.capacity:,.0f} | {2 * K * args.capacity:,} |")
    for worlds in sorted({1, args.worlds}):
        new, frame_numel = frame_bytes(args.capacity, worlds)
        frames = frame_numel // (SIZE * SIZE * CHANNELS)
        print(f"| frames | {worlds} | {new:,} ({new / 1e9:.2f} GB) | {new / args.capacity:,.0f} | {frames:,} |")

    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    print(f"\n## time: sample({args.batch}) and process, {args.worlds} worlds, {args.fill:,} transitions held, {where}")
    agents = {}
    for kind in ("stacked", "frames"):
        cfg = DrQV2Config(buffer_size=args.fill, replay=kind, learning_starts=10**9, batch_size=args.batch,
                          hidden_dim=32, feature_dim=8, cnn_channels=4)  # fmt: skip
        agents[kind] = DrQV2({"image": SIZE * SIZE * CHANNELS}, 1, cfg, action_low=-1.0, action_high=1.0,
                             device=dev, seed=0)  # fmt: skip
    process: dict[str, list[float]] = {k: [] for k in agents}
    steps = -(-args.fill // args.worlds) + 2 * N_STEP + 2  # the frame replay's per-world ring, and some
    for tr, _ in zip(stream(args.worlds), range(steps), strict=False):
        tr = Transition(**{f.name: tree_map(lambda x: x.to(dev), getattr(tr, f.name)) for f in fields(tr)})
        for kind, agent in agents.items():
            process[kind].append(timed(lambda agent=agent, tr=tr: agent.process(tr), dev))
    sample: dict[str, list[float]] = {k: [] for k in agents}
    for r in range(args.rounds):
        for kind in (("stacked", "frames") if r % 2 == 0 else ("frames", "stacked")):
            agent = agents[kind]
            agent.replay.sample(args.batch, agent.generator)  # warm
            for _ in range(args.calls):
                sample[kind].append(timed(lambda agent=agent: agent.replay.sample(args.batch, agent.generator), dev))
    print("| replay | transitions held | storage bytes | sample ms (median) | process ms / step (median) |")
    print("|---|---:|---:|---:|---:|")
    for kind, agent in agents.items():
        rp = agent.replay
        held = len(rp)
        nbytes = rp.nbytes() if isinstance(rp, FrameReplay) else sum(
            t.numel() * t.element_size() for v in rp.storage.values() for t in (v.values() if isinstance(v, dict) else [v]))  # fmt: skip
        print(f"| {kind} | {held:,} | {nbytes:,} | {statistics.median(sample[kind]) * 1e3:.1f} | "
              f"{statistics.median(process[kind]) * 1e3:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
