"""Vision networks: a DrQ-v2-style CNN encoder, random-shift augmentation and a multi-modal front end.

Images travel as ``uint8`` from the camera to the network (a quarter of float32's memory in replay
buffers and datasets); the conversion to float happens *inside* the network, as its first operation
(``x / 255 - 0.5``), so the exported graph takes the camera's bytes and a deploy runtime does no
arithmetic of its own. A float input is accepted on the same 0..255 scale (what
:class:`RandomShift` returns for a float image), so ``encoder(img)`` and ``encoder(img.float())``
are the same numbers.

Layouts: an image batch is ``[B, C, H, W]`` (``"CHW"``, torch's) or ``[B, H, W, C]`` (``"HWC"``,
what cameras, OpenCV and the env's ``image`` group give); the encoder is built for one and permutes
``HWC`` to ``CHW`` inside its graph.

Frame stacking is along the channel axis (:func:`stack_frames`, oldest frame first): three RGB
frames are 9 channels, which the first convolution mixes, as in DrQ-v2.

:class:`CNNEncoder` is DrQ-v2's: four 3x3 convolutions of 32 filters, the first with stride 2, ReLU
after each, flattened (``32 * 35 * 35 = 39200`` features at 84x84). :class:`MultiModalEncoder` puts
DrQ-v2's trunk (``Linear -> LayerNorm -> tanh``) on the image features and concatenates a
proprioception vector after it; one :class:`CNNEncoder` is shared by the actor's and the critic's
front ends, and the actor's is built with ``detach=True`` so that only the critic's loss trains the
convolutions (DrQ-v2's convention; the learner decides, this module only offers the switch).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

IMAGE_LAYOUTS = ("CHW", "HWC")
"""Axis orders of one image batch: ``[B, C, H, W]`` or ``[B, H, W, C]``."""
PIXEL_SCALE = 1.0 / 255.0
"""Multiplier from the 0..255 pixel scale to [0, 1], applied inside the network."""
PIXEL_OFFSET = -0.5
"""Added after :data:`PIXEL_SCALE`: network inputs are centred, in [-0.5, 0.5] (DrQ-v2)."""


def _check_layout(layout: str) -> None:
    if layout not in IMAGE_LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(IMAGE_LAYOUTS)}, got {layout!r}")


def to_chw(images: torch.Tensor, layout: str) -> torch.Tensor:
    """``images`` ``[B, ...]`` in ``layout`` as ``[B, C, H, W]`` (a view, no copy)."""
    _check_layout(layout)
    if images.dim() != 4:
        raise ValueError(f"images: expected a batch [B, {', '.join(layout)}], got shape {list(images.shape)}")
    return images if layout == "CHW" else images.permute(0, 3, 1, 2)


def normalize_pixels(images: torch.Tensor) -> torch.Tensor:
    """uint8 (or float on the same 0..255 scale) pixels as float32 ``x / 255 - 0.5``."""
    if images.dtype == torch.uint8:
        images = images.to(torch.float32)
    elif not images.is_floating_point():
        raise TypeError(f"images: expected uint8 or a float dtype on the 0..255 scale, got {images.dtype}")
    return images * PIXEL_SCALE + PIXEL_OFFSET


def stack_frames(frames: torch.Tensor, layout: str = "HWC") -> torch.Tensor:
    """Stack ``frames`` ``[B, T, ...]`` (each frame in ``layout``, oldest first) along the channel
    axis: ``[B, H, W, T*C]`` (HWC) or ``[B, T*C, H, W]`` (CHW); frame ``t`` holds channels
    ``t*C .. (t+1)*C - 1``. Dtype is kept (uint8 stays uint8).
    """
    _check_layout(layout)
    if frames.dim() != 5:
        raise ValueError(f"frames: expected [B, T, {', '.join(layout)}], got shape {list(frames.shape)}")
    b, t = frames.shape[:2]
    if layout == "CHW":
        return frames.reshape(b, t * frames.shape[2], *frames.shape[3:])
    # [B, T, H, W, C] -> [B, H, W, T, C] -> [B, H, W, T*C]: channels grouped by frame.
    return frames.permute(0, 2, 3, 1, 4).reshape(b, frames.shape[2], frames.shape[3], t * frames.shape[4])


def conv_output_size(size: int, layers: int = 4) -> int:
    """Spatial size after DrQ-v2's convolutions (3x3, no padding; the first stride 2, then stride 1)."""
    out = (size - 3) // 2 + 1
    out -= 2 * (layers - 1)
    if out < 1:
        raise ValueError(f"image size {size}: too small for {layers} 3x3 convolutions (the output would be {out})")
    return out


class CNNEncoder(nn.Module):
    """DrQ-v2's convolutional encoder: ``[B, C, H, W]`` or ``[B, H, W, C]`` pixels -> ``[B, out_dim]``.

    Pixels are uint8 (or float on the 0..255 scale) and normalised inside (``x / 255 - 0.5``);
    ``layers`` 3x3 convolutions of ``channels`` filters, the first with stride 2, each followed by
    ReLU, then flattened. Weights are orthogonal with ReLU's gain and biases zero.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        layout: str = "CHW",
        channels: int = 32,
        layers: int = 4,
    ) -> None:
        """``image_shape``: one image's shape in ``layout`` (``[C, H, W]`` or ``[H, W, C]``; stacked
        frames counted in ``C``).
        """
        super().__init__()
        _check_layout(layout)
        shape = tuple(int(d) for d in image_shape)
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"image_shape: expected three sizes >= 1 ({', '.join(layout)}), got {list(image_shape)}")
        if channels < 1 or layers < 1:
            raise ValueError(f"channels, layers: expected >= 1, got channels={channels}, layers={layers}")
        self.layout = layout
        """Axis order of the input batch."""
        self.image_shape = shape
        """One image's shape in :attr:`layout`."""
        c, h, w = shape if layout == "CHW" else (shape[2], shape[0], shape[1])
        self.in_channels = c
        """Channels of the input (frames x channels per frame)."""
        modules: list[nn.Module] = [nn.Conv2d(c, channels, 3, stride=2), nn.ReLU()]
        for _ in range(layers - 1):
            modules += [nn.Conv2d(channels, channels, 3, stride=1), nn.ReLU()]
        self.convnet = nn.Sequential(*modules)
        self.out_shape = (channels, conv_output_size(h, layers), conv_output_size(w, layers))
        """Shape of the last feature map ``[channels, h', w']``."""
        self.out_dim = channels * self.out_shape[1] * self.out_shape[2]
        """Features per image (39200 for DrQ-v2 at 84x84)."""
        gain = nn.init.calculate_gain("relu")
        for m in self.convnet:
            if isinstance(m, nn.Conv2d):
                nn.init.orthogonal_(m.weight, gain)
                nn.init.zeros_(m.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Features ``[B, out_dim]`` of ``images`` ``[B, *image_shape]``."""
        if tuple(images.shape[1:]) != self.image_shape:
            raise ValueError(
                f"images: expected [B, {', '.join(map(str, self.image_shape))}] ({self.layout}), got {list(images.shape)}"
            )
        x = normalize_pixels(to_chw(images, self.layout))
        return self.convnet(x).flatten(1)


class RandomShift(nn.Module):
    """DrQ's random-shift augmentation: pad each image by ``pad`` pixels (replicating the border)
    and crop it back at a random offset drawn per sample, i.e. shift the content by an integer
    ``(dx, dy)`` in ``[-pad, pad]`` each, the vacated border filled with the replicated edge.

    DrQ-v2 computes the same crop with ``grid_sample`` (bilinear) at integer offsets, where the
    bilinear weights are 0 and 1; here the crop is a gather, which is exact (no float rounding of
    the sampling grid), needs no float copy and keeps ``uint8`` images ``uint8`` (replay buffers
    store bytes). Batched: one ``torch.gather`` for the whole batch, no Python loop over samples.
    """

    def __init__(self, pad: int = 4) -> None:
        """``pad``: largest shift in pixels along each axis (DrQ-v2: 4 at 84x84)."""
        super().__init__()
        if pad < 0:
            raise ValueError(f"pad: expected >= 0, got {pad}")
        self.pad = int(pad)
        """Largest shift in pixels."""

    def draw(self, batch: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
        """Shifts ``[batch, 2]`` (``dx``, ``dy``; integers in ``[-pad, pad]``, uniform)."""
        return torch.randint(-self.pad, self.pad + 1, (batch, 2), generator=generator, device=device)

    def forward(
        self,
        images: torch.Tensor,
        layout: str = "CHW",
        generator: torch.Generator | None = None,
        shifts: torch.Tensor | None = None,
        return_shifts: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Shift each image of ``images`` (``[B, C, H, W]`` or ``[B, H, W, C]`` per ``layout``).

        Args:
            images: the batch; any dtype (uint8 stays uint8).
            layout: its axis order.
            generator: draws the shifts (on the images' device); ``None``: torch's global one.
            shifts: use these ``[B, 2]`` ``(dx, dy)`` instead of drawing.
            return_shifts: also return the shifts.

        Returns:
            The shifted batch (same shape, dtype and layout): ``out[y, x] = in[clamp(y - dy), clamp(x - dx)]``,
            so content at ``(x, y)`` moves to ``(x + dx, y + dy)``; and the ``[B, 2]`` shifts when asked.
        """
        _check_layout(layout)
        if images.dim() != 4:
            raise ValueError(f"images: expected a batch [B, {', '.join(layout)}], got shape {list(images.shape)}")
        b, c, h, w = images.shape if layout == "CHW" else (images.shape[0], images.shape[3], images.shape[1], images.shape[2])
        if shifts is None:
            shifts = self.draw(b, generator, images.device)
        elif tuple(shifts.shape) != (b, 2) or bool((shifts.abs() > self.pad).any()):
            raise ValueError(f"shifts: expected [{b}, 2] integers in [-{self.pad}, {self.pad}], got {shifts.tolist()}")
        shifts = shifts.to(device=images.device, dtype=torch.long)
        # Replicate padding then a crop at (pad - dx, pad - dy) equals reading the source pixel
        # clamped to the image: one gather of the unpadded image at clamped flat indices, the index
        # expanded (a view) over the channels. 3.5x faster than advanced indexing for CHW uint8
        # 9x84x84 at batch 256 on one loaded CPU core (25 vs 86 ms).
        rows = (torch.arange(h, device=images.device)[None, :] - shifts[:, 1:2]).clamp_(0, h - 1)  # [B, H]
        cols = (torch.arange(w, device=images.device)[None, :] - shifts[:, 0:1]).clamp_(0, w - 1)  # [B, W]
        flat = (rows[:, :, None] * w + cols[:, None, :]).reshape(b, h * w)
        if layout == "CHW":
            out = torch.gather(images.reshape(b, c, h * w), 2, flat[:, None, :].expand(b, c, h * w)).reshape(b, c, h, w)
        else:
            out = torch.gather(images.reshape(b, h * w, c), 1, flat[:, :, None].expand(b, h * w, c)).reshape(b, h, w, c)
        return (out, shifts) if return_shifts else out


class MultiModalEncoder(nn.Module):
    """An actor's or critic's front end: ``(images, proprio) -> [B, out_dim]`` features.

    ``trunk(encoder(images))`` with DrQ-v2's trunk (``Linear(encoder.out_dim, feature_dim) ->
    LayerNorm -> tanh``), then the proprioception vector concatenated after it: ``out_dim =
    feature_dim + proprio_dim``. The proprioception joins *after* the tanh so that unbounded joint
    readings are not squashed with the image features (normalise them upstream, as for any MLP
    input). Several front ends may share one :class:`CNNEncoder` (actor and critic, DrQ-v2); a
    front end built with ``detach=True`` stops the gradient at the encoder's output, so its loss
    trains only its own trunk and head.
    """

    def __init__(
        self,
        encoder: CNNEncoder,
        proprio_dim: int = 0,
        feature_dim: int = 50,
        detach: bool = False,
    ) -> None:
        """``encoder``: the (possibly shared) CNN; ``proprio_dim``: width of the proprioception
        vector (0: pixels only); ``feature_dim``: the trunk's width (DrQ-v2: 50); ``detach``: stop
        gradients into ``encoder`` by default (see :meth:`forward`).
        """
        super().__init__()
        if proprio_dim < 0 or feature_dim < 1:
            raise ValueError(f"proprio_dim >= 0 and feature_dim >= 1 expected, got proprio_dim={proprio_dim}, feature_dim={feature_dim}")
        self.encoder = encoder
        self.proprio_dim = int(proprio_dim)
        """Width of the proprioception input (0: none)."""
        self.feature_dim = int(feature_dim)
        """Width of the image trunk's output."""
        self.detach = bool(detach)
        """Default of :meth:`forward`'s ``detach``."""
        self.trunk = nn.Sequential(nn.Linear(encoder.out_dim, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())
        self.out_dim = self.feature_dim + self.proprio_dim
        """Features out: the trunk's, then the proprioception's."""

    def forward(self, images: torch.Tensor, proprio: torch.Tensor | None = None, detach: bool | None = None) -> torch.Tensor:
        """Features ``[B, out_dim]``; ``detach`` (default :attr:`detach`) stops the gradient at the
        CNN's output, so the encoder is trained by another front end's loss only.
        """
        h = self.encoder(images)
        if self.detach if detach is None else detach:
            h = h.detach()
        h = self.trunk(h)
        if self.proprio_dim == 0:
            if proprio is not None:
                raise ValueError(f"proprio: this front end has no proprioception input, got shape {list(proprio.shape)}")
            return h
        if proprio is None or proprio.dim() != 2 or proprio.shape[1] != self.proprio_dim:
            got = None if proprio is None else list(proprio.shape)
            raise ValueError(f"proprio: expected [B, {self.proprio_dim}], got {got}")
        return torch.cat([h, proprio.to(h.dtype)], dim=1)


__all__ = [
    "IMAGE_LAYOUTS",
    "PIXEL_OFFSET",
    "PIXEL_SCALE",
    "CNNEncoder",
    "MultiModalEncoder",
    "RandomShift",
    "conv_output_size",
    "normalize_pixels",
    "stack_frames",
    "to_chw",
]
