"""``robolearn data build``: D4RL-style datasets (random, medium, medium-replay, expert,
medium-expert) from behaviour policies trained here, resumable step by step.

For each task: train an expert and a medium run of an off-policy learner (a run with a
``summary.json`` is finished and kept; one with checkpoints resumes); roll out a uniform random
policy, the medium policy and the expert policy (with a little action noise, as D4RL's stochastic
SAC policies) into whole-episode datasets; take medium-replay from the medium run's replay buffer
(its whole training history); and join medium and expert into medium-expert. The random and
expert datasets' mean episode returns become the reference returns of every dataset of the task.
A dataset file that exists is kept, so an interrupted build picks up where it stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import robolearn
from robolearn.cli.build import flatten_overrides, load_policy
from robolearn.cli.config import ConfigError, RecipeConfig
from robolearn.data import Dataset, DatasetMetadata
from robolearn.runners import CheckpointManager
from robolearn.runners.collect import collect_episodes, noisy_policy, replay_episodes, uniform_policy

log = logging.getLogger(__name__)

TrainJob = Callable[[list[str]], object]
"""Runs one training job from ``key=value`` overrides (``robolearn.cli.commands.train_job``).

Handed in by the command rather than imported, so this module does not import the command
module that imports it (no cycle)."""


def _train(run: Path, task: str, steps: int, cfg: RecipeConfig, train_job: TrainJob) -> None:
    """Train (or resume, or keep) one behaviour run."""
    if (run / "summary.json").is_file():
        print(f"kept finished run {run}")
        return
    if CheckpointManager(run, keep=None).latest() is not None:
        train_job([f"resume={run}", f"total_env_steps={steps}"])
        return
    train_job([f"algo={cfg.algo}", f"task={task}", f"total_env_steps={steps}", f"seed={cfg.seed}", f"run_dir={run}", *cfg.train_overrides])


def _episodes_of(run: Path, task: str, cfg: RecipeConfig, which: str) -> list[dict[str, Any]]:
    """Rollouts of the random policy or of a run's policy with the recipe's action noise, on the
    task as the run trained on it (its task overrides).
    """
    policy = load_policy(run)
    seed = cfg.seed + {"random": 1, "medium": 2, "expert": 3}[which]
    env = robolearn.make(task, cfg.num_envs, seed=seed, **flatten_overrides(policy.cfg.task_overrides))
    gen = torch.Generator().manual_seed(cfg.seed)
    low, high = env.ctrl_low.double(), env.ctrl_high.double()
    if which == "random":
        act = uniform_policy(low, high, gen)
    else:
        act = noisy_policy(policy.act, low, high, cfg.expert_noise, gen)
    try:
        return collect_episodes(env, act, transitions=cfg.transitions, seed=cfg.seed)
    finally:
        env.close()


def _returns(episodes: list[dict[str, Any]]) -> float:
    return float(torch.stack([torch.as_tensor(e["rewards"]).double().sum() for e in episodes]).mean())


def build_task(task: str, cfg: RecipeConfig, train_job: TrainJob) -> dict[str, Path]:
    """Build (or keep) every requested dataset of ``task`` (behaviour runs trained with ``train_job``); return their paths."""
    folder = Path(cfg.root) / task
    runs = {"expert": folder / "runs" / "expert", "medium": folder / "runs" / "medium"}
    wanted = set(cfg.datasets)
    if "diverse" in wanted:
        raise ConfigError(f"datasets: 'diverse' is a maze dataset (PointMaze-*), not one of {task}'s; remove it")
    needs = {"expert": wanted & {"expert", "medium-expert"} or {"expert"}, "medium": wanted - {"random", "expert"}}
    _train(runs["expert"], task, cfg.expert_env_steps, cfg, train_job)  # always: its return is the reference
    if needs["medium"]:
        _train(runs["medium"], task, cfg.medium_env_steps, cfg, train_job)
    paths = {name: folder / f"{name}.h5" for name in (*cfg.datasets, "random", "expert")}
    # The references first: they come from the random and expert rollouts (built even if unrequested).
    episodes: dict[str, list[dict[str, Any]]] = {}
    for name in ("random", "expert"):
        if paths[name].is_file():
            ds = Dataset.load(paths[name])
            episodes[name] = []
            ref = float(ds.episode_returns().mean())
        else:
            episodes[name] = _episodes_of(runs["expert"], task, cfg, name)  # "random" reads only its task
            ref = _returns(episodes[name])
        episodes[f"{name}_ref"] = ref  # type: ignore[assignment]
    refs = (float(episodes["random_ref"]), float(episodes["expert_ref"]))  # type: ignore[arg-type]

    def write(name: str, eps: list[dict[str, Any]], collection: str) -> None:
        meta = DatasetMetadata(task_id=task, collection=collection, ref_random_return=refs[0], ref_expert_return=refs[1],
                               extra={"recipe": "d4rl_style", "seed": cfg.seed, "mean_return": _returns(eps)})
        ds = Dataset.from_episodes(eps, meta)
        ds.save(paths[name])
        print(f"wrote {paths[name]}: {len(ds)} transitions, {ds.num_episodes} episodes, mean return {_returns(eps):.1f}")

    for name in ("random", "expert"):
        if not paths[name].is_file():
            write(name, episodes[name], name if name == "random" else f"{cfg.algo}-expert-noise{cfg.expert_noise:g}")
    if "medium" in wanted and not paths["medium"].is_file():
        write("medium", _episodes_of(runs["medium"], task, cfg, "medium"), f"{cfg.algo}-medium-noise{cfg.expert_noise:g}")
    if "medium-replay" in wanted and not paths["medium-replay"].is_file():
        state = CheckpointManager(runs["medium"], keep=None).load_latest(map_location="cpu")  # newest readable
        if state is None:
            raise FileNotFoundError(f"medium-replay: no checkpoint in {runs['medium'] / 'checkpoints'}")
        from robolearn.data.replay import ReplayBuffer

        replay = ReplayBuffer(int(state["agent"]["replay"]["capacity"]))
        replay.load_state_dict(state["agent"]["replay"])
        num_envs = int(state["env"]["episode_length"].shape[0])
        eps = replay_episodes(replay, num_envs)
        for ep in eps:  # keep the deployable group only, as the rollout datasets do
            ep["observations"] = {g: v for g, v in ep["observations"].items() if g == "policy"}
        write("medium-replay", eps, f"{cfg.algo}-medium-replay")
    if "medium-expert" in wanted and not paths["medium-expert"].is_file():
        joined = [Dataset.load(paths["medium"]), Dataset.load(paths["expert"])]
        eps = [d.episode(i) for d in joined for i in range(d.num_episodes)]
        write("medium-expert", eps, "medium-expert")
    return {name: paths[name] for name in cfg.datasets}


MAZE_DATASETS: tuple[str, ...] = ("random", "expert", "diverse")
"""The datasets of a maze task (``PointMaze-*``): uniform random actions, the waypoint planner to the
goal, and the planner wandering to random cells (D4RL's maze2d / AntMaze "diverse")."""


def build_maze_task(task: str, cfg: RecipeConfig) -> dict[str, Path]:
    """A maze task's datasets from the noisy waypoint planner (no training): ``random``, ``expert``
    (to the goal; its mean return is the expert reference) and ``diverse`` (to random cells, with the
    task's own goal reward). Each dataset's metadata has its success rate (last state inside the goal).
    """
    from robolearn.tasks.navigation.planner import make_planner
    from robolearn.tasks.navigation.point_maze import GOAL_RADIUS, maze

    layout = task.split("-")[1]
    m = maze(layout)
    folder = Path(cfg.root) / task
    wanted = [d for d in cfg.datasets if d in MAZE_DATASETS] or list(MAZE_DATASETS)
    paths = {name: folder / f"{name}.h5" for name in MAZE_DATASETS}

    def episodes_of(which: str) -> list[dict[str, Any]]:
        env = robolearn.make(task, cfg.num_envs, seed=cfg.seed + {"random": 1, "expert": 3, "diverse": 4}[which])
        gen = torch.Generator().manual_seed(cfg.seed)
        if which == "random":
            from robolearn.runners.collect import uniform_policy

            act = uniform_policy(env.ctrl_low.double(), env.ctrl_high.double(), gen)
        else:
            act = make_planner(layout, m, cfg.num_envs, noise=cfg.expert_noise, diverse=which == "diverse", generator=gen)
        try:
            return collect_episodes(env, act, transitions=cfg.transitions, seed=cfg.seed)
        finally:
            env.close()

    def success(eps: list[dict[str, Any]]) -> float:
        last = torch.stack([e["observations"]["policy"][-1].double() for e in eps])
        return float((torch.linalg.vector_norm(last[:, :2] - last[:, 4:6], dim=1) < GOAL_RADIUS).double().mean())

    episodes: dict[str, list[dict[str, Any]]] = {}
    refs: dict[str, float] = {}
    for name in ("random", "expert"):  # the references, built even if unrequested
        if paths[name].is_file():
            refs[name] = float(Dataset.load(paths[name]).episode_returns().mean())
        else:
            episodes[name] = episodes_of(name)
            refs[name] = _returns(episodes[name])
    for name in MAZE_DATASETS:
        if paths[name].is_file() or (name not in wanted and name not in episodes):
            continue
        eps = episodes.get(name) or episodes_of(name)
        meta = DatasetMetadata(task_id=task, collection=f"waypoint-planner-{name}" if name != "random" else "random",
                               ref_random_return=refs["random"], ref_expert_return=refs["expert"],
                               extra={"recipe": "maze", "seed": cfg.seed, "mean_return": _returns(eps),
                                      "success_rate": success(eps), "noise": cfg.expert_noise})
        ds = Dataset.from_episodes(eps, meta)
        ds.save(paths[name])
        print(f"wrote {paths[name]}: {len(ds)} transitions, {ds.num_episodes} episodes, mean return "
              f"{_returns(eps):.1f}, success rate {success(eps):.2f}")
    return {name: paths[name] for name in wanted}


def build_command(cfg: RecipeConfig, train_job: TrainJob) -> dict[str, dict[str, Path]]:
    """Build every task's datasets, training the behaviour runs with ``train_job`` (maze tasks need none)."""
    return {task: build_maze_task(task, cfg) if task.startswith("PointMaze-") else build_task(task, cfg, train_job)
            for task in cfg.tasks}
