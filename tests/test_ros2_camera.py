"""Camera images over ROS 2 for real: ``Ros2Robot`` and the robot node's ``--images``, inside ``unshare -n``.

The scenario is :mod:`robolearn.sim2real.ros.ros2_camera_probe`, run by the ROS 2 venv's
interpreter in a fresh network namespace with only loopback up (and a PID namespace where allowed),
as ``tests/test_ros2.py`` runs its own (the reasons are in that module's doc); it prints its
measurements as JSON and the assertions are here. Where the venv, ``unshare -n`` or ``ip`` is
missing the tests are skipped with the reason.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.test_ros2 import REPO, ROS2_PYTHON, _namespace_command, scenario_env

pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The probe's measurements (``ros2_camera_probe`` module doc)."""
    unshare, reason = _namespace_command()
    if unshare is None:  # no ROS 2 venv, no unshare -n, no ip: skipped, saying why
        raise pytest.skip.Exception(reason)
    work = tmp_path_factory.mktemp("ros2_camera")
    command = f"ip link set lo up && exec {ROS2_PYTHON} -m robolearn.sim2real.ros.ros2_camera_probe --workdir {work}"
    # Everything runs in the namespaces and dies with them; the timeout ends a hung scenario.
    out = subprocess.run([*unshare, "sh", "-c", command], capture_output=True, text=True, timeout=240,
                         env=scenario_env(), cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("error_p", "error_l"):
        assert key not in result, (result[key], out.stderr[-3000:])
    return result


def test_ros2_robot_reads_camera_images_and_refuses_mismatched_ones(scenario: dict) -> None:
    """Ros2Robot with an Image camera and a PNG CompressedImage camera: each reading carries the
    newest frame of each, the published pixels exactly with the header's stamp; a bgr8 message is
    converted to RGB; messages of another width or encoding are refused, counted and named, the last
    good frame kept; once the cameras stop their frames keep their receipt times (they age) while the
    joint states stay fresh."""
    p = scenario["pieces"]
    print(f"\n{json.dumps({k: v for k, v in p.items() if k != 'errors'})}")
    assert p["topics"] == {"front": "/rl_cam/front/image_raw", "wrist": "/rl_cam/wrist/image_raw/compressed"}
    for camera, shape in (("front", [48, 64, 3]), ("wrist", [24, 32, 3])):
        f = p["frames"][camera]
        assert f is not None, p
        assert f["shape"] == shape and f["dtype"] == "uint8" and f["exact"] and f["received_before_now"]
        assert f["stamp"] == round(f["stamp"]) >= 1  # the header's stamp: whole seconds k of frame k
    assert p["bgr8_converted"] is True
    assert p["refused"] == 3 and p["joint_state_rejections"] == 0
    assert p["errors"][0] == "/rl_cam/front/image_raw.width: 63 (expected 64: the camera declares 64x48 rgb8)"
    assert p["errors"][1].startswith("/rl_cam/front/image_raw.encoding: 'mono8' (expected one of ['rgb8'")
    assert p["errors"][2].startswith("/rl_cam/wrist/image_raw/compressed.data: the png image is 30x24")
    assert p["kept_front_stamp"] == 10_000.0  # the last good frame (the bgr8 one)
    assert p["stale"]["receipt_kept"] and p["stale"]["joint_state_fresher"] and p["stale"]["front_age_s"] > 0.3


def test_ros2_robot_node_publishes_the_pixel_task_camera_end_to_end(scenario: dict) -> None:
    """The ROS 2 robot node on Cartpole-Swingup-Pixels with ``--images``: its features declare the
    ``fixed`` camera; a Ros2Robot gets 84x84 RGB frames and the picture changes as the cart moves."""
    r = scenario["loop"]
    print(f"\n{json.dumps({k: v for k, v in r.items() if k != 'log'})}")
    assert "error" not in r, r["log"]
    assert r["cameras"] == {"fixed": {"height": 84, "width": 84, "encoding": "rgb8", "rate_hz": 100.0}}
    assert r["camera"] == "fixed" and r["shape"] == [84, 84, 3]
    assert r["cart_moved_m"] > 0.2 and r["changed_pixels"] > 0.005, r["log"]
    assert r["frames"] > 30 and r["frame_after_state"]  # best effort: some may be lost, most arrive
    assert r["robot_exit"] == 0, r["log"]
