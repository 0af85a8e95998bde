"""A facade without side effects: what ``import robolearn`` loads, lazy task registration, a broken
task family, Gymnasium ids through ``robolearn.gym``, and ``load_policy`` without the simulator.

Each check runs in a fresh interpreter, since this test process has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEAVY = ("mujoco", "gymnasium", "hydra", "omegaconf", "robolearn.tasks", "robolearn.cli", "robolearn.envs")


def run_python(code: str, cwd: Path | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "MUJOCO_GL": "egl"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["robolearn", "robolearn.types"])
def test_import_loads_no_simulator_gymnasium_tasks_or_cli(module):
    got = run_python(
        f"""
        import json, sys
        import {module}
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("mujoco", "gymnasium", "hydra", "omegaconf")
                                or m.startswith(("robolearn.tasks", "robolearn.cli", "robolearn.envs")))))
        """
    )
    assert got == [], f"import {module} loaded {got}"


def test_import_robolearn_does_not_even_load_torch():
    # The facade's own import is cheap: torch arrives with the first make/load_policy.
    got = run_python("import json, sys, robolearn; print(json.dumps('torch' in sys.modules))")
    assert got is False


def test_tasks_register_on_first_use():
    got = run_python(
        """
        import json, sys, robolearn
        before = "robolearn.tasks.classic" in sys.modules
        tasks = robolearn.list_tasks()
        env = robolearn.make("Cartpole-Balance", 2, seed=0)
        obs, _ = env.reset()
        print(json.dumps({"before": before, "n": len(tasks), "shape": list(obs["policy"].shape)}))
        """
    )
    assert got["before"] is False
    assert got["n"] >= 8 and got["shape"] == [2, 5]


def test_a_broken_task_family_breaks_neither_import_nor_the_other_families():
    got = run_python(
        """
        import json, robolearn, robolearn.tasks as tasks
        tasks.FAMILIES = (*tasks.FAMILIES, "no_such_family")
        names = robolearn.list_tasks()
        try:
            robolearn.make("NoSuchTask", 1)
            err = ""
        except ValueError as exc:
            err = str(exc)
        print(json.dumps({"names": names, "broken": sorted(tasks.BROKEN), "err": err}))
        """
    )
    assert "HalfCheetah" in got["names"] and "Cartpole-Balance" in got["names"]
    assert got["broken"] == ["no_such_family"]
    assert "task family 'no_such_family' failed to load (ModuleNotFoundError" in got["err"]


def test_gymnasium_ids_through_robolearn_gym():
    got = run_python(
        """
        import json, gymnasium
        env = gymnasium.make("robolearn.gym:robolearn/Cartpole-Balance-v0")
        obs, _ = env.reset(seed=0)
        # after that import the plain id works as well
        env2 = gymnasium.make("robolearn/Pendulum-Swingup-v0")
        print(json.dumps({"obs": list(obs.shape), "n": len(gymnasium.registry)}))
        """
    )
    assert got["obs"] == [5]


def test_make_registers_gymnasium_ids_when_gymnasium_is_in_use():
    got = run_python(
        """
        import json, gymnasium, robolearn
        robolearn.list_tasks()
        print(json.dumps("robolearn/HalfCheetah-v0" in gymnasium.registry))
        """
    )
    assert got is True


def test_load_policy_needs_neither_simulator_nor_tasks(tmp_path):
    run = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "robolearn.cli.main", "train", "task=Cartpole-Balance", "algo=sac",
         f"run_dir={run}", "num_envs=4", "eval_num_envs=2", "total_env_steps=400", "algo.learning_starts=100",
         "algo.batch_size=32", "runner.steps_per_iteration=25", "runner.video=false", "runner.tensorboard=false",
         "runner.console=false", "runner.eval_steps=20", "runner.checkpoint_interval=1"],
        check=True, capture_output=True, timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    got = run_python(
        f"""
        import json, sys, torch, robolearn
        policy = robolearn.load_policy({str(run)!r})
        obs = {{"policy": torch.zeros(3, 5), "critic": torch.zeros(3, 5)}}
        a = policy.act(obs)
        m = policy.module()(obs["policy"])
        print(json.dumps({{"shape": list(a.shape), "same": bool(torch.allclose(a, m)),
                          "loaded": sorted(x for x in ("mujoco", "gymnasium", "robolearn.tasks", "robolearn.envs", "hydra")
                                           if x in sys.modules)}}))
        """
    )
    assert got["shape"] == [3, 1] and got["same"]
    assert got["loaded"] == [], f"load_policy loaded {got['loaded']}"

    # a truncated newest checkpoint: load_policy falls back to the newest one that loads
    from robolearn.runners.checkpoint import CheckpointManager
    from robolearn.runners.policy import load_policy

    checkpoints = CheckpointManager(run, keep=None).checkpoints()
    assert len(checkpoints) >= 2
    newest = CheckpointManager(run, keep=None).latest()
    newest.write_bytes(newest.read_bytes()[:100])
    policy = load_policy(run)
    assert policy.checkpoint != newest and policy.checkpoint in checkpoints


def test_task_families_are_entry_point_plugins_found_by_the_env_registry():
    # robolearn.envs never imports a task family; the registry loads the installed plugins (the
    # "robolearn.tasks" entry points, robolearn's own among them) on the first lookup
    got = run_python(
        """
        import json, sys
        from importlib.metadata import entry_points
        from robolearn.envs import task_cfg
        before = "robolearn.tasks" in sys.modules
        cfg = task_cfg("HalfCheetah")
        print(json.dumps({"before": before, "decimation": cfg.decimation,
                          "plugins": sorted(e.value for e in entry_points(group="robolearn.tasks"))}))
        """
    )
    assert got == {"before": False, "decimation": 5, "plugins": ["robolearn.tasks:load"]}
