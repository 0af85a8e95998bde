"""pyproject's optional dependencies: every requirement is valid, and the GPU packages that follow
MuJoCo's own versions ask for the MuJoCo release the core depends on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    tomllib = pytest.importorskip("tomli")

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

LOCKSTEP = ("mujoco-warp",)
"""Packages released with MuJoCo's version number: each must accept exactly the MuJoCo releases
the core dependency accepts, or ``pip install .[gpu]`` pairs mismatched builds."""


def _project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


def _requirements(strings: list[str], where: str) -> list[Requirement]:
    out = []
    for text in strings:
        try:
            out.append(Requirement(text))
        except InvalidRequirement as exc:
            pytest.fail(f"{where}: {text!r} is not a valid requirement ({exc})")
    return out


def test_every_extra_is_a_list_of_valid_requirements():
    project = _project()
    extras = project["optional-dependencies"]
    assert {"dev", "export", "data", "ros", "gpu", "sb3"} <= set(extras)
    _requirements(project["dependencies"], "dependencies")
    for name, strings in extras.items():
        assert isinstance(strings, list) and strings, f"{name}: an extra lists at least one requirement"
        reqs = _requirements(strings, f"optional-dependencies.{name}")
        names = [r.name for r in reqs]
        assert len(names) == len(set(names)), f"{name}: a package listed twice: {names}"
        for req in reqs:
            assert req.specifier, f"{name}: {req.name} has no version bound"


@pytest.mark.parametrize("package", LOCKSTEP)
def test_gpu_packages_follow_the_core_mujoco_version(package):
    project = _project()
    core = next(r for r in _requirements(project["dependencies"], "dependencies") if r.name == "mujoco")
    gpu = {r.name: r for r in _requirements(project["optional-dependencies"]["gpu"], "gpu")}
    assert package in gpu, f"gpu extra: {package} missing"
    # Releases around the core's range: the GPU package must accept the same ones.
    for version in ("3.3.0", "3.17.0", "4.0.0", "4.2.1", "5.0.0"):
        assert gpu[package].specifier.contains(version) == core.specifier.contains(version), (
            f"{package}{gpu[package].specifier} and mujoco{core.specifier} disagree on {version}"
        )
    # Its marker must hold on the Python the project supports best (it may drop older ones).
    assert gpu[package].marker is None or gpu[package].marker.evaluate({"python_version": "3.12"})
