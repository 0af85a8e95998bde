"""Dataset collection: roll a policy out in a batched env and keep whole episodes.

The env is any batched env with robolearn's step contract (same-step autoreset, the observation an
episode ended on in ``info["final_obs"]``, ``info["episode"]["env_ids"]`` for the worlds that
ended); the policy maps observation groups to actions. Episodes are cut out of the time-major
record when they end, so each keeps its own terminal/time-out flag and its true final
observation; the values the env drew for a world (``info["drawn"]``: randomised parameters,
delays) go into each step's ``infos`` under ``drawn/<name>``, so datasets carry what the
privileged critic or a teacher would see.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tqdm import tqdm

from robolearn.runners.rollout import Act, RolloutStep, rollout


def collect_episodes(
    env: Any,
    act: Act,
    episodes: int | None = None,
    *,
    transitions: int | None = None,
    groups: tuple[str, ...] | None = None,
    seed: int | None = None,
    progress: bool = True,
    max_steps: int | None = None,
) -> list[dict[str, Any]]:
    """Step ``env`` with ``act`` until ``episodes`` episodes have ended; return them in end order.

    Args:
        env: a batched env (robolearn's step contract).
        act: the behaviour policy (noise, if any, is its business).
        episodes: how many complete episodes to keep; or
        transitions: keep whole episodes until they hold at least this many transitions.
        groups: observation groups to keep (default: all but ``critic``, which repeats the others).
        seed: reset seed of the env (``None`` keeps its streams).
        progress: show a progress bar over episodes.
        max_steps: safety cap on control steps (default: enough for the episodes at full length, twice).

    Returns:
        Episode dicts as :meth:`robolearn.data.Dataset.from_episodes` reads them: ``observations``
        (group -> ``[T + 1, ...]``), ``actions`` ``[T, A]``, ``rewards`` ``[T]``, ``terminals`` and
        ``timeouts`` ``[T]`` (only the last step flagged), ``infos`` (name -> ``[T, ...]``).
    """
    if (episodes is None) == (transitions is None):
        raise ValueError("collect_episodes: give exactly one of episodes and transitions")
    if (episodes or transitions or 0) < 1:
        raise ValueError(f"episodes/transitions: expected >= 1, got {episodes or transitions}")
    target_eps = episodes if episodes is not None else 1 << 62
    target_steps = transitions if transitions is not None else 1 << 62
    episodes = episodes if episodes is not None else -(-int(transitions) // env.max_episode_length) + env.num_envs
    obs, _ = env.reset(seed=seed)
    keep = tuple(g for g in obs if g != "critic") if groups is None else tuple(groups)
    n = env.num_envs
    limit = max_steps or 2 * (episodes // n + 1) * env.max_episode_length
    if transitions is not None and max_steps is None:
        limit = 4 * (transitions // n + 1) + 2 * env.max_episode_length  # short episodes need more of them
    rec: dict[str, list[torch.Tensor]] = {f"obs/{g}": [] for g in keep}
    rec.update(actions=[], rewards=[])
    drawn: dict[str, list[torch.Tensor]] = {}
    start = torch.zeros(n, dtype=torch.long)  # row of each world's current episode in the record
    ends: list[tuple[int, int, int, bool, dict[str, torch.Tensor]]] = []  # world, first, last, terminal, final obs
    kept_steps = 0
    bar = tqdm(total=episodes, desc="collecting", unit="ep", disable=not progress, leave=False)

    def record(step: RolloutStep) -> bool:
        """Append the step to the time-major record; cut out the episodes that ended."""
        nonlocal kept_steps
        for g in keep:
            rec[f"obs/{g}"].append(step.obs[g].cpu())
        rec["actions"].append(step.action.detach().float().cpu())
        rec["rewards"].append(step.reward.detach().double().cpu())
        for name, values in step.info.get("drawn", {}).items():
            drawn.setdefault(name, []).append(values.cpu())
        if not step.done_ids.numel():
            return False
        final = step.info["final_obs"]
        for i in step.done_ids.tolist():
            if len(ends) < target_eps and kept_steps < target_steps:
                last_obs = {g: final[g][i].cpu().clone() for g in keep}
                ends.append((i, int(start[i]), step.t, bool(step.terminated[i]), last_obs))
                kept_steps += step.t + 1 - int(start[i])
            start[i] = step.t + 1
        bar.update(min(step.done_ids.numel(), max(episodes - bar.n, 0)))
        return len(ends) >= target_eps or kept_steps >= target_steps

    # The record decides when to stop (episodes or transitions), not rollout's own episode count.
    rollout(env, act, episodes=1 << 62, max_steps=limit, reset=False, on_step=record)
    bar.close()
    if len(ends) < target_eps and kept_steps < target_steps:
        raise RuntimeError(f"only {len(ends)} episodes ({kept_steps} transitions) ended within {limit} control steps")
    stacked = {k: torch.stack(v) for k, v in rec.items()}  # [T, N, ...]
    stacked_drawn = {k: torch.stack(v) for k, v in drawn.items()}
    out = []
    for i, first, last, terminal, final_obs in ends:
        steps = slice(first, last + 1)
        length = last + 1 - first
        flags = torch.zeros(length, dtype=torch.bool)
        term, tout = flags.clone(), flags.clone()
        (term if terminal else tout)[-1] = True
        observations = {
            g: torch.cat([stacked[f"obs/{g}"][steps, i], final_obs[g].unsqueeze(0)]) for g in keep
        }
        out.append(
            {
                "observations": observations,
                "actions": stacked["actions"][steps, i],
                "rewards": stacked["rewards"][steps, i],
                "terminals": term,
                "timeouts": tout,
                "infos": {f"drawn/{k}": v[steps, i] for k, v in stacked_drawn.items()},
            }
        )
    return out


def uniform_policy(low: torch.Tensor, high: torch.Tensor, generator: torch.Generator) -> Act:
    """Actions uniform in ``[low, high]`` (the ``random`` behaviour policy of D4RL-style datasets)."""

    def act(obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        n = next(iter(obs.values())).shape[0]
        u = torch.rand((n, low.numel()), generator=generator, dtype=torch.float64)
        return (low + (high - low) * u).float()

    return act


def noisy_policy(act: Act, low: torch.Tensor, high: torch.Tensor, noise: float, generator: torch.Generator) -> Act:
    """``act`` plus Gaussian noise of ``noise`` times the half action range, clipped to the bounds."""
    half = (high - low) / 2.0

    def noisy(obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        a = act(obs).double()
        if noise > 0:
            a = a + noise * half * torch.randn(a.shape, generator=generator, dtype=torch.float64)
        return torch.minimum(torch.maximum(a, low), high).float()

    return noisy


def replay_episodes(replay: Any, num_envs: int) -> list[dict[str, Any]]:
    """The episodes in an off-policy run's replay buffer (D4RL's ``medium-replay``), world by world.

    The runner stores one row per world per control step, so world ``i``'s transitions are rows
    ``i, i + N, i + 2N, ...`` while the buffer has not wrapped (it refuses a wrapped one). Episodes
    end at the stored terminal/time-out flags; a world's unfinished last episode is kept and ends
    as a time-out (it was cut by the end of training; its next observation is known).
    """
    size = len(replay)
    if size == 0:
        raise ValueError("replay_episodes: the buffer is empty")
    if size >= replay.capacity and replay.ptr != 0:
        raise ValueError("replay_episodes: the buffer wrapped around; the oldest episodes are gone")
    s = replay.storage
    out = []
    for i in range(num_envs):
        rows = torch.arange(i, size, num_envs)
        done = (s["terminated"][rows] | s["truncated"][rows]).nonzero().flatten().tolist()
        bounds = [-1, *done] + ([rows.numel() - 1] if not done or done[-1] != rows.numel() - 1 else [])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            r = rows[a + 1 : b + 1]
            if r.numel() == 0:
                continue
            term = s["terminated"][r].clone()
            tout = s["truncated"][r].clone() & ~term
            if not (term[-1] or tout[-1]):
                tout[-1] = True
            out.append(
                {
                    "observations": {g: torch.cat([v[r], s["next_obs"][g][r[-1:]]]) for g, v in s["obs"].items()},
                    "actions": s["action"][r],
                    "rewards": s["reward"][r],
                    "terminals": term,
                    "timeouts": tout,
                }
            )
    return out
