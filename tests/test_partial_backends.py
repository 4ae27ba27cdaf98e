"""The three collectives on partial types (``all_reduce``, ``reduce_scatter``,
``to_partial``) of the JAX, MPI and torch backends, against numpy.

JAX: direct calls inside ``jax.shard_map`` on 8 CPU devices. MPI and torch:
one 8-process run each of tests/partial_job.py, where every rank checks its
own results (the numpy reference lives there). Floating sums are compared
with ``partial_job.TOL`` (rtol = atol = 1e-6 for float32, 1e-12 for float64:
the order of a sum is unspecified); everything else exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from partial_job import GROUPS, NPROCS, OPS, SHAPE, compare, expected, inputs  # noqa: E402

from verishard import Mesh  # noqa: E402
from verishard.runtime.backend import AxisGroup  # noqa: E402

XYZ = Mesh.parse("x=2,y=2,z=2")


# ---------------------------------------------------------------------------
# JAX: direct calls


def _jax():
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 8:  # pragma: no cover
        pytest.skip("needs 8 JAX devices (XLA_FLAGS set before JAX was imported)")
    return jax


def jax_run(fn, xs):
    """``fn`` (local array -> tuple of local arrays) on every device of the
    ``x=2,y=2,z=2`` JAX mesh, device ``r`` holding ``xs[r]``; returns, per
    output, the list of every device's result."""
    jax = _jax()
    from jax.sharding import NamedSharding, PartitionSpec as P

    from verishard.jax.sharding import jax_mesh
    jm = jax_mesh(XYZ)
    every = P(tuple(name for name, _ in XYZ.parts))  # leading axis over all parts: device r holds row r
    stacked = jax.device_put(np.stack(xs), NamedSharding(jm, every))
    f = jax.jit(jax.shard_map(lambda v: tuple(y[None] for y in fn(v[0])), mesh=jm, in_specs=every,
                              out_specs=every, check_vma=False))
    return [[np.asarray(y[r]) for r in range(len(xs))] for y in f(stacked)]


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("parts", GROUPS + [(0, 1, 2)], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_jax_partial_collectives(dtype, parts, op):
    _jax()
    from verishard.jax.backend import JaxBackend
    b = JaxBackend(XYZ)
    g = AxisGroup.of(XYZ, parts)
    xs = inputs(dtype, seed=zlib.crc32(repr((dtype, parts, op)).encode()))
    dims = [d for d in range(len(SHAPE)) if SHAPE[d] % g.size == 0]
    ys = jax_run(lambda v: (b.all_reduce(v, g, op), b.to_partial(v, g, op),
                            *(b.reduce_scatter(v, d, g, op) for d in dims)), xs)
    wants = [expected(xs, g, op, "all_reduce"), expected(xs, g, op, "to_partial")]
    wants += [expected(xs, g, op, "reduce_scatter", d) for d in dims]
    labels = ["all_reduce", "to_partial"] + [f"reduce_scatter(dim={d})" for d in dims]
    bad = [f"rank {r} {lab}: {why}" for lab, got, want in zip(labels, ys, wants) for r in range(NPROCS)
           if (why := compare(got[r], want[r], op)) is not None]
    assert not bad, bad[:5]


def test_jax_to_partial_identities():
    """The units of max and min are the extreme values of the dtype (infinities for floats)."""
    _jax()
    from verishard.jax.backend import JaxBackend
    b = JaxBackend(XYZ)
    g = AxisGroup.of(XYZ, (1,))
    for dtype, lo, hi in (("float32", -np.inf, np.inf), ("int32", -2**31, 2**31 - 1)):
        xs = [np.full(2, 7, dtype=dtype)] * NPROCS
        mx, mn, sm = jax_run(lambda v: (b.to_partial(v, g, "max"), b.to_partial(v, g, "min"),
                                        b.to_partial(v, g, "sum")), xs)
        for r in range(NPROCS):
            keep = g.index[r] == 0
            assert mx[r].tolist() == ([7, 7] if keep else [lo, lo]) and mx[r].dtype == dtype
            assert mn[r].tolist() == ([7, 7] if keep else [hi, hi])
            assert sm[r].tolist() == ([7, 7] if keep else [0, 0])


# ---------------------------------------------------------------------------
# MPI and torch: one 8-process job each


def test_mpi_partial_collectives():
    from mpi_helpers import report, require_mpi

    from verishard.runtime.launch import mpirun
    require_mpi()
    res = mpirun([sys.executable, os.path.join(HERE, "partial_job.py"), "mpi"], NPROCS, timeout=120,
                 cwd=os.path.dirname(HERE))
    assert res.ok, report(res, NPROCS)
    assert "PARTIAL mpi OK cases=120 failures=0" in res.output, report(res, NPROCS)


def test_torch_partial_collectives(tmp_path):
    pytest.importorskip("torch")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "partial_job.py"), "torch", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    recs = {r: json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(NPROCS)
            if (tmp_path / f"rank{r}.json").exists()}
    assert sorted(recs) == list(range(NPROCS)), tail
    bad = [(r, f) for r, rec in recs.items() for f in rec["failures"]]
    assert not bad, bad[:3]
    assert all(rec["cases"] == 216 for rec in recs.values())
    assert all(rec["reordered"] == 1 for rec in recs.values())  # the permuted mesh's z group was reordered
