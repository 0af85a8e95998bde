"""Privileged observations: simulator-only values stay out of deployable groups unless a task says so,
every drawn value reaches the privileged group and ``info``, and event configs are validated up front.
"""

from __future__ import annotations

import pytest
import torch

import robolearn
from robolearn.envs import BatchedEnv, EventTerm, ObsGroup, ObsTerm, mdp, task_cfg
from robolearn.envs.managers import is_privileged
from robolearn.types import DEPLOYABLE_GROUPS, assert_reads


class _DrawFriction:
    """A minimal randomisation event as a class term: checked when built, a friction scale per
    world recorded as drawn at each firing."""

    def __init__(self, env: BatchedEnv, *, low: float, high: float, where: str = "draw_friction", mode: str | None = None) -> None:
        if low > high:
            raise ValueError(f"{where}.low: {low} > high {high}")
        self.low, self.high = low, high

    def __call__(self, env: BatchedEnv, env_ids: torch.Tensor) -> None:
        env.record_drawn("friction_scale", env_ids, env.draw_uniform(env_ids, 1, self.low, self.high))


def _cfg(**policy_extra: ObsTerm):
    cfg = task_cfg("Cartpole-Balance")
    cfg.events["friction"] = EventTerm(_DrawFriction, mode="reset", params={"low": 0.5, "high": 1.5})
    cfg.observations["privileged"] = ObsGroup(
        {"drawn": ObsTerm(mdp.drawn), "state": ObsTerm(mdp.true_state)}, enable_noise=False
    )
    cfg.observations["policy"].terms.update(policy_extra)
    return cfg


def test_privileged_term_in_policy_group_is_refused_unless_allowed():
    for term in (ObsTerm(mdp.drawn), ObsTerm(mdp.true_state), ObsTerm(mdp.qpos, privileged=True)):
        with pytest.raises(ValueError, match=r"observations\.policy: privileged term\(s\) leak"):
            BatchedEnv(_cfg(leak=term), 2, seed=0)
    cfg = _cfg(leak=ObsTerm(mdp.true_state))
    cfg.observations["policy"].allow_privileged = True
    env = BatchedEnv(cfg, 2, seed=0)  # the explicit exception builds
    assert env.obs_dims["policy"] == 5 + 4


def test_no_registered_task_leaks_privileged_terms_into_deployable_groups():
    # Ant and Humanoid observe contact forces in their policy group, as Gymnasium does, and say so.
    allowed = {"Ant", "Humanoid"}
    for task_id in robolearn.list_tasks():
        cfg = task_cfg(task_id)
        for gname in DEPLOYABLE_GROUPS:
            group = cfg.observations.get(gname)
            if group is None:
                continue
            leaked = [t for t, term in group.terms.items() if is_privileged(term)]
            if leaked:
                assert task_id in allowed and group.allow_privileged, (task_id, gname, leaked)


def test_drawn_values_reach_privileged_group_critic_and_info():
    env = BatchedEnv(_cfg(), 4, seed=1, dtype=torch.float64)
    scale = env.drawn["friction_scale"][:, 0].clone()
    assert ((0.5 <= scale) & (scale <= 1.5)).all() and scale.unique().numel() == 4
    obs = env.obs
    assert env.obs_dims["privileged"] == 1 + env.model.nq + env.model.nv
    torch.testing.assert_close(obs["privileged"][:, 0], scale)
    torch.testing.assert_close(obs["critic"][:, -(1 + 4)], scale)  # critic = policy + privileged
    # Worlds that end redraw; info carries the values each world ran the step under.
    env.episode_length[:2] = env.max_episode_length - 1
    _, _, _, truncated, info = env.step(torch.zeros(4, 1))
    assert truncated[:2].all() and not truncated[2:].any()
    torch.testing.assert_close(info["drawn"]["friction_scale"][:, 0], scale)
    after = env.drawn["friction_scale"][:, 0]
    assert (after[:2] != scale[:2]).all() and (after[2:] == scale[2:]).all()
    torch.testing.assert_close(env.obs["privileged"][:, 0], after)


def test_drawn_values_survive_state_dict():
    env = BatchedEnv(_cfg(), 3, seed=2)
    saved = env.state_dict()
    other = BatchedEnv(_cfg(), 3, seed=9)
    other.load_state_dict(saved)
    torch.testing.assert_close(other.drawn["friction_scale"], env.drawn["friction_scale"])


def test_event_parameters_are_validated_before_anything_runs():
    cfg = _cfg()
    cfg.events["friction"].params = {"low": 2.0, "high": 1.0}
    with pytest.raises(ValueError, match=r"events\.friction\.low: 2.0 > high 1.0"):
        BatchedEnv(cfg, 2, seed=0)


def test_assert_reads_names_the_consumer_and_the_groups():
    assert_reads("actor", ["policy"], allowed=["policy", "history"])
    with pytest.raises(ValueError, match=r"exported policy: reads observation group\(s\) \['privileged'\]"):
        assert_reads("exported policy", ["policy", "privileged"])


def test_export_refuses_a_policy_that_reads_a_privileged_group(tmp_path):
    from robolearn.export import export_policy

    with pytest.raises(ValueError, match=r"exported policy: reads observation group\(s\) \['critic'\]"):
        export_policy(torch.nn.Linear(3, 1), {"observations": {"critic": {"shape": [3]}}}, tmp_path, obs_group="critic")
