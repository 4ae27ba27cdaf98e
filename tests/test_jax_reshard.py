"""verishard.jax.reshard / execute against jax.device_put."""

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
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import verishard  # noqa: E402
import verishard.jax as vj  # noqa: E402
from verishard import AllGather, AllPermute, AllToAll, ArrayType, DynSlice, Mesh, ShardingError  # noqa: E402
from verishard.crosscheck.harness import all_types, grid_cases  # noqa: E402

XYZ = Mesh.parse("x=2,y=2,z=2")
JM = vj.jax_mesh(XYZ)


def same(y, ref) -> bool:
    if y.sharding != ref.sharding or y.shape != ref.shape:
        return False
    a = {s.device.id: np.asarray(s.data) for s in y.addressable_shards}
    b = {s.device.id: np.asarray(s.data) for s in ref.addressable_shards}
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def check_pairs(pairs, shape, seed):
    rng = np.random.default_rng(seed)
    bad = []
    for a, b in pairs:
        A = rng.standard_normal(shape).astype(np.float32)
        x = jax.device_put(A, vj.to_named_sharding(a, JM))
        s = vj.to_named_sharding(b, JM)
        y = vj.reshard(x, s)
        if not same(y, jax.device_put(x, s)) or not np.array_equal(np.asarray(y), A):
            bad.append((str(a), str(b)))
    assert not bad, bad[:5]


def test_every_pair_of_types_1d():
    ts = all_types(XYZ, (8,))
    assert len(ts) == 16
    check_pairs([(a, b) for a in ts for b in ts], (8,), 0)


def test_pairs_of_types_2d_and_3d():
    cases2, total2 = grid_cases(XYZ, (4, 8), 120, seed=1)
    cases3, total3 = grid_cases(XYZ, (2, 4, 8), 60, seed=2)
    assert total2 == 43 ** 2 and total3 == 76 ** 2
    check_pairs([(c.src, c.dst) for c in cases2], (4, 8), 1)
    check_pairs([(c.src, c.dst) for c in cases3], (2, 4, 8), 2)


def run_plan(p, A):
    x = jax.device_put(A, vj.to_named_sharding(p.src))
    y = vj.execute(p, x)
    ref = jax.device_put(A, vj.to_named_sharding(p.dst, y.sharding.mesh))
    return same(y, ref)


def test_hand_written_plans_every_collective():
    P_ = lambda s, m=XYZ: ArrayType.parse(s, m)  # noqa: E731
    A = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    plans = [
        verishard.check(XYZ, "[8, 16]", "[2{x,y}8, 8{z}16]", [DynSlice(0, ("x", "y")), DynSlice(1, "z")]),
        verishard.check(XYZ, "[1{x,y,z}8, 16]", "[8, 2{x,y,z}16]", [AllToAll(0, 1, ("x", "y", "z"))]),
        verishard.check(XYZ, "[2{x,y}8, 8{z}16]", "[2{z,y}8, 8{x}16]",
                        [AllPermute(P_("[2{z,y}8, 8{x}16]"))]),
        verishard.check(XYZ, "[2{x,y}8, 16]", "[8, 16]", [AllGather(0, ("x", "y"))]),
        verishard.check(XYZ, "[4{x}8, 4{y,z}16]", "[2{x,z}8, 8{y}16]", [AllToAll(1, 0, "z")]),
    ]
    for p in plans:
        assert run_plan(p, A), p


def test_plan_over_split_axes():
    m = Mesh.parse("x=2,y=2*2")
    p = verishard.check(m, "[32{x}64, 8]", "[16{y}64, 8]",
                        [DynSlice(0, "y.0"), AllPermute(ArrayType.parse("[16{y}64, 8]", m))])
    A = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    assert run_plan(p, A)
    # and through reshard, on the user's whole-axis mesh
    jm = vj.jax_mesh(Mesh.parse("x=2,y=4"))
    x = jax.device_put(A, NamedSharding(jm, P("x")))
    y = vj.reshard(x, NamedSharding(jm, P("y")), plan=p)
    assert same(y, jax.device_put(x, NamedSharding(jm, P("y"))))


def test_adapter_plans_run_on_our_backend():
    """Plans read from XLA's and DTensor's programs execute correctly here."""
    from verishard.crosscheck.harness import run_planner
    cases, _ = grid_cases(XYZ, (8, 16), 12, seed=5)
    ran = 0
    for c in cases:
        for name in ("xla", "dtensor-greedy"):
            r = run_planner(name, c.mesh, c.src, c.dst)
            if r.valid:
                assert run_plan(r.plan, np.arange(128, dtype=np.float32).reshape(8, 16)), (name, c)
                ran += 1
    assert ran >= 12


def test_reshard_refuses_what_it_cannot_do():
    s = NamedSharding(JM, P("x"))
    with pytest.raises(ShardingError, match="jax.Array"):
        vj.reshard(np.zeros(8), s)
    other = vj.jax_mesh(Mesh.parse("x=4,y=2"))
    x = jax.device_put(np.zeros(8, np.float32), NamedSharding(other, P("x")))
    with pytest.raises(ShardingError, match="one JAX mesh"):
        vj.reshard(x, s)
    x = jax.device_put(np.zeros(8, np.float32), s)
    with pytest.raises(ShardingError, match="unconstrained"):
        vj.reshard(x, NamedSharding(JM, P(P.UNCONSTRAINED)))
    with pytest.raises(verishard.VerishardError):
        vj.reshard(x, NamedSharding(JM, P("y")),
                   plan=verishard.check(XYZ, "[8]", "[4{y}8]", [DynSlice(0, "y")]))
