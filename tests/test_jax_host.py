"""The eager path on CPU devices: the plan's steps on the host
(``HostBackend``, ``host_executor``), step for step the simulator's data
movement, whose every step ``simulate`` checks against the verified rules."""

from __future__ import annotations

import itertools

import pytest

from jax_devices import jax_or_skip

jax = jax_or_skip()

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import verishard  # noqa: E402
import verishard.jax as vj  # noqa: E402
from verishard import Mesh  # noqa: E402
from verishard.crosscheck.harness import all_types  # noqa: E402
from verishard.runtime import distribute, simulate  # noqa: E402
from verishard.runtime.backend import execute  # noqa: E402
from verishard.jax.backend import host_executor, host_runs  # noqa: E402
from verishard.runtime.simulator import HostBackend, SimBackend  # noqa: E402

MESH = Mesh.parse("x=2,y=2,z=2")
JM = vj.jax_mesh(MESH)


def pairs(shape, step=1):
    ts = all_types(MESH, shape)
    return list(itertools.product(ts, ts))[::step]


@pytest.mark.parametrize("shape", [(4, 8), (2, 4, 8)])
def test_host_backend_moves_what_the_simulator_moves(shape):
    """After every step of every plan, each device's block from HostBackend
    equals the simulator's (which ``simulate`` checks against the verified
    rules: ``Semantics.movement_correct``, shapes, bytes)."""
    A = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    n = 0
    for s, d in pairs(shape, 1 if len(shape) == 2 else 7):
        p = verishard.plan(MESH, s, d)
        runs = []
        for backend in (SimBackend(MESH.num_devices), HostBackend(MESH.num_devices)):
            steps = []
            execute(p, distribute(A, MESH, s), backend,
                    on_step=lambda i, step, t, ys: steps.append([np.array(y) for y in ys]))
            runs.append(steps)
        sim, host = runs
        assert len(host) == len(sim) == len(p.steps)
        for a, b in zip(sim, host):
            assert all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))
        final = host[-1] if host else distribute(A, MESH, s)
        assert all(np.array_equal(x, y) for x, y in zip(final, simulate(p, distribute(A, MESH, s)).outputs))
        n += 1
    assert n > 10


def test_host_executor_against_device_put():
    """Every pair of even types of a rank-2 array on (2,2,2): the host
    executor's result has device_put's sharding and blocks; the source is
    left intact."""
    rng = np.random.default_rng(0)
    bad = []
    for s, d in pairs((4, 8)):
        p = verishard.plan(MESH, s, d)
        in_sh, out_sh = vj.to_named_sharding(s, JM), vj.to_named_sharding(d, JM)
        assert host_runs(p, JM)
        A = rng.standard_normal((4, 8)).astype(np.float32)
        x = jax.device_put(A, in_sh)
        y = host_executor(p, in_sh, out_sh)(x)
        ref = jax.device_put(x, out_sh)
        blocks = {sh.device: np.asarray(sh.data) for sh in ref.addressable_shards}
        if y.sharding != out_sh or not all(np.array_equal(np.asarray(sh.data), blocks[sh.device])
                                           for sh in y.addressable_shards) or not np.array_equal(np.asarray(x), A):
            bad.append((str(s), str(d)))
    assert not bad, bad


def test_eager_reshard_on_cpu_runs_on_the_host_and_survives_the_source():
    """The cached eager call on CPU devices runs no program; its result stays
    right after the source is deleted (donated or not) and its memory reused."""
    jm = jax.make_mesh((2, 4), ("x", "y"))
    for donate in (False, True):
        for a, b in [(P(), P("x")), (P("x", None), P(None, "x")), (P("x"), P()), (P("x", "y"), P("y", "x"))]:
            A = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
            x = jax.device_put(A, NamedSharding(jm, a))
            y = vj.reshard(x, NamedSharding(jm, b), donate=donate)
            assert vj._EAGER[(x.shape, x.dtype, x.sharding, NamedSharding(jm, b))].on_host
            assert x.is_deleted() == donate
            if not donate:
                x.delete()
            del x
            junk = [jax.device_put(np.full((16, 8), 7.0, np.float32), NamedSharding(jm, a)) for _ in range(8)]
            assert np.array_equal(np.asarray(y), A) and len(junk) == 8
            assert all(np.array_equal(np.asarray(sh.data), A[sh.index]) for sh in y.addressable_shards)


def test_host_runs_only_even_types_with_nothing_pending():
    m = Mesh.parse("x=2")
    jm = vj.jax_mesh(m)
    assert host_runs(verishard.plan(m, "[2{x}4]", "[4]"), jm)
    assert not host_runs(verishard.plan(m, "[2{x}3]", "[3]"), jm)
    assert not host_runs(verishard.plan(m, "[4] partial{x}", "[2{x}4]"), jm)


def test_host_executor_on_plans_over_split_axes():
    """On (2, 4) plans may run over the parts y.0, y.1 of y (ranks unchanged):
    every pair of rank-2 types, against device_put, with at least one such plan."""
    m = Mesh.parse("x=2,y=4")
    jm = vj.jax_mesh(m)
    A = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    split = 0
    for s, d in itertools.product(all_types(m, A.shape), repeat=2):
        p = verishard.plan(m, s, d)
        split += len(p.mesh.parts) > len(p.mesh.axes)
        in_sh, out_sh = vj.to_named_sharding(s, jm), vj.to_named_sharding(d, jm)
        y = host_executor(p, in_sh, out_sh)(jax.device_put(A, in_sh))
        assert y.sharding == out_sh and np.array_equal(np.asarray(y), A), (s, d)
        assert all(np.array_equal(np.asarray(sh.data), A[sh.index]) for sh in y.addressable_shards), (s, d)
    assert split > 0


def test_a_deleted_array_is_refused_with_the_projects_error():
    from verishard.errors import ShardingError
    jm = jax.make_mesh((2, 4), ("x", "y"))
    target = NamedSharding(jm, P())
    for cached in (False, True):
        vj.clear_cache()
        x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(jm, P("x")))
        if cached:
            vj.reshard(x, target)
        vj.reshard(x, target, donate=True)
        with pytest.raises(ShardingError, match="deleted"):
            vj.reshard(x, target)
