"""Benchmark of the MPI runtime: our plan against the naive plan and a direct Alltoallv.

    python bench/runtime.py                      # launches itself under mpirun -n 8
    python bench/runtime.py --sizes 1,4,16 --out -   # quick run, markdown to stdout
    mpirun -n 8 python bench/runtime.py --worker ...  # what the launcher runs

For every redistribution and every global array size (MiB, float32), it
measures on 8 ranks:

- wall time (median over repetitions, slowest rank) of
  * ours: ``verishard.plan`` executed by ``verishard.runtime.mpi.redistribute``
    (validation included),
  * naive: gather everything, then slice (``verishard.runtime.naive_plan``),
  * alltoallv: one ``MPI_Alltoallv`` that sends every element straight from a
    rank holding it to each rank that needs it (pack, exchange, unpack);
    the exchange lists are computed once beforehand, as a plan is;
- peak resident memory per rank above the idle process (``VmHWM`` reset just
  before each run, via ``/proc/self/clear_refs``), with the input donated
  so each method may free it as early as it can;
- for ours and naive, the runtime's own accounting of the bytes it held at
  once (a step's input and output together).

Every result is checked against the expected block on every rank (first
repetition). The report is markdown (``--out``, default
``bench/results/runtime.md``).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20
from procmem import reset_hwm, rss_kib  # noqa: E402  (bench/: this script's directory)
from report import emit_report  # noqa: E402  (bench/: this script's directory)

# (name, mesh, source, target); shapes are filled in per size ({R}, {C}: global rows and columns)
def symbolic(t: str) -> str:
    """``[{R8}{{x}}{R}, {C}]`` as ``[R/8{x}R, C]``."""
    for k, v in (("{R8}", "R/8"), ("{R4}", "R/4"), ("{R2}", "R/2"), ("{C8}", "C/8"), ("{C4}", "C/4"),
                 ("{C2}", "C/2"), ("{R}", "R"), ("{C}", "C"), ("{{", "{"), ("}}", "}")):
        t = t.replace(k, v)
    return t


CASES = [
    ("rows to columns", "x=2,y=2,z=2", "[{R8}{{x,y,z}}{R}, {C}]", "[{R}, {C8}{{x,y,z}}{C}]"),
    ("move axes between dims", "x=2,y=2,z=2", "[{R4}{{x,y}}{R}, {C2}{{z}}{C}]", "[{R2}{{z}}{R}, {C4}{{x,y}}{C}]"),
    ("swap axes of two dims", "x=2,y=2,z=2", "[{R2}{{x}}{R}, {C2}{{y}}{C}]", "[{R2}{{y}}{R}, {C2}{{x}}{C}]"),
    ("4-way rows to 2-way rows", "x=4,y=2", "[{R4}{{x}}{R}, {C}]", "[{R2}{{y}}{R}, {C}]"),
]


def case_types(mesh, src_t: str, dst_t: str, mib: int) -> tuple:
    """A case's float32 array of ``mib`` MiB global as R x C (R = C, R doubled until it holds
    the size): R, C and the source and target types over ``mesh``."""
    from verishard import ArrayType
    n = mib * MiB // 4
    R = C = int(round(n ** 0.5))
    while R * C < n:
        R *= 2
    fill = dict(R=R, C=C, R2=R // 2, R4=R // 4, R8=R // 8, C2=C // 2, C4=C // 4, C8=C // 8)
    return R, C, ArrayType.parse(src_t.format(**fill), mesh), ArrayType.parse(dst_t.format(**fill), mesh)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1,4,16,64,256", help="global array sizes in MiB (default 1,4,16,64,256)")
    p.add_argument("--reps", type=int, default=0, help="timed repetitions per size, after one warm-up "
                   "(default: 7 up to 4 MiB, 5 for 16 MiB, 3 for 64 MiB, 2 above)")
    p.add_argument("--nranks", type=int, default=8)
    p.add_argument("--out", default=os.path.join(HERE, "results", "runtime.md"), help="markdown file, or - for stdout")
    p.add_argument("--timeout", type=float, default=3000, help="seconds before the MPI job is stopped")
    p.add_argument("--naive-max", type=int, default=256, help="largest size (MiB) the naive plan runs at "
                   "(it holds the whole array on every rank; default 256)")
    p.add_argument("--budget", type=float, default=0.0, help="chunked runs: budget as a multiple of the bound "
                   "(default: the runtime's default, bound + bound/8)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# launcher side


def launch(args) -> int:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from verishard.runtime import mpirun
    env = dict(os.environ)
    # fixed mmap threshold: large arrays are always mmapped and go back to the OS
    # when freed, so resident memory follows what each method really holds
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 16))
    env.setdefault("OMP_NUM_THREADS", "1")
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--sizes", args.sizes, "--reps",
            str(args.reps), "--nranks", str(args.nranks), "--out", args.out, "--naive-max", str(args.naive_max),
            "--budget", str(args.budget)]
    res = mpirun(argv, args.nranks, timeout=args.timeout, stream=sys.stdout if args.out == "-" else sys.stderr,
                 env=env, cwd=ROOT)
    if res.timed_out:
        print(f"bench/runtime.py: stopped after {args.timeout:g} s", file=sys.stderr)
        return 124
    return int(res.returncode or 0)


# ---------------------------------------------------------------------------
# worker side (under mpirun)


def block_values(t, rank, C):
    """This rank's block of the global float32 array A[i, j] = i * C + j (exact
    for fewer than 2**24 elements; beyond, exact modulo the float32 rounding of
    both sides, which is the same computation)."""
    from verishard.runtime import box
    b = box(t.mesh, t, rank)
    rows = np.arange(b[0].start, b[0].stop, dtype=np.float64)[:, None]
    cols = np.arange(b[1].start, b[1].stop, dtype=np.float64)[None, :]
    return (rows * C + cols).astype(np.float32)


class Direct:
    """One Alltoallv sending each element from a holder straight to each rank that needs it.

    For every rank ``c`` and every distinct source block overlapping ``c``'s
    target block, the sender is ``c`` itself when it holds that block, else
    replica number ``c mod (number of replicas)`` of the block (so replicas
    share the sending). All ranks compute the same assignment."""

    def __init__(self, src, dst, rank, comm):
        from verishard.runtime import boxes
        from verishard.runtime.layout import block_starts
        self.comm, self.rank = comm, rank
        n = src.mesh.num_devices
        mesh = src.mesh
        sb, db = boxes(mesh, src), boxes(mesh, dst)
        holders = {}
        for r, row in enumerate(block_starts(src)):
            holders.setdefault(tuple(int(v) for v in row), []).append(r)

        def inter(a, b):
            out = tuple(slice(max(x.start, y.start), min(x.stop, y.stop)) for x, y in zip(a, b))
            return out if all(s.start < s.stop for s in out) else None

        def rel(box, origin):
            return tuple(slice(s.start - o.start, s.stop - o.start) for s, o in zip(box, origin))

        self.sends, self.recvs = [], []
        for c in range(n):
            for reps in holders.values():
                s_ = c if c in reps else reps[c % len(reps)]
                if rank not in (s_, c):
                    continue
                i = inter(sb[s_], db[c])
                if i is None:
                    continue
                shape = tuple(v.stop - v.start for v in i)
                if rank == s_:
                    self.sends.append((c, rel(i, sb[s_]), shape))
                if rank == c:
                    self.recvs.append((s_, rel(i, db[c]), shape))
        self.n = n
        self.scount = np.zeros(n, dtype=np.int64)
        self.rcount = np.zeros(n, dtype=np.int64)
        for c, _, shape in self.sends:
            self.scount[c] += int(np.prod(shape))
        for c, _, shape in self.recvs:
            self.rcount[c] += int(np.prod(shape))
        self.sdisp = np.concatenate([[0], np.cumsum(self.scount)[:-1]])
        self.rdisp = np.concatenate([[0], np.cumsum(self.rcount)[:-1]])
        self.out_shape = dst.local_shape
        self.peak = 0

    def run(self, box_):
        from mpi4py import MPI
        x = box_.take()
        send = np.empty(int(self.scount.sum()), dtype=x.dtype)
        at = self.sdisp.copy()
        for c, idx, shape in self.sends:
            k = int(np.prod(shape))
            send[at[c]:at[c] + k] = x[idx].reshape(-1)
            at[c] += k
        held = x.nbytes + send.nbytes
        del x
        recv = np.empty(int(self.rcount.sum()), dtype=send.dtype)
        self.comm.Alltoallv([send, (self.scount.tolist(), self.sdisp.tolist()), MPI.FLOAT],
                            [recv, (self.rcount.tolist(), self.rdisp.tolist()), MPI.FLOAT])
        held = max(held, send.nbytes + recv.nbytes)
        del send
        out = np.empty(self.out_shape, dtype=recv.dtype)
        at = self.rdisp.copy()
        for c, idx, shape in self.recvs:
            k = int(np.prod(shape))
            out[idx] = recv[at[c]:at[c] + k].reshape(shape)
            at[c] += k
        self.peak = max(held, recv.nbytes + out.nbytes)
        return out


def copy_rates(comm, nbytes: int, reps: int = 3, rounds: int = 4) -> tuple[float, float]:
    """Bytes per second one rank copies while every rank copies at once (barrier to
    barrier, ``rounds`` copies of ``nbytes``, best of ``reps``): into a warm
    (already written) buffer, and into fresh ones (page faults included)."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    warm = np.empty_like(src)
    warm[:] = 0
    best = [float("inf"), float("inf")]
    for _ in range(reps):
        for j in range(2):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(rounds):
                if j == 0:
                    np.copyto(warm, src)
                else:
                    fresh = np.empty_like(src)
                    np.copyto(fresh, src)
                    del fresh
            comm.Barrier()
            best[j] = min(best[j], time.perf_counter() - t0)
    best = [comm.bcast(b, root=0) for b in best]
    return rounds * nbytes / best[0], rounds * nbytes / best[1]


def written_bytes(plan, itemsize: int) -> int:
    """Bytes a rank must write for ``plan``: the output of every step that moves data (a slice needs none)."""
    from verishard.runtime.backend import step_call
    t, total = plan.src, 0
    for st in plan.steps:
        call = step_call(plan.mesh, t, st.collective, plan.reduce)
        if call is not None and call[0] != "dyn_slice":
            total += st.type.size * itemsize
        t = st.type
    return total


METHODS = ("chunked", "unchunked", "naive", "alltoallv")


def worker(args) -> None:
    from mpi4py import MPI

    import verishard
    from verishard import ArrayType, Mesh
    from verishard.runtime import Donated, naive_plan
    from verishard.runtime.mpi import redistribute

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    hwm_ok = reset_hwm()
    results, plans, rates = [], {}, {}
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if rank == 0 else (lambda *a: None)
    started = time.monotonic()
    for mib in sizes:
        rates[mib] = copy_rates(comm, mib * MiB // size)
        log(f"copy rate per rank at {mib // size if mib >= size else mib / size} MiB: warm {rates[mib][0] / 1e9:.2f} GB/s, "
            f"fresh {rates[mib][1] / 1e9:.2f} GB/s")
    for name, mesh_text, src_t, dst_t in CASES:
        mesh = Mesh.parse(mesh_text)
        if mesh.num_devices != size:
            raise SystemExit(f"bench needs {mesh.num_devices} ranks")
        for mib in sizes:
            R, C, src, dst = case_types(mesh, src_t, dst_t, mib)
            ours = verishard.plan(mesh, src, dst)
            naive = naive_plan(mesh, src, dst)
            direct = Direct(src, dst, rank, comm)
            bound = max(src.size, dst.size) * 4
            budget = int(bound * args.budget) if args.budget else None
            reps = args.reps or (7 if mib <= 4 else 5 if mib <= 16 else 3 if mib <= 64 else 2)
            for method in METHODS:
                if method == "naive" and mib > args.naive_max:
                    continue
                times, rss, acct, chunking = [], 0, 0, None
                for rep in range(-1, reps):   # rep -1: warm-up (communicators, datatypes), not timed
                    gc.collect()
                    base = rss_kib("VmRSS")
                    # the only reference to the input is the Donated box: each method may free it
                    given = Donated(block_values(src if method in ("naive", "alltoallv") else ours.src, rank, C))
                    reset_hwm()
                    comm.Barrier()
                    t0 = time.perf_counter()
                    if method == "alltoallv":
                        y = direct.run(given)
                        held = direct.peak
                    else:
                        p = naive if method == "naive" else ours
                        res = redistribute(p, given, budget_bytes=budget,
                                           chunks=None if method == "chunked" else 1)
                        y, held, chunking = res.output, res.peak_bytes, res.chunking
                        del res
                    t1 = time.perf_counter()
                    comm.Barrier()
                    hwm = rss_kib("VmHWM")
                    slowest = comm.allreduce(t1 - t0, op=MPI.MAX)
                    if rep >= 0:
                        times.append(slowest)
                    if rep >= 0:  # the warm-up run also pays MPI's one-time buffers (shared segments)
                        rss = max(rss, comm.allreduce(hwm - base, op=MPI.MAX))
                    acct = max(acct, comm.allreduce(held, op=MPI.MAX))
                    if rep == -1:
                        want_t = dst if method in ("naive", "alltoallv") else ours.dst
                        ok = bool(np.array_equal(y, block_values(want_t, rank, C)))
                        if not comm.allreduce(ok, op=MPI.LAND):
                            raise SystemExit(f"{name} {mib} MiB {method}: wrong result")
                    del y
                plan = naive if method == "naive" else None if method == "alltoallv" else ours
                results.append({"case": name, "mib": mib, "method": method, "seconds": statistics.median(times),
                                "rss": rss * 1024, "held": acct, "bound": bound,
                                "refined": chunking.refined if chunking is not None else None,
                                "ks": chunking.ks if chunking is not None else None,
                                "written": written_bytes(ours, 4),
                                "steps": len(plan.steps) if plan else 1})
                log(f"{name:26s} {mib:5d} MiB {method:9s} {statistics.median(times) * 1e3:9.1f} ms  "
                    f"peak RSS {rss / 1024:7.1f} MiB = {rss * 1024 / bound:.3f} x bound "
                    f"k={chunking.ks if chunking is not None else '-'} "
                    f"({reps} reps, {time.monotonic() - started:.0f} s so far)")
            plans[name] = (str(ours.mesh), ", ".join(map(str, ours.collectives)), ours.guaranteed)
    if rank == 0:
        write_report(args, results, plans, rates, hwm_ok, size, time.monotonic() - started)


def write_report(args, results, plans, rates, hwm_ok, size, seconds) -> None:
    from mpi4py import MPI
    by = {(r["case"], r["mib"], r["method"]): r for r in results}
    cmd = f"python bench/runtime.py --sizes {args.sizes}" + (f" --naive-max {args.naive_max}"
                                                             if args.naive_max != 256 else "") \
        + (f" --budget {args.budget:g}" if args.budget else "")
    lines = ["# MPI runtime benchmark", "",
             f"`{cmd}` ({size} ranks under `mpirun --oversubscribe`, "
             f"{os.cpu_count()} CPU cores, {platform.machine()}, "
             f"{MPI.get_vendor()[0]} {'.'.join(map(str, MPI.get_vendor()[1]))}, mpi4py, numpy {np.__version__}); "
             f"{seconds:.0f} s in all.", "",
             "Global arrays are float32, R x C with R = C. Times are the median over repetitions of the slowest rank "
             "(validation included). Methods: *chunked* is our plan run by `verishard.runtime.mpi.redistribute` "
             "with its default budget (every step in `k` pieces, each input piece released once used, "
             "`verishard.runtime.chunked`); *unchunked* the same plan with `chunks=1` (a step holds its input "
             "and output together); *naive* gathers everything then slices (unchunked); *alltoallv* one "
             "`MPI_Alltoallv` with packing. *peak RSS* is the most resident memory a rank gained during the "
             "run above the idle process (`VmHWM`, reset before each timed run, the warm-up run excluded; "
             "the input is donated), divided by "
             "*bound* = max(size(src), size(dst)) per rank; *refined* is the bound the chunked runtime "
             "reports (`result.chunking.refined`: per step max(in, out) + (min(in, out) + out [+ in when "
             "the pieces are strided]) / k). *copy bound*: the bytes our plan must write per rank (every "
             "moving step's output) at the copy rate one rank reaches while all ranks copy at once into a "
             "warm buffer, measured in the same run.", ""]
    if not hwm_ok:
        lines += ["**/proc/self/clear_refs was not writable: peak RSS figures are not per run.**", ""]
    lines += ["| MiB global | MiB per rank | copy rate per rank, warm / fresh |", "|---:|---:|---:|"]
    for mib in sorted(rates):
        w, f = rates[mib]
        lines.append(f"| {mib} | {mib / size:g} | {w / 1e9:.2f} / {f / 1e9:.2f} GB/s |")
    lines.append("")

    def cell(r, key, fmt):
        return "-" if r is None else fmt(r)

    for name, mesh_text, src_t, dst_t in CASES:
        mesh_s, plan_s, guaranteed = plans.get(name, ("?", "?", None))
        lines += [f"## {name}: `{symbolic(src_t)}` -> `{symbolic(dst_t)}` on {{{mesh_text.replace('=', ':')}}}", "",
                  f"ours ({'guaranteed' if guaranteed else 'not guaranteed'}, on {mesh_s}): {plan_s}", "",
                  "| MiB | bound MiB | k per step | peak RSS / bound: chunked / unchunked / naive / alltoallv "
                  "| refined / bound | ms: chunked / unchunked / naive / alltoallv | chunked / unchunked time "
                  "| copy bound ms | chunked / copy bound | unchunked / copy bound |",
                  "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for mib in sorted({r["mib"] for r in results if r["case"] == name}):
            c, u = by[(name, mib, "chunked")], by[(name, mib, "unchunked")]
            n, a = by.get((name, mib, "naive")), by[(name, mib, "alltoallv")]
            copy_s = c["written"] / rates[mib][0]
            rss = " / ".join(cell(r, "rss", lambda r: f"{r['rss'] / r['bound']:.2f}") for r in (c, u, n, a))
            ms = " / ".join(cell(r, "seconds", lambda r: f"{r['seconds'] * 1e3:.1f}") for r in (c, u, n, a))
            lines.append(f"| {mib} | {c['bound'] / MiB:.0f} | {', '.join(map(str, c['ks']))} | {rss} | "
                         f"{c['refined'] / c['bound']:.3f} | {ms} | {c['seconds'] / u['seconds']:.2f} | "
                         f"{copy_s * 1e3:.1f} | {c['seconds'] / copy_s:.1f} | {u['seconds'] / copy_s:.1f} |")
        lines.append("")
    big = max(r["mib"] for r in results)
    lines += [f"## Summary at {big} MiB", "",
              "| redistribution | peak RSS / bound chunked | unchunked | chunked / unchunked time | "
              "chunked / copy bound | alltoallv / chunked time |", "|---|---:|---:|---:|---:|---:|"]
    for name, *_ in CASES:
        c, u, a = by[(name, big, "chunked")], by[(name, big, "unchunked")], by[(name, big, "alltoallv")]
        lines.append(f"| {name} | {c['rss'] / c['bound']:.2f} | {u['rss'] / u['bound']:.2f} | "
                     f"{c['seconds'] / u['seconds']:.2f} | {c['seconds'] / (c['written'] / rates[big][0]):.1f} | "
                     f"{a['seconds'] / c['seconds']:.2f} |")
    lines += ["", "Caveats: 8 ranks share the machine's cores (oversubscribed, other jobs may run), so times "
              "vary from run to run (by up to several times under load), most at small sizes where a "
              "collective's latency (processes waiting for a core) dominates; the memory figures are stable. "
              "Our steps use MPI derived datatypes (no full-size packing buffers); chunked, each piece moves "
              "straight from the input buffer into the step's lazily allocated output through datatypes of "
              "its rows, the piece's output pages made resident in one call just before it is received "
              "(transparent huge pages where a piece is one run of 16 MiB or more). The "
              "alltoallv baseline packs and unpacks, and sends each element once per rank that needs it."]
    text = "\n".join(lines) + "\n"
    emit_report(text, args.out)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.worker:
        return launch(args)
    from verishard.runtime.mpi import guarded
    return guarded(lambda: worker(args))


if __name__ == "__main__":
    sys.exit(main())
