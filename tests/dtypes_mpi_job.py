"""The MPI job of tests/test_dtypes.py: ``mpirun -n 4 python
tests/dtypes_mpi_job.py``. Every rank moves an array of every dtype of
``verishard.dtypes.NAMES`` by ``verishard.runtime.mpi.redistribute`` and
compares its result with its block of the global array, byte for byte:

- plain types on the mesh ``x=2,y=2`` (all-gather, all-to-all, permute,
  slice), of an array of random bytes (NaNs and all), whole and in pieces
  (``chunks=2``: :mod:`verishard.runtime.chunked`), and across meshes
  (``verishard.runtime.crossmesh_mpi.reshard``, from ranks 0-1 to 2-3, the
  target-only ranks passing the dtype by name);
- pending reductions (``max`` for every dtype, ``sum`` for every dtype with
  a zero): each rank's term is small integers, so that every sum is exact in
  every dtype; the result against numpy's reduction of the terms (the
  ufunc ml_dtypes defines for bfloat16 and float8).

Ranks holding different float8 types must be refused, naming them.

Failures are printed as ``[rank r] FAIL ...``; rank 0 prints ``DTYPES mpi OK
cases=N`` (or ``FAILED``).
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from verishard import ArrayType, Mesh, dtypes, plan  # noqa: E402
from verishard.runtime import local_block  # noqa: E402

MESH = Mesh.parse("x=2,y=2")
PAIRS = (("[2{x}4, 3{y}6]", "[4, 6]"), ("[2{x}4, 6]", "[1{y,x}4, 6]"), ("[4, 3{y}6]", "[2{x}4, 3{y}6]"),
         ("[2{x}4, 6]", "[4, 3{x}6]"))
UFUNCS = {"sum": np.add, "max": np.maximum}


def random_array(name: str, shape, seed: int) -> np.ndarray:
    dt = dtypes.numpy_dtype(name)
    raw = np.random.default_rng(seed).integers(0, 256, int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    if name == "bool":
        raw %= 2
    return raw.view(dt).reshape(shape)


def main() -> int:
    from mpi4py import MPI
    from verishard.crossmesh import crossmesh_plan
    from verishard.runtime import mpi
    from verishard.runtime.crossmesh_mpi import reshard
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    cases = failures = 0

    def fail(what: str) -> None:
        nonlocal failures
        failures += 1
        print(f"[rank {rank}] FAIL {what}", flush=True)

    for k, name in enumerate(dtypes.NAMES):
        g = random_array(name, (4, 6), 100 + k)
        for a, b in PAIRS:
            p = plan(MESH, a, b)
            want = local_block(g, MESH, b, rank)
            for chunks in (None, 2):   # whole, and each step in two pieces (runtime.chunked)
                out = mpi.redistribute(p, local_block(g, MESH, a, rank), chunks=chunks).output
                cases += 1
                if out.dtype != want.dtype or out.tobytes() != want.tobytes():
                    fail(f"{name}: {a} -> {b} in {chunks or 1} piece(s)")
        # across meshes: rows on ranks 0-1 to columns on ranks 2-3, point to point in small rounds; the
        # target-only ranks name the dtype (verishard.dtypes' name)
        p = crossmesh_plan(ArrayType.parse("[2{x}4, 6]", "x=2"), ArrayType.parse("[4, 3{x}6]", "x=2"), [0, 1], [2, 3])
        i, j = p.src_index(rank), p.dst_index(rank)
        out = reshard(comm, p, local_block(g, "x=2", "[2{x}4, 6]", i) if i is not None else None, dtype=name,
                      budget=16)
        if j is not None:
            cases += 1
            want = local_block(g, "x=2", "[4, 3{x}6]", j)
            if out.dtype != want.dtype or out.tobytes() != want.tobytes():
                fail(f"{name}: across meshes")
        # pending reductions over y (the group of this rank's x coordinate): AllReduce, then ReduceScatter
        for op in ("max",) + (("sum",) if name != "float8_e8m0fnu" else ()):
            dt = dtypes.numpy_dtype(name)
            terms = [(np.arange(24).reshape(4, 6) * (r + 3) % 3).astype(np.float32) for r in range(4)]
            if name == "float8_e8m0fnu":
                terms = [2.0 ** t for t in terms]   # no zero: powers of two
            terms = [t.astype(dt) for t in terms]
            pending = ArrayType(MESH, ArrayType.parse("[4, 6]", MESH).dims, (1,), op)
            for target in ("[4, 6]", "[2{y}4, 6]"):
                p = plan(MESH, pending, target)
                out = mpi.redistribute(p, terms[rank].copy()).output
                x = rank // 2   # the ranks of this y group: 2x and 2x + 1
                total = UFUNCS[op](terms[2 * x], terms[2 * x + 1])
                want = local_block(total, "y=2", target.replace("{y}", "{y}"), rank % 2) if "{y}" in target \
                    else total
                cases += 1
                if out.dtype != total.dtype or out.tobytes() != np.ascontiguousarray(want).tobytes():
                    fail(f"{name}: pending {op} -> {target}")
    # ranks holding different float8 types (numpy's text is "<V1" for both) are refused, naming them
    p = plan(MESH, "[2{x}4, 6]", "[4, 6]")
    name = "float8_e4m3fn" if rank % 2 else "float8_e8m0fnu"
    cases += 1
    try:
        mpi.redistribute(p, local_block(random_array(name, (4, 6), 0), MESH, "[2{x}4, 6]", rank))
        fail("ranks with different float8 dtypes were not refused")
    except mpi.RedistributionRefused as e:
        if "disagree on the dtype" not in str(e) or "float8_e8m0fnu" not in str(e):
            fail(f"the refusal does not name the dtypes: {e}")
    counts = comm.gather((cases, failures), root=0)
    if rank == 0:
        n, f = sum(c for c, _ in counts), sum(x for _, x in counts)
        print(f"DTYPES mpi {'OK' if f == 0 else 'FAILED'} cases={n} failures={f}", flush=True)
    return 0


if __name__ == "__main__":
    from verishard.runtime.mpi import guarded
    sys.exit(guarded(main))
