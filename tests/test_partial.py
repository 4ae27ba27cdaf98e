"""Partial (pending-reduction) types end to end: notation, the verified
partial pipeline (``Ppipeline.pplan_problem``) on every pair of types of
small meshes, random problems on meshes of up to 4 axes, and execution in
the simulator compared with numpy.

The brute-force minimum peak of a problem is ``max(size(src), size(dst))``:
every plan holds its source and its target, so no plan peaks lower; the
exhaustive tests check that every plan reaches it.
"""

from __future__ import annotations

import itertools
from math import prod

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpi_cases as mc
import verishard as vs
from verishard import AllReduce, ArrayType, DynSlice, ReduceScatter, ToPartial
from verishard.runtime import distribute, represented, simulate, split_partial


def executes_to_numpy(p: vs.Plan, rng: np.random.Generator, dtype) -> None:
    """Simulate ``p`` on a random representation of a random array; the value
    the outputs represent must be numpy's array, on every device."""
    shape = p.src.global_shape
    A = (rng.integers(-50, 50, shape) if np.dtype(dtype).kind == "i" else rng.standard_normal(shape)).astype(dtype)
    r = simulate(p, split_partial(A, p.mesh, p.src, rng))
    got, want = represented(r.outputs, p.dst), distribute(A, p.mesh, p.dst.plain)
    for dev, (g, w) in enumerate(zip(got, want)):
        if np.dtype(dtype).kind == "f" and p.reduce == "sum":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"device {dev}: {p}")  # float32 sums
        else:
            assert np.array_equal(g, w), f"device {dev}: {p}"


EXHAUSTIVE = [("x=2,y=2,z=2", (4, 4)), ("x=2,y=3", (6, 4)), ("x=2,y=3", (6, 6))]


@pytest.mark.parametrize("mesh_text,shape", EXHAUSTIVE, ids=[f"{m} {s}" for m, s in EXHAUSTIVE])
def test_every_pair_of_partial_types(mesh_text, shape, capsys):
    mesh = vs.Mesh.parse(mesh_text)
    types = mc.partial_types(mesh, shape)
    rng = np.random.default_rng(0)
    pairs = scattered = reduced = 0
    for src, dst in itertools.product(types, types):
        p = vs.plan(mesh, src, dst)
        assert p.guaranteed and p.dst == dst.refined() or p.dst.mesh != dst.mesh
        assert p.peak == max(src.size, dst.size), (str(src), str(dst), str(p))
        assert all(s.type.size <= p.bound for s in p.steps)
        assert p.traffic >= p.lower_bound   # Ptrafficproof.pcheck_traffic_lower_bound
        cs = p.collectives
        # the partial pipeline never all-reduces an axis it then slices back in
        for i, c in enumerate(cs):
            if isinstance(c, AllReduce):
                later = {a for d in cs[i + 1:] if isinstance(d, DynSlice) for a in d.axes}
                assert not later & set(c.axes), str(p)
        scattered += any(isinstance(c, ReduceScatter) for c in cs)
        reduced += any(isinstance(c, AllReduce) for c in cs)
        executes_to_numpy(p, rng, np.int32 if pairs % 2 else np.float32)
        pairs += 1
    with capsys.disabled():
        print(f"\n[{mesh_text} {shape}] {len(types)} partial types, {pairs} pairs: peak = max(size src, size dst) "
              f"and the numpy result in all; {scattered} plans reduce-scatter, {reduced} all-reduce")


def test_reduce_scatter_is_preferred_to_all_reduce_then_slice():
    p = vs.plan("x=2,y=2", "[4, 4] partial{x}", "[2{x}4, 4]")
    assert p.collectives == (ReduceScatter(0, ("x",)),)
    assert p.traffic == 8            # (n - 1) * size(target); all-reduce then slice receives 2 * (16 - 8) = 16
    q = vs.plan("x=2,y=2", "[8, 8] partial{x}", "[4{y}8, 8]")
    assert [type(c) for c in q.collectives] == [DynSlice, AllReduce]   # slice first: reduce the smaller array
    assert q.traffic == 32


def test_plain_problems_get_the_plain_pipelines_plan():
    # Ppipelineproof.pplan_plain: with nothing pending, the plan is Pipeline.plan_problem's
    p = vs.plan("x=2,y=3", "[3{x}6]", "[2{y}6]")
    assert [str(c) for c in p.collectives] == ["DynSlice(0, y)", "AllPermute([1{y,x}6])", "AllGather(0, x)"]
    assert not p.partial and p.lower_bound == 2


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_every_reduction_executes(op):
    rng = np.random.default_rng(1)
    for s, d in [("[4, 4] partial({op}){{x,z}}", "[2{{x}}4, 2{{z}}4]"), ("[4, 4]", "[4, 4] partial({op}){{y}}"),
                 ("[2{{y}}4, 4] partial({op}){{x}}", "[4, 4] partial({op}){{x,z}}")]:
        p = vs.plan("x=2,y=2,z=2", s.format(op=op), d.format(op=op))
        assert p.reduce == op
        for dtype in (np.int64, np.float64, np.float32):
            executes_to_numpy(p, rng, dtype)


def test_notation_round_trips_and_prints_as_written():
    m = vs.Mesh.parse("x=2,y=2*2")
    for text in ["[8] partial{x}", "[4{x}8] partial{y}", "[8] partial(max){x,y}", "[4{y.0}8] partial(min){y.1}"]:
        t = ArrayType.parse(text, m)
        assert str(t) == text and ArrayType.parse(str(t), m) == t
    assert ArrayType.parse("[8] partial{y, x}", m) == ArrayType.parse("[8] partial{x,y}", m)   # order is free
    assert ArrayType.parse("[8] partial(sum){x}", m) == ArrayType.parse("[8] partial{x}", m)
    t = ArrayType.parse("[8] partial{x}", m)
    assert vs.Plan.from_json(vs.plan(m, t, "[4{x}8]").to_json()).collectives == (ReduceScatter(0, ("x",)),)


@pytest.mark.parametrize("text,message", [
    ("[4{x}8] partial{x}", "both shards"),
    ("[8] partial{x,x}", "duplicate pending axis"),
    ("[8] partial{w}", "unknown axis"),
    ("[8] partial(prod){x}", "unknown reduction"),
    ("[8] partial{}", "pending axis name"),
    ("[8] partial", "'{'"),
    ("[8] partial{x} extra", "unexpected"),
])
def test_bad_partial_notation_is_one_clear_error(text, message):
    with pytest.raises(vs.VerishardError, match=message):
        ArrayType.parse(text, "x=2,y=2")


def test_changing_the_reduction_is_refused():
    with pytest.raises(vs.ShardingError, match="cannot change the reduction"):
        vs.plan("x=2,y=2", "[4] partial{x}", "[4] partial(max){y}")


def test_the_checker_names_bad_partial_steps():
    m = vs.Mesh.parse("x=2,y=2")
    with pytest.raises(vs.PlanError, match="axis y is not pending"):
        vs.check(m, "[4] partial{x}", "[4]", [AllReduce("y")])
    with pytest.raises(vs.PlanError, match="axis x is pending"):
        vs.check(m, "[4] partial{x}", "[2{x}4]", [DynSlice(0, "x")])
    with pytest.raises(vs.PlanError, match="axis x already shards"):
        vs.check(m, "[2{x}4]", "[2{x}4] partial{y}", [ToPartial("x")])
    ok = vs.check(m, "[4] partial{x}", "[2{x}4]", [AllReduce("x"), DynSlice(0, "x")])
    assert ok.traffic == 4 and ok.peak == 4          # the hand plan: 2 * (4 - 2) received


# -- random problems on meshes of up to 4 axes ---------------------------------

@st.composite
def partial_problems(draw):
    k = draw(st.integers(1, 4))
    sizes = [draw(st.sampled_from([1, 2, 2, 3, 4])) for _ in range(k)]
    names = [f"a{i}" for i in range(k)]
    mesh = vs.Mesh(tuple(zip(names, sizes)))
    rank = draw(st.integers(1, 3))

    def a_type():
        assign = [draw(st.integers(0, rank + 1)) for _ in range(k)]   # rank: replicated, rank + 1: pending
        axes = [[names[i] for i in draw(st.permutations(range(k))) if assign[i] == d] for d in range(rank)]
        return axes, tuple(i for i in range(k) if assign[i] == rank + 1)

    (sa, sp), (da, dp) = a_type(), a_type()
    shape = []
    for d in range(rank):
        need = np.lcm(prod(sizes[names.index(a)] for a in sa[d]), prod(sizes[names.index(a)] for a in da[d]))
        shape.append(int(need) * draw(st.sampled_from([1, 1, 2, 3])))
    op = draw(st.sampled_from(["sum", "sum", "max", "min"]))
    return mesh, shape, (sa, sp), (da, dp), op, draw(st.integers(0, 9))


# 1000: every pair of partial types on the small meshes is checked and executed by
# test_every_pair_of_partial_types; these add larger meshes and the max/min reductions.
@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(partial_problems())
def test_random_partial_problems(problem):
    mesh, shape, (sa, sp), (da, dp), op, run = problem
    src = vs.ArrayType(mesh, vs.ArrayType.from_axes(mesh, shape, sa).dims, sp, op)
    dst = vs.ArrayType(mesh, vs.ArrayType.from_axes(mesh, shape, da).dims, dp, op)
    p = vs.plan(mesh, src, dst)
    assert p.guaranteed and p.peak == max(src.size, dst.size)
    assert p.traffic >= p.lower_bound == vs.core.lower_bound(src.plain, dst.plain)
    assert p.src == src.refined() or p.src.mesh != src.mesh.refined()
    if run == 0 and prod(shape) <= 4096:   # one in ten is executed
        executes_to_numpy(p, np.random.default_rng(prod(shape)), np.int64)
