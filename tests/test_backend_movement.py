"""Each collective kind of the JAX and torch backends against the extracted,
proved data movement (``core.movement`` = ``Semantics.movement``,
``core.umovement`` = ``Uchecker.umovement``, and for steps on partial types
``Partial.pexec_step`` built on them; tests/movement_cases.py), device by
device, as tests/test_runtime.py and tests/mpi_job.py check the simulator
and MPI.

JAX, on 8 CPU devices, through both entry points: the plan's own jitted
``shard_map`` (``runtime.jax.compile_plan``, and for plain even steps
``runtime.chunked_jax`` in two pieces; not for a pending max or min,
which no ``PartitionSpec`` spells) with every device's source buffer set
separately (``jax.make_array_from_single_device_arrays``: replicas differ,
so a read from the wrong replica shows), the eager path on CPU devices for
even plans with nothing pending (``runtime.jax.host_executor``: the plan's
steps on the host blocks), and ``verishard.jax.reshard_local``
inside a ``shard_map`` of the test's own; every device's result read back. torch:
one 4-process gloo run of tests/torch_movement_job.py on a (2, 2)
DeviceMesh, every rank's result compared here.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import movement_cases as mvc  # noqa: E402

JAX_CASES = (mvc.even_cases("x=2,y=2,z=2", (4, 2, 4), 3) + mvc.even_cases("x=4,y=2", (8, 4), 2, seed=1)
             + mvc.even_cases("x=2,y=2*2", (4, 8), 2, seed=2) + mvc.uneven_cases("x=2,y=2,z=2", (3, 5), 4)
             + mvc.uneven_cases("x=2,y=3", (5, 4), 3) + mvc.partial_cases())


def jax_compiled(plan, xs: list[np.ndarray], chunks: int | None = None) -> list[np.ndarray]:
    """Run ``plan`` by ``runtime.jax.compile_plan`` (with ``chunks``: by
    ``runtime.chunked_jax.compile_chunked`` in that many pieces), device
    ``r`` of its mesh holding ``xs[r]``; every device's result."""
    import jax
    from jax.sharding import NamedSharding

    from verishard.jax.sharding import to_partition_spec
    from verishard.jax.chunked import compile_chunked
    from verishard.jax.backend import compile_plan, padded_global_shape
    if chunks is None:
        fn, jm = compile_plan(plan)
    else:
        fn, jm, _ = compile_chunked(plan, xs[0].itemsize, chunks=chunks, donate=False)
    devices = list(jm.devices.flat)       # plan rank r is the r-th device of the mesh, row-major
    sharding = NamedSharding(jm, to_partition_spec(plan.src, parts=True))
    x = jax.make_array_from_single_device_arrays(padded_global_shape(plan.src), sharding,
                                                 [jax.device_put(a, d) for a, d in zip(xs, devices)])
    rank = {d: r for r, d in enumerate(devices)}
    out = [None] * len(devices)
    for s in fn(x).addressable_shards:
        out[rank[s.device]] = np.asarray(s.data)
    return out


def jax_local(plan, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``plan`` by ``verishard.jax.reshard_local`` inside ``shard_map``,
    device ``r`` holding ``xs[r]`` (a leading axis over every part, as
    tests/test_partial_backends.py); every device's result."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from verishard.jax import reshard_local
    from verishard.jax.sharding import jax_mesh
    jm = jax_mesh(plan.mesh)
    every = PartitionSpec(tuple(name for name, _ in plan.mesh.parts))
    f = jax.jit(jax.shard_map(lambda v: reshard_local(v[0], plan)[None], mesh=jm, in_specs=every,
                              out_specs=every, check_vma=False))
    y = f(jax.device_put(np.stack(xs), NamedSharding(jm, every)))
    return [np.asarray(y[r]) for r in range(len(xs))]


def jax_host(plan, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``plan`` by ``runtime.jax.host_executor`` (the eager path on CPU
    devices: the plan's steps on the host), device ``r`` holding ``xs[r]``;
    every device's result."""
    import jax
    from jax.sharding import NamedSharding

    from verishard.jax.sharding import jax_mesh, to_partition_spec
    from verishard.jax.backend import host_executor
    jm = jax_mesh(plan.mesh)
    devices = list(jm.devices.flat)
    in_sh, out_sh = (NamedSharding(jm, to_partition_spec(t, parts=True)) for t in (plan.src, plan.dst))
    x = jax.make_array_from_single_device_arrays(plan.src.global_shape, in_sh,
                                                 [jax.device_put(a, d) for a, d in zip(xs, devices)])
    rank = {d: r for r, d in enumerate(devices)}
    out = [None] * len(devices)
    for s in host_executor(plan, in_sh, out_sh)(x).addressable_shards:
        out[rank[s.device]] = np.asarray(s.data)
    return out


@pytest.mark.parametrize("kind,plan", JAX_CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(JAX_CASES)])
def test_jax_backend_moves_data_as_the_verified_movement(kind, plan):
    from jax_devices import jax_or_skip
    jax_or_skip()
    xs = mvc.inputs(plan, np.int32)
    bad = mvc.mismatches(plan, xs, jax_local(plan, xs))
    if plan.reduce == "sum" or not (plan.src.partial or plan.dst.partial):
        bad += mvc.mismatches(plan, xs, jax_compiled(plan, xs))
    if not (plan.src.partial or plan.dst.partial or plan.src.uneven or plan.dst.uneven):
        bad += [f"(chunked) {b}" for b in mvc.mismatches(plan, xs, jax_compiled(plan, xs, chunks=2))]
        bad += [f"(host) {b}" for b in mvc.mismatches(plan, xs, jax_host(plan, xs))]
    assert not bad, bad[:2]


def test_the_cases_cover_every_kind():
    kinds = {k for k, _ in JAX_CASES}
    assert kinds >= set(mvc.KINDS) | set(mvc.UNEVEN_KINDS) | {"AllReduce", "ReduceScatter", "ToPartial"}
    assert any(p.src.uneven or p.dst.uneven for _, p in JAX_CASES)
    assert {p.reduce for _, p in JAX_CASES if p.src.partial or p.dst.partial} == {"sum", "max", "min"}
    from verishard.jax.chunked import schedule
    plain = [p for _, p in JAX_CASES if not (p.src.partial or p.dst.partial or p.src.uneven or p.dst.uneven)]
    assert sum(max(schedule(p, 4, chunks=2).ks) > 1 for p in plain) >= 4   # really cut in pieces (4 of 47)


def test_torch_backend_moves_data_as_the_verified_movement(tmp_path):
    pytest.importorskip("torch")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    import subprocess

    import torch_movement_job as job
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "torch_movement_job.py"), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(job.NPROCS)]
    assert not [rec["error"] for rec in ranks if rec["error"]], tail
    cases = job.cases()
    assert {k for k, _ in cases} >= set(mvc.KINDS) | set(mvc.UNEVEN_KINDS) | {"AllReduce", "ReduceScatter",
                                                                               "ToPartial"}
    assert all(len(rec["results"]) == len(cases) for rec in ranks)
    bad = []
    for i, (_, plan) in enumerate(cases):
        ys = [np.array(rec["results"][i], dtype=np.int64) for rec in ranks]
        bad += mvc.mismatches(plan, mvc.inputs(plan), ys)
    assert not bad, bad[:2]
