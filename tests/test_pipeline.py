"""The one verified call (``Pipeline.plan_problem``) through ``verishard.plan``.

``Pipelineproof.plan_spec`` proves the result correct; these tests check the
glue around it: the split the core returns is a refinement of the user's
mesh, the plan re-checks there, its data movement (simulated) lands every
block where the target says, the core's ``Traffic.lower_bound`` agrees with
an independent numpy computation, and the coarsening keeps the user's axes
whole whenever the plan allows (it falls back to the prime mesh otherwise).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import verishard as vs
from verishard import core
from verishard.runtime import distribute, simulate

# the problems of bench/traffic.py, so the benchmark's generator is the one tested
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from traffic import random_problem  # noqa: E402


def transfer_lower_bounds(src, dst) -> np.ndarray:
    """Independent oracle for ``Traffic.lower_bound``: per device, the elements
    it needs under ``dst`` and does not hold under ``src``, by numpy interval
    intersection of the blocks."""
    s0, d0 = core.block_starts(src), core.block_starts(dst)
    sl, dl = np.array(src.local_shape), np.array(dst.local_shape)
    overlap = np.clip(np.minimum(s0 + sl, d0 + dl) - np.maximum(s0, d0), 0, None)
    return dst.size - np.prod(overlap, axis=1)


CASES = [random_problem(random.Random(seed)) for seed in range(150)]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_plan_is_a_checked_refinement_of_the_users_mesh(case):
    mesh, src, dst = CASES[case]
    p = vs.plan(mesh, src, dst)
    # same axes, same sizes: only splits into sub-axes
    assert p.mesh.axis_names == mesh.axis_names
    assert p.mesh.axis_sizes == mesh.axis_sizes
    # the same arrays: the plan's source and target are the user's types, refined
    assert str(p.src.refined()) == str(src.refined()) and str(p.dst.refined()) == str(dst.refined())
    assert (core.block_starts(p.src) == core.block_starts(src)).all()
    assert (core.block_starts(p.dst) == core.block_starts(dst)).all()
    # the verified checker accepts it again, with the same report
    again = vs.check(p.mesh, p.src, p.dst, list(p.collectives))
    assert again.peak == p.peak and [s.received for s in again.steps] == [s.received for s in p.steps]
    assert p.peak <= p.bound
    # independent numpy lower bound, and the proved inequality
    assert p.lower_bound == int(transfer_lower_bounds(src, dst).max())
    assert p.lower_bound <= p.traffic


@pytest.mark.parametrize("case", range(0, len(CASES), 5))
def test_plan_moves_the_data(case):
    mesh, src, dst = CASES[case]
    p = vs.plan(mesh, src, dst)
    a = np.arange(int(np.prod(src.global_shape)), dtype=np.int64).reshape(src.global_shape)
    # the user's distribution, over the user's mesh, is what the plan starts from
    r = simulate(p, distribute(a, mesh, src))
    for got, exp in zip(r.outputs, distribute(a, mesh, dst)):
        assert np.array_equal(got, exp)


def test_coarsening_keeps_whole_axes_when_it_can():
    # an axis of size 4 that the plan moves whole stays one axis
    p = vs.plan("x=4,y=2", "[2{x}8]", "[8]")
    assert str(p.mesh) == "{x:4, y:2}"
    # one that must be split is split, and only that one
    p = vs.plan("x=2,y=4", "[2{x}4]", "[1{y}4]")
    assert str(p.mesh) == "{x:2, y:2*2}"


def test_invalid_problems_are_refused_by_the_core_with_the_checkers_reasons():
    m = vs.Mesh.parse("x=2")
    with pytest.raises(vs.ShardingError):
        vs.plan(m, "[2{x}4]", "[6]")
