"""The exchange step against the plan of collectives, on MPI (8 ranks).

    python bench/exchange.py                        # launches itself under mpirun -n 8
    python bench/exchange.py --sizes 16 --out -     # quick run, markdown to stdout

For redistributions where the verified planner with ``exchange=True``
(``Exchange.eplan_problem`` / ``ueplan_problem``) takes the exchange, both
plans run through ``verishard.runtime.mpi.redistribute`` on the same data:

- *collectives*: ``verishard.plan(mesh, src, dst)``;
- *exchange*: ``verishard.plan(mesh, src, dst, exchange=True)``, one
  ``MPI_Alltoallv`` with the verified send lists;

each chunked with the runtime's default budget (bound + bound/8: the
exchange in pieces along its free dimension, ``Exchangeproof.exchange_chunk``)
and unchunked (``chunks=1``), the source donated. Reported per case and size:
elements received per device (the checker's figure; for the exchange the
lower bound), median wall time of the slowest rank over the repetitions
(validation included), and peak resident memory per rank above the idle
process (``VmHWM`` reset before each run) over the type-level bound
``max(size(src), size(dst))`` (padded sizes for uneven types). Every result
is compared with the expected block on every rank (first repetition).
Writes bench/results/exchange.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20
from procmem import reset_hwm, rss_kib  # noqa: E402  (bench/: this script's directory)
from report import emit_report  # noqa: E402  (bench/: this script's directory)

F = 4  # the leading free dimension (sharded by neither type): the exchange runs in pieces along it
# (name, mesh, source, target); {R}, {C}: global rows and columns, {R8} = R/8, ... (padded for uneven)
CASES = [
    ("columns to rows, axes regrouped", "x=2,y=2,z=2", "[4, {R}, {C4}{{z,y}}{C}]", "[4, {R8}{{z,x,y}}{R}, {C}]"),
    ("rows to columns, axes reversed", "x=2,y=2,z=2", "[4, {R8}{{x,y,z}}{R}, {C}]", "[4, {R}, {C8}{{z,y,x}}{C}]"),
    ("uneven rows to columns", "x=2,y=2,z=2", "[4, {Ru8}{{x,y,z}}{Ru}, {C}]", "[4, {Ru}, {C8}{{z,y,x}}{C}]"),
]
METHODS = [("collectives", False, None), ("collectives", False, 1), ("exchange", True, None), ("exchange", True, 1)]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="64,256", help="global array sizes in MiB (default 64,256)")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions after one warm-up (default 3)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "exchange.md"), help="markdown file, or - for stdout")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before the MPI job is stopped")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def launch(args) -> int:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from verishard.runtime import mpirun
    env = dict(os.environ)
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 16))  # large arrays go back to the OS when freed
    env.setdefault("OMP_NUM_THREADS", "1")
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--sizes", args.sizes, "--reps", str(args.reps),
            "--out", args.out]
    res = mpirun(argv, 8, timeout=args.timeout, stream=sys.stdout if args.out == "-" else sys.stderr, env=env, cwd=ROOT)
    if res.timed_out:
        print(f"bench/exchange.py: stopped after {args.timeout:g} s", file=sys.stderr)
        return 124
    return int(res.returncode or 0)


def worker(args) -> None:
    from mpi4py import MPI

    import verishard
    from verishard import ArrayType, Mesh
    from verishard.runtime import Donated
    from verishard.runtime.mpi import redistribute
    from verishard.runtime.uneven import distribute_padded

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if rank == 0 else (lambda *a: None)
    reset_hwm()
    rows, started = [], time.monotonic()
    for name, mesh_text, src_t, dst_t in CASES:
        mesh = Mesh.parse(mesh_text)
        for mib in [int(s) for s in args.sizes.split(",") if s]:
            n = mib * MiB // 4 // F
            R = C = 8 * int((n ** 0.5) // 8)
            Ru = R - 3   # not a multiple of 8: blocks of ceil(Ru / 8)
            fill = dict(R=R, C=C, R8=R // 8, C4=C // 4, C8=C // 8, Ru=Ru, Ru8=-(-Ru // 8))
            src = ArrayType.parse(src_t.format(**fill), mesh)
            dst = ArrayType.parse(dst_t.format(**fill), mesh)
            A = np.arange(int(np.prod(src.global_shape)), dtype=np.float32).reshape(src.global_shape)
            want = distribute_padded(A, mesh, dst, np.float32(0))[rank]
            valid = tuple(slice(0, v) for v in dst.valid_shape(rank))
            bound = max(src.size, dst.size) * 4
            for method, exchange, chunks in METHODS:
                p = verishard.plan(mesh, src, dst, exchange=exchange)
                assert p.exchange == exchange, (name, method)
                times, rss = [], 0
                for rep in range(-1, args.reps):   # rep -1: warm-up, checked, not timed
                    gc.collect()
                    base = rss_kib("VmRSS")
                    given = Donated(distribute_padded(A, mesh, src, np.float32(0))[rank])
                    reset_hwm()
                    comm.Barrier()
                    t0 = time.perf_counter()
                    res = redistribute(p, given, chunks=chunks)
                    t1 = time.perf_counter()
                    comm.Barrier()
                    hwm = rss_kib("VmHWM")
                    y, ks = res.output, res.chunking.ks if res.chunking is not None else (1,)
                    del res
                    slowest = comm.allreduce(t1 - t0, op=MPI.MAX)
                    if rep == -1:
                        ok = bool(np.array_equal(y[valid], want[valid]))
                        if not comm.allreduce(ok, op=MPI.LAND):
                            raise SystemExit(f"{name} {mib} MiB {method}: wrong result")
                    else:
                        times.append(slowest)
                        rss = max(rss, comm.allreduce(hwm - base, op=MPI.MAX))
                    del y
                rows.append(dict(case=name, mib=mib, method=method, chunked=chunks is None, plan=p, ks=ks,
                                 seconds=statistics.median(times), rss=rss * 1024, bound=bound))
                log(f"{name:34s} {mib:4d} MiB {method:11s} {'chunked' if chunks is None else 'whole  '} "
                    f"{statistics.median(times) * 1e3:8.1f} ms  peak {rss * 1024 / bound:.2f} x bound  "
                    f"traffic {p.traffic}  ({time.monotonic() - started:.0f} s)")
    if rank == 0:
        write_report(args, rows, time.monotonic() - started)


def write_report(args, rows, seconds) -> None:
    out = [f"# The exchange against the plan of collectives (MPI, 8 ranks)\n",
           f"`python bench/exchange.py --sizes {args.sizes} --reps {args.reps}` (8 ranks under `mpirun "
           f"--oversubscribe` on this machine's {os.cpu_count()} CPU cores; {seconds:.0f} s). See the script's "
           f"docstring for what is measured. float32; the first dimension ({F}, a batch) is sharded by neither type. "
           f"*received*: elements per device (the verified checker's figure; the exchange's is the lower bound). "
           f"*peak / bound*: resident memory a rank gained during the run over max(size(src), size(dst)).\n"]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for case in cases:
        rs = [r for r in rows if r["case"] == case]
        first = rs[0]["plan"]
        coll = next(r["plan"] for r in rs if r["method"] == "collectives")
        out.append(f"\n## {case}: `{first.src}` -> `{first.dst}` on {first.mesh}\n")
        out.append(f"collectives: {', '.join(map(str, coll.collectives))}; "
                   f"exchange: {', '.join(map(str, next(r['plan'] for r in rs if r['method'] == 'exchange').collectives))}\n")
        out.append("| MiB | method | received / device | lower bound | k | ms | peak / bound |")
        out.append("|---:|---|---:|---:|---|---:|---:|")
        for r in rs:
            p = r["plan"]
            how = f"{r['method']}, {'chunked' if r['chunked'] else 'whole'}"
            out.append(f"| {r['mib']} | {how} | {p.traffic} | {p.lower_bound} | {','.join(map(str, r['ks']))} "
                       f"| {r['seconds'] * 1e3:.1f} | {r['rss'] / r['bound']:.2f} |")
        for mib in dict.fromkeys(r["mib"] for r in rs):
            get = {(r["method"], r["chunked"]): r for r in rs if r["mib"] == mib}
            c, e = get[("collectives", True)], get[("exchange", True)]
            out.append(f"\n{mib} MiB, chunked: the exchange receives {c['plan'].traffic / e['plan'].traffic:.2f}x less, "
                       f"takes {e['seconds'] / c['seconds']:.2f}x the time, peak {e['rss'] / e['bound']:.2f} vs "
                       f"{c['rss'] / c['bound']:.2f} x bound.")
    out.append("\nCaveats: 8 ranks share the cores (oversubscribed), so times vary from run to run; the "
               "received figures are exact, the memory figures stable. The MPI runtime runs plans of collectives "
               "over uneven types whole (k = 1 in their chunked rows); the exchange cuts along its free dimension "
               "whatever the types.")
    emit_report("\n".join(out) + "\n", args.out)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
