"""The ``make demo`` job: run as ``mpirun -n 8 python -m verishard.runtime.demo_job``
(or through :func:`verishard.runtime.run_mpi_demo`).

Redistributes a suite of arrays between instructive shardings on the meshes
``{x:2, y:2, z:2}`` and ``{x:4, y:2}``, one MPI rank per device; every rank
checks its result against numpy, and rank 0 prints, per redistribution, for
our plan and for the naive gather-everything-then-slice plan: the number of
steps, the peak bytes a rank held (measured by the runtime: a step's input
and output together), the bytes a rank received, and the transfer lower bound.

"Our plan" is ``verishard.plan(...)``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

import verishard
from verishard import Mesh, Plan

from .backend import naive_plan
from .layout import local_block, same_bytes
from . import mpi
from .mpi import guarded, redistribute

NRANKS = 8
CUBE = Mesh.parse("x=2,y=2,z=2")
WIDE = Mesh.parse("x=4,y=2")
STRUCT = np.dtype([("id", "<i4"), ("pos", "<f4", (3,))])


@dataclass(frozen=True)
class Case:
    title: str
    mesh: Mesh
    shape: tuple[int, ...]
    dtype: np.dtype
    src: str
    dst: str


CASES = [
    Case("row blocks to column blocks (one all-to-all)", CUBE, (64, 64), np.dtype(np.float64),
         "[8{x,y,z}64, 64]", "[64, 8{x,y,z}64]"),
    Case("reorder the mesh axes of a dimension (one permute)", CUBE, (64, 64), np.dtype(np.int32),
         "[8{x,y,z}64, 64]", "[8{z,y,x}64, 64]"),
    Case("swap the axes of two dimensions (one permute)", CUBE, (64, 64), np.dtype(np.complex64),
         "[32{x}64, 32{y}64]", "[32{y}64, 32{x}64]"),
    Case("move a dimension's axes to the other dimension", CUBE, (64, 64),
         np.dtype(np.float32), "[16{x,y}64, 32{z}64]", "[32{z}64, 16{x,y}64]"),
    Case("sharded to replicated (the gather is unavoidable)", CUBE, (64, 64), np.dtype(np.float64),
         "[8{x,y,z}64, 64]", "[64, 64]"),
    Case("replicated to sharded (no communication)", CUBE, (64, 64), np.dtype(np.int16),
         "[64, 64]", "[16{x,y}64, 32{z}64]"),
    Case("the spec's worked example, scaled to {x:4, y:2}: 4-way rows to 2-way rows", WIDE, (64, 64), STRUCT,
         "[16{x}64, 64]", "[32{y}64, 64]"),
    Case("rows to columns over the 4-way axis (one all-to-all)", WIDE, (64, 64), np.dtype(np.float16),
         "[16{x}64, 64]", "[64, 16{x}64]"),
    Case("2-way rows to 4-way rows", WIDE, (64, 64), np.dtype(np.float64),
         "[32{y}64, 64]", "[16{x}64, 64]"),
]


def our_plan(case: Case) -> tuple[Plan, str]:
    """``verishard.plan``: always within the bound (``Pipelineproof.plan_spec``)."""
    return verishard.plan(case.mesh, case.src, case.dst), "synthesized"


def global_array(case: Case) -> np.ndarray:
    n = int(np.prod(case.shape))
    if case.dtype.fields is not None:
        A = np.zeros(n, dtype=case.dtype)
        A["id"] = np.arange(n)
        A["pos"] = np.arange(3 * n, dtype=np.float32).reshape(n, 3) / 7
        return A.reshape(case.shape)
    vals = np.arange(n, dtype=np.float64) * 1.5 - 7
    return (vals if case.dtype.kind != "c" else vals * (1 + 2j)).astype(case.dtype).reshape(case.shape)


def run(plan: Plan, A: np.ndarray, comm) -> dict:
    MPI = mpi.MPI
    rank = comm.Get_rank()
    res = redistribute(plan, local_block(A, plan.mesh, plan.src, rank), comm, timeout=120)
    ok = same_bytes(res.output, local_block(A, plan.mesh, plan.dst, rank))
    mine = np.array([res.peak_bytes, res.received_bytes, int(not ok)], dtype=np.int64)
    hi, lo = np.empty_like(mine), np.empty_like(mine)
    comm.Allreduce(mine, hi, op=MPI.MAX)
    comm.Allreduce(mine, lo, op=MPI.MIN)
    it = A.dtype.itemsize
    return {"steps": len(plan.steps), "peak": int(hi[0]), "peak_min": int(lo[0]), "recv": int(hi[1]),
            "recv_min": int(lo[1]), "bad": int(hi[2]), "type_peak": plan.peak * it,
            "lower": plan.lower_bound * it}


def _range(hi: int, lo: int) -> str:
    return f"{hi}" if hi == lo else f"{hi} ({lo}..{hi})"


def main() -> None:
    comm = mpi.MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != NRANKS:
        if rank == 0:
            print(f"demo_job needs {NRANKS} ranks (mpirun -n {NRANKS}), got {comm.Get_size()}", file=sys.stderr)
        raise SystemExit(2)
    out = print if rank == 0 else (lambda *a, **k: None)
    out(f"verishard demo: {len(CASES)} redistributions, one MPI rank per device ({NRANKS} ranks)")
    out("figures in bytes per rank: peak = most held at once (a step's input and output together), "
        "recv = received over the plan,\nlower bound = what some device must receive; a range shows min..max "
        "over ranks where they differ\n")
    failures = 0
    for i, case in enumerate(CASES, 1):
        A = global_array(case)
        plan, how = our_plan(case)
        naive = naive_plan(case.mesh, case.src, case.dst)
        mine, base = run(plan, A, comm), run(naive, A, comm)
        failures += mine["bad"] + base["bad"]
        out(f"[{i}] {case.title}")
        out(f"    mesh {case.mesh}  array {case.shape} {case.dtype if case.dtype.fields is None else 'struct'}"
            f" ({A.nbytes} B)  {plan.src} -> {plan.dst}")
        out(f"    our plan ({how}{', on mesh ' + str(plan.mesh) if plan.mesh != case.mesh else ''}): "
            + (", ".join(map(str, plan.collectives)) or "(no steps)"))
        rows = [("", "steps", "peak", "type-level peak", "recv", "lower bound", "result")]
        for name, r in (("ours", mine), ("naive", base)):
            rows.append((name, str(r["steps"]), _range(r["peak"], r["peak_min"]), str(r["type_peak"]),
                         _range(r["recv"], r["recv_min"]), str(r["lower"]),
                         "ok" if not r["bad"] else "WRONG on some rank"))
        w = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
        for row in rows:
            out("      " + "  ".join(c.ljust(w[k]) if k in (0, 6) else c.rjust(w[k]) for k, c in enumerate(row)))
        recv = (f"received {mine['recv'] / base['recv']:.2f}x" if base["recv"]
                else "received nothing, as")
        out(f"    ours: peak {mine['peak'] / base['peak']:.2f}x, {recv} the naive plan's\n")
    if failures:
        out(f"FAILED: {failures} result(s) differ from numpy")
        sys.stdout.flush()
        comm.Barrier()
        raise SystemExit(1)
    out(f"all {2 * len(CASES)} redistributions matched numpy on every rank")


if __name__ == "__main__":
    sys.exit(guarded(main))


__all__ = ["Case", "CASES", "our_plan", "global_array", "run", "main"]
