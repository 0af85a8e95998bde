"""DrQ-v2's replay of single frames: each rendered frame is stored once, the stacks are rebuilt at
sample time (as the authors' replay does with its episodes of single frames).

A stacked transition holds two stacks of ``k`` frames (``obs`` and the n-step ``next_obs``), so a
plain replay stores every frame ``2k`` times. Here each world has a ring of single frames
``[F, H, W, C]`` (uint8) and each transition the frame numbers of its two stacks; :meth:`FrameReplay.gather`
returns exactly the :class:`~robolearn.types.Batch` a stacked replay fed the same steps returns.

Layout, per world ``w`` (``N`` worlds, all stepping together):

- frames: the first frame of each episode, then each step's next frame (``info["final_obs"]``: the
  time-out or terminal frame of a world that ended, else the next step's frame, so a continuing
  world's observation is the previous step's next frame and is not stored twice). Frame numbers
  count per world (``written[w]``); frame ``f`` lives in slot ``f % F``.
- transitions: keyed by the step their n-step window started (``s``), in slot ``s % T`` of a ring of
  ``T = ceil(capacity / N) + n - 1`` per world. A stack is ``k`` frame numbers, oldest first, clamped
  at the episode's first frame (an episode start repeats its first frame, as the agent's
  :class:`~robolearn.algos.drqv2.agent.FrameStack` does).
- sampleable: the start steps whose window is surely complete and not yet overwritten,
  ``max(0, S - T) <= s <= S - n`` after ``S`` steps (host-side ints), less the oldest transitions of a
  world whose oldest frame the frame ring has already overwritten. ``F = T + k + n + 1`` holds every
  frame of the window plus ``n + 1`` episode starts; a world with more episodes in the window (each
  start takes one extra frame) loses that many of its oldest transitions. That check runs on the
  device, so neither :meth:`FrameReplay.add` nor :meth:`FrameReplay.sample` reads anything back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from robolearn.types import Batch

_RAND_BITS = 31
"""Bits of the integer draw that :meth:`FrameReplay.sample` scales to the count of valid transitions."""


class FrameReplay:
    """Replay of N worlds' single uint8 frames plus per-transition frame numbers and small arrays.

    Fed once per env step: :meth:`write_frames` stores the step's frames and returns the frame numbers
    of the ``obs`` and ``next_obs`` stacks, which travel through the n-step window like any other
    group; :meth:`add` then stores the windows that step completed (a dense mask, no host sync).
    """

    def __init__(self, capacity: int, frame_stack: int, n_step: int, image_group: str, device: str | torch.device = "cpu") -> None:
        """``capacity``: transitions kept over all worlds; ``frame_stack``: frames per stack (``k``);
        ``n_step``: steps of a window (``n``); ``image_group``: the observation group holding the
        frames; ``device``: where storage lives. Storage is allocated on the first step.
        """
        for name, value in (("capacity", capacity), ("frame_stack", frame_stack), ("n_step", n_step)):
            if int(value) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value}")
        self.capacity, self.k, self.n = int(capacity), int(frame_stack), int(n_step)
        self.group = image_group
        self.device = torch.device(device)
        self.num_worlds = 0
        self.per_world = 0
        """``T``: transition slots per world."""
        self.frames_per_world = 0
        """``F``: frame slots per world."""
        self.steps = 0
        """Env steps added so far (host-side; the start step of the newest window is ``steps - 1``)."""
        self.frames: torch.Tensor | None = None
        """``[N, F, H, W, C]`` uint8."""
        self.written = torch.zeros(0, dtype=torch.long, device=self.device)
        """``[N]``: frames written per world (the next frame's number)."""
        self.episode_start = torch.zeros(0, dtype=torch.long, device=self.device)
        """``[N]``: frame number of each world's current episode's first frame."""
        self.restart = torch.zeros(0, dtype=torch.bool, device=self.device)
        """``[N]``: the world's next observation starts an episode."""
        self.store: dict[str, Any] = {}
        """Per-transition fields ``[N, T, ...]``: ``obs``/``next_obs`` groups (the image group as
        ``[k]`` frame numbers), ``action``, ``reward``, ``terminated``, ``truncated``, ``extras``."""

    # -- sizes ------------------------------------------------------------------------------------
    def _host_range(self) -> tuple[int, int, int]:
        """Sampleable start steps ``lo..hi`` and their count, before the frame-ring check."""
        hi = self.steps - self.n  # windows that started by then are complete, whatever the episode did
        lo = max(0, self.steps - self.per_world)  # younger ones are not overwritten yet
        return lo, hi, max(0, hi - lo + 1)

    def __len__(self) -> int:
        """Sampleable transitions (an upper bound: the frame-ring check may drop a few of the oldest)."""
        return self.num_worlds * self._host_range()[2]

    def nbytes(self) -> int:
        """Bytes of every allocated storage tensor (frames, frame numbers and the small arrays)."""
        tensors = [self.written, self.episode_start, self.restart]
        if self.frames is not None:
            tensors.append(self.frames)
        for value in self.store.values():
            tensors.extend(value.values() if isinstance(value, dict) else [value])
        return sum(t.numel() * t.element_size() for t in tensors)

    def _allocate_frames(self, frame: torch.Tensor) -> None:
        n = int(frame.shape[0])
        self.num_worlds = n
        # n - 1 extra slots: the newest n - 1 start steps are not sampleable yet (their window may
        # still be open), so ``capacity`` transitions are sampleable once the ring is full.
        self.per_world = math.ceil(self.capacity / n) + self.n - 1
        self.frames_per_world = self.per_world + self.k + self.n + 1
        self.frames = torch.zeros((n, self.frames_per_world, *frame.shape[1:]), dtype=torch.uint8, device=self.device)
        self.written = torch.zeros(n, dtype=torch.long, device=self.device)
        self.episode_start = torch.zeros(n, dtype=torch.long, device=self.device)
        self.restart = torch.ones(n, dtype=torch.bool, device=self.device)  # the first step starts episodes

    # -- writing ------------------------------------------------------------------------------------
    @torch.no_grad()
    def write_frames(self, frame: torch.Tensor, next_frame: torch.Tensor, done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store one step's frames ``[N, H, W, C]`` (``next_frame``: ``info["final_obs"]``'s, ``done``:
        terminated or truncated) and return the frame numbers ``[N, k]`` of the ``obs`` and the
        ``next_obs`` stacks. A continuing world's ``frame`` must be the previous step's ``next_frame``
        (what a :class:`~robolearn.envs.BatchedEnv` gives); only an episode's first frame is stored from ``frame``.
        """
        if frame.dtype != torch.uint8 or next_frame.dtype != torch.uint8:
            raise ValueError(f"{self.group}: expected uint8 frames, got {frame.dtype} and {next_frame.dtype}")
        if self.frames is None:
            self._allocate_frames(frame)
        assert self.frames is not None
        if tuple(frame.shape) != (self.num_worlds, *self.frames.shape[2:]) or next_frame.shape != frame.shape:
            raise ValueError(
                f"{self.group}: the replay holds frames [{self.num_worlds}, {', '.join(map(str, self.frames.shape[2:]))}] "
                f"per step, got {list(frame.shape)} and {list(next_frame.shape)}"
            )
        rows = torch.arange(self.num_worlds, device=self.device)
        slots = self.frames_per_world
        # Every world writes its frame (no host sync to pick the restarting ones): a continuing world
        # does not advance its count, so the next frame below lands on the same slot and replaces it.
        self.frames[rows, self.written % slots] = frame.to(self.device)
        restart = self.restart
        self.episode_start = torch.where(restart, self.written, self.episode_start)
        self.written = self.written + restart.long()
        current = self.written - 1  # the observation's frame
        back = torch.arange(1 - self.k, 1, device=self.device)  # oldest first
        obs_idx = torch.maximum(current.unsqueeze(1) + back, self.episode_start.unsqueeze(1))
        self.frames[rows, self.written % slots] = next_frame.to(self.device)
        next_idx = torch.maximum(current.unsqueeze(1) + 1 + back, self.episode_start.unsqueeze(1))
        self.written = self.written + 1
        self.restart = done.to(self.device, torch.bool)
        return obs_idx, next_idx

    def _allocate_store(
        self, obs: Mapping[str, torch.Tensor], action: torch.Tensor, reward: torch.Tensor,
        next_obs: Mapping[str, torch.Tensor], extras: Mapping[str, torch.Tensor],
    ) -> None:  # fmt: skip
        def like(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
            return torch.zeros((self.num_worlds, self.per_world, *t.shape[2:]), dtype=dtype or t.dtype, device=self.device)

        self.store = {
            "obs": {g: like(v) for g, v in obs.items()},
            "next_obs": {g: like(v.unsqueeze(0)) for g, v in next_obs.items()},
            "action": like(action),
            "reward": like(reward),
            "terminated": like(reward, torch.bool),
            "truncated": like(reward, torch.bool),
            "extras": {k: like(v) for k, v in extras.items()},
        }

    @torch.no_grad()
    def add(
        self,
        start: Sequence[int],
        emit: torch.Tensor,
        obs: Mapping[str, torch.Tensor],
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: Mapping[str, torch.Tensor],
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        extras: Mapping[str, torch.Tensor],
    ) -> None:
        """Store the windows one step completed, given densely for the window's ``W`` slots:
        ``start[W]`` the host-side step each slot's window started (``< 0``: never used), ``emit[W, N]``
        which slots completed this step; ``obs``, ``action``, ``reward`` and ``extras`` per slot
        ``[W, N, ...]`` (the image group as the frame numbers of :meth:`write_frames`); ``next_obs``,
        ``terminated`` and ``truncated`` of this step ``[N, ...]``.
        """
        if self.frames is None:
            raise RuntimeError("FrameReplay.add: call write_frames for this step first")
        if self.group not in obs or self.group not in next_obs:
            raise ValueError(f"{self.group}: expected the image group's frame numbers in obs and next_obs")
        if max(start) != self.steps:
            raise RuntimeError(f"FrameReplay.add: the window's newest step is {max(start)}, the replay's {self.steps}")
        if not self.store:
            self._allocate_store(obs, action, reward, next_obs, extras)
        s = self.store
        for i, step in enumerate(start):
            if step < 0:
                continue
            pos = step % self.per_world
            mask = emit[i].to(self.device, torch.bool)

            def put(dst: torch.Tensor, new: torch.Tensor, pos: int = pos, mask: torch.Tensor = mask) -> None:
                # A masked copy (no host sync): the slots of windows still open keep their content.
                m = mask.view(-1, *([1] * (new.dim() - 1)))
                dst[:, pos] = torch.where(m, new.to(self.device, dst.dtype), dst[:, pos])

            for g in s["obs"]:
                put(s["obs"][g], obs[g][i])
                put(s["next_obs"][g], next_obs[g])
            put(s["action"], action[i])
            put(s["reward"], reward[i])
            put(s["terminated"], terminated)
            put(s["truncated"], truncated)
            for k, t in s["extras"].items():
                put(t, extras[k][i])
        self.steps += 1

    # -- reading ------------------------------------------------------------------------------------
    def valid_counts(self) -> torch.Tensor:
        """``[N]`` sampleable transitions per world: the host range less the start steps whose oldest
        frame the frame ring has overwritten (a device tensor; the valid ones end at the range's end).
        """
        lo, _, count = self._host_range()
        ring = torch.arange(self.per_world, device=self.device)
        in_range = (ring - lo) % self.per_world < count
        oldest = self.store["obs"][self.group][:, :, 0]
        live = oldest >= (self.written - self.frames_per_world).unsqueeze(1)
        return (in_range.unsqueeze(0) & live).sum(1)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """Draw ``batch_size`` sampleable transitions uniformly with replacement (``generator`` on the
        replay's device makes the draw reproducible); no host sync.
        """
        if len(self) == 0:
            raise RuntimeError("FrameReplay.sample: nothing sampleable yet")
        counts = self.valid_counts()
        cum = counts.cumsum(0)
        r = torch.randint(0, 2**_RAND_BITS, (int(batch_size),), generator=generator, device=self.device)
        u = (r * cum[-1]) >> _RAND_BITS  # uniform over the valid transitions, 0 .. total - 1
        world = torch.searchsorted(cum, u, right=True)
        # world w's valid start steps are hi - counts[w] + 1 .. hi; u - (cum[w] - counts[w]) is the offset
        step = self._host_range()[1] + 1 + u - cum[world]
        return self.gather(world, step)

    def gather(self, world: torch.Tensor, step: torch.Tensor) -> Batch:
        """The transitions of ``world[B]`` that started at ``step[B]`` (not checked: see :meth:`sampleable`)."""
        assert self.frames is not None
        s = self.store
        world = world.to(self.device)
        pos = step.to(self.device) % self.per_world
        idx = torch.cat([s["obs"][self.group][world, pos], s["next_obs"][self.group][world, pos]], dim=1)  # [B, 2k]
        flat = world.unsqueeze(1) * self.frames_per_world + idx % self.frames_per_world
        frames = self.frames.flatten(0, 1)
        b, (h, w, c) = world.shape[0], self.frames.shape[2:]
        # Each frame is copied straight to its channels of the stacked layout (frame j at channels
        # j*C..(j+1)*C-1, oldest first, as stack_frames lays them out): one pass over the bytes, where
        # gathering [B, k, H, W, C] first and permuting after costs a second, slow strided copy.
        images = torch.empty((2, b, h, w, self.k, c), dtype=torch.uint8, device=self.device)
        for j in range(2 * self.k):
            images[j // self.k, :, :, :, j % self.k] = frames.index_select(0, flat[:, j])
        obs = {g: v[world, pos] for g, v in s["obs"].items() if g != self.group}
        next_obs = {g: v[world, pos] for g, v in s["next_obs"].items() if g != self.group}
        return Batch(
            obs={self.group: images[0].view(b, h, w, self.k * c), **obs},
            action=s["action"][world, pos],
            reward=s["reward"][world, pos],
            next_obs={self.group: images[1].view(b, h, w, self.k * c), **next_obs},
            terminated=s["terminated"][world, pos],
            truncated=s["truncated"][world, pos],
            extras={k: v[world, pos] for k, v in s["extras"].items()},
        )

    def sampleable(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(world, step)`` ``[M]`` of every sampleable transition (one host sync: for tests and tools)."""
        if len(self) == 0:
            empty = torch.zeros(0, dtype=torch.long, device=self.device)
            return empty, empty
        counts = self.valid_counts()
        hi = self._host_range()[1]
        world = torch.repeat_interleave(torch.arange(self.num_worlds, device=self.device), counts)
        first = torch.repeat_interleave(hi + 1 - counts, counts)
        offset = torch.arange(world.shape[0], device=self.device) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        return world, first + offset

    # -- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Sizes, counters and the used part of the storage, so a checkpoint resumes the replay."""
        state: dict[str, Any] = {"kind": "frames", "capacity": self.capacity, "frame_stack": self.k, "n_step": self.n,
                                 "steps": self.steps, "num_worlds": self.num_worlds}  # fmt: skip
        if self.frames is None:
            return state
        used_frames = min(self.frames_per_world, 2 * self.steps)  # at most two frames per world and step
        used = min(self.per_world, self.steps)

        def cut(t: torch.Tensor) -> torch.Tensor:
            return t[:, :used].clone()

        state.update(
            frames=self.frames[:, :used_frames].clone(),
            frame_shape=tuple(self.frames.shape[2:]),
            written=self.written.clone(),
            episode_start=self.episode_start.clone(),
            restart=self.restart.clone(),
            store={key: {g: cut(t) for g, t in v.items()} if isinstance(v, dict) else cut(v) for key, v in self.store.items()},
        )
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` (capacity, frame stack and n-step must match)."""
        if state.get("kind") != "frames":
            raise ValueError("replay: the checkpoint holds a stacked replay, expected a frame replay (set algo.replay='stacked' to resume it)")
        for name, mine in (("capacity", self.capacity), ("frame_stack", self.k), ("n_step", self.n)):
            if int(state[name]) != mine:
                raise ValueError(f"{name}: the checkpoint's replay has {state[name]}, this one {mine}")
        self.steps = int(state["steps"])
        self.frames, self.store, self.num_worlds = None, {}, 0
        if "frames" not in state:
            return
        frames = state["frames"]
        self._allocate_frames(torch.zeros((int(state["num_worlds"]), *state["frame_shape"]), dtype=torch.uint8))
        assert self.frames is not None
        self.frames[:, : frames.shape[1]] = frames.to(self.device)
        self.written = state["written"].to(self.device).clone()
        self.episode_start = state["episode_start"].to(self.device).clone()
        self.restart = state["restart"].to(self.device).clone()

        def grow(t: torch.Tensor) -> torch.Tensor:
            full = torch.zeros((self.num_worlds, self.per_world, *t.shape[2:]), dtype=t.dtype, device=self.device)
            full[:, : t.shape[1]] = t.to(self.device)
            return full

        self.store = {key: {g: grow(t) for g, t in v.items()} if isinstance(v, dict) else grow(v) for key, v in state["store"].items()}


__all__: list[str] = ["FrameReplay"]
