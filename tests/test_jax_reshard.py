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


# ---------------------------------------------------------------------------
# reshard under jit, grad, jvp and vmap; caching; rank 0; errors

import re  # noqa: E402

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType  # noqa: E402

EXPLICIT = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
AUTO = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
# (source, target) on {x:2, y:4}; y=4 is split by the planner (y.0, y.1), so these run on a parts mesh too
PAIRS = [(P("x", "y"), P("y", "x")), (P("x"), P()), (P(), P(None, "y")), (P("y"), P("x")),
         (P(("x", "y")), P(None, ("y", "x"))), (P("x"), P("x", None))]
SHAPE = (8, 16)


def equivalent(y, ref) -> bool:
    """Same layout and data on every device (the sharding may differ in spelling: P('x') vs P('x', None))."""
    if not y.sharding.is_equivalent_to(ref.sharding, y.ndim) or y.shape != ref.shape:
        return False
    a = {s.device.id: np.asarray(s.data) for s in y.addressable_shards}
    b = {s.device.id: np.asarray(s.data) for s in ref.addressable_shards}
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def collectives(compiled_text: str) -> dict[str, int]:
    names = ("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter")
    return {k: len(re.findall(rf"= [^=\n]*? {k}(?:-start)?\(", compiled_text)) for k in names}


def plan_collectives(p) -> dict[str, int]:
    from verishard.runtime.backend import step_call
    out = dict.fromkeys(("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter"), 0)
    kind = {"all_gather": "all-gather", "all_to_all": "all-to-all", "all_permute": "collective-permute"}
    t = p.src
    for s in p.steps:
        call = step_call(p.mesh, t, s.collective)
        if call is not None and call[0] in kind:
            out[kind[call[0]]] += 1
        t = s.type
    return out


def a_plan(jm, s, d, shape=SHAPE):
    m = vj.mesh_from_jax(jm)
    return verishard.plan(m, vj.from_partition_spec(m, shape, s), vj.from_partition_spec(m, shape, d))


@pytest.fixture
def data():
    return np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)


@pytest.mark.parametrize("jm", [EXPLICIT, AUTO], ids=["explicit", "auto"])
def test_eager_equals_device_put_both_modes(jm, data):
    for s, d in PAIRS:
        x = jax.device_put(data, NamedSharding(jm, s))
        dst = NamedSharding(jm, d)
        y = vj.reshard(x, dst)
        assert y.sharding == dst and equivalent(y, jax.device_put(x, dst)), (s, d)


def test_jit_explicit_mode_reads_the_type_and_runs_only_the_plan(data):
    for s, d in PAIRS:
        x = jax.device_put(data, NamedSharding(EXPLICIT, s))
        dst = NamedSharding(EXPLICIT, d)
        f = jax.jit(lambda v: vj.reshard(v, dst) * 2)
        y = f(x)
        assert jax.typeof(y).sharding.spec == jax.typeof(jax.device_put(x, dst)).sharding.spec
        assert equivalent(y, jax.device_put(2 * x, dst)), (s, d)
        # XLA adds no collective of its own: the compiled program has exactly the plan's
        assert collectives(f.lower(x).compile().as_text()) == plan_collectives(a_plan(EXPLICIT, s, d)), (s, d)


def test_jit_auto_mode_needs_src_and_then_runs_only_the_plan(data):
    s, d = P("x", "y"), P("y", "x")
    x = jax.device_put(data, NamedSharding(AUTO, s))
    dst = NamedSharding(AUTO, d)
    with pytest.raises(ShardingError, match="pass src="):
        jax.jit(lambda v: vj.reshard(v, dst))(x)
    for src in (NamedSharding(AUTO, s), s):
        f = jax.jit(lambda v: vj.reshard(v, dst, src=src))
        y = f(x)
        assert y.sharding == dst and equivalent(y, jax.device_put(x, dst))
        assert collectives(f.lower(x).compile().as_text()) == plan_collectives(a_plan(AUTO, s, d))


def test_partition_spec_target_with_the_context_mesh(data):
    x = jax.device_put(data, NamedSharding(EXPLICIT, P("x")))
    ref = jax.device_put(x, NamedSharding(EXPLICIT, P(None, "y")))
    with jax.set_mesh(EXPLICIT):
        assert equivalent(vj.reshard(x, P(None, "y")), ref)
        assert equivalent(jax.jit(lambda v: vj.reshard(v, P(None, "y")))(x), ref)
    with pytest.raises(ShardingError, match="needs a mesh"):
        vj.reshard(x, P(None, "y"))


def loss_and_reference(jm, s, d, data):
    """Our loss, the same loss through jax.device_put, and their input."""
    w = jax.device_put(np.cos(np.arange(data.size, dtype=np.float32)).reshape(data.shape), NamedSharding(jm, d))
    kw = {} if jm is EXPLICIT else {"src": s}
    ours = lambda v: jnp.sum(jnp.sin(vj.reshard(v, NamedSharding(jm, d), **kw)) * w)  # noqa: E731
    ref = lambda v: jnp.sum(jnp.sin(jax.device_put(v, NamedSharding(jm, d))) * w)  # noqa: E731
    return ours, ref, jax.device_put(data, NamedSharding(jm, s))


@pytest.mark.parametrize("jm", [EXPLICIT, AUTO], ids=["explicit", "auto"])
def test_grad_is_the_reverse_plan(jm, data):
    for s, d in PAIRS[:4]:
        ours, ref, x = loss_and_reference(jm, s, d, data)
        with jax.set_mesh(jm):
            g = jax.jit(jax.grad(ours))(x)
            g_eager = jax.grad(ours)(x)
            g_ref = jax.grad(ref)(x)
            compiled = jax.jit(jax.grad(ours)).lower(x).compile().as_text()
        expected = np.cos(data) * np.cos(np.arange(data.size, dtype=np.float32)).reshape(data.shape)
        for gv in (g, g_eager):
            np.testing.assert_allclose(np.asarray(gv), np.asarray(g_ref), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(np.asarray(gv), expected, rtol=1e-5, atol=1e-6)
            assert gv.sharding.is_equivalent_to(NamedSharding(jm, s), 2), (s, d, gv.sharding)
        # the forward plan and the reverse plan (dst -> src, from the core), nothing else
        fwd, bwd = plan_collectives(a_plan(jm, s, d)), plan_collectives(a_plan(jm, d, s))
        assert collectives(compiled) == {k: fwd[k] + bwd[k] for k in fwd}, (s, d)


def test_grad_numerically():
    from jax.test_util import check_grads
    A = np.random.default_rng(3).standard_normal(SHAPE)
    with jax.enable_x64():
        x = jax.device_put(A, NamedSharding(EXPLICIT, P("x", "y")))
        dst = NamedSharding(EXPLICIT, P("y", "x"))
        src = NamedSharding(EXPLICIT, P("x", "y"))
        with jax.set_mesh(EXPLICIT):  # check_grads perturbs on the host: device_put puts it back
            check_grads(lambda v: jnp.tanh(vj.reshard(jax.device_put(v, src), dst)) ** 2, (x,), order=2,
                        modes=["rev"])


def test_jvp_and_linearize(data):
    x = jax.device_put(data, NamedSharding(EXPLICIT, P("x", "y")))
    t = jax.device_put(data[::-1].copy(), NamedSharding(EXPLICIT, P("x", "y")))
    dst = NamedSharding(EXPLICIT, P("y", "x"))
    y, ty = jax.jvp(lambda v: vj.reshard(v, dst), (x,), (t,))
    assert equivalent(y, jax.device_put(x, dst)) and equivalent(ty, jax.device_put(t, dst))
    _, lin = jax.jit(lambda v: jax.linearize(lambda u: vj.reshard(u, dst), v))(x)
    assert equivalent(jax.jit(lin)(t), jax.device_put(t, dst))


@pytest.mark.parametrize("jm", [EXPLICIT, AUTO], ids=["explicit", "auto"])
def test_vmap(jm):
    B = np.random.default_rng(5).standard_normal((3, *SHAPE)).astype(np.float32)
    s, d = P("x", "y"), P("y", "x")
    xb = jax.device_put(B, NamedSharding(jm, P(None, *s)))
    dst = NamedSharding(jm, d)
    kw = {} if jm is EXPLICIT else {"src": s}
    yb = jax.jit(jax.vmap(lambda v: vj.reshard(v, dst, **kw)))(xb)
    assert equivalent(yb, jax.device_put(xb, NamedSharding(jm, P(None, *d))))
    # eagerly (Auto mode reads the layout of the concrete batched array), batch dimension in the middle
    xm = jax.device_put(np.moveaxis(B, 0, 1), NamedSharding(jm, P("x", None, "y")))
    ym = jax.vmap(lambda v: vj.reshard(v, dst), in_axes=1, out_axes=1)(xm)
    assert equivalent(ym, jax.device_put(xm, NamedSharding(jm, P("y", None, "x"))))
    # vmap of grad (Explicit mode: JAX wants jax.set_mesh where no argument names the devices)
    w = jax.device_put(np.ones(SHAPE, np.float32), dst)
    with jax.set_mesh(jm):
        gb = jax.jit(jax.vmap(jax.grad(lambda v: jnp.sum(vj.reshard(v, dst, **kw) * w))))(xb)
    np.testing.assert_array_equal(np.asarray(gb), np.ones_like(B))


def test_vmap_over_a_sharded_batch_dimension():
    B = np.random.default_rng(6).standard_normal((2, 4, 16)).astype(np.float32)
    # Explicit mode: the batch dimension keeps its mesh axis (as jax.sharding.reshard does); planned with it
    xb = jax.device_put(B, NamedSharding(EXPLICIT, P("x", None, "y")))
    f = jax.jit(jax.vmap(lambda v: vj.reshard(v, NamedSharding(EXPLICIT, P("y")))))
    yb = f(xb)
    assert equivalent(yb, jax.device_put(xb, NamedSharding(EXPLICIT, P("x", "y"))))
    assert "AllToAll" in str(f.trace(xb).jaxpr) or "AllPermute" in str(f.trace(xb).jaxpr)
    with pytest.raises(ShardingError, match="vmap: the batch dimension 0"):
        jax.jit(jax.vmap(lambda v: vj.reshard(v, NamedSharding(EXPLICIT, P("x")))))(xb)
    # Auto mode: spmd_axis_name names the batch dimension's axis
    xa = jax.device_put(B, NamedSharding(AUTO, P("x", None, "y")))
    g = jax.jit(jax.vmap(lambda v: vj.reshard(v, NamedSharding(AUTO, P("y")), src=P(None, "y")), spmd_axis_name="x"))
    assert equivalent(g(xa), jax.device_put(xa, NamedSharding(AUTO, P("x", "y"))))


def test_rank0_passes_through():
    x = jax.device_put(np.float32(3.0), NamedSharding(EXPLICIT, P()))
    dst = NamedSharding(EXPLICIT, P())
    assert vj.reshard(x, dst) is x
    assert float(jax.jit(lambda v: vj.reshard(v, dst))(x)) == 3.0
    with jax.set_mesh(EXPLICIT):
        assert float(jax.grad(lambda v: vj.reshard(v, dst) * 2)(x)) == 2.0
    with pytest.raises(ShardingError, match="rank 0"):
        vj.reshard(x, NamedSharding(EXPLICIT, P("x")))


def test_cache_hits_do_not_plan_or_compile_again(monkeypatch, data):
    calls = []
    real = vj.synthesize
    monkeypatch.setattr(vj, "synthesize", lambda *a: calls.append(a) or real(*a))
    vj.clear_cache()
    x = jax.device_put(data, NamedSharding(EXPLICIT, P("x", "y")))
    dst = NamedSharding(EXPLICIT, P("y", "x"))
    ys = [vj.reshard(x, dst) for _ in range(5)]
    assert len(calls) == 1 and vj.cache_info() == {"plans": 1, "executors": 1, "hits": 4, "misses": 1}
    fn = vj._EAGER[(x.shape, x.dtype, x.sharding, dst)]
    assert fn.jitted._cache_size() == 1  # traced and compiled once
    # another dtype: another executor, the same plan (cached)
    vj.reshard(x.astype(jnp.bfloat16), dst)
    assert len(calls) == 1 and vj.cache_info()["executors"] == 2
    # under jit, tracing plans (cached: no core call), running again does not trace again
    f = jax.jit(lambda v: vj.reshard(v, dst))
    f(x), f(x)
    assert len(calls) == 1 and f._cache_size() == 1
    # grad plans the reverse once
    with jax.set_mesh(EXPLICIT):
        g = jax.jit(jax.grad(lambda v: jnp.sum(vj.reshard(v, dst))))
        g(x), g(x)
    assert len(calls) == 2
    assert all(equivalent(y, jax.device_put(x, dst)) for y in ys)


def test_errors_are_clear(data):
    s = NamedSharding(EXPLICIT, P("x"))
    x = jax.device_put(data, s)
    # not a NamedSharding target
    with pytest.raises(ShardingError, match="NamedSharding.*not SingleDeviceSharding"):
        vj.reshard(x, jax.sharding.SingleDeviceSharding(jax.devices()[0]))
    # not a NamedSharding source
    with pytest.raises(ShardingError, match="SingleDeviceSharding.*jax.device_put"):
        vj.reshard(jax.device_put(data, jax.devices()[0]), s)
    # wrong mesh: other shape, other devices
    other = jax.make_mesh((4, 2), ("x", "y"))
    with pytest.raises(ShardingError, match=r"one JAX mesh; the array is on mesh \{x:2, y:4\}, the target on \{x:4"):
        vj.reshard(x, NamedSharding(other, P("y")))
    rev = jax.sharding.Mesh(np.array(jax.devices()[::-1]).reshape(2, 4), ("x", "y"),
                            axis_types=(AxisType.Explicit,) * 2)
    with pytest.raises(ShardingError, match="other devices"):
        vj.reshard(x, NamedSharding(rev, P("y")))
    with pytest.raises(ShardingError, match=r"axis types \(Explicit, Explicit\), the target's \(Auto, Auto\)"):
        vj.reshard(x, NamedSharding(AUTO, P("y")))
    mixed = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit, AxisType.Auto))
    with pytest.raises(ShardingError, match="mixes Auto and Explicit axes"):
        vj.reshard(jax.device_put(data, NamedSharding(mixed, P("x"))), NamedSharding(mixed, P("y")))
    # unknown axis (NamedSharding itself refuses one, so through a PartitionSpec)
    with jax.set_mesh(EXPLICIT):
        with pytest.raises(ShardingError, match="reshard target P\\('z',\\): unknown axis 'z'; the mesh has x, y"):
            vj.reshard(x, P("z"))
    with pytest.raises(ShardingError, match="unknown axis 'z'"):
        vj.reshard(jax.device_put(data, NamedSharding(AUTO, P("x"))), NamedSharding(AUTO, P("y")), src=P("z"))
    # src that is not how x is laid out
    with pytest.raises(ShardingError, match="not how the array is laid out"):
        vj.reshard(x, NamedSharding(EXPLICIT, P("y")), src=P("y"))
    with pytest.raises(ShardingError, match="not how the array is laid out"):
        jax.jit(lambda v: vj.reshard(v, NamedSharding(EXPLICIT, P("y")), src=P("y")))(x)
    # sizes that do not divide
    with pytest.raises(ShardingError, match="not divisible"):
        vj.reshard(jax.device_put(np.zeros((6, 4), np.float32), NamedSharding(EXPLICIT, P("x"))),
                   NamedSharding(EXPLICIT, P("y")))
    # inside shard_map
    f = jax.shard_map(lambda v: vj.reshard(v, NamedSharding(EXPLICIT, P())), mesh=EXPLICIT, in_specs=P("x"),
                      out_specs=P("x"))
    with pytest.raises(ShardingError, match="inside jax.shard_map"):
        jax.jit(f)(x)


def test_pytrees(data):
    x = jax.device_put(data, NamedSharding(EXPLICIT, P("x")))
    z = jax.device_put(data.T.copy(), NamedSharding(EXPLICIT, P(None, "y")))
    a, b = NamedSharding(EXPLICIT, P("y")), NamedSharding(EXPLICIT, P())
    out = vj.reshard({"x": x, "z": [z]}, {"x": a, "z": [b]})
    assert equivalent(out["x"], jax.device_put(x, a)) and equivalent(out["z"][0], jax.device_put(z, b))
    out = jax.jit(lambda t: vj.reshard(t, b))((x, z))
    assert equivalent(out[0], jax.device_put(x, b)) and equivalent(out[1], jax.device_put(z, b))
    with pytest.raises(ShardingError, match="does not match"):
        vj.reshard((x, z), (a,))
