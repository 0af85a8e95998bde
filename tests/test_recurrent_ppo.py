"""Recurrent PPO and the history encoder: hidden states restart exactly at episode ends (agent and
evaluation rollout), truncated-BPTT chunks reproduce the rollout's step-by-step outputs, the
deployable module steps like ``act_inference``, checkpoints continue identically, and memory
solves a task a feed-forward policy cannot."""

from __future__ import annotations

import copy
import io

import pytest
import torch

from robolearn.algos import PPO, PPOConfig
from robolearn.algos.ppo.losses import masked_mean, ppo_loss
from robolearn.data.rollout import ChunkBatch, RolloutStorage
from robolearn.nn.recurrent import HistoryEncoder, Memory, RecurrentPolicy, reset_state
from robolearn.runners.rollout import rollout
from robolearn.types import Resettable, Transition

MEMORIES = ["gru", "lstm"]


class CueEnv:
    """A memory toy: a +-1 cue is visible (``policy``) only at an episode's first step; every step pays
    ``-(action - cue)^2``. World ``i`` runs episodes of ``base + i % 3`` steps (so worlds end at
    different times); worlds ``i % 4 == 0`` end terminated, the others truncated. The critic group
    always shows the cue and the episode clock (an asymmetric critic). With ``frames``, a ``history``
    group stacks the last ``frames`` policy frames, oldest first (a restarted world's window is filled
    with its first frame, as :class:`robolearn.spec.processors.History` does).

    A feed-forward policy on ``policy`` cannot beat ``a = 0`` after the first step (expected ``-1``
    per step there); a policy with memory, or with a history as long as an episode, can reach ``0``.
    """

    def __init__(self, num_envs: int = 16, seed: int = 0, base: int = 6, frames: int = 0) -> None:
        self.num_envs, self.frames = num_envs, frames
        self.window = torch.zeros(num_envs, max(frames, 1), 2)
        self.device = torch.device("cpu")
        self.gen = torch.Generator().manual_seed(seed)
        self.lengths = base + torch.arange(num_envs) % 3
        self.max_episode_length = int(self.lengths.max())
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.cue = torch.zeros(num_envs)

    def _frame(self) -> torch.Tensor:
        first = (self.t == 0).float()
        return torch.stack([self.cue * first, first], -1)

    @property
    def obs(self) -> dict[str, torch.Tensor]:
        out = {
            "policy": self._frame(),
            "critic": torch.stack([self.cue, self.t.float() / self.max_episode_length], -1),
        }
        if self.frames:
            out["history"] = self.window.flatten(1).clone()
        return out

    def _draw(self, ids: torch.Tensor) -> None:
        self.cue[ids] = torch.randint(0, 2, (len(ids),), generator=self.gen).float() * 2 - 1
        self.t[ids] = 0
        self.window[ids] = self._frame()[ids].unsqueeze(1)

    def _push(self) -> None:
        self.window = torch.cat([self.window[:, 1:], self._frame().unsqueeze(1)], dim=1)

    def reset(self, seed: int | None = None) -> tuple[dict[str, torch.Tensor], dict]:
        if seed is not None:
            self.gen.manual_seed(seed)
        self._draw(torch.arange(self.num_envs))
        return self.obs, {}

    def step(self, action: torch.Tensor):
        reward = -(action[:, 0].clamp(-2.0, 2.0) - self.cue).square()
        self.t += 1
        self._push()
        done = self.t >= self.lengths
        ids = torch.arange(self.num_envs)
        terminated, truncated = done & (ids % 4 == 0), done & (ids % 4 != 0)
        final = self.obs
        self._draw(torch.nonzero(done).flatten())
        return self.obs, reward, terminated, truncated, {"final_obs": final}


def _cfg(memory: str = "gru", **overrides: object) -> PPOConfig:
    base: dict[str, object] = dict(
        num_steps=16, num_epochs=4, num_minibatches=4, gamma=0.9, lam=0.95, learning_rate=3e-3,
        actor_hidden=(32,), critic_hidden=(32,), init_noise_std=0.5, memory=memory, memory_hidden=32,
        bptt_length=8, critic_obs_group="critic", entropy_coef=0.0,
    )
    base.update(overrides)
    return PPOConfig(**base)  # type: ignore[arg-type]


def _agent(memory: str = "gru", seed: int = 0, frames: int = 0, **overrides: object) -> PPO:
    torch.manual_seed(seed)
    dims = {"policy": 2, "critic": 2, **({"history": 2 * frames} if frames else {})}
    return PPO(dims, 1, _cfg(memory, seed=seed, **overrides))


def _collect(ppo: PPO, env: CueEnv, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    for _ in range(ppo.cfg.num_steps):
        action = ppo.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        ppo.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        obs = next_obs
    ppo.compute_returns(obs)
    return obs


# -- the memory and its resets ------------------------------------------------------------------


@pytest.mark.parametrize("kind", MEMORIES)
def test_memory_shapes_and_sequence_with_resets_equals_stepping(kind):
    torch.manual_seed(0)
    mem = Memory(kind, 3, 5, num_layers=2)
    assert mem.state_names == (("h",) if kind == "gru" else ("h", "c"))
    assert mem.state_shapes == tuple((2, 5) for _ in mem.state_names)
    state = tuple(torch.randn(4, 2, 5) for _ in mem.state_names)
    x = torch.randn(6, 4, 3)
    resets = torch.zeros(6, 4, dtype=torch.bool)
    resets[2, 1] = resets[4, 3] = True
    out, final = mem.sequence(x, state, resets)
    assert out.shape == (6, 4, 5)
    # The same by hand: restart a row from zeros just before the flagged step.
    s = state
    for t in range(6):
        s = tuple(torch.where(resets[t].reshape(4, 1, 1), torch.zeros_like(v), v) for v in s)
        y, s = mem.step(x[t], s)
        torch.testing.assert_close(out[t], y, rtol=0, atol=1e-6)
    for a, b in zip(final, s, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # The reset matters: without it row 1 differs from step 2 on.
    unreset, _ = mem.sequence(x, state, None)
    assert (unreset[2:, 1] - out[2:, 1]).abs().max() > 1e-3
    torch.testing.assert_close(unreset[:, 0], out[:, 0])


def test_reset_state_zeroes_exactly_the_done_rows():
    state = (torch.arange(24.0).reshape(3, 2, 4) + 1, -torch.ones(3, 2, 4))
    new = reset_state(state, torch.tensor([False, True, False]))
    for before, after in zip(state, new, strict=True):
        assert torch.equal(after[1], torch.zeros(2, 4))
        assert torch.equal(after[[0, 2]], before[[0, 2]])


@pytest.mark.parametrize("kind", MEMORIES)
def test_process_restarts_the_hidden_state_of_ended_worlds_only(kind):
    ppo = _agent(kind)
    env = CueEnv(8, seed=1)
    obs, _ = env.reset()
    saw_end = False
    for _ in range(10):
        action = ppo.act(obs)
        after = {owner: tuple(t.clone() for t in s) for owner, s in ppo._pending["next_hidden"].items()}
        next_obs, reward, terminated, truncated, info = env.step(action)
        ppo.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
        done = terminated | truncated
        saw_end |= bool(done.any())
        for owner in ("actor", "critic"):
            for stepped, kept in zip(after[owner], ppo._hidden[owner], strict=True):
                assert torch.equal(kept[done], torch.zeros_like(kept[done]))
                assert torch.equal(kept[~done], stepped[~done])
                assert bool((stepped[~done] != 0).any())
        obs = next_obs
    assert saw_end


def test_reset_verb_restarts_act_inference_state():
    ppo = _agent("lstm")
    assert isinstance(ppo, Resettable)
    obs = {"policy": torch.randn(4, 2), "critic": torch.randn(4, 2)}
    ppo.act_inference(obs)
    before = tuple(t.clone() for t in ppo._inference_hidden)
    ppo.reset(torch.tensor([True, False, False, True]))
    for b, a in zip(before, ppo._inference_hidden, strict=True):
        assert torch.equal(a[[0, 3]], torch.zeros_like(a[[0, 3]]))
        assert torch.equal(a[[1, 2]], b[[1, 2]])


# -- truncated BPTT -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MEMORIES)
def test_bptt_chunks_reproduce_the_rollout_step_by_step(kind):
    """10 steps in chunks of 4 (the last chunk padded by 2), episodes ending inside chunks: the re-run
    from stored chunk-start states gives the collection-time means, log-probs and values."""
    ppo = _agent(kind, num_steps=10, bptt_length=4)
    env = CueEnv(6, seed=2, base=3)
    obs, _ = env.reset()
    _collect(ppo, env, obs)
    storage = ppo.storage
    assert storage.num_chunks == 3
    batches = list(storage.chunk_batches(1, 1, torch.Generator().manual_seed(0)))
    assert len(batches) == 1
    batch = batches[0]
    assert isinstance(batch, ChunkBatch) and batch.actions.shape == (4, 18, 1)
    assert bool(batch.resets.any()) and bool((~batch.valid).any())
    assert int(batch.valid.sum()) == 10 * 6
    with torch.no_grad():
        mean, values = ppo._forward_batch(batch)
        log_probs = ppo.dist.log_prob(mean, ppo.dist.std(mean), batch.actions)
    v = batch.valid
    torch.testing.assert_close(mean[v], batch.action_mean[v], rtol=0, atol=1e-6)
    torch.testing.assert_close(values[v], batch.values[v], rtol=0, atol=1e-6)
    torch.testing.assert_close(log_probs[v], batch.log_probs[v], rtol=0, atol=1e-5)
    # Without the in-chunk restarts the memory's outputs would differ: the masks are doing the work.
    start = ppo._unflat_hidden(batch.hidden)
    with torch.no_grad():
        features = ppo._actor_features(batch.obs["actor"])
        unreset, _ = ppo.actor_memory.sequence(features, start["actor"], None)
        reset, _ = ppo.actor_memory.sequence(features, start["actor"], batch.resets)
    assert (unreset[v] - reset[v]).abs().max() > 1e-3
    # An update over padded chunks stays finite (padding neither enters the means nor makes NaNs).
    before = [p.detach().clone() for p in ppo.actor_memory.parameters()]
    stats = ppo.update()
    assert all(bool(torch.isfinite(value)) for value in stats.values()), stats
    assert any(not torch.equal(b, p) for b, p in zip(before, ppo.actor_memory.parameters(), strict=True))


def test_chunk_batches_cover_every_step_once_and_padding_is_masked():
    st = RolloutStorage(5, 3, {"policy": 1}, 1, hidden_shapes={"h": (1, 2)}, chunk_length=2)
    for t in range(5):
        st.add(
            {"policy": torch.full((3, 1), float(t))}, torch.zeros(3, 1), torch.zeros(3),
            torch.tensor([False, t == 1, False]), torch.tensor([t == 2, False, False]),
            torch.zeros(3), torch.zeros(3), torch.zeros(3, 1), torch.ones(3, 1),
            hidden={"h": torch.full((3, 1, 2), 10.0 * t) + torch.arange(3.0).reshape(3, 1, 1)},
        )
    st.compute_returns(torch.zeros(3), 0.9, 0.9)
    (batch,) = st.chunk_batches(1, 1, torch.Generator().manual_seed(0))
    assert batch.obs["policy"].shape == (2, 9, 1)
    steps = batch.obs["policy"][..., 0][batch.valid]
    assert sorted(steps.tolist()) == sorted([float(t) for t in range(5) for _ in range(3)])
    assert int((~batch.valid).sum()) == 3  # one padded step per world
    # Chunk-start states: chunk c of world n starts at step 2c with state 10*2c + n.
    first = batch.obs["policy"][0, :, 0]
    torch.testing.assert_close(batch.hidden["h"][:, 0, 0], 10.0 * first + _world_of(batch, st))
    # World 1 ended at step 1 (inside chunk 0, nothing after it in that chunk); world 0 at step 2, the
    # first step of chunk 1: its reset is at step 3, inside that chunk.
    resets = batch.resets & batch.valid
    flagged = sorted(
        (int(batch.obs["policy"][t, b, 0]), int(_world_of(batch, st)[b])) for t, b in torch.nonzero(resets).tolist()
    )
    assert flagged == [(3, 0)]
    with pytest.raises(ValueError, match="num_minibatches"):
        next(st.chunk_batches(1, 10))


def _world_of(batch: ChunkBatch, st: RolloutStorage) -> torch.Tensor:
    # A chunk's start state encodes its world in the fractional part we added: state - 10 * step.
    return batch.hidden["h"][:, 0, 0] - 10.0 * batch.obs["policy"][0, :, 0]


def test_masked_losses_ignore_padding_and_equal_plain_means_without_mask():
    torch.manual_seed(0)
    args = [torch.randn(6) for _ in range(6)] + [torch.rand(6)]
    plain = ppo_loss(*args, 0.2, True, 1.0, 0.01)
    mask = torch.tensor([True, True, True, False, True, False])
    masked = ppo_loss(*args, 0.2, True, 1.0, 0.01, mask=mask)
    kept = ppo_loss(*(a[mask] for a in args), 0.2, True, 1.0, 0.01)
    for name in plain:
        torch.testing.assert_close(masked[name], kept[name])
    assert masked_mean(torch.tensor([1.0, 3.0, 100.0]), torch.tensor([True, True, False])) == 2.0
    assert masked_mean(torch.tensor([1.0, 3.0, float("inf")]), torch.tensor([True, True, False])) == 2.0
    assert torch.equal(masked_mean(args[0]), args[0].mean())


# -- deployable module, evaluation rollout, checkpoints ------------------------------------------


@pytest.mark.parametrize("kind", MEMORIES)
def test_policy_module_contract_and_trace(kind):
    ppo = _agent(kind)
    module = ppo.policy_module()
    assert isinstance(module, RecurrentPolicy) and not module.training and module.obs_groups == ("policy",)
    assert module.state_names == (("h",) if kind == "gru" else ("h", "c"))
    assert module.state_shapes == tuple((1, 32) for _ in module.state_names)
    states = module.initial_state(3)
    assert all(torch.equal(s, torch.zeros(3, 1, 32)) for s in states)
    obs = torch.randn(3, 2)
    out = module(obs, *states)
    assert len(out) == 1 + len(states) and out[0].shape == (3, 1)
    traced = torch.jit.trace(module, (obs, *states))
    obs2 = torch.randn(5, 2)
    states2 = tuple(torch.randn(5, 1, 32) for _ in states)
    for a, b in zip(traced(obs2, *states2), module(obs2, *states2), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kind", MEMORIES)
def test_evaluation_rollout_restarts_state_at_episode_ends_like_the_module(kind):
    """``rollout(env, ppo.act_inference)`` (what the runner's evaluation calls) equals stepping the
    exported module and restarting a world's state exactly when its episode ends."""
    ppo = _agent(kind)
    env = CueEnv(6, seed=3, base=3)
    obs, _ = env.reset()
    _collect(ppo, env, obs)
    ppo.update()  # weights away from their init, normaliser statistics in use
    ppo.act_inference({"policy": torch.randn(6, 2), "critic": torch.randn(6, 2)})  # stale state to clear

    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    rollout(CueEnv(6, seed=4, base=3), ppo.act_inference, episodes=12, max_steps=20,
            on_step=lambda s: seen.append((s.obs["policy"].clone(), s.action.clone(), s.terminated | s.truncated)))
    assert any(bool(done.any()) and not bool(done.all()) for *_, done in seen)

    module = ppo.policy_module()
    states = module.initial_state(6)
    with torch.no_grad():  # the rollout's tensors are inference tensors
        for obs_t, action, done in seen:
            mine, *states = module(obs_t, *states)
            torch.testing.assert_close(mine, action, rtol=0, atol=1e-6)
            states = [torch.where(done.reshape(6, 1, 1), torch.zeros_like(s), s) for s in states]

    # A loop that never restarts the state acts differently after the first episode end.
    stale: list[torch.Tensor] = []
    rollout(CueEnv(6, seed=4, base=3), ppo.act_inference, episodes=12, max_steps=20, reset_state=lambda d: None,
            on_step=lambda s: stale.append(s.action.clone()))
    assert max(float((a - b[1]).abs().max()) for a, b in zip(stale, seen, strict=True)) > 1e-4


@pytest.mark.parametrize("kind", MEMORIES)
def test_state_dict_round_trip_continues_identically(kind):
    ppo = _agent(kind)
    env = CueEnv(8, seed=5)
    obs, _ = env.reset()
    obs = _collect(ppo, env, obs)
    ppo.update()
    ppo.act_inference(obs)
    buf = io.BytesIO()
    torch.save(ppo.state_dict(), buf)
    buf.seek(0)
    other = _agent(kind, seed=7)  # different init: everything must come from the checkpoint
    other.load_state_dict(torch.load(buf, weights_only=False))
    assert torch.equal(ppo.act_inference(obs), other.act_inference(obs))  # inference state restored too

    results = []
    for agent in (ppo, other):
        e = copy.deepcopy(env)
        torch.manual_seed(11)
        o = _collect(agent, e, obs)
        actions = agent.storage.actions.clone()
        stats = agent.update()
        results.append((actions, stats, agent.act_inference(o)))
    (a0, s0, i0), (a1, s1, i1) = results
    assert torch.equal(a0, a1) and torch.equal(i0, i1)
    for name in s0:
        assert torch.equal(s0[name], s1[name]), name


# -- configuration and the history encoder -------------------------------------------------------


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="memory: unknown 'rnn'"):
        PPOConfig(memory="rnn")
    with pytest.raises(ValueError, match="bptt_length"):
        PPOConfig(memory="gru", bptt_length=0)
    assert PPOConfig(num_steps=24, bptt_length=100).chunk_length == 24
    assert PPOConfig(num_steps=24).chunk_length == 24 and PPOConfig(num_steps=24, bptt_length=5).chunk_length == 5
    with pytest.raises(ValueError, match="history_frames"):
        PPOConfig(history_encoder="conv")
    with pytest.raises(ValueError, match="history_frames: 4 does not divide"):
        PPO({"policy": 3, "history": 10}, 1, PPOConfig(history_encoder="conv", history_frames=4))
    with pytest.raises(ValueError, match="history_obs_group"):
        PPO({"policy": 3}, 1, PPOConfig(history_encoder="conv", history_frames=4))
    with pytest.raises(ValueError, match="history_kernel: 5"):
        HistoryEncoder(3, 4, 2, (8,), kernel_size=5)


def test_history_encoder_shapes_and_frame_order():
    torch.manual_seed(0)
    enc = HistoryEncoder(policy_dim=3, frames=6, frame_dim=2, channels=(4, 5), kernel_size=3)
    assert enc.in_dim == 3 + 12 and enc.out_dim == 3 + 5 * 2
    x = torch.randn(7, 15)
    y = enc(x)
    assert y.shape == (7, 13)
    torch.testing.assert_close(y[:, :3], x[:, :3])  # the policy features pass through
    assert enc(x.reshape(7, 1, 15)).shape == (7, 1, 13)  # any leading dims
    # Frames are read oldest first, frame-major ([f0 | f1 | ...]): the conv sees feature channels.
    frames = x[:, 3:].reshape(7, 6, 2).transpose(1, 2)
    torch.testing.assert_close(y[:, 3:], enc.conv(frames).flatten(1))


@pytest.mark.parametrize("memory", ["none", "gru"])
def test_history_policy_module_reads_policy_then_history(memory):
    torch.manual_seed(0)
    cfg = PPOConfig(history_encoder="conv", history_frames=4, history_channels=(8,), history_kernel=2,
                    actor_hidden=(16,), critic_hidden=(16,), memory=memory, memory_hidden=8, num_steps=4)
    ppo = PPO({"policy": 3, "history": 8, "critic": 5}, 2, cfg)
    obs = {"policy": torch.randn(5, 3), "history": torch.randn(5, 8), "critic": torch.randn(5, 5)}
    ppo.act(obs)  # updates the normaliser
    module = ppo.policy_module()
    assert module.obs_groups == ("policy", "history") == ppo.actor_obs_groups
    flat = torch.cat([obs["policy"], obs["history"]], -1)
    if memory == "none":
        assert not hasattr(module, "state_names")
        torch.testing.assert_close(module(flat), ppo.act_inference(obs))
        traced = torch.jit.trace(module, (flat,))
        torch.testing.assert_close(traced(flat), module(flat))
    else:
        action, _ = module(flat, *module.initial_state(5))
        torch.testing.assert_close(action, ppo.act_inference(obs))


# -- learning --------------------------------------------------------------------------------------


def _learn_cue(memory: str, iterations: int, seed: int, frames: int = 0, **overrides: object) -> float:
    """Mean per-step reward of the deterministic policy on fresh worlds after training."""
    ppo = _agent(memory, seed=seed, frames=frames, **overrides)
    env = CueEnv(64, seed=seed, frames=frames)
    obs, _ = env.reset()
    for _ in range(iterations):
        obs = _collect(ppo, env, obs)
        ppo.update()
    result = rollout(CueEnv(64, seed=100 + seed, frames=frames), ppo.act_inference, seed=5)
    return float(result.returns.sum() / result.lengths.sum())


# Measured (`_learn_cue(kind, 15, seed)`, 15 updates of 64 x 16 steps, one loaded CPU thread, ~5 s
# each), mean per-step reward for seeds 0 / 1 / 2: GRU -0.008 / -0.0004 / -0.001, LSTM -0.005 /
# -0.0008 / -0.007, history conv (8 frames) -0.019 (seeds 1, 2); the feed-forward policy -0.86 /
# -0.86 / -0.87 (its bound: -1 per step after the cue, ~-0.86 per step over these episode lengths).
# The thresholds -0.2 and -0.7 sit far from both.
@pytest.mark.parametrize("memory", MEMORIES)
def test_memory_solves_a_task_a_feed_forward_policy_cannot(memory):
    assert _learn_cue(memory, 15, seed=0) > -0.2


def test_a_feed_forward_policy_cannot_solve_the_cue_task():
    """The control, with the same budget and settings: the feed-forward policy stays near its bound."""
    assert _learn_cue("none", 15, seed=0) < -0.7


def test_history_encoder_solves_the_cue_task_from_its_window():
    """8 frames cover a whole episode (6-8 steps): the conv encoder finds the cue in the window."""
    conv = dict(history_encoder="conv", history_frames=8, history_channels=(16,), history_kernel=3)
    assert _learn_cue("none", 15, seed=0, frames=8, **conv) > -0.2


def _cartpole_positions_task(frames: int):
    """Cartpole-Balance (200 steps) whose actor sees positions only: ``policy`` is cart position and
    pole cos/sin, ``history`` the last ``frames`` of them; the critic sees the full state."""
    from robolearn.envs import ObsGroup
    from robolearn.tasks.classic.cartpole import cartpole_balance_cfg

    cfg = cartpole_balance_cfg()
    terms = cfg.observations["policy"].terms
    positions = {k: terms[k] for k in ("cart_pos", "pole_cos_sin")}
    cfg.observations = {
        "policy": ObsGroup(terms=dict(positions)),
        "history": ObsGroup(terms=dict(positions), history_length=frames),
        "critic": ObsGroup(terms=dict(terms)),
    }
    cfg.episode_length = 200
    return cfg


def _cartpole_eval(ppo: PPO, frames: int) -> float:
    """Mean per-step reward of the deterministic policy over one 200-step episode of 16 worlds."""
    from robolearn.envs.batched_env import BatchedEnv

    env = BatchedEnv(_cartpole_positions_task(frames), 16, seed=123, nthread=1)
    result = rollout(env, lambda obs: ppo.act_inference(obs).clamp(-1.0, 1.0), seed=123)
    return float(result.returns.sum() / result.lengths.sum())


# Measured (100 updates of 32 x 32 steps, seed 0, one loaded CPU thread, ~90 s): before 0.70, after
# 0.985 (`OMP_NUM_THREADS=1 python try_cart.py conv 100 0`, the loop below). For the record: on this
# task positions alone suffice (the feed-forward policy reached 0.997, a GRU 0.91 in the same
# budget), so it shows that the encoder learns, not that history is needed; the cue task shows that.
@pytest.mark.slow
def test_history_encoder_learns_cartpole_balance_from_positions():
    from robolearn.envs.batched_env import BatchedEnv

    frames = 4
    torch.manual_seed(0)
    env = BatchedEnv(_cartpole_positions_task(frames), 32, seed=0, nthread=1)
    cfg = PPOConfig(
        num_steps=32, num_epochs=5, num_minibatches=4, actor_hidden=(64, 64), critic_hidden=(64, 64),
        entropy_coef=0.0, init_noise_std=0.5, gamma=0.98, max_learning_rate=3e-3, critic_obs_group="critic",
        history_encoder="conv", history_frames=frames, history_channels=(16,), history_kernel=2,
    )
    ppo = PPO(env.obs_dims, env.action_dim, cfg)
    before = _cartpole_eval(ppo, frames)
    obs, _ = env.reset()
    for _ in range(100):
        for _ in range(cfg.num_steps):
            action = ppo.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(action.clamp(-1.0, 1.0))
            ppo.process(Transition(obs, action, reward, info["final_obs"], terminated, truncated))
            obs = next_obs
        ppo.compute_returns(obs)
        ppo.update()
    after = _cartpole_eval(ppo, frames)
    assert after > before + 0.15 and after > 0.9, (before, after)


# -- the runner -------------------------------------------------------------------------------------


def _runner_run(run_dir, iterations: int, resume: bool = False):
    import robolearn
    from robolearn.runners import OnPolicyRunner, RunnerConfig

    torch.manual_seed(0)
    env = robolearn.make("Cartpole-Balance", 8, seed=0, episode_length=20)  # episodes end inside rollouts
    eval_env = robolearn.make("Cartpole-Balance", 3, seed=1, episode_length=12)
    cfg = PPOConfig(num_steps=12, bptt_length=5, actor_hidden=(16,), critic_hidden=(16,), memory="lstm",
                    memory_hidden=8, num_minibatches=2, seed=0)
    agent = PPO(env.obs_dims, env.action_dim, cfg)
    runner_cfg = RunnerConfig(total_env_steps=8 * 12 * iterations, eval_interval=1, eval_steps=30, checkpoint_interval=1,
                              video=False, console=False, tensorboard=False)
    runner = OnPolicyRunner(env, agent, runner_cfg, run_dir, eval_env=eval_env)
    runner.learn(resume=resume)
    return runner


def test_runner_resume_of_a_recurrent_run_continues_exactly(tmp_path):
    """Evaluations (several episodes per eval world, so the reset verb runs) and a resume from a
    checkpoint taken mid-episode reproduce the uninterrupted run's metrics."""
    import csv

    _runner_run(tmp_path / "a", 4)
    _runner_run(tmp_path / "b", 2)
    _runner_run(tmp_path / "b", 4, resume=True)

    def rows(run):
        with (run / "metrics.csv").open() as fh:
            return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in csv.DictReader(fh)]

    expected, got = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert len(expected) == 4 and got == expected
    assert len({r["eval/return"] for r in expected}) > 1
