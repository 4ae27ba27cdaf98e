"""The exchange step (coq/theories/Exchange.v, Exchangeproof.v): planned only
where it receives strictly less than the collective plan and a free dimension
lets it run in pieces; accepted by the checker with the bound as peak and the
lower bound as traffic; executed by the simulator (whole and in pieces) equal
to numpy, each device receiving exactly what it does not hold."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
from mpi_cases import all_types  # noqa: E402
from problems import draw_problem  # noqa: E402

from verishard import AllGather, ArrayType, Mesh, Plan, check, core, plan  # noqa: E402
from verishard.collectives import Collective, Exchange  # noqa: E402
from verishard.errors import PlanError, ShardingError  # noqa: E402
from verishard.runtime import distribute, simulate  # noqa: E402
from verishard.runtime.backend import Backend, ExchangeSchedule, RedistributionError, execute  # noqa: E402
from verishard.runtime.layout import boxes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

MESHES = [("x=2,y=2", (4, 4, 2)), ("x=2,y=3", (6, 6, 2)), ("x=2,y=2,z=2", (4, 4, 2))]


def need(src: ArrayType, dst: ArrayType) -> list[int]:
    """Per device: elements of its target block it does not hold (from the boxes, independently of the core)."""
    out = []
    for a, b in zip(boxes(src.mesh, src), boxes(dst.mesh, dst)):
        kept = int(np.prod([max(0, min(u.stop, v.stop) - max(u.start, v.start)) for u, v in zip(a, b)]))
        out.append(dst.size - kept)
    return out


def free_dims(src: ArrayType, dst: ArrayType) -> list[int]:
    return [d for d in range(src.rank) if not src.dim_parts(d) and not dst.dim_parts(d) and src.global_shape[d] >= 2]


@pytest.mark.parametrize("mesh_text,shape", MESHES)
def test_every_pair_exchange_taken_exactly_when_it_helps(mesh_text, shape):
    """Every pair of types: the exchange planner returns the collective plan
    unchanged, or the exchange when it receives strictly less and a free
    dimension exists; then traffic is the lower bound, peak the bound, and
    the simulator (whole and in 2 pieces) gives numpy's blocks with every
    device receiving exactly its need."""
    mesh = Mesh.parse(mesh_text)
    types = all_types(mesh, shape)
    A = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    taken = 0
    for a in types:
        for b in types:
            p, q = plan(mesh, a, b), plan(mesh, a, b, exchange=True)
            if not q.exchange:
                assert q.collectives == p.collectives and q.peak == p.peak
                assert not free_dims(a, b) or p.traffic <= p.lower_bound or p.traffic == q.traffic
                continue
            taken += 1
            (c,) = q.collectives
            assert c.dim == free_dims(a, b)[0]
            assert q.traffic == q.lower_bound == max(need(a, b)) < p.traffic
            assert q.peak == q.bound == max(a.size, b.size)
            src = distribute(A, mesh, a)
            want = distribute(A, mesh, b)
            for kw in ({}, {"chunks": 2}):
                r = simulate(q, src, **kw)   # checks every device's received bytes against its need
                assert all(np.array_equal(x, y) for x, y in zip(r.outputs, want))
                assert (r.steps[0].received // 4).tolist() == need(a, b)
    assert taken > 0


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_problems_on_up_to_four_axes(data):
    """Random meshes of 1-4 axes and random types: the planner always answers;
    an exchange is taken only below the collective plan's traffic, with a
    free dimension, at the lower bound; the simulator agrees with numpy."""
    mesh, a, b = draw_problem(data)
    shape = a.global_shape
    p, q = plan(mesh, a, b), plan(mesh, a, b, exchange=True)
    if not q.exchange:
        assert q.collectives == p.collectives
        return
    assert free_dims(a, b) and q.traffic == q.lower_bound < p.traffic and q.peak == q.bound
    A = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    r = simulate(q, distribute(A, mesh, a), chunks=2)
    assert all(np.array_equal(x, y) for x, y in zip(r.outputs, distribute(A, mesh, b)))


def test_checker_accepts_an_exchange_alone_and_names_what_is_wrong():
    m = Mesh.parse("x=2,y=2")
    a, b = ArrayType.parse("[1{x,y}4, 4]", m), ArrayType.parse("[4, 1{y,x}4]", m)
    ok = core.check(m, a, b, [Exchange(b)])
    assert ok.types == (a, b) and ok.peak == 4 and ok.received == (core.lower_bound(a, b),)
    with pytest.raises(PlanError, match=r"step 2 \(Exchange.*an exchange is a plan's only step"):
        check(m, a, b, [AllGather(0, ("x", "y")), Exchange(b)])
    with pytest.raises(PlanError, match="does not end at the target"):
        check(m, a, b, [Exchange(a)])
    with pytest.raises(ShardingError, match="types without pending axes"):
        plan(m, "[4, 4] partial{x}", "[2{x}4, 4]", exchange=True)


def test_notation_json_and_plan_files_round_trip():
    m = Mesh.parse("x=2,y=2")
    q = plan(m, "[1{x,y}4, 4, 2]", "[4, 1{y,x}4, 2]", exchange=True)
    (c,) = q.collectives
    assert Collective.parse(str(c), m) == c
    assert Collective.from_json(c.to_json(), m) == c
    again = Plan.from_json(json.loads(json.dumps(q.to_json())))
    assert again.collectives == q.collectives and again.peak == q.peak and again.traffic == q.traffic
    assert "guaranteed by Exchangeproof.eplan_spec" in str(q)
    with pytest.raises(PlanError, match="not a dimension"):
        Exchange(q.dst, 3)


def test_a_dimension_that_is_not_free_is_refused_before_anything_moves():
    m = Mesh.parse("x=2,y=2")
    q = plan(m, "[1{x,y}4, 4, 2]", "[4, 1{y,x}4, 2]", exchange=True)
    forged = check(m, q.src, q.dst, [Exchange(q.dst, 1)])   # dimension 1 is sharded by the target
    A = np.arange(32, dtype=np.int32).reshape(4, 4, 2)
    with pytest.raises(AssertionError, match="dimension 1 is not free"):
        simulate(forged, distribute(A, m, q.src), chunks=2)
    whole = simulate(forged, distribute(A, m, q.src))   # whole, the dimension plays no part
    assert all(np.array_equal(x, y) for x, y in zip(whole.outputs, distribute(A, m, q.dst)))


def test_backends_without_the_exchange_refuse_it_up_front():
    class Gathers(Backend):
        name = "gathers"

        def all_gather(self, x, dim, group):  # pragma: no cover - never reached
            raise AssertionError("ran")

    q = plan("x=2,y=2", "[1{x,y}4, 4, 2]", "[4, 1{y,x}4, 2]", exchange=True)
    with pytest.raises(RedistributionError, match="Gathers does not implement exchange: the gathers backend does not run Exchange.*exchange=True"):
        execute(q, None, Gathers())


def test_schedule_restricts_to_slabs_along_the_free_dimension():
    m = Mesh.parse("x=2,y=3")
    a, b = ArrayType.parse("[1{x,y}6, 6, 4]", m), ArrayType.parse("[6, 1{y,x}6, 4]", m)
    s = ExchangeSchedule.of(a, b)
    whole = [sum(int(np.prod([x.stop - x.start for x in sb])) for r, _, sb in ps) for ps in s.pieces]
    assert whole == [b.size] * 6   # every position of every target block filled once
    halves = [s.restrict(2, 0, 2), s.restrict(2, 2, 4)]
    for h in halves:
        assert h.out_shape == (6, 1, 2)
        assert all(sa[2] == sb[2] for ps in h.pieces for _, sa, sb in ps)


def test_wire_tag_seven_in_glue_and_python():
    glue = (ROOT / "bindings" / "glue.ml").read_text()
    assert re.search(r"\| 7 -> Exch \(read_type next\)", glue)
    m = Mesh.parse("x=2")
    t = ArrayType.parse("[4]", m)
    assert Exchange(t).encode(m)[0] == 7
    assert Collective.decode(m, Exchange(t).encode(m)) == (Exchange(t), len(Exchange(t).encode(m)))


UNEVEN = [("x=2,y=2", (5, 3, 2)), ("x=2,y=3", (5, 7, 2))]


def valid_need(src: ArrayType, dst: ArrayType) -> list[int]:
    """Per device: valid elements of its target block outside its valid source block."""
    out = []
    for r in range(src.mesh.num_devices):
        a = [(s, s + v) for s, v in zip(src.block_starts(r), src.valid_shape(r))]
        b = [(s, s + v) for s, v in zip(dst.block_starts(r), dst.valid_shape(r))]
        kept = int(np.prod([max(0, min(u[1], w[1]) - max(u[0], w[0])) for u, w in zip(a, b)]))
        out.append(int(np.prod(dst.valid_shape(r))) - kept)
    return out


@pytest.mark.parametrize("mesh_text,shape", UNEVEN + [("x=2,y=2,z=2", (3, 5))])
def test_every_uneven_pair_with_the_exchange(mesh_text, shape):
    """Uneven types (Exchangeproof.ueplan_spec): the exchange is taken only
    with a free dimension and below the collective plan's traffic or peak;
    its peak is the padded bound, every device receives exactly the valid
    elements it lacks, and the result equals numpy at every valid position,
    whole and in 2 pieces, whatever the padding holds."""
    from uneven_reference import all_types as uneven_types

    from verishard.runtime.chunked import ListOps, execute_chunked
    from verishard.runtime.simulator import SimBackend
    from verishard.runtime.uneven import assemble_padded, distribute_padded, simulate_uneven

    mesh = Mesh.parse(mesh_text)
    types = [ArrayType(mesh, list(t)) for t in uneven_types(mesh.part_sizes, shape)]
    A = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    taken = 0
    for a in types:
        for b in types:
            p, q = plan(mesh, a, b), plan(mesh, a, b, exchange=True)
            assert q.peak == q.bound   # Exchangeproof.ueplan_peak: the padded bound, always
            if not q.exchange:
                assert q.collectives == p.collectives
                continue
            taken += 1
            dim = q.collectives[0].dim
            if dim is None:   # no free dimension: taken only because the collectives exceed the padded bound
                assert not free_dims(a, b) and p.peak > p.bound
            else:
                assert dim == free_dims(a, b)[0] and (q.traffic < p.traffic or p.peak > p.bound)
            assert q.peak == q.bound and q.traffic == max(valid_need(a, b)) == q.lower_bound
            assert p.traffic >= p.lower_bound == q.lower_bound   # Utrafficproof.ucheck_traffic_lower_bound
            src = distribute_padded(A, mesh, a, pad=-1)
            ys = simulate_uneven(q, src, pad=-1)
            assert np.array_equal(assemble_padded(ys, mesh, b), A)
            backend = SimBackend(mesh.num_devices, pad=-1)
            it = src[0].itemsize
            zs, rep = execute_chunked(q, src, backend, ListOps(backend), chunks=2, itemsize=it)
            assert (rep.ks[0] > 1) == (dim is not None) and np.array_equal(assemble_padded(zs, mesh, b), A)
            assert (backend.last_received // it).tolist() == valid_need(a, b)
    assert taken > 0


# --- partial types over uneven dimensions (Puexchange.v) -----------------------

def partial_padded(A, mesh, t, rng, op):
    """Padded local arrays whose reduction by ``op`` over each pending group is
    ``t.plain``'s padded distribution of ``A`` (random terms for a sum, the
    unit elsewhere for max/min except one random member)."""
    from verishard.runtime.backend import NUMPY_REDUCE, AxisGroup, reduction_identity
    from verishard.runtime.uneven import distribute_padded
    xs = distribute_padded(A, mesh, t.plain, A.dtype.type(0))
    if not t.partial:
        return xs
    g = AxisGroup.of(mesh, t.partial)
    out = [None] * mesh.num_devices
    for members in g.members:
        base = xs[int(members[0])]
        if op == "sum":
            noise = [rng.integers(-5, 5, base.shape).astype(A.dtype) for _ in members[1:]]
            out[int(members[0])] = base - sum(noise, np.zeros_like(base))
            for r, v in zip(members[1:], noise):
                out[int(r)] = v
        else:
            keep = int(rng.integers(len(members)))
            for k, r in enumerate(members):
                out[int(r)] = base.copy() if k == keep else np.full_like(base, reduction_identity(A.dtype, op))
    return out


def reduced(xs, mesh, t, op):
    from verishard.runtime.backend import NUMPY_REDUCE, AxisGroup
    if not t.partial:
        return xs
    g = AxisGroup.of(mesh, t.partial)
    out = [None] * mesh.num_devices
    for members in g.members:
        acc = xs[int(members[0])].copy()
        for r in members[1:]:
            acc = NUMPY_REDUCE[op](acc, xs[int(r)])
        for r in members:
            out[int(r)] = acc
    return out


def partial_uneven_types(mesh, shape, op="sum"):
    """Every uneven type of ``shape`` over ``mesh`` with every set of pending
    axes the array type leaves free (uneven or not: pairs are filtered)."""
    from uneven_reference import all_types as uneven_types
    types = []
    for t in uneven_types(mesh.part_sizes, shape):
        used = {p for _, ps in t for p in ps}
        free = [p for p in range(len(mesh.part_sizes)) if p not in used]
        for k in range(1 << len(free)):
            pend = tuple(p for i, p in enumerate(free) if k >> i & 1)
            types.append(ArrayType(mesh, list(t), pend, op))
    return types


@pytest.mark.parametrize("shape", [(3,), (5, 4)])
def test_partial_uneven_peak_and_lower_bound(shape):
    """Every pair of partial types over uneven dimensions on {x:2,y:2}: every
    type along the plan is within the padded bound and the peak is that bound
    (Puexchangeproof.puplan_peak); the exchange alone, hence the plan, receives
    at least Utraffic.ulower_bound of the array types
    (Puexchangeproof.puplan_lower_bound), which Plan.lower_bound reports."""
    mesh = Mesh.parse("x=2,y=2")
    types = partial_uneven_types(mesh, shape)
    pairs = 0
    for a, b in ((a, b) for a in types for b in types if (a.partial or b.partial) and (a.uneven or b.uneven)):
        p = plan(mesh, a, b)
        lb = core.ulower_bound(a.plain, b.plain)
        assert p.lower_bound == lb, (str(a), str(b))
        exch = [s.received for s in p.steps if isinstance(s.collective, Exchange)]
        assert len(exch) == 1 and exch[0] >= lb, (str(a), str(b))
        assert p.traffic >= p.lower_bound and p.traffic_ratio >= 1.0
        assert all(t.size <= p.bound for t in p.types) and p.peak == p.bound and p.within_bound
        assert f"lower bound {lb} valid elements (Puexchangeproof.puplan_lower_bound" in str(p)
        pairs += 1
    assert pairs > 20


@pytest.mark.parametrize("mesh_text,shape,op,sample", [
    ("x=2,y=2", (3, 5), "sum", None), ("x=2,y=2", (3, 5), "max", None),
    ("x=2,y=3", (5, 4), "sum", None), ("x=2,y=2,z=2", (3, 5), "sum", 600)])
def test_every_partial_uneven_pair(mesh_text, shape, op, sample):
    """Every pair (on {x:2,y:2,z:2} a sample) of partial types over uneven
    dimensions (pending axes any the array type leaves free): the plan is
    all-reduce or reduce-scatter / exchange / make pending
    (Puexchangeproof.puexec_correct),
    peaks at the padded bound (puplan_peak), receives at least the uneven
    lower bound of the array types (puplan_lower_bound), and its result
    reduces to the array at every valid position (simulator, padding set to
    a sentinel)."""
    from verishard.runtime.uneven import assemble_padded, simulate_uneven
    mesh = Mesh.parse(mesh_text)
    rng = np.random.default_rng(7)
    A = rng.integers(-50, 50, shape).astype(np.int64)
    types = partial_uneven_types(mesh, shape, op)
    todo = [(a, b) for a in types for b in types if (a.partial or b.partial) and (a.uneven or b.uneven)]
    if sample is not None:
        todo = [todo[i] for i in sorted(rng.choice(len(todo), sample, replace=False))]
    pairs = scattered = 0
    for a, b in todo:
        p = plan(mesh, a, b)
        scattered += any(type(c).__name__ == "ReduceScatter" for c in p.collectives)
        assert p.peak == p.bound and p.guaranteed                      # Puexchangeproof.puplan_peak
        assert p.traffic >= p.lower_bound == core.ulower_bound(a.plain, b.plain)   # puplan_lower_bound
        assert check(mesh, a, b, list(p.collectives)).types == p.types
        ys = simulate_uneven(p, partial_padded(A, mesh, a, rng, op), pad=-999)
        assert np.array_equal(assemble_padded(reduced(ys, mesh, b, op), mesh, b.plain), A), (str(a), str(b))
        pairs += 1
    assert pairs > 100 and scattered > 0   # the reduce-scatter where it receives less than the all-reduce
