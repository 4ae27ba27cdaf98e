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
from verishard import dtensor as vd  # noqa: E402
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
