"""``TaskCfg.solver``: the constraint solver override that lets a PGS model run on MuJoCo Warp."""

from __future__ import annotations

import mujoco
import pytest
import torch

import robolearn


def test_solver_override_reaches_the_compiled_model_and_changes_the_physics():
    pgs = robolearn.make("Humanoid", 2, seed=0)
    newton = robolearn.make("Humanoid", 2, seed=0, solver="Newton")
    assert pgs.model.opt.solver == mujoco.mjtSolver.mjSOL_PGS  # Gymnasium's model as shipped
    assert newton.model.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON
    action = torch.full((2, pgs.action_dim), 0.3)
    for _ in range(20):
        a = pgs.step(action)[0]["policy"]
        b = newton.step(action)[0]["policy"]
    # The humanoid stands on the floor: the contact solution differs between solvers.
    assert not torch.allclose(a, b)


def test_a_bad_solver_name_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"^solver: expected one of PGS, CG, Newton .*got 'newton'"):
        robolearn.make("Humanoid", 1, solver="newton")


@pytest.mark.slow
def test_humanoid_runs_on_warp_with_the_newton_solver_like_the_reference():
    pytest.importorskip("mujoco_warp")
    warp = robolearn.make("Humanoid", 2, seed=0, backend="warp", solver="Newton")
    ref = robolearn.make("Humanoid", 2, seed=0, backend="reference", solver="Newton")
    torch.testing.assert_close(warp.obs["policy"], ref.obs["policy"], atol=1e-4, rtol=0)
    action = torch.full((2, ref.action_dim), 0.1)
    for _ in range(3):
        w = warp.step(action)[0]["policy"]
        r = ref.step(action)[0]["policy"]
    # Contact-rich float32 vs float64 over 3 control steps (15 substeps): the contact tolerance of
    # tests/test_warp_backend.py.
    torch.testing.assert_close(w, r, atol=2e-2, rtol=0)
