"""The multi-process job of tests/test_partial_backends.py: every rank calls
the three collectives on partial types (``all_reduce``, ``reduce_scatter``,
``to_partial``) of a backend directly, for sum, max and min, several dtypes
and two groups of the mesh ``x=2,y=2,z=2``, and compares its own result with
the numpy semantics (:func:`expected`, computed from every rank's input,
which every rank generates from the same seed).

    mpirun -n 8 python tests/partial_job.py mpi
    python tests/partial_job.py torch OUTDIR     # forks 8 gloo processes

MPI: failures are printed as ``[rank r] FAIL ...``; rank 0 prints
``PARTIAL mpi OK cases=N failures=0`` (or ``FAILED``). Torch: every rank
writes ``OUTDIR/rank<r>.json`` (``cases``, ``failures``): once with
``reduce_scatter_single``, once with the backend's all-reduce fallback
forced, and once on a DeviceMesh whose ranks are out of order (``reordered``:
how many of this rank's groups the backend had to reorder).

The numpy reference (:func:`inputs`, :func:`expected`, :func:`compare`) is
imported by the test file too.
"""

from __future__ import annotations

import os
import sys
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from verishard import Mesh  # noqa: E402
from verishard.runtime.backend import AxisGroup  # noqa: E402

MESH = "x=2,y=2,z=2"
NPROCS = 8
GROUPS = [(1,), (2, 0)]          # one part; two parts in non-mesh order (z major, x minor)
OPS = ("sum", "max", "min")
SHAPE = (4, 8)                   # local shape: both dimensions divide by every group size used
UFUNCS = {"sum": np.add, "max": np.maximum, "min": np.minimum}
# Floating sums may be reduced in any order: compared with these tolerances
# (float16 inputs are small integers, whose sums are exact in any order).
TOL = {"float32": dict(rtol=1e-6, atol=1e-6), "float64": dict(rtol=1e-12, atol=1e-12)}


def inputs(dtype: str, seed: int, shape=SHAPE) -> list[np.ndarray]:
    """Every rank's local array (the same on every rank for the same seed)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f" and dt.itemsize >= 4:
        return [rng.standard_normal(shape).astype(dt) for _ in range(NPROCS)]
    return [rng.integers(-8, 9, shape).astype(dt) for _ in range(NPROCS)]


def identity(dt: np.dtype, op: str):
    if op == "sum":
        return 0
    if np.issubdtype(dt, np.integer):
        return np.iinfo(dt).min if op == "max" else np.iinfo(dt).max
    return -np.inf if op == "max" else np.inf


def expected(xs: list[np.ndarray], group: AxisGroup, op: str, method: str, dim: int | None = None) -> list[np.ndarray]:
    """The semantics of ``method`` for every rank (numpy)."""
    n = len(xs)
    if method == "to_partial":
        return [xs[r] if group.index[r] == 0 else np.full_like(xs[r], identity(xs[r].dtype, op)) for r in range(n)]
    out = [None] * n
    for row in group.members:
        red = UFUNCS[op].reduce(np.stack([xs[int(r)] for r in row]), axis=0).astype(xs[0].dtype)
        for r in row:
            out[int(r)] = red
    if method == "all_reduce":
        return out
    assert method == "reduce_scatter"
    res = []
    for r in range(n):
        l = out[r].shape[dim] // group.size
        k = int(group.index[r])
        res.append(np.take(out[r], np.arange(k * l, (k + 1) * l), axis=dim))
    return res


def compare(got: np.ndarray, want: np.ndarray, op: str) -> str | None:
    """None when ``got`` is ``want`` (within TOL for floating sums, else exactly)."""
    got = np.asarray(got)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    if op == "sum" and want.dtype.name in TOL:
        ok = np.allclose(got, want, **TOL[want.dtype.name])
    else:
        ok = np.array_equal(got, want)
    if not ok:
        return f"got {got.ravel()[:6].tolist()}..., want {want.ravel()[:6].tolist()}..."
    return None


def calls():
    """The collective calls every rank makes, in the same order: (label, method, dim)."""
    for method, dim in (("all_reduce", None), ("reduce_scatter", 0), ("reduce_scatter", 1), ("to_partial", None)):
        yield method, dim


def run_cases(backend, rank: int, dtypes, to_local, from_local, traffic=None,
              groups=GROUPS) -> tuple[int, list[str]]:
    """Call every case on ``backend``; return (cases, failures) of this rank."""
    mesh = Mesh.parse(MESH)
    count, fails = 0, []
    for i, dtype in enumerate(dtypes):
        xs = inputs(dtype, seed=100 + i)
        for parts in groups:
            g = AxisGroup.of(mesh, parts)
            for op in OPS:
                for method, dim in calls():
                    args = (g, op) if dim is None else (dim, g, op)
                    label = f"{method}({'' if dim is None else f'dim={dim}, '}{g.names}, {op}) {dtype}"
                    count += 1
                    try:
                        y = from_local(getattr(backend, method)(to_local(xs[rank]), *args))
                        why = compare(y, expected(xs, g, op, method, dim)[rank], op)
                        if why is None and traffic is not None:
                            why = traffic(method, xs[rank], y, g)
                    except Exception as e:  # noqa: BLE001 - reported
                        why = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
                    if why is not None:
                        fails.append(f"{label}: {why}")
    return count, fails


# ---------------------------------------------------------------------------
# MPI


def mpi_main() -> None:
    from mpi4py import MPI

    from verishard.runtime.mpi import MPIBackend, guarded, mesh_comm

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()

    def main():
        b = MPIBackend(mesh_comm(comm, Mesh.parse(MESH)))

        def traffic(method, x, y, g):  # the spec's figures (Partial.precv), in bytes
            want = {"all_reduce": 2 * (x.size - x.size // g.size) * x.itemsize,
                    "reduce_scatter": (g.size - 1) * y.nbytes, "to_partial": 0}[method]
            return None if b.received == want else f"received {b.received} B, the spec says {want} B"

        # float16 and bool have no predefined MPI reduction: the numpy user operation
        count, fails = run_cases(b, rank, ["float32", "float64", "int32", "int64", "float16"],
                                 lambda a: a, lambda y: y, traffic)
        total = sum(comm.allgather(len(fails)))
        for f in fails[:5]:
            print(f"[rank {rank}] FAIL {f}", flush=True)
        comm.Barrier()
        if rank == 0:
            print(f"PARTIAL mpi {'OK' if total == 0 else 'FAILED'} cases={count} failures={total}", flush=True)

    sys.exit(guarded(main))


# ---------------------------------------------------------------------------
# torch


def torch_worker(rank: int, port: int, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    import verishard.torch.backend as vrt
    from torch_job import finish_worker
    torch.set_num_threads(1)
    rec: dict = {"rank": rank, "cases": 0, "failures": []}
    try:
        dist.init_process_group("gloo", rank=rank, world_size=NPROCS, timeout=timedelta(seconds=60))
        dm = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("x", "y", "z"))
        b = vrt.TorchBackend(vrt.mesh_groups(dm))
        dtypes = ["float32", "float64", "int32", "int64", "float16"]
        to_local, from_local = (lambda a: torch.from_numpy(a.copy())), (lambda y: y.numpy())
        count, fails = run_cases(b, rank, dtypes, to_local, from_local)
        # again with reduce_scatter_single marked unavailable on every group: the fallback
        saved = set(vrt._NO_REDUCE_SCATTER)
        vrt._NO_REDUCE_SCATTER.update(g.pg for g in b.groups.groups.values())
        try:
            c2, f2 = run_cases(b, rank, ["float32", "int32"], to_local, from_local)
        finally:
            vrt._NO_REDUCE_SCATTER.clear()
            vrt._NO_REDUCE_SCATTER.update(saved)
        # a DeviceMesh whose ranks are out of order: plan rank r is process mesh.flatten()[r], and the
        # process group of the whole z dimension lists its ranks sorted (0, 4), not in group-index order (4, 0)
        perm = DeviceMesh("cpu", torch.tensor([[[4, 0], [5, 1]], [[6, 2], [7, 3]]]), mesh_dim_names=("x", "y", "z"))
        bp = vrt.TorchBackend(vrt.mesh_groups(perm))
        c3, f3 = run_cases(bp, bp.rank, ["float32", "int32"], to_local, from_local, groups=[(2,), (2, 0)])
        reordered = sum(g.index_of_rank is not None for g in bp.groups.groups.values())
        rec.update(cases=count + c2 + c3, failures=fails + ["(fallback) " + f for f in f2]
                   + ["(permuted mesh) " + f for f in f3], refused=len(saved), reordered=reordered)
    except BaseException as e:  # noqa: BLE001 - reported through the file
        rec["failures"].append(f"crash: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    finally:
        finish_worker(outdir, rank, rec)


def torch_main(outdir: str) -> None:
    import verishard.torch.backend  # noqa: F401 - imported once, then forked
    from torch_job import fork_workers
    fork_workers(torch_worker, outdir, NPROCS)


if __name__ == "__main__":
    if sys.argv[1] == "mpi":
        mpi_main()
    else:
        torch_main(sys.argv[2])
