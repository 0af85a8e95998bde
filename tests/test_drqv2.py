"""DrQ-v2 from pixels: n-step targets, gradient wiring of the shared encoder, augmentation, target
updates, the exploration schedule, uint8 replay, frame stacking, acting on the pixel task and a
short run through the off-policy runner.
"""

from __future__ import annotations

import json

import pytest
import torch

import robolearn
from robolearn.algos.drqv2 import DrQV2, DrQV2Config, nstep_target
from robolearn.algos.drqv2.agent import DISCOUNT, FrameStack, NStepWindow, image_shape
from robolearn.algos.drqv2.replay import FrameReplay
from robolearn.runners import OffPolicyRunner, RunnerConfig
from robolearn.types import Batch, Transition
from robolearn.utils.hostsync import HostSync, forbid_host_syncs

SIZE = 32
K = 3
OBS = {"image": SIZE * SIZE * 3, "critic": 5}
TINY = {"batch_size": 16, "buffer_size": 200, "feature_dim": 8, "hidden_dim": 16, "cnn_channels": 4,
        "learning_starts": 0, "update_every": 1}  # fmt: skip
SMALL_IMAGES = {"observations__image__terms__rgb__params__width": SIZE,
                "observations__image__terms__rgb__params__height": SIZE}  # fmt: skip


def _agent(**kw) -> DrQV2:
    cfg = DrQV2Config(**{**TINY, **kw})
    return DrQV2(OBS, 2, cfg, action_low=torch.tensor([-1.0, -2.0]), action_high=torch.tensor([1.0, 0.5]), seed=1)


def _batch(n: int = 16, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)

    def obs() -> dict[str, torch.Tensor]:
        img = torch.randint(0, 256, (n, SIZE, SIZE, 3 * K), generator=g, dtype=torch.uint8)
        return {"image": img, "critic": torch.randn(n, 5, generator=g)}

    return Batch(obs=obs(), action=torch.rand(n, 2, generator=g) * torch.tensor([2.0, 2.5]) - torch.tensor([1.0, 2.0]),
                 reward=torch.randn(n, generator=g), next_obs=obs(), terminated=torch.rand(n, generator=g) < 0.2,
                 truncated=torch.zeros(n, dtype=torch.bool),
                 extras={DISCOUNT: torch.full((n,), 0.97)})  # fmt: skip


def test_nstep_window_and_target_match_hand_computed_values():
    # Three worlds, n=3, gamma=0.5: world 0 runs on, world 1 terminates and world 2 times out at t=1.
    win = NStepWindow(3, 0.5)
    no = torch.zeros(3, dtype=torch.bool)

    def step(t: int, rewards: list[float], term: torch.Tensor, trunc: torch.Tensor):
        obs = {"x": torch.tensor([[10.0 * t + w] for w in range(3)])}
        nxt = {"x": torch.tensor([[10.0 * (t + 1) + w] for w in range(3)])}
        return win.add(obs, torch.full((3, 1), float(t)), torch.tensor(rewards), nxt, term, trunc)

    assert step(0, [1.0, 10.0, 100.0], no, no) is None
    out = step(1, [2.0, 20.0, 200.0], torch.tensor([False, True, False]), torch.tensor([False, False, True]))
    got = sorted(zip(out["obs"]["x"][:, 0].tolist(), out["reward"].tolist(), out["discount"].tolist(),
                     out["next_obs"]["x"][:, 0].tolist(), out["terminated"].tolist(), strict=True))  # fmt: skip
    # world 1 (terminated): no bootstrap; world 2 (time-out): gamma^m from its true final observation
    assert got == [(1.0, 10.0 + 0.5 * 20.0, 0.0, 21.0, True), (2.0, 100.0 + 0.5 * 200.0, 0.25, 22.0, False),
                   (11.0, 20.0, 0.0, 21.0, True), (12.0, 200.0, 0.5, 22.0, False)]  # fmt: skip
    out = step(2, [3.0, 30.0, 300.0], no, no)
    # only world 0's first window is complete; worlds 1 and 2 restarted at t=2
    assert out["obs"]["x"].tolist() == [[0.0]] and out["action"].tolist() == [[0.0]]
    assert out["reward"].tolist() == [1.0 + 0.5 * 2.0 + 0.25 * 3.0] and out["discount"].tolist() == [0.125]
    assert out["next_obs"]["x"].tolist() == [[30.0]]
    next_q = torch.tensor([[4.0, 8.0, 2.0], [6.0, 1.0, 3.0]])
    target = nstep_target(torch.tensor([2.75, 20.0, 200.0]), torch.tensor([0.125, 0.0, 0.25]), next_q)
    torch.testing.assert_close(target, torch.tensor([2.75 + 0.125 * 4.0, 20.0, 200.0 + 0.25 * 2.0]))


def _phase_grads(agent: DrQV2, batch: Batch) -> dict[str, list]:
    """Snapshot the encoder's, actor's and critic's gradients right after each loss's backward."""
    snaps: dict[str, list] = {}

    def grads(module: torch.nn.Module) -> list:
        return [None if p.grad is None else p.grad.clone() for p in module.parameters()]

    for phase, opt in (("critic", agent.critic_optimizer), ("actor", agent.actor_optimizer)):
        step = opt.step

        def wrapped(*a, _phase=phase, _step=step, **k):
            snaps[_phase] = [grads(agent.encoder), grads(agent.actor.policy), grads(agent.critic)]
            return _step(*a, **k)

        opt.step = wrapped
    agent.update_step(batch)
    return snaps


def _nonzero(gs: list) -> bool:
    return all(g is not None and bool(g.abs().sum() > 0) for g in gs)


def test_the_encoder_learns_from_the_critic_loss_only():
    snaps = _phase_grads(_agent(), _batch())
    enc_c, _, critic_c = snaps["critic"]
    enc_a, actor_a, critic_a = snaps["actor"]
    assert _nonzero(enc_c) and _nonzero(critic_c)
    # the actor's backward added nothing to the encoder's or the critic's gradients
    assert all(torch.equal(a, c) for a, c in zip(enc_a, enc_c, strict=True))
    assert all(torch.equal(a, c) for a, c in zip(critic_a, critic_c, strict=True))
    assert _nonzero(actor_a)


def test_asymmetric_mode_critic_on_state_encoder_from_the_actor():
    agent = _agent(critic_obs_group="critic")
    assert isinstance(agent.critic.trunk, torch.nn.Identity)  # the Q networks read the 5-D state directly
    snaps = _phase_grads(agent, _batch())
    enc_c, _, critic_c = snaps["critic"]
    enc_a, actor_a, _ = snaps["actor"]
    assert all(g is None for g in enc_c) and _nonzero(critic_c)
    assert _nonzero(enc_a) and _nonzero(actor_a)
    with pytest.raises(ValueError, match="'state' not among"):
        _agent(critic_obs_group="state")


def test_asymmetric_aux_state_loss_trains_the_encoder_when_the_actor_loss_passes_none():
    agent = _agent(critic_obs_group="critic", aux_state_weight=2.0, aug_pad=0)
    assert agent.actor.aux.out_features == 5 and any(p is agent.actor.aux.weight for g in agent.actor_optimizer.param_groups for p in g["params"])
    # A critic that ignores the action gives the actor loss no gradient (as a saturated tanh does):
    # only the auxiliary loss can then move the encoder.
    for p in agent.critic.q.parameters():
        p.data.zero_()
    b = _batch()
    # the loss and its gradient on the head's weight at the parameters before the step (no shift with aug_pad=0)
    with torch.no_grad():
        features = agent.actor.front.trunk(agent.encoder(b.obs["image"]))
    weight = agent.actor.aux.weight.detach().clone().requires_grad_(True)
    expected = ((features @ weight.T + agent.actor.aux.bias.detach() - b.obs["critic"]) ** 2).mean()
    (expected_grad,) = torch.autograd.grad(expected, weight)
    enc_before = [p.clone() for p in agent.encoder.parameters()]
    stats = agent.update_step(b)
    torch.testing.assert_close(stats["loss_aux_state"], expected.detach(), rtol=1e-5, atol=1e-6)
    # only the auxiliary loss reaches the head, scaled by its weight (2.0)
    torch.testing.assert_close(agent.actor.aux.weight.grad, 2.0 * expected_grad, rtol=1e-4, atol=1e-7)
    assert any(not torch.equal(a, p) for a, p in zip(enc_before, agent.encoder.parameters(), strict=True))
    without = _agent(critic_obs_group="critic")
    for p in without.critic.q.parameters():
        p.data.zero_()
    enc0 = [p.clone() for p in without.encoder.parameters()]
    without.update_step(b)
    assert all(torch.equal(a, p) for a, p in zip(enc0, without.encoder.parameters(), strict=True))
    assert not hasattr(without.actor, "aux")
    with pytest.raises(ValueError, match="aux_state_weight"):
        _agent(aux_state_weight=1.0)  # pixel mode has no state to predict
    with pytest.raises(ValueError, match="aux_state_weight"):
        _agent(critic_obs_group="critic", aux_state_weight=-1.0)


def test_augmentation_draws_independent_shifts_for_obs_and_next_obs():
    agent = _agent(aug_pad=4)
    b = _batch(64)
    b.next_obs["image"] = b.obs["image"].clone()
    agent.update_step(b)
    s_obs, s_next = agent.last_shifts
    assert s_obs.shape == s_next.shape == (64, 2) and int(s_obs.abs().max()) <= 4 and int(s_next.abs().max()) <= 4
    assert not torch.equal(s_obs, s_next)
    assert len({tuple(s) for s in s_obs.tolist()}) > 10  # drawn per sample, not one shift per batch
    agent = _agent(aug_pad=0)
    agent.update_step(b)
    assert not agent.last_shifts[0].any() and not agent.last_shifts[1].any()


def test_target_critic_moves_by_exactly_tau():
    agent = _agent(tau=0.25)
    before = [p.clone() for p in agent.target_critic.parameters()]
    agent.update_step(_batch())
    for old, new, online in zip(before, agent.target_critic.parameters(), agent.critic.parameters(), strict=True):
        torch.testing.assert_close(new, old + 0.25 * (online - old), rtol=1e-6, atol=1e-7)
    assert any(not torch.equal(o, n) for o, n in zip(before, agent.target_critic.parameters(), strict=True))


def test_exploration_std_schedule():
    cfg = DrQV2Config(std_init=1.0, std_final=0.1, std_schedule_steps=1000)
    assert [round(cfg.std(s), 6) for s in (0, 250, 500, 1000, 5000)] == [1.0, 0.775, 0.55, 0.1, 0.1]
    agent = _agent(std_schedule_steps=100, learning_starts=10**6)
    b = _batch(4)
    frames = {"image": b.obs["image"][..., :3], "critic": b.obs["critic"]}
    for _ in range(5):
        agent.act(frames)
        agent.process(Transition(frames, b.action, b.reward, frames, b.terminated, b.truncated))
    assert agent.env_steps == 20 and agent.std == pytest.approx(1.0 - 0.9 * 0.2)
    with pytest.raises(ValueError, match="std_clip: expected >= 0"):
        DrQV2Config(std_clip=-0.1)


def test_frame_stack_rolls_and_restarts_per_world():
    fs = FrameStack(3)
    f = [torch.full((2, 1, 1, 1), v, dtype=torch.uint8) for v in (1, 2, 3, 4)]
    assert fs.push(f[0])[:, 0, 0].tolist() == [[1, 1, 1], [1, 1, 1]]  # a first frame fills the stack
    assert fs.push(f[1])[:, 0, 0].tolist() == [[1, 1, 2], [1, 1, 2]]
    assert fs.peek(f[2])[:, 0, 0].tolist() == [[1, 2, 3], [1, 2, 3]]
    fs.reset(torch.tensor([False, True]))
    assert fs.push(f[3])[:, 0, 0].tolist() == [[1, 2, 4], [4, 4, 4]]
    with pytest.raises(ValueError, match="square 3-channel image"):
        image_shape(100, 3, "image")


@pytest.mark.parametrize("replay", ["frames", "stacked"])
def test_replay_stores_uint8_images(replay):
    agent = _agent(buffer_size=50, n_step=1, replay=replay)
    b = _batch(4)
    frames = {"image": b.obs["image"][..., :3], "critic": b.obs["critic"]}
    nxt = {"image": b.next_obs["image"][..., :3], "critic": b.next_obs["critic"]}
    agent.act(frames)
    agent.process(Transition(frames, b.action, b.reward, nxt, b.terminated, b.truncated))
    assert len(agent.replay) == 4
    if replay == "stacked":
        stored = agent.replay.storage["obs"]["image"]
        assert stored.dtype == torch.uint8 and stored.shape == (50, SIZE, SIZE, 3 * K)
        assert agent.replay.storage["next_obs"]["image"].dtype == torch.uint8
        got = agent.replay.gather(torch.arange(4))
    else:  # one ring of single frames per world: ceil(50 / 4) transition slots, + k + n + 1 frames
        assert agent.replay.frames.dtype == torch.uint8 and agent.replay.frames.shape == (4, 13 + K + 2, SIZE, SIZE, 3)
        assert agent.replay.written.tolist() == [2, 2, 2, 2]  # each world's first frame and its next frame
        got = agent.replay.gather(torch.arange(4), torch.zeros(4, dtype=torch.long))
        assert got.obs["image"].dtype == torch.uint8
        with pytest.raises(ValueError, match=r"image: the replay holds frames \[4, 32, 32, 3\] per step, got \[2, 32, 32, 3\]"):
            agent.replay.write_frames(frames["image"][:2], nxt["image"][:2], b.terminated[:2])
    assert torch.equal(got.obs["image"], frames["image"].repeat(1, 1, 1, K))  # first frame three times
    assert torch.equal(got.next_obs["image"][..., -3:], nxt["image"])  # the next frame joins at the end
    assert torch.equal(got.next_obs["image"][..., :6], frames["image"].repeat(1, 1, 1, 2))
    torch.testing.assert_close(got.extras[DISCOUNT], 0.99 * (~b.terminated).float())


def test_act_on_the_pixel_task_stays_in_bounds():
    env = robolearn.make("Cartpole-Swingup-Pixels", 3, seed=0, **SMALL_IMAGES)
    obs, _ = env.reset()
    agent = DrQV2(env.obs_dims, env.action_dim, DrQV2Config(**{**TINY, "learning_starts": 6}),
                  action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)  # fmt: skip
    for _ in range(4):  # two steps of uniform actions, then the actor with scheduled noise
        action = agent.act(obs)
        assert action.shape == (3, env.action_dim)
        assert bool(((action >= env.ctrl_low) & (action <= env.ctrl_high)).all())
        next_obs, reward, terminated, truncated, info = env.step(action)
        agent.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        obs = next_obs
    assert len(agent.replay) >= 6
    greedy = agent.act_inference(obs)
    assert greedy.shape == (3, env.action_dim) and bool((greedy.abs() <= 1).all())
    module = agent.policy_module()
    torch.testing.assert_close(module(obs["image"].repeat(1, 1, 1, K)), _fresh(agent).act_inference(obs))


def _fresh(agent: DrQV2) -> DrQV2:
    agent.eval_stack = FrameStack(agent.cfg.frame_stack)  # a new episode: the frame three times
    return agent


def test_short_run_through_the_off_policy_runner(tmp_path):
    env = robolearn.make("Cartpole-Swingup-Pixels", 2, seed=0, episode_length=10, **SMALL_IMAGES)
    eval_env = robolearn.make("Cartpole-Swingup-Pixels", 2, seed=5, episode_length=10, **SMALL_IMAGES)
    agent = DrQV2(env.obs_dims, env.action_dim, DrQV2Config(**{**TINY, "learning_starts": 10}),
                  action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)  # fmt: skip
    rcfg = RunnerConfig(total_env_steps=40, steps_per_iteration=10, eval_interval=2, checkpoint_interval=2,
                        video=False, console=False, tensorboard=False)  # fmt: skip
    OffPolicyRunner(env, agent, rcfg, tmp_path / "run", eval_env=eval_env).learn()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["env_steps"] == 40
    assert (tmp_path / "run" / "metrics.csv").is_file() and any((tmp_path / "run" / "checkpoints").glob("ckpt_*.pt"))
    assert agent.num_updates > 0 and isinstance(agent.replay, FrameReplay) and agent.replay.frames.dtype == torch.uint8
    # a checkpoint restores into a fresh agent
    fresh = DrQV2(env.obs_dims, env.action_dim, agent.cfg, action_low=env.ctrl_low, action_high=env.ctrl_high, seed=9)
    fresh.load_state_dict(agent.state_dict())
    assert fresh.env_steps == agent.env_steps == 40 and fresh.num_updates == agent.num_updates
    # a rollback restores the networks but keeps the data's count (the std schedule does not go back)
    fresh.env_steps = 99
    fresh.load_state_dict(agent.learned_state_dict())
    assert fresh.env_steps == 99
    obs = eval_env.reset()[0]
    torch.testing.assert_close(_fresh(fresh).act_inference(obs), _fresh(agent).act_inference(obs))


def _stored(agent: DrQV2) -> Batch:
    """Every sampleable transition of the agent's replay, in storage order."""
    if isinstance(agent.replay, FrameReplay):
        return agent.replay.gather(*agent.replay.sampleable())
    return agent.replay.gather(torch.arange(len(agent.replay)))


def _assert_same_batch(a: Batch, b: Batch) -> None:
    """Bit-for-bit equality of every field (dtypes included)."""
    for x, y in ((a.obs, b.obs), (a.next_obs, b.next_obs), (a.extras, b.extras)):
        assert sorted(x) == sorted(y)
        for g in x:
            assert x[g].dtype == y[g].dtype and torch.equal(x[g], y[g]), g
    for name in ("action", "reward", "terminated", "truncated"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and torch.equal(x, y), name


@pytest.mark.parametrize("replay", ["frames", "stacked"])
def test_checkpoint_carries_the_frame_stacks_and_n_step_windows(replay):
    def steps(agent: DrQV2, seeds: range) -> None:
        for i in seeds:
            b = _batch(2, seed=i)
            frames = {"image": b.obs["image"][..., :3], "critic": b.obs["critic"]}
            nxt = {"image": b.next_obs["image"][..., :3], "critic": b.next_obs["critic"]}
            agent.act(frames)
            agent.process(Transition(frames, b.action, b.reward, nxt, torch.tensor([i == 3, False]), b.truncated))

    agent = _agent(learning_starts=10**6, replay=replay)
    steps(agent, range(4))  # mid-episode: two pending windows per world, world 0 restarting
    resumed = _agent(learning_starts=10**6, replay=replay)
    resumed.load_state_dict(agent.state_dict())
    steps(agent, range(4, 7))
    steps(resumed, range(4, 7))
    assert len(resumed.replay) == len(agent.replay) > 0
    _assert_same_batch(_stored(resumed), _stored(agent))
    # the generator came along: the restored agent draws the same batches
    _assert_same_batch(resumed.sampler.sample(8), agent.sampler.sample(8))
    with pytest.raises(ValueError, match="replay: the checkpoint holds a"):
        _agent(replay="stacked" if replay == "frames" else "frames").load_state_dict(agent.state_dict())


def _stream(num_worlds: int, steps: int, seed: int, max_len: int = 6, size: int = SIZE):
    """Env-like steps: a continuing world's next frame is its next step's frame, an ended world's
    next frame is its final frame and its next step starts a new episode with a fresh first frame.
    Episodes of 1 to ``max_len`` steps, ended by termination or by time-out at random; actions are
    unique per world and step (they name the transition that starts there).
    """
    g = torch.Generator().manual_seed(seed)

    def frame() -> torch.Tensor:
        return torch.randint(0, 256, (num_worlds, size, size, 3), generator=g, dtype=torch.uint8)

    obs = {"image": frame(), "critic": torch.randn(num_worlds, 5, generator=g)}
    left = torch.randint(1, max_len + 1, (num_worlds,), generator=g)
    for _ in range(steps):
        action = torch.rand(num_worlds, 2, generator=g) * torch.tensor([2.0, 2.5]) - torch.tensor([1.0, 2.0])
        reward = torch.randn(num_worlds, generator=g)
        left = left - 1
        done = left == 0
        term = done & (torch.rand(num_worlds, generator=g) < 0.5)
        nxt = {"image": frame(), "critic": torch.randn(num_worlds, 5, generator=g)}
        final = {"image": frame(), "critic": torch.randn(num_worlds, 5, generator=g)}
        final_obs = {k: torch.where(done.view(-1, *[1] * (v.dim() - 1)), final[k], v) for k, v in nxt.items()}
        yield Transition(obs, action, reward, final_obs, term, done & ~term)
        left = torch.where(done, torch.randint(1, max_len + 1, (num_worlds,), generator=g), left)
        obs = nxt


def _by_action(batch: Batch) -> dict[tuple[float, ...], int]:
    return {tuple(a): i for i, a in enumerate(batch.action.tolist())}


def _rows(batch: Batch, rows: list[int]) -> Batch:
    idx = torch.tensor(rows, dtype=torch.long)
    return Batch(obs={k: v[idx] for k, v in batch.obs.items()}, action=batch.action[idx], reward=batch.reward[idx],
                 next_obs={k: v[idx] for k, v in batch.next_obs.items()}, terminated=batch.terminated[idx],
                 truncated=batch.truncated[idx], extras={k: v[idx] for k, v in batch.extras.items()})  # fmt: skip


@pytest.mark.parametrize(("num_worlds", "max_len", "critic"), [(3, 6, "critic"), (2, 2, None), (1, 40, None)])
def test_frame_replay_returns_the_stacked_replays_transitions_bit_for_bit(num_worlds, max_len, critic):
    # The frame replay wraps (24 transitions) while the stacked reference keeps everything; after
    # every step each sampleable transition must equal the reference's transition with that action.
    frames = _agent(buffer_size=24, critic_obs_group=critic, learning_starts=10**6)
    stacked = _agent(buffer_size=10_000, critic_obs_group=critic, replay="stacked", learning_starts=10**6)
    rp = frames.replay
    origin: dict[tuple[float, ...], tuple[int, int]] = {}
    restarts = 0
    for tr in _stream(num_worlds, 40, seed=num_worlds, max_len=max_len):
        for agent in (frames, stacked):
            agent.act(tr.obs)
            agent.process(tr)
        restarts += int((tr.terminated | tr.truncated).sum())
        origin.update({tuple(a): (w, rp.steps - 1) for w, a in enumerate(tr.action.tolist())})
        if len(stacked.replay) == 0:  # nothing complete yet
            assert len(rp) == 0
            continue
        world, step = rp.sampleable()
        got, ref = rp.gather(world, step), _stored(stacked)
        keys, where = _by_action(got), _by_action(ref)
        assert [origin[k] for k in keys] == list(zip(world.tolist(), step.tolist(), strict=True))  # keyed by start step
        _assert_same_batch(got, _rows(ref, [where[k] for k in keys]))
        # no sampleable transition references a frame slot that has been overwritten since
        idx = torch.cat([rp.store["obs"]["image"][world, step % rp.per_world],
                         rp.store["next_obs"]["image"][world, step % rp.per_world]], 1)  # fmt: skip
        written = rp.written[world].unsqueeze(1)
        assert bool(((idx >= written - rp.frames_per_world) & (idx < written)).all())
    assert rp.steps == 40 and rp.per_world == -(-24 // num_worlds) + 2 and rp.frames_per_world == rp.per_world + K + 4
    full = num_worlds * (rp.per_world - 2)  # the newest n - 1 start steps wait for their window to close
    assert len(rp) == full >= 24
    if max_len == 40:  # one episode in the window: nothing evicted early, every slot sampleable
        assert int(rp.valid_counts().sum()) == full
    if max_len == 2:  # an episode start every 1.5 steps: the frame ring gives up the oldest transitions
        assert restarts > 20 and 0 < int(rp.valid_counts().sum()) < full


def test_frame_replay_samples_uniformly_over_the_valid_transitions_without_host_syncs():
    agent = _agent(buffer_size=24, critic_obs_group="critic", batch_size=8)
    stream = _stream(3, 40, seed=7, max_len=3)
    for tr in (next(stream) for _ in range(30)):
        agent.act(tr.obs)
        agent.process(tr)
    with forbid_host_syncs(allowed=()):  # storing and sampling stay on the device
        for tr in stream:
            agent.act(tr.obs)
            agent.process(tr)
            agent.replay.sample(8, agent.generator)
        batch = agent.replay.sample(4000, agent.generator)
        with pytest.raises(HostSync):  # the guard is live: listing the valid transitions does sync
            agent.replay.sampleable()
    everything = _stored(agent)
    where = _by_action(everything)
    drawn = [where[tuple(a)] for a in batch.action.tolist()]  # only sampleable transitions are drawn
    _assert_same_batch(batch, _rows(everything, drawn))
    counts = torch.bincount(torch.tensor(drawn), minlength=len(where))
    assert len(where) >= 12 and int(counts.min()) > 0.4 * 4000 / len(where) and int(counts.max()) < 1.6 * 4000 / len(where)
    with pytest.raises(ValueError, match="replay: expected 'frames' or 'stacked', got 'ring'"):
        DrQV2Config(replay="ring")


def test_reacher_pixels_trains_through_the_runner_asymmetric_with_the_aux_loss(tmp_path):
    """The other pixel task (a free camera over Gymnasium's Reacher, 2-D torque), with the critic on
    its 10-D state and the auxiliary state loss: the runner stores, updates and evaluates."""
    env = robolearn.make("Reacher-Pixels", 2, seed=0, **SMALL_IMAGES)
    agent = DrQV2(env.obs_dims, env.action_dim, DrQV2Config(**{**TINY, "learning_starts": 10}, critic_obs_group="critic",
                                                            aux_state_weight=1.0),
                  action_low=env.ctrl_low, action_high=env.ctrl_high, seed=0)  # fmt: skip
    rcfg = RunnerConfig(total_env_steps=20, steps_per_iteration=10, eval_interval=2, checkpoint_interval=4,
                        video=False, console=False, tensorboard=False)  # fmt: skip
    eval_env = robolearn.make("Reacher-Pixels", 1, seed=3, episode_length=10, **SMALL_IMAGES)
    OffPolicyRunner(env, agent, rcfg, tmp_path / "run", eval_env=eval_env).learn()
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert "train/loss_aux_state" in header and "eval/return" in header
    assert agent.num_updates > 0 and agent.actor.aux.out_features == env.obs_dims["critic"] == 10
    assert agent.act_inference(env.reset()[0]).shape == (2, 2)
