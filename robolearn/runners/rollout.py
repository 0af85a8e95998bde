"""One rollout loop for evaluation, the ``eval`` and ``sim2sim`` commands and dataset collection.

:func:`rollout` steps a batched env (robolearn's ``VecEnv`` contract: done worlds reset by index
inside ``step``) with a policy ``obs -> action`` and keeps each finished episode's return, length
and, where the env reports it in ``info["episode"]["success"]``, success. Two ways to end:

* ``episodes=None``: the first episode of every world (deterministic evaluation, one score per
  world); a world whose episode has not ended within ``max_steps`` counts with its partial return
  and ``completed`` false.
* ``episodes=N``: the first ``N`` episodes to end, in the order they ended, several per world.

Returns are the sums of the rewards ``step`` returned, so any ``VecEnv`` works, with or without
``info["episode"]``. A per-step callback sees every transition (dataset recording, latency
wrappers that restart on a new episode) and may stop the rollout; ``video`` records world 0's
first episode.

A policy with state between steps (a recurrent learner's ``act_inference``) is restarted through
``reset_state(done[N])`` for every world whose episode ended, and for all worlds after the env is
reset; when ``act`` is the bound ``act``/``act_inference`` of a learner with a ``reset(done)`` verb
(:class:`robolearn.types.Resettable`) that verb is used without being named.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from robolearn.types import Resettable

Act = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]
"""A policy: observation groups ``[N, ...]`` to actions ``[N, A]``."""


@dataclass
class RolloutStep:
    """One control step of every world, as a :data:`StepCallback` sees it."""

    t: int
    """Index of the step in the rollout (0 for the first)."""
    obs: Mapping[str, torch.Tensor]
    """Observations the actions were chosen from."""
    action: torch.Tensor
    """Actions ``[N, A]`` applied."""
    reward: torch.Tensor
    """Rewards ``[N]``."""
    terminated: torch.Tensor
    """Worlds ``[N]`` whose episode reached a terminal state."""
    truncated: torch.Tensor
    """Worlds ``[N]`` whose episode was cut (time limit, divergence)."""
    next_obs: Mapping[str, torch.Tensor]
    """Observations after the step (a done world's are those of its new episode)."""
    info: dict[str, Any]
    """The env's info (``final_obs``, ``episode``, ``drawn``, ``diverged`` ...)."""
    done_ids: torch.Tensor
    """Worlds whose episode ended this step, ascending (empty if none)."""


ResetState = Callable[[torch.Tensor], None]
"""Restart a stateful policy's state for the worlds where ``done[N]`` is true."""

StepCallback = Callable[[RolloutStep], "bool | None"]
"""Called after every step; returning ``True`` ends the rollout after that step."""


@dataclass
class VideoSpec:
    """What :func:`rollout` films: world 0 until its first episode ends."""

    width: int = 320
    """Frame width in pixels."""
    height: int = 240
    """Frame height in pixels."""
    camera: str | int = -1
    """A camera name of the model, or -1 for the free camera."""
    max_frames: int | None = None
    """Stop filming after this many frames (``None``: the whole episode)."""


@dataclass
class RolloutResult:
    """Episodes of a rollout: one entry per episode, in end order (or world order, see :func:`rollout`)."""

    returns: torch.Tensor
    """Undiscounted returns ``[E]``, float64, on the CPU."""
    lengths: torch.Tensor
    """Lengths ``[E]`` in control steps, int64."""
    successes: torch.Tensor
    """Success ``[E]`` as 1.0/0.0, NaN where the env did not judge it; float64."""
    env_ids: torch.Tensor
    """World ``[E]`` each episode ran in."""
    completed: torch.Tensor
    """``[E]`` bool: the episode ended (false only for worlds cut by ``max_steps`` in per-world mode)."""
    steps: int
    """Control steps taken."""
    diverged: int
    """World-steps that diverged during the rollout (from ``info["diverged"]``)."""
    frames: list[np.ndarray] = field(default_factory=list)
    """Video frames ``[H, W, 3]`` uint8 of world 0, if asked for."""

    @property
    def num_episodes(self) -> int:
        """Number of entries."""
        return int(self.returns.numel())

    def summary(self, prefix: str = "") -> dict[str, float]:
        """Mean and spread of the returns, mean length and (if judged anywhere) success rate."""
        r = self.returns
        out = {
            f"{prefix}return": float(r.mean()) if r.numel() else math.nan,
            f"{prefix}return_std": float(r.std()) if r.numel() > 1 else 0.0,
            f"{prefix}episode_length": float(self.lengths.double().mean()) if r.numel() else math.nan,
        }
        judged = self.successes[~torch.isnan(self.successes)]
        if judged.numel():
            out[f"{prefix}success_rate"] = float(judged.mean())
        return out


def rollout(
    env: Any,
    act: Act,
    *,
    episodes: int | None = None,
    max_steps: int | None = None,
    seed: int | None = None,
    reset: bool = True,
    on_step: StepCallback | None = None,
    video: VideoSpec | None = None,
    inference: bool = True,
    reset_state: ResetState | None = None,
) -> RolloutResult:
    """Step ``env`` with ``act`` and return the episodes it played (see the module docstring).

    Args:
        env: a batched env (``num_envs``, ``reset(seed)``, ``step(action)``; ``max_episode_length``
            for the default step limit; ``render`` for video).
        act: the policy; deterministic for evaluation, noisy for data collection: its business.
        episodes: ``None`` for the first episode of every world, else how many episodes to keep.
        max_steps: most control steps; default ``env.max_episode_length`` for ``episodes=None``,
            else enough for ``episodes`` full-length episodes plus one round.
        seed: reset seed (``None``: the env keeps its random streams).
        reset: reset the env first; ``False`` continues from ``env.obs``.
        on_step: called after every step with a :class:`RolloutStep`; ``True`` stops.
        video: film world 0's first episode with these settings.
        inference: run under ``torch.inference_mode``; ``False`` uses ``torch.no_grad`` instead,
            for an env that lives on after the rollout (tensors it creates under inference mode
            could not be updated in place later, e.g. when a training run resumes it).
        reset_state: restarts a stateful policy's state where ``done[N]``; default: the ``reset``
            verb of the learner ``act`` is bound to, if it has one (else none: a stateless policy).

    Returns:
        The episodes; fewer than ``episodes`` if ``max_steps`` or ``on_step`` ended the rollout
        first (callers that need them all check :attr:`RolloutResult.num_episodes`).
    """
    if episodes is not None and (isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1):
        raise ValueError(f"episodes: expected an integer >= 1 or None, got {episodes!r}")
    n = int(env.num_envs)
    if max_steps is None:
        length = getattr(env, "max_episode_length", None)
        if length is None:
            raise ValueError("max_steps: required for an env without max_episode_length")
        max_steps = int(length) if episodes is None else (math.ceil(episodes / n) + 1) * int(length)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps: expected an integer >= 1, got {max_steps!r}")
    if reset_state is None:
        reset_state = _learner_reset(act)
    with torch.inference_mode() if inference else torch.no_grad():
        return _run(env, act, n, episodes, max_steps, seed, reset, on_step, video, reset_state)


def _learner_reset(act: Act) -> ResetState | None:
    """The ``reset`` verb of the learner whose bound ``act``/``act_inference`` is ``act``, if any."""
    owner = getattr(act, "__self__", None)
    if getattr(act, "__name__", "") in ("act", "act_inference") and isinstance(owner, Resettable):
        return owner.reset
    return None


def _run(
    env: Any,
    act: Act,
    n: int,
    episodes: int | None,
    max_steps: int,
    seed: int | None,
    reset: bool,
    on_step: StepCallback | None,
    video: VideoSpec | None,
    reset_state: ResetState | None,
) -> RolloutResult:
    obs = env.reset(seed=seed)[0] if reset else env.obs
    if reset_state is not None and reset:  # every world starts an episode: no state carries over
        reset_state(torch.ones(n, dtype=torch.bool, device=env.device))
    running = torch.zeros(n, dtype=torch.float64, device=env.device)  # return of each world's current episode
    steps_in = torch.zeros(n, dtype=torch.long, device=env.device)
    success = torch.full((n,), math.nan, dtype=torch.float64, device=env.device)
    first = torch.ones(n, dtype=torch.bool, device=env.device)  # per-world mode: first episode still running
    ended: list[tuple[torch.Tensor, ...]] = []  # (ids, returns, lengths, success) per step with ends
    kept = 0
    diverged = 0
    frames: list[np.ndarray] = []
    filming = video is not None
    t = 0
    for t in range(max_steps):  # noqa: B007 - t is read after the loop
        if filming:
            assert video is not None
            frames.append(env.render([0], video.width, video.height, camera=video.camera)[0])
            filming = video.max_frames is None or len(frames) < video.max_frames
        action = act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        running += reward.double()
        steps_in += 1
        done = terminated | truncated
        if reset_state is not None:  # before the next act: the next observation opens a new episode
            reset_state(done)
        if "diverged" in info:
            diverged += int(info["diverged"].sum())
        done_ids = torch.nonzero(done).flatten()
        if done_ids.numel():
            episode = info.get("episode")
            if episode is not None and "success" in episode:
                success[episode["env_ids"]] = episode["success"].double()
            keep = done_ids[first[done_ids]] if episodes is None else done_ids
            if episodes is not None:
                keep = keep[: episodes - kept]
            if keep.numel():
                ended.append((keep, running[keep].clone(), steps_in[keep].clone(), success[keep].clone()))
                kept += int(keep.numel())
            if bool(done[0]):
                filming = False
            running[done_ids] = 0.0
            steps_in[done_ids] = 0
            success[done_ids] = math.nan
            if episodes is None:
                first[done_ids] = False
        stop = on_step(RolloutStep(t, obs, action, reward, terminated, truncated, next_obs, info, done_ids)) if on_step else None
        obs = next_obs
        if stop or (episodes is None and not bool(first.any())) or (episodes is not None and kept >= episodes):
            break
    if episodes is None and bool(first.any()):  # worlds cut by max_steps count with their partial return
        cut = torch.nonzero(first).flatten()
        ended.append((cut, running[cut].clone(), steps_in[cut].clone(), success[cut].clone()))
    return _result(ended, episodes is None, n, t + 1, diverged, frames, first)


def _result(
    ended: list[tuple[torch.Tensor, ...]],
    per_world: bool,
    n: int,
    steps: int,
    diverged: int,
    frames: list[np.ndarray],
    unfinished: torch.Tensor,
) -> RolloutResult:
    if ended:
        ids, returns, lengths, success = (torch.cat(parts).cpu() for parts in zip(*ended, strict=True))
    else:
        ids, lengths = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        returns, success = torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
    completed = torch.ones(ids.numel(), dtype=torch.bool)
    if per_world:  # world order, one entry each
        order = torch.argsort(ids)
        ids, returns, lengths, success = ids[order], returns[order], lengths[order], success[order]
        completed = ~unfinished.cpu()[ids]
    return RolloutResult(returns, lengths, success, ids, completed, steps, diverged, frames)
