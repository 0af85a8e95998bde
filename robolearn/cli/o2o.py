"""``robolearn train ... o2o=...``: build and run an offline-to-online run (:mod:`robolearn.runners.o2o`).

Everything that can be wrong is found before the run directory is touched: the pre-trained
checkpoint's task, observation layout and networks against this run's, the dataset's task and
sizes, and whether the pre-training learner's networks fit the online learner (a trial transfer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from robolearn.algos import registry
from robolearn.cli.build import (
    EVAL_SEED_OFFSET,
    build_agent,
    build_env,
    normalize_with,
    offline_reference,
    read_dataset,
)
from robolearn.runners.checkpoint import CheckpointError, CheckpointManager
from robolearn.runners.o2o import O2ORunner, transfer_state
from robolearn.runners.rundir import RunDirError, check_resume_spec
from robolearn.runners.train_config import TrainConfig, read_train_config, train_config_to_dict
from robolearn.utils.config import ConfigError


def load_pretrained(cfg: TrainConfig, env: Any) -> tuple[Any, Any, str]:
    """The learner saved in ``o2o.checkpoint`` (a finished offline run of this task), its run's
    reference returns (or ``None``) and its algorithm's name.

    Raises:
        ConfigError: not a run directory, another task, another observation layout, no readable
            checkpoint, or a checkpoint that does not fit its own algorithm (each names ``o2o.checkpoint``).
    """
    assert cfg.o2o is not None and cfg.o2o.checkpoint is not None
    run = Path(cfg.o2o.checkpoint)
    if not (run / "config.json").is_file():
        raise ConfigError(f"o2o.checkpoint: {run} is not a run directory (no config.json); give a finished offline run")
    try:
        saved = read_train_config(run)
    except ConfigError as exc:
        raise ConfigError(f"o2o.checkpoint: {exc}") from None
    if saved.task != cfg.task:
        raise ConfigError(f"o2o.checkpoint: {run} was trained on task {saved.task!r}, this run is on {cfg.task!r}")
    try:
        check_resume_spec(run, env.policy_spec())
    except RunDirError as exc:
        raise ConfigError(f"o2o.checkpoint: {exc}".replace(f"resume {run}: ", f"{run}: ")) from None
    try:
        found = CheckpointManager(run, keep=None).load_newest_readable(map_location=cfg.device)
    except CheckpointError as exc:
        raise ConfigError(f"o2o.checkpoint: {exc}") from None
    if found is None:
        raise ConfigError(f"o2o.checkpoint: {run} holds no checkpoint")
    path, state = found
    spec = registry.spec_of(saved.algo)
    agent = spec.build(saved.algo, env.obs_dims, env.action_dim, action_low=env.ctrl_low, action_high=env.ctrl_high,
                       device=cfg.device, seed=cfg.seed)
    try:
        agent.load_state_dict(state["agent"])
    except (KeyError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"o2o.checkpoint: {path} does not fit its run's {spec.name} learner: {_first_line(exc)}") from None
    reference = None
    summary = run / "summary.json"
    if summary.is_file():
        refs = json.loads(summary.read_text()).get("reference_returns")
        if isinstance(refs, dict):
            from robolearn.runners.offline import ReferenceReturns

            reference = ReferenceReturns(float(refs["random"]), float(refs["expert"]))
    return agent, reference, spec.name


def check_transfer(pretrained: Any, online: Any, cfg: TrainConfig) -> None:
    """Move the pre-trained learner's networks into the online learner once now (they are moved again,
    trained, after the offline phase), so a mismatch stops the run before it starts.
    """
    try:
        online.load_state_dict(transfer_state(pretrained))
    except (KeyError, RuntimeError, ValueError) as exc:
        name = type(pretrained).__name__
        raise ConfigError(
            f"o2o.pretrain: the pre-trained {name} networks do not fit algo={cfg.algo_name}: {_first_line(exc)}. "
            "Give both learners the same actor_hidden, critic_hidden, num_critics and layer_norm"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def train_o2o(cfg: TrainConfig) -> dict[str, Any]:
    """Offline phase, warm-up and online fine-tuning in one run directory; returns the summary."""
    o2o = cfg.o2o
    assert o2o is not None
    try:
        env = build_env(cfg, cfg.num_envs, cfg.seed)
    except ValueError as exc:  # an unknown task or task override: the registry names the choices
        raise ConfigError(str(exc)) from exc
    eval_env = None
    try:
        eval_env = build_env(cfg, max(cfg.eval_num_envs, 1), cfg.seed + EVAL_SEED_OFFSET, evaluation=True)
        online = build_agent(cfg, env)
        pretrained, reference = None, None
        if o2o.checkpoint is not None:
            pretrained, reference, saved_algo = load_pretrained(cfg, env)
            if saved_algo == registry.spec_of(cfg.algo).name:
                online.load_state_dict(pretrained.state_dict())  # the same learner carries on
                pretrained = None
        elif o2o.pretrain is not None:
            pretrained = registry.spec_of(o2o.pretrain).build(
                o2o.pretrain, env.obs_dims, env.action_dim, action_low=env.ctrl_low, action_high=env.ctrl_high,
                device=cfg.device, seed=cfg.seed,
            )
        if pretrained is not None:
            check_transfer(pretrained, online, cfg)
        dataset = None
        if cfg.total_grad_steps or o2o.offline_ratio > 0:
            dataset = read_dataset(cfg, eval_env)
            reference = offline_reference(cfg, dataset) or reference
            learner = pretrained if pretrained is not None else online
            if cfg.total_grad_steps and cfg.normalize_obs and hasattr(learner, "set_obs_normalization"):
                normalize_with(learner, dataset, eval_env.obs_dims)
        runner = O2ORunner(
            env,
            online,
            cfg.runner,
            cfg.run_dir,
            o2o=o2o,
            eval_env=eval_env,
            pretrained=pretrained,
            dataset=dataset,
            offline_grad_steps=int(cfg.total_grad_steps or 0),
            seed=cfg.seed,
            gamma=float(getattr(cfg.algo, "gamma", 0.99)),
            reference=reference,
            config=train_config_to_dict(cfg),
            pretrained_start=o2o.checkpoint is not None,
        )
        del dataset, pretrained  # the runner holds them as long as its phases need them
        source = o2o.checkpoint or (f"{cfg.dataset}" if cfg.total_grad_steps else "scratch")
        print(f"{'resuming' if cfg.resume else 'training'} {cfg.algo_name} offline-to-online on {cfg.task} "
              f"(from {source}) in {cfg.run_dir}")
        summary = runner.learn(resume=cfg.resume is not None)
    finally:
        env.close()
        if eval_env is not None:
            eval_env.close()
    parts = [f"{name} {summary[key]:.1f}" for name, key in (("offline", "offline_score"), ("after warm-up", "warmup_score"))
             if key in summary]
    print(
        f"done: {summary['offline_grad_steps']} offline gradient steps, {summary['env_steps']} env steps in "
        f"{summary['wall_time_s']:.1f} s; eval return " + ", ".join([*parts, f"final {summary['final_online_score']:.1f}"])
        + f" ({cfg.run_dir})"
    )
    return summary


__all__ = ["check_transfer", "load_pretrained", "train_o2o"]
