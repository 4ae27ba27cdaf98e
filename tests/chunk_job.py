"""The MPI job of the chunked-execution tests (tests/test_chunked.py):
``mpirun -n N python tests/chunk_job.py [CASES]``.

Random hand-built plans (every collective, multi-axis and sub-axis ones) on
arrays large enough to be cut: every plan runs unchunked (``chunks=1``) and
chunked (a fixed number of pieces, and a tight ``budget_bytes``), with and
without the source donated; every rank checks the chunked result is
bit-identical to the unchunked one and to numpy, and that its accounting
(``held``) never exceeds the refined bound the runtime reports. Rank 0 prints
``SUITE chunked OK cases=<n> failures=0``.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpi_cases as mc  # noqa: E402

import verishard  # noqa: E402
from verishard import Mesh  # noqa: E402
from verishard.runtime import Donated, local_block  # noqa: E402
from verishard.runtime.layout import same_bytes  # noqa: E402
from verishard.runtime.mpi import guarded, redistribute  # noqa: E402

MESHES = {8: ["x=2,y=2,z=2", "x=4,y=2", "x=2,y=2*2", "x=2*2*2", "x=8"], 4: ["x=2,y=2", "x=4", "x=2*2"]}
PAIRS = {8: [("x=2,y=2,z=2", (64, 64), "[8{x,y,z}64, 64]", "[64, 8{x,y,z}64]"),
             ("x=2,y=2,z=2", (64, 64), "[16{x,y}64, 32{z}64]", "[32{z}64, 16{x,y}64]"),
             ("x=2,y=2,z=2", (64, 64), "[32{x}64, 32{y}64]", "[32{y}64, 32{x}64]"),
             ("x=4,y=2", (64, 64), "[16{x}64, 64]", "[32{y}64, 64]")]}


def main() -> None:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    ncases = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    rng = random.Random(77 + size)
    failures: list[str] = []
    count = cut = 0
    plans = []
    for mesh_text, shape, s, d in PAIRS.get(size, []):
        plans.append((verishard.plan(mesh_text, s, d), shape))
    for i in range(ncases):
        mesh = Mesh.parse(rng.choice(MESHES[size]))
        shape = mc.random_shape(rng, mesh, max_elements=1 << 12)
        shape = (shape[0] * rng.choice((8, 16)),) + tuple(shape[1:])   # a long dimension 0 to cut
        src = mc.random_type(rng, mesh, shape)
        plans.append((mc.random_walk(rng, mesh, src, rng.randint(1, 5)), shape))
    for i, (plan, shape) in enumerate(plans):
        dtype = mc.DTYPES[i % len(mc.DTYPES)]
        A = mc.global_array(np.random.default_rng(i), shape, dtype)
        want = local_block(A, plan.mesh, plan.dst, rank)
        base = redistribute(plan, local_block(A, plan.mesh, plan.src, rank), chunks=1, timeout=60)
        label = f"{plan.mesh}: {plan.src} -> {plan.dst} [{', '.join(map(str, plan.collectives))}] {dtype}"
        if not same_bytes(base.output, want):
            failures.append(f"{label}: unchunked result wrong")
        it = A.dtype.itemsize
        for how in ({"chunks": 2}, {"chunks": 4}, {"budget_bytes": plan.peak * it * 9 // 8}):
            for donate in (False, True):
                count += 1
                local = local_block(A, plan.mesh, plan.src, rank)
                res = redistribute(plan, Donated(local) if donate else local, timeout=60, **how)
                del local
                tag = f"{label} {how} donated={donate}"
                if not same_bytes(res.output, base.output):
                    failures.append(f"{tag}: chunked result differs from unchunked")
                rep = res.chunking
                cut += sum(st.k > 1 for st in rep.steps)
                for st in rep.steps:
                    if st.held > st.refined:
                        failures.append(f"{tag}: step {st.index} held {st.held} B > refined {st.refined} B")
                if [s.received for s in res.steps] != [s.received for s in base.steps]:
                    failures.append(f"{tag}: traffic differs from unchunked")
                if max(s.peak for s in res.steps) > rep.refined:
                    failures.append(f"{tag}: peak {max(s.peak for s in res.steps)} > refined {rep.refined}")
    total = sum(comm.allgather(len(failures)))
    for f in failures[:5]:
        print(f"[rank {rank}] FAIL chunked: {f}", flush=True)
    comm.Barrier()
    if rank == 0:
        print(f"SUITE chunked {'OK' if total == 0 else 'FAILED'} cases={count} failures={total} chunked_steps={cut}", flush=True)
    if total:
        sys.stdout.flush()
        comm.Barrier()
        os._exit(1)


if __name__ == "__main__":
    sys.exit(guarded(main))
