"""verishard.jax.reshard / execute against jax.device_put."""

from __future__ import annotations

import pytest

from jax_devices import jax_or_skip

jax = jax_or_skip()

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
    """Collective instructions of a compiled HLO text, by opcode (an async pair counts once). Tuple
    shapes of six or more elements carry ``/*index=5*/`` comments, so the instruction is matched by its
    opcode right before ``(%``, on an instruction line."""
    names = ("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter")
    lines = [ln for ln in compiled_text.splitlines() if re.match(r"\s*(ROOT )?%\S+ = ", ln)]
    return {k: sum(1 for ln in lines if re.search(rf" {k}(?:-start)?\(%", ln)) for k in names}


def plan_collectives(p) -> dict[str, int]:
    from verishard.runtime.backend import step_call
    out = dict.fromkeys(("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter"), 0)
    kind = {"all_gather": "all-gather", "all_to_all": "all-to-all", "all_permute": "collective-permute",
            "all_reduce": "all-reduce"}
    if p.reduce == "sum":  # a max or min reduce-scatter is an all-reduce and a local slice
        kind["reduce_scatter"] = "reduce-scatter"
    t = p.src
    for s in p.steps:
        call = step_call(p.mesh, t, s.collective, p.reduce)
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
    # on CPU devices the eager call runs the plan on the host (no program); else compiled once
    assert fn.on_host if all(d.platform == "cpu" for d in x.sharding.mesh.devices.flat) \
        else fn.jitted._cache_size() == 1
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
    # sizes that do not divide: JAX's Explicit axes have no such sharding
    with pytest.raises(ShardingError, match=r"target P\('y',\) \(\[2\{y\}6, 4\]\) does not divide shape "
                                            r"\(6, 4\), and JAX's Explicit axes have no such sharding"):
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


# ---------------------------------------------------------------------------
# partial values: unreduced axes (a pending sum) and reshard_local (any reduction)

import random  # noqa: E402

import mpi_cases as mc  # noqa: E402
from verishard import AllReduce, ReduceScatter, ToPartial  # noqa: E402
from verishard.runtime import distribute, represented, split_partial  # noqa: E402

XYZ_EXPLICIT = vj.jax_mesh(XYZ, axis_types=AxisType.Explicit)
ALL = P(("x", "y", "z"))  # the stacked representation: device r holds row r (ranks are row-major over x, y, z)


def partial_pairs(reduce, n, seed):
    """``n`` pairs (of all those whose source or target is pending ``reduce``), drawn with ``seed``."""
    ts = mc.partial_types(XYZ, (4, 4), (reduce,))
    pairs = [(a, b) for a in ts for b in ts if a.partial or b.partial]
    random.Random(seed).shuffle(pairs)
    return pairs[:n], len(pairs)


def a_global(rng, dtype):
    return (rng.integers(-50, 50, (4, 4)) if np.dtype(dtype).kind == "i" else rng.standard_normal((4, 4))).astype(dtype)


def assert_represents(blocks, t, A, what):
    """The blocks (rank order) represent ``A`` under ``t``: float32 sums to rtol = atol = 1e-5
    (the order of the additions differs from numpy's), everything else exactly."""
    got, want = represented([np.asarray(b) for b in blocks], t), distribute(A, t.mesh, t.plain)
    for dev, (g, w) in enumerate(zip(got, want)):
        if A.dtype.kind == "f" and t.reduce == "sum":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"device {dev}: {what}")
        else:
            assert g.dtype == w.dtype and np.array_equal(g, w), f"device {dev}: {what}"


@pytest.mark.parametrize("reduce, n, check_vma", [("sum", 150, True), ("max", 40, False), ("min", 20, True)])
def test_partial_pairs_inside_shard_map(reduce, n, check_vma):
    """On {x:2, y:2, z:2}, global shape (4, 4): 80 types pending a sum (43 of them partial), 5031 pairs
    whose source or target is pending; 150 of them drawn with seed 0 (and 40 of the 5031 max pairs,
    20 of the min pairs), half float32, half int32. Every device's term comes from split_partial (a
    random representation of a random array); reshard_local runs the verified plan on it inside
    one jitted shard_map per reduction (psum / pmax / pmin, psum_scatter, ...); every device's output
    block must represent the same array (represented / distribute in numpy)."""
    pairs, total = partial_pairs(reduce, n, seed=0)
    assert total == 5031 and len(pairs) == n
    rng = np.random.default_rng(1)
    plans, inputs, arrays = [], [], []
    for i, (a, b) in enumerate(pairs):
        p = verishard.plan(XYZ, a, b)
        assert p.reduce == reduce
        A = a_global(rng, np.int32 if i % 2 else np.float32)
        blocks = split_partial(A, XYZ, p.src, rng)
        plans.append(p)
        arrays.append(A)
        inputs.append(jax.device_put(np.stack(blocks), NamedSharding(JM, ALL)))

    def body(*xs):
        return tuple(vj.reshard_local(x[0], p)[None] for p, x in zip(plans, xs))

    outs = jax.jit(jax.shard_map(body, mesh=JM, in_specs=ALL, out_specs=ALL, check_vma=check_vma))(*inputs)
    kinds = set()
    for p, A, y in zip(plans, arrays, outs):
        assert y.shape == (8, *p.dst.local_shape) and y.dtype == A.dtype
        assert_represents(list(np.asarray(y)), p.dst, A, str(p))
        kinds |= {type(c) for c in p.collectives}
    assert {AllReduce, ReduceScatter, ToPartial} <= kinds   # every partial collective ran


def test_reshard_local_forms_and_errors():
    A = np.arange(16, dtype=np.float32).reshape(4, 4)
    rng = np.random.default_rng(2)
    src, dst = ArrayType.parse("[4, 4] partial{x}", XYZ), ArrayType.parse("[2{x}4, 4]", XYZ)
    blocks = jax.device_put(np.stack(split_partial(A, XYZ, src, rng)), NamedSharding(JM, ALL))
    p = verishard.plan(XYZ, src, dst)
    # a plan; a mesh (ours, its text, a JAX mesh) with types, their text or PartitionSpecs
    forms = [(p,), (XYZ, src, dst), ("x=2,y=2,z=2", "[4, 4] partial{x}", "[2{x}4, 4]"),
             (JM, P(unreduced={"x"}), P("x"))]
    for form in forms:
        f = jax.shard_map(lambda v, form=form: vj.reshard_local(v[0], *form)[None], mesh=JM, in_specs=ALL,
                          out_specs=ALL)
        assert_represents(list(np.asarray(f(blocks))), dst, A, str(form))
    # "P(None)" has no pending axes: the plan [4, 4] -> [2{x}4, 4] keeps each device's half (by its x)
    f = jax.shard_map(lambda v: vj.reshard_local(v[0], XYZ, "P(None)", "P('x')")[None], mesh=JM, in_specs=ALL,
                      out_specs=ALL)
    terms = np.asarray(blocks)
    np.testing.assert_array_equal(np.asarray(f(blocks)), np.stack([terms[r, 2 * (r // 4):2 * (r // 4) + 2]
                                                                  for r in range(8)]))
    # outside shard_map, a block of the wrong shape, a plan over a split axis in a whole-axis shard_map
    with pytest.raises(ShardingError, match="inside jax.shard_map"):
        vj.reshard_local(jnp.zeros((4, 4)), p)
    with pytest.raises(ShardingError, match=r"block has shape \(2, 4\)"):
        jax.shard_map(lambda v: vj.reshard_local(v[0, :2], p)[None], mesh=JM, in_specs=ALL, out_specs=ALL)(blocks)
    with pytest.raises(verishard.VerishardError, match="not both"):
        vj.reshard_local(jnp.zeros((4, 4)), p, src)
    split = verishard.check("x=2,y=2*2", "[8] partial{y}", "[4{y.0}8] partial{y.1}", [ReduceScatter(0, "y.0")])
    jm = jax.make_mesh((2, 4), ("x", "y"))
    with pytest.raises(ShardingError, match=r"y\.0 \(size 2\).*jax_mesh\(plan.mesh\)"):
        jax.shard_map(lambda v: vj.reshard_local(v, split), mesh=jm, in_specs=P(), out_specs=P(),
                      check_vma=False)(jnp.zeros(8))
    # ... which runs over the mesh of parts
    pm = vj.jax_mesh(split.mesh)
    A8 = np.arange(8, dtype=np.float32)
    terms = jax.device_put(np.stack(split_partial(A8, split.mesh, split.src, rng)),
                           NamedSharding(pm, P(("x", "y.0", "y.1"))))
    out = jax.shard_map(lambda v: vj.reshard_local(v[0], split)[None], mesh=pm, in_specs=P(("x", "y.0", "y.1")),
                        out_specs=P(("x", "y.0", "y.1")))(terms)
    assert_represents(list(np.asarray(out)), split.dst, A8, "split")


def unreduced_array(A, t, rng, jm=XYZ_EXPLICIT):
    """A jax.Array laid out as ``t`` on ``jm`` (Explicit axes): pending axes unreduced, each device
    holding its term from split_partial (jax.device_put cannot build unreduced arrays)."""
    blocks = split_partial(A, vj.mesh_from_jax(jm), t, rng)
    sh = vj.to_named_sharding(t, jm)
    return jax.make_array_from_single_device_arrays(
        A.shape, sh, [jax.device_put(b, d) for b, d in zip(blocks, sh.mesh.devices.flat)])


def blocks_of(y):
    """Every device's block of ``y``, in rank order (the mesh's device order)."""
    by_id = {s.device.id: np.asarray(s.data) for s in y.addressable_shards}
    return [by_id[d.id] for d in y.sharding.mesh.devices.flat]


def test_reshard_unreduced_arrays_eagerly_and_under_jit():
    """reshard takes and returns arrays with unreduced axes (JAX 0.10.2 builds them on Explicit
    axes): 30 pairs of the 5031 (seed 3), eagerly (and every fifth under jax.jit), each checked on
    every device; the result's sharding is the target's, unreduced axes included."""
    pairs, _ = partial_pairs("sum", 30, seed=3)
    rng = np.random.default_rng(4)
    for i, (a, b) in enumerate(pairs):
        A = a_global(rng, np.int32 if i % 2 else np.float32)
        x = unreduced_array(A, a, rng)
        dst = vj.to_named_sharding(b, XYZ_EXPLICIT)
        assert x.sharding.spec.unreduced == frozenset(XYZ.names(a.partial))
        for y in (vj.reshard(x, dst), jax.jit(lambda v, dst=dst: vj.reshard(v, dst))(x) if i % 5 == 0 else None):
            if y is None:
                continue
            assert y.sharding.spec.unreduced == dst.spec.unreduced
            assert vj.from_named_sharding(y.sharding, y.shape).refined() == b.refined(), (str(a), str(b))
            assert_represents(blocks_of(y), b, A, f"{a} -> {b}")


def test_reshard_of_unreduced_uses_psum_scatter_under_jit():
    """[4, 4] partial{x} -> [2{x}4, 4] is one ReduceScatter: under jax.jit the compiled HLO (XLA's CPU
    backend) holds exactly one reduce-scatter (lax.psum_scatter) and no other collective, both through
    reshard on an unreduced array and through reshard_local inside a shard_map."""
    p = verishard.plan(XYZ, "[4, 4] partial{x}", "[2{x}4, 4]")
    assert p.collectives == (ReduceScatter(0, ("x",)),)
    want = dict.fromkeys(("all-gather", "all-to-all", "collective-permute", "all-reduce"), 0) | {"reduce-scatter": 1}
    assert plan_collectives(p) == want
    A = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = unreduced_array(A, p.src, np.random.default_rng(5))
    f = jax.jit(lambda v: vj.reshard(v, NamedSharding(XYZ_EXPLICIT, P("x"))))
    assert collectives(f.lower(x).compile().as_text()) == want
    np.testing.assert_allclose(np.asarray(f(x)), A, rtol=1e-5, atol=1e-5)
    g = jax.jit(jax.shard_map(lambda v: vj.reshard_local(v[0], p)[None], mesh=JM, in_specs=ALL, out_specs=ALL))
    assert collectives(g.lower(jnp.zeros((8, 4, 4), jnp.float32)).compile().as_text()) == want
    # JAX's own pending sum: a product over a sharded contraction with an unreduced out_sharding
    a = jax.device_put(A, NamedSharding(XYZ_EXPLICIT, P(None, "x")))
    b = jax.device_put(np.eye(4, dtype=np.float32), NamedSharding(XYZ_EXPLICIT, P("x")))
    with jax.set_mesh(XYZ_EXPLICIT):
        k = jax.jit(lambda u, v: vj.reshard(jnp.dot(u, v, out_sharding=P(None, None, unreduced={"x"})), P("x")))
        assert collectives(k.lower(a, b).compile().as_text()) == want
        np.testing.assert_allclose(np.asarray(k(a, b)), A, rtol=1e-5, atol=1e-5)
    # an all-reduce: [4, 4] partial{x} -> [4, 4]
    q = verishard.plan(XYZ, "[4, 4] partial{x}", "[4, 4]")
    h = jax.jit(lambda v: vj.reshard(v, NamedSharding(XYZ_EXPLICIT, P())))
    assert collectives(h.lower(x).compile().as_text()) == plan_collectives(q) == want | {"reduce-scatter": 0,
                                                                                          "all-reduce": 1}


def test_unreduced_with_execute_vmap_jvp_and_split_axes():
    rng = np.random.default_rng(6)
    A = rng.standard_normal((4, 4)).astype(np.float32)
    src = ArrayType.parse("[4, 2{y}4] partial{x,z}", XYZ)
    x = unreduced_array(A, src, rng)
    # runtime execute on the array
    p = verishard.plan(XYZ, src, "[2{z}4, 2{x}4]")
    assert_represents(blocks_of(vj.execute(p, x)), p.dst, A, str(p))
    with pytest.raises(ShardingError, match="unreduced axes"):
        vj.execute(verishard.plan(XYZ, "[4, 2{y}4] partial{x}", "[4, 4]"), x)
    # jvp: the tangent is redistributed the same way
    dst = NamedSharding(XYZ_EXPLICIT, P("z", "x"))
    y, ty = jax.jvp(lambda v: vj.reshard(v, dst), (x,), (x,))
    assert_represents(blocks_of(y), p.dst, A, "jvp primal")
    assert_represents(blocks_of(ty), p.dst, A, "jvp tangent")
    # vmap: the batched problem keeps the pending axes (a target's: JAX 0.10.2's vmap itself refuses an
    # input with unreduced axes, indexing its PartitionSpec before any primitive runs)
    B = np.stack([A, 2 * A])
    xb = jax.device_put(B, NamedSharding(XYZ_EXPLICIT, P(None, None, "y")))
    yb = jax.jit(jax.vmap(lambda v: vj.reshard(v, NamedSharding(XYZ_EXPLICIT, P("z", unreduced={"x"})))))(xb)
    assert yb.sharding.spec == P(None, "z", None, unreduced={"x"})
    assert_represents(blocks_of(yb), ArrayType.parse("[2, 2{z}4, 4] partial{x}", XYZ), B, "vmap")
    # a mesh whose axis of size 4 the plan splits (y.0, y.1), both ways: the arrays stay on the user's mesh
    jm = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    m24 = vj.mesh_from_jax(jm)
    C = rng.standard_normal((8, 8)).astype(np.float32)
    src, dst = ArrayType.parse("[4{x}8, 8] partial{y}", m24), ArrayType.parse("[2{y}8, 4{x}8]", m24)
    assert verishard.plan(m24, src, dst).mesh == Mesh.parse("x=2,y=2*2")
    u = unreduced_array(C, src, rng, jm)
    for fn in (vj.reshard, jax.jit(vj.reshard, static_argnums=1)):
        z = fn(u, NamedSharding(jm, P("y", "x")))
        assert z.sharding == NamedSharding(jm, P("y", "x"))
        np.testing.assert_allclose(np.asarray(z), C, rtol=1e-5, atol=1e-5)
        back = fn(z, NamedSharding(jm, P("x", unreduced={"y"})))
        assert vj.from_named_sharding(back.sharding, (8, 8)) == src   # P("x", unreduced={"y"}), however spelled
        assert_represents(blocks_of(back), src, C, "split, back")
    # execute runs the split plan on the mesh of parts (Explicit axes, as the user's)
    z = vj.execute(verishard.plan(m24, src, dst), u)
    assert z.sharding.mesh.axis_names == ("x", "y.0", "y.1") and set(z.sharding.mesh.axis_types) == {AxisType.Explicit}
    np.testing.assert_allclose(np.asarray(z), C, rtol=1e-5, atol=1e-5)


def test_unreduced_errors_are_clear():
    A = np.ones((4, 4), np.float32)
    x = unreduced_array(A, ArrayType.parse("[4, 4] partial{x}", XYZ), np.random.default_rng(7))
    with jax.set_mesh(XYZ_EXPLICIT):
        with pytest.raises(ShardingError, match="jax.grad / jax.vjp through reshard"):
            jax.grad(lambda v: jnp.sum(vj.reshard(v, NamedSharding(XYZ_EXPLICIT, P()))))(x)
    # Auto axes: JAX has no unreduced arrays there; a src= naming them is refused, pointing to reshard_local
    auto = jax.device_put(A, NamedSharding(JM, P()))
    with pytest.raises(ShardingError, match="AxisType.Explicit.*reshard_local"):
        jax.jit(lambda v: vj.reshard(v, NamedSharding(JM, P("x")), src=P(unreduced={"x"})))(auto)
    with pytest.raises(ShardingError, match="must be AxisType.Explicit"):
        vj.to_named_sharding(ArrayType.parse("[4, 4] partial{x}", XYZ), JM)
    with pytest.raises(ShardingError, match="rank-0"):
        vj.reshard(jax.device_put(np.float32(1), NamedSharding(XYZ_EXPLICIT, P())),
                   NamedSharding(XYZ_EXPLICIT, P(unreduced={"x"})))


# ---------------------------------------------------------------------------
# uneven shapes (a size the sharding does not divide): JAX has them inside jax.jit on Auto axes only

from jax import lax  # noqa: E402

from verishard.crosscheck.harness import all_types as every_type  # noqa: E402
from verishard.jax.backend import padded_global_shape  # noqa: E402
from verishard.runtime.uneven import distribute_padded  # noqa: E402

AUTO_222 = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AxisType.Auto,) * 3)
UNEVEN_GRID = [(AUTO, (5, 7), 14), (AUTO, (3, 6), 10), (AUTO, (9,), 8), (AUTO_222, (5, 7), 12),
               (AUTO_222, (3, 6), 8), (AUTO_222, (9,), 6)]


def uneven_pairs(jm, shape, n, seed=0):
    """``n`` pairs of PartitionSpecs on ``shape`` (a deterministic sample), at least one side uneven."""
    m = vj.mesh_from_jax(jm)
    ts = every_type(m, shape, uneven=True)
    pairs = [(a, b) for a in ts for b in ts if a.uneven or b.uneven]
    random.Random(seed).shuffle(pairs)
    return [(vj.to_partition_spec(a), vj.to_partition_spec(b), verishard.plan(m, a, b)) for a, b in pairs[:n]]


def uneven_program(jm, s, d, shape, ours: bool):
    """From the padded global source (an even array, which JAX accepts at a jit's boundary) to the padded
    global target: cut to ``shape``, constrain to ``s`` (uneven), reshard to ``d`` (ours, or XLA's
    with_sharding_constraint), pad. The cut and the pad are local, so the program's collectives are the
    reshard's."""
    pad_to = padded_global_shape(vj.from_partition_spec(vj.mesh_from_jax(jm), shape, d))

    def f(v):
        u = lax.with_sharding_constraint(lax.slice(v, (0,) * v.ndim, shape), NamedSharding(jm, s))
        dst = NamedSharding(jm, d)
        y = vj.reshard(u, dst, src=s) if ours else lax.with_sharding_constraint(u, dst)
        return jnp.pad(y, [(0, a - g) for a, g in zip(pad_to, shape)])
    return jax.jit(f, out_shardings=NamedSharding(jm, d))


def padded_input(A, jm, spec):
    Ap = np.full(padded_global_shape(vj.from_partition_spec(vj.mesh_from_jax(jm), A.shape, spec)), np.nan, A.dtype)
    Ap[tuple(slice(0, g) for g in A.shape)] = A   # NaN padding: any of it in a valid position shows
    return jax.device_put(Ap, NamedSharding(jm, spec))


def test_jax_refuses_uneven_arrays_outside_jit():
    """Why the uneven tests compare with with_sharding_constraint under jit, not jax.device_put."""
    with pytest.raises(ValueError, match="evenly divide"):
        jax.device_put(np.zeros((5, 7), np.float32), NamedSharding(AUTO, P("x", "y")))
    with pytest.raises(ValueError, match="evenly divide"):
        jax.jit(lambda: jnp.zeros((5, 7)), out_shardings=NamedSharding(AUTO, P("x")))()


@pytest.mark.parametrize("jm, shape, n", UNEVEN_GRID,
                         ids=[f"{'x'.join(map(str, jm.axis_sizes))}-{'x'.join(map(str, s))}" for jm, s, _ in UNEVEN_GRID])
def test_uneven_pairs_under_jit_equal_xla_and_run_only_the_plan(jm, shape, n):
    A = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape)
    valid = tuple(slice(0, g) for g in shape)
    for s, d, p in uneven_pairs(jm, shape, n):
        x = padded_input(A, jm, s)
        ours, ref = uneven_program(jm, s, d, shape, True), uneven_program(jm, s, d, shape, False)
        y, r = ours(x), ref(x)
        assert y.sharding == r.sharding == NamedSharding(jm, d), (s, d)
        assert np.array_equal(np.asarray(y)[valid], A), (s, d, p)
        # every device holds what XLA's own reshard leaves there (its block, zeros past the array)
        assert same(y, r), (s, d, p)
        # the compiled program's collectives are the plan's communicating steps: the global pad before the
        # plan's shard_map and the cut after it add none
        assert collectives(ours.lower(x).compile().as_text()) == plan_collectives(p), (s, d, p)


def test_uneven_grad_jvp_and_vmap_under_jit():
    jm, s, d = AUTO, P("x", "y"), P("y", "x")
    A = np.random.default_rng(11).standard_normal((5, 7)).astype(np.float32)
    w = np.cos(np.arange(35, dtype=np.float32)).reshape(5, 7)
    x = jax.device_put(A, NamedSharding(jm, P()))

    def f(v, ours=True):
        u = lax.with_sharding_constraint(v, NamedSharding(jm, s))
        dst = NamedSharding(jm, d)
        return vj.reshard(u, dst, src=s) if ours else lax.with_sharding_constraint(u, dst)
    g = jax.jit(jax.grad(lambda v: jnp.sum(jnp.sin(f(v)) * w)))(x)
    g_ref = jax.jit(jax.grad(lambda v: jnp.sum(jnp.sin(f(v, False)) * w)))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(g), np.cos(A) * w, rtol=1e-5, atol=1e-6)
    # the transpose is the reverse plan, planned by the core
    inner = [e for e in jax.make_jaxpr(jax.grad(lambda v: jnp.sum(f(v))))(x).jaxpr.eqns if e.primitive.name == "jit"]
    rs = [e.params["r"] for q in inner for e in q.params["jaxpr"].eqns if e.primitive is vj.reshard_p]
    assert [(str(r.src), str(r.dst)) for r in rs] == [("[3{x}5, 2{y}7]", "[2{y}5, 4{x}7]"),
                                                        ("[2{y}5, 4{x}7]", "[3{x}5, 2{y}7]")]
    y, t = jax.jit(lambda v: jax.jvp(f, (v,), (2 * v,)))(x)
    assert np.array_equal(np.asarray(y), A) and np.array_equal(np.asarray(t), 2 * A)
    B = np.stack([A, -A, 2 * A])
    yb = jax.jit(jax.vmap(f))(jax.device_put(B, NamedSharding(jm, P())))
    assert np.array_equal(np.asarray(yb), B)


def test_uneven_refusals_are_clear():
    x = jax.device_put(np.zeros((6, 4), np.float32), NamedSharding(AUTO, P("x")))
    with pytest.raises(ShardingError, match=r"target P\('y',\) \(\[2\{y\}6, 4\]\) does not divide shape \(6, 4\), "
                                            r"and outside jax.jit JAX holds no such array"):
        vj.reshard(x, NamedSharding(AUTO, P("y")))
    with pytest.raises(ShardingError, match="outside jax.jit"):   # under an eager grad too
        jax.grad(lambda v: jnp.sum(vj.reshard(v, NamedSharding(AUTO, P("y")))))(x)
    with pytest.raises(ShardingError, match="Explicit axes have no such sharding"):
        jax.jit(lambda v: vj.reshard(v, NamedSharding(EXPLICIT, P("y"))))(
            jax.device_put(np.zeros((6, 4), np.float32), NamedSharding(EXPLICIT, P("x"))))


def test_reshard_local_and_execute_on_padded_buffers():
    m = Mesh.parse("x=2,y=4")
    jm = vj.jax_mesh(m)
    A = np.arange(35, dtype=np.float32).reshape(5, 7)
    for a, b in (("[3{x}5, 2{y}7]", "[2{y}5, 4{x}7]"), ("[5, 1{x,y}7]", "[3{x}5, 7]"), ("[2{y}5, 7]", "[5, 7]")):
        p = verishard.plan(m, a, b)
        ins, outs = vj.to_partition_spec(p.src, parts=True), vj.to_partition_spec(p.dst, parts=True)
        pm = vj.jax_mesh(p.mesh)
        # reshard_local inside a shard_map of our own, on padded blocks (the plan's mesh may split y)
        blocks = distribute_padded(A, p.mesh, p.src, pad=np.nan)
        stacked = jax.device_put(np.stack(blocks), NamedSharding(pm, P(tuple(pm.axis_names))))
        f = jax.jit(jax.shard_map(lambda v: vj.reshard_local(v[0], p)[None], mesh=pm, in_specs=P(tuple(pm.axis_names)),
                                  out_specs=P(tuple(pm.axis_names)), check_vma=False))
        got = np.asarray(f(stacked))
        for r in range(m.num_devices):
            box = tuple(slice(st, st + v) for st, v in zip(p.dst.block_starts(r), p.dst.valid_shape(r)))
            assert np.array_equal(got[r][tuple(slice(0, v) for v in p.dst.valid_shape(r))], A[box]), (a, b, r)
        # execute: the padded global arrays in and out
        Ap = np.zeros(padded_global_shape(p.src), np.float32)
        Ap[:5, :7] = A
        y = vj.execute(p, jax.device_put(Ap, NamedSharding(pm, ins)))
        assert y.shape == padded_global_shape(p.dst) and y.sharding.spec == outs
        assert np.array_equal(np.asarray(y)[:5, :7], A)
    with pytest.raises(ShardingError, match=r"pass the array padded at the end of every dimension to \(6, 8\)"):
        vj.execute(verishard.plan(m, "[3{x}5, 2{y}7]", "[5, 7]"), jax.device_put(A, NamedSharding(jm, P())))


def entry_opcodes(compiled_text: str) -> list[str]:
    """The opcodes of the top-level instructions of a compiled program's entry computation
    (parameters, tuple plumbing and bitcasts left out)."""
    body = compiled_text[compiled_text.index("\nENTRY"):].splitlines()[1:]
    ops = [m.group(1) for ln in body if (m := re.match(r"\s*(?:ROOT )?%\S+ = .*? ([\w-]+)\(%", ln))]
    return [op for op in ops if op not in ("parameter", "get-tuple-element", "tuple", "bitcast")]


def test_one_collective_plans_compile_to_no_more_than_xla_runs():
    """The lowering of each step adds no pass over the block around its collective (bench/jax_timing.py):
    an all-to-all exchanges over a new axis, so no concatenation follows it; a permute keeps the fixed
    ranks inside its collective-permute (pairs (c, c)), so no select follows it; an all-gather along an
    inner dimension gathers along a new leading one, where XLA's own program transposes the operand and
    the result around an inner-dimension all-gather. Each program has no more top-level instructions than
    XLA's own reshard of the pair, and the same result."""
    mesh = jax.make_mesh((2, 2, 2), ("x", "y", "z"), axis_types=(AxisType.Explicit,) * 3)
    A = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    for s, d, kind in ((P(("x", "y", "z")), P(None, ("x", "y", "z")), "all-to-all"),
                       (P("x", "y"), P("y", "x"), "collective-permute"),
                       (P(None, "x"), P(), "all-gather")):
        x = jax.device_put(A, NamedSharding(mesh, s))
        dst = NamedSharding(mesh, d)
        p = a_plan(mesh, s, d, A.shape)
        assert len(p.collectives) == 1, p.collectives
        fn, _ = vj.compile_plan(p, mesh)
        ours = fn.lower(x).compile().as_text()
        xla = jax.jit(lambda v: jax.sharding.reshard(v, dst)).lower(x).compile().as_text()
        assert collectives(ours)[kind] == 1 == sum(collectives(ours).values()), (s, d)
        got, want = entry_opcodes(ours), entry_opcodes(xla)
        assert "concatenate" not in got and "select" not in ours and len(got) <= len(want), (s, d, got, want)
        if kind == "all-gather":
            assert re.search(r" all-gather\(%.*dimensions=\{0\}", ours), ours
        assert equivalent(vj.reshard(x, dst), jax.device_put(x, dst)), (s, d)


def test_plan_for_is_the_plan_reshard_runs():
    """plan_for(x, sharding) gives the plan without running it; reshard with that plan is the same."""
    x = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8), NamedSharding(JM, P("x", ("y", "z"))))
    dst = NamedSharding(JM, P(("z", "y"), None))
    p = vj.plan_for(x, dst)
    assert (str(p.src), str(p.dst)) == ("[4{x}8, 2{y,z}8]", "[2{z,y}8, 8]") and p.collectives
    assert p == verishard.plan(XYZ, p.src, p.dst)
    assert same(vj.reshard(x, dst, plan=p), jax.device_put(x, dst))
    assert vj.plan_for(jax.device_put(np.float32(1), NamedSharding(JM, P())), NamedSharding(JM, P())) is None
    # under a trace, with src (Auto axes carry no sharding in the type)
    seen = []
    jax.jit(lambda v: seen.append(vj.plan_for(v, dst, src=x.sharding)) or v)(x)
    assert seen == [p]
    with pytest.raises(ShardingError, match="has 3 entries but the array has rank 2"):  # reshard's own error
        vj.plan_for(x, NamedSharding(JM, P(None, None, "x")))


@pytest.mark.parametrize("src,dst", [(P("x", "y"), P("y", "x")), (P("x"), P()), (P("x", "y"), P("x", ("y", "z")))])
def test_donate_hands_the_source_over(src, dst):
    """donate=True: the result is right and the source is deleted when the call returns (cached and not):
    aliased by XLA where the local shapes agree, deleted after the call where they do not."""
    A = np.arange(64, dtype=np.float32).reshape(8, 8)
    target = NamedSharding(JM, dst)
    for _ in range(2):  # the second call takes the cached executor
        x = jax.device_put(A, NamedSharding(JM, src))
        y = vj.reshard(x, target, donate=True)
        assert x.is_deleted() and np.array_equal(np.asarray(y), A) and y.sharding == target
    x = jax.device_put(A, NamedSharding(JM, src))
    assert not vj.reshard(x, target).is_deleted() and not x.is_deleted()  # donation is opt-in
    with pytest.raises(ShardingError, match="donate_argnums"):
        jax.jit(lambda v: vj.reshard(v, target, donate=True, src=NamedSharding(JM, src)))(x)
