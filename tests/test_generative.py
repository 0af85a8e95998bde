"""Generative chunk models (robolearn.nn.generative) and chunk execution (robolearn.spec.chunking).

Samplers are deterministic functions of their noise; DDIM, Euler flow and shortcut sampling are
checked against hand-computed chains; the executor's execute-k order, ACT's temporal-ensembling
weights, resets and observation-history padding against hand-written sequences.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from robolearn.nn.generative import (
    SHORTCUT_LOG2_STEPS,
    ChunkModel,
    ChunkModelSpec,
    ChunkSampler,
    DDIMSampler,
    DiffusionSchedule,
    ddim_sample,
    ddpm_loss,
    flow_matching_loss,
    flow_sample,
    shortcut_loss,
)
from robolearn.spec.chunking import ChunkExecutor, ChunkSpec

torch.set_num_threads(1)


class Recorder(nn.Module):
    """A backbone ``v = a * x + b`` that records the ``t`` and ``d`` it is called with."""

    def __init__(self, a: float = 0.0, b: float = 0.0, step_conditioned: bool = False) -> None:
        super().__init__()
        self.a, self.b, self.step_conditioned = a, b, step_conditioned
        self.calls: list[tuple[list[float], list[float] | None]] = []

    def forward(self, x, t, cond, d=None):
        self.calls.append((t.tolist(), None if d is None else d.tolist()))
        return self.a * x + self.b


def _spec(model: str, backbone: str = "mlp", **kw) -> ChunkModelSpec:
    base = dict(model=model, obs_dim=3, action_dim=2, horizon=4, obs_history=2, backbone=backbone, hidden=(32, 32),
                unet_channels=(8, 16), time_embed_dim=8, diffusion_steps=20)
    base.update(kw)
    return ChunkModelSpec(**base)


@pytest.mark.parametrize("model", ["flow", "shortcut", "diffusion"])
@pytest.mark.parametrize("backbone", ["mlp", "unet"])
def test_samples_have_chunk_shape_and_are_deterministic_in_their_noise(model, backbone):
    torch.manual_seed(0)
    m = ChunkModel(_spec(model, backbone), torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0]))
    with torch.no_grad():  # a zero-initialised U-Net head would make every sample the same
        for p in m.net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    obs = torch.randn(5, 6)
    g = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(5, 4, 2, generator=g), torch.randn(5, 4, 2, generator=g)
    a = m.sample(obs, z1, 4)
    assert a.shape == (5, 4, 2)
    assert bool(((a >= m.action_low) & (a <= m.action_high)).all()), "samples stay in the env bounds"
    torch.testing.assert_close(m.sample(obs, z1.clone(), 4), a, rtol=0, atol=0)
    assert (m.sample(obs, z2, 4) - a).abs().max() > 1e-3, "other noise, other chunk"
    # the export contract: the sampler module computes exactly the model's sample
    torch.testing.assert_close(ChunkSampler(m, 4)(obs, z1), a, rtol=0, atol=0)
    # and a rebuilt checkpoint too
    torch.testing.assert_close(ChunkModel.from_checkpoint(m.checkpoint()).sample(obs, z1, 4), a, rtol=0, atol=0)


def test_ddim_eta0_matches_the_hand_computed_chain():
    sched = DiffusionSchedule.linear(3)
    ab = [float(v) for v in sched.alphas_cumprod]
    net = Recorder(a=0.5)  # eps_hat = 0.5 x
    x = torch.tensor([[[0.3, -0.8]]])
    # all T = 3 steps: 2 -> 1 -> 0 -> data, each x_prev = sqrt(ab_prev) x0_hat + sqrt(1 - ab_prev) eps_hat
    xs = x.clone()
    for k, k_prev in ((2, 1), (1, 0), (0, -1)):
        eps = 0.5 * xs
        x0 = (xs - math.sqrt(1 - ab[k]) * eps) / math.sqrt(ab[k])
        abp = ab[k_prev] if k_prev >= 0 else 1.0
        xs = math.sqrt(abp) * x0 + math.sqrt(1 - abp) * eps
    out = ddim_sample(net, torch.zeros(1, 1), x, sched, 3, eta=0.0, clip=None)
    torch.testing.assert_close(out, xs)
    assert [c[0][0] for c in net.calls] == pytest.approx([2 / 3, 1 / 3, 0.0]), "the backbone sees t = k / T"
    # one step: straight from k = T - 1 to the data, x0_hat = (x - sqrt(1 - ab) eps) / sqrt(ab)
    one = ddim_sample(Recorder(a=0.5), torch.zeros(1, 1), x, sched, 1, eta=0.0, clip=None)
    torch.testing.assert_close(one, (x - math.sqrt(1 - ab[2]) * 0.5 * x) / math.sqrt(ab[2]))
    assert DDIMSampler(Recorder(a=0.5), sched, 1, clip=None)(torch.zeros(1, 1), x).allclose(one)


def test_ddpm_eta1_adds_sigma_times_the_given_step_noise():
    sched = DiffusionSchedule.cosine(4)
    x, z = torch.tensor([[[0.2]]]), torch.tensor([[[[1.0]], [[0.0]], [[0.0]], [[0.0]]]])  # z only at the first step
    base = ddim_sample(Recorder(), torch.zeros(1, 1), x, sched, 4, eta=1.0, step_noise=torch.zeros_like(z), clip=None)
    noisy = ddim_sample(Recorder(), torch.zeros(1, 1), x, sched, 4, eta=1.0, step_noise=z, clip=None)
    ab = sched.alphas_cumprod
    sigma = math.sqrt((1 - ab[2]) / (1 - ab[3]) * (1 - ab[3] / ab[2]))
    # eps_hat = 0: every later step scales x by sqrt(ab_prev / ab), so the first step's sigma z is
    # carried to the data scaled by 1 / sqrt(ab[2])
    torch.testing.assert_close(noisy - base, torch.tensor([[[sigma / math.sqrt(float(ab[2]))]]]))


@pytest.mark.parametrize("steps", [1, 3, 8])
def test_flow_euler_matches_the_closed_forms(steps):
    z = torch.tensor([[[0.4, -1.2]]])
    # constant velocity: exact for any step count
    torch.testing.assert_close(flow_sample(Recorder(b=0.7), torch.zeros(1, 1), z, steps), z + 0.7)
    # v = -x: Euler multiplies by (1 - 1/K) each step
    torch.testing.assert_close(flow_sample(Recorder(a=-1.0), torch.zeros(1, 1), z, steps), z * (1 - 1 / steps) ** steps)
    net = Recorder()
    flow_sample(net, torch.zeros(1, 1), z, steps)
    assert [c[0][0] for c in net.calls] == pytest.approx([k / steps for k in range(steps)]), "t = 0, 1/K, ..."


def test_shortcut_sampling_tells_the_net_its_step_size():
    for steps, d in ((1, 1.0), (2, 0.5), (4, 0.25)):
        net = Recorder(step_conditioned=True)
        flow_sample(net, torch.zeros(1, 1), torch.zeros(1, 1, 1), steps)
        assert [c[1][0] for c in net.calls] == [d] * steps, steps
    # steps finer than the finest trained shortcut step are the flow-matching velocity (d = 0)
    fine = 2 ** SHORTCUT_LOG2_STEPS
    net = Recorder(step_conditioned=True)
    flow_sample(net, torch.zeros(1, 1), torch.zeros(1, 1, 1), fine)
    assert {c[1][0] for c in net.calls} == {0.0}


def test_shortcut_targets_are_grounded_in_flow_matching():
    # max_log2_steps=1: the model trains one step of 2d = 1 against two half steps of d = 1/2, which
    # are finer than any trained shortcut step, so the targets query the flow-matching velocity (d = 0)
    net = Recorder(step_conditioned=True)
    net.w = nn.Parameter(torch.zeros(()))
    net.forward = lambda x, t, cond, d=None: (Recorder.forward(net, x, t, cond, d) + net.w)
    shortcut_loss(net, torch.zeros(8, 2, 1), torch.zeros(8, 1), max_log2_steps=1)
    seen = {v for _, ds in net.calls for v in ds}
    assert seen == {0.0, 1.0}, seen


def test_losses_ignore_masked_chunk_steps_and_are_reproducible_with_a_generator():
    # an elementwise backbone: an MLP's output at real steps would (rightly) depend on the padded inputs
    torch.manual_seed(0)
    obs, a = torch.randn(6, 6), torch.rand(6, 4, 2) * 2 - 1
    mask = torch.ones(6, 4, dtype=torch.bool)
    mask[:, 2:] = False
    b = a.clone()
    b[:, 2:] = -a[:, 2:]  # differs only on masked steps

    def loss(actions, weight, model="flow"):
        g = torch.Generator().manual_seed(3)
        if model == "diffusion":
            return ddpm_loss(Recorder(a=0.3), actions, obs, DiffusionSchedule.cosine(10), weight=weight, generator=g)
        return flow_matching_loss(Recorder(a=0.3), actions, obs, weight=weight, generator=g)

    for kind in ("flow", "diffusion"):
        assert loss(a, mask, kind) == loss(b, mask, kind), kind
        assert loss(a, None, kind) != loss(b, None, kind), kind
    assert loss(a, None) == loss(a, None), "the generator fixes noise and noise level"


def test_chunk_model_maps_env_units_and_normalises_frames():
    m = ChunkModel(_spec("flow"), torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0]))
    a = torch.tensor([[0.5, 1.5], [-1.0, 2.0]])
    torch.testing.assert_close(m.from_env(a), torch.tensor([[0.5, 0.5], [-1.0, 1.0]]))
    torch.testing.assert_close(m.to_env(m.from_env(a)), a)
    m.set_normalization(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 2.0, 0.0]))
    obs = torch.tensor([[3.0, 2.0, 3.0, 1.0, 4.0, 3.001]])  # two frames, oldest first
    torch.testing.assert_close(m.cond(obs), torch.tensor([[1.0, 0.0, 0.0, 0.0, 1.0, 1.0]]), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="horizon: a U-Net with 2 levels needs a multiple of 2, got 3"):
        ChunkModel(_spec("flow", "unet", horizon=3))
    with pytest.raises(ValueError, match="model: expected one of flow, shortcut, diffusion, got 'gan'"):
        _spec("gan")


# -- chunk execution -------------------------------------------------------------------------------
def _chunks(n: int, h: int, base: float) -> torch.Tensor:
    """``[n, h, 1]`` chunks whose step j of world i is ``base + 10 i + j``."""
    return (base + 10.0 * torch.arange(n).reshape(-1, 1, 1) + torch.arange(h).reshape(1, -1, 1)).float()


def test_executor_plays_execute_actions_of_each_plan_in_order():
    ex = ChunkExecutor(ChunkSpec(horizon=4, execute=3), 2, obs_dim=1, action_dim=1)
    played, plans = [], []
    for step in range(7):
        ex.observe(torch.zeros(2, 1))
        need = ex.needs_plan()
        if bool(need.any()):
            assert bool(need.all())
            plans.append(step)
            ex.plan(_chunks(2, 4, 100.0 * step))
        played.append(ex.act()[:, 0].tolist())
    assert plans == [0, 3, 6]
    assert [p[0] for p in played] == [0, 1, 2, 300, 301, 302, 600]
    assert [p[1] for p in played] == [10, 11, 12, 310, 311, 312, 610]


def test_executor_reset_restarts_only_the_done_worlds():
    ex = ChunkExecutor(ChunkSpec(horizon=4, execute=4, obs_history=2), 2, obs_dim=1, action_dim=1)
    ex.observe(torch.tensor([[1.0], [2.0]]))
    ex.plan(_chunks(2, 4, 0.0))
    ex.act()
    ex.reset(torch.tensor([False, True]))
    cond = ex.observe(torch.tensor([[3.0], [7.0]]))
    # world 0 keeps its history and queue; world 1 starts over from its new observation
    torch.testing.assert_close(cond, torch.tensor([[1.0, 3.0], [7.0, 7.0]]))
    assert ex.needs_plan().tolist() == [False, True]
    ex.plan(_chunks(2, 4, 50.0), ex.needs_plan())
    assert ex.act()[:, 0].tolist() == [1.0, 60.0]
    assert ex.act()[:, 0].tolist() == [2.0, 61.0]
    # state built under inference mode stays updatable outside it (a reset between rollouts)
    with torch.inference_mode():
        ex.observe(torch.zeros(2, 1))
        ex.plan(_chunks(2, 4, 0.0))
    ex.reset()
    assert ex.needs_plan().all()


def test_executor_pads_the_history_with_the_first_observation():
    ex = ChunkExecutor(ChunkSpec(horizon=1, execute=1, obs_history=3), 1, obs_dim=2, action_dim=1)
    frames = [torch.tensor([[float(i), -float(i)]]) for i in range(4)]
    conds = [ex.observe(f)[0, ::2].tolist() for f in frames]  # the first component of each frame
    assert conds == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3]]


def test_temporal_ensembling_weights_match_act():
    m = 0.5
    ex = ChunkExecutor(ChunkSpec(horizon=3, execute=1, ensemble="exp", ensemble_decay=m), 1, obs_dim=1, action_dim=1)
    plans = [torch.tensor([[[1.0], [2.0], [3.0]]]), torch.tensor([[[10.0], [20.0], [30.0]]]),
             torch.tensor([[[100.0], [200.0], [300.0]]]), torch.tensor([[[1000.0], [2000.0], [3000.0]]])]
    out = []
    for p in plans:
        ex.observe(torch.zeros(1, 1))
        assert ex.needs_plan().all(), "ensembling replans every step"
        ex.plan(p)
        out.append(float(ex.act()))
    w = [math.exp(-m * i) for i in range(3)]  # i = 0: the oldest prediction still covering the step
    expect = [
        1.0,
        (w[0] * 2.0 + w[1] * 10.0) / (w[0] + w[1]),
        (w[0] * 3.0 + w[1] * 20.0 + w[2] * 100.0) / sum(w),
        (w[0] * 30.0 + w[1] * 200.0 + w[2] * 1000.0) / sum(w),  # the first plan no longer covers step 3
    ]
    assert out == pytest.approx(expect)


def test_chunk_spec_refuses_inconsistent_settings_naming_the_field():
    with pytest.raises(ValueError, match=r"execute: expected 1..horizon \(4\), got 5"):
        ChunkSpec(horizon=4, execute=5)
    with pytest.raises(ValueError, match="execute: temporal ensembling replans every step"):
        ChunkSpec(horizon=4, execute=2, ensemble="exp")
    with pytest.raises(ValueError, match="ensemble: expected one of none, exp, got 'avg'"):
        ChunkSpec(ensemble="avg")
    assert ChunkSpec.from_dict(ChunkSpec(4, 2, 3).to_dict()) == ChunkSpec(4, 2, 3)
