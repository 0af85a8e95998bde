"""``robolearn sim2sim run=<dir>``: the check before hardware.

A policy that only works in the simulator it was trained in will not work on a robot. The gate
evaluates a trained policy on its task as trained (the nominal condition) and under perturbations
it never saw: another physics timestep or integrator, model parameters scaled beyond the training
ranges, and added latency. Each perturbation passes when its mean return reaches a threshold
(a fraction of the nominal return, or an absolute return); the command prints a pass/fail table,
writes ``<run>/sim2sim.json`` and exits with status 1 when anything fails.

Every condition is evaluated with the same seed, so the worlds start from the same states and the
difference between rows is the perturbation's. Perturbed model fields are written into the
template model too, so a task's own randomisation events (which draw around the template's
values) compose with the perturbation instead of undoing it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import robolearn
from robolearn.cli.build import flatten_overrides, load_policy
from robolearn.cli.config import INTEGRATORS, ConfigError, Perturbation, Sim2SimConfig
from robolearn.envs import BatchedEnv
from robolearn.sim.backend import resolve_field

Act = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]
"""A policy: observation groups ``[N, ...]`` to actions ``[N, A]``."""
MakeEnv = Callable[[dict[str, Any]], BatchedEnv]
"""Builds the task's env with extra task-config overrides (``timestep``, ``decimation`` ...)."""

MOTOR_STRENGTH = "motor_strength"
"""Pseudo-field: scales each actuator's whole force (gain and, for servos, the position and
velocity bias terms together), which ``actuator_gain`` alone would not for a PD servo."""


@dataclass
class ConditionResult:
    """The evaluation of one condition."""

    name: str
    """``nominal`` or the perturbation's name."""
    mean_return: float
    """Mean undiscounted return over the episodes."""
    std_return: float
    """Standard deviation of the returns."""
    mean_length: float
    """Mean episode length in control steps."""
    threshold: float | None
    """The return this condition had to reach (``None`` for nominal)."""
    passed: bool
    """Whether it reached it (nominal always passes)."""
    description: str
    """What was changed, in words."""


def describe(p: Perturbation) -> str:
    """A perturbation in a few words (the table's second column)."""
    parts = []
    if p.timestep_scale != 1.0:
        parts.append(f"timestep x{p.timestep_scale:g}")
    if p.integrator is not None:
        parts.append(f"integrator {p.integrator}")
    parts += [f"{k} x{v:g}" for k, v in p.fields.items()]
    if p.action_delay:
        parts.append(f"action +{p.action_delay} step(s)")
    if p.obs_delay:
        parts.append(f"obs +{p.obs_delay} step(s)")
    return ", ".join(parts) or "no change"


def task_overrides(p: Perturbation, timestep: float, decimation: int) -> dict[str, Any]:
    """Task-config overrides of a perturbation: timestep and decimation (control rate kept)."""
    if p.timestep_scale == 1.0:
        return {}
    new = decimation / p.timestep_scale
    if abs(new - round(new)) > 1e-9 or round(new) < 1:
        raise ConfigError(
            f"timestep_scale: {p.timestep_scale} must divide the task's decimation {decimation} into a "
            f"whole number of substeps (got {new:g}); the control rate must not change"
        )
    return {"timestep": timestep * p.timestep_scale, "decimation": int(round(new))}


def apply_model_changes(env: BatchedEnv, p: Perturbation) -> None:
    """Write the perturbation's integrator and field factors into every world and into the
    template model, then reset every world so events and initial states see the new model.
    """
    changes: dict[str, np.ndarray] = {}
    if p.integrator is not None:
        changes["opt.integrator"] = np.asarray(INTEGRATORS[p.integrator])
    for name, factor in p.fields.items():
        if name == MOTOR_STRENGTH:
            changes["actuator_gainprm"] = env.model.actuator_gainprm.copy()
            changes["actuator_gainprm"][:, 0] *= factor
            changes["actuator_biasprm"] = env.model.actuator_biasprm.copy()
            changes["actuator_biasprm"][:, :3] *= factor
            continue
        try:
            field = resolve_field(name)
        except ValueError as exc:
            raise ConfigError(f"fields.{name}: {exc}; or {MOTOR_STRENGTH!r}") from exc
        base = _template(env.model, field)
        changes[field] = np.asarray(base * factor)
    for field, value in changes.items():
        _set_template(env.model, field, value)
        env.sim.set_model_field(field, torch.as_tensor(value).expand(env.num_envs, *np.shape(value)).clone())
    env.reset()


def _template(model: Any, field: str) -> np.ndarray:
    return np.array(getattr(model.opt, field[4:]) if field.startswith("opt.") else getattr(model, field))


def _set_template(model: Any, field: str, value: np.ndarray) -> None:
    if field.startswith("opt."):
        setattr(model.opt, field[4:], value.item() if value.ndim == 0 else value)
    else:
        getattr(model, field)[...] = value


class Latency:
    """Added latency around a policy: its observations ``obs_delay`` control steps stale and its
    actions applied ``action_delay`` steps late, per world. A world that starts a new episode sees
    its fresh observation repeated and has zero actions pending (nothing carries across episodes).
    """

    def __init__(self, act: Act, num_envs: int, action_dim: int, action_delay: int, obs_delay: int) -> None:
        """Wrap ``act`` for ``num_envs`` worlds."""
        self.act = act
        self.action_delay = int(action_delay)
        self.obs_delay = int(obs_delay)
        self._obs: list[dict[str, torch.Tensor]] = []
        self._actions = [torch.zeros(num_envs, action_dim) for _ in range(self.action_delay)]

    def start(self, obs: Mapping[str, torch.Tensor]) -> None:
        """Fill the observation window with the first observation of every world."""
        self._obs = [{k: v.clone() for k, v in obs.items()} for _ in range(self.obs_delay)]

    def __call__(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The action to apply now: chosen ``action_delay`` steps ago from an observation
        ``obs_delay`` steps old.
        """
        self._obs.append({k: v.clone() for k, v in obs.items()})
        seen = self._obs.pop(0)
        chosen = self.act(seen)
        if not self.action_delay:
            return chosen
        self._actions.append(chosen.detach().to(self._actions[0].dtype))
        return self._actions.pop(0).to(chosen.dtype)

    def restart(self, ids: torch.Tensor, obs: Mapping[str, torch.Tensor]) -> None:
        """Worlds ``ids`` began new episodes with observation ``obs``: reset their windows."""
        for frame in self._obs:
            for k, v in obs.items():
                frame[k][ids] = v[ids]
        for pending in self._actions:
            pending[ids] = 0.0


def evaluate(env: BatchedEnv, act: Act, episodes: int, seed: int, latency: tuple[int, int] = (0, 0)) -> dict[str, float]:
    """Mean/std return and mean length of the first ``episodes`` episodes (deterministic ``act``),
    with ``latency = (action_delay, obs_delay)`` control steps added around the policy.
    """
    obs, _ = env.reset(seed=seed)
    policy = Latency(act, env.num_envs, env.action_dim, *latency)
    policy.start(obs)
    returns: list[torch.Tensor] = []
    lengths: list[torch.Tensor] = []
    limit = (math.ceil(episodes / env.num_envs) + 1) * env.max_episode_length
    with torch.inference_mode():
        for _ in range(limit):
            obs, _, _, _, info = env.step(policy(obs))
            if "episode" in info:
                returns.append(info["episode"]["return"])
                lengths.append(info["episode"]["length"])
                policy.restart(info["episode"]["env_ids"], obs)
                if sum(r.numel() for r in returns) >= episodes:
                    break
    if not returns:
        raise RuntimeError(f"no episode ended within {limit} steps")
    r = torch.cat(returns)[:episodes].double()
    n = torch.cat(lengths)[:episodes].double()
    return {"mean": float(r.mean()), "std": float(r.std()) if r.numel() > 1 else 0.0, "length": float(n.mean())}


def run_gate(
    make_env: MakeEnv,
    act: Act,
    perturbations: Mapping[str, Perturbation],
    *,
    episodes: int = 16,
    seed: int = 4242,
    min_ratio: float = 0.7,
) -> list[ConditionResult]:
    """Evaluate ``act`` on the nominal task and under each perturbation; judge each against its
    threshold. Returns the nominal row first.
    """
    nominal_env = make_env({})
    base_timestep = float(nominal_env.model.opt.timestep)
    decimation = int(nominal_env.sim.decimation)
    try:
        stats = evaluate(nominal_env, act, episodes, seed)
    finally:
        nominal_env.close()
    rows = [ConditionResult("nominal", stats["mean"], stats["std"], stats["length"], None, True, "as trained")]
    for name, p in perturbations.items():
        if p.min_return is not None:
            threshold = float(p.min_return)
        else:
            ratio = min_ratio if p.min_ratio is None else p.min_ratio
            if stats["mean"] <= 0:
                raise ConfigError(
                    f"perturbations.{name}: a ratio threshold needs a positive nominal return "
                    f"(got {stats['mean']:.3g}); give min_return instead"
                )
            threshold = ratio * stats["mean"]
        env = make_env(task_overrides(p, base_timestep, decimation))
        try:
            apply_model_changes(env, p)
            got = evaluate(env, act, episodes, seed, (p.action_delay, p.obs_delay))
        finally:
            env.close()
        rows.append(
            ConditionResult(name, got["mean"], got["std"], got["length"], threshold, got["mean"] >= threshold, describe(p))
        )
    return rows


def format_table(rows: list[ConditionResult]) -> str:
    """The gate's table: condition, change, return, ratio to nominal, threshold, PASS/FAIL."""
    nominal = rows[0].mean_return
    head = ["condition", "change", "mean return", "std", "vs nominal", "threshold", "result"]
    cells = [head]
    for r in rows:
        ratio = f"{r.mean_return / nominal:.2f}" if nominal > 0 else "n/a"
        cells.append(
            [
                r.name,
                r.description,
                f"{r.mean_return:.1f}",
                f"{r.std_return:.1f}",
                ratio,
                "" if r.threshold is None else f"{r.threshold:.1f}",
                "" if r.threshold is None else ("PASS" if r.passed else "FAIL"),
            ]
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    failed = [r.name for r in rows if not r.passed]
    lines.append(f"sim2sim: {'FAIL (' + ', '.join(failed) + ')' if failed else 'PASS'}: {len(rows) - 1 - len(failed)}/{len(rows) - 1} perturbations passed")
    return "\n".join(lines)


def sim2sim_command(cfg: Sim2SimConfig) -> int:
    """Run the gate on ``cfg.run``'s latest checkpoint; print the table, write the JSON report."""
    if cfg.episodes < 1 or cfg.num_envs < 1:
        raise ConfigError(f"episodes and num_envs must be >= 1, got {cfg.episodes} and {cfg.num_envs}")
    conditions = cfg.conditions()
    policy = load_policy(cfg.run, device=cfg.device)
    train = policy.cfg

    def make_env(extra: dict[str, Any]) -> BatchedEnv:
        overrides = {**flatten_overrides(train.task_overrides), **extra}
        return robolearn.make(train.task, cfg.num_envs, seed=cfg.seed, device=cfg.device, backend=train.backend, **overrides)

    rows = run_gate(make_env, policy.act, conditions, episodes=cfg.episodes, seed=cfg.seed, min_ratio=cfg.min_ratio)
    print(format_table(rows))
    report = {
        "run": str(cfg.run),
        "task": train.task,
        "checkpoint": policy.checkpoint.name,
        "episodes": cfg.episodes,
        "seed": cfg.seed,
        "passed": all(r.passed for r in rows),
        "conditions": [asdict(r) for r in rows],
        "perturbations": {k: asdict(v) for k, v in conditions.items()},
    }
    out = Path(cfg.out) if cfg.out else Path(cfg.run) / "sim2sim.json"
    _write_json(out, report)
    print(f"report: {out}")
    return 0 if report["passed"] else 1


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
