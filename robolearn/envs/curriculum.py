"""The curriculum manager: terms that read how episodes went and move task parameters.

A curriculum term (``TaskCfg.curriculum[name] = CurriculumTerm(func, params)``) runs when worlds
reset after their episode ended: after the ended episodes' statistics are taken and before they are
cleared, and before the new episode's events, initial state and commands, so the new episode runs
under the moved values. It may read the ended episodes (``env.reward_manager.episode_sums[env_ids]``,
``env.episode_length[env_ids]``, ``env.curriculum_manager.episodes``: the rows of
``info["episode"]``, success included where the task has one) and training progress
(``env.common_step_counter``: batched control steps since the env was built). What it returns is
logged as ``info["curriculum"][name]`` (a 0-d tensor; the mean of a per-world tensor) and by the
runners as the column ``curriculum/<name>``.

What a term moves is named by an *address*:

* ``rewards.<term>.weight``: the reward manager's weight (read at every step);
* ``<section>.<term>.params.<key>`` for ``rewards``, ``commands``, ``events``, ``terminations``,
  and ``initial_state.params.<key>``: a term's keyword argument (read at each call; a class event
  term is rebuilt, since it binds its params when built);
* ``task.<name>``: a named task parameter ``env.task_params[name]`` (declared in
  ``TaskCfg.task_params``, read by the task's terms), shared ``[]``/``[d]`` or per world
  ``[N, ...]`` once a per-world term (:class:`Levels`, :class:`AlpGmm`) owns it.

:func:`read_address` and :func:`write_address` read and write one, with errors naming it. The env
owns a copy of the config sections a curriculum may write, so two envs built from one ``TaskCfg``
never share a moved value.

Generic terms: :class:`Schedule` (linear in training progress), :class:`PerformanceGate` (one
increment toward the end value while a measure of the ending episodes is above a threshold, and
back below a lower one), :class:`Levels` (per-world integer levels, promoted and demoted from each
world's own episode, legged_gym's terrain curriculum) and :class:`AlpGmm` (the ALP-GMM teacher of
Portelas et al., CoRL 2019, over a box of task parameters).

**Evaluation.** The values a task declares (``TaskCfg.task_params``, its reward weights and term
params) are the task as it is meant to be solved; a curriculum starts training somewhere easier and
moves toward them. An evaluation should report scores on that task, so the documented way to build
an evaluation env is without the curriculum: ``robolearn.make(task, n, curriculum={})`` (the
``curriculum`` override empties ``TaskCfg.curriculum``). An env built with the curriculum runs it
in every env it is built into, evaluation included, from the curriculum's start values.

``env.reset()`` leaves the curriculum where it is: its state is training progress, not an episode's.

Device: terms run only where some world's episode ended, never on a plain step; their host
transfers (the ALP-GMM teacher fits on the host; a Python-number param is written back as one) go
through ``robolearn.envs.sync``.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robolearn.envs.cfg import CurriculumTerm, TaskCfg
from robolearn.envs.sync import host_value, to_host
from robolearn.envs.validate import check_float, check_int

if TYPE_CHECKING:
    from robolearn.envs.batched_env import BatchedEnv

PARAM_SECTIONS = ("rewards", "commands", "events", "terminations", "initial_state")
"""Config sections whose term params a curriculum may move."""
_FORMS = "'rewards.<term>.weight', '<section>.<term>.params.<key>' (section: rewards, commands, events, " \
    "terminations), 'initial_state.params.<key>' or 'task.<name>'"
_WEIGHT = re.compile(r"^rewards\.([^.]+)\.weight$")


# -- addresses --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Address:
    """A resolved address (see the module doc)."""

    text: str
    """The address as written."""
    kind: str
    """``weight``, ``param`` or ``task``."""
    section: str = ""
    """The config section (``param``)."""
    term: str = ""
    """The term (``weight``, ``param``; empty for ``initial_state``)."""
    key: str = ""
    """The param key (``param``) or the task parameter's name (``task``)."""


def resolve_address(env: BatchedEnv, address: Any, where: str) -> Address:
    """Check ``address`` against ``env`` and resolve it; a bad one raises ``ValueError`` naming
    ``where``, the address and what was expected.
    """
    if not isinstance(address, str):
        raise ValueError(f"{where}: expected an address string ({_FORMS}), got {address!r}")
    parts = address.split(".")
    head = parts[0]
    if head == "task":
        if len(parts) != 2 or parts[1] not in env.task_params:
            names = ", ".join(env.task_params) or "none (declare them in TaskCfg.task_params)"
            raise ValueError(f"{where}: unknown address {address!r}: no task parameter of that name; declared: {names}")
        return Address(address, "task", key=parts[1])
    if head == "rewards" and len(parts) == 3 and parts[2] == "weight":
        if parts[1] not in env.cfg.rewards:
            raise ValueError(
                f"{where}: unknown address {address!r}: no reward term {parts[1]!r}; reward terms: "
                f"{', '.join(env.cfg.rewards) or 'none'}"
            )
        if parts[1] not in env.reward_manager.names:  # only if the env was built without its curriculum
            raise ValueError(f"{where}: address {address!r}: the term has weight 0 and was dropped when the env was built")
        return Address(address, "weight", section="rewards", term=parts[1])
    if head == "initial_state" and len(parts) == 3 and parts[1] == "params":
        init = env.cfg.initial_state
        _check_key(address, where, init.func, init.params, parts[2], env_args=2)
        return Address(address, "param", section=head, key=parts[2])
    if head in PARAM_SECTIONS and len(parts) == 4 and parts[2] == "params":
        terms = getattr(env.cfg, head)
        if parts[1] not in terms:
            raise ValueError(
                f"{where}: unknown address {address!r}: no term {parts[1]!r} in {head}; terms: {', '.join(terms) or 'none'}"
            )
        term = terms[parts[1]]
        env_args = 2 if head in ("events", "commands") else 1
        _check_key(address, where, term.func, term.params, parts[3], env_args=env_args)
        return Address(address, "param", section=head, term=parts[1], key=parts[3])
    raise ValueError(f"{where}: unknown address {address!r}; expected {_FORMS}")


def _check_key(address: str, where: str, func: Any, params: dict[str, Any], key: str, env_args: int) -> None:
    """A params key must be configured or be a keyword the term's function (or class) accepts."""
    if key in params:
        return
    accepted: list[str] = []
    if func is not None:
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError):  # a builtin without a signature: trust the config
            return
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return
        # A function's leading (env, env_ids) and a class's env are not params.
        skip = 1 if isinstance(func, type) else env_args
        accepted = [n for k, n in enumerate(sig.parameters) if k >= skip]
        if key in accepted:
            return
    raise ValueError(
        f"{where}: unknown address {address!r}: the term has no param {key!r}; configured: "
        f"{', '.join(params) or 'none'}; accepted: {', '.join(a for a in accepted if a not in ('where', 'mode')) or 'none'}"
    )


def _params_of(env: BatchedEnv, addr: Address) -> dict[str, Any]:
    if addr.section == "initial_state":
        return env.cfg.initial_state.params
    return getattr(env.cfg, addr.section)[addr.term].params


def _default(env: BatchedEnv, addr: Address) -> Any:
    """A param's value when the config does not set it: the function's default."""
    func = env.cfg.initial_state.func if addr.section == "initial_state" else getattr(env.cfg, addr.section)[addr.term].func
    p = inspect.signature(func).parameters.get(addr.key)
    if p is None or p.default is inspect.Parameter.empty:
        raise ValueError(f"address {addr.text!r}: the param is not configured and has no default to read")
    return p.default


def read_address(env: BatchedEnv, address: str | Address) -> Any:
    """The current value at ``address``: a 0-d tensor (weight), the param's value (param), or the
    task parameter's tensor itself (task: writes to it are seen by every reader).
    """
    addr = address if isinstance(address, Address) else resolve_address(env, address, f"address {address!r}")
    if addr.kind == "weight":
        return env.reward_manager.weights[env.reward_manager.names.index(addr.term)].clone()
    if addr.kind == "task":
        return env.task_params[addr.key]
    params = _params_of(env, addr)
    return params[addr.key] if addr.key in params else _default(env, addr)


def write_address(env: BatchedEnv, address: str | Address, value: Any, env_ids: torch.Tensor | None = None) -> None:
    """Write ``value`` at ``address``; ``env_ids`` writes only those rows of a per-world task parameter.

    A param configured as a Python number (or list) stays one: a tensor value is brought to the
    host (``robolearn.envs.sync``), since the term may use it as a Python number. A param that is
    a tensor stays a tensor. Shape mismatches raise ``ValueError`` naming the address.
    """
    addr = address if isinstance(address, Address) else resolve_address(env, address, f"address {address!r}")
    device = env.device
    if addr.kind == "weight":
        w = env.reward_manager.weights
        k = env.reward_manager.names.index(addr.term)
        w[k] = torch.as_tensor(value, dtype=torch.float64, device=device).reshape(())
        return
    if addr.kind == "task":
        table = env.task_params[addr.key]
        v = torch.as_tensor(value, dtype=torch.float64, device=device)
        if env_ids is not None and addr.key not in env.curriculum_manager.per_world:
            raise ValueError(f"address {addr.text!r}: rows can be written only to a per-world task parameter")
        try:
            if env_ids is None:
                table.copy_(v.expand_as(table) if v.ndim <= table.ndim else v)
            else:
                table[env_ids] = v.expand(env_ids.numel(), *table.shape[1:]) if v.ndim < table.ndim else v
        except RuntimeError as exc:
            raise ValueError(f"address {addr.text!r}: value of shape {tuple(v.shape)} does not fit {tuple(table.shape)}: {exc}") from None
        return
    if env_ids is not None:
        raise ValueError(f"address {addr.text!r}: env_ids is only for a per-world task parameter")
    params = _params_of(env, addr)
    old = params[addr.key] if addr.key in params else _default(env, addr)
    if isinstance(value, torch.Tensor) and not isinstance(old, torch.Tensor):
        value = host_value(value)
        if isinstance(old, numbers.Integral) and not isinstance(old, bool) and isinstance(value, float):
            value = round(value)
    if isinstance(old, tuple) and isinstance(value, list):
        value = tuple(value)  # a (low, high) range stays a tuple
    params[addr.key] = value
    env.curriculum_manager.written[addr.text] = addr
    if addr.section == "events" and isinstance(env.cfg.events[addr.term].func, type):
        env.event_manager.rebuild_term(addr.term)


def per_world(env: BatchedEnv, name: str, where: str) -> torch.Tensor:
    """Task parameter ``name`` as a per-world ``[N, *declared shape]`` tensor (made so, once, from
    its declared value; every world starts there), for terms that set it world by world.
    """
    if name not in env.task_params:
        raise ValueError(f"{where}: no task parameter {name!r}; declared: {', '.join(env.task_params) or 'none'}")
    manager = env.curriculum_manager
    if name not in manager.per_world:
        value = env.task_params[name]
        env.task_params[name] = value.unsqueeze(0).expand(env.num_envs, *value.shape).clone()
        manager.per_world.add(name)
    return env.task_params[name]


def world_values(env: BatchedEnv, name: str) -> torch.Tensor:
    """Task parameter ``name`` with one row per world, ``[N, *declared shape]``, for task terms:
    the per-world table itself, or the shared value expanded (a view, no copy) while it is shared.
    """
    value = env.task_params[name]
    if name in env.curriculum_manager.per_world:
        return value
    return value.unsqueeze(0).expand(env.num_envs, *value.shape)


def own_cfg(cfg: TaskCfg) -> TaskCfg:
    """A copy of ``cfg`` whose terms and params dicts of the sections a curriculum may write are
    the env's own (the rest is shared): a moved value never leaks into another env of the same config.
    """
    def terms(section: dict[str, Any]) -> dict[str, Any]:
        return {k: dataclasses.replace(t, params=dict(t.params)) for k, t in section.items()}

    return dataclasses.replace(
        cfg,
        rewards=terms(cfg.rewards),
        commands=terms(cfg.commands),
        events=terms(cfg.events),
        terminations=terms(cfg.terminations),
        initial_state=dataclasses.replace(cfg.initial_state, params=dict(cfg.initial_state.params)),
        curriculum=dict(cfg.curriculum),
    )


def weight_targets(curriculum: dict[str, CurriculumTerm]) -> set[str]:
    """Reward terms whose weight a curriculum names (``rewards.<term>.weight`` in any params value):
    the reward manager keeps them even at weight 0.
    """
    found: set[str] = set()

    def scan(value: Any) -> None:
        if isinstance(value, str):
            m = _WEIGHT.match(value)
            if m:
                found.add(m.group(1))
        elif isinstance(value, (list, tuple)):
            for v in value:
                scan(v)
        elif isinstance(value, dict):
            for v in value.values():
                scan(v)

    for term in curriculum.values():
        scan(term.params)
    return found


# -- the manager ------------------------------------------------------------------------------------
class CurriculumManager:
    """Builds the curriculum terms, runs them where episodes end, keeps their logged values and
    everything they hold for checkpoints.
    """

    def __init__(self, env: BatchedEnv) -> None:
        """An empty manager; :meth:`build` adds the terms (they may already ask it for per-world
        task parameters, so the env holds the manager before they are built).
        """
        self.env = env
        self.calls: dict[str, Callable[[BatchedEnv, torch.Tensor], Any]] = {}
        """Each term's call ``(env, env_ids)``: the built class term, or the function with its params."""
        self.values: dict[str, torch.Tensor] = {}
        """The latest value of each term (0-d float64 tensors; NaN until a term first reports).
        Replaced, never changed in place, so ``info["curriculum"]`` can hand it out as it is."""
        self.episodes: dict[str, torch.Tensor] = {}
        """The rows of the episodes ending now (``info["episode"]``), while the terms run."""
        self.per_world: set[str] = set()
        """Task parameters made per world (``[N, ...]``)."""
        self.written: dict[str, Address] = {}
        """Param addresses a term wrote: their values live in the env's config and are checkpointed."""

    def build(self, terms: dict[str, CurriculumTerm]) -> None:
        """Build (and so validate) every term, in order."""
        env = self.env
        for name, term in terms.items():
            where = f"curriculum.{name}"
            func = term.func
            if isinstance(func, type):
                try:  # a param the class does not take, or a required one missing, named as params
                    inspect.signature(func).bind(env, where=where, **term.params)
                except TypeError as exc:
                    raise ValueError(f"{where}.params: {exc}") from None
                built = func(env, where=where, **term.params)
                self.calls[name] = built
                initial = getattr(built, "value", None)
            elif callable(func):
                try:
                    inspect.signature(func).bind(env, env.all_ids, **term.params)
                except TypeError as exc:
                    raise ValueError(f"{where}.params: {exc}") from None
                except ValueError:  # no signature to check (a builtin): it is checked when called
                    pass
                self.calls[name] = _bind(func, term.params)
                initial = None
            else:
                raise ValueError(
                    f"{where}.func: expected a curriculum class or a function (env, env_ids, **params), got {func!r}"
                )
            self.values[name] = self._scalar(name, initial) if initial is not None else self._nan()
        self.values = dict(self.values)

    def update(self, env_ids: torch.Tensor, episodes: dict[str, torch.Tensor]) -> None:
        """Run every term for the worlds ``env_ids`` whose episodes just ended (their rows in ``episodes``)."""
        env = self.env
        self.episodes = episodes
        values = dict(self.values)
        for name, call in self.calls.items():
            out = call(env, env_ids)
            if out is not None:
                values[name] = self._scalar(name, out)
        self.values = values
        self.episodes = {}

    def _nan(self) -> torch.Tensor:
        return torch.full((), math.nan, dtype=torch.float64, device=self.env.device)

    def _scalar(self, name: str, out: Any) -> torch.Tensor:
        """A term's report as a 0-d float64 tensor on the env's device (the mean of a larger one)."""
        if isinstance(out, torch.Tensor):
            out = out.detach().to(self.env.device, torch.float64)
            return out if out.ndim == 0 else out.mean()
        if isinstance(out, numbers.Real) and not isinstance(out, bool):
            return torch.tensor(float(out), dtype=torch.float64, device=self.env.device)
        raise TypeError(f"curriculum.{name}: a term returns a tensor, a number or None, got {type(out).__name__}")

    def state_dict(self) -> dict[str, Any]:
        """Term states, logged values, per-world parameters and the params the terms wrote."""
        env = self.env
        return {
            "terms": {k: c.state_dict() for k, c in self.calls.items() if hasattr(c, "state_dict")},
            "values": {k: v.clone() for k, v in self.values.items()},
            "per_world": sorted(self.per_world),
            "written": {a: _plain(read_address(env, addr)) for a, addr in self.written.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (task parameters and weights are restored by the env)."""
        env = self.env
        if set(state["values"]) != set(self.calls):
            raise ValueError(f"env state: saved with curriculum terms {sorted(state['values'])}, this env has {sorted(self.calls)}")
        self.per_world = set(state["per_world"])
        for text, value in state["written"].items():
            write_address(env, resolve_address(env, text, f"env state: curriculum address {text!r}"), value)
        for k, c in self.calls.items():
            if hasattr(c, "load_state_dict"):
                c.load_state_dict(state["terms"][k])
        self.values = {k: v.to(env.device, copy=True) for k, v in state["values"].items()}


def _plain(value: Any) -> Any:
    """A value as a checkpoint may hold it (tensors cloned, NumPy numbers as Python numbers)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _bind(func: Callable[..., Any], params: dict[str, Any]) -> Callable[[BatchedEnv, torch.Tensor], Any]:
    def call(env: BatchedEnv, env_ids: torch.Tensor) -> Any:
        return func(env, env_ids, **params)  # read at each call, as the config holds them now

    return call


# -- measures of the ending episodes -----------------------------------------------------------------
MEASURES = ("return", "reward/<term>", "return_per_s", "reward_per_s/<term>", "length", "success")
"""Named measures of an ended episode; a callable ``(env, env_ids) -> Tensor[k]`` is accepted too."""

Measure = str | Callable[..., torch.Tensor]


def check_measure(env: BatchedEnv, measure: Any, where: str) -> None:
    """Refuse an unknown measure, naming ``where`` and the choices."""
    if callable(measure):
        return
    if measure in ("return", "return_per_s", "length"):
        return
    if measure == "success":
        if env.cfg.success is None:
            raise ValueError(f"{where}: 'success' needs a task with a success term (TaskCfg.success); this one has none")
        return
    if isinstance(measure, str) and measure.startswith(("reward/", "reward_per_s/")):
        term = measure.split("/", 1)[1]
        if term not in env.reward_manager.names:
            raise ValueError(
                f"{where}: no reward term {term!r} (with non-zero weight); reward terms: {', '.join(env.reward_manager.names)}"
            )
        return
    raise ValueError(f"{where}: expected one of {', '.join(MEASURES)} or a function (env, env_ids) -> Tensor, got {measure!r}")


def episode_measure(env: BatchedEnv, env_ids: torch.Tensor, measure: Measure) -> torch.Tensor:
    """One value per ended episode of worlds ``env_ids`` (float64 ``[k]``), read before the reset.

    ``return`` and ``reward/<term>``: the (weighted) episode sum per control step of a full
    episode, sum / max_episode_length (an episode cut short scores less, as in legged_gym's
    terrain curriculum; robolearn's rewards are per step, where legged_gym scales them by dt and
    divides by seconds, so this is the same number for the same reward); ``return_per_s`` and
    ``reward_per_s/<term>``: per second of a full episode, sum / (max_episode_length * dt);
    ``length``: the fraction of the full episode lived; ``success``: 1 or 0, judged on the last
    state; a callable is called as ``(env, env_ids)``.
    """
    if callable(measure):
        return torch.as_tensor(measure(env, env_ids), dtype=torch.float64, device=env.device).reshape(env_ids.numel())
    rm = env.reward_manager
    per = env.max_episode_length * (env.dt if "_per_s" in measure else 1.0)
    if measure in ("return", "return_per_s"):
        return rm.episode_sums[env_ids].sum(dim=1) / per
    if measure == "length":
        return env.episode_length[env_ids].to(torch.float64) / env.max_episode_length
    if measure == "success":
        success = env.cfg.success
        assert success is not None  # check_measure refused a task without one
        return success.func(env, **success.params)[env_ids].to(torch.float64)
    return rm.episode_sums[env_ids, rm.names.index(measure.split("/", 1)[1])] / per


# -- generic terms ------------------------------------------------------------------------------------
class CurriculumTermBase:
    """Base of the curriculum classes: validated when built, called where episodes end, checkpointed."""

    def __init__(self, env: BatchedEnv, *, where: str) -> None:
        """Keep where the term sits in the config (``curriculum.<name>``), prefixed to every message."""
        self.where = where
        self.value: Any = None
        """What the term reports before its first call (logged from the first step)."""

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> torch.Tensor | float | None:
        """Worlds ``env_ids`` ended their episodes: move what the term moves; return what to log."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs (tensors, numbers, strings and containers of them)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""


def _numbers(where: str, value: Any) -> list[float] | float:
    """A finite number or a non-empty flat sequence of them, as Python floats."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{where}: expected a number or a non-empty sequence of numbers, got {value!r}")
        return [check_float(f"{where}[{k}]", v) for k, v in enumerate(value)]
    return check_float(where, value)


def _same_shape(where: str, a: Any, b: Any, names: tuple[str, str]) -> None:
    la = len(a) if isinstance(a, list) else None
    lb = len(b) if isinstance(b, list) else None
    if la != lb:
        raise ValueError(f"{where}: {names[0]} and {names[1]} must have the same shape, got {a!r} and {b!r}")


class Schedule(CurriculumTermBase):
    """Move ``target`` linearly from ``start`` to ``end`` over ``num_steps`` batched control steps
    (``env.common_step_counter``), after ``delay_steps``; constant outside. Computed in Python from
    the step count: no host sync even when the target is a Python-number param.
    """

    def __init__(
        self,
        env: BatchedEnv,
        *,
        where: str,
        target: str,
        start: float | Sequence[float],
        end: float | Sequence[float],
        num_steps: int,
        delay_steps: int = 0,
    ) -> None:
        """Check the values and the address; write the start value."""
        super().__init__(env, where=where)
        self.addr = resolve_address(env, target, f"{where}.target")
        self.start = _numbers(f"{where}.start", start)
        self.end = _numbers(f"{where}.end", end)
        _same_shape(where, self.start, self.end, ("start", "end"))
        self.num_steps = check_int(f"{where}.num_steps", num_steps, 1)
        self.delay_steps = check_int(f"{where}.delay_steps", delay_steps, 0)
        self.value = self._apply(env)

    def at(self, step: int) -> list[float] | float:
        """The value after ``step`` batched control steps."""
        frac = min(max((step - self.delay_steps) / self.num_steps, 0.0), 1.0)
        if isinstance(self.start, list):
            return [s + (e - s) * frac for s, e in zip(self.start, self.end, strict=True)]  # type: ignore[arg-type]
        return self.start + (self.end - self.start) * frac  # type: ignore[operator]

    def _apply(self, env: BatchedEnv) -> float:
        value = self.at(env.common_step_counter)
        write_address(env, self.addr, value)
        return float(np.mean(value))

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> float:
        """Write the value at the current step; report it (the mean of a vector)."""
        return self._apply(env)


class PerformanceGate(CurriculumTermBase):
    """Move ``target`` one ``step`` toward ``end`` when the mean ``measure`` over the last
    ``min_episodes`` (or more) ended episodes is at least ``threshold``; with ``lower_threshold``,
    one step back toward ``start`` when it is below that. The value stays between ``start`` and
    ``end``. The decision is taken on the device (no host sync), except that a Python-number param
    target is written back as a number (through ``robolearn.envs.sync``).
    """

    def __init__(
        self,
        env: BatchedEnv,
        *,
        where: str,
        target: str,
        start: float | Sequence[float],
        end: float | Sequence[float],
        step: float | Sequence[float],
        measure: Measure,
        threshold: float,
        lower_threshold: float | None = None,
        min_episodes: int = 1,
    ) -> None:
        """Check thresholds, values and the address; write the start value."""
        super().__init__(env, where=where)
        self.addr = resolve_address(env, target, f"{where}.target")
        start_v, end_v, step_v = (_numbers(f"{where}.{k}", v) for k, v in (("start", start), ("end", end), ("step", step)))
        _same_shape(where, start_v, end_v, ("start", "end"))
        if isinstance(step_v, list):
            _same_shape(where, start_v, step_v, ("start", "step"))
        if any(s <= 0 for s in np.atleast_1d(step_v)):
            raise ValueError(f"{where}.step: expected increments > 0 (the direction comes from start -> end), got {step!r}")
        check_measure(env, measure, f"{where}.measure")
        self.measure = measure
        self.threshold = check_float(f"{where}.threshold", threshold)
        self.lower_threshold = None if lower_threshold is None else check_float(f"{where}.lower_threshold", lower_threshold)
        if self.lower_threshold is not None and self.lower_threshold > self.threshold:
            raise ValueError(
                f"{where}.lower_threshold: expected a value <= threshold ({self.threshold}), got {lower_threshold!r} "
                "(between the two the value holds)"
            )
        self.min_episodes = check_int(f"{where}.min_episodes", min_episodes, 1)
        dev = env.device
        self.start = torch.tensor(start_v, dtype=torch.float64, device=dev)
        self.end = torch.tensor(end_v, dtype=torch.float64, device=dev)
        self.step = torch.tensor(step_v, dtype=torch.float64, device=dev)
        self.current = self.start.clone()
        self._sum = torch.zeros((), dtype=torch.float64, device=dev)
        self._count = 0  # a count of worlds, known on the host from env_ids' shape
        write_address(env, self.addr, start_v)
        self.value = self.current.mean()

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> torch.Tensor:
        """Accumulate the ended episodes' measure; once enough, decide, write and start over."""
        self._sum = self._sum + episode_measure(env, env_ids, self.measure).sum()
        self._count += env_ids.numel()
        if self._count >= self.min_episodes:
            mean = self._sum / self._count
            forward = self.current + torch.clamp(self.end - self.current, -self.step, self.step)
            moved = torch.where(mean >= self.threshold, forward, self.current)
            if self.lower_threshold is not None:
                back = self.current + torch.clamp(self.start - self.current, -self.step, self.step)
                moved = torch.where(mean < self.lower_threshold, back, moved)
            self.current = moved
            write_address(env, self.addr, moved)
            self._sum = torch.zeros_like(self._sum)
            self._count = 0
        return self.current.mean()

    def state_dict(self) -> dict[str, Any]:
        """The current value and the partial accumulation."""
        return {"current": self.current.clone(), "sum": self._sum.clone(), "count": self._count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.current = state["current"].to(self.current.device, copy=True)
        self._sum = state["sum"].to(self._sum.device, copy=True)
        self._count = int(state["count"])


class Levels(CurriculumTermBase):
    """Per-world integer levels in ``task.<name>`` (``[N]``, float64 holding whole numbers): a world
    whose ended episode scores ``measure >= promote_threshold`` goes one level up, one scoring
    below ``demote_threshold`` one level down, clamped to ``[0, num_levels - 1]`` (legged_gym's
    terrain curriculum, judged per world on its own episode). Reports the mean level.
    """

    def __init__(
        self,
        env: BatchedEnv,
        *,
        where: str,
        target: str,
        num_levels: int,
        measure: Measure,
        promote_threshold: float,
        demote_threshold: float | None = None,
        init_level: int = 0,
    ) -> None:
        """Check the address (a scalar task parameter), thresholds and levels; set every world's level."""
        super().__init__(env, where=where)
        self.addr = resolve_address(env, target, f"{where}.target")
        if self.addr.kind != "task":
            raise ValueError(f"{where}.target: per-world levels live in a task parameter 'task.<name>', got {target!r}")
        if env.task_params[self.addr.key].ndim != 0 and self.addr.key not in env.curriculum_manager.per_world:
            raise ValueError(f"{where}.target: {target!r} must be declared as one number (a level per world), got a sequence")
        self.num_levels = check_int(f"{where}.num_levels", num_levels, 1)
        check_measure(env, measure, f"{where}.measure")
        self.measure = measure
        self.promote = check_float(f"{where}.promote_threshold", promote_threshold)
        self.demote = None if demote_threshold is None else check_float(f"{where}.demote_threshold", demote_threshold)
        if self.demote is not None and self.demote > self.promote:
            raise ValueError(
                f"{where}.demote_threshold: expected a value <= promote_threshold ({self.promote}), got {demote_threshold!r}"
            )
        init = check_int(f"{where}.init_level", init_level, 0)
        if init >= self.num_levels:
            raise ValueError(f"{where}.init_level: expected an integer in [0, {self.num_levels - 1}], got {init_level!r}")
        levels = per_world(env, self.addr.key, f"{where}.target")
        levels.fill_(float(init))
        self.value = levels.mean()

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> torch.Tensor:
        """Promote and demote the worlds that ended; report the mean level of all worlds."""
        levels = env.task_params[self.addr.key]
        m = episode_measure(env, env_ids, self.measure)
        step = (m >= self.promote).to(torch.float64)
        if self.demote is not None:
            step = step - (m < self.demote).to(torch.float64)
        levels[env_ids] = torch.clamp(levels[env_ids] + step, 0.0, float(self.num_levels - 1))
        return levels.mean()


# -- ALP-GMM ----------------------------------------------------------------------------------------
# scikit-learn is not a dependency of robolearn (and would be its only use); the mixture the teacher
# needs is small (a few components over a handful of dimensions, refit every K episodes), so a
# plain EM in NumPy, seeded by the teacher's own generator, does the job and stays reproducible.
@dataclass
class Gmm:
    """A Gaussian mixture: ``weights [k]``, ``means [k, d]``, ``covs [k, d, d]`` (diagonal ones
    stored full) and the total log-likelihood of the data it was fitted on.
    """

    weights: np.ndarray
    means: np.ndarray
    covs: np.ndarray
    log_likelihood: float
    covariance: str = "full"

    def num_params(self) -> int:
        """Free parameters: means, covariances (full: d(d+1)/2 each; diag: d) and k - 1 weights."""
        k, d = self.means.shape
        cov = d * (d + 1) // 2 if self.covariance == "full" else d
        return k * d + k * cov + k - 1

    def bic(self, n: int) -> float:
        """Bayesian information criterion on ``n`` points (lower is better)."""
        return -2.0 * self.log_likelihood + self.num_params() * math.log(n)

    def aic(self) -> float:
        """Akaike information criterion (lower is better)."""
        return -2.0 * self.log_likelihood + 2.0 * self.num_params()


def _log_gauss(x: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Log density ``[n]`` of ``N(mean, cov)`` at the rows of ``x``."""
    chol = np.linalg.cholesky(cov)
    sol = np.linalg.solve(chol, (x - mean).T)
    return -0.5 * (x.shape[1] * math.log(2 * math.pi) + 2.0 * np.log(np.diag(chol)).sum() + (sol**2).sum(axis=0))


def _responsibilities(x: np.ndarray, weights: np.ndarray, means: np.ndarray, covs: np.ndarray) -> tuple[np.ndarray, float]:
    logp = np.stack([np.log(w) + _log_gauss(x, m, c) for w, m, c in zip(weights, means, covs, strict=True)], axis=1)
    top = logp.max(axis=1, keepdims=True)
    ll = top[:, 0] + np.log(np.exp(logp - top).sum(axis=1))
    return np.exp(logp - ll[:, None]), float(ll.sum())


def fit_gmm(
    x: np.ndarray,
    k: int,
    rng: np.random.Generator,
    covariance: str = "full",
    max_iter: int = 100,
    tol: float = 1e-6,
    reg: float = 1e-4,
) -> Gmm:
    """Fit a ``k``-component mixture to the rows of ``x [n, d]`` by EM from a k-means++ start.

    ``reg`` is added to every covariance's diagonal (keeps a component on a few identical points,
    e.g. a flat learning-progress column, positive definite). Stops when the log-likelihood gains
    less than ``tol`` per point.
    """
    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    if not 1 <= k <= n:
        raise ValueError(f"fit_gmm: k must be in [1, {n}] for {n} points, got {k}")
    if covariance not in ("full", "diag"):
        raise ValueError(f"fit_gmm: covariance must be 'full' or 'diag', got {covariance!r}")
    # k-means++: each next centre is a point drawn with probability proportional to its squared
    # distance from the nearest centre so far (spreads the start over separated clusters).
    centres = [x[rng.integers(n)]]
    for _ in range(1, k):
        d2 = np.min(((x[:, None, :] - np.asarray(centres)[None]) ** 2).sum(-1), axis=1)
        total = d2.sum()
        centres.append(x[rng.choice(n, p=d2 / total)] if total > 0 else x[rng.integers(n)])
    means = np.asarray(centres, dtype=np.float64)
    eye = np.eye(d)
    covs = np.repeat((np.diag(x.var(axis=0)) + reg * eye)[None], k, axis=0)
    weights = np.full(k, 1.0 / k)
    prev = -math.inf
    for _ in range(max_iter):
        resp, ll = _responsibilities(x, weights, means, covs)
        nk = resp.sum(axis=0) + 1e-12
        weights = nk / n
        means = (resp.T @ x) / nk[:, None]
        for j in range(k):
            diff = x - means[j]
            cov = (resp[:, j, None] * diff).T @ diff / nk[j]
            covs[j] = (np.diag(np.diag(cov)) if covariance == "diag" else cov) + reg * eye
        if ll - prev < tol * n:
            break
        prev = ll
    _, ll = _responsibilities(x, weights, means, covs)
    return Gmm(weights, means, covs, ll, covariance)


def select_gmm(
    x: np.ndarray, max_components: int, rng: np.random.Generator, criterion: str = "bic", covariance: str = "full"
) -> Gmm:
    """The mixture of 1 to ``max_components`` components (at most one per point) with the lowest
    ``criterion`` (``bic`` or ``aic``).
    """
    best: Gmm | None = None
    best_score = math.inf
    n = x.shape[0]
    for k in range(1, min(max_components, n) + 1):
        g = fit_gmm(x, k, rng, covariance)
        score = g.bic(n) if criterion == "bic" else g.aic()
        if score < best_score:
            best, best_score = g, score
    assert best is not None
    return best


class AlpGmm(CurriculumTermBase):
    """The ALP-GMM teacher (Portelas et al., "Teacher algorithms for curriculum learning of deep RL
    in continuously parameterized environments", CoRL 2019) over a box of task parameters.

    Each world's task parameter ``task.<name>`` (``[N, d]``) is drawn from the box ``[low, high]``.
    When a world's episode ends, the teacher records (parameters, performance) and the absolute
    learning progress ALP = |performance - performance of the nearest earlier sample| (nearest in
    the box, scaled to the unit cube). Every ``fit_every`` episodes it fits Gaussian mixtures of 1
    to ``max_components`` components to the last ``window`` (parameters, ALP) points and keeps the
    one with the lowest BIC (or AIC). New parameters: with probability ``epsilon`` (and always
    before the first fit) uniform in the box; otherwise from a component drawn with probability
    proportional to its mean ALP, clipped to the box. Draws come from the teacher's own NumPy
    generator, seeded from the env's seed and the term's name and checkpointed. Reports the mean
    ALP of the window.
    """

    def __init__(
        self,
        env: BatchedEnv,
        *,
        where: str,
        target: str,
        low: Sequence[float],
        high: Sequence[float],
        measure: Measure = "return",
        fit_every: int = 100,
        window: int | None = None,
        max_components: int = 5,
        criterion: str = "bic",
        covariance: str = "full",
        epsilon: float = 0.2,
        max_history: int = 20000,
    ) -> None:
        """Check the box and settings; draw every world's first parameters uniformly."""
        super().__init__(env, where=where)
        self.addr = resolve_address(env, target, f"{where}.target")
        if self.addr.kind != "task":
            raise ValueError(f"{where}.target: the teacher draws a task parameter 'task.<name>', got {target!r}")
        lo = _numbers(f"{where}.low", list(low) if isinstance(low, (list, tuple)) else low)
        hi = _numbers(f"{where}.high", list(high) if isinstance(high, (list, tuple)) else high)
        lo_l = lo if isinstance(lo, list) else [lo]
        hi_l = hi if isinstance(hi, list) else [hi]
        if len(lo_l) != len(hi_l):
            raise ValueError(f"{where}: low and high must have the same length, got {low!r} and {high!r}")
        for k, (a, b) in enumerate(zip(lo_l, hi_l, strict=True)):
            if not a < b:
                raise ValueError(f"{where}.high[{k}]: expected a value > low[{k}] = {a} (an inverted or empty box), got {b}")
        declared = env.task_params[self.addr.key]
        d = len(lo_l)
        if self.addr.key not in env.curriculum_manager.per_world and tuple(declared.shape) != (d,):
            raise ValueError(
                f"{where}.target: {target!r} must be declared with {d} values (one per box dimension), "
                f"got shape {tuple(declared.shape)}"
            )
        check_measure(env, measure, f"{where}.measure")
        self.measure = measure
        self.fit_every = check_int(f"{where}.fit_every", fit_every, 2)
        self.window = check_int(f"{where}.window", window if window is not None else self.fit_every, 2)
        self.max_components = check_int(f"{where}.max_components", max_components, 1)
        if criterion not in ("bic", "aic"):
            raise ValueError(f"{where}.criterion: expected 'bic' or 'aic', got {criterion!r}")
        if covariance not in ("full", "diag"):
            raise ValueError(f"{where}.covariance: expected 'full' or 'diag', got {covariance!r}")
        self.criterion, self.covariance = criterion, covariance
        self.epsilon = check_float(f"{where}.epsilon", epsilon, nonnegative=True)
        if self.epsilon > 1:
            raise ValueError(f"{where}.epsilon: expected a probability in [0, 1], got {epsilon!r}")
        self.max_history = check_int(f"{where}.max_history", max_history, self.window)
        self.low = np.asarray(lo_l, dtype=np.float64)
        self.high = np.asarray(hi_l, dtype=np.float64)
        self.rng = np.random.default_rng([env.seed, zlib.crc32(where.encode())])
        self.params = np.zeros((0, d))
        """Recorded parameters, scaled to the unit cube ``[H, d]``."""
        self.perf = np.zeros(0)
        self.alp = np.zeros(0)
        self.since_fit = 0
        self.gmm: Gmm | None = None
        table = per_world(env, self.addr.key, f"{where}.target")
        table.copy_(torch.from_numpy(self.sample(env.num_envs)).to(table.device))
        self.value = 0.0

    def sample(self, n: int) -> np.ndarray:
        """``n`` parameter vectors ``[n, d]`` in the box (uniform, or from the mixture)."""
        d = self.low.size
        unit = self.rng.random((n, d))
        g = self.gmm
        if g is not None:
            alp = np.maximum(g.means[:, d], 0.0)
            if alp.sum() > 0:
                use_gmm = self.rng.random(n) >= self.epsilon
                comp = self.rng.choice(alp.size, size=n, p=alp / alp.sum())
                z = self.rng.standard_normal((n, d))
                for j in range(alp.size):
                    rows = use_gmm & (comp == j)
                    if rows.any():
                        chol = np.linalg.cholesky(g.covs[j][:d, :d])
                        unit[rows] = np.clip(g.means[j, :d] + z[rows] @ chol.T, 0.0, 1.0)
        return self.low + unit * (self.high - self.low)

    def record(self, params: np.ndarray, perf: np.ndarray) -> None:
        """Record ended episodes (``params [k, d]`` in box units, ``perf [k]``) in order; each one's
        ALP is against the nearest sample recorded before it (0 for the very first). Refit when due.
        """
        unit = (np.asarray(params, dtype=np.float64) - self.low) / (self.high - self.low)
        perf = np.asarray(perf, dtype=np.float64)
        n, h = len(perf), len(self.perf)
        alp = np.zeros(n)
        earlier_p = np.concatenate([self.params, unit])
        earlier_r = np.concatenate([self.perf, perf])
        # Row i's candidates are the history and the batch's rows before i (the order the episodes
        # are recorded in); chunks of rows bound the [rows, history] distance table.
        sq = (earlier_p**2).sum(axis=1)
        for a in range(0, n, 256):
            b = min(n, a + 256)
            # |u - p|^2 = |u|^2 - 2 u.p + |p|^2: a matrix product instead of a [rows, H, d] table.
            d2 = sq[a + h : b + h, None] - 2.0 * unit[a:b] @ earlier_p[: h + b].T + sq[None, : h + b]
            rows = np.arange(a, b)
            d2[:, h:][rows[:, None] <= np.arange(b)[None, :]] = np.inf  # itself and later rows
            nearest = np.argmin(d2, axis=1)
            found = np.isfinite(d2[np.arange(b - a), nearest])  # the very first sample has none
            alp[a:b] = np.where(found, np.abs(perf[a:b] - earlier_r[nearest]), 0.0)
        self.params = np.concatenate([self.params, unit])[-self.max_history :]
        self.perf = np.concatenate([self.perf, perf])[-self.max_history :]
        self.alp = np.concatenate([self.alp, alp])[-self.max_history :]
        self.since_fit += len(perf)
        if self.since_fit >= self.fit_every and len(self.perf) >= 2:
            self.fit()

    def fit(self) -> None:
        """Fit the mixture on the last ``window`` (parameters, ALP) points (ALP scaled by its
        maximum there, so it weighs like a unit-cube coordinate).
        """
        p, a = self.params[-self.window :], self.alp[-self.window :]
        top = a.max()
        x = np.concatenate([p, (a / top if top > 0 else a)[:, None]], axis=1)
        self.gmm = select_gmm(x, self.max_components, self.rng, self.criterion, self.covariance)
        self.since_fit = 0

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> float:
        """Record the ended episodes, draw the worlds' next parameters; report the mean ALP of the window."""
        table = env.task_params[self.addr.key]
        perf = episode_measure(env, env_ids, self.measure)
        # One host transfer of both: the teacher's history and mixture live on the host.
        both = to_host(torch.cat([table[env_ids], perf.unsqueeze(1)], dim=1))
        self.record(both[:, :-1], both[:, -1])
        table[env_ids] = torch.from_numpy(self.sample(env_ids.numel())).to(table.device)
        return float(self.alp[-self.window :].mean())

    def state_dict(self) -> dict[str, Any]:
        """History, mixture, counters and the generator's state."""
        g = self.gmm
        return {
            "params": torch.from_numpy(self.params.copy()),
            "perf": torch.from_numpy(self.perf.copy()),
            "alp": torch.from_numpy(self.alp.copy()),
            "since_fit": self.since_fit,
            "gmm": None if g is None else {
                "weights": torch.from_numpy(g.weights.copy()), "means": torch.from_numpy(g.means.copy()),
                "covs": torch.from_numpy(g.covs.copy()), "log_likelihood": float(g.log_likelihood),
            },
            "rng": _plain_state(self.rng.bit_generator.state),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.params = state["params"].numpy().copy()
        self.perf = state["perf"].numpy().copy()
        self.alp = state["alp"].numpy().copy()
        self.since_fit = int(state["since_fit"])
        g = state["gmm"]
        self.gmm = None if g is None else Gmm(
            g["weights"].numpy().copy(), g["means"].numpy().copy(), g["covs"].numpy().copy(),
            float(g["log_likelihood"]), self.covariance,
        )
        self.rng.bit_generator.state = state["rng"]


def _plain_state(value: Any) -> Any:
    """A generator state with NumPy integers as Python ones (checkpoints load with weights_only)."""
    if isinstance(value, dict):
        return {k: _plain_state(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value
