"""The curriculum manager (robolearn.envs.curriculum): terms move what they name in the configured
direction, at the hand-computed values, before the new episodes start; everything they hold is
checkpointed; the ALP-GMM teacher's EM, its preference for learning progress and its seeding;
errors naming the field.
"""

from __future__ import annotations

import csv
import io
import math

import mujoco
import numpy as np
import pytest
import torch

import robolearn
from robolearn.assets import asset_path
from robolearn.envs import (
    ActionTerm,
    BatchedEnv,
    CurriculumTerm,
    InitialState,
    ObsGroup,
    ObsTerm,
    RewardTerm,
    TaskCfg,
    mdp,
)
from robolearn.envs.curriculum import (
    AlpGmm,
    Levels,
    PerformanceGate,
    Schedule,
    fit_gmm,
    read_address,
    select_gmm,
    world_values,
    write_address,
)

N = 4


# -- a tiny task on the cart-pole model, with terms the tests control ----------------------------
def probe(env: BatchedEnv, value: float | torch.Tensor = 1.0) -> torch.Tensor:
    """A reward of ``value`` per step in every world (a number, or one per world)."""
    return torch.as_tensor(value, dtype=torch.float64, device=env.device).expand(env.num_envs).clone()


def cart_at(env: BatchedEnv, env_ids: torch.Tensor, spread: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Reset the cart to x = ``spread`` (the pole upright, at rest): the new episode shows the value."""
    qpos = torch.zeros(env_ids.numel(), 2, dtype=torch.float64, device=env.device)
    qpos[:, 0] = spread
    return qpos, torch.zeros_like(qpos)


def goal_obs(env: BatchedEnv) -> torch.Tensor:
    """The task parameter ``goal`` as an observation (a task term reading env.task_params)."""
    return world_values(env, "goal")


def tiny_cfg(episode_length: int = 4, **curriculum: CurriculumTerm) -> TaskCfg:
    return TaskCfg(
        mjcf=asset_path("cartpole.xml"),
        episode_length=episode_length,
        observations={
            "policy": ObsGroup(
                terms={
                    "cart": ObsTerm(mdp.qpos, params={"start": 0, "stop": 1}),
                    "goal": ObsTerm(goal_obs),
                }
            )
        },
        actions={"slide": ActionTerm(clip=(-1.0, 1.0))},
        rewards={
            "probe": RewardTerm(probe, weight=1.0, params={"value": 1.0}),
            "base": RewardTerm(probe, weight=1.0, params={"value": 0.5}),
        },
        initial_state=InitialState(cart_at, params={"spread": 0.0}),
        task_params={"difficulty": 0.0, "level": 0.0, "goal": [0.5, 0.5]},
        curriculum=dict(curriculum),
    )


def zeros(env: BatchedEnv) -> torch.Tensor:
    return torch.zeros(env.num_envs, env.action_dim)


def run(env: BatchedEnv, steps: int) -> dict:
    info: dict = {}
    for _ in range(steps):
        *_, info = env.step(zeros(env))
    return info


# -- the performance gate -----------------------------------------------------------------------
def gate(**kw) -> CurriculumTerm:
    params = dict(target="task.difficulty", start=0.0, end=1.0, step=0.25, measure="reward/probe", threshold=0.8)
    return CurriculumTerm(PerformanceGate, params={**params, **kw})


def test_gate_advances_above_the_threshold_and_holds_below():
    # probe pays `value` per step; "reward/probe" is the episode sum per step of a full episode,
    # i.e. `value` itself when the episode runs its full length (no terminations here).
    env = BatchedEnv(tiny_cfg(gate=gate()), N, seed=0, nthread=1)
    assert float(env.task_params["difficulty"]) == 0.0
    info = run(env, 4)  # every world ends its first episode at step 4: measure 1.0 >= 0.8
    assert float(env.task_params["difficulty"]) == 0.25
    assert float(info["curriculum"]["gate"]) == 0.25
    run(env, 4 * 5)  # five more ends: 0.5, 0.75, 1.0, then held at the end value
    assert float(env.task_params["difficulty"]) == 1.0

    below = BatchedEnv(tiny_cfg(gate=gate()), N, seed=0, nthread=1)
    below.cfg.rewards["probe"].params["value"] = 0.7  # measure 0.7 < 0.8: never moves
    run(below, 4 * 3)
    assert float(below.task_params["difficulty"]) == 0.0


def test_gate_steps_back_below_the_lower_threshold_and_waits_for_enough_episodes():
    env = BatchedEnv(tiny_cfg(gate=gate(lower_threshold=0.3, min_episodes=2 * N)), N, seed=0, nthread=1)
    run(env, 4)  # N episodes: fewer than min_episodes, no decision yet
    assert float(env.task_params["difficulty"]) == 0.0
    run(env, 4)  # 2N episodes, mean 1.0: one step up
    assert float(env.task_params["difficulty"]) == 0.25
    run(env, 8)
    assert float(env.task_params["difficulty"]) == 0.5
    env.cfg.rewards["probe"].params["value"] = 0.5  # between the thresholds: holds
    run(env, 8)
    assert float(env.task_params["difficulty"]) == 0.5
    env.cfg.rewards["probe"].params["value"] = 0.1  # below the lower one: one step back per decision
    run(env, 16)
    assert float(env.task_params["difficulty"]) == 0.0  # and not below the start value


def test_gate_descends_when_the_end_is_below_the_start():
    env = BatchedEnv(tiny_cfg(gate=gate(start=1.0, end=0.0, step=0.4)), N, seed=0, nthread=1)
    run(env, 4)
    assert float(env.task_params["difficulty"]) == pytest.approx(0.6)
    run(env, 8)
    assert float(env.task_params["difficulty"]) == 0.0


# -- the schedule -------------------------------------------------------------------------------------
def test_schedule_hits_hand_computed_values_and_the_new_episode_uses_them():
    # Episodes of one step: every world resets every step, so the curriculum runs every step and the
    # fresh observation's cart position is the initial-state param the new episode started from.
    term = CurriculumTerm(
        Schedule, params=dict(target="initial_state.params.spread", start=0.1, end=0.5, num_steps=10, delay_steps=2)
    )
    env = BatchedEnv(tiny_cfg(episode_length=1, sched=term), N, seed=0, nthread=1)
    assert env.cfg.initial_state.params["spread"] == 0.1
    assert torch.allclose(env.obs["policy"][:, 0], torch.full((N,), 0.1))
    expected = {1: 0.1, 2: 0.1, 3: 0.14, 7: 0.3, 12: 0.5, 20: 0.5}  # 0.1 + 0.4 * clamp((s - 2) / 10, 0, 1)
    for s in range(1, 21):
        obs, _, _, _, info = env.step(zeros(env))
        assert env.common_step_counter == s
        if s in expected:
            assert env.cfg.initial_state.params["spread"] == pytest.approx(expected[s])
            assert isinstance(env.cfg.initial_state.params["spread"], float)  # a Python number stays one
            assert float(info["curriculum"]["sched"]) == pytest.approx(expected[s])
            assert torch.allclose(obs["policy"][:, 0], torch.full((N,), expected[s], dtype=obs["policy"].dtype))


def test_a_moved_param_never_reaches_another_env_of_the_same_config():
    cfg = tiny_cfg(
        episode_length=1,
        sched=CurriculumTerm(Schedule, params=dict(target="initial_state.params.spread", start=0.0, end=1.0, num_steps=2)),
    )
    a = BatchedEnv(cfg, N, seed=0, nthread=1)
    run(a, 3)
    assert a.cfg.initial_state.params["spread"] == 1.0
    assert cfg.initial_state.params["spread"] == 0.0
    assert BatchedEnv(cfg, N, seed=0, nthread=1).cfg.initial_state.params["spread"] == 0.0


# -- reward weights -------------------------------------------------------------------------------
def test_a_reward_weight_moved_by_a_term_changes_the_reward_by_the_hand_computed_amount():
    # probe (1.0 per step) starts at weight 0 (a zero-weight term the curriculum names is kept) and
    # its weight follows 2 * min(step / 4, 1); base pays 0.5 at weight 1. The reward of step s is
    # computed with the weight set where the previous step's episodes ended.
    term = CurriculumTerm(Schedule, params=dict(target="rewards.probe.weight", start=0.0, end=2.0, num_steps=4))
    cfg = tiny_cfg(episode_length=1, sched=term)
    cfg.rewards["probe"].weight = 0.0
    env = BatchedEnv(cfg, N, seed=0, nthread=1)
    assert env.reward_manager.names == ["probe", "base"]
    rewards = []
    for _ in range(6):
        _, reward, _, _, info = env.step(zeros(env))
        rewards.append(float(reward[0]))
        assert torch.equal(reward, torch.full((N,), rewards[-1], dtype=reward.dtype))
    assert rewards == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.5, 2.5])
    assert float(info["reward_terms"][0, 0]) == pytest.approx(2.0)
    # Written directly: the change of reward is the weight's change times the term's value.
    write_address(env, "rewards.probe.weight", 3.5)
    assert float(read_address(env, "rewards.probe.weight")) == 3.5
    _, reward, *_ = env.step(zeros(env))
    assert float(reward[0]) == pytest.approx(3.5 * 1.0 + 0.5)


def test_a_function_term_moves_a_reward_param_and_its_report_is_logged():
    def halve(env: BatchedEnv, env_ids: torch.Tensor, factor: float) -> float:
        value = read_address(env, "rewards.probe.params.value") * factor
        write_address(env, "rewards.probe.params.value", value)
        return value

    env = BatchedEnv(tiny_cfg(halve=CurriculumTerm(halve, params={"factor": 0.5})), N, seed=0, nthread=1)
    assert math.isnan(float(env.step(zeros(env))[4]["curriculum"]["halve"]))  # not run yet
    info = run(env, 3)  # the first episodes end at step 4
    assert float(info["curriculum"]["halve"]) == 0.5
    _, reward, *_ = env.step(zeros(env))
    assert float(reward[0]) == pytest.approx(0.5 + 0.5)


# -- per-world levels ---------------------------------------------------------------------------
def test_levels_promote_and_demote_the_right_worlds():
    term = CurriculumTerm(
        Levels,
        params=dict(target="task.level", num_levels=3, measure="reward/probe", promote_threshold=0.8,
                    demote_threshold=0.2, init_level=1),
    )
    env = BatchedEnv(tiny_cfg(levels=term), N, seed=0, nthread=1)
    assert env.task_params["level"].tolist() == [1.0, 1.0, 1.0, 1.0]
    env.cfg.rewards["probe"].params["value"] = torch.tensor([1.0, 0.5, 0.0, 1.0], dtype=torch.float64)
    info = run(env, 4)
    assert env.task_params["level"].tolist() == [2.0, 1.0, 0.0, 2.0]
    assert float(info["curriculum"]["levels"]) == pytest.approx(5.0 / 4)
    run(env, 4)  # clamped at the top and the bottom
    assert env.task_params["level"].tolist() == [2.0, 1.0, 0.0, 2.0]
    env.cfg.rewards["probe"].params["value"] = torch.tensor([0.0, 0.1, 0.9, 0.5], dtype=torch.float64)
    run(env, 4)
    assert env.task_params["level"].tolist() == [1.0, 0.0, 1.0, 2.0]


def test_levels_move_only_the_worlds_whose_episode_ended():
    term = CurriculumTerm(Levels, params=dict(target="task.level", num_levels=5, measure="length", promote_threshold=0.5))
    env = BatchedEnv(tiny_cfg(levels=term), N, seed=0, nthread=1)
    env.episode_length.copy_(torch.tensor([0, 2, 3, 1]))  # world 2 ends after one step, world 1 after two
    env.step(zeros(env))
    assert env.task_params["level"].tolist() == [0.0, 0.0, 1.0, 0.0]
    env.step(zeros(env))
    assert env.task_params["level"].tolist() == [0.0, 1.0, 1.0, 0.0]


# -- checkpoints ------------------------------------------------------------------------------------
def full_cfg() -> TaskCfg:
    return tiny_cfg(
        episode_length=5,
        sched=CurriculumTerm(Schedule, params=dict(target="initial_state.params.spread", start=0.0, end=0.3, num_steps=40)),
        gate=gate(measure="return", threshold=1.0, lower_threshold=0.2),
        levels=CurriculumTerm(Levels, params=dict(target="task.level", num_levels=4, measure="reward/probe",
                                                  promote_threshold=0.5)),
        alp=CurriculumTerm(AlpGmm, params=dict(target="task.goal", low=[0.0, -1.0], high=[1.0, 1.0], fit_every=6,
                                               measure=lambda env, ids: env.sim.qpos[ids, 1].abs())),
    )


def test_curriculum_state_is_checkpointed_and_a_resumed_env_continues_identically():
    gen = torch.Generator().manual_seed(3)
    actions = [torch.rand(N, 1, generator=gen) * 2 - 1 for _ in range(60)]
    env = BatchedEnv(full_cfg(), N, seed=7, nthread=1)
    for a in actions[:30]:
        env.step(a)
    assert env.curriculum_manager.calls["alp"].gmm is not None  # the teacher has fitted a mixture
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)  # what a checkpoint holds loads with weights_only
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    resumed = BatchedEnv(full_cfg(), N, seed=99, nthread=1)
    resumed.load_state_dict(state)
    for a in actions[30:]:
        o1, r1, te1, tr1, i1 = env.step(a)
        o2, r2, te2, tr2, i2 = resumed.step(a)
        assert torch.equal(o1["policy"], o2["policy"])
        assert torch.equal(r1, r2) and torch.equal(te1, te2) and torch.equal(tr1, tr2)
        assert {k: float(v) for k, v in i1["curriculum"].items()} == {k: float(v) for k, v in i2["curriculum"].items()}
    for k in env.task_params:
        assert torch.equal(env.task_params[k], resumed.task_params[k])
    assert env.cfg.initial_state.params == resumed.cfg.initial_state.params
    assert torch.equal(env.reward_manager.weights, resumed.reward_manager.weights)
    assert env.common_step_counter == resumed.common_step_counter == 60


def test_a_state_without_the_curriculum_is_refused():
    plain = robolearn.make("Cartpole-Balance", N, seed=0, nthread=1)
    with pytest.raises(ValueError, match="saved without curriculum"):
        BatchedEnv(full_cfg(), N, seed=0, nthread=1).load_state_dict(plain.state_dict())


# -- ALP-GMM -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_em_recovers_two_separated_clusters(covariance):
    rng = np.random.default_rng(0)
    truth = np.array([[0.2, 0.25], [0.8, 0.7]])
    x = np.concatenate([truth[0] + 0.03 * rng.standard_normal((150, 2)), truth[1] + 0.05 * rng.standard_normal((250, 2))])
    g = select_gmm(x, 4, np.random.default_rng(1), "bic", covariance)
    assert g.means.shape == (2, 2)
    order = np.argsort(g.means[:, 0])
    assert np.abs(g.means[order] - truth).max() < 0.02
    assert np.abs(g.weights[order] - [150 / 400, 250 / 400]).max() < 0.02
    # One component fits much worse: its log-likelihood is far lower.
    assert fit_gmm(x, 1, np.random.default_rng(1), covariance).log_likelihood < g.log_likelihood - 100


def teacher(env: BatchedEnv, **kw) -> AlpGmm:
    params = dict(target="task.goal", low=[0.0, 0.0], high=[1.0, 2.0], fit_every=50, epsilon=0.2)
    return AlpGmm(env, where="curriculum.alp", **{**params, **kw})


def test_alp_gmm_samples_where_performance_changes_not_where_it_is_flat():
    # A learner that improves on the left half of the box (x < 0.5) each time it practises there,
    # and scores a constant on the right half: learning progress only on the left.
    env = BatchedEnv(tiny_cfg(), N, seed=0, nthread=1)
    t = teacher(env)
    practice = 0
    drawn = []
    for _ in range(40):
        x = t.sample(25)
        left = x[:, 0] < 0.5
        perf = np.where(left, 0.0, 1.0)
        for k in np.flatnonzero(left):
            practice += 1
            perf[k] = 0.02 * practice
        t.record(x, perf)
        drawn.append(x)
    late = np.concatenate(drawn[-12:])
    share_left = float((late[:, 0] < 0.5).mean())
    assert share_left > 0.75  # uniform sampling gives 0.5; epsilon = 0.2 alone caps it near 0.9
    assert t.gmm is not None and (late >= [0.0, 0.0]).all() and (late <= [1.0, 2.0]).all()
    # The progress the teacher measured lies on the left: on the flat half only the samples whose
    # nearest earlier one was across the border show any.
    right = t.params[:, 0] >= 0.5
    assert right.any() and t.alp[right].mean() < 0.2 * t.alp[~right].mean()


def test_alp_of_an_episode_is_against_the_nearest_earlier_sample():
    env = BatchedEnv(tiny_cfg(), N, seed=0, nthread=1)
    t = teacher(env, fit_every=1000)
    t.record(np.array([[0.1, 0.2], [0.9, 1.8]]), np.array([1.0, 5.0]))
    t.record(np.array([[0.12, 0.2], [0.88, 1.8], [0.13, 0.2]]), np.array([4.0, 5.5, 0.0]))
    # first: none before -> 0; second: nearest (0.1, 0.2) -> |5 - 1|; then |4 - 1|, |5.5 - 5|, and
    # (0.13, 0.2) is nearest to (0.12, 0.2) of the same batch, recorded before it -> |0 - 4|.
    assert t.alp.tolist() == pytest.approx([0.0, 4.0, 3.0, 0.5, 4.0])


def test_alp_gmm_draws_are_reproducible_from_the_seed():
    def draws(seed: int) -> list[np.ndarray]:
        env = BatchedEnv(tiny_cfg(), N, seed=seed, nthread=1)
        t = teacher(env, fit_every=20)
        out = [env.task_params["goal"].numpy().copy()]
        for k in range(6):
            x = t.sample(10)
            t.record(x, np.sin(7 * x[:, 0]) * k)
            out.append(x)
        return out

    a, b, c = draws(3), draws(3), draws(4)
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    assert a[0].shape == (N, 2) and (a[0][:, 1] <= 2.0).all()


def test_alp_gmm_in_the_env_writes_per_world_params_the_task_reads():
    env = BatchedEnv(full_cfg(), N, seed=1, nthread=1)
    before = env.task_params["goal"].clone()
    assert before.shape == (N, 2)
    assert torch.equal(env.obs["policy"][:, 1:].double(), before.to(env.dtype).double())
    run(env, 5)  # every world's episode ends: each gets a fresh draw, seen by the new episode
    after = env.task_params["goal"]
    assert not torch.equal(after, before)
    assert torch.equal(env.obs["policy"][:, 1:], after.to(env.dtype))


# -- errors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("term", "match"),
    [
        (gate(target="task.nope"), r"curriculum\.bad\.target: unknown address 'task\.nope'.*declared: difficulty, level, goal"),
        (gate(target="rewards.nope.weight"), r"curriculum\.bad\.target: .*no reward term 'nope'.*probe, base"),
        (gate(target="initial_state.params.nope"), r"curriculum\.bad\.target: .*no param 'nope'.*spread"),
        (gate(target="observations.policy.cart"), r"curriculum\.bad\.target: unknown address .*expected 'rewards"),
        (gate(target="events.nope.params.x"), r"curriculum\.bad\.target: .*no term 'nope' in events"),
        (gate(lower_threshold=0.9), r"curriculum\.bad\.lower_threshold: expected a value <= threshold \(0\.8\), got 0\.9"),
        (gate(step=0.0), r"curriculum\.bad\.step: expected increments > 0"),
        (gate(measure="reward/nope"), r"curriculum\.bad\.measure: no reward term 'nope'"),
        (gate(measure="success"), r"curriculum\.bad\.measure: 'success' needs a task with a success term"),
        (gate(threshold=float("nan")), r"curriculum\.bad\.threshold: expected a finite number"),
        (gate(end=[1.0, 2.0]), r"curriculum\.bad: start and end must have the same shape"),
        (gate(speed=2), r"curriculum\.bad\.params: .*speed"),
        (CurriculumTerm(AlpGmm, params=dict(target="task.goal", low=[0.0, 1.0], high=[1.0, 0.5])),
         r"curriculum\.bad\.high\[1\]: expected a value > low\[1\] = 1\.0 .*got 0\.5"),
        (CurriculumTerm(AlpGmm, params=dict(target="task.goal", low=[0.0], high=[1.0])),
         r"curriculum\.bad\.target: 'task\.goal' must be declared with 1 values"),
        (CurriculumTerm(AlpGmm, params=dict(target="task.goal", low=[0, 0], high=[1, 1], epsilon=1.5)),
         r"curriculum\.bad\.epsilon: expected a probability in \[0, 1\], got 1\.5"),
        (CurriculumTerm(Levels, params=dict(target="task.level", num_levels=3, measure="length", promote_threshold=0.5,
                                            init_level=3)), r"curriculum\.bad\.init_level: expected an integer in \[0, 2\]"),
        (CurriculumTerm(Levels, params=dict(target="task.level", num_levels=3, measure="length", promote_threshold=0.5,
                                            demote_threshold=0.6)), r"curriculum\.bad\.demote_threshold: expected a value <="),
        (CurriculumTerm(Levels, params=dict(target="task.goal", num_levels=3, measure="length", promote_threshold=0.5)),
         r"curriculum\.bad\.target: 'task\.goal' must be declared as one number"),
        (CurriculumTerm(Schedule, params=dict(target="task.difficulty", start=0.0, end=1.0, num_steps=0)),
         r"curriculum\.bad\.num_steps: expected an integer >= 1, got 0"),
        (CurriculumTerm(lambda env, env_ids, k: None, params={}), r"curriculum\.bad\.params: .*'k'"),
        (CurriculumTerm("not a function"), r"curriculum\.bad\.func: expected a curriculum class or a function"),
    ],
)
def test_bad_curriculum_settings_name_the_field(term, match):
    with pytest.raises(ValueError, match=match):
        BatchedEnv(tiny_cfg(bad=term), N, seed=0, nthread=1)


def test_bad_task_params_name_the_field():
    cfg = tiny_cfg()
    cfg.task_params["spread"] = float("inf")
    with pytest.raises(ValueError, match=r"task_params\.spread: expected a finite number, got inf"):
        BatchedEnv(cfg, N, seed=0, nthread=1)
    cfg = tiny_cfg()
    env = BatchedEnv(cfg, N, seed=0, nthread=1)
    with pytest.raises(ValueError, match=r"address 'task\.level': rows can be written only to a per-world"):
        write_address(env, "task.level", 1.0, env_ids=env.all_ids)


# -- evaluation and the runner's columns ------------------------------------------------------------
def test_an_env_built_without_the_curriculum_runs_the_declared_task():
    cfg = tiny_cfg(gate=gate())
    trained = BatchedEnv(cfg, N, seed=0, nthread=1)
    run(trained, 8)
    assert float(trained.task_params["difficulty"]) == 0.5
    cfg.curriculum = {}  # what robolearn.make(task, curriculum={}) does
    evaluation = BatchedEnv(cfg, N, seed=0, nthread=1)
    *_, info = evaluation.step(zeros(evaluation))
    assert "curriculum" not in info and float(evaluation.task_params["difficulty"]) == 0.0


def test_the_runner_logs_each_term_as_a_column(tmp_path):
    from robolearn.algos import PPO, PPOConfig
    from robolearn.runners import OnPolicyRunner, RunnerConfig

    torch.manual_seed(0)
    term = CurriculumTerm(
        Schedule, params=dict(target="initial_state.params.angle_uniform", start=0.0, end=0.2, num_steps=64)
    )
    env = robolearn.make("Cartpole-Balance", 4, seed=0, nthread=1, episode_length=8, curriculum={"spread": term})
    agent = PPO(env.obs_dims, env.action_dim, PPOConfig(num_steps=16, actor_hidden=(8,), critic_hidden=(8,)))
    cfg = RunnerConfig(total_env_steps=4 * 16 * 2, console=False, tensorboard=False, video=False)
    OnPolicyRunner(env, agent, cfg, tmp_path / "run").learn()
    with (tmp_path / "run" / "metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    # The value at the last reset of each iteration: episodes of 8 steps end at steps 16 and 32.
    assert [float(r["curriculum/spread"]) for r in rows] == pytest.approx([0.2 * 16 / 64, 0.2 * 32 / 64])


def test_curricula_leave_the_device_only_through_the_sync_module():
    from tests.test_device_neutral import no_host_sync

    cfg = full_cfg()
    cfg.curriculum["base_gate"] = gate(target="rewards.base.params.value", start=0.5, end=1.0, step=0.25)
    env = BatchedEnv(cfg, N, seed=2, nthread=1)
    env.episode_length.copy_(torch.tensor([0, 1, 2, 3]))  # staggered ends: partial resets
    with no_host_sync():
        info = run(env, 40)
    assert set(info["curriculum"]) == {"sched", "gate", "levels", "alp", "base_gate"}
    assert env.cfg.rewards["base"].params["value"] == 1.0  # a Python number, written back as one


def test_a_class_event_term_is_rebuilt_with_the_moved_range():
    # The pole-mass randomisation of Cartpole-Balance-DR binds its range when built; the schedule
    # widens a degenerate range (a fixed scale) from x1 to x2, and each new episode draws under it.
    term = CurriculumTerm(Schedule, params=dict(target="events.pole_mass.params.range", start=[1.0, 1.0],
                                                end=[2.0, 2.0], num_steps=2))
    env = robolearn.make("Cartpole-Balance-DR", 2, seed=0, nthread=1, episode_length=1, curriculum={"mass": term})
    pole = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_BODY, "pole")
    template = float(env.model.body_mass[pole])  # the compiled model is the template the term scales
    built = env.event_manager.calls["pole_mass"]
    for scale in (1.5, 2.0, 2.0):
        env.step(torch.zeros(2, 1))
        assert env.cfg.events["pole_mass"].params["range"] == (scale, scale)
        assert torch.allclose(env.drawn["mass/pole"], torch.full((2, 1), scale, dtype=torch.float64))
    assert env.event_manager.calls["pole_mass"] is not built
    assert torch.allclose(env.sim.get_model_field("body_mass")[:, pole], torch.full((2,), 2.0 * template, dtype=torch.float64))
