"""PartitionSpec / NamedSharding conversions, checked against JAX's own layout."""

from __future__ import annotations

import pytest

from jax_devices import jax_or_skip

jax = jax_or_skip()

import numpy as np  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import verishard.jax as vj  # noqa: E402
from verishard import ArrayType, Mesh, ShardingError  # noqa: E402
from verishard.runtime.layout import box  # noqa: E402
from verishard.crosscheck.harness import all_types  # noqa: E402

CASES = [("x=8", (16, 8)), ("x=4,y=2", (8, 16)), ("x=2,y=2,z=2", (8, 4)), ("x=2,y=3", (12, 6)),
         ("x=2,y=2*2", (8, 8))]


def _types():
    out = []
    for m, shape in CASES:
        mesh = Mesh.parse(m)
        out += [t for t in all_types(mesh, shape)]
    return out


TYPES = _types()


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(TYPES))
def test_partition_spec_round_trip(t):
    parts = len(t.mesh.parts) != len(t.mesh.axes)
    spec = vj.to_partition_spec(t, parts=parts)
    assert isinstance(spec, P)
    if parts:
        jm = vj.jax_mesh(t.mesh)
        assert vj.from_partition_spec(jm, t.global_shape, spec) == t
    else:
        assert vj.from_partition_spec(t.mesh, t.global_shape, spec) == t
    sh = vj.to_named_sharding(t)
    assert vj.from_named_sharding(sh, t.global_shape) == t


@pytest.mark.parametrize("mesh_text, shape", CASES)
def test_layout_agrees_with_jax(mesh_text, shape):
    """JAX's own device -> index map equals our block of every rank."""
    mesh = Mesh.parse(mesh_text)
    if mesh.num_devices > len(jax.devices()):
        pytest.skip("not enough devices")
    for t in all_types(mesh, shape):
        sh = vj.to_named_sharding(t)
        idx = sh.devices_indices_map(shape)
        for r, dev in enumerate(sh.mesh.devices.flat):
            want = box(t.mesh, t, r)
            got = tuple(slice(s.start or 0, shape[d] if s.stop is None else s.stop) for d, s in enumerate(idx[dev]))
            assert got == want, (t, r)


def test_mesh_round_trip():
    for text in ("x=8", "x=2,y=2*2", "a=2,b=2,c=2"):
        m = Mesh.parse(text)
        assert vj.mesh_from_jax(vj.jax_mesh(m)) == m
    jm = vj.jax_mesh(Mesh.parse("x=2,y=2*2"))
    assert jm.axis_names == ("x", "y.0", "y.1")


def test_spec_forms():
    m = Mesh.parse("x=2,y=2")
    assert vj.from_partition_spec(m, (4, 4), P()) == ArrayType.parse("[4, 4]", m)
    assert vj.from_partition_spec(m, (4, 4), P(None, ())) == ArrayType.parse("[4, 4]", m)
    assert vj.from_partition_spec(m, (4, 4), P(("x",), "y")) == ArrayType.parse("[2{x}4, 2{y}4]", m)
    assert vj.from_partition_spec(m, (8, 4), P(("y", "x"))) == ArrayType.parse("[2{y,x}8, 4]", m)
    assert vj.to_partition_spec(ArrayType.parse("[4, 2{y}4]", m)) == P(None, "y")


@pytest.mark.parametrize("spec, match", [
    (P("x", P.UNCONSTRAINED), "unconstrained"),
    (P(P.UNCONSTRAINED), "unconstrained"),
    (P("z"), "unknown axis"),
    (P("x", "x"), "duplicate"),
    (P(None, None, "x"), "rank"),
])
def test_bad_specs_are_refused(spec, match):
    with pytest.raises(ShardingError, match=match):
        vj.from_partition_spec(Mesh.parse("x=2,y=2"), (4, 4), spec)


def test_sub_axes_need_a_parts_mesh():
    t = ArrayType.parse("[2{y.1}4]", "y=2*2")
    with pytest.raises(ShardingError, match="sub-axis"):
        vj.to_partition_spec(t)
    sh = vj.to_named_sharding(t)
    assert sh.mesh.axis_names == ("y.0", "y.1") and sh.spec == P("y.1")


def test_named_sharding_needs_the_right_mesh():
    jm = vj.jax_mesh(Mesh.parse("x=4,y=2"))
    with pytest.raises(ShardingError):
        vj.to_named_sharding(ArrayType.parse("[4{x}8]", "x=2,y=4"), jm)
    assert vj.to_named_sharding(ArrayType.parse("[2{x}8]", "x=4,y=2"), jm) == NamedSharding(jm, P("x"))
    assert np.array_equal(np.vectorize(lambda d: d.id)(jm.devices), np.arange(8).reshape(4, 2))


# ---------------------------------------------------------------------------
# unreduced axes: the pending axes of a sum


import mpi_cases as mc  # noqa: E402
from jax.sharding import AxisType  # noqa: E402

PARTIAL_CASES = [("x=2,y=2,z=2", (4, 4)), ("x=2,y=3", (6, 6)), ("x=2,y=2*2", (8, 8))]


def _partial_types(reduce="sum"):
    """Every type of each case (over the mesh's parts) with a non-empty set of its unused parts pending."""
    return [t for m, shape in PARTIAL_CASES for t in mc.partial_types(Mesh.parse(m), shape, (reduce,)) if t.partial]


PARTIAL = _partial_types()


def _whole_axes(t):
    """Whether every dimension and the pending set name whole axes only."""
    parts = set(t.partial) | set(t.used_parts)
    m = t.mesh
    return all(set(m.resolve(a)) <= parts or not set(m.resolve(a)) & parts for a in m.axis_names) and \
        all(n in m.axis_names for d in range(t.rank) for n in t.dim_axes(d))


def test_partial_types_round_trip_through_unreduced():
    """All partial (sum) types of the cases (43 + 7 + 43 = 93); every one to a PartitionSpec with
    unreduced axes and back, over whole axes where it can be spelled so, else over the mesh's parts;
    and to a NamedSharding (a mesh of Explicit axes, which JAX's unreduced axes need) and back."""
    assert len(PARTIAL) == 93
    whole = 0
    for t in PARTIAL:
        if _whole_axes(t):
            spec = vj.to_partition_spec(t)
            assert spec.unreduced == frozenset(t.mesh.axis_names[i] for i, a in enumerate(t.mesh.axis_names)
                                               if set(t.mesh.resolve(a)) <= set(t.partial))
            assert vj.from_partition_spec(t.mesh, t.global_shape, spec) == t
            whole += 1
        spec = vj.to_partition_spec(t, parts=True)
        assert spec.unreduced == frozenset(t.mesh.part_name(q) for q in t.partial)
        assert vj.from_partition_spec(vj.jax_mesh(t.mesh), t.global_shape, spec) == t
        sh = vj.to_named_sharding(t)
        assert set(sh.mesh.axis_types) == {AxisType.Explicit}
        assert vj.from_named_sharding(sh, t.global_shape) == t
    assert 0 < whole < len(PARTIAL)


def test_unreduced_spec_forms():
    m = Mesh.parse("x=2,y=2,z=2")
    assert vj.from_partition_spec(m, (4, 4), P(None, unreduced={"x"})) == ArrayType.parse("[4, 4] partial{x}", m)
    assert vj.from_partition_spec(m, (4, 4), P("y", unreduced={"z", "x"})) == \
        ArrayType.parse("[2{y}4, 4] partial{x,z}", m)
    assert vj.to_partition_spec(ArrayType.parse("[4, 2{y}4] partial{z,x}", m)) == P(None, "y", unreduced={"x", "z"})
    # a split axis: whole when all its parts are pending, else only over the mesh's parts
    s = Mesh.parse("x=2,y=2*2")
    assert vj.to_partition_spec(ArrayType.parse("[8] partial{y}", s)) == P(None, unreduced={"y"})
    with pytest.raises(ShardingError, match="sub-axis 'y.1' is pending in .*, not the whole axis 'y'"):
        vj.to_partition_spec(ArrayType.parse("[4{x}8] partial{y.1}", s))
    t = ArrayType.parse("[4{y.0}8] partial{y.1}", s)
    with pytest.raises(ShardingError, match="sub-axis"):
        vj.to_partition_spec(t)
    assert vj.to_partition_spec(t, parts=True) == P("y.0", unreduced={"y.1"})
    sh = vj.to_named_sharding(t)
    assert sh.mesh.axis_names == ("x", "y.0", "y.1") and vj.from_named_sharding(sh, (8,)) == t
    # a given Explicit mesh (a split one keeps its axis types on the parts)
    em = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    sh = vj.to_named_sharding(t, em)
    assert sh.mesh.axis_types == (AxisType.Explicit,) * 3 and [d.id for d in sh.mesh.devices.flat] == \
        [d.id for d in em.devices.flat]
    # the spec of an unreduced NamedSharding
    u = NamedSharding(vj.jax_mesh(m, axis_types=AxisType.Explicit), P(None, "z", unreduced={"y"}))
    assert vj.from_named_sharding(u, (4, 4)) == ArrayType.parse("[4, 2{z}4] partial{y}", m)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_pending_max_and_min_have_no_partition_spec(reduce):
    t = _partial_types(reduce)[0]
    with pytest.raises(ShardingError, match=f"pending a {reduce}: JAX's unreduced axes are a pending sum"):
        vj.to_partition_spec(t)
    with pytest.raises(ShardingError, match="reshard_local"):
        vj.to_named_sharding(t)


def test_bad_unreduced_specs_are_refused():
    m = Mesh.parse("x=2,y=2")
    with pytest.raises(ShardingError, match="unreduced axes of .*unknown axis 'z'"):
        vj.from_partition_spec(m, (4, 4), P(None, unreduced={"z"}))
    with pytest.raises(ShardingError, match="both unreduced and sharding"):
        vj.from_partition_spec(Mesh.parse("x=2,y=2*2"), (4, 4), P("y.0", unreduced={"y"}))
    with pytest.raises(ShardingError, match="reduced axes"):
        vj.from_partition_spec(m, (4, 4), P(None, reduced={"x"}))
    with pytest.raises(ShardingError, match="unreduced axes"):
        vj.spec_entries(P(None, unreduced={"x"}))   # plain entries only, unless asked
    assert vj.spec_entries(P(None, unreduced={"x"}), unreduced=True) == (None,)
    # JAX's rule: unreduced axes are Explicit axes
    with pytest.raises(ShardingError, match="must be AxisType.Explicit"):
        vj.to_named_sharding(ArrayType.parse("[4, 4] partial{x}", m), vj.jax_mesh(m))


# ---------------------------------------------------------------------------
# uneven shapes: a size the sharding does not divide is an uneven type (blocks of ceil(g / n))

UNEVEN = [t for m, shape in [("x=2,y=4", (5, 7)), ("x=2,y=2,z=2", (9,)), ("x=2,y=3", (5, 4))]
          for t in all_types(Mesh.parse(m), shape, uneven=True) if t.uneven]


def test_uneven_partition_specs_round_trip():
    m = Mesh.parse("x=2,y=2")
    t = vj.from_partition_spec(m, (5,), P(("x", "y")))
    assert t == ArrayType.parse("[2{x,y}5]", m) and [t.valid_shape(r) for r in range(4)] == [(2,), (2,), (1,), (0,)]
    assert vj.from_partition_spec(m, (5, 3), P("y", "x")) == ArrayType.parse("[3{y}5, 2{x}3]", m)
    for t in UNEVEN:
        spec = vj.to_partition_spec(t)
        assert vj.from_partition_spec(t.mesh, t.global_shape, spec) == t
        assert vj.from_named_sharding(vj.to_named_sharding(t, vj.jax_mesh(t.mesh)), t.global_shape) == t


def test_uneven_layout_agrees_with_xla():
    """XLA's blocks of a sharding that does not divide the shape are the type's padded blocks: cutting the
    padded global array (laid out as the type, an even array) to the shape, constraining it to the sharding
    and padding it back compiles to no collective and gives every device its own block back."""
    from jax import lax
    import jax.numpy as jnp
    from verishard.jax.backend import padded_global_shape
    for t in UNEVEN[::3]:
        jm = vj.jax_mesh(t.mesh)
        spec = vj.to_partition_spec(t)
        shape, padded = t.global_shape, padded_global_shape(t)
        A = np.zeros(padded, np.float32)
        A[tuple(slice(0, g) for g in shape)] = np.arange(1, 1 + int(np.prod(shape))).reshape(shape)
        x = jax.device_put(A, NamedSharding(jm, spec))
        f = jax.jit(lambda v: jnp.pad(lax.with_sharding_constraint(lax.slice(v, (0,) * v.ndim, shape),
                                                                   NamedSharding(jm, spec)),
                                      [(0, p - g) for p, g in zip(padded, shape)]),
                    out_shardings=NamedSharding(jm, spec))
        text = f.lower(x).compile().as_text()
        assert not any(k in text for k in ("all-gather", "all-to-all", "collective-permute", "all-reduce")), t
        y = f(x)
        assert all(np.array_equal(np.asarray(a.data), np.asarray(b.data))
                   for a, b in zip(y.addressable_shards, x.addressable_shards)), t
