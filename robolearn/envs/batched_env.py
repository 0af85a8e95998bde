"""``BatchedEnv``: N worlds of one task, stepped together, reset by index inside ``step``.

The contract (DESIGN.md, "BatchedEnv"): ``step(action[N, A]) -> (obs, reward[N], terminated[N],
truncated[N], info)``; ``obs`` is a dict of named groups; done worlds are reset inside ``step``
and their pre-reset observation is in ``info["final_obs"]``; terminated and truncated stay
separate. Gymnasium's vector API calls this the "same-step" autoreset mode.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from robolearn.envs.cfg import ModelState, TaskCfg
from robolearn.envs.curriculum import CurriculumManager, own_cfg, weight_targets
from robolearn.envs.managers import (
    ActionManager,
    CommandManager,
    EventManager,
    ObservationManager,
    RewardManager,
    TerminationManager,
)
from robolearn.envs.sync import check_finite, host_count, host_nonzero
from robolearn.envs.validate import SOLVERS, check_int, validate_model, validate_task_cfg
from robolearn.sim import compile_model, load_spec, make_backend, names_of
from robolearn.types import Obs
from robolearn.utils.rng import WorldRNG

log = logging.getLogger(__name__)


class BatchedEnv:
    """A manager-based batched environment built from a declarative :class:`TaskCfg`."""

    def __init__(
        self,
        cfg: TaskCfg,
        num_envs: int = 1,
        *,
        device: str | torch.device = "cpu",
        backend: str = "mujoco",
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        nthread: int | None = None,
        task_id: str = "",
        sim_options: Mapping[str, Any] | None = None,
    ) -> None:
        """Compile the task's model, build the backend and managers, and reset every world.

        Args:
            cfg: the task.
            num_envs: number of worlds N.
            device: where tensors live (the MuJoCo CPU backend needs ``cpu``).
            backend: simulation backend name (``mujoco``, ``reference`` or ``warp``).
            seed: seed of the per-world random streams; ``None`` draws one from the OS.
            dtype: floating dtype of observations and rewards (physics runs in the backend's dtype:
                float64 on the MuJoCo CPU backends, float32 on Warp).
            nthread: physics threads; ``None`` uses every core.
            sim_options: further keyword arguments of the backend (Warp: ``graph_capture=True``,
                ``nconmax``, ``njmax``); an option the backend does not take is a ``ValueError``.
            task_id: the registered id, for messages and specs.
        """
        check_int("num_envs", num_envs, 1)
        if seed is not None:
            check_int("seed", seed, 0)
        if nthread is not None:
            check_int("nthread", nthread, 1)
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"dtype: expected a torch floating dtype, got {dtype!r}")
        validate_task_cfg(cfg)
        # A curriculum writes term params: the env gets its own copy of those sections, so another
        # env of the same config (an evaluation env) never sees a moved value.
        self.cfg = own_cfg(cfg) if cfg.curriculum else cfg
        cfg = self.cfg
        self.task_id = task_id
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.dtype = dtype
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % (2**63))
        self.seed = int(seed)

        spec = load_spec(cfg.mjcf)
        ActionManager.edit_spec(spec, cfg.actions)
        if cfg.timestep is not None:
            spec.option.timestep = cfg.timestep
        if cfg.solver is not None:
            spec.option.solver = SOLVERS[cfg.solver]
        self.model = compile_model(spec, contact_forces=cfg.contact_forces, source=f"MJCF of task {task_id!r}")
        validate_model(self.model, f"model of task {task_id!r}")
        self.names = names_of(self.model)
        """The model's name tables (robolearn.sim.names): every term and event resolves names here."""
        try:
            self.sim = make_backend(
                backend,
                self.model,
                self.num_envs,
                decimation=cfg.decimation,
                forward_after_step=cfg.forward_after_step,
                device=self.device,
                nthread=nthread,
                data_fields=tuple(dict.fromkeys((*cfg.data_fields, *cfg.prev_fields))),
                **dict(sim_options or {}),
            )
        except TypeError as exc:  # an option this backend does not take
            if not sim_options:
                raise
            raise ValueError(f"sim_options: {exc} (backend {backend!r} of task {task_id!r})") from None
        except ValueError as exc:  # e.g. a model feature the backend does not support: name the task
            raise ValueError(f"task {task_id!r}: {exc}") from exc
        # After the backend, which refuses a device it cannot run on before anything is allocated there.
        self.rng = WorldRNG(self.seed, self.num_envs, self.device)
        self.all_ids = torch.arange(self.num_envs, device=self.device)
        self.physics_dt = float(self.model.opt.timestep)
        self.dt = self.physics_dt * cfg.decimation
        self.max_episode_length = int(cfg.episode_length)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.num_diverged = 0
        self.common_step_counter = 0
        self._buffers: dict[str, torch.Tensor] = {}
        """Batched control steps since the env was built (training progress, for curricula; checkpointed)."""
        self.task_params: dict[str, torch.Tensor] = {
            k: torch.tensor(v, dtype=torch.float64, device=self.device) for k, v in cfg.task_params.items()
        }
        """Named task parameters (``TaskCfg.task_params``) that task terms read and curricula move."""

        self.action_manager = ActionManager(self.model, cfg.actions, self.device)
        self.action_dim = self.action_manager.dim
        self.action = torch.zeros(self.num_envs, self.action_dim, dtype=torch.float64, device=self.device)
        self.default_qpos = torch.as_tensor(self.model.qpos0, dtype=torch.float64, device=self.device)
        """The model's ``qpos0`` on the env's device."""
        self.prev_action = torch.zeros_like(self.action)
        self.ctrl_low, self.ctrl_high = self._action_bounds()
        # Positions before the current step, for finite-difference velocities (as Gymnasium).
        self.prev_qpos = self.sim.qpos.clone()
        self.prev: dict[str, torch.Tensor] = {name: self._field(name).clone() for name in cfg.prev_fields}
        # Every value drawn per world (randomised parameters, delays ...), [N, k] each: the
        # privileged group reads them (mdp.drawn) and info["drawn"] records them for datasets.
        self.drawn: dict[str, torch.Tensor] = {}
        self._build_models()

        self.command_manager = CommandManager(self, cfg.commands)
        self.event_manager = EventManager(self, cfg.events)
        self.reward_manager = RewardManager(self, cfg.rewards, keep=weight_targets(cfg.curriculum))
        self.termination_manager = TerminationManager(self, cfg.terminations)
        self.curriculum_manager = CurriculumManager(self)
        self.curriculum_manager.build(cfg.curriculum)  # before any event or reset: they read its values
        self.event_manager.apply("startup", self.all_ids)
        self._reset_worlds(self.all_ids)
        self.observation_manager = ObservationManager(self, cfg.observations, self.obs_delays)
        self.obs_dims = dict(self.observation_manager.dims)
        self.obs_shapes = dict(self.observation_manager.shapes)
        self._obs: Obs | None = None

    # -- public API --------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[Obs, dict[str, Any]]:
        """Reset every world (re-seeding the streams if ``seed`` is given); return ``(obs, info)``."""
        if seed is not None:
            self.seed = check_int("seed", seed, 0)
            self.rng = WorldRNG(self.seed, self.num_envs, self.device)
        self._reset_worlds(self.all_ids)
        # Every world starts an episode: stacked histories refill from this frame, not carry the
        # last episode's frames (a partial reset by index refills its rows the same way).
        self.observation_manager.restart_histories()
        self._obs = self.observation_manager.compute()
        return self._obs, {}

    def step(self, action: torch.Tensor) -> tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Advance every world one control step; reset the done ones by index (see the module doc).

        ``info`` holds ``final_obs`` (the observation before any reset), ``reward_terms`` ``[N, T]``
        (weighted), ``diverged`` (``[N]`` bool: worlds whose physics diverged this step; they end
        as truncations with zero reward, so ``int(info["diverged"].sum())`` is this step's count of
        diverged worlds, the number a runner logs), ``num_diverged`` (an ``int``: diverged worlds
        since the env was built), ``drawn`` (the per-world draws the step ran under, if any) and,
        when some world ended its episode, ``episode`` (per-ending-world returns, lengths, terms).
        """
        action = self._check_action(action)
        self.prev_action = self.action
        self.action = action.to(torch.float64, copy=True)  # never alias (and later zero) the caller's tensor
        # env.action stays the policy's choice (action-rate terms, last-action observations); the
        # delayed one only drives the actuators.
        applied = self.action if self.action_delay is None else self.action_delay(self.action)
        ctrl = self.action_manager.process(applied)
        self.prev_qpos.copy_(self.sim.qpos)
        for name, before in self.prev.items():
            before.copy_(self._field(name))
        diverged = self._step_substeps(ctrl) if self._substepped else self.sim.step(ctrl)
        self.episode_length += 1
        self.common_step_counter += 1
        if self.event_manager.by_mode["interval"]:
            self.event_manager.step(self.dt)
        if self.command_manager.terms:
            self.command_manager.step(self.dt)

        reward, reward_terms = self.reward_manager.compute()
        terminated, truncated = self.termination_manager.compute()
        obs = self.observation_manager.compute()
        info: dict[str, Any] = {"final_obs": obs, "reward_terms": reward_terms, "diverged": diverged}
        if self.drawn:  # the values this step ran under (tables are copy-on-write, see record_drawn)
            info["drawn"] = dict(self.drawn)
        curriculum = self.curriculum_manager
        done = terminated | truncated | diverged
        # The one host sync of a step (robolearn.envs.sync): which worlds reset, if any.
        ids = host_nonzero(done)
        if ids is not None:
            # Rewards and done flags of diverged worlds change only here, where some world is done
            # (a diverged world is done), so the plain step path carries no extra tensor work.
            # MuJoCo already put a diverged world back to its defaults; its step is void, so it
            # ends as a truncation with zero reward and a warning, never a crash or a NaN.
            n = host_count(diverged)
            if n:
                self.num_diverged += n
                log.warning("%d world(s) of %s diverged (MuJoCo instability); reset them", n, self.task_id)
                reward = torch.where(diverged, torch.zeros_like(reward), reward)
                truncated = (truncated | diverged) & ~terminated
            info["episode"] = self._episode_stats(ids)
            if curriculum.calls:
                # Before the reset clears the episodes' sums and runs the new episodes' events,
                # initial states and commands: those run under the moved values.
                curriculum.update(ids, info["episode"])
            # The reset's draws (events, initial state, latency models, the fresh observation's
            # noise) follow the same sequence every time: the streams compute them in one pass.
            with self.rng.batch(ids, "reset"):
                self._reset_worlds(ids)
                obs = self._splice_obs(obs, ids)
        info["num_diverged"] = self.num_diverged
        if curriculum.calls:  # every step, so the runner's columns exist from the first iteration
            info["curriculum"] = curriculum.values  # replaced, never changed in place
        self._obs = obs
        return obs, reward.to(self.dtype), terminated, truncated, info

    def set_state(
        self, qpos: torch.Tensor, qvel: torch.Tensor, env_ids: torch.Tensor | None = None
    ) -> Obs:
        """Put worlds ``env_ids`` (default: all) in state ``(qpos, qvel)``; return the fresh observation.

        The episode counters are left alone, as Gymnasium's ``set_state`` leaves its time limit.
        """
        ids = self.all_ids if env_ids is None else torch.as_tensor(env_ids, dtype=torch.long, device=self.device).flatten()
        qpos = torch.as_tensor(qpos, dtype=torch.float64, device=self.device).reshape(ids.numel(), -1)
        qvel = torch.as_tensor(qvel, dtype=torch.float64, device=self.device).reshape(ids.numel(), -1)
        if qpos.shape[1] != self.model.nq or qvel.shape[1] != self.model.nv:
            raise ValueError(
                f"set_state: expected qpos [{ids.numel()}, {self.model.nq}] and qvel [{ids.numel()}, {self.model.nv}], "
                f"got {list(qpos.shape)} and {list(qvel.shape)}"
            )
        self.sim.reset(ids, qpos, qvel)
        self._sync_prev(ids)
        self._obs = self._splice_obs(self.obs, ids)
        return self._obs

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue exactly: physics, counters, streams, buffers."""
        om, cm, em = self.observation_manager, self.command_manager, self.event_manager
        return {
            "sim": self.sim.state_dict(),
            "episode_length": self.episode_length.clone(),
            "action": self.action.clone(),
            "prev_action": self.prev_action.clone(),
            "prev_qpos": self.prev_qpos.clone(),
            "prev": {k: v.clone() for k, v in self.prev.items()},
            "drawn": {k: v.clone() for k, v in self.drawn.items()},
            "rng": self.rng.state_dict(),
            "episode_sums": self.reward_manager.episode_sums.clone(),
            "commands": {k: v.clone() for k, v in cm.values.items()},
            "command_timers": {k: v.clone() for k, v in cm.timers.items()},
            "event_timers": {k: v.clone() for k, v in em.timers.items()},
            "history": om.history_state(),
            "obs": {k: v.clone() for k, v in self.obs.items()},
            "num_diverged": self.num_diverged,
            # Only with latency/actuator models, so plain checkpoints keep their layout.
            **({"models": {k: m.state_dict() for k, m in self.model_states.items()}} if self.model_states else {}),
            **({"prev_ctrl": self._prev_ctrl.clone()} if self._prev_ctrl is not None else {}),
            **({"curriculum": self._curriculum_state()} if self.cfg.curriculum or self.task_params else {}),
            **({"buffers": {k: v.clone() for k, v in self._buffers.items()}} if self._buffers else {}),
        }

    def buffer(self, name: str, shape: tuple[int, ...] = (), dtype: torch.dtype = torch.float64, fill: float = 0.0) -> torch.Tensor:
        """A per-world tensor ``[N, *shape]`` that task terms keep across steps (how long each foot
        has been in the air, where an episode started), created filled with ``fill`` on first use.

        It is part of :meth:`state_dict`, so a resumed run continues with it; the env never resets
        it (the task's own terms do, e.g. from their initial-state function). Terms hold on to the
        tensor: :meth:`load_state_dict` copies into it in place.

        Raises:
            ValueError: ``name`` exists with another shape or dtype.
        """
        buf = self._buffers.get(name)
        if buf is None:
            buf = torch.full((self.num_envs, *shape), fill, dtype=dtype, device=self.device)
            self._buffers[name] = buf
        elif tuple(buf.shape[1:]) != tuple(shape) or buf.dtype != dtype:
            raise ValueError(
                f"buffer {name!r}: exists as {tuple(buf.shape[1:])} {buf.dtype}, asked for {tuple(shape)} {dtype}"
            )
        return buf

    def has_buffer(self, name: str) -> bool:
        """Whether :meth:`buffer` ``name`` exists yet."""
        return name in self._buffers

    def _curriculum_state(self) -> dict[str, Any]:
        """Training progress, task parameters, reward weights and the curriculum terms' states."""
        return {
            "common_step_counter": self.common_step_counter,
            "task_params": {k: v.clone() for k, v in self.task_params.items()},
            "reward_weights": self.reward_manager.weights.clone(),
            "manager": self.curriculum_manager.state_dict(),
        }

    def _load_curriculum_state(self, state: dict[str, Any] | None) -> None:
        if state is None:
            if self.cfg.curriculum or self.task_params:
                raise ValueError("env state: saved without curriculum or task parameters, this env has them")
            return
        if set(state["task_params"]) != set(self.task_params):
            raise ValueError(
                f"env state: saved with task parameters {sorted(state['task_params'])}, this env has {sorted(self.task_params)}"
            )
        self.common_step_counter = int(state["common_step_counter"])
        self.task_params = {k: v.to(self.device, copy=True) for k, v in state["task_params"].items()}
        self.reward_manager.weights.copy_(state["reward_weights"])
        self.curriculum_manager.load_state_dict(state["manager"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (same task, same number of worlds)."""
        if state["episode_length"].shape != self.episode_length.shape:
            raise ValueError(
                f"env state: saved for {state['episode_length'].shape[0]} worlds, this env has {self.num_envs}"
            )
        self.sim.load_state_dict(state["sim"])
        self.episode_length.copy_(state["episode_length"])
        self.action = state["action"].to(self.device, copy=True)
        self.prev_action = state["prev_action"].to(self.device, copy=True)
        self.prev_qpos.copy_(state["prev_qpos"])
        for k, v in state.get("prev", {}).items():
            self.prev[k].copy_(v)
        self.drawn = {k: v.to(self.device, copy=True) for k, v in state.get("drawn", {}).items()}
        self.rng.load_state_dict(state["rng"])
        self.reward_manager.episode_sums.copy_(state["episode_sums"])
        for k, v in state["commands"].items():
            self.command_manager.values[k].copy_(v)
        for k, v in state["command_timers"].items():
            self.command_manager.timers[k].copy_(v)
        for k, v in state["event_timers"].items():
            self.event_manager.timers[k].copy_(v)
        self.observation_manager.load_history_state(state["history"])
        self._obs = {k: v.to(self.device, copy=True) for k, v in state["obs"].items()}
        self.num_diverged = int(state["num_diverged"])
        saved = state.get("models", {})
        if set(saved) != set(self.model_states):
            raise ValueError(
                f"env state: saved with latency/actuator models {sorted(saved)}, this env has {sorted(self.model_states)}"
            )
        for k, m in self.model_states.items():
            m.load_state_dict(saved[k])
        if self._prev_ctrl is not None:
            self._prev_ctrl.copy_(state["prev_ctrl"])
        self._load_curriculum_state(state.get("curriculum"))
        for k, v in state.get("buffers", {}).items():
            if k in self._buffers:
                self._buffers[k].copy_(v)  # in place: terms hold the tensor
            else:  # a term asks for it later and gets the saved values
                self._buffers[k] = v.to(self.device, copy=True)

    def policy_spec(self) -> dict[str, Any]:
        """JSON-ready description of observations, actions, rates and joints (``policy_spec.json``)."""
        from robolearn.envs.spec import policy_spec

        return policy_spec(self)

    @property
    def obs(self) -> Obs:
        """The latest observation groups (computed on first access)."""
        if self._obs is None:
            self._obs = self.observation_manager.compute()
        return self._obs

    # -- helpers for terms -------------------------------------------------------------------
    def record_drawn(self, name: str, env_ids: torch.Tensor, values: torch.Tensor) -> None:
        """Store values drawn for worlds ``env_ids`` under ``name`` (``[len(env_ids), k]`` or
        ``[len(env_ids)]``); the first call fixes the width. Other worlds keep theirs.
        """
        values = torch.as_tensor(values, dtype=torch.float64, device=self.device).reshape(env_ids.numel(), -1)
        table = self.drawn.get(name)
        if table is None:
            table = torch.zeros(self.num_envs, values.shape[1], dtype=torch.float64, device=self.device)
        elif table.shape[1] != values.shape[1]:
            raise ValueError(f"record_drawn({name!r}): expected {table.shape[1]} values per world, got {values.shape[1]}")
        else:
            # Copy on write: a table is never changed in place, so info["drawn"] can hand out the
            # current tables without copying them every step (draws happen at resets, mostly).
            # The out-of-place index_put is the clone and the write in one operation.
            self.drawn[name] = table.index_put((env_ids,), values)
            return
        table[env_ids] = values
        self.drawn[name] = table

    def draw_uniform(self, env_ids: torch.Tensor, size: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """Uniform draws ``[len(env_ids), size]`` in ``[low, high)`` from those worlds' own streams
        (float64, on the env's device). Pass ``env.all_ids`` itself for every world: that object
        takes the gather-free path.
        """
        return self.rng.uniform(None if env_ids is self.all_ids else env_ids, size, low, high)

    def draw_normal(self, env_ids: torch.Tensor, size: int, std: float = 1.0) -> torch.Tensor:
        """Gaussian draws ``[len(env_ids), size]`` from those worlds' own streams (float64, on the
        env's device); ``env.all_ids`` as for :meth:`draw_uniform`.
        """
        return self.rng.normal(None if env_ids is self.all_ids else env_ids, size, std)

    def draw_step_uniform(self, name: str, size: int) -> torch.Tensor:
        """The current control step's uniforms ``[N, size]`` in ``[0, 1)`` for every world, from per-step
        stream ``name`` (for draws every world makes every step: cheaper than :meth:`draw_uniform`,
        see :class:`~robolearn.utils.rng.WorldRNG`). Call it once per step and name.
        """
        return self.rng.step_uniform(name, size)

    def draw_step_normal(self, name: str, size: int) -> torch.Tensor:
        """The current control step's standard normals ``[N, size]`` for every world, from per-step stream
        ``name`` (as :meth:`draw_step_uniform`).
        """
        return self.rng.step_normal(name, size)

    def draw_noise(self, env_ids: torch.Tensor, kind: str, scale: float, size: int) -> torch.Tensor:
        """Observation noise of ``kind`` (``uniform`` or ``gaussian``) for ``env_ids``."""
        if kind == "uniform":
            return self.draw_uniform(env_ids, size, -scale, scale)
        if kind == "gaussian":
            return self.draw_normal(env_ids, size, scale)
        raise ValueError(f"noise.kind: expected 'uniform' or 'gaussian', got {kind!r}")

    def close(self) -> None:
        """Release resources (the video renderer and the camera terms' renderers); the physics is
        freed with the object.
        """
        renderer = self.__dict__.pop("_renderer", None)
        if renderer is not None:
            renderer.close()
        from robolearn.envs.camera import close_cameras

        close_cameras(self)

    def render(self, world_ids: list[int] | None = None, width: int = 320, height: int = 240, camera: str | int = -1) -> np.ndarray:
        """RGB frames ``[len(world_ids), H, W, 3]`` uint8 of selected worlds (default: world 0)."""
        from robolearn.sim.render import BatchRenderer

        renderer = self.__dict__.get("_renderer")
        if renderer is None or renderer.size != (width, height):
            if renderer is not None:
                renderer.close()
            renderer = BatchRenderer(self.model, width=width, height=height)
            self.__dict__["_renderer"] = renderer
        return renderer.render(self.sim, [0] if world_ids is None else world_ids, camera=camera)

    # -- internals ---------------------------------------------------------------------------
    def _reset_worlds(self, ids: torch.Tensor) -> None:
        """Reset worlds ``ids``: reset events (model fields), initial state, counters, commands."""
        self.event_manager.apply("reset", ids)
        init = self.cfg.initial_state
        act = None
        if init.func is None:
            qpos, qvel = None, None
        else:
            # (qpos, qvel) or (qpos, qvel, act): a task whose actuators have state (a motor lag)
            # starts them where an episode begins, e.g. a quadrotor's motors at hover thrust.
            qpos, qvel, *rest = init.func(self, ids, **init.params)
            act = rest[0] if rest else None
        self.sim.reset(ids, qpos, qvel, act)
        self._sync_prev(ids)
        # index_fill_ takes the value as a kernel argument; `x[ids] = 0.0` would copy a host scalar
        # to the device first, a synchronising copy on CUDA in every reset.
        self.episode_length.index_fill_(0, ids, 0)
        self.action.index_fill_(0, ids, 0.0)
        self.prev_action.index_fill_(0, ids, 0.0)
        self.reward_manager.episode_sums.index_fill_(0, ids, 0.0)
        self.command_manager.reset(ids)
        # Latency and actuator draws come last, so the draws above (and hence initial states) are
        # those of the same task without these models.
        for m in self.model_states.values():
            m.reset(ids)
        if self._prev_ctrl is not None:
            self._prev_ctrl[ids] = self._default_ctrl

    def _build_models(self) -> None:
        """Per-env states of the latency and actuator models the config names (none: no cost).

        Built before the first reset, which draws their per-world parameters, so those are in
        ``env.drawn`` when the observation terms are first probed.
        """
        cfg = self.cfg
        for where, model in (("action_delay", cfg.action_delay), ("control_jitter", cfg.control_jitter)):
            if model is not None and not callable(getattr(model, "build", None)):
                raise ValueError(f"{where}: expected a model with build(env), got {model!r}")
        for gname, group in cfg.observations.items():
            if group.delay is not None and not callable(getattr(group.delay, "build", None)):
                raise ValueError(
                    f"observations.{gname}.delay: expected a delay model with build(env, group), got {group.delay!r}"
                )
        am = self.action_manager
        am.build_actuators(self)
        self.action_delay = cfg.action_delay.build(self) if cfg.action_delay is not None else None
        self.control_jitter = cfg.control_jitter.build(self) if cfg.control_jitter is not None else None
        self.obs_delays = {g: grp.delay.build(self, g) for g, grp in cfg.observations.items() if grp.delay is not None}
        self.model_states: dict[str, ModelState] = {f"actuator/{a.name}": a.state for a in am.actuated}  # type: ignore[misc]
        if self.action_delay is not None:
            self.model_states["action_delay"] = self.action_delay
        if self.control_jitter is not None:
            self.model_states["control_jitter"] = self.control_jitter
        self.model_states.update({f"obs_delay/{g}": d for g, d in self.obs_delays.items()})
        # Python in the physics loop only when a model needs it: per substep for actuator models,
        # in segments of equal control for jitter alone.
        self._substepped = self.control_jitter is not None or bool(am.actuated)
        self._prev_ctrl: torch.Tensor | None = None
        if self.control_jitter is not None:
            # What a world holds before its first command arrives: the control of a zero action.
            self._default_ctrl = am.process(torch.zeros(1, self.action_dim, dtype=torch.float64, device=self.device)).clone()
            self._prev_ctrl = self._default_ctrl.expand(self.num_envs, -1).clone()
        n = cfg.decimation
        late_max = self.control_jitter.max_substeps if self.control_jitter is not None else 0
        if self.control_jitter is not None and not am.actuated:
            # Between two possible values of `late` every world's control is fixed, so the physics
            # runs in max_substeps + 1 calls, not one per substep. The cuts are every value `late`
            # can take, not those it took: no host sync, and with more than a few worlds every value
            # occurs anyway.
            cuts = sorted({0, n, *range(1, late_max + 1)})
            spans = list(zip(cuts[:-1], cuts[1:], strict=True))
        else:
            spans = [(s, s + 1) for s in range(n)]
        self._segments = [(start, stop, start < late_max) for start, stop in spans]
        """``(first substep, end substep, whether late worlds still hold the previous control)``."""

    def _step_substeps(self, ctrl: torch.Tensor) -> torch.Tensor:
        """Advance one control step with Python between physics substeps; return diverged worlds.

        With control jitter, world ``i`` keeps the previous control for its first ``late[i]``
        substeps; with actuator models, their efforts are recomputed before every substep.
        """
        am, sim = self.action_manager, self.sim
        late = self.control_jitter.draw() if self.control_jitter is not None else None
        prev = self._prev_ctrl
        if late is not None:
            self._prev_ctrl = ctrl.clone()  # ctrl may be the action manager's reused buffer
        diverged: torch.Tensor | None = None
        for start, stop, mixed in self._segments:
            # Only a segment that starts before the latest possible arrival mixes old and new
            # controls; after it every world has the new one (the where would select ctrl anyway).
            c = torch.where((late > start).unsqueeze(1), prev, ctrl) if mixed else ctrl  # type: ignore[operator, arg-type]
            if am.actuated:
                c = am.actuate(c, sim.qpos, sim.qvel)
            d = sim.step(c, nstep=stop - start)
            diverged = d if diverged is None else diverged | d
        return diverged  # type: ignore[return-value]

    def _field(self, name: str) -> torch.Tensor:
        """An ``MjData`` field of every world (``qpos``/``xpos`` ... or any declared data field)."""
        return getattr(self.sim, name) if name in ("qpos", "qvel", "xpos", "xquat", "cvel") else self.sim.data_field(name)

    def _sync_prev(self, ids: torch.Tensor) -> None:
        """After a reset, the "before" values of worlds ``ids`` are their fresh state (as Gymnasium)."""
        self.prev_qpos[ids] = self.sim.qpos[ids]
        for name, before in self.prev.items():
            before[ids] = self._field(name)[ids]

    def _splice_obs(self, obs: Obs, ids: torch.Tensor) -> Obs:
        """A copy of ``obs`` whose rows ``ids`` are recomputed at the worlds' current state."""
        fresh = self.observation_manager.compute(ids)
        # The out-of-place index_put is the copy and the write in one operation.
        return {g: t.index_put((ids,), fresh[g]) if g in fresh else t.clone() for g, t in obs.items()}

    def _episode_stats(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Returns, lengths, per-term sums and (if the task defines it) success of the episodes
        ending now, one row per world, judged on the state before the reset.
        """
        sums = self.reward_manager.episode_sums[ids]
        stats = {"env_ids": ids, "return": sums.sum(dim=1), "length": self.episode_length[ids].clone()}
        for k, name in enumerate(self.reward_manager.names):
            stats[f"reward/{name}"] = sums[:, k]
        if self.cfg.success is not None:
            stats["success"] = self.cfg.success.func(self, **self.cfg.success.params)[ids]
        return stats

    def _check_action(self, action: Any) -> torch.Tensor:
        """The action as a tensor, or an error naming the problem and what was expected."""
        if not isinstance(action, torch.Tensor):
            arr = np.asarray(action)
            if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
                raise TypeError(f"action: expected a float tensor of shape ({self.num_envs}, {self.action_dim}), got {type(action).__name__}")
            action = torch.from_numpy(arr)
        expected = (self.num_envs, self.action_dim)
        if tuple(action.shape) != expected:
            raise ValueError(f"action: expected shape {expected} (num_envs, action_dim), got {tuple(action.shape)}")
        if not action.is_floating_point():
            raise TypeError(f"action: expected a floating-point dtype, got {action.dtype}")
        action = action.detach().to(self.device)
        check_finite(action, "action")
        return action

    def _action_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Action bounds implied by the actuators' control ranges (inf where unlimited)."""
        am = self.action_manager
        lo = np.full(am.dim, -np.inf)
        hi = np.full(am.dim, np.inf)
        idx = am.index.cpu().numpy()  # build time: bounds come from the host-side model
        limited = self.model.actuator_ctrllimited[idx].astype(bool)
        rng = self.model.actuator_ctrlrange[idx]
        scale, offset = am.scale.cpu().numpy(), am.offset.cpu().numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            a = (rng[:, 0] - offset) / scale
            b = (rng[:, 1] - offset) / scale
        lo[limited] = np.minimum(a, b)[limited]
        hi[limited] = np.maximum(a, b)[limited]
        for act in am.actuated:
            # The action of a modelled term is a joint target, not a motor command: bound it by the
            # joint's range (where the joint has one), mapped back through scale and offset.
            cols = np.arange(am.dim)[am.term_slices[act.name]]
            jnt = self.model.actuator_trnid[act.ctrl_ids.cpu().numpy(), 0]
            jlim = self.model.jnt_limited[jnt].astype(bool)
            jrng = self.model.jnt_range[jnt]
            with np.errstate(divide="ignore", invalid="ignore"):
                a = (jrng[:, 0] - offset[cols]) / scale[cols]
                b = (jrng[:, 1] - offset[cols]) / scale[cols]
            lo[cols] = np.where(jlim, np.minimum(a, b), -np.inf)
            hi[cols] = np.where(jlim, np.maximum(a, b), np.inf)
        return torch.from_numpy(lo).to(self.device), torch.from_numpy(hi).to(self.device)
