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


def test_refusals():
    m = Mesh.parse("x=2,y=2")
    with pytest.raises(ShardingError, match="Partial"):
        vd.from_placements(m, (4,), [Partial(), Shard(0)])
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
