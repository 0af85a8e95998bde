"""Label a logged trajectory with a task's own terms: observations, rewards, terminations.

A robot's log holds states and commands, no rewards. :func:`label_states` puts a task's worlds in
the logged states and evaluates the task's observation, reward and termination terms exactly as
:meth:`BatchedEnv.step` would after a step from ``s_t`` under ``a_t`` to ``s_{t+1}``: the "before"
fields (``prev_qpos`` and the task's ``prev_fields``) are ``s_t``'s, the physics state is
``s_{t+1}`` (forward kinematics run), ``env.action`` is ``a_t`` and ``env.prev_action`` is
``a_{t-1}`` (zero at an episode's start). Many transitions are labelled at once, one per world.

What a log cannot give is stated, not guessed: observation noise and delays are off (a log holds
what the robot measured), history groups are stacked from the logged frames (the first frame
repeated at an episode's start, as :class:`robolearn.spec.History` refills), and internal states
of latency or actuator models are not reconstructed (a term that reads them sees their reset
values). Terms of a time-out (``time_out=True`` and the episode-length limit) are not evaluated:
a log ends where the recording stopped, a time-out by definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from robolearn.envs.batched_env import BatchedEnv
from robolearn.envs.registry import task_cfg


@dataclass
class Labels:
    """Per-transition labels of one episode of ``T`` steps."""

    observations: dict[str, torch.Tensor]
    """Observation groups at ``s_0 .. s_T`` (``[T + 1, ...]``: the last row is the final observation)."""
    rewards: torch.Tensor
    """``[T]`` float64 rewards."""
    terminated: torch.Tensor
    """``[T]`` bool: a termination term fired after the step."""
    reward_terms: torch.Tensor
    """``[T, R]`` weighted reward terms (order: :attr:`Labeller.reward_names`)."""


@dataclass
class Labeller:
    """A task's env, prepared to label logged states (module doc)."""

    task_id: str
    batch: int = 256
    """Transitions labelled at once (worlds of the env)."""
    env: BatchedEnv = field(init=False)
    history: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        """Build the env with noise and delays off and histories unstacked (stacked here)."""
        cfg = task_cfg(self.task_id)
        self.history = {}
        for name, group in cfg.observations.items():
            group.enable_noise = False
            group.delay = None
            self.history[name] = int(group.history_length)
            group.history_length = 0
        self.env = BatchedEnv(cfg, self.batch, seed=0, dtype=torch.float64, task_id=self.task_id)
        self.env.reset()

    @property
    def reward_names(self) -> list[str]:
        """The reward terms evaluated (non-zero weights), in order."""
        return list(self.env.reward_manager.names)

    @property
    def termination_names(self) -> list[str]:
        """The termination terms evaluated (time-outs excluded)."""
        return [k for k, t in self.env.termination_manager.terms.items() if not t.time_out]

    def label(self, qpos: torch.Tensor, qvel: torch.Tensor, actions: torch.Tensor) -> Labels:
        """Labels of one episode: ``qpos [T + 1, nq]``, ``qvel [T + 1, nv]``, ``actions [T, A]``."""
        env = self.env
        qpos = torch.as_tensor(qpos, dtype=torch.float64)
        qvel = torch.as_tensor(qvel, dtype=torch.float64)
        actions = torch.as_tensor(actions, dtype=torch.float64)
        steps = actions.shape[0]
        if qpos.shape != (steps + 1, env.model.nq) or qvel.shape != (steps + 1, env.model.nv):
            raise ValueError(
                f"label: expected qpos [{steps + 1}, {env.model.nq}] and qvel [{steps + 1}, {env.model.nv}] for "
                f"{steps} actions, got {list(qpos.shape)} and {list(qvel.shape)}"
            )
        prev_actions = torch.cat([torch.zeros_like(actions[:1]), actions[:-1]])
        frames: dict[str, list[torch.Tensor]] = {}
        rewards, terms, terminated = [], [], []
        for lo in range(0, steps + 1, self.batch):
            hi = min(lo + self.batch, steps + 1)
            ids = env.all_ids[: hi - lo]
            obs = env.set_state(qpos[lo:hi], qvel[lo:hi], ids)  # s_t, and the "before" fields
            for g, t in obs.items():
                frames.setdefault(g, []).append(t[: hi - lo].clone())
            n = min(hi, steps) - lo  # transitions starting in this chunk
            if n <= 0:
                continue
            env.sim.reset(ids[:n], qpos[lo + 1 : lo + 1 + n], qvel[lo + 1 : lo + 1 + n])  # s_{t+1}
            env.action[ids[:n]] = actions[lo : lo + n]
            env.prev_action[ids[:n]] = prev_actions[lo : lo + n]
            env.episode_length[ids[:n]] = 1
            reward, weighted = env.reward_manager.compute()
            done, _ = self._terminated()
            rewards.append(reward[:n].clone())
            terms.append(weighted[:n].clone())
            terminated.append(done[:n].clone())
        observations = {g: self._stack(g, torch.cat(f)) for g, f in frames.items()}
        return Labels(observations, torch.cat(rewards), torch.cat(terminated), torch.cat(terms))

    def _terminated(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Termination terms only (no time-outs: a log's end is a cut)."""
        env = self.env
        terminated = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        for term in env.termination_manager.terms.values():
            if not term.time_out:
                terminated = terminated | term.func(env, **term.params)
        return terminated, ~terminated

    def _stack(self, group: str, frames: torch.Tensor) -> torch.Tensor:
        """History stacking over one episode's frames ``[T + 1, D]`` (oldest first)."""
        h = self.history.get(group, 0)
        if h <= 1:
            return frames
        padded = torch.cat([frames[:1].expand(h - 1, -1), frames])
        return torch.cat([padded[k : k + frames.shape[0]] for k in range(h)], dim=1)
