"""Gymnasium adapters over :class:`BatchedEnv`: a single env and a vector env.

* :class:`RobolearnGymEnv` is a ``gymnasium.Env`` over a one-world ``BatchedEnv``. Observations
  are the ``policy`` group as float64 (a pixel task's ``image`` group as uint8 frames); actions are float32 in the actuators' bounds. The batched
  env resets a finished world inside ``step``; this adapter hides that: the terminal step returns
  the pre-reset observation (``info["final_obs"]``) and the next episode starts only when the
  caller calls ``reset()``, as Gymnasium expects.
* :class:`RobolearnVectorEnv` is a ``gymnasium.vector.VectorEnv`` over N worlds in Gymnasium's
  same-step autoreset mode: the observation of a finished world is already the next episode's
  first, and its last one is in ``info["final_obs"]`` (an object array, ``None`` where the world
  did not finish) with the mask ``info["_final_obs"]``; ``info["final_info"]`` holds the ended
  episodes' statistics.

Every registered task is registered with Gymnasium as ``robolearn/<TaskId>-v0`` by
:func:`register_gymnasium_envs`; ``import robolearn`` calls it (the package facade loads the task
families first, which this module may not import), so ``gymnasium.make("robolearn/HalfCheetah-v0")``
works after ``import robolearn``.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from robolearn.envs.batched_env import BatchedEnv
from robolearn.envs.registry import list_tasks, make

GYM_NAMESPACE = "robolearn"
"""Namespace of the Gymnasium ids: ``robolearn/<TaskId>-v0``."""

UNBOUNDED_ACTION = 1e6
"""Bound used for an action dimension whose actuator has no control range (Box bounds must be finite
for Stable-Baselines3)."""


def gym_id(task_id: str) -> str:
    """The Gymnasium id of a robolearn task: ``robolearn/<task_id>-v0``."""
    return f"{GYM_NAMESPACE}/{task_id}-v0"


def register_gymnasium_envs() -> list[str]:
    """Register every task of the robolearn registry with Gymnasium (idempotent); return the ids.

    Only tasks already in the registry are registered, so load the task families first
    (``import robolearn`` does both).
    """
    ids = []
    for task_id in list_tasks():
        env_id = gym_id(task_id)
        if env_id not in gymnasium.registry:
            # No TimeLimit wrapper: the task's own episode length truncates (BatchedEnv).
            gymnasium.register(
                id=env_id,
                entry_point="robolearn.envs.gym_adapter:RobolearnGymEnv",
                kwargs={"task_id": task_id},
                disable_env_checker=False,
            )
        ids.append(env_id)
    return ids


def _action_space(env: BatchedEnv) -> spaces.Box:
    """Float32 Box from the batched env's control bounds, infinite bounds replaced by a finite one."""
    low = np.nan_to_num(env.ctrl_low.numpy(), neginf=-UNBOUNDED_ACTION, posinf=UNBOUNDED_ACTION)
    high = np.nan_to_num(env.ctrl_high.numpy(), neginf=-UNBOUNDED_ACTION, posinf=UNBOUNDED_ACTION)
    return spaces.Box(low=low.astype(np.float32), high=high.astype(np.float32), dtype=np.float32)


def _observation_space(env: BatchedEnv) -> spaces.Box:
    """One world's observation: an unbounded float64 Box of the ``policy`` group or, for a pixel task
    (an ``image`` group and no ``policy`` group), a uint8 Box ``[0, 255]`` of its ``[H, W, C]`` frame,
    as Stable-Baselines3's ``CnnPolicy`` takes images.
    """
    if "policy" in env.obs_shapes:
        return spaces.Box(low=-np.inf, high=np.inf, shape=tuple(env.obs_shapes["policy"]), dtype=np.float64)
    if "image" in env.obs_shapes:
        return spaces.Box(low=0, high=255, shape=tuple(env.obs_shapes["image"]), dtype=np.uint8)
    raise ValueError(
        f"task {env.task_id!r}: the Gymnasium/SB3 adapters expose a 'policy' or an 'image' observation group; "
        f"it has {sorted(env.obs_shapes)}"
    )


def _build(
    task_id: str | None, env: BatchedEnv | None, num_envs: int, make_kwargs: dict[str, Any]
) -> BatchedEnv:
    """Use ``env`` if given, else make ``num_envs`` worlds of ``task_id`` (float64 by default)."""
    if env is not None:
        if task_id is not None or make_kwargs:
            raise ValueError("pass either env= or task_id (with make options), not both")
        return env
    if task_id is None:
        raise ValueError("task_id: expected a registered task id (or pass env=)")
    make_kwargs.setdefault("dtype", torch.float64)
    return make(task_id, num_envs, **make_kwargs)


def _policy_obs(obs: dict[str, torch.Tensor]) -> np.ndarray:
    """The ``policy`` group as a float64 NumPy array, or a pixel task's ``image`` group as uint8 (a copy)."""
    if "policy" in obs:
        return obs["policy"].detach().cpu().numpy().astype(np.float64, copy=True)
    return obs["image"].detach().cpu().numpy().astype(np.uint8, copy=True)


class RobolearnGymEnv(gymnasium.Env[np.ndarray, np.ndarray]):
    """A ``gymnasium.Env`` over one world of a robolearn task (see the module doc for semantics)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        task_id: str | None = None,
        *,
        env: BatchedEnv | None = None,
        render_mode: str | None = None,
        width: int = 320,
        height: int = 240,
        camera: str | int = -1,
        **make_kwargs: Any,
    ) -> None:
        """Make one world of ``task_id`` (``make_kwargs`` go to :func:`robolearn.envs.make`), or wrap ``env``.

        Args:
            task_id: a registered task id (its family must be loaded: ``import robolearn``).
            env: an existing one-world :class:`BatchedEnv` to wrap instead (e.g. of a custom config).
            render_mode: ``"rgb_array"`` or ``None``.
            width: frame width of :meth:`render`.
            height: frame height of :meth:`render`.
            camera: camera name or id for :meth:`render` (-1: the free camera).
            **make_kwargs: options and config overrides for :func:`robolearn.envs.make`.
        """
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode: expected one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.batched_env = _build(task_id, env, 1, make_kwargs)
        if self.batched_env.num_envs != 1:
            raise ValueError(f"env: expected a BatchedEnv of 1 world, got {self.batched_env.num_envs}")
        self.render_mode = render_mode
        self.width, self.height, self.camera = width, height, camera
        self.observation_space = _observation_space(self.batched_env)
        self.action_space = _action_space(self.batched_env)
        self.metadata = {**self.metadata, "render_fps": round(1.0 / self.batched_env.dt)}
        self._needs_reset = False

    @property
    def dt(self) -> float:
        """Seconds of simulated time per ``step``."""
        return self.batched_env.dt

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode; ``seed`` re-seeds the world's random stream. ``options`` is unused."""
        super().reset(seed=seed)
        if seed is None and self._needs_reset:
            # The batched env already reset the world when the last episode ended.
            obs = self.batched_env.obs
        else:
            obs, _ = self.batched_env.reset(seed=seed)
        self._needs_reset = False
        return _policy_obs(obs)[0], {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Advance one control step; on the episode's last step return its final observation."""
        if self._needs_reset:
            raise RuntimeError("step: the episode has ended; call reset() first")
        act = torch.from_numpy(np.asarray(action, dtype=np.float64).reshape(1, self.batched_env.action_dim))
        obs, reward, terminated, truncated, binfo = self.batched_env.step(act)
        term, trunc = bool(terminated[0]), bool(truncated[0])
        names = self.batched_env.reward_manager.names
        terms = binfo["reward_terms"][0].tolist()
        info: dict[str, Any] = {"reward_terms": dict(zip(names, terms, strict=True))}
        if term or trunc:
            self._needs_reset = True
            ep = binfo["episode"]
            info["episode"] = {k: float(v[0]) for k, v in ep.items() if k != "env_ids"}
            obs = binfo["final_obs"]
        return _policy_obs(obs)[0], float(reward[0]), term, trunc, info

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """Put the world in state ``(qpos, qvel)`` (as Gymnasium's MuJoCo envs); return the new observation."""
        obs = self.batched_env.set_state(
            torch.as_tensor(np.asarray(qpos, dtype=np.float64)),
            torch.as_tensor(np.asarray(qvel, dtype=np.float64)),
        )
        return _policy_obs(obs)[0]

    @property
    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """The world's ``(qpos, qvel)`` as float64 copies."""
        sim = self.batched_env.sim
        return sim.qpos[0].cpu().numpy().copy(), sim.qvel[0].cpu().numpy().copy()

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """An RGB frame ``[H, W, 3]`` uint8 when ``render_mode == "rgb_array"``, else ``None``."""
        if self.render_mode is None:
            gymnasium.logger.warn("render: render_mode is None; pass render_mode='rgb_array' to get frames")
            return None
        return self.batched_env.render([0], self.width, self.height, self.camera)[0]

    def close(self) -> None:
        """Release the renderer."""
        self.batched_env.close()


class RobolearnVectorEnv(VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over a :class:`BatchedEnv` (same-step autoreset), NumPy in and out."""

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.SAME_STEP}

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
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode: expected one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.batched_env = _build(task_id, env, num_envs, make_kwargs)
        self.num_envs = self.batched_env.num_envs
        self.render_mode = render_mode
        self.width, self.height, self.camera = width, height, camera
        self.single_observation_space = _observation_space(self.batched_env)
        self.single_action_space = _action_space(self.batched_env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**self.metadata, "render_fps": round(1.0 / self.batched_env.dt)}

    @property
    def dt(self) -> float:
        """Seconds of simulated time per ``step``."""
        return self.batched_env.dt

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every world; ``seed`` (an int, or a list whose first entry is used) re-seeds the streams."""
        if isinstance(seed, list | tuple):
            seed = seed[0]
        obs, _ = self.batched_env.reset(seed=seed)
        return _policy_obs(obs), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every world; finished worlds restart in the same step (their last obs in ``info``)."""
        act = torch.from_numpy(np.asarray(actions, dtype=np.float64).reshape(self.num_envs, -1))
        obs, reward, terminated, truncated, binfo = self.batched_env.step(act)
        term = terminated.cpu().numpy().copy()
        trunc = truncated.cpu().numpy().copy()
        info: dict[str, Any] = {}
        done = term | trunc
        if done.any():
            final = _policy_obs(binfo["final_obs"])
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = final[i]
            episode = _episode_arrays(binfo["episode"], self.num_envs)
            info["final_obs"], info["_final_obs"] = final_obs, done.copy()
            info["final_info"] = {"episode": episode, "_episode": done.copy()}
            info["_final_info"] = done.copy()
            info["episode"], info["_episode"] = episode, done.copy()
        rew = reward.detach().cpu().numpy().astype(np.float64)
        return _policy_obs(obs), rew, term, trunc, info

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray, env_ids: np.ndarray | None = None) -> np.ndarray:
        """Put worlds ``env_ids`` (default: all) in state ``(qpos, qvel)``; return the new observations."""
        ids = None if env_ids is None else torch.as_tensor(np.asarray(env_ids), dtype=torch.long)
        obs = self.batched_env.set_state(
            torch.as_tensor(np.asarray(qpos)), torch.as_tensor(np.asarray(qvel)), ids
        )
        return _policy_obs(obs)

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One RGB frame per world when ``render_mode == "rgb_array"``, else ``None``."""
        if self.render_mode is None:
            return None
        frames = self.batched_env.render(list(range(self.num_envs)), self.width, self.height, self.camera)
        return tuple(frames)

    def close_extras(self, **kwargs: Any) -> None:
        """Release the renderer."""
        self.batched_env.close()


def _episode_arrays(ep: dict[str, torch.Tensor], num_envs: int) -> dict[str, np.ndarray]:
    """Episode statistics scattered into ``[num_envs]`` arrays: ``r`` (return), ``l`` (length), terms."""
    ids = ep["env_ids"].cpu().numpy()
    out: dict[str, np.ndarray] = {}
    for key, value in ep.items():
        if key == "env_ids":
            continue
        name = {"return": "r", "length": "l"}.get(key, key)
        vals = value.detach().cpu().numpy()
        arr = np.zeros(num_envs, dtype=np.int64 if name == "l" else np.float64)
        arr[ids] = vals
        out[name] = arr
    return out
