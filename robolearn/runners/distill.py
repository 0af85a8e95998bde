"""The distillation runner: a trained privileged teacher teaches a student on deployable observations.

The loop is the on-policy runner's (collect ``num_steps`` per world with ``agent.act``, step,
``agent.process``, then ``agent.compute_returns`` and a guarded ``agent.update``); what this runner
adds is the teacher: it loads a trained run (any registered algorithm whose actor or critic reads
``critic``/``privileged``), checks that it fits the env and that the student reads deployable
groups only, and hands the student the teacher's deterministic action and a copy of its critic
(rsl_rl's distillation runner is the same idea: the on-policy loop with a teacher-student learner).

The student's run directory is an ordinary run: ``config.json`` (``algo.name: distill``, with the
teacher's run directory), ``policy_spec.json``, ``metrics.csv``, checkpoints holding only the
student (and a fine-tuned critic copy): ``robolearn export``, ``robolearn eval`` and
:func:`robolearn.load_policy` read it without the teacher. Resuming needs the teacher run again; the
checkpoint records which teacher checkpoint was used, and a different one is refused.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robolearn.runners.on_policy import OnPolicyRunner
from robolearn.runners.policy import LoadedPolicy, load_policy
from robolearn.runners.rollout import rollout
from robolearn.runners.runner_config import RunnerConfig
from robolearn.types import DEPLOYABLE_GROUPS, assert_reads

log = logging.getLogger(__name__)


class TeacherError(ValueError):
    """The teacher run cannot teach this student in this env (its groups, sizes or critic)."""


def load_teacher(run_dir: str | os.PathLike[str], device: str = "cpu") -> LoadedPolicy:
    """A trained run as a teacher (:func:`load_policy`: ``config.json``, ``policy_spec.json`` and the
    newest readable checkpoint), with its networks frozen.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run (no config, spec or checkpoint).
        ConfigError, CheckpointError: the run cannot be read (the file is named).
    """
    if not Path(run_dir, "config.json").is_file():
        raise FileNotFoundError(f"algo.teacher: {run_dir} is not a run directory (no config.json)")
    teacher = load_policy(run_dir, device=device)
    for p in teacher.agent.parameters():
        if isinstance(p, nn.Parameter):
            p.requires_grad_(False)
    return teacher


def teacher_groups(agent: Any) -> list[str]:
    """The observation groups a teacher agent reads (its actor's and its critic's)."""
    groups = [getattr(agent, "actor_group", None), getattr(agent, "critic_group", None)]
    return [g for g in dict.fromkeys(groups) if g is not None]


def teacher_critic(agent: Any) -> tuple[nn.Module | None, str | None, str | None]:
    """A copy of a teacher's critic, its kind (``value`` or ``q``) and the group it reads.

    A learner with a state-value verb (``evaluate(obs) -> V``, the on-policy learners) gives its
    normaliser and critic as one module ``obs -> V``; a learner with a critic ensemble
    ``critic(obs, action) -> Q[E, N]`` (the off-policy learners) gives that ensemble. The copy is what
    the student uses: the teacher run's own weights stay untouched whatever the student does.
    """
    critic, group = getattr(agent, "critic", None), getattr(agent, "critic_group", None)
    if not isinstance(critic, nn.Module) or group is None:
        return None, None, None
    if getattr(agent, "critic_memory", None) is not None:
        raise TeacherError("mode=aacd: the teacher's critic is recurrent, and the student's updates query it on "
                           "single states; distil a recurrent teacher with mode=dagger")
    if callable(getattr(agent, "evaluate", None)):
        normalizer = getattr(agent, "critic_normalizer", nn.Identity())
        return nn.Sequential(copy.deepcopy(normalizer), copy.deepcopy(critic)), "value", group
    return copy.deepcopy(critic), "q", group


def check_teacher(agent: Any, spec: dict[str, Any], obs_dims: dict[str, int], action_dim: int, task: str | None,
                  where: str) -> None:
    """Refuse a teacher that does not fit the env: a group it reads missing or of another size, or
    another action size; warn when it reads nothing privileged, or was trained on another task.

    Raises:
        TeacherError: naming the teacher run, the group or size and what the env has.
    """
    observations = spec.get("observations", {})
    for group in teacher_groups(agent):
        if group not in obs_dims:
            raise TeacherError(f"algo.teacher={where}: the teacher reads group {group!r}, which this env does not have "
                               f"(groups: {sorted(obs_dims)})")
        shape = observations.get(group, {}).get("shape")
        size = int(torch.tensor(shape).prod()) if shape else None
        if size is not None and size != int(obs_dims[group]):
            raise TeacherError(f"algo.teacher={where}: the teacher's {group!r} group has {size} features, this env's "
                               f"has {obs_dims[group]}: was it trained on another task?")
    teacher_actions = spec.get("action_dim")
    if teacher_actions is not None and int(teacher_actions) != int(action_dim):
        raise TeacherError(f"algo.teacher={where}: the teacher acts in {teacher_actions} dimensions, this env in {action_dim}")
    if task is not None and spec.get("task_id") not in (None, task):
        log.warning("algo.teacher=%s was trained on %s; the student learns on %s", where, spec.get("task_id"), task)
    if all(g in DEPLOYABLE_GROUPS for g in teacher_groups(agent)):
        log.warning("algo.teacher=%s reads only deployable groups %s: it has no privileged knowledge to pass on",
                    where, teacher_groups(agent))


class DistillRunner(OnPolicyRunner):
    """Trains a distillation student (``algo=distill``) against a teacher and writes a run directory."""

    def __init__(
        self,
        env: Any,
        agent: Any,
        cfg: RunnerConfig,
        run_dir: str | os.PathLike[str],
        *,
        teacher: LoadedPolicy,
        eval_env: Any | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Check the student and the teacher against the env, then hand the student its teacher.

        Nothing is written here (the run directory is opened by :meth:`learn`).

        Raises:
            ValueError: the student reads a privileged group (named), or AACD without a usable critic.
            TeacherError: the teacher does not fit the env.
        """
        assert_reads(f"distillation student (algo.student_obs_group={agent.group!r})", [agent.group])
        self.teacher = teacher
        self.teacher_run = str((config or {}).get("algo", {}).get("teacher") or teacher.cfg.run_dir)
        check_teacher(teacher.agent, teacher.spec, dict(env.obs_dims), int(env.action_dim),
                      getattr(env, "task_id", None), self.teacher_run)
        critic, kind, group = teacher_critic(teacher.agent) if agent.cfg.mode == "aacd" else (None, None, None)
        if agent.cfg.mode == "aacd" and critic is None:
            raise TeacherError(f"algo.teacher={self.teacher_run}: mode=aacd needs a teacher with a critic (a PPO or "
                               f"SAC run); this one has none: use mode=dagger")
        agent.attach_teacher(teacher.act, critic, kind, group, reset=getattr(teacher.agent, "reset", None))
        super().__init__(env, agent, cfg, run_dir, eval_env=eval_env, config=config)

    def state_dict(self, session_start: float | None = None) -> dict[str, Any]:
        """The on-policy runner's state and which teacher checkpoint taught the student."""
        state = super().state_dict(session_start)
        state["teacher"] = {"run": self.teacher_run, "checkpoint": self.teacher.checkpoint.name}
        return state

    def _load_state(self, state: dict[str, Any]) -> None:
        """Refuse to resume with another teacher checkpoint than the one the run started with."""
        taught = state.get("teacher", {}).get("checkpoint")
        if taught is not None and taught != self.teacher.checkpoint.name:
            raise ValueError(f"the student was taught by {taught} of {self.teacher_run}, whose newest checkpoint is "
                             f"now {self.teacher.checkpoint.name}")
        super()._load_state(state)

    def _summary(self, session_start: float) -> dict[str, Any]:
        """The run's summary, plus the teacher and (once evaluated) its return on the same eval worlds."""
        out = super()._summary(session_start)
        out["teacher_run"] = self.teacher_run
        out["teacher_checkpoint"] = self.teacher.checkpoint.name
        if getattr(self, "_teacher_eval", None) is not None:
            out["teacher_eval_return"] = self._teacher_eval
            if self._teacher_eval:
                out["student_teacher_ratio"] = self.last_eval / self._teacher_eval
        return out

    def _finish(self, session_start: float) -> dict[str, Any]:
        """Evaluate the teacher on the student's eval worlds (same seed, same episodes), then finish."""
        self._teacher_eval: float | None = None
        if self.eval_env is not None:
            result = rollout(self.eval_env, self.teacher.act, seed=self.eval_env.seed, max_steps=self.cfg.eval_steps,
                             inference=False)
            self._teacher_eval = result.summary()["return"]
        return super()._finish(session_start)


__all__ = ["DistillRunner", "TeacherError", "check_teacher", "load_teacher", "teacher_critic", "teacher_groups"]
