"""Plans between partial types over uneven dimensions, checked by the
verified ``Puchecker.pucheck`` (theorems ``Pucheckerproof.pucheck_correct``,
``pucheck_peak``, ``pucheck_lower_bound``): any plan of its form, not only
the planner's, is accepted and moves the data; the rest is refused."""

from __future__ import annotations

import numpy as np
import pytest

from verishard import (AllGather, AllReduce, DynSlice, Mesh, PlanError, ReduceScatter, ToPartial,
                       check, core, plan)
from verishard.collectives import Exchange
from verishard.sharding import ArrayType
from test_exchange import partial_padded, partial_uneven_types, reduced


def _collectives_between(mesh, a, b):
    """A plan of collectives between the array types (the uneven planner's), over ``mesh`` itself."""
    q = plan(mesh, a.plain, b.plain)
    assert q.mesh == mesh     # (prime meshes: nothing to refine)
    return list(q.collectives)


@pytest.mark.parametrize("mesh_text,shape,op", [("x=2,y=2", (3, 5), "sum"), ("x=2,y=2", (5,), "max"),
                                                ("x=2,y=3", (5, 4), "sum")])
def test_other_plans_accepted_and_correct(mesh_text, shape, op):
    """Every pair of partial uneven types: the plan all-reduce / the uneven
    planner's collectives / make pending (not the partial planner's, which
    exchanges) is accepted, its report within the peak and above the lower
    bound, and it reduces to the array at every valid position (simulator,
    padding a sentinel)."""
    from verishard.runtime.uneven import assemble_padded, simulate_uneven
    mesh = Mesh.parse(mesh_text)
    rng = np.random.default_rng(3)
    A = rng.integers(-50, 50, shape).astype(np.int64)
    types = partial_uneven_types(mesh, shape, op)
    todo = [(a, b) for a in types for b in types if (a.partial or b.partial) and (a.uneven or b.uneven)]
    todo = [todo[i] for i in sorted(rng.choice(len(todo), min(len(todo), 300), replace=False))]
    for a, b in todo:
        steps = (([AllReduce(mesh.names(a.partial))] if a.partial else []) + _collectives_between(mesh, a, b)
                 + ([ToPartial(mesh.names(b.partial))] if b.partial else []))
        p = check(mesh, a, b, steps)
        assert p.types[0] == a and p.types[-1] == b and p.collectives == tuple(steps)
        assert all(t.size <= p.peak for t in p.types) and p.peak >= p.bound            # pucheck_peak
        assert p.traffic >= p.lower_bound == core.ulower_bound(a.plain, b.plain)        # pucheck_lower_bound
        ys = simulate_uneven(p, partial_padded(A, mesh, a, rng, op), pad=-999)           # pucheck_correct
        assert np.array_equal(assemble_padded(reduced(ys, mesh, b, op), mesh, b.plain), A), (str(a), str(b))
        assert "Pucheckerproof.pucheck_correct" in str(p)


def test_planner_plan_is_checked():
    """The planner's plan comes through the checker, and check() accepts it again with the same report."""
    m = Mesh.parse("x=2,y=2")
    a, b = ArrayType.parse("[3{x}5, 4] partial{y}", m), ArrayType.parse("[5, 2{y}4] partial{x}", m)
    p = plan(m, a, b)
    assert [type(c) for c in p.collectives] == [ReduceScatter, Exchange, ToPartial] and p.guaranteed
    again = check(m, a, b, list(p.collectives))
    assert (again.types, again.peak, [s.received for s in again.steps]) == (p.types, p.peak, [s.received for s in p.steps])


@pytest.mark.parametrize("steps,reason", [
    (lambda m: [AllGather(0, "x"), AllReduce("y")], "not_reduced"),                   # reduction not first
    (lambda m: [AllReduce("x"), AllGather(0, "x")], "not_reduced"),                   # not the pending axes
    (lambda m: [ReduceScatter(1, "y"), AllGather(0, "x")], "not_reduced"),            # no dimension 1
    (lambda m: [AllReduce("y"), AllGather(0, "x"), AllReduce("y")], "misplaced"),     # a reduction in the middle
    (lambda m: [AllReduce("y"), DynSlice(0, "x")], "axis_in_use"),                    # the uneven checker's reason
    (lambda m: [AllReduce("y")], "wrong_result"),                                     # stops short of the target
    (lambda m: [AllReduce("y"), AllGather(0, "x"), ToPartial("y")], "misplaced"),     # makes pending, target does not
])
def test_refused(steps, reason):
    m = Mesh.parse("x=2,y=2")
    a, b = ArrayType.parse("[3{x}5] partial{y}", m), ArrayType.parse("[5]", m)
    with pytest.raises(PlanError) as e:
        check(m, a, b, steps(m))
    assert e.value.reason == reason, str(e.value)
    assert "\n" not in str(e.value)


def test_refused_make_pending():
    m = Mesh.parse("x=2,y=2")
    a, b = ArrayType.parse("[5]", m), ArrayType.parse("[3{x}5] partial{y}", m)
    assert check(m, a, b, [DynSlice(0, "x"), ToPartial("y")]).peak == 5
    for steps in ([DynSlice(0, "x")], [ToPartial("y"), DynSlice(0, "x")], [DynSlice(0, "x"), ToPartial("x")]):
        with pytest.raises(PlanError) as e:
            check(m, a, b, steps)
        assert e.value.reason == "not_made_pending", str(e.value)
