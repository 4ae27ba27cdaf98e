"""MPI job for tests/test_hostile.py: ranks that disagree, run on 4 ranks
(``mpirun -n 4 python tests/hostile_mpi_job.py``).

Cross-mesh (``runtime.crossmesh_mpi.reshard``, sources on ranks 0-1
{x:2}, targets on ranks 2-3 {u:2}): one sender with another round budget,
a float16 source, a float64 source, a target passing another dtype, the
target ranks listed in another order on one rank, a target with another
plan. ``runtime.mpi.redistribute``: one rank with another ``chunks``, and
with another ``budget_bytes``. Each must raise the same
RedistributionRefused on every rank naming the disagreement, and a correct
run right after must give every target its block (nothing left in flight).

Each rank prints ``[rank r] CASE name: ...`` lines and rank 0 ``HOSTILE OK``
when every case behaved.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from verishard import plan as synthesize
from verishard.crossmesh import crossmesh_plan
from verishard.runtime import distribute
from verishard.runtime.crossmesh_mpi import reshard
from verishard.runtime.mpi import RedistributionRefused, guarded, redistribute

COMM = MPI.COMM_WORLD
ME = COMM.Get_rank()
A = np.arange(32, dtype=np.float32).reshape(8, 4)
SRC, DST = "[4{x}8, 4]", "[8, 2{u}4]"


def xplan(dst_ranks=(2, 3), dst=DST):
    return crossmesh_plan(SRC, dst, [0, 1], list(dst_ranks), src_mesh="x=2", dst_mesh="u=2", world_size=4)


def expected(p, j):
    return A[tuple(slice(s, s + l) for s, l in zip(p.dst.block_starts(j), p.dst.valid_shape(j)))]


def xrun(p=None, *, src_dtype=np.float32, dst_dtype=np.float32, budget=64, whole=False, timeout=60.0):
    """One cross-mesh reshard; True when this rank's result is right.
    ``whole``: this rank passes the whole array instead of its block."""
    p = p or xplan()
    i, j = p.src_index(ME), p.dst_index(ME)
    local = None if i is None else (A if whole else A[4 * i:4 * i + 4]).astype(src_dtype)
    out = reshard(COMM, p, local, dtype=dst_dtype if i is None else None, budget=budget, timeout=timeout)
    return j is None or np.array_equal(out, expected(p, j))


def mpi_run(chunks=None, budget_bytes=None, timeout=30):
    p = synthesize("x=4", "[2{x}8, 4]", "[8, 1{x}4]")
    local = distribute(A, p.mesh, p.src)[ME]
    res = redistribute(p, local, chunks=chunks, budget_bytes=budget_bytes, timeout=timeout)
    return np.array_equal(res.output, distribute(A, p.mesh, p.dst)[ME])


CASES = [  # (name, the run, text the refusal must hold)
    ("another budget on sender 1", lambda: xrun(budget=128 if ME == 1 else 64), "disagree on the round budget"),
    ("float16 source on rank 0", lambda: xrun(src_dtype=np.float16 if ME == 0 else np.float32),
     "disagree on the dtype"),
    ("float64 source on rank 1", lambda: xrun(src_dtype=np.float64 if ME == 1 else np.float32),
     "disagree on the dtype"),
    ("target 3 passes float64", lambda: xrun(dst_dtype=np.float64 if ME == 3 else np.float32),
     "disagree on the dtype"),
    ("target ranks in another order on rank 0", lambda: xrun(xplan((3, 2) if ME == 0 else (2, 3))),
     "disagree on the plan"),
    ("target 2 with another plan", lambda: xrun(xplan(dst="[4{u}8, 4]" if ME == 2 else DST)),
     "disagree on the plan"),
    ("runtime.mpi: chunks=2 on rank 3", lambda: mpi_run(chunks=2 if ME == 3 else None), "disagree on the chunking"),
    ("runtime.mpi: budget_bytes on rank 1", lambda: mpi_run(budget_bytes=2**20 if ME == 1 else None),
     "disagree on the chunking"),
    # issue 39: a source passing the whole array, and timeouts that are not a number of seconds
    ("source 1 passes the whole array", lambda: xrun(whole=ME == 1),
     "rank 1: its local block has shape (8, 4), the source layout gives it the block shape (4, 4)"),
    ("every source passes the whole array", lambda: xrun(whole=True),
     "ranks 0-1: its local block has shape (8, 4)"),
    ("timeout=nan on rank 2", lambda: xrun(timeout=float("nan") if ME == 2 else 60.0),
     "rank 2: timeout nan is not a valid number of seconds"),
    ("runtime.mpi: timeout=-1 on every rank", lambda: mpi_run(timeout=-1),
     "ranks 0-3: timeout -1 is not a valid number of seconds"),
]


def main() -> None:
    ok = True
    for name, run, needle in CASES:
        try:
            run()
            verdict = "NOT REFUSED"
        except RedistributionRefused as e:
            verdict = "refused" if needle in str(e) else f"refused without {needle!r}: {e}"
        right = xrun() and mpi_run()  # the communicator still works: nothing was left in flight
        good = verdict == "refused" and right
        ok &= good
        sys.stdout.write(f"[rank {ME}] CASE {name}: {verdict}; the correct run after it "
                         f"{'matches' if right else 'DOES NOT MATCH'}\n")  # one write: lines of ranks stay whole
        sys.stdout.flush()
    everyone = COMM.allreduce(int(ok), op=MPI.MIN)
    if ME == 0 and everyone:
        print("HOSTILE OK", flush=True)


if __name__ == "__main__":
    sys.exit(guarded(main))
