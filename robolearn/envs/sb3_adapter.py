"""A Stable-Baselines3 ``VecEnv`` over a :class:`BatchedEnv` (needs the ``sb3`` extra).

SB3's conventions: ``reset() -> obs``; ``step_wait() -> (obs, rewards, dones, infos)`` with one
info dict per world; a finished world is already reset (``obs`` is the next episode's first), its
last observation is ``infos[i]["terminal_observation"]``, ``infos[i]["TimeLimit.truncated"]`` says
whether it ended by time-out (truncated and not terminated) so learners bootstrap, and
``infos[i]["episode"] = {"r", "l", "t"}`` feeds SB3's episode logging as its ``Monitor`` would.
Observations are the ``policy`` group as float64.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices

from robolearn.envs.batched_env import BatchedEnv
from robolearn.envs.gym_adapter import _action_space, _build, _observation_space, _policy_obs


class RobolearnSB3VecEnv(VecEnv):
    """Stable-Baselines3 ``VecEnv`` over N worlds of a robolearn task (see the module doc)."""

    def __init__(
        self,
        task_id: str | None = None,
        num_envs: int = 1,
        *,
        env: BatchedEnv | None = None,
        render_mode: str | None = None,
        width: int = 320,
        height: int = 240,
        camera: str | int = -1,
        **make_kwargs: Any,
    ) -> None:
        """Make ``num_envs`` worlds of ``task_id`` (``make_kwargs`` go to :func:`robolearn.envs.make`), or wrap ``env``."""
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode: expected 'rgb_array' or None, got {render_mode!r}")
        self.batched_env = _build(task_id, env, num_envs, make_kwargs)
        self.render_mode = render_mode
        self.width, self.height, self.camera = width, height, camera
        self._actions: np.ndarray | None = None
        self._t0 = time.time()
        super().__init__(
            self.batched_env.num_envs, _observation_space(self.batched_env), _action_space(self.batched_env)
        )

    @property
    def dt(self) -> float:
        """Seconds of simulated time per step."""
        return self.batched_env.dt

    def reset(self) -> np.ndarray:
        """Reset every world (with the seed set by :meth:`seed`, if any) and return the observations."""
        seed = self._seeds[0]
        obs, _ = self.batched_env.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return _policy_obs(obs)

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions ``[N, A]`` for :meth:`step_wait`."""
        self._actions = np.asarray(actions, dtype=np.float64).reshape(self.num_envs, -1)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step every world with the stored actions; finished worlds restart in the same step."""
        if self._actions is None:
            raise RuntimeError("step_wait: call step_async(actions) first")
        obs, reward, terminated, truncated, binfo = self.batched_env.step(torch.from_numpy(self._actions))
        self._actions = None
        term = terminated.cpu().numpy()
        trunc = truncated.cpu().numpy()
        dones = term | trunc
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            final = _policy_obs(binfo["final_obs"])
            ep = binfo["episode"]
            elapsed = round(time.time() - self._t0, 6)
            for row, i in enumerate(ep["env_ids"].tolist()):
                infos[i]["terminal_observation"] = final[i]
                infos[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
                infos[i]["episode"] = {
                    "r": float(ep["return"][row]),
                    "l": int(ep["length"][row]),
                    "t": elapsed,
                }
        rewards = reward.detach().cpu().numpy().astype(np.float32)
        return _policy_obs(obs), rewards, dones.copy(), infos

    def close(self) -> None:
        """Release the renderer."""
        self.batched_env.close()

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """A tiled RGB image of every world's frame (``rgb_array`` mode), else ``None``."""
        mode = mode or self.render_mode
        if mode != "rgb_array":
            return None
        frames = self.batched_env.render(list(range(self.num_envs)), self.width, self.height, self.camera)
        return np.concatenate(list(frames), axis=1)

    def get_images(self) -> Sequence[np.ndarray | None]:
        """One RGB frame per world."""
        return list(self.batched_env.render(list(range(self.num_envs)), self.width, self.height, self.camera))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """An attribute of this adapter, else of the batched env, once per selected world (shared by all)."""
        owner = self if attr_name in self.__dict__ or hasattr(type(self), attr_name) else self.batched_env
        value = getattr(owner, attr_name)
        return [value for _ in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set an attribute of the batched env (shared by every world, whatever ``indices``)."""
        setattr(self.batched_env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """Call a method of the batched env once; its result is repeated per selected world."""
        result = getattr(self.batched_env, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """Worlds are never wrapped by Gymnasium wrappers: ``False`` for each."""
        return [False for _ in self._indices(indices)]

    def _indices(self, indices: VecEnvIndices) -> Iterable[int]:
        """The world indices ``indices`` selects (all when ``None``)."""
        if indices is None:
            return range(self.num_envs)
        if isinstance(indices, int):
            return [indices]
        return list(indices)
