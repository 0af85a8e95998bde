"""Teacher-student distillation (robolearn/algos/distill, robolearn/runners/distill.py, `robolearn distill`).

Pins: a student never reads a privileged group (refused, naming the group, before anything is
written); the beta and behaviour-cloning schedules and GAE against hand-computed values; DAgger on
Cartpole-Balance-DR with a fixed linear teacher of the privileged true state: the loss falls and
the student's actions approach the teacher's; AACD with a PPO (state-value) and a SAC (Q) teacher:
the BC term pulls the student to the teacher, and the teacher's networks never change (a
fine-tuned critic is the student's copy); resume continues exactly as an uninterrupted run; the
student run exports and loads like any run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import robolearn
from robolearn.algos import registry
from robolearn.algos.distill import Distill, DistillConfig
from robolearn.algos.distill.losses import gae, imitation_loss, q_actor_loss, scheduled
from robolearn.algos.ppo import PPO, PPOConfig
from robolearn.algos.sac import SAC, SACConfig
from robolearn.cli.main import main
from robolearn.runners import OnPolicyRunner, RunnerConfig
from robolearn.runners.distill import DistillRunner, TeacherError, load_teacher, teacher_critic
from robolearn.runners.policy import load_policy
from robolearn.runners.train_config import train_config_from_dict, train_config_to_dict
from robolearn.types import Transition

TASK = "Cartpole-Balance-DR"
H = (32, 32)
QUIET = {"video": False, "console": False, "tensorboard": False}
STATE = slice(8, 12)
"""The privileged group's true state (cart position, pole angle, their velocities) after the 8 drawn values."""


def _env(n: int = 16, seed: int = 0):
    return robolearn.make(TASK, n, seed=seed, nthread=1)


def _linear_teacher(obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """A fixed map of the privileged true state: what a student must infer from noisy, delayed readings."""
    w = torch.tensor([1.0, 3.0, 0.5, 0.5])
    return torch.tanh(obs["privileged"][:, STATE] @ w).unsqueeze(-1)


def _teacher_ppo(env, **kw) -> PPO:
    """An untrained PPO whose actor and critic read ``critic`` (policy + privileged), with a head large
    enough that its actions are far from the fresh student's near-zero ones."""
    torch.manual_seed(1)
    ppo = PPO(env.obs_dims, env.action_dim, PPOConfig(actor_hidden=H, critic_hidden=H, actor_obs_group="critic",
                                                      critic_obs_group="critic", num_steps=8, **kw))
    with torch.no_grad():
        ppo.actor[-1].weight.normal_(0.0, 1.0)
    return ppo


def _teacher_sac(env) -> SAC:
    sac = SAC(env.obs_dims, env.action_dim, SACConfig(actor_hidden=H, critic_hidden=H, actor_obs_group="critic"),
              action_low=env.ctrl_low, action_high=env.ctrl_high, seed=1)
    return sac


def _student(env, **kw) -> Distill:
    kw.setdefault("actor_hidden", H)
    kw.setdefault("num_steps", 16)
    torch.manual_seed(0)
    return Distill(env.obs_dims, env.action_dim, DistillConfig(**kw), action_low=env.ctrl_low,
                   action_high=env.ctrl_high)


def _iterate(env, agent: Distill, obs, iterations: int) -> tuple[dict, list[dict[str, float]]]:
    """The on-policy loop the distillation runner runs: act, step, process; returns; update."""
    history = []
    for _ in range(iterations):
        for _ in range(agent.cfg.num_steps):
            action = agent.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(action)
            agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
            obs = next_obs
        agent.compute_returns(obs)
        history.append({k: float(v) for k, v in agent.update().items()})
    return obs, history


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# -- the student reads deployable groups only -----------------------------------------------------
@pytest.mark.parametrize("group", ["privileged", "critic"])
def test_a_student_reading_a_privileged_group_is_refused_naming_it(group):
    with pytest.raises(ValueError, match=rf"student_obs_group='{group}'.*\['{group}'\].*may read only"):
        DistillConfig(student_obs_group=group)


def test_the_runner_refuses_a_privileged_student_before_writing(tmp_path):
    env = _env(4)
    agent = _student(env)
    agent.group = "privileged"  # a library user bypassing the config's check
    teacher = _FakeTeacher(_teacher_ppo(env))
    with pytest.raises(ValueError, match=r"\['privileged'\]"):
        DistillRunner(env, agent, RunnerConfig(total_env_steps=64, **QUIET), tmp_path / "run", teacher=teacher)
    assert not (tmp_path / "run").exists()


def test_cli_refuses_a_privileged_student_with_one_line_and_writes_nothing(tmp_path, capsys, ppo_teacher_run):
    run = tmp_path / "student"
    status = main(["distill", f"teacher={ppo_teacher_run}", "algo.student_obs_group=privileged", f"run_dir={run}"])
    err = capsys.readouterr().err
    assert status == 2
    assert "['privileged']" in err and "may read only" in err and "Traceback" not in err
    assert not run.exists()


def test_cli_needs_a_teacher_run(tmp_path, capsys):
    assert main(["distill", "mode=dagger", f"run_dir={tmp_path / 's'}"]) == 2
    assert "teacher: expected the run directory of a trained teacher" in capsys.readouterr().err
    assert main(["distill", f"teacher={tmp_path / 'nothing'}", f"run_dir={tmp_path / 's'}"]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


# -- pure functions against hand-computed values ---------------------------------------------------
def test_beta_schedules_hand_computed():
    assert [scheduled("linear", k, 1.0, 0.0, 4) for k in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    assert [scheduled("exponential", k, 1.0, 0.1, 4, 0.5) for k in range(6)] == [1.0, 0.5, 0.25, 0.125, 0.1, 0.1]
    assert [scheduled("constant", k, 0.3, 0.0, 4) for k in range(3)] == [0.3, 0.3, 0.3]
    assert scheduled("linear", 1, 1.0, 0.1, 2) == pytest.approx(0.55)  # the BC weight's anneal
    with pytest.raises(ValueError, match="iteration"):
        scheduled("linear", -1, 1.0, 0.0, 4)


def test_the_agent_follows_its_beta_schedule_and_mixes_per_world():
    cfg = DistillConfig(actor_hidden=H, beta_schedule="linear", beta_start=1.0, beta_end=0.0, beta_iterations=2,
                        num_steps=1)
    agent = Distill({"policy": 3, "privileged": 2}, 1, cfg)
    teacher = torch.full((4000, 1), 5.0)
    agent.attach_teacher(lambda obs: teacher)
    obs = {"policy": torch.randn(4000, 3), "privileged": torch.randn(4000, 2)}
    fractions = []
    for _ in range(3):
        executed = agent.act(obs)
        student = agent.act_inference(obs)  # after act, whose normaliser update moves the student's mean
        agent.process(Transition(obs, executed, torch.zeros(4000), obs, torch.zeros(4000, dtype=torch.bool),
                                 torch.zeros(4000, dtype=torch.bool)))
        is_teacher = executed == 5.0
        assert bool((is_teacher | torch.isclose(executed, student, atol=1e-3)).all())  # one or the other per world
        fractions.append(float(is_teacher.float().mean()))
        stats = agent.update()
    assert fractions[0] == 1.0 and fractions[2] == 0.0
    assert 0.45 < fractions[1] < 0.55  # beta = 0.5, per world
    assert float(stats["beta"]) == 0.0 and agent.beta == 0.0


def test_a_recurrent_teachers_state_restarts_at_episode_ends():
    agent = Distill({"policy": 3}, 1, DistillConfig(actor_hidden=H, num_steps=1))
    seen: list[torch.Tensor] = []
    agent.attach_teacher(lambda obs: torch.zeros(4, 1), reset=seen.append)
    obs = {"policy": torch.randn(4, 3)}
    action = agent.act(obs)
    terminated = torch.tensor([True, False, False, False])
    truncated = torch.tensor([False, False, True, False])
    agent.process(Transition(obs, action, torch.zeros(4), obs, terminated, truncated))
    assert len(seen) == 1 and seen[0].tolist() == [True, False, True, False]


def test_aacd_refuses_a_recurrent_teacher_critic():
    env = _env(4)
    teacher = _teacher_ppo(env)
    teacher.critic_memory = torch.nn.GRU(3, 3)  # what a recurrent PPO carries
    with pytest.raises(TeacherError, match="recurrent"):
        teacher_critic(teacher)


def test_gae_hand_computed():
    # One world, three steps; step 1 ends the episode (terminated: no bootstrap, no carry).
    rewards = torch.tensor([[1.0], [1.0], [1.0]])
    values = torch.full((3, 1), 0.5)
    next_values = torch.tensor([[0.5], [0.5], [2.0]])
    terminated = torch.tensor([[False], [True], [False]])
    adv, ret = gae(rewards, values, next_values, terminated, terminated.clone(), gamma=0.9, lam=0.8)
    # deltas: 1 + .9*.5 - .5 = .95;  1 - .5 = .5;  1 + .9*2 - .5 = 2.3
    expected = torch.tensor([[0.95 + 0.72 * 0.5], [0.5], [2.3]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + 0.5)
    # a time-out at step 1 bootstraps from its final value (0.5) but does not carry step 2's advantage
    done = torch.tensor([[False], [True], [False]])
    adv, _ = gae(rewards, values, next_values, torch.zeros_like(done), done, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv[1], torch.tensor([0.95]))


def test_imitation_and_q_losses_hand_computed():
    mean, std, target = torch.zeros(2, 1), torch.ones(2, 1), torch.ones(2, 1)
    assert float(imitation_loss(mean, std, target, "mse")) == pytest.approx(1.0)
    assert float(imitation_loss(mean, std, target, "nll")) == pytest.approx(0.5 * (1.0 + math.log(2 * math.pi)))
    q = torch.tensor([2.0, -4.0], requires_grad=True)
    loss = q_actor_loss(q)
    assert float(loss.detach()) == pytest.approx(1.0 / 3.0)  # -mean / mean|q| = 1 / 3
    loss.backward()
    torch.testing.assert_close(q.grad, torch.full((2,), -1.0 / 6.0))  # the scale is detached


# -- DAgger learns the teacher --------------------------------------------------------------------
def _held_out_states() -> dict[str, torch.Tensor]:
    """States a uniformly random policy visits in 128 steps (the pole swings far): a fixed set of 512
    on which student and teacher are compared."""
    env = _env(32, seed=7)
    g = torch.Generator().manual_seed(7)
    obs, _ = env.reset(seed=7)
    kept = []
    for i in range(128):
        obs, *_ = env.step(torch.rand(32, 1, generator=g) * 2.0 - 1.0)
        if i % 8 == 7:
            kept.append({k: v.clone() for k, v in obs.items()})
    return {k: torch.cat([o[k] for o in kept]) for k in kept[0]}


def test_dagger_loss_falls_and_the_student_approaches_a_linear_privileged_teacher():
    env = _env(32)
    agent = _student(env, mode="dagger", beta_iterations=5, buffer_size=4096, learning_rate=3e-3, num_epochs=3)
    agent.attach_teacher(_linear_teacher)
    held = _held_out_states()
    target = _linear_teacher(held)

    def loss_and_gap() -> tuple[float, float]:
        student = agent.act_inference(held)
        return float(imitation_loss(student, torch.ones_like(student), target)), float((student - target).abs().mean())

    loss0, gap0 = loss_and_gap()
    obs, _ = env.reset(seed=0)
    _, history = _iterate(env, agent, obs, 12)
    loss1, gap1 = loss_and_gap()
    assert gap0 > 0.2, "the teacher's actions must be far from a fresh student's for the test to mean anything"
    assert loss1 < 0.3 * loss0 and gap1 < 0.5 * gap0, (loss0, loss1, gap0, gap1)
    assert history[-1]["loss_imitation"] < 0.05
    assert [h["beta"] for h in history[:7]] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.0, 0.0])
    assert history[-1]["buffer_size"] == 4096  # the aggregated dataset, capped


# -- AACD: the BC term pulls, the teacher never changes ------------------------------------------
def _gap(agent: Distill, teacher, held: dict[str, torch.Tensor]) -> float:
    """Mean absolute difference of student and teacher actions on the held-out states."""
    return float((agent.act_inference(held) - teacher.act_inference(held)).abs().mean())


def _fake_runner_parts(teacher):
    critic, kind, group = teacher_critic(teacher)
    return teacher.act_inference, critic, kind, group


@pytest.mark.parametrize("finetune", [False, True])
def test_aacd_with_a_ppo_teacher_pulls_the_student_and_leaves_the_teacher_alone(finetune):
    env = _env(16)
    teacher = _teacher_ppo(env)
    before = _params(teacher.actor) + _params(teacher.critic)
    agent = _student(env, mode="aacd", bc_coef=5.0, bc_coef_end=5.0, finetune_critic=finetune, learning_rate=3e-3)
    agent.attach_teacher(*_fake_runner_parts(teacher))
    assert agent.critic_kind == "value"
    copy_before = _params(agent.critic)
    held = _held_out_states()
    gap0 = _gap(agent, teacher, held)
    obs, _ = env.reset(seed=0)
    _, history = _iterate(env, agent, obs, 8)
    assert _gap(agent, teacher, held) < 0.6 * gap0
    assert history[-1]["loss_bc"] < 0.5 * history[0]["loss_bc"], history
    assert all(math.isfinite(h["loss_policy"]) for h in history)
    assert _same(before, _params(teacher.actor) + _params(teacher.critic)), "the teacher's weights changed"
    assert _same(copy_before, _params(agent.critic)) is not finetune  # the copy moves only when fine-tuned
    assert ("loss_value" in history[-1]) is finetune


def test_aacd_with_a_sac_teacher_follows_its_q_and_leaves_it_alone():
    env = _env(16)
    teacher = _teacher_sac(env)
    before = _params(teacher.actor) + _params(teacher.critic)
    agent = _student(env, mode="aacd", bc_coef=5.0, bc_coef_end=5.0, learning_rate=3e-3)
    agent.attach_teacher(*_fake_runner_parts(teacher))
    assert agent.critic_kind == "q" and agent.critic_group == "critic"
    held = _held_out_states()
    gap0 = _gap(agent, teacher, held)
    obs, _ = env.reset(seed=0)
    _, history = _iterate(env, agent, obs, 8)
    assert _gap(agent, teacher, held) < 0.6 * gap0
    assert history[-1]["loss_bc"] < 0.5 * history[0]["loss_bc"], history
    assert all(math.isfinite(h["loss_q"]) for h in history)
    assert _same(before, _params(teacher.actor) + _params(teacher.critic))


def test_aacd_q_term_alone_climbs_the_teacher_q():
    env = _env(16)
    teacher = _teacher_sac(env)
    agent = _student(env, mode="aacd", bc_coef=0.0, bc_coef_end=0.0, learning_rate=1e-2, num_steps=8)
    agent.attach_teacher(*_fake_runner_parts(teacher))
    obs, _ = env.reset(seed=0)
    x = obs["critic"]

    def q_of_student() -> float:
        a = agent.act_inference(obs).clamp(env.ctrl_low.float(), env.ctrl_high.float())
        return float(teacher.critic(x, a).min(0).values.mean())

    start = q_of_student()
    _iterate(env, agent, obs, 5)
    assert q_of_student() > start


def test_a_q_teacher_cannot_be_fine_tuned():
    env = _env(4)
    agent = _student(env, mode="aacd", finetune_critic=True)
    with pytest.raises(ValueError, match="finetune_critic"):
        agent.attach_teacher(*_fake_runner_parts(_teacher_sac(env)))


# -- runs on disk: resume, export, load -----------------------------------------------------------
class _FakeTeacher:
    """A teacher agent as :func:`load_teacher` returns it (a LoadedPolicy's surface)."""

    def __init__(self, agent) -> None:
        self.agent = agent
        self.spec: dict = {}
        self.checkpoint = Path("ckpt_000000.pt")
        self.cfg = type("Cfg", (), {"run_dir": "in-memory"})()

    def act(self, obs):
        return self.agent.act_inference(obs)


def _config(run_dir: Path, total: int = 64, **algo) -> dict:
    cfg = train_config_from_dict({
        "task": TASK, "seed": 0, "num_envs": 8, "eval_num_envs": 2, "total_env_steps": total, "run_dir": str(run_dir),
        "algo": {"name": algo.pop("name", "ppo"), **algo}, "runner": {**QUIET, "eval_steps": 30},
    })
    return train_config_to_dict(cfg)


@pytest.fixture(scope="module")
def ppo_teacher_run(tmp_path_factory) -> Path:
    """A PPO teacher run reading ``critic`` (one short iteration: its weights, not its skill, matter here)."""
    run = tmp_path_factory.mktemp("teacher") / "ppo"
    env = _env(8)
    agent = PPO(env.obs_dims, env.action_dim, PPOConfig(actor_hidden=H, critic_hidden=H, actor_obs_group="critic",
                                                        critic_obs_group="critic", num_steps=8))
    config = _config(run, actor_hidden=list(H), critic_hidden=list(H), actor_obs_group="critic",
                     critic_obs_group="critic", num_steps=8)
    OnPolicyRunner(env, agent, RunnerConfig(total_env_steps=64, **QUIET), run, config=config).learn()
    return run


def _distill_runner(run: Path, teacher_run: Path, total: int, mode: str = "dagger") -> DistillRunner:
    env, eval_env = _env(8), _env(2, seed=100)
    algo = {"name": "distill", "teacher": str(teacher_run), "mode": mode, "actor_hidden": list(H), "num_steps": 8,
            "buffer_size": 256, "beta_iterations": 3}
    cfg = train_config_from_dict(_config(run, total, **algo))
    agent = registry.spec_of(cfg.algo).build(cfg.algo, env.obs_dims, env.action_dim, action_low=env.ctrl_low,
                                             action_high=env.ctrl_high, seed=0)
    runner_cfg = RunnerConfig(total_env_steps=total, checkpoint_interval=1, eval_interval=100, eval_steps=30, **QUIET)
    return DistillRunner(env, agent, runner_cfg, run, teacher=load_teacher(teacher_run), eval_env=eval_env,
                         config=train_config_to_dict(cfg))


@pytest.mark.parametrize("mode", ["dagger", "aacd"])
def test_resume_continues_exactly_as_an_uninterrupted_run(tmp_path, ppo_teacher_run, mode):
    straight = _distill_runner(tmp_path / "straight", ppo_teacher_run, 256, mode)
    straight.learn()
    cut = _distill_runner(tmp_path / "cut", ppo_teacher_run, 128, mode)
    cut.learn()
    resumed = _distill_runner(tmp_path / "cut", ppo_teacher_run, 256, mode)
    summary = resumed.learn(resume=True)
    assert summary["env_steps"] == 256 and resumed.agent.iteration == straight.agent.iteration == 4
    assert _same(_params(straight.agent.actor), _params(resumed.agent.actor))
    assert "teacher_eval_return" in summary and summary["teacher_checkpoint"].startswith("ckpt_")


def test_a_teacher_that_does_not_fit_the_env_is_refused(tmp_path, ppo_teacher_run):
    env = robolearn.make("Pendulum-Swingup", 4, seed=0, nthread=1)
    agent = Distill(env.obs_dims, env.action_dim, DistillConfig(actor_hidden=H))
    with pytest.raises(TeacherError, match="group 'critic'|features|dimensions"):
        DistillRunner(env, agent, RunnerConfig(total_env_steps=64, **QUIET), tmp_path / "s",
                      teacher=load_teacher(ppo_teacher_run))
    assert not (tmp_path / "s").exists()


def test_the_student_run_exports_and_loads_like_any_run(tmp_path, ppo_teacher_run, capsys):
    run = tmp_path / "student"
    status = main(["distill", f"teacher={ppo_teacher_run}", "mode=dagger", f"run_dir={run}", "num_envs=8",
                   "eval_num_envs=2", "total_env_steps=128", "algo.num_steps=8", f"algo.actor_hidden=[{H[0]},{H[1]}]",
                   "runner.video=false", "runner.console=false", "runner.tensorboard=false", "runner.eval_steps=30"])
    assert status == 0, capsys.readouterr().err
    config = json.loads((run / "config.json").read_text())
    assert config["algo"]["name"] == "distill" and config["task"] == TASK  # the task came from the teacher
    summary = json.loads((run / "summary.json").read_text())
    assert math.isfinite(summary["teacher_eval_return"]) and math.isfinite(summary["final_eval_return"])
    policy = load_policy(run)  # no teacher needed
    assert policy.agent.teacher_act is None
    obs = _env(4).obs
    torch.testing.assert_close(policy.module()(obs["policy"]), policy.act(obs))
    assert main(["export", f"run={run}", "format=torchscript"]) == 0
    manifest = json.loads((run / "export" / "manifest.json").read_text())
    print(list(manifest))


@pytest.mark.parametrize("mode", ["dagger", "aacd"])
def test_a_non_finite_update_is_skipped_and_undone(tmp_path, mode):
    # tests/test_guard.py's check for the registered learners, through the distillation runner
    env = _env(4)
    agent = _student(env, mode=mode, num_steps=4)
    runner = DistillRunner(env, agent, RunnerConfig(total_env_steps=10_000, **QUIET), tmp_path / "run",
                           teacher=_FakeTeacher(_teacher_ppo(env)))
    runner._iterate(env.obs)
    real_update = agent.update
    before: list[torch.Tensor] = []

    def poisoned(*args, **kwargs):
        before.extend(p.detach().clone() for p in agent.parameters())
        stats = real_update(*args, **kwargs)
        with torch.no_grad():
            agent.actor[0].weight.view(-1)[0] = float("inf")
        return stats

    agent.update = poisoned
    runner._iterate(env.obs)
    assert runner.skipped_updates == 1
    assert all(torch.equal(a, b) for a, b in zip(before, agent.parameters(), strict=True))
    assert agent.iteration == 1, "the schedules' position is rolled back with the weights"
