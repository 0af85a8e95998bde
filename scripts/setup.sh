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
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
FORCE=${FORCE:-0}
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

# python3-venv creates the venv. The rest are the GL libraries MuJoCo's offscreen renderer loads on
# a machine without a display (robolearn/sim/render.py, GL_PACKAGES): EGL through libglvnd with
# Mesa's drivers (llvmpipe where there is no GPU), and OSMesa as the software fallback.
APT_PACKAGES=(python3 python3-venv libegl1 libgl1 libegl-mesa0 libgl1-mesa-dri libopengl0 libosmesa6)

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

install_system_packages() {
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
            die "installing ${missing[*]} needs root or sudo; run this script as root, or install them yourself and rerun"
        fi
        # Without a terminal (CI) sudo must not wait for a password that never comes.
        if [ -t 0 ]; then sudo=(sudo); else sudo=(sudo -n); fi
        say "installing ${missing[*]} needs root: using sudo"
    fi
    say "apt-get install ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        || die "apt-get update failed (installing ${missing[*]} needs root or sudo and network access)"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        || die "apt-get install ${missing[*]} failed (see above)"
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

install_system_packages
create_venv
install_python_packages
say "done: $("$VENV/bin/python" -c 'import robolearn, torch, mujoco; print(f"robolearn {robolearn.__version__}, torch {torch.__version__}, mujoco {mujoco.__version__}")')"
