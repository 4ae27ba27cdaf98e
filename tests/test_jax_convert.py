"""PartitionSpec / NamedSharding conversions, checked against JAX's own layout."""

from __future__ import annotations

import os
import sys

import pytest

if "jax" not in sys.modules:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
jax = pytest.importorskip("jax")
if len(jax.devices()) < 8:  # pragma: no cover
    pytest.skip("needs 8 JAX devices (XLA_FLAGS set before JAX was imported)", allow_module_level=True)

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
