"""DTensor placements and shard orders <-> our types, checked against DTensor's own offsets."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings, strategies as st  # noqa: E402
from torch.distributed.tensor import Partial, Replicate, Shard  # noqa: E402
from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry  # noqa: E402
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset  # noqa: E402
from torch.distributed.tensor.placement_types import _StridedShard  # noqa: E402

from verishard import ArrayType, Mesh, ShardingError  # noqa: E402
from verishard.torch import dtensor as vd  # noqa: E402
from verishard import notation  # noqa: E402
from verishard.crosscheck.harness import all_types  # noqa: E402
from verishard.runtime.layout import box  # noqa: E402

CASES = [("x=2,y=3", (12, 6)), ("x=2,y=2,z=2", (8, 4)), ("x=4,y=2", (16, 8)), ("a=2,b=2,c=2,d=2", (16, 4))]
TYPES = [t for m, s in CASES for t in all_types(Mesh.parse(m), s)]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(TYPES))
def test_round_trip(t):
    pl, order = vd.to_placements(t)
    assert all(isinstance(p, (Shard, Replicate)) for p in pl)
    assert vd.from_placements(t.mesh, t.global_shape, pl, order) == t
    # the same order as DTensor's older _StridedShard encoding
    full = vd.full_shard_order(t)
    strided = DTensorSpec._convert_shard_order_to_StridedShard(full, pl, vd._Sizes(t.mesh.axis_sizes))
    assert vd.from_placements(t.mesh, t.global_shape, strided) == t


@pytest.mark.parametrize("mesh_text, shape", CASES)
def test_blocks_agree_with_dtensor(mesh_text, shape):
    """DTensor's own offset computation puts every rank's shard where our block is."""
    mesh = Mesh.parse(mesh_text)
    for t in all_types(mesh, shape):
        pl, _ = vd.to_placements(t)
        strided = DTensorSpec._convert_shard_order_to_StridedShard(vd.full_shard_order(t), pl,
                                                                   vd._Sizes(mesh.axis_sizes))
        for r in range(mesh.num_devices):
            local, offset = _compute_local_shape_and_global_offset(shape, mesh.axis_sizes,
                                                                   list(mesh.coords(r)), strided)
            b = box(t.mesh, t, r)
            assert tuple(local) == t.local_shape, t
            assert tuple(offset) == tuple(s.start for s in b), (t, r)


def test_examples():
    m = Mesh.parse("x=2,y=3")
    assert vd.from_placements(m, (12,), [Shard(0), Shard(0)]) == ArrayType.parse("[2{x,y}12]", m)
    assert vd.from_placements(m, (12,), [Shard(0), Shard(0)], {0: (1, 0)}) == ArrayType.parse("[2{y,x}12]", m)
    assert vd.from_placements(m, (12,), [Shard(0), Shard(0)], (ShardOrderEntry(0, (1, 0)),)) == \
        ArrayType.parse("[2{y,x}12]", m)
    assert vd.from_placements(Mesh.parse("x=2,y=2"), (6, 4), [Replicate(), Shard(-1)]) == \
        ArrayType.parse("[6, 2{y}4]", "x=2,y=2")
    assert vd.to_placements(ArrayType.parse("[3{x}6, 2]", m)) == ((Shard(0), Replicate()), None)


# every type of TYPES with some of its unused axes pending (by the bits of a mask), sum, max or min
PARTIAL_TYPES = sorted({u for i, t in enumerate(TYPES) for mask in range(1, 16)
                        for u in [ArrayType(t.mesh, t.dims, reduce=("sum", "max", "min")[(i + mask) % 3],
                                            partial=tuple(p for p in range(len(t.mesh.parts))
                                                          if mask >> p & 1 and all(p not in d.parts for d in t.dims)))]
                        if u.partial}, key=str)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PARTIAL_TYPES))
def test_partial_round_trip(t):
    """Partial(op) on mesh dimension i <-> mesh axis i pending with reduction op."""
    pl, order = vd.to_placements(t)
    pending = {i for i, p in enumerate(pl) if p.is_partial()}
    assert pending == set(t.partial)  # whole axes: part index = mesh dimension
    assert all(type(pl[i]) is Partial and pl[i].reduce_op == t.reduce for i in pending)
    assert vd.from_placements(t.mesh, t.global_shape, pl, order) == t
    full = vd.full_shard_order(t)
    strided = DTensorSpec._convert_shard_order_to_StridedShard(full, pl, vd._Sizes(t.mesh.axis_sizes))
    assert vd.from_placements(t.mesh, t.global_shape, strided) == t


def test_partial_examples():
    m = Mesh.parse("x=2,y=2,z=2")
    T = lambda s: ArrayType.parse(s, m)  # noqa: E731
    assert vd.from_placements(m, (8, 4), [Partial(), Shard(0), Replicate()]) == T("[4{y}8, 4] partial{x}")
    assert vd.from_placements(m, (8, 4), [Partial("sum"), Replicate(), Partial()]) == T("[8, 4] partial{x,z}")
    assert vd.from_placements(m, (8, 4), [Shard(1), Partial("max"), Shard(1)]).reduce == "max"
    assert vd.from_placements(m, (8, 4), [Replicate(), Replicate(), Partial("min")]) == T("[8, 4] partial(min){z}")
    assert vd.to_placements(T("[8, 2{y}4] partial(max){x,z}")) == ((Partial("max"), Shard(1), Partial("max")), None)
    assert vd.to_placements(T("[2{z,y}8, 4] partial{x}")) == ((Partial(), Shard(0), Shard(0)),
                                                           (ShardOrderEntry(0, (2, 1)),))
    # a DTensorSpec with Partial placements, and back
    dm = vd.planning_mesh(m)
    spec = vd.to_spec(T("[8, 2{x}4] partial(min){y}"), dm)
    assert spec.placements == (Shard(1), Partial("min"), Replicate())
    assert vd.from_spec(m, spec) == T("[8, 2{x}4] partial(min){y}")
    # Partial over a split axis: DTensor has no placement for part of a mesh dimension
    with pytest.raises(ShardingError, match="pending sub-axis 'y.0'"):
        vd.to_placements(ArrayType.parse("[4] partial{y.0}", "x=2,y=2*2"))
    assert vd.to_placements(ArrayType.parse("[4] partial{y}", "x=2,y=2*2"))[0] == (Replicate(), Partial())


@pytest.mark.parametrize("op", ["avg", "product", "band", "bor", "bxor"])
def test_partial_refuses_other_reductions(op):
    m = Mesh.parse("x=2,y=2")
    with pytest.raises(vd.UnsupportedReduction, match=rf"Partial\({op}\) on mesh dimension 1 \('y'\) is not supported"):
        vd.from_placements(m, (4,), [Shard(0), Partial(op)])
    if op == "avg":
        with pytest.raises(ShardingError, match="mean is the value"):
            vd.from_placements(m, (4,), [Partial("avg"), Replicate()])


def test_partial_refuses_mixed_reductions_and_subclasses():
    m = Mesh.parse("x=2,y=2,z=2")
    with pytest.raises(ShardingError, match=r"mix reductions: sum on mesh dimension 0 \('x'\), mesh dimension 2 "
                                            r"\('z'\), max on mesh dimension 1 \('y'\)"):
        vd.from_placements(m, (4,), [Partial("sum"), Partial("max"), Partial("sum")])
    with pytest.raises(ShardingError, match="mix reductions"):
        vd.from_placements(m, (4,), [Partial("min"), Replicate(), Partial("max")])
    assert not issubclass(ShardingError, vd.UnsupportedReduction)

    class MyPartial(Partial):
        pass

    with pytest.raises(vd.UnsupportedReduction, match="is a MyPartial, not a plain Partial"):
        vd.from_placements(m, (4,), [MyPartial(), Replicate(), Replicate()])


def test_all_placements_with_partial():
    dm = vd.planning_mesh(Mesh.parse("x=2,y=2,z=2"))
    plain = vd.all_placements(dm, 2)
    with_p = vd.all_placements(dm, 2, partial="max")
    assert set(plain) < set(with_p) and len(with_p) == 92
    assert all(p.reduce_op == "max" for pl in with_p for p in pl if p.is_partial())
    m = Mesh.parse("x=2,y=2,z=2")
    types = {vd.from_placements(m, (8, 8), pl) for pl in with_p}
    assert len(types) == len(with_p)  # every tuple a different type
    with pytest.raises(ShardingError, match="unknown reduction 'avg'"):
        vd.all_placements(dm, 2, partial="avg")


def test_refusals():
    m = Mesh.parse("x=2,y=2")
    with pytest.raises(ShardingError, match="Partial"):
        vd.placements_to_tuples([Partial(), Shard(0)])  # the tuple notation has no pending reductions
    with pytest.raises(ShardingError, match="one per mesh axis"):
        vd.from_placements(m, (4,), [Shard(0)])
    with pytest.raises(ShardingError):
        vd.from_placements(m, (4,), [Shard(0), Shard(0)], {0: (0,)})
    with pytest.raises(ShardingError, match="sub-axis"):
        vd.to_placements(ArrayType.parse("[2{y.0}4]", "y=2*2"))
    with pytest.raises(ShardingError, match="not both"):
        vd.from_placements(m, (4,), [_StridedShard(0, split_factor=2), Shard(0)], {0: (1, 0)})


def test_spec_round_trip_on_a_planning_mesh():
    m = Mesh.parse("x=2,y=2,z=2")
    dm = vd.planning_mesh(m)
    for t in all_types(m, (8, 4))[::7]:
        spec = vd.to_spec(t, dm)
        assert vd.from_spec(m, spec) == t


# ---------------------------------------------------------------------------
# shapes that do not divide

UNEVEN_CASES = [("x=2,y=2", (5, 3)), ("x=2,y=4", (7, 5)), ("x=2,y=2,z=2", (3, 6)), ("x=2,y=3", (5, 7)),
                ("x=3,y=2", (6, 4))]


def _chunked(g, steps):
    """Global indices of one shard of a dimension of size ``g``: ``torch.chunk``
    applied chunk by chunk, ``steps`` = (number of chunks, this rank's index),
    major first; an index past the chunks torch.chunk returns is empty."""
    idx = torch.arange(g)
    for n, k in steps:
        parts = torch.chunk(idx, n)
        idx = parts[k] if k < len(parts) else idx[:0]
    return idx.tolist()


def _blocks(t, r):
    return [list(range(s, s + v)) for s, v in zip(t.block_starts(r), t.valid_shape(r))]


def _nested_ok(t):
    """DTensor's layout with an explicit shard order (torch.chunk of each
    chunk, in the order) is ``t``'s blocks on every rank."""
    mesh = t.mesh
    for r in range(mesh.num_devices):
        coords = mesh.coords(r)
        for d in range(t.rank):
            axes = [mesh.axis_names.index(a) for a in t.dim_axes(d)]
            if _chunked(t.global_shape[d], [(mesh.axis_sizes[i], coords[i]) for i in axes]) != _blocks(t, r)[d]:
                return False
    return True


def _strided_ok(t, placements):
    """DTensor's own offsets for ``placements`` are ``t``'s blocks on every rank."""
    mesh = t.mesh
    for r in range(mesh.num_devices):
        local, offset = _compute_local_shape_and_global_offset(t.global_shape, mesh.axis_sizes,
                                                               list(mesh.coords(r)), placements)
        if tuple(local) != t.valid_shape(r):
            return False
        if any(n and o != s for n, o, s in zip(local, offset, t.block_starts(r))):
            return False
    return True


@pytest.mark.parametrize("mesh_text, shape", UNEVEN_CASES)
def test_uneven_types_convert_exactly_where_dtensor_lays_them_out(mesh_text, shape):
    """Every uneven type of the shape: its placements with an explicit shard
    order convert both ways (and round-trip) if and only if torch.chunk,
    chunk by chunk in that order, gives every rank its block; its
    _StridedShard encoding converts if and only if DTensor's own offsets
    give every rank its block; otherwise UnsupportedLayout naming the
    dimension. In the default order the two layouts are DTensor's same."""
    mesh = Mesh.parse(mesh_text)
    counts = {"accepted": 0, "refused": 0, "strided accepted": 0, "strided refused": 0}
    for t in all_types(mesh, shape, uneven=True):
        if not t.uneven:
            continue
        pl = vd.tuples_to_placements(notation.to_placements(t)[0])
        full = vd.full_shard_order(t)
        strided = DTensorSpec._convert_shard_order_to_StridedShard(full, pl, vd._Sizes(mesh.axis_sizes))
        nested, by_dtensor = _nested_ok(t), _strided_ok(t, strided)
        if tuple(strided) == tuple(pl):  # the default order
            assert nested == by_dtensor, t
        if nested:
            got_pl, got_order = vd.to_placements(t)
            assert got_pl == pl
            assert vd.from_placements(mesh, shape, got_pl, got_order) == t
            assert vd.from_spec(mesh, vd.to_spec(t, vd.planning_mesh(mesh))) == t
            counts["accepted"] += 1
        else:
            with pytest.raises(vd.UnsupportedLayout, match=r"dim \d of size \d+ in \d+ shards by"):
                vd.to_placements(t)
            with pytest.raises(vd.UnsupportedLayout, match="torch.chunk of each chunk"):
                vd.from_placements(mesh, shape, pl, full)
            counts["refused"] += 1
        if by_dtensor:
            assert vd.from_placements(mesh, shape, strided) == t
            counts["strided accepted"] += 1
        else:
            with pytest.raises(vd.UnsupportedLayout, match="are not verishard's blocks of ceil"):
                vd.from_placements(mesh, shape, strided)
            counts["strided refused"] += 1
    assert counts["accepted"] and counts["strided accepted"], counts
    if mesh.num_devices > max(mesh.axis_sizes):  # several axes can share a dimension
        assert counts["refused"] and counts["strided refused"], counts


def test_uneven_examples():
    m = Mesh.parse("x=2,y=2")
    assert vd.from_placements(m, (5, 3), [Shard(0), Shard(1)]) == ArrayType.parse("[3{x}5, 2{y}3]", m)
    assert vd.from_placements(m, (7,), [Shard(0), Shard(0)]) == ArrayType.parse("[2{x,y}7]", m)  # 2, 2, 2, 1
    with pytest.raises(vd.UnsupportedLayout) as e:
        vd.from_placements(m, (5,), [Shard(0), Shard(0)])
    # short (issue 33: at most 200 characters), with a way out
    assert str(e.value) == ("dim 0 of size 5 in 4 shards by 'x','y': DTensor's torch.chunk of each chunk [0:2] [2:3] "
                            "[3:4] [4:5] are not verishard's blocks of ceil(5/4)=2; make it divisible by 4 or "
                            "Replicate() on 'y'")
    assert len(str(e.value)) <= 200
    assert issubclass(vd.UnsupportedLayout, ShardingError)
    # Partial with a dimension that does not divide: a partial uneven type (Puexchange.v)
    assert vd.from_placements(m, (5, 4), [Partial(), Shard(0)]) == ArrayType.parse("[3{y}5, 4] partial{x}", m)
    assert vd.from_placements(m, (4, 5), [Partial("max"), Shard(0)]) == ArrayType.parse("[2{y}4, 5] partial(max){x}", m)
    # the extent of one shard, by DTensor's own computation
    assert vd.dtensor_extent(5, (2, 2), (1, 1), [(0, Shard(0)), (1, Shard(0))]) == (4, 1)
    assert vd.dtensor_extent(5, (2, 2), (1, 1), []) == (0, 5)
