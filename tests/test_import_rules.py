"""The import table of DESIGN.md ("Layout and who may import whom"), enforced on every source file.

Each ``.py`` file under ``robolearn/``, ``tasks/``, ``sim2real/``, ``assets/`` and ``configs/`` is
mapped to its module group; every import statement (top-level, inside functions, under
``TYPE_CHECKING``, and ``importlib.import_module``/``__import__`` calls with a literal name) of a
robolearn module must target the file's own group or one its "may import" column lists. The
standard library and third-party packages are free, except that Hydra/OmegaConf belong to
``robolearn/cli`` and rospy/rclpy to ``sim2real/ros``.

To change a rule, change the table in DESIGN.md (with a reason) and then ``MAY_IMPORT`` here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SOURCE_ROOTS: dict[str, str] = {
    "robolearn": "robolearn",
    "tasks": "robolearn.tasks",
    "sim2real": "robolearn.sim2real",
    "assets": "robolearn.assets",
    "configs": "robolearn.configs",
}
"""Top-level source folders and the package each installs as (setup.py's package-dir mapping)."""

GROUPS: dict[str, str] = {
    "facade": "robolearn",
    "gym": "robolearn.gym",
    "types": "robolearn.types",
    "utils": "robolearn.utils",
    "spec": "robolearn.spec",
    "sim": "robolearn.sim",
    "envs": "robolearn.envs",
    "nn": "robolearn.nn",
    "data": "robolearn.data",
    "algos": "robolearn.algos",
    "runners": "robolearn.runners",
    "logging": "robolearn.logging",
    "export": "robolearn.export",
    "analysis": "robolearn.analysis",
    "benchmark": "robolearn.benchmark",
    "cli": "robolearn.cli",
    "tasks": "robolearn.tasks",
    "assets": "robolearn.assets",
    "configs": "robolearn.configs",
    "sim2real": "robolearn.sim2real",
    "sim2real.randomization": "robolearn.sim2real.randomization",
    "sim2real.deploy": "robolearn.sim2real.deploy",
    "sim2real.robots": "robolearn.sim2real.robots",
    "sim2real.ros": "robolearn.sim2real.ros",
}
"""Module groups by the package (or module) that holds them. ``facade`` (``robolearn/__init__.py``)
and ``sim2real`` (``sim2real/__init__.py``) are the package files only, not their sub-packages."""

PACKAGE_FILE_ONLY = {"facade", "sim2real"}

ALGORITHM_SHARED = frozenset({"robolearn.algos.common", "robolearn.algos.registry"})
"""Modules of ``robolearn/algos`` that are not an algorithm: the learners' shared behaviour and the
registry (which imports every algorithm; nothing but it may)."""

EVERYTHING = frozenset(GROUPS)

MAY_IMPORT: dict[str, frozenset[str]] = {
    # The package facade builds envs of registered tasks (robolearn.make / list_tasks), reads the
    # version and loads trained runs (robolearn.load_policy, in runners), all lazily inside functions.
    "facade": frozenset({"envs", "runners", "utils"}),
    # robolearn.gym: importing it registers the tasks with Gymnasium (gymnasium.make("robolearn.gym:...")).
    "gym": frozenset({"envs"}),
    "types": frozenset(),
    "utils": frozenset({"types"}),
    "spec": frozenset({"types", "utils"}),
    "sim": frozenset({"types", "utils"}),
    "envs": frozenset({"sim", "spec", "types", "utils"}),
    "nn": frozenset({"types", "utils"}),
    "data": frozenset({"types", "utils"}),
    "algos": frozenset({"nn", "data", "spec", "types", "utils"}),
    # runners read and compare policy specs (resume checks, load_policy): the typed spec of robolearn.spec.
    "runners": frozenset({"algos", "data", "logging", "spec", "types", "utils"}),
    "logging": frozenset({"utils"}),
    "export": frozenset({"nn", "spec", "types", "utils"}),
    # robolearn compare reads finished run directories (files only): no runner, algorithm or env.
    "analysis": frozenset({"logging", "utils"}),
    # robolearn benchmark runs training in subprocesses (robolearn train, the SB3 side through the
    # SB3 adapter of envs) and reports from run directories with analysis: never a runner or algorithm.
    "benchmark": frozenset({"analysis", "envs", "logging", "types", "utils"}),
    "cli": EVERYTHING,
    "tasks": frozenset({"envs", "sim", "sim2real.randomization", "assets"}),
    "assets": frozenset(),
    "configs": frozenset(),
    # sim2real/__init__.py is not in the table: it imports nothing of robolearn.
    "sim2real": frozenset(),
    "sim2real.randomization": frozenset({"envs", "sim"}),
    "sim2real.deploy": frozenset({"spec", "export", "data", "types", "sim2real.robots"}),
    "sim2real.robots": frozenset({"types"}),
    "sim2real.ros": frozenset({"sim2real.deploy", "sim2real.robots"}),
}
"""DESIGN.md's "may import" column; a group may always import within itself."""

SIMULATED_ROBOT_EXTRA = frozenset({"envs", "sim", "sim2real.randomization"})
"""What the simulated robot (a ``sim2real/robots`` module whose name starts with ``sim``, e.g.
``sim_robot.py``) may import besides the rest of its group's column: it is one world of a task's
env (``envs``), so the task's actuator, latency and randomisation models act as in training."""

RESTRICTED_THIRD_PARTY: dict[str, str] = {
    "hydra": "cli",
    "omegaconf": "cli",
    "rospy": "sim2real.ros",
    "rclpy": "sim2real.ros",
    # The GPU physics stays behind the SimBackend boundary (robolearn/sim/warp_backend.py).
    "warp": "sim",
    "mujoco_warp": "sim",
}
"""Third-party top-level packages only one group may import."""

UNMAPPED_TOP_LEVEL = {folder for folder in SOURCE_ROOTS if folder != "robolearn"}
"""Source folders that do not exist as top-level packages once installed."""


@dataclass(frozen=True)
class Violation:
    """One import the table does not allow."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def module_name(rel_path: str) -> tuple[str, bool]:
    """The installed module name of a source file (``tasks/a/b.py`` -> ``robolearn.tasks.a.b``) and
    whether it is a package ``__init__``."""
    parts = list(Path(rel_path).with_suffix("").parts)
    parts[0] = SOURCE_ROOTS[parts[0]]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def group_of(module: str) -> str | None:
    """The group a robolearn module belongs to (longest matching package), or ``None``."""
    best: str | None = None
    for group, package in GROUPS.items():
        exact = module == package
        inside = module.startswith(package + ".") and group not in PACKAGE_FILE_ONLY
        if (exact or inside) and (best is None or len(package) > len(GROUPS[best])):
            best = group
    return best


def allowed_groups(module: str) -> frozenset[str]:
    """Groups ``module`` may import: its own, its column, and the simulated robot's exception."""
    group = group_of(module)
    assert group is not None
    allowed = MAY_IMPORT[group] | {group}
    if group == "sim2real.robots" and module.rpartition(".")[2].startswith("sim"):
        allowed |= SIMULATED_ROBOT_EXTRA
    return allowed


def _imported_modules(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> list[tuple[int, str]]:
    """Every module an AST imports, as absolute names with line numbers (``from X import y``
    counts as ``X.y`` when that is a known module, else as ``X``)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                is_module = sub in known or group_of(sub) not in (None, group_of(target))
                found.append((node.lineno, sub if is_module else target))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def check_source(rel_path: str, source: str, known: set[str] | None = None) -> list[Violation]:
    """Violations of the import table in one file, given its repository path and its text."""
    module, is_package = module_name(rel_path)
    group = group_of(module)
    if group is None:
        return [
            Violation(rel_path, 0, f"{module} belongs to no group of DESIGN.md's table; add it there first")
        ]
    allowed = allowed_groups(module)
    tree = ast.parse(source, filename=rel_path)
    out: list[Violation] = []
    for line, target in _imported_modules(tree, module, is_package, known or set()):
        top = target.split(".")[0]
        if top == "robolearn":
            tgroup = group_of(target)
            if tgroup is None:
                out.append(
                    Violation(rel_path, line, f"imports {target}, which belongs to no group of the table")
                )
            elif tgroup not in allowed:
                may = ", ".join(sorted(MAY_IMPORT[group])) or "nothing"
                out.append(
                    Violation(
                        rel_path, line, f"{group} imports {target} ({tgroup}); {group} may import: {may}"
                    )
                )
        elif top in UNMAPPED_TOP_LEVEL:
            out.append(
                Violation(
                    rel_path,
                    line,
                    f"imports top-level {target!r}, which is not installed; use robolearn.{target}",
                )
            )
        elif top in RESTRICTED_THIRD_PARTY and RESTRICTED_THIRD_PARTY[top] != group:
            out.append(Violation(rel_path, line, f"imports {top}; only {RESTRICTED_THIRD_PARTY[top]} may"))
    return out


def source_files() -> list[Path]:
    """Every library source file, sorted."""
    files: list[Path] = []
    for folder in SOURCE_ROOTS:
        files += (REPO / folder).rglob("*.py")
    return sorted(f for f in files if "__pycache__" not in f.parts)


def known_modules(files: list[Path]) -> set[str]:
    """Installed names of the given source files."""
    return {module_name(str(f.relative_to(REPO)))[0] for f in files}


def test_library_imports_follow_the_table() -> None:
    files = source_files()
    assert any(f.name == "batched_env.py" for f in files), "walker found no sources"
    known = known_modules(files)
    violations: list[Violation] = []
    for f in files:
        violations += check_source(str(f.relative_to(REPO)), f.read_text(encoding="utf-8"), known)
    assert not violations, "imports that DESIGN.md's table does not allow:\n" + "\n".join(
        map(str, violations)
    )


def test_table_covers_every_group() -> None:
    assert set(MAY_IMPORT) == set(GROUPS)
    for group, allowed in MAY_IMPORT.items():
        assert allowed <= EVERYTHING, f"{group} lists unknown groups {sorted(allowed - EVERYTHING)}"


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("robolearn/sim/foo.py", "from robolearn.envs import BatchedEnv"),
        ("robolearn/sim/foo.py", "from ..envs import BatchedEnv"),
        ("robolearn/sim/foo.py", "import robolearn.algos.ppo.agent"),
        ("robolearn/__init__.py", "def make():\n    import robolearn.tasks"),  # families load as plugins
        ("robolearn/sim/foo.py", "import robolearn"),
        ("robolearn/sim/foo.py", "from robolearn import make"),
        ("robolearn/types.py", "from robolearn.utils import WorldRNG"),
        ("robolearn/algos/ppo/agent.py", "from robolearn.envs import BatchedEnv"),
        ("robolearn/algos/ppo/agent.py", "from ... import envs"),
        ("robolearn/nn/mlp.py", "def f():\n    from robolearn.sim import MujocoBackend\n"),
        (
            "robolearn/nn/mlp.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import robolearn.data\n",
        ),
        ("robolearn/utils/x.py", "import importlib\nimportlib.import_module('robolearn.sim')"),
        ("robolearn/envs/x.py", "import tasks.locomotion"),
        ("robolearn/envs/x.py", "from sim2real.randomization import events"),
        ("robolearn/envs/x.py", "import hydra"),
        ("robolearn/runners/x.py", "from omegaconf import DictConfig"),
        ("sim2real/deploy/loop.py", "import rclpy.node"),
        ("sim2real/deploy/loop.py", "from robolearn.sim import MujocoBackend"),
        ("sim2real/robots/unitree.py", "from robolearn.sim import MujocoBackend"),
        ("sim2real/ros/node.py", "from robolearn.envs import BatchedEnv"),
        ("tasks/locomotion/go1.py", "from robolearn.algos import ppo"),
        ("tasks/locomotion/go1.py", "from robolearn.sim2real.deploy import loop"),
        ("assets/go1.py", "from robolearn.types import POLICY"),
        ("robolearn/newthing.py", "import os"),
        ("robolearn/envs/x.py", "import robolearn.unknown"),
    ],
)
def test_walker_catches(path: str, source: str) -> None:
    assert check_source(path, source), f"{path}: {source!r} should be a violation"


@pytest.mark.parametrize(
    ("path", "source"),
    [
        (
            "robolearn/sim/foo.py",
            "import os, numpy, torch, mujoco\nfrom robolearn.utils import rng\nfrom . import model",
        ),
        ("robolearn/sim/foo.py", "from robolearn.types import Obs\nfrom ..utils.rng import WorldRNG"),
        ("robolearn/envs/x.py", "from robolearn.sim import load_spec\nfrom robolearn import types"),
        (
            "robolearn/__init__.py",
            "def make():\n    from robolearn.envs.registry import make\n    from robolearn.runners.policy import load_policy",
        ),
        ("robolearn/cli/main.py", "from robolearn import make\nimport robolearn.sim2real.ros"),
        (
            "robolearn/cli/train.py",
            "import hydra\nfrom omegaconf import DictConfig\nimport robolearn\nfrom robolearn.algos import x",
        ),
        (
            "robolearn/algos/ppo/agent.py",
            "from robolearn.nn import mlp\nfrom robolearn.data import RolloutStorage\nfrom .config import C",
        ),
        (
            "tasks/locomotion/go1.py",
            "from robolearn.envs import mdp\nfrom robolearn.sim2real.randomization import events\nfrom robolearn.assets import x",
        ),
        (
            "tasks/locomotion/__init__.py",
            "from . import go1\nfrom .go1 import cfg\nfrom robolearn.tasks.locomotion import half_cheetah",
        ),
        (
            "sim2real/robots/sim_robot.py",
            "from robolearn.sim import MujocoBackend\nfrom robolearn.sim2real.randomization import e",
        ),
        ("sim2real/ros/node.py", "import rclpy\nimport rospy\nfrom robolearn.sim2real.deploy import loop"),
        (
            "sim2real/deploy/loop.py",
            "from robolearn.export import load\nfrom robolearn.sim2real.robots import Robot",
        ),
        ("assets/__init__.py", "import importlib.util\nfrom pathlib import Path"),
    ],
)
def test_walker_allows(path: str, source: str) -> None:
    assert check_source(path, source) == []


def algorithm_package(module: str) -> str | None:
    """``robolearn.algos.<name>`` for a module inside an algorithm's package, else ``None``."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[:2] == ["robolearn", "algos"] and module not in ALGORITHM_SHARED:
        return ".".join(parts[:3])
    return None


def test_no_algorithm_imports_another() -> None:
    files = source_files()
    known = known_modules(files)
    bad = []
    for f in files:
        rel = str(f.relative_to(REPO))
        module, is_package = module_name(rel)
        own = algorithm_package(module)
        if own is None:
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for line, target in _imported_modules(tree, module, is_package, known):
            other = algorithm_package(target)
            if other is not None and other != own:
                bad.append(f"{rel}:{line}: {own} imports {target}; share it through robolearn.algos.common or robolearn.nn")
    assert not bad, "\n".join(bad)


class _DropTypeChecking(ast.NodeTransformer):
    """Removes ``if TYPE_CHECKING:`` blocks: annotations-only imports never run, so they make no cycle."""

    def visit_If(self, node: ast.If) -> ast.AST | None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            return None
        return self.generic_visit(node)


def import_graph() -> dict[str, set[str]]:
    """robolearn module -> the robolearn modules it imports when it runs (any import statement at any
    depth, functions included; ``if TYPE_CHECKING:`` blocks excluded)."""
    files = source_files()
    known = known_modules(files)
    graph: dict[str, set[str]] = {}
    for f in files:
        module, is_package = module_name(str(f.relative_to(REPO)))
        tree = _DropTypeChecking().visit(ast.parse(f.read_text(encoding="utf-8")))
        targets = set()
        for _, target in _imported_modules(tree, module, is_package, known):
            while target and target not in known:  # `from pkg.mod import name`: the module pkg.mod
                target = target.rpartition(".")[0]
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    # A package __init__ that re-exports its modules is not a cycle with them unless one of those
    # modules imports the package back; every cycle here is two modules that need each other.
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)
