"""The one rollout loop: per-world and counted episodes, hand-computed returns, callbacks, video,
and agreement with the env's own episode statistics on a real task."""

from __future__ import annotations

import math

import pytest
import torch

import robolearn
from robolearn.runners.rollout import RolloutStep, VideoSpec, rollout


class CountingEnv:
    """World ``i`` runs episodes of ``lengths[i]`` steps; step ``k`` (1-based) of an episode pays
    ``(i + 1) * k``. Even worlds terminate, odd worlds are truncated; success is ``i`` even."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = torch.tensor(lengths)
        self.num_envs = len(lengths)
        self.device = torch.device("cpu")
        self.max_episode_length = int(self.lengths.max())
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        self.seen: list[torch.Tensor] = []
        self.diverge_at: int | None = None
        self.calls = 0

    @property
    def obs(self) -> dict[str, torch.Tensor]:
        return {"policy": self.t.double().unsqueeze(1)}

    def reset(self, seed: int | None = None) -> tuple[dict[str, torch.Tensor], dict]:
        self.t.zero_()
        return self.obs, {}

    def step(self, action: torch.Tensor):
        self.seen.append(action.clone())
        self.calls += 1
        self.t += 1
        ids = torch.arange(self.num_envs)
        reward = ((ids + 1) * self.t).float()
        done = self.t == self.lengths
        terminated = done & (ids % 2 == 0)
        truncated = done & (ids % 2 == 1)
        final = self.obs
        info: dict = {"final_obs": final, "diverged": torch.zeros(self.num_envs, dtype=torch.bool)}
        if self.diverge_at == self.calls:
            info["diverged"][1] = True
        if bool(done.any()):
            done_ids = torch.nonzero(done).flatten()
            info["episode"] = {"env_ids": done_ids, "success": (done_ids % 2 == 0)}
            self.t[done_ids] = 0
        return self.obs, reward, terminated, truncated, info

    def render(self, world_ids, width, height, camera=-1):
        frame = torch.full((height, width, 3), int(self.t[0]), dtype=torch.uint8).numpy()
        return frame[None]


def _act_on_t(obs):
    return obs["policy"].clone()  # the action is the observation, so the test sees what act was given


def test_first_episode_per_world_with_partial_returns_when_cut():
    env = CountingEnv([2, 3, 5])
    result = rollout(env, _act_on_t, max_steps=4)
    # (i + 1) * L (L + 1) / 2 for the finished ones; world 2 stops after 4 of its 5 steps: 3 * 10.
    assert result.returns.tolist() == [3.0, 12.0, 30.0]
    assert result.lengths.tolist() == [2, 3, 4]
    assert result.completed.tolist() == [True, True, False]
    assert result.env_ids.tolist() == [0, 1, 2]
    assert result.successes[:2].tolist() == [1.0, 0.0] and math.isnan(float(result.successes[2]))
    assert result.steps == 4
    # act saw the observation before each step: world 0 restarts after its 2-step episode.
    assert [float(a[0, 0]) for a in env.seen] == [0.0, 1.0, 0.0, 1.0]
    summary = result.summary("eval/")
    assert summary["eval/return"] == pytest.approx(15.0) and summary["eval/success_rate"] == 0.5


def test_first_episode_per_world_stops_when_every_world_ended():
    env = CountingEnv([2, 3, 5])
    result = rollout(env, _act_on_t)
    assert result.returns.tolist() == [3.0, 12.0, 45.0] and result.completed.all()
    assert result.steps == 5 and env.calls == 5


def test_counted_episodes_in_end_order_several_per_world():
    env = CountingEnv([2, 3, 5])
    result = rollout(env, _act_on_t, episodes=4)
    # Ends: step 2 world 0, step 3 world 1, step 4 world 0, step 5 world 2 (and no more).
    assert result.env_ids.tolist() == [0, 1, 0, 2]
    assert result.returns.tolist() == [3.0, 12.0, 3.0, 45.0]
    assert result.lengths.tolist() == [2, 3, 2, 5]
    assert result.steps == 5
    # Two episodes end at step 6 (worlds 0 and 1): asking for 5 keeps only the first of them.
    five = rollout(CountingEnv([2, 3, 5]), _act_on_t, episodes=5)
    assert five.env_ids.tolist() == [0, 1, 0, 2, 0]


def test_callback_sees_every_step_and_can_stop():
    env = CountingEnv([2, 3, 5])
    steps: list[RolloutStep] = []

    def on_step(step: RolloutStep) -> bool:
        steps.append(step)
        return step.t == 2

    result = rollout(env, _act_on_t, episodes=10, on_step=on_step)
    assert [s.t for s in steps] == [0, 1, 2] and result.steps == 3
    assert [s.done_ids.tolist() for s in steps] == [[], [0], [1]]
    assert steps[1].reward.tolist() == [2.0, 4.0, 6.0]
    assert result.env_ids.tolist() == [0, 1]


def test_divergence_is_counted():
    env = CountingEnv([2, 3, 5])
    env.diverge_at = 2
    assert rollout(env, _act_on_t).diverged == 1


def test_video_films_world_zero_until_its_first_episode_ends():
    env = CountingEnv([2, 3, 5])
    result = rollout(env, _act_on_t, video=VideoSpec(4, 3))
    assert [int(f[0, 0, 0]) for f in result.frames] == [0, 1]  # rendered before each step of episode 1
    assert result.frames[0].shape == (3, 4, 3)
    capped = rollout(CountingEnv([9, 9]), _act_on_t, video=VideoSpec(4, 3, max_frames=3))
    assert len(capped.frames) == 3


def test_bad_arguments_are_refused():
    env = CountingEnv([2])
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="episodes"):
            rollout(env, _act_on_t, episodes=bad)
    with pytest.raises(ValueError, match="max_steps"):
        rollout(env, _act_on_t, max_steps=0)


def test_returns_equal_the_envs_own_episode_statistics():
    env = robolearn.make("Cartpole-Balance", 3, seed=0, episode_length=30, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)

    def act(obs):
        return torch.rand((3, 1), generator=gen, dtype=torch.float64) * 2 - 1

    seen: list[float] = []

    def on_step(step: RolloutStep) -> None:
        if "episode" in step.info:
            seen.extend(step.info["episode"]["return"].tolist())

    result = rollout(env, act, episodes=5, seed=3, on_step=on_step)
    assert result.num_episodes == 5 and (result.lengths == 30).all()
    torch.testing.assert_close(result.returns, torch.tensor(seen[:5], dtype=torch.float64))
