"""Packaging and set-up: the built wheel, the editable install, and the quick start's wiring.

DESIGN.md ("Layout"): ``tasks/``, ``sim2real/``, ``assets/`` and ``configs/`` install as
``robolearn.tasks`` and so on, and a test proves it from a built wheel, not only from the editable
install. The wheel is built from a copy of the sources (so no ``build/`` lands in the checkout),
installed into a fresh venv, and imported there from a folder that is not the repository.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAPPED = {
    "tasks": "robolearn.tasks",
    "sim2real": "robolearn.sim2real",
    "assets": "robolearn.assets",
    "configs": "robolearn.configs",
}
"""Source folders installed under the robolearn namespace (setup.py)."""
PACKAGES = ["robolearn", *MAPPED.values()]
PACKAGE_DATA = {"assets": ("*.xml", "*.png", "*.stl", "*.obj"), "configs": ("*.yaml",)}
"""Data files that must ship, by source folder (pyproject's package-data)."""
SOURCE_FILES = ["pyproject.toml", "setup.py", "README.md", "MANIFEST.in", "LICENSE", "robolearn", *MAPPED]

# Runs inside the wheel's venv: where each package resolves, whether generic top-level names
# exist, and one step of a task built from the installed files.
PROBE = """
import importlib, importlib.util, json, sysconfig
import torch
import robolearn
files = {name: importlib.import_module(name).__file__ for name in %(packages)r}
top_level = {name: importlib.util.find_spec(name) is not None for name in %(mapped)r}
env = robolearn.make("HalfCheetah", 2, seed=0)
obs, reward, terminated, truncated, info = env.step(torch.zeros(2, env.action_dim))
print(json.dumps({
    "files": files,
    "top_level": top_level,
    "purelib": sysconfig.get_paths()["purelib"],
    "tasks": robolearn.list_tasks(),
    "policy_shape": list(obs["policy"].shape),
    "reward_shape": list(reward.shape),
}))
"""


def _clean_env() -> dict[str, str]:
    """The environment for child interpreters: nothing that would put the checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(cmd: list[str | Path], cwd: Path, timeout: float = 300) -> str:
    """Run ``cmd``; on failure, fail the test with its output."""
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


def _package_data(root: Path) -> list[str]:
    """Data files under the mapped folders of ``root`` as wheel paths (``robolearn/assets/x.xml``)."""
    found = []
    for folder, patterns in PACKAGE_DATA.items():
        for pattern in patterns:
            for path in (root / folder).rglob(pattern):
                found.append(f"robolearn/{folder}/{path.relative_to(root / folder).as_posix()}")
    return sorted(found)


def _python_sources(root: Path) -> list[str]:
    """Every library ``.py`` file of ``root`` as a wheel path."""
    found = [
        f"robolearn/{p.relative_to(root / 'robolearn').as_posix()}"
        for p in (root / "robolearn").rglob("*.py")
    ]
    for folder in MAPPED:
        found += [
            f"robolearn/{folder}/{p.relative_to(root / folder).as_posix()}"
            for p in (root / folder).rglob("*.py")
        ]
    return sorted(found)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built (without build isolation: offline and fast) from a copy of the sources."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in SOURCE_FILES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        elif path.is_file():
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, src],
        cwd=src,
    )
    wheels = list(out.glob("robolearn-*.whl"))
    assert len(wheels) == 1, f"expected one wheel, got {wheels}"
    return wheels[0]


@pytest.fixture(scope="module")
def wheel_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; dependencies come from the running environment.

    ``--system-site-packages`` exposes only the *base* interpreter's packages when this test runs
    in a venv (``.venv``), so the running environment's site-packages are added with a ``.pth``
    file, after the new venv's own: the wheel shadows the editable install, whose ``.pth`` hook is
    not run for a directory added this way.
    """
    root = tmp_path_factory.mktemp("wheel-venv") / "venv"
    # `pip --python` (pip >= 22.3) installs into a venv without pip of its own, which saves seconds.
    pip_has_python_option = tuple(int(x) for x in importlib.metadata.version("pip").split(".")[:2]) >= (22, 3)
    venv.EnvBuilder(system_site_packages=True, with_pip=not pip_has_python_option).create(root)
    python = root / "bin" / "python"
    pip = (
        [sys.executable, "-m", "pip", "--python", python] if pip_has_python_option else [python, "-m", "pip"]
    )
    # Installed before the .pth below exists, so pip does not see the editable robolearn.
    _run([*pip, "install", "--no-deps", "--no-index", "-q", wheel], cwd=root)
    purelib = Path(
        _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).strip()
    )
    outer = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (purelib / "_outer_env.pth").write_text("".join(f"{p}\n" for p in outer))
    return root


def test_wheel_contents(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    stray = sorted({n.split("/")[0] for n in names} - {"robolearn", dist_info})
    assert not stray, f"the wheel installs top-level names besides robolearn: {stray}"
    missing = sorted(set(_python_sources(REPO)) - set(names))
    assert not missing, f"sources missing from the wheel (a folder without __init__.py?): {missing}"
    data = _package_data(REPO)
    missing = sorted(set(data) - set(names))
    assert not missing, f"package data missing from the wheel: {missing}"
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert re.search(r"^robolearn\s*=\s*robolearn\.cli\.main:main$", entry_points, re.M), entry_points


def test_wheel_installs_and_imports_outside_the_repo(wheel_venv: Path, tmp_path: Path) -> None:
    code = PROBE % {"packages": PACKAGES, "mapped": list(MAPPED)}
    result = json.loads(
        _run([wheel_venv / "bin" / "python", "-I", "-c", code], cwd=tmp_path).splitlines()[-1]
    )
    purelib = Path(result["purelib"]).resolve()
    assert purelib.is_relative_to(wheel_venv.resolve())
    for name, file in result["files"].items():
        path = Path(file).resolve()
        expected = purelib / Path(*name.split(".")) / "__init__.py"
        assert path == expected, f"{name} resolved to {path}, expected the wheel's {expected}"
    assert not any(result["top_level"].values()), (
        f"generic top-level packages importable: {result['top_level']}"
    )
    for folder in MAPPED:
        assert not (purelib / folder).exists(), f"top-level {folder!r} installed into site-packages"
    for data in _package_data(REPO):
        assert (purelib / data).is_file(), f"{data} was not installed"
    assert "HalfCheetah" in result["tasks"]
    assert result["policy_shape"] == [2, 17]
    assert result["reward_shape"] == [2]


def test_wheel_console_script(wheel_venv: Path, tmp_path: Path) -> None:
    out = _run([wheel_venv / "bin" / "robolearn", "list"], cwd=tmp_path)
    assert "HalfCheetah" in out


def test_editable_install_points_at_the_repo(tmp_path: Path) -> None:
    # The installed metadata, not a stray robolearn.egg-info that the checkout on sys.path exposes.
    purelib = sysconfig.get_paths()["purelib"]
    installed = list(importlib.metadata.distributions(name="robolearn", path=[purelib]))
    # scripts/setup.sh (the README's commands, and CI's) installs the checkout editable.
    assert installed, f"robolearn is not installed in {purelib}: run scripts/setup.sh"
    direct_url = json.loads(installed[0].read_text("direct_url.json") or "{}")
    assert direct_url.get("dir_info", {}).get("editable"), "robolearn is installed from a wheel, not editable: run scripts/setup.sh"
    code = f"import importlib, json; print(json.dumps({{n: importlib.import_module(n).__file__ for n in {PACKAGES!r}}}))"
    files = json.loads(_run([sys.executable, "-I", "-c", code], cwd=tmp_path).splitlines()[-1])
    for name, file in files.items():
        folder = name.split(".")[-1] if name in MAPPED.values() else "robolearn"
        assert Path(file).resolve() == REPO / folder / "__init__.py", f"{name} resolved to {file}"
    script = Path(sys.executable).parent / "robolearn"
    assert script.is_file(), f"console script {script} missing: rerun scripts/setup.sh"
    assert "HalfCheetah" in _run([script, "list"], cwd=tmp_path)


def _quick_start_commands() -> list[str]:
    """The commands of README.md's "Quick start" section (each in its own fenced block)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.M | re.S)
    assert section, "README.md has no '## Quick start' section"
    return [block.strip() for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", section.group(1), re.S)]


def test_readme_quick_start_is_two_commands_and_ci_runs_the_second() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    assert all(c.startswith("bash scripts/setup.sh && ") for c in commands), commands
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci, ".ci/run must run README's second command verbatim"
    assert os.access(REPO / ".ci" / "run", os.X_OK)


def _renderer_gl_packages() -> dict[str, str] | None:
    """``GL_PACKAGES`` of ``robolearn/sim/render.py``, read without importing it (no GL probing)."""
    render = REPO / "robolearn" / "sim" / "render.py"
    if not render.is_file():
        return None
    for node in ast.parse(render.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "GL_PACKAGES" for t in targets):
            return ast.literal_eval(node.value)
    return None


def test_setup_script_installs_the_gl_packages_the_renderer_names() -> None:
    table = _renderer_gl_packages()
    assert table is not None, "robolearn/sim/render.py must name the GL_PACKAGES it needs"
    setup = (REPO / "scripts" / "setup.sh").read_text(encoding="utf-8")
    listed = re.search(r"^APT_PACKAGES=\((.*?)\)", setup, re.M | re.S)
    assert listed, "scripts/setup.sh has no APT_PACKAGES=(...) list"
    missing = {p for pkgs in table.values() for p in pkgs.split()} - set(listed.group(1).split())
    assert not missing, f"scripts/setup.sh does not install {sorted(missing)}, which the renderer needs"


def test_version_string_matches_pyproject() -> None:
    import tomllib

    from robolearn import __version__

    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"] == __version__
