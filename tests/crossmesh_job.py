"""MPI job for tests/test_crossmesh.py and tests/test_checkpoint.py:
``mpirun --allow-run-as-root --oversubscribe -n 6 python tests/crossmesh_job.py``.

Cross-mesh reshards over the world (sources on ranks 0-3 {x:2,y:2}; targets
on ranks 3-5 {u:3}, overlapping at rank 3, and on all six ranks {u:2,v:3} in
reverse order), with a small byte budget so that they take several rounds,
each target's block against numpy; then a checkpoint saved from the six
ranks with a communicator and loaded by ranks 0-3 with another mesh and type.
Prints ``CROSSMESH OK`` on rank 0 when everything matched."""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
from mpi4py import MPI

from verishard import ArrayType, Mesh, checkpoint
from verishard.crossmesh import crossmesh_plan
from verishard.runtime.crossmesh_mpi import reshard


def block(t: ArrayType, A: np.ndarray, i: int) -> np.ndarray:
    return A[tuple(slice(s, s + l) for s, l in zip(t.block_starts(i), t.valid_shape(i)))]


CASES = [
    ("[6{x}12, 5{y}10]", "[4{u}12, 10]", "u=3", [3, 4, 5]),
    ("[6{x}12, 5{y}10]", "[12, 4{u}10]", "u=3", [3, 4, 5]),          # uneven target
    ("[3{x,y}12, 10]", "[6{u}12, 4{v}10]", "u=2,v=3", [5, 4, 3, 2, 1, 0]),
    ("[12, 10]", "[2{v,u}12, 10]", "u=2,v=3", [5, 4, 3, 2, 1, 0]),     # replicated source
    ("[6{y}12, 5{x}10]", "[6{u}12, 4{v}10]", "u=2,v=3", [0, 1, 2, 3, 4, 5]),
]


def main() -> int:
    comm = MPI.COMM_WORLD
    me = comm.Get_rank()
    if comm.Get_size() != 6:
        print(f"[rank {me}] run with mpirun -n 6", flush=True)
        return 2
    A = np.arange(120, dtype=np.float64).reshape(12, 10) * 1.5
    m1 = Mesh.parse("x=2,y=2")
    bad = 0
    for s_text, d_text, dmesh, r2 in CASES:
        s = ArrayType.parse(s_text, m1)
        d = ArrayType.parse(d_text, dmesh)
        plan = crossmesh_plan(s, d, [0, 1, 2, 3], r2, world_size=6)
        i = plan.src_index(me)
        local = block(s, A, i) if i is not None else None
        out = reshard(comm, plan, local, dtype=A.dtype, budget=96)
        j = plan.dst_index(me)
        if j is not None and not np.array_equal(out, block(d, A, j)):
            print(f"[rank {me}] {s_text} -> {d_text}: wrong block", flush=True)
            bad += 1
    # checkpoint: save from 6 ranks with a communicator, load on 4 ranks
    path = comm.bcast(tempfile.mkdtemp() if me == 0 else None, root=0)
    t6 = ArrayType.parse("[6{u}12, 4{v}10]", "u=2,v=3")
    checkpoint.save(block(t6, A, me), "u=2,v=3", t6, path, rank=me, comm=comm)
    if me < 4:
        t4 = ArrayType.parse("[12, 3{y,x}10]", m1)
        got = checkpoint.load(path, m1, t4, me)
        if not np.array_equal(got, block(t4, A, me)):
            print(f"[rank {me}] checkpoint: wrong block", flush=True)
            bad += 1
    bad = comm.allreduce(bad)
    if me == 0:
        print("CROSSMESH OK" if bad == 0 else f"CROSSMESH FAILED ({bad})", flush=True)
        for f in os.listdir(path):
            os.remove(os.path.join(path, f))
        os.rmdir(path)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
