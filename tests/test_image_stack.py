"""Frame stacking of an image group in the env (``ObsGroup.history_length`` on ``[N, H, W, C]``):
the stack against stacks built by hand from an unstacked env's frames over a sequence with a
partial reset of one world, uint8 end to end, a full reset, the checkpointed window, validation,
the policy spec and export image input, and DrQ-v2 reading an env-stacked group.
"""

from __future__ import annotations

import pytest
import torch

import robolearn
from robolearn.algos.drqv2 import DrQV2, DrQV2Config
from robolearn.algos.drqv2.agent import FrameStack
from robolearn.envs import BatchedEnv
from robolearn.envs.cfg import TerminationTerm
from robolearn.envs.managers import ImageStack
from robolearn.envs.spec import read_policy_spec
from robolearn.export.vision import image_input_of
from robolearn.spec.manifest import ImageInputSpec, SpecError
from robolearn.tasks.classic.pixels import cartpole_swingup_pixels_cfg

SIZE = 16  # tiny frames: the software rasteriser is the cost of these tests
K = 3
STEPS = 7
RESET_AT = 3  # world 1 terminates at this step (counted from 1), worlds 0 and 2 go on


def _kick(env: BatchedEnv) -> torch.Tensor:
    """World 1 ends its episode at control step RESET_AT: a partial reset by index mid-sequence."""
    done = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    done[1] = env.common_step_counter == RESET_AT
    return done


def _env(history: int) -> BatchedEnv:
    cfg = cartpole_swingup_pixels_cfg(size=SIZE)
    cfg.observations["image"].history_length = history
    cfg.terminations["kick"] = TerminationTerm(func=_kick)
    return BatchedEnv(cfg, 3, seed=0)


def _actions() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.rand(3, 1, generator=gen) * 2 - 1 for _ in range(STEPS)]


def _by_hand(frames: list[torch.Tensor], starts: list[torch.Tensor]) -> list[torch.Tensor]:
    """Stacks ``[3, H, W, K*3]`` from per-step frames: world ``i`` at step ``t`` holds the frames of
    steps ``max(t - K + 1 + j, start)`` for ``j`` in ``0..K-1``, where its episode started at ``start``.
    """
    out = []
    for t, frame in enumerate(frames):
        rows = []
        for i in range(frame.shape[0]):
            start = int(starts[t][i])
            rows.append(torch.cat([frames[max(t - K + 1 + j, start)][i] for j in range(K)], dim=-1))
        out.append(torch.stack(rows))
    return out


def test_env_stack_matches_stacks_built_by_hand_across_a_partial_reset():
    plain, stacked = _env(0), _env(K)
    obs_p, _ = plain.reset()
    obs_s, _ = stacked.reset()
    assert obs_s["image"].dtype == torch.uint8 and obs_s["image"].shape == (3, SIZE, SIZE, 3 * K)
    assert stacked.obs_shapes["image"] == (SIZE, SIZE, 3 * K) and stacked.obs_dims["image"] == SIZE * SIZE * 3 * K
    frames, starts, got = [obs_p["image"]], [torch.zeros(3, dtype=torch.long)], [obs_s["image"]]
    final = None
    for t, action in enumerate(_actions(), start=1):
        obs_p, _, term_p, _, _ = plain.step(action)
        obs_s, _, term_s, _, info = stacked.step(action)
        assert torch.equal(term_p, term_s) and term_s.tolist() == [False, t == RESET_AT, False]
        if t == RESET_AT:
            final = info["final_obs"]["image"][1]
        frames.append(obs_p["image"])
        start = starts[-1].clone()
        start[term_p] = t  # the world's new episode starts with this observation
        starts.append(start)
        got.append(obs_s["image"])
        assert obs_s["image"].dtype == torch.uint8
    want = _by_hand(frames, starts)
    for t, (g, w) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(g, w), f"step {t}"
    # The frames move (the stack is not trivially constant), and the reset world restarted: right
    # after its reset its stack is three copies of its new first frame, which differs from the
    # last frame of its old episode (a stack shifted without the restart would hold that one).
    assert not torch.equal(frames[0], frames[STEPS])
    fresh = got[RESET_AT][1]
    assert torch.equal(fresh[..., :3], fresh[..., 6:]) and torch.equal(fresh[..., :3], frames[RESET_AT][1])
    assert not torch.equal(frames[RESET_AT][1], frames[RESET_AT - 1][1])
    # The final observation of the ended episode is its own last three frames, before the restart.
    assert final is not None
    # final_obs is the observation at the ending state; frames[RESET_AT] is the new episode's first.
    assert torch.equal(final[..., :6], torch.cat([frames[RESET_AT - 2][1], frames[RESET_AT - 1][1]], dim=-1))


def test_full_reset_restarts_every_stack_and_the_window_is_checkpointed():
    env = _env(K)
    env.reset()
    for action in _actions()[:2]:
        env.step(action)
    state = env.state_dict()
    window = env.observation_manager.history_state()["image"]
    assert window.dtype == torch.uint8 and window.shape == (3, SIZE, SIZE, 3 * K)
    obs, _ = env.reset()
    image = obs["image"]
    for j in range(1, K):  # every slot holds the first frame of the new episodes
        assert torch.equal(image[..., 3 * j : 3 * j + 3], image[..., :3])
    env.load_state_dict(state)
    assert torch.equal(env.observation_manager.history_state()["image"], window)


def test_image_stack_keeps_dtype_and_refills_rows():
    stack = ImageStack(2)
    a = torch.arange(2 * 1 * 1 * 3, dtype=torch.uint8).reshape(2, 1, 1, 3)
    first = stack(a)
    assert first.dtype == torch.uint8 and torch.equal(first, torch.cat([a, a], dim=-1))
    b = a + 10
    second = stack(b, restart=torch.tensor([False, True]))
    assert torch.equal(second[0], torch.cat([a[0], b[0]], dim=-1))
    assert torch.equal(second[1], torch.cat([b[1], b[1]], dim=-1))
    assert torch.equal(first, torch.cat([a, a], dim=-1))  # an earlier observation is never written to
    c = a + 20
    refilled = stack(c[1:], rows=torch.tensor([1]))
    assert torch.equal(refilled[0], torch.cat([c[1], c[1]], dim=-1))
    assert torch.equal(stack.window[0], second[0]) and torch.equal(stack.window[1], refilled[0])
    with pytest.raises(ValueError, match="history_length"):
        ImageStack(1)


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_bad_history_length_names_the_field(bad):
    with pytest.raises(ValueError, match=r"observations\.image\.history_length"):
        robolearn.make("Cartpole-Swingup-Pixels", 1, observations__image__history_length=bad,
                       observations__image__terms__rgb__params__width=SIZE,
                       observations__image__terms__rgb__params__height=SIZE)  # fmt: skip


def test_policy_spec_and_export_describe_the_env_stack():
    env = _env(K)
    spec = read_policy_spec(env)
    group = spec.observations["image"]
    # One frame [H, W, C] and the stack's length: the manifest's view of a stacked image input.
    assert group.shape == (SIZE, SIZE, 3) and group.history_length == K and group.frame_dim == SIZE * SIZE * 3
    agent = DrQV2(env.obs_dims, env.action_dim, DrQV2Config(frame_stack=1, image_channels=3 * K, cnn_channels=4,
                  feature_dim=8, hidden_dim=16), action_low=env.ctrl_low, action_high=env.ctrl_high)  # fmt: skip
    image = image_input_of(agent.encoder)
    assert image.frames == K and image.shape == (SIZE, SIZE, 3 * K) and image.frame_shape == (SIZE, SIZE, 3)
    image.validate("images[0]", spec)  # raises if the group is not one frame of the input
    # An input of one frame (or of an agent-side stack on top of the env's) is not what was learnt.
    single = ImageInputSpec("image", (SIZE, SIZE, 3), "HWC", frames=1)
    with pytest.raises(SpecError, match=r"history_length = 3 frames, got frames=1"):
        single.validate("images[0]", spec)


def test_drqv2_on_an_env_stacked_group_sees_what_its_own_frame_stack_builds():
    """frame_stack=1 on an env stacked K times feeds the encoder the [H, W, 3K] tensor an agent
    with frame_stack=K builds from the unstacked env (restarts included)."""
    plain, stacked = _env(0), _env(K)
    tiny = {"cnn_channels": 4, "feature_dim": 8, "hidden_dim": 16}
    agent = DrQV2(stacked.obs_dims, stacked.action_dim, DrQV2Config(frame_stack=1, image_channels=3 * K, **tiny),
                  action_low=stacked.ctrl_low, action_high=stacked.ctrl_high)  # fmt: skip
    seen: list[torch.Tensor] = []
    agent.encoder.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    reference = FrameStack(K)
    obs_p, _ = plain.reset()
    obs_s, _ = stacked.reset()
    for action in _actions()[:5]:
        agent.act_inference(obs_s)
        want = reference.push(obs_p["image"])
        assert seen[-1].dtype == torch.uint8 and torch.equal(seen[-1], want)
        obs_p, _, term, trunc, _ = plain.step(action)
        obs_s, *_ = stacked.step(action)
        reference.reset(term | trunc)
    assert len(seen) == 5
