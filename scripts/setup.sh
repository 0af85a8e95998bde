#!/usr/bin/env bash
# Set up robolearn on a Debian/Ubuntu machine: system packages, .venv, torch, the package.
#
#   bash scripts/setup.sh
#
# Idempotent and non-interactive: each step is skipped when already done, so a second run takes
# seconds. Installing the system packages needs root or sudo (only when some are missing).
#
# Environment:
#   TORCH_SPEC       torch requirement installed first        (default: torch==2.13.0)
#   TORCH_INDEX_URL  extra pip index for torch, e.g. PyTorch's CPU or CUDA wheel index
#                                                                              (default: none)
#   PYTHON           interpreter that creates the venv                         (default: python3)
#   VENV             where the venv goes, relative to the repository          (default: .venv)
#   FORCE=1          reinstall the package even if nothing changed
#   ROS=0            skip ROS: no Debian ROS 1 packages, no ROS 2 venv (the `ros` tests then skip,
#                    saying why)                                                (default: 1)
#   VENV_ROS2        the ROS 2 venv, relative to the repository               (default: .venv-ros2)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
FORCE=${FORCE:-0}
ROS=${ROS:-1}
VENV_ROS2=${VENV_ROS2:-.venv-ros2}
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

# python3-venv creates the venv. The rest are the GL libraries MuJoCo's offscreen renderer loads on
# a machine without a display (robolearn/sim/render.py, GL_PACKAGES): EGL through libglvnd with
# Mesa's drivers (llvmpipe where there is no GPU), and OSMesa as the software fallback. g++ is
# the C++ compiler torch.compile's CPU kernels are built with (`algo.compile=true`, which the SAC
# recipes set).
APT_PACKAGES=(python3 python3-venv g++ libegl1 libgl1 libegl-mesa0 libgl1-mesa-dri libopengl0 libosmesa6)
# ROS 1 (Noetic's Python core as Debian packages it): the master, rospy, rosbag and the message
# packages the bridges use (robolearn/sim2real/ros). They live in /usr/lib/python3/dist-packages;
# install_ros1_path makes them importable from the venv (appended after its own packages, so the
# venv's numpy and friends win). iproute2 brings `ip`, which brings loopback up inside `unshare -n`
# for the ROS 2 tests.
ROS_PACKAGES=(ros-core python3-rospy python3-rosmaster python3-rosbag python3-std-msgs python3-sensor-msgs
              python3-trajectory-msgs python3-geometry-msgs iproute2)

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

install_system_packages() {
    install_apt_packages required "${APT_PACKAGES[@]}"
    if [ "$ROS" = 1 ]; then
        # Best effort: without ROS the rest works, and the `ros` tests skip saying why.
        install_apt_packages optional "${ROS_PACKAGES[@]}" \
            || say "warning: ROS 1 packages could not be installed; the ROS tests will skip (ROS=0 silences this)"
    fi
}

apt_fail() {
    # A required package is fatal; an optional one (ROS) is a warning the caller reports.
    if [ "$1" = required ]; then die "$2"; fi
    say "warning: $2"
}

install_apt_packages() {
    local need=$1
    shift
    local APT_PACKAGES=("$@")
    if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
        say "no apt-get here: make sure these (or your distribution's equivalents) are installed: ${APT_PACKAGES[*]}"
        return
    fi
    local missing=() pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$pkg")
        fi
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "system packages present: ${APT_PACKAGES[*]}"
        return
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            apt_fail "$need" "installing ${missing[*]} needs root or sudo; run this script as root, or install them yourself and rerun"
            return 1
        fi
        # Without a terminal (CI) sudo must not wait for a password that never comes.
        if [ -t 0 ]; then sudo=(sudo); else sudo=(sudo -n); fi
        say "installing ${missing[*]} needs root: using sudo"
    fi
    say "apt-get install ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        || { apt_fail "$need" "apt-get update failed (installing ${missing[*]} needs root or sudo and network access)"; return 1; }
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        || { apt_fail "$need" "apt-get install ${missing[*]} failed (see above)"; return 1; }
}

create_venv() {
    if [ -x "$VENV/bin/python" ]; then
        "$VENV/bin/python" -c 'import sys' 2>/dev/null \
            || die "$VENV exists but its python does not run; delete $VENV and rerun"
        say "venv present: $VENV"
        return
    fi
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=/path/to/python3.10+)"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "robolearn needs Python >= 3.10; $PYTHON is $("$PYTHON" --version 2>&1) (set PYTHON=...)"
    say "creating $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
}

install_python_packages() {
    local pip=("$VENV/bin/python" -m pip install --quiet)
    local stamp="$VENV/.robolearn-setup" want
    # Reinstall only when what decides the installed set changes (new packages under tasks/ etc.
    # are picked up by the editable install without it).
    want=$(cat pyproject.toml setup.py <(printf '%s\n%s\n' "$TORCH_SPEC" "$TORCH_INDEX_URL") | sha256sum | cut -d' ' -f1)
    if [ "$FORCE" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && [ -x "$VENV/bin/robolearn" ] && "$VENV/bin/python" -c 'import robolearn' 2>/dev/null; then
        say "python packages up to date (FORCE=1 reinstalls)"
        return
    fi
    rm -f "$stamp"
    # torch first and pinned: the package only asks for torch>=2.4, and letting pip resolve that
    # would pull the default (CUDA) build with gigabytes of nvidia packages.
    say "pip install $TORCH_SPEC"
    if [ -n "$TORCH_INDEX_URL" ]; then
        "${pip[@]}" --extra-index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"
    else
        "${pip[@]}" "$TORCH_SPEC"
    fi
    say "pip install -e .[dev]"
    "${pip[@]}" -e ".[dev]"
    printf '%s\n' "$want" >"$stamp"
}

install_ros1_path() {
    # A .pth line is appended to sys.path after the venv's own site-packages.
    local site pth
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    pth="$site/robolearn-ros1.pth"
    if [ "$ROS" != 1 ] || [ ! -d /usr/lib/python3/dist-packages/rospy ]; then
        rm -f "$pth"
        say "ROS 1 not set up (ROS=$ROS; rospy in /usr/lib/python3/dist-packages: $([ -d /usr/lib/python3/dist-packages/rospy ] && echo yes || echo no))"
        return
    fi
    printf '%s\n' /usr/lib/python3/dist-packages >"$pth"
    say "ROS 1 importable from $VENV (rospy $("$VENV/bin/python" -c 'import rospy, os; print(os.path.dirname(rospy.__file__))'))"
}

install_ros2_venv() {
    # ROS 2 comes as wheels (ros-rclpy and the message packages, Fast DDS). They get a venv of their
    # own because their std_msgs/sensor_msgs packages share names with ROS 1's: one interpreter
    # cannot import both. That venv sees the main venv's packages (robolearn, torch, onnxruntime)
    # through a .pth that adds them after its own, so nothing is installed twice.
    if [ "$ROS" != 1 ]; then
        say "ROS 2 venv skipped (ROS=$ROS)"
        return
    fi
    local stamp="$VENV_ROS2/.robolearn-setup" want site main_site
    want=$(grep -A2 '^ros2 = ' pyproject.toml | sha256sum | cut -d' ' -f1)
    if [ "$FORCE" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && "$VENV_ROS2/bin/python" -c 'import rclpy, robolearn' 2>/dev/null; then
        say "ROS 2 venv up to date: $VENV_ROS2"
        return
    fi
    [ -x "$VENV_ROS2/bin/python" ] || "$PYTHON" -m venv "$VENV_ROS2"
    local numpy_version ros2_reqs
    numpy_version=$("$VENV/bin/python" -c 'import numpy; print(numpy.__version__)')
    ros2_reqs=$("$VENV/bin/python" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as fh:
    print(" ".join(tomllib.load(fh)["project"]["optional-dependencies"]["ros2"]))
PY
)
    say "pip install (ROS 2 venv) $ros2_reqs"
    # shellcheck disable=SC2086
    if ! "$VENV_ROS2/bin/python" -m pip install --quiet $ros2_reqs "numpy==$numpy_version"; then
        say "warning: the ROS 2 wheels could not be installed; the ROS 2 tests will skip (ROS=0 silences this)"
        return
    fi
    site=$("$VENV_ROS2/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    main_site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # addsitedir also runs the main venv's .pth files: the editable robolearn install among them.
    printf 'import site; site.addsitedir(%s)\n' "'$(cd "$main_site" && pwd)'" >"$site/robolearn-main-venv.pth"
    if ! "$VENV_ROS2/bin/python" -c 'import rclpy, robolearn, onnxruntime'; then
        say "warning: the ROS 2 venv $VENV_ROS2 cannot import rclpy and robolearn together; the ROS 2 tests will skip"
        return
    fi
    printf '%s\n' "$want" >"$stamp"
    say "ROS 2 venv ready: $VENV_ROS2"
}

install_system_packages
create_venv
install_python_packages
install_ros1_path
install_ros2_venv
say "done: $("$VENV/bin/python" -c 'import robolearn, torch, mujoco; print(f"robolearn {robolearn.__version__}, torch {torch.__version__}, mujoco {mujoco.__version__}")')"
