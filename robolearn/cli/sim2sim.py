"""``robolearn sim2sim run=<dir>``: the check before hardware.

A policy that only works in the simulator it was trained in will not work on a robot. The gate
evaluates a trained policy on its task as trained (the nominal condition) and under perturbations
it never saw: another physics timestep or integrator, model parameters scaled beyond the training
ranges, and added latency. Each perturbation passes when its mean return reaches a threshold
(a fraction of the nominal return, or an absolute return); the command prints a pass/fail table,
writes ``<run>/sim2sim.json`` and exits with status 1 when anything fails.

Each perturbation means what the randomisation module means by it (one definition each):

* field factors and ``motor_strength`` are :mod:`robolearn.sim2real.randomization.perturbations`:
  ``randomize_field``'s scaling and ``randomize_motor_strength``'s force scaling with one fixed
  value, under the same checks (a negative mass or strength is refused);
* added latency is the env's own :class:`~robolearn.sim2real.randomization.latency.ActionDelay`
  and :class:`~robolearn.sim2real.randomization.latency.ObservationDelay` (on every deployable
  observation group), set through the task config and added to the task's own lags.

Every perturbation is checked against the task's model before the first rollout. Every condition
is evaluated by the one rollout loop (:func:`robolearn.runners.rollout.rollout`) with the same
seed, so the worlds start from the same states and the difference between rows is the
perturbation's. Perturbed model fields are written into the template model too, so a task's own
randomisation events (which draw around the template's values) compose with the perturbation
instead of undoing it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

import robolearn
from robolearn.cli.build import flatten_overrides, load_policy
from robolearn.cli.config import INTEGRATORS, ConfigError, Perturbation, Sim2SimConfig
from robolearn.envs import BatchedEnv, TaskCfg
from robolearn.runners.rollout import rollout
from robolearn.sim2real.randomization.latency import ActionDelay, ObservationDelay
from robolearn.sim2real.randomization.perturbations import check_model_shift, shift_model
from robolearn.types import DEPLOYABLE_GROUPS

Act = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]
"""A policy: observation groups ``[N, ...]`` to actions ``[N, A]``."""
MakeEnv = Callable[[dict[str, Any]], BatchedEnv]
"""Builds the task's env with extra task-config overrides (``timestep``, ``decimation``, delays ...)."""


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
    """Task-config overrides of a perturbation's timestep: timestep and decimation (control rate kept)."""
    if p.timestep_scale == 1.0:
        return {}
    new = decimation / p.timestep_scale
    if abs(new - round(new)) > 1e-9 or round(new) < 1:
        raise ConfigError(
            f"timestep_scale: {p.timestep_scale} must divide the task's decimation {decimation} into a "
            f"whole number of substeps (got {new:g}); the control rate must not change"
        )
    return {"timestep": timestep * p.timestep_scale, "decimation": int(round(new))}


def latency_overrides(p: Perturbation, cfg: TaskCfg) -> dict[str, Any]:
    """Task-config overrides that add the perturbation's latency to the task's own latency models.

    ``action_delay = k`` shifts the task's :class:`ActionDelay` lag range by ``k`` control steps
    (``(k, k)`` if it has none); ``obs_delay = k`` does the same to the :class:`ObservationDelay`
    of every deployable observation group (what the policy reads), keeping its jitter and holds.
    A world that starts an episode has no action pending and sees its fresh observation, as with
    the task's own delays.
    """
    out: dict[str, Any] = {}
    if p.action_delay:
        own = cfg.action_delay
        if own is not None and not isinstance(own, ActionDelay):
            raise ConfigError(f"action_delay: the task's action delay is a {type(own).__name__}, not an ActionDelay; "
                              "the gate cannot add steps to it")
        lo, hi = own.lag_range if own is not None else (0, 0)
        out["action_delay"] = ActionDelay(lag_range=(lo + p.action_delay, hi + p.action_delay))
    if p.obs_delay:
        for group in DEPLOYABLE_GROUPS:
            if group not in cfg.observations:
                continue
            own_obs = cfg.observations[group].delay
            if own_obs is None:
                own_obs = ObservationDelay()
            elif not isinstance(own_obs, ObservationDelay):
                raise ConfigError(f"obs_delay: observations.{group}.delay is a {type(own_obs).__name__}, not an "
                                  "ObservationDelay; the gate cannot add steps to it")
            lo, hi = own_obs.lag_range
            out[f"observations__{group}__delay"] = ObservationDelay(
                lag_range=(lo + p.obs_delay, hi + p.obs_delay), jitter=own_obs.jitter, hold_prob=own_obs.hold_prob
            )
    return out


def condition_overrides(name: str, p: Perturbation, nominal: BatchedEnv) -> dict[str, Any]:
    """Check perturbation ``name`` against the nominal env (timestep, model fields, latency models)
    and return the task-config overrides of its env; errors name ``perturbations.<name>.<field>``.
    """
    try:
        check_model_shift(nominal.model, p.fields, f"perturbations.{name}.fields")
        return {
            **task_overrides(p, float(nominal.model.opt.timestep), int(nominal.sim.decimation)),
            **latency_overrides(p, nominal.cfg),
        }
    except ValueError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith("perturbations.") else f"perturbations.{name}.{message}") from None


def apply_model_changes(env: BatchedEnv, p: Perturbation, name: str = "") -> None:
    """Write the perturbation's field factors and integrator into every world and the template
    model, rebuild the env's events around the new template and reset every world.
    """
    integrator = None if p.integrator is None else INTEGRATORS[p.integrator]
    try:
        shift_model(env, p.fields, f"perturbations.{name}.fields" if name else "fields", integrator)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def evaluate(env: BatchedEnv, act: Act, episodes: int, seed: int) -> dict[str, float]:
    """Mean and spread of the return and mean length of the first ``episodes`` episodes of the
    deterministic ``act`` (the one rollout loop), from a reset with ``seed``.
    """
    result = rollout(env, act, episodes=episodes, seed=seed)
    if result.num_episodes == 0:
        raise RuntimeError(f"no episode ended within {result.steps} steps")
    stats = result.summary()
    return {"mean": stats["return"], "std": stats["return_std"], "length": stats["episode_length"]}


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
    threshold. Every perturbation is checked before the first rollout. Returns the nominal row first.
    """
    nominal_env = make_env({})
    try:
        overrides = {name: condition_overrides(name, p, nominal_env) for name, p in perturbations.items()}
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
        env = make_env(overrides[name])
        try:
            apply_model_changes(env, p, name)
            got = evaluate(env, act, episodes, seed)
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
