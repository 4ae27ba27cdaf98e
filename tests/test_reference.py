"""Checks of the plain-Python reference model (tests/reference.py) itself."""

from __future__ import annotations

import os
import sys
from math import prod

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import reference as ref  # noqa: E402

# mesh {x:2, y:3}: part 0 = x, part 1 = y
XY = (2, 3)
X, Y = 0, 1


def test_worked_example():
    src = ((6, (X,)),)
    dst = ((6, (Y,)),)
    plan = [("slice", 0, (Y,)), ("permute", ((6, (Y, X)),)), ("gather", 0, (X,))]
    res = ref.check(XY, src, dst, plan)
    assert res[0] == "ok"
    _, types, recvs, peak = res
    assert types == [src, ((6, (X, Y)),), ((6, (Y, X)),), dst]
    assert [ref.size(XY, t) for t in types] == [3, 1, 1, 2]
    assert peak == 3 == max(ref.size(XY, src), ref.size(XY, dst))
    assert recvs[0] == 0          # slice
    assert recvs[1] == 1          # some devices' blocks change
    assert recvs[2] == 1          # (2-1) * 1

    A = np.arange(6)
    local = ref.distribute(XY, A, src)
    for r in range(6):
        x, y = ref.coords(XY, r)
        assert list(local[r]) == list(range(3 * x, 3 * x + 3))
    local = ref.simulate(XY, src, plan[0], local)
    for r in range(6):
        x, y = ref.coords(XY, r)
        assert list(local[r]) == [3 * x + y]
    local = ref.simulate(XY, types[1], plan[1], local)
    for r in range(6):
        x, y = ref.coords(XY, r)
        assert list(local[r]) == [2 * y + x]
    local = ref.simulate(XY, types[2], plan[2], local)
    for r in range(6):
        x, y = ref.coords(XY, r)
        assert list(local[r]) == [2 * y, 2 * y + 1]
    assert all((a == b).all() for a, b in zip(local, ref.distribute(XY, A, dst)))


def test_rank_is_row_major():
    n = (2, 3, 2)
    grid = np.arange(12).reshape(n)
    for r in range(12):
        assert grid[ref.coords(n, r)] == r
        assert ref.rank_of(n, ref.coords(n, r)) == r


def test_permutation_prefers_fixed_points():
    src, dst = ((6, (X, Y)),), ((6, (Y, X)),)
    p = ref.permutation(XY, src, dst)
    # element 3x+y -> 2y+x: devices (0,0) and (1,2) keep their element
    fixed = [r for r in range(6) if p[r] == r]
    assert fixed == [ref.rank_of(XY, (0, 0)), ref.rank_of(XY, (1, 2))]
    assert ref.received(XY, src, ("permute", src)) == 0


def test_typing_errors():
    t = ((6, (X,)),)
    assert ref.apply(XY, t, ("gather", 0, (Y,)))[0] is None
    assert ref.apply(XY, t, ("slice", 0, (X,)))[0] is None          # x not replicated
    assert ref.apply(XY, ((4, ()),), ("slice", 0, (Y,)))[0] is None  # 3 does not divide 4
    assert ref.apply(XY, ((6, (X,)), (3, ())), ("a2a", 0, 1, (X,)))[0] is None
    assert ref.apply(XY, t, ("a2a", 0, 0, (X,)))[0] is None
    assert ref.apply(XY, t, ("permute", ((6, (Y,)),)))[0] is None   # local 3 vs 2
    assert ref.apply(XY, t, ("permute", ((6, (X,)), (1, ()))))[0] is None
    assert ref.wf(XY, ((6, (X, X)),)) is not None
    assert ref.wf(XY, ((7, (X,)),)) is not None
    assert ref.wf(XY, ()) is not None


def test_spec_whole_axis_counterexample():
    # {x:2, y:4}, [2{x}4] -> [1{y}4]: over the refined mesh {x:2, y.0:2, y.1:2}
    n = (2, 2, 2)
    src, dst = ((4, (0,)),), ((4, (1, 2)),)
    plan = [("slice", 0, (2,)), ("permute", ((4, (1, 0)),)), ("gather", 0, (0,)), ("slice", 0, (2,))]
    res = ref.check(n, src, dst, plan)
    assert res[0] == "ok" and res[3] == 2


def test_lower_bound_example():
    assert ref.lower_bound(XY, ((6, (X,)),), ((6, (Y,)),)) == (2, 6)
    assert ref.lower_bound(XY, ((6, (X,)),), ((6, (X,)),)) == (0, 0)


meshes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple).filter(lambda n: prod(n) <= 24)
shapes = st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 12]), min_size=1, max_size=3).map(tuple)


@st.composite
def typed_step(draw, multi=False):
    """(mesh, global shape, type, a well-typed collective); ``multi``: a
    multi-axis gather or slice, or None when the type has none."""
    n = draw(meshes)
    gshape = draw(shapes)
    t = draw(st.sampled_from(ref.all_types(n, gshape)))
    cands = ref.well_typed(n, t, with_permutes=not multi)
    if multi:
        cands = [c for c in cands if c[0] in ("gather", "slice") and len(c[2]) >= 2]
        if not cands:
            return n, gshape, t, None
    kinds = sorted({c[0] for c in cands})
    kind = draw(st.sampled_from(kinds))                  # even out the four kinds
    coll = draw(st.sampled_from([c for c in cands if c[0] == kind]))
    return n, gshape, t, coll


@settings(max_examples=300, deadline=None)
@given(typed_step())
def test_simulation_matches_typing(case):
    n, gshape, t, coll = case
    if coll is None:
        return
    t2, why = ref.apply(n, t, coll)
    assert why is None and ref.wf(n, t2) is None
    A = np.arange(prod(gshape)).reshape(gshape)
    out = ref.simulate(n, t, coll, ref.distribute(n, A, t))
    want = ref.distribute(n, A, t2)
    for a, b in zip(out, want):
        assert a.shape == b.shape and (a == b).all()
    # received elements per the spec table, and what memory does
    rec = ref.received(n, t, coll)
    if coll[0] == "slice":
        assert rec == 0 and ref.size(n, t2) * ref.group_size(n, coll[2]) == ref.size(n, t)
    if coll[0] == "gather":
        assert ref.size(n, t2) == ref.size(n, t) * ref.group_size(n, coll[2])
    if coll[0] in ("a2a", "permute"):
        assert ref.size(n, t2) == ref.size(n, t)
    if coll[0] == "permute":
        p = ref.permutation(n, t, t2)
        assert rec == (ref.size(n, t) if p != list(range(len(p))) else 0)
        for c in range(len(p)):
            # fixed points exactly where the block does not change
            assert (p[c] == c) == (ref.block(n, t, ref.coords(n, c)) == ref.block(n, t2, ref.coords(n, c)))


@settings(max_examples=150, deadline=None)
@given(typed_step(multi=True))
def test_multi_axis_gather_and_slice_equal_single_steps(case):
    n, gshape, t, coll = case
    if coll is None:
        return
    A = np.arange(prod(gshape)).reshape(gshape)
    one = ref.simulate(n, t, coll, ref.distribute(n, A, t))
    kind, d, s = coll
    steps = [(kind, d, (a,)) for a in (reversed(s) if kind == "gather" else s)]
    cur, local = t, ref.distribute(n, A, t)
    for step in steps:
        nxt, why = ref.apply(n, cur, step)
        assert why is None
        local = ref.simulate(n, cur, step, local)
        cur = nxt
    assert cur == ref.apply(n, t, coll)[0]
    assert all((a == b).all() for a, b in zip(one, local))


@pytest.mark.parametrize("n", [(2,), (2, 3), (2, 2, 2), (1, 3)])
def test_all_types_are_wellformed_and_distinct(n):
    ts = ref.all_types(n, (6, 4))
    assert len(ts) == len(set(ts)) and all(ref.wf(n, t) is None for t in ts)
    assert ((6, ()), (4, ())) in ts


def test_multi_axis_slices_exhaustive_small():
    n, gshape = (2, 3, 2), (12, 6)
    A = np.arange(72).reshape(gshape)
    count = 0
    for t in ref.all_types(n, gshape):
        for coll in ref.well_typed(n, t, with_permutes=False):
            if coll[0] != "slice" or len(coll[2]) < 2:
                continue
            count += 1
            one = ref.simulate(n, t, coll, ref.distribute(n, A, t))
            cur, local = t, ref.distribute(n, A, t)
            for a in coll[2]:
                step = ("slice", coll[1], (a,))
                local = ref.simulate(n, cur, step, local)
                cur = ref.apply(n, cur, step)[0]
            assert cur == ref.apply(n, t, coll)[0]
            assert all((x == y).all() for x, y in zip(one, local))
    assert count > 20
