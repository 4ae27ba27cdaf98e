"""Every plan handed to a user starts at the user's source and ends at the
user's target: ``plan.from_report``, the one place a Plan is made from a
verified planner's report (``plan``, ``exchange=True``, and the front ends
that call them: ``verishard.jax``, ``verishard.torch``), compares the
report's first and last types with the requested ones over the report's
mesh, and refuses a doctored report with a PlanError.
"""

from __future__ import annotations

import pytest

import verishard as vs
from verishard import ArrayType, Mesh, core
from verishard.errors import PlanError
from verishard.plan import from_report, _lifted

PROBLEMS = [  # (mesh, src, dst, exchange): plain, split axis, partial sum and max, uneven, exchange
    ("x=2,y=4", "[2{x}4]", "[1{y}4]", False),
    ("x=2,y=3", "[9, 2{y}6, 2]", "[3{y}9, 3{x}6, 2]", False),
    ("x=2,y=2", "[4, 4] partial{x}", "[2{x}4, 4]", False),
    ("x=2,y=2", "[4, 2{y}4] partial(max){x}", "[4, 4]", False),
    ("x=2,y=2", "[4, 4]", "[2{y}4, 4] partial{x}", False),
    ("x=2,y=2,z=2", "[1{x,y}3, 5]", "[3, 2{z,x}5]", False),
    ("x=2,y=2", "[1{x,y}4, 4, 2]", "[4, 1{y,x}4, 2]", True),
    ("x=2,y=3", "[3{x}5, 4]", "[5, 2{y}4]", True),
]


def report(mesh, src, dst, exchange):
    m = Mesh.parse(mesh)
    s, d = ArrayType.parse(src, m), ArrayType.parse(dst, m)
    return (core.eplan if exchange else core.plan_checked)(m, s, d), s, d


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p[1] + "->" + p[2] for p in PROBLEMS])
def test_a_planned_plan_ends_at_the_requested_target(problem):
    r, s, d = report(*problem)
    p = from_report(r, s, d)
    assert p.dst == _lifted(d, p.mesh) and p.src == _lifted(s, p.mesh)
    assert vs.plan(problem[0], problem[1], problem[2], exchange=problem[3]).dst == p.dst


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p[1] + "->" + p[2] for p in PROBLEMS])
def test_a_doctored_report_is_refused(problem):
    r, s, d = report(*problem)
    assert r.steps
    # the last step's type made another (the source's, or the one before), or the report cut short
    other = r.types[-2]
    doctored = [r._replace(steps=r.steps[:-1] + (core._step(r.steps[-1].collective, other, 0),)),
                r._replace(steps=r.steps[:-1])] if other != r.types[-1] else []
    # a report that claims another source
    doctored.append(r._replace(src=r.types[-1]) if r.types[-1] != r.src else r._replace(src=r.types[1]))
    assert doctored
    for bad in doctored:
        with pytest.raises(PlanError, match="fault in verishard"):
            from_report(bad, s, d)
    # ... or a target the report does not reach
    with pytest.raises(PlanError, match="ends at"):
        from_report(r, s, s if s != d else _lifted(d, r.mesh))


def test_a_report_over_a_mesh_that_refines_no_other_is_refused():
    r, s, d = report("x=2,y=4", "[2{x}4]", "[1{y}4]", False)
    assert str(r.mesh) == "{x:2, y:2*2}"
    wrong = Mesh.parse("x=2,y=4,z=1")
    with pytest.raises(PlanError, match="not a refinement"):
        _lifted(ArrayType.parse("[4]", wrong), r.mesh)
    with pytest.raises(PlanError, match="not a refinement"):
        _lifted(ArrayType.parse("[4]", "x=4,y=2"), r.mesh)
