"""Vision networks (robolearn.nn.vision): DrQ-v2 encoder shapes and parameter counts, in-graph
pixel normalisation, random-shift augmentation by the drawn amount, frame stacking, gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from robolearn.nn.vision import CNNEncoder, MultiModalEncoder, RandomShift, conv_output_size, stack_frames


def _images(b: int, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (b, *shape), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_encoder_shapes_and_drqv2_parameter_count_at_84() -> None:
    torch.manual_seed(0)
    enc = CNNEncoder((9, 84, 84))  # three stacked RGB frames, as DrQ-v2 on DMC
    # 84 -> (84 - 3) // 2 + 1 = 41 -> 39 -> 37 -> 35
    assert conv_output_size(84) == 35 and enc.out_shape == (32, 35, 35)
    assert enc.out_dim == 32 * 35 * 35 == 39200
    assert enc(_images(2, (9, 84, 84))).shape == (2, 39200)
    # conv1: 9 in x 32 out x 3 x 3 weights + 32 biases; conv2..4: 32 x 32 x 3 x 3 + 32 each.
    conv1 = 9 * 32 * 3 * 3 + 32
    conv_rest = 3 * (32 * 32 * 3 * 3 + 32)
    assert (conv1, conv_rest) == (2624, 27744)
    assert sum(p.numel() for p in enc.parameters()) == conv1 + conv_rest == 30368
    front = MultiModalEncoder(enc, proprio_dim=0, feature_dim=50)
    trunk = 39200 * 50 + 50 + 2 * 50  # Linear weights + bias, LayerNorm gain + bias
    assert sum(p.numel() for p in front.trunk.parameters()) == trunk == 1960150
    assert front(_images(3, (9, 84, 84))).shape == (3, 50)
    with_proprio = MultiModalEncoder(enc, proprio_dim=5, feature_dim=50)
    assert with_proprio.out_dim == 55
    assert with_proprio(_images(3, (9, 84, 84)), torch.zeros(3, 5)).shape == (3, 55)


def test_uint8_and_float_inputs_agree_and_hwc_matches_chw() -> None:
    torch.manual_seed(1)
    chw = CNNEncoder((3, 20, 24), layout="CHW")
    hwc = CNNEncoder((20, 24, 3), layout="HWC")
    hwc.load_state_dict(chw.state_dict())
    img = _images(4, (3, 20, 24))
    out = chw(img)
    # A float image on the 0..255 scale is the same input as its bytes.
    torch.testing.assert_close(chw(img.float()), out, rtol=0, atol=0)
    torch.testing.assert_close(hwc(img.permute(0, 2, 3, 1)), out, rtol=0, atol=0)
    # Normalisation is x / 255 - 0.5: a constant-128 image equals a float 128 image, not 128/255.
    assert not torch.allclose(chw(img.float() / 255.0), out)
    # The first layer sees x / 255 - 0.5 (checked by hand on one conv output).
    conv = chw.convnet[0]
    x = img[:1].float() / 255.0 - 0.5
    by_hand = (conv.weight[0] * x[0, :, 0:3, 0:3]).sum() + conv.bias[0]
    first = torch.relu(conv(x))[0, 0, 0, 0]
    torch.testing.assert_close(torch.relu(by_hand), first)


def test_encoder_refuses_wrong_shapes_and_dtypes() -> None:
    enc = CNNEncoder((3, 20, 20))
    with pytest.raises(ValueError, match=r"images: expected \[B, 3, 20, 20\] \(CHW\)"):
        enc(torch.zeros(2, 20, 20, 3, dtype=torch.uint8))
    with pytest.raises(TypeError, match="uint8 or a float dtype"):
        enc(torch.zeros(2, 3, 20, 20, dtype=torch.int32))
    with pytest.raises(ValueError, match="layout: expected one of CHW, HWC, got 'NCHW'"):
        CNNEncoder((3, 20, 20), layout="NCHW")
    with pytest.raises(ValueError, match="image size 8: too small"):
        CNNEncoder((3, 8, 8))
    front = MultiModalEncoder(enc, proprio_dim=4)
    with pytest.raises(ValueError, match=r"proprio: expected \[B, 4\], got \[2, 3\]"):
        front(torch.zeros(2, 3, 20, 20, dtype=torch.uint8), torch.zeros(2, 3))


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_random_shift_moves_a_bright_pixel_by_the_drawn_amount(layout: str) -> None:
    b, h, w = 16, 20, 20
    img = torch.zeros(b, 3, h, w, dtype=torch.uint8)
    r, c = 9, 11  # at least `pad` pixels from every border: the pixel never leaves the image
    img[:, 1, r, c] = 255  # green channel only
    x = img if layout == "CHW" else img.permute(0, 2, 3, 1)
    aug = RandomShift(pad=4)
    out, shifts = aug(x, layout=layout, generator=torch.Generator().manual_seed(3), return_shifts=True)
    assert out.dtype == torch.uint8 and out.shape == x.shape
    assert shifts.shape == (b, 2) and int(shifts.abs().max()) <= 4
    assert len({tuple(s) for s in shifts.tolist()}) > 4  # drawn per sample, not one shift for all
    out = out if layout == "CHW" else out.permute(0, 3, 1, 2)
    for i, (dx, dy) in enumerate(shifts.tolist()):
        expected = torch.zeros(3, h, w, dtype=torch.uint8)
        expected[1, r + dy, c + dx] = 255
        assert torch.equal(out[i], expected), f"sample {i}: shift ({dx}, {dy})"


def test_random_shift_replicates_the_border_and_matches_a_grid_sample_shift() -> None:
    # By hand: a 1x2x3 image shifted right by 1 and down by 1, the vacated row/column replicated.
    img = torch.tensor([[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]])
    out = RandomShift(pad=1)(img, shifts=torch.tensor([[1, 1]]))
    assert out.tolist() == [[[[1.0, 1.0, 2.0], [1.0, 1.0, 2.0]]]]
    out = RandomShift(pad=2)(img, shifts=torch.tensor([[-2, 0]]))
    assert out.tolist() == [[[[3.0, 3.0, 3.0], [6.0, 6.0, 6.0]]]]
    # DrQ-v2's formulation: replicate padding, then bilinear grid_sample of the padded image on
    # a grid offset by whole pixels. The gather must give the same images at the same shifts.
    pad, b, h, w = 4, 6, 12, 10
    x = torch.rand(b, 2, h, w, generator=torch.Generator().manual_seed(5)) * 255
    out, shifts = RandomShift(pad)(x, generator=torch.Generator().manual_seed(6), return_shifts=True)
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    hp, wp = h + 2 * pad, w + 2 * pad
    sx = (pad - shifts[:, 0]).float()  # crop offset in the padded image
    sy = (pad - shifts[:, 1]).float()
    gx = (2 * (torch.arange(w)[None, :] + sx[:, None]) + 1) / wp - 1  # pixel centres, align_corners=False
    gy = (2 * (torch.arange(h)[None, :] + sy[:, None]) + 1) / hp - 1
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)
    reference = F.grid_sample(padded, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-3)


def test_random_shift_is_deterministic_under_a_seeded_generator() -> None:
    x = _images(8, (3, 16, 16))
    aug = RandomShift(4)
    a, sa = aug(x, generator=torch.Generator().manual_seed(7), return_shifts=True)
    b, sb = aug(x, generator=torch.Generator().manual_seed(7), return_shifts=True)
    c, sc = aug(x, generator=torch.Generator().manual_seed(8), return_shifts=True)
    assert torch.equal(a, b) and torch.equal(sa, sb)
    assert not torch.equal(sa, sc) and not torch.equal(a, c)
    with pytest.raises(ValueError, match=r"shifts: expected \[8, 2\] integers in \[-4, 4\]"):
        aug(x, shifts=torch.full((8, 2), 5))


def test_stack_frames_groups_channels_by_frame_oldest_first() -> None:
    frames = torch.arange(2 * 3 * 4 * 5 * 3).reshape(2, 3, 4, 5, 3).to(torch.uint8)  # [B, T, H, W, C]
    hwc = stack_frames(frames, "HWC")
    assert hwc.shape == (2, 4, 5, 9) and hwc.dtype == torch.uint8
    for t in range(3):
        assert torch.equal(hwc[..., 3 * t : 3 * t + 3], frames[:, t])
    chw = stack_frames(frames.permute(0, 1, 4, 2, 3), "CHW")
    assert torch.equal(chw, hwc.permute(0, 3, 1, 2))
    # The encoder takes the stacked frames as its channels.
    assert CNNEncoder((16, 16, 9), layout="HWC").in_channels == 9


def test_gradients_reach_the_encoder_unless_detached() -> None:
    torch.manual_seed(2)
    enc = CNNEncoder((6, 16, 16))
    critic = MultiModalEncoder(enc, proprio_dim=3)
    actor = MultiModalEncoder(enc, proprio_dim=3, detach=True)  # shares the CNN, gradient stopped
    img = _images(4, (6, 16, 16))
    proprio = torch.randn(4, 3, requires_grad=True)
    actor(img, proprio).pow(2).sum().backward()
    assert all(p.grad is None for p in enc.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.trunk.parameters())
    assert proprio.grad is not None and proprio.grad.abs().sum() > 0
    critic(img, proprio).pow(2).sum().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # The per-call switch overrides the default both ways.
    enc.zero_grad(set_to_none=True)
    critic(img, proprio, detach=True).sum().backward()
    assert all(p.grad is None for p in enc.parameters())
    actor(img, proprio, detach=False).sum().backward()
    assert all(p.grad is not None for p in enc.parameters())
