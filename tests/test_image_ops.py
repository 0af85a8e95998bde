"""Image preprocessing (robolearn.spec.image_ops): numerics checked by hand, undistortion against
OpenCV's own forward model, bad parameters named."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from robolearn.spec.image_ops import (
    CameraIntrinsics,
    CenterCrop,
    ConvertColor,
    Crop,
    ImageOpError,
    ImagePipeline,
    Resize,
    Undistort,
)

DISTORTED = CameraIntrinsics(fx=100.0, fy=110.0, cx=63.5, cy=47.5, width=128, height=96,
                             distortion=(-0.30, 0.10, 0.002, -0.003, -0.02))
"""A wide-angle lens with strong barrel distortion (corner pixels move by ~10 px)."""


def test_area_resize_averages_blocks_and_linear_interpolates_at_pixel_centres():
    # 4x4 -> 2x2 area: each output pixel the mean of a 2x2 block (means chosen to be integers)
    img = np.array([[0, 4, 8, 8], [4, 8, 8, 8], [100, 100, 1, 3], [100, 100, 5, 7]], dtype=np.uint8)
    out = ImagePipeline([Resize(2, 2, "area")])(img[None, :, :, None])
    assert out.shape == (1, 2, 2, 1) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[0, :, :, 0], [[4, 8], [100, 4]])
    # 1x2 -> 1x4 linear: output centres map to source x = -0.25, 0.25, 0.75, 1.25 (clamped at the edges)
    row = np.array([[[0], [100]]], dtype=np.uint8)[None]
    lin = ImagePipeline([Resize(4, 1, "linear")])(row)
    np.testing.assert_array_equal(lin[0, 0, :, 0], [0, 25, 75, 100])
    # a batch of 3-channel images: each resized independently
    batch = np.stack([np.full((8, 8, 3), v, dtype=np.uint8) for v in (10, 200)])
    got = ImagePipeline([Resize(3, 5)])(batch)
    assert got.shape == (2, 5, 3, 3)
    assert (got[0] == 10).all() and (got[1] == 200).all()


def test_crops_return_the_exact_pixels():
    img = np.arange(2 * 6 * 8 * 1, dtype=np.uint8).reshape(2, 6, 8, 1)
    out = ImagePipeline([Crop(x=3, y=1, width=4, height=2)])(img)
    np.testing.assert_array_equal(out[:, :, :, 0], img[:, 1:3, 3:7, 0])
    assert out[1, 0, 0, 0] == 48 + 1 * 8 + 3  # image 1, row 1, column 3
    centre = ImagePipeline([CenterCrop(width=4, height=3)])(img)
    # margins: columns (8-4)//2 = 2, rows (6-3)//2 = 1 (the odd pixel left at the bottom)
    np.testing.assert_array_equal(centre, img[:, 1:4, 2:6])


def test_colour_conversions_swap_channels_exactly_and_use_bt601_gray():
    rgb = np.zeros((2, 1, 3, 3), dtype=np.uint8)
    rgb[0, 0] = [[255, 0, 0], [0, 255, 0], [0, 0, 255]]
    rgb[1, 0] = [[10, 20, 30], [200, 100, 50], [0, 0, 0]]
    bgr = ImagePipeline([ConvertColor("rgb2bgr")])(rgb)
    np.testing.assert_array_equal(bgr[0, 0], [[0, 0, 255], [0, 255, 0], [255, 0, 0]])
    np.testing.assert_array_equal(ImagePipeline([ConvertColor("bgr2rgb")])(bgr), rgb)
    flipped = rgb[:, :, ::-1]  # a non-contiguous view (columns reversed) is converted as it reads
    np.testing.assert_array_equal(ImagePipeline([ConvertColor("rgb2bgr")])(flipped), rgb[:, :, ::-1, ::-1])
    gray = ImagePipeline([ConvertColor("rgb2gray")])(rgb)
    assert gray.shape == (2, 1, 3, 1)
    # Y = 0.299 R + 0.587 G + 0.114 B, rounded
    expected = np.rint(rgb.astype(float) @ np.array([0.299, 0.587, 0.114]))
    np.testing.assert_allclose(gray[..., 0], expected, atol=1)
    np.testing.assert_array_equal(gray[0, 0, :, 0], [76, 150, 29])
    # bgr2gray on the swapped image gives the same
    np.testing.assert_array_equal(ImagePipeline([ConvertColor("bgr2gray")])(bgr), gray)


def test_torch_in_torch_out_and_numpy_in_numpy_out():
    pipe = ImagePipeline([CenterCrop(4, 4), Resize(2, 2), ConvertColor("rgb2gray")])
    img = np.random.default_rng(0).integers(0, 256, (3, 6, 6, 3), dtype=np.uint8)
    out_np = pipe(img)
    out_t = pipe(torch.from_numpy(img))
    assert isinstance(out_np, np.ndarray) and isinstance(out_t, torch.Tensor)
    assert out_t.dtype == torch.uint8 and tuple(out_t.shape) == (3, 2, 2, 1)
    np.testing.assert_array_equal(out_t.numpy(), out_np)
    assert pipe.output_shape(6, 6, 3) == (2, 2, 1)
    # to_dict / from_dict round trip builds the same pipeline
    again = ImagePipeline.from_dict(pipe.to_dict())
    np.testing.assert_array_equal(again(img), out_np)


def test_intrinsics_follow_resize_and_crop():
    cam = CameraIntrinsics.from_fovy(90.0, 64, 64)
    assert cam.fx == pytest.approx(32.0) and cam.cx == pytest.approx(31.5)  # f = 32 / tan(45 deg)
    pipe = ImagePipeline([Resize(32, 32), Crop(x=4, y=2, width=20, height=20)])
    out = pipe.intrinsics(cam)
    assert out.fx == pytest.approx(16.0) and out.fy == pytest.approx(16.0)
    # the centre of the 64 image (31.5) is the centre of the 32 image (15.5), then shifted by the corner
    assert out.cx == pytest.approx(15.5 - 4) and out.cy == pytest.approx(15.5 - 2)
    assert (out.width, out.height) == (20, 20)
    # the optical axis projects to the new principal point
    np.testing.assert_allclose(out.project(np.array([[0.0, 0.0, 1.0]])), [[11.5, 13.5]])


def test_projection_matches_opencv_with_distortion():
    pts = np.array([[0.3, -0.2, 1.0], [-0.5, 0.35, 1.2], [0.0, 0.0, 2.0]])
    ours = DISTORTED.project(pts)
    ref, _ = cv2.projectPoints(pts, np.zeros(3), np.zeros(3), DISTORTED.matrix(), np.array(DISTORTED.distortion))
    np.testing.assert_allclose(ours, ref.reshape(-1, 2), atol=1e-9)
    # hand check of the first point: r2 = 0.13, radial = 1 - 0.3*0.13 + 0.1*0.13^2 - 0.02*0.13^3
    x, y, r2 = 0.3, -0.2, 0.13
    radial = 1 - 0.3 * r2 + 0.1 * r2**2 - 0.02 * r2**3
    xd = x * radial + 2 * 0.002 * x * y + (-0.003) * (r2 + 2 * x * x)
    assert ours[0, 0] == pytest.approx(100.0 * xd + 63.5)


def _distort(ideal: np.ndarray, cam: CameraIntrinsics) -> np.ndarray:
    """What the lens of ``cam`` makes of the ideal (pinhole) image: each distorted pixel samples the
    ideal image where OpenCV's inverse model (``undistortPoints``) puts it."""
    h, w = ideal.shape[:2]
    u, v = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    pix = np.stack([u.ravel(), v.ravel()], axis=1).reshape(-1, 1, 2)
    src = cv2.undistortPoints(pix, cam.matrix(), np.array(cam.distortion), P=cam.matrix(),
                              criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 50, 1e-9)).reshape(h, w, 2)
    return cv2.remap(ideal, src[..., 0].astype(np.float32), src[..., 1].astype(np.float32), cv2.INTER_LINEAR)


def _centroid(img: np.ndarray) -> np.ndarray:
    """Intensity-weighted centroid ``(u, v)`` of a 2-D image."""
    v, u = np.mgrid[: img.shape[0], : img.shape[1]]
    wts = img.astype(np.float64)
    return np.array([(u * wts).sum(), (v * wts).sum()]) / wts.sum()


def test_undistortion_moves_a_projected_point_back_to_the_pinhole_pixel():
    point = np.array([[-0.45, 0.3, 1.0]])  # far from the axis: distortion moves it by pixels
    pinhole = replace_distortion(DISTORTED).project(point)[0]
    distorted_px = DISTORTED.project(point)[0]
    assert np.linalg.norm(pinhole - distorted_px) > 3.0
    # a small bright blob where the lens puts the point
    v, u = np.mgrid[: DISTORTED.height, : DISTORTED.width]
    blob = np.exp(-((u - distorted_px[0]) ** 2 + (v - distorted_px[1]) ** 2) / (2 * 1.2**2))
    img = np.rint(255 * blob).astype(np.uint8)
    out = ImagePipeline([Undistort(DISTORTED)])(np.stack([img, img])[..., None])
    assert out.shape == (2, DISTORTED.height, DISTORTED.width, 1)
    assert np.linalg.norm(_centroid(out[0, ..., 0]) - pinhole) < 0.4
    assert np.linalg.norm(_centroid(img) - distorted_px) < 0.2  # the input blob was where the lens put it
    assert ImagePipeline([Undistort(DISTORTED)]).intrinsics(DISTORTED).distorted is False


def replace_distortion(cam: CameraIntrinsics) -> CameraIntrinsics:
    """``cam`` without distortion."""
    return CameraIntrinsics(cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height)


def _line_deviation(img: np.ndarray, axis: int) -> float:
    """Peak-to-peak of the centroid of a bright line (rows' column centroid for ``axis=1``) along it,
    after removing the best straight-line fit: 0 for a straight line."""
    wts = img.astype(np.float64)
    idx = np.arange(img.shape[axis])
    mass = wts.sum(axis=axis)
    keep = mass > 0.5 * mass.max()
    pos = (wts * (idx[None, :] if axis == 1 else idx[:, None])).sum(axis=axis)[keep] / mass[keep]
    t = np.flatnonzero(keep)
    fit = np.polyval(np.polyfit(t, pos, 1), t)
    return float(np.ptp(pos - fit))


def test_undistortion_straightens_lines_the_lens_bent():
    # one image per line (no crossing); lines near the edges, where the barrel bends them most
    vertical = np.zeros((DISTORTED.height, DISTORTED.width), dtype=np.uint8)
    horizontal = np.zeros_like(vertical)
    cv2.line(vertical, (8, 0), (8, 95), 255, 3)
    cv2.line(horizontal, (0, 86), (127, 86), 255, 3)
    ideal = np.stack([cv2.GaussianBlur(x, (5, 5), 1.0) for x in (vertical, horizontal)])  # soft: sampling keeps mass
    bent = np.stack([_distort(x, DISTORTED) for x in ideal])
    out = ImagePipeline([Undistort(DISTORTED)])(bent[..., None])[..., 0]
    # judged away from the ends (the corners map outside the distorted image's field)
    rows, cols = slice(12, 84), slice(16, 112)
    assert _line_deviation(bent[0, rows], axis=1) > 1.5 and _line_deviation(bent[1, :, cols], axis=0) > 2.5
    assert _line_deviation(out[0, rows], axis=1) < 0.3
    assert _line_deviation(out[1, :, cols], axis=0) < 0.3
    # and where they were drawn: column 8, row 86
    assert abs(_centroid(out[0, rows])[0] - 8.0) < 0.3
    assert abs(_centroid(out[1, :, cols])[1] - 86.0) < 0.3


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: Resize(0, 10), ["resize.width", "0", "positive integer"]),
        (lambda: Resize(10, 10, "cubic"), ["resize.interpolation", "'cubic'", "area"]),
        (lambda: ConvertColor("rgb2hsv"), ["convert_color.conversion", "'rgb2hsv'"]),
        (lambda: Crop(-1, 0, 2, 2), ["crop.x", "-1", ">= 0"]),
        (lambda: CameraIntrinsics(0.0, 1.0, 0, 0, 4, 4), ["intrinsics.fx", "0.0", "positive"]),
        (lambda: CameraIntrinsics(1.0, 1.0, 0, 0, 4, 4, (0.1, 0.2)), ["intrinsics.distortion", "5 coefficients", "2"]),
        (lambda: CameraIntrinsics(1.0, 1.0, float("nan"), 0, 4, 4), ["intrinsics.cx", "nan"]),
        (lambda: ImagePipeline.from_dict([{"op": "blur"}]), ["steps[0].op", "'blur'"]),
        (lambda: ImagePipeline.from_dict([{"op": "resize", "width": 4, "height": 4, "size": 2}]), ["steps[0]", "size"]),
        (lambda: CameraIntrinsics.from_dict({"fx": 1.0}), ["intrinsics", "missing", "cx"]),
    ],
)
def test_bad_parameters_are_named(build, words):
    with pytest.raises(ImageOpError) as err:
        build()
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_bad_images_are_named():
    img = np.zeros((1, 8, 8, 3), dtype=np.uint8)
    with pytest.raises(ImageOpError, match=r"crop: region x=6.*exceeds the 8x8"):
        ImagePipeline([Crop(6, 0, 4, 4)])(img)
    with pytest.raises(ImageOpError, match="dtype uint8, got float32"):
        ImagePipeline([])(img.astype(np.float32))
    with pytest.raises(ImageOpError, match=r"shape \[N, H, W, C\], got \(8, 8, 3\)"):
        ImagePipeline([])(img[0])
    with pytest.raises(ImageOpError, match="rgb2gray: expected 3 input channel"):
        ImagePipeline([ConvertColor("rgb2gray")])(img[..., :1])
    with pytest.raises(ImageOpError, match="undistort: images are 8x8.*128x96"):
        ImagePipeline([Undistort(DISTORTED)])(img)
    with pytest.raises(ImageOpError, match="undistort: the images reaching it are 64x48.*128x96"):
        ImagePipeline([Resize(64, 48), Undistort(DISTORTED)]).intrinsics(DISTORTED)
