"""Chunked execution (verishard.runtime.chunked, Coq: Chunk.v / Chunkproof.v):
bit-identical to the unchunked plan and to numpy on the simulator (hypothesis,
many plans), MPI (8 ranks, tests/chunk_job.py) and JAX (8 CPU devices), with
the runtime's held-bytes accounting within the refined bound it reports."""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import mpi_cases as mc  # noqa: E402

import verishard  # noqa: E402
from verishard import Mesh  # noqa: E402
from verishard.runtime import assemble, distribute, simulate  # noqa: E402
from verishard.runtime.chunked import (ChunkReport, chunk_geometry, choose_k, default_budget,  # noqa: E402
                                       lazy_empty, release_rows)
from verishard.runtime.layout import same_bytes  # noqa: E402

BENCH = [("x=2,y=2,z=2", "[8{x,y,z}64, 64]", "[64, 8{x,y,z}64]"),
         ("x=2,y=2,z=2", "[16{x,y}64, 32{z}64]", "[32{z}64, 16{x,y}64]"),
         ("x=2,y=2,z=2", "[32{x}64, 32{y}64]", "[32{y}64, 32{x}64]"),
         ("x=4,y=2", "[16{x}64, 64]", "[32{y}64, 64]")]
MESHES = ["x=2", "x=4", "x=2,y=2", "x=2,y=3", "x=2*2,y=2", "x=2,y=2,z=2", "x=4,y=2", "x=3,y=2"]


def check_report(rep: ChunkReport) -> None:
    for s in rep.steps:
        assert s.held <= s.refined, s
        if s.k > 1:
            assert s.R % s.k == 0
            assert s.refined <= max(s.in_bytes, s.out_bytes) + (2 * rep.bound + rep.bound) // s.k


def run_both(plan, A, **how):
    base = simulate(plan, distribute(A, plan.mesh, plan.src))
    res = simulate(plan, distribute(A, plan.mesh, plan.src), **how)
    assert all(same_bytes(a, b) for a, b in zip(res.outputs, base.outputs))
    assert same_bytes(assemble(res.outputs, plan.mesh, plan.dst), A)
    assert res.received_bytes.tolist() == base.received_bytes.tolist()
    check_report(res.chunking)
    assert int(res.peak_bytes.max()) <= res.chunking.refined
    return res


@pytest.mark.parametrize("case", BENCH)
@pytest.mark.parametrize("k", [2, 4, 8])
def test_bench_cases_in_pieces(case, k):
    plan = verishard.plan(*case)
    res = run_both(plan, np.arange(64 * 64, dtype=np.float32).reshape(64, 64), chunks=k)
    assert max(res.chunking.ks) > 1


def test_refined_bound_shrinks_with_k():
    plan = verishard.plan(*BENCH[0])
    A = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    peaks = [int(run_both(plan, A, chunks=k).peak_bytes.max()) for k in (1, 2, 4, 8)]
    bound = plan.peak * 4
    assert peaks == sorted(peaks, reverse=True) and peaks[0] == 2 * bound
    assert peaks[-1] <= bound + 2 * bound // 8   # max(in, out) + (min + out) / k


def test_budget_picks_k():
    plan = verishard.plan(*BENCH[0])
    bound = plan.peak * 4
    res = run_both(plan, np.arange(64 * 64, dtype=np.float32).reshape(64, 64), budget_bytes=bound + bound // 4)
    assert res.chunking.ks == (8,) and res.chunking.budget_met
    assert int(res.peak_bytes.max()) <= bound + bound // 4


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), k=st.sampled_from([2, 3, 4, 8, None]))
def test_random_plans_chunked_equal_unchunked(seed, k):
    rng = random.Random(seed)
    mesh = Mesh.parse(rng.choice(MESHES))
    shape = mc.random_shape(rng, mesh, max_elements=1 << 10)
    shape = (shape[0] * rng.choice((1, 4, 12)),) + tuple(shape[1:])
    src = mc.random_type(rng, mesh, shape)
    plan = mc.random_walk(rng, mesh, src, rng.randint(1, 5))
    dtype = mc.DTYPES[seed % len(mc.DTYPES)]
    A = mc.global_array(rng, shape, dtype)
    how = {"chunks": k} if k is not None else {"budget_bytes": plan.peak * A.dtype.itemsize * 9 // 8}
    run_both(plan, A, **how)


def test_partial_plans_chunked():
    rng = np.random.default_rng(3)
    from verishard.runtime import split_partial
    for src, dst in [("[8{x}16, 4] partial{y}", "[16, 1{x,y}4]"), ("[16, 4] partial{x,y}", "[4{x,y}16, 4]"),
                     ("[8{x}16, 4]", "[16, 4] partial{y}")]:
        plan = verishard.plan("x=2,y=2", src, dst)
        A = rng.integers(-9, 9, (16, 4)).astype(np.int64)
        locs = split_partial(A, plan.mesh, plan.src, rng)
        base = simulate(plan, [a.copy() for a in locs])
        res = simulate(plan, [a.copy() for a in locs], chunks=4)
        assert all(same_bytes(a, b) for a, b in zip(res.outputs, base.outputs))
        check_report(res.chunking)


def test_geometry_and_k():
    assert chunk_geometry((4, 6), (16, 6)) == (4, 1, 4)
    assert chunk_geometry((8, 2), (2, 2)) == (2, 4, 1)
    assert choose_k(1 << 20, 1 << 20, 7, 1, 0) == 7      # no divisor fits: one row per piece
    assert choose_k(1 << 20, 1 << 20, 64, 1, default_budget(1 << 20)) == 1   # 1 MiB minimum extra
    assert choose_k(64 << 20, 64 << 20, 1024, 1, default_budget(64 << 20)) == 16


def test_release_rows_keeps_other_rows_and_frees_pages():
    a = lazy_empty((256, 4096), np.dtype(np.uint8))   # an anonymous mapping: page-aligned
    a[:] = 7
    release_rows(a, 2, 128, 0, 64)  # rows 0..63 and 128..191
    assert (a[64:128] == 7).all() and (a[192:] == 7).all()
    assert (a[:64] == 0).all() and (a[128:192] == 0).all()   # dropped pages read as zeros


def test_mpi_chunked_8_ranks():
    from mpi_helpers import report, require_mpi
    from verishard.runtime.launch import mpirun
    require_mpi()
    here = os.path.dirname(os.path.abspath(__file__))
    res = mpirun([sys.executable, os.path.join(here, "chunk_job.py"), "24"], 8, timeout=300,
                 cwd=os.path.dirname(here))
    assert not res.timed_out and res.returncode == 0, report(res, 8)
    line = next(l for l in res.output.splitlines() if l.startswith("SUITE chunked"))
    assert " OK " in line and "failures=0" in line, report(res, 8)
    fields = dict(f.split("=") for f in line.split()[3:])
    assert int(fields["cases"]) >= 150 and int(fields["chunked_steps"]) >= 150, line


def test_jax_chunked_8_devices():
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 JAX devices")
    from verishard.jax.sharding import jax_mesh, to_named_sharding
    from verishard.jax import chunked as cj
    from verishard.jax import backend as rj
    rng = random.Random(5)
    plans = [verishard.plan(*c) for c in BENCH]
    for _ in range(12):
        mesh = Mesh.parse(rng.choice(["x=2,y=2,z=2", "x=4,y=2", "x=2*2,y=2", "x=8"]))
        shape = mc.random_shape(rng, mesh, max_elements=1 << 10)
        shape = (shape[0] * 8,) + tuple(shape[1:])
        plans.append(mc.random_walk(rng, mesh, mc.random_type(rng, mesh, shape), rng.randint(1, 4)))
    for i, plan in enumerate(plans):
        shape = plan.src.global_shape
        A = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        x = jax.device_put(A, to_named_sharding(plan.src, jax_mesh(plan.mesh)))
        y0 = rj.execute(plan, x)
        for k in (2, 4):
            y, rep = cj.execute(plan, x, chunks=k)
            assert same_bytes(np.asarray(y), A)
            for a, b in zip(y.addressable_shards, y0.addressable_shards):
                assert a.device == b.device and same_bytes(np.asarray(a.data), np.asarray(b.data))
            assert all(s.held <= s.refined for s in rep.steps)


def test_jax_in_place_step_memory():
    """A step that keeps the local shape (here a permute) runs in place on the
    donated buffer: XLA's own figure for the compiled program (arguments +
    outputs + temporaries - the aliased source) stays within the refined bound
    max + 2 max / k, where the pieces kept apart would need about twice the bound."""
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 JAX devices")
    import jax.numpy as jnp
    from verishard.jax.sharding import jax_mesh, to_named_sharding
    from verishard.jax import chunked as cj
    plan = verishard.plan("x=2,y=2,z=2", "[256{x}512, 256{y}512]", "[256{y}512, 256{x}512]")
    assert [type(c).__name__ for c in plan.collectives] == ["AllPermute"]
    spec = jax.ShapeDtypeStruct((512, 512), jnp.float32, sharding=to_named_sharding(plan.src, jax_mesh(plan.mesh)))
    bound = plan.peak * 4
    for k in (4, 8):
        fn, _, rep = cj.compile_chunked(plan, 4, chunks=k)
        ma = fn.lower(spec).compile().memory_analysis()
        held = ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes - ma.alias_size_in_bytes
        assert rep.ks == (k,) and held <= bound + 2 * bound // k + 4096, (k, held / bound)
