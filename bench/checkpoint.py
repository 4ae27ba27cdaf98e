"""Checkpoint resharding benchmark: a 1 GiB float32 array (16384 x 16384)
saved from 8 ranks (rows 8-way), loaded onto 6 ranks with another mesh and
type, three ways in one run:

* *ours*: ``verishard.checkpoint.load`` (reads the 16 KiB chunks of the
  pieces the verified cross-mesh schedule assigns the rank);
* *naive*: read every file into the full array, then slice;
* *DCP*: ``torch.distributed.checkpoint``: the same global tensor saved by
  ``dcp.save`` as a DTensor ``Shard(0)`` over 8 gloo processes, loaded by
  ``dcp.load`` into a DTensor with the target layout on 6 gloo processes
  (DCP reshards on load).

    .venv/bin/python bench/checkpoint.py             # 1 GiB; writes bench/results/checkpoint.md
    .venv/bin/python bench/checkpoint.py --mib 64 --out /tmp/ck.md   # a quick run

Per rank: the peak RSS of the load above the process's RSS just before it
(``VmHWM`` reset through ``/proc/self/clear_refs``), the bytes read
(``rchar`` of ``/proc/self/io`` around the load: every byte passed through
read()/pread(), page cache or not), the wall time, the CPU seconds
(``getrusage``) and the time the main thread waited for a core
(``/proc/self/schedstat``: the machine is shared). Ours and the naive way run
one process per target rank, one at a time; DCP's 6 ranks run at once (its
load is collective), and so, for the comparison with it, do ours once more.
Every load runs ``--reps`` times (3) in fresh processes, after a warm-up load
of a 48 x 48 checkpoint in the same process. Every loaded block is compared,
bit for bit, with the expected block. About 6 minutes on 2 busy cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

from verishard import ArrayType, Mesh, checkpoint  # noqa: E402
from procmem import reset_hwm, rss_kib  # noqa: E402  (bench/: this script's directory)

SRC_MESH = "x=8"
SRC_DCP = ((8,), ("x",), "S0")                       # DeviceMesh shape, names, placements
CASES = [  # (target mesh, target type builder, DCP placements, what)
    ("u=3,v=2", lambda n: f"[{-(-n // 3)}{{u}}{n}, {n // 2}{{v}}{n}]", "S0,S1",
     "rows 8-way to a 3x2 grid (uneven rows)"),
    ("u=6", lambda n: f"[{n}, {-(-n // 6)}{{u}}{n}]", "S1",
     "rows 8-way to columns 6-way (uneven, narrow runs)"),
]
TIMEOUT = 1800
WARM = 48   # the warm-up checkpoints: 48 x 48, the same layouts


def case_type(case: int, n: int) -> tuple[str, ArrayType]:
    mesh, tb = CASES[case][:2]
    return mesh, ArrayType.parse(tb(n), mesh)


def value_block(t: ArrayType, r: int) -> np.ndarray:
    """Rank r's block of the float32 array whose element (i, j) has the bit
    pattern i * n + j (uint32; every element distinct, no NaN below 2^31),
    computed without the whole array."""
    n = t.global_shape[1]
    (s0, s1), (l0, l1) = t.block_starts(r), t.valid_shape(r)
    i = np.arange(s0, s0 + l0, dtype=np.uint32)[:, None]
    j = np.arange(s1, s1 + l1, dtype=np.uint32)[None, :]
    return (i * np.uint32(n) + j).view(np.float32)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def rchar() -> int:
    """Bytes this process has passed through read()/pread() (``/proc/self/io``)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def schedstat() -> tuple[float, float]:
    """Seconds the main thread ran on a core and waited for one (``/proc/self/schedstat``)."""
    with open("/proc/self/schedstat") as f:
        run, wait = f.read().split()[:2]
    return int(run) / 1e9, int(wait) / 1e9


class Probe:
    """Peak RSS above the RSS at the start, bytes read, seconds and the
    process's CPU seconds (user, system; all its threads), around one load."""

    def __enter__(self):
        if not reset_hwm():
            raise SystemExit("cannot reset the peak RSS (/proc/self/clear_refs)")
        self.before = rss_kib() * 1024
        self.r0 = rchar()
        self.u0 = resource.getrusage(resource.RUSAGE_SELF)
        self.s0 = schedstat()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        s1 = schedstat()
        self.ran, self.waited = s1[0] - self.s0[0], s1[1] - self.s0[1]
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        self.user, self.sys = u1.ru_utime - self.u0.ru_utime, u1.ru_stime - self.u0.ru_stime
        self.read = rchar() - self.r0
        self.peak = max(0, rss_kib("VmHWM") * 1024 - self.before)

    def result(self, **kw) -> dict:
        return {"seconds": self.seconds, "peak_delta": self.peak, "rchar": self.read, "user": self.user,
                "sys": self.sys, "ran": self.ran, "waited": self.waited, **kw}


def wait_for_go() -> None:
    """Concurrent runs: say ready, start when the parent says go (all ranks at once)."""
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")


# --- ours and the naive way (one process per target rank) ---------------------

def _load(mode: str, path: str, mesh: str, t: ArrayType, rank: int, stats: dict) -> np.ndarray:
    if mode == "ours":
        return checkpoint.load(path, mesh, t, rank, stats=stats)
    # naive: read every file into the full array, then slice
    man = checkpoint.read_manifest(path)
    full = np.empty(man["_type"].global_shape, dtype=man["_dtype"])
    for e in man["files"]:
        blk = np.fromfile(os.path.join(path, e["file"]), dtype=man["_dtype"]).reshape(e["shape"])
        full[tuple(slice(s, s + l) for s, l in zip(e["start"], e["shape"]))] = blk
        stats["bytes_read"] = stats.get("bytes_read", 0) + blk.nbytes
        del blk
    out = full[tuple(slice(s, s + l) for s, l in zip(t.block_starts(rank), t.valid_shape(rank)))].copy()
    del full
    return out


def worker(mode: str, path: str, case: int, n: int, rank: int, concurrent: bool, trace: bool) -> None:
    """One load, measured, after a warm-up load of the 48 x 48 checkpoint;
    with ``trace``, the same load again under tracemalloc (numpy's
    allocations are traced) for its peak allocation."""
    import tracemalloc
    mesh, t = case_type(case, n)
    w0 = time.perf_counter()
    _load(mode, path + "-warm", mesh, case_type(case, WARM)[1], rank, {})
    warm_s = time.perf_counter() - w0
    if concurrent:
        wait_for_go()
    stats: dict = {}
    with Probe() as pr:
        out = _load(mode, path, mesh, t, rank, stats)
    ok = same(out, value_block(t, rank))
    nbytes = out.nbytes
    del out
    traced = None
    if trace:
        tracemalloc.start()
        again = _load(mode, path, mesh, t, rank, {})
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del again
    print(json.dumps(pr.result(traced=traced, bytes_read=stats["bytes_read"], target_bytes=nbytes, ok=ok,
                               warm_s=warm_s)))


# --- torch.distributed.checkpoint (one gloo process per rank) ------------------

def _dcp_setup(mesh_shape, names, placements):
    import torch.distributed as dist
    from datetime import timedelta
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    dm = init_device_mesh("cpu", tuple(mesh_shape), mesh_dim_names=tuple(names))
    return dist, dm, [Shard(int(p[1:])) for p in placements.split(",")]


def src_type(n: int) -> ArrayType:
    return ArrayType.parse(f"[{n // 8}{{x}}{n}, {n}]", SRC_MESH)


def dcp_save_worker(path: str, n: int) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor
    dist, dm, pl = _dcp_setup(*SRC_DCP)
    r = dist.get_rank()
    for size, where in ((WARM, path + "-warm"), (n, path)):
        local = torch.from_numpy(value_block(src_type(size), r))
        dt = DTensor.from_local(local, dm, pl, run_check=False)
        dist.barrier()
        with Probe() as pr:
            dcp.save({"a": dt}, checkpoint_id=where)
        del dt, local
    dist.destroy_process_group()
    print(json.dumps(pr.result()))


def dcp_load_worker(path: str, case: int, n: int) -> None:
    """A warm-up load of the 48 x 48 checkpoint (imports, connections), then the load, measured."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import empty as dt_empty
    mesh, t = case_type(case, n)
    m = Mesh.parse(mesh)
    dist, dm, pl = _dcp_setup(m.axis_sizes, m.axis_names, CASES[case][2])
    r = dist.get_rank()
    w0 = time.perf_counter()
    warm = dt_empty(WARM, WARM, dtype=torch.float32, device_mesh=dm, placements=pl)
    dcp.load({"a": warm}, checkpoint_id=path + "-warm")
    warm_s = time.perf_counter() - w0
    if not same(warm.to_local().numpy(), value_block(case_type(case, WARM)[1], r)):
        raise SystemExit("warm-up: wrong values")
    del warm
    dist.barrier()
    with Probe() as pr:
        dt = dt_empty(*t.global_shape, dtype=torch.float32, device_mesh=dm, placements=pl)
        dcp.load({"a": dt}, checkpoint_id=path)
    local = dt.to_local().numpy()
    ok = same(local, value_block(t, r))
    nbytes = local.nbytes
    del local, dt
    dist.destroy_process_group()
    print(json.dumps(pr.result(target_bytes=nbytes, ok=ok, warm_s=warm_s)))


# --- the parent ----------------------------------------------------------------

def run_group(argvs: list[list[str]], envs: list[dict] | None = None,
              handshake: bool = False) -> tuple[list[dict], float]:
    """Start one process per argv at once; their results and the wall time
    (from "go" for a handshake, otherwise from the start)."""
    errs, procs = [], []
    for k, argv in enumerate(argvs):
        err = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, **(envs[k] if envs else {}))
        procs.append(subprocess.Popen([sys.executable, __file__, *argv], stdin=subprocess.PIPE if handshake else
                                      subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True, env=env))
        errs.append(err)
    t0 = time.perf_counter()
    if handshake:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker did not start")
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
    outs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    wall = time.perf_counter() - t0
    for p, out, err in zip(procs, outs, errs):
        if p.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"worker {p.args[2:]} failed ({p.returncode}):\n{err.read()[-4000:]}")
    return [json.loads(o.strip().splitlines()[-1]) for o in outs], wall


def dist_envs(world: int) -> list[dict]:
    from verishard.runtime.torch import free_port
    port = str(free_port())
    return [{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r), "WORLD_SIZE": str(world),
             "LOCAL_RANK": str(r)} for r in range(world)]


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def machine() -> str:
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 2 ** 20
    import torch  # noqa: F401  (the version only)
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB memory (shared with other jobs), Linux "
            f"{platform.release()}, Python {platform.python_version()}, numpy {np.__version__}, "
            f"torch {sys.modules['torch'].__version__} (CPU, gloo)")


def busy() -> str:
    """Load of the machine before the run (other jobs share it)."""
    with open("/proc/loadavg") as f:
        la = f.read().split()[:3]
    text = f"load average {', '.join(la)} (1, 5, 15 min) when the run started"
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()
        text += f", CPU pressure {some[2].split('=')[1]}% over the last minute (time some task waited for a core)"
    except OSError:
        pass
    return text


def median(v: list[float]) -> float:
    return float(np.median(v))


def merge(reps: list[list[dict]]) -> list[dict]:
    """Per rank over the repetitions: the median of the times (and CPU
    seconds), the largest peak and read, the first traced peak."""
    out = []
    for r in range(len(reps[0])):
        xs = [rr[r] for rr in reps]
        m = dict(xs[0])
        for x in xs:
            x["cpu"] = x["user"] + x["sys"]
        for key in ("seconds", "user", "sys", "cpu", "ran", "waited"):
            m[key] = median([x[key] for x in xs])
        for key in ("peak_delta", "rchar", "warm_s"):
            m[key] = max(x[key] for x in xs)
        m["ok"] = all(x["ok"] for x in xs)
        out.append(m)
    return out


def ratio_range(res: list[dict], key: str) -> str:
    v = [x[key] / x["target_bytes"] for x in res]
    return f"{min(v):.2f}-{max(v):.2f}"


def whole_shards(src: ArrayType, t: ArrayType, r: int) -> int:
    """Bytes of the source blocks that target block r overlaps: what a reader
    that reads whole source blocks (DCP's FileSystemReader) reads."""
    total = 0
    for s in range(8):
        if all(max(a, b) < min(a + la, b + lb) for a, la, b, lb in
               zip(src.block_starts(s), src.valid_shape(s), t.block_starts(r), t.valid_shape(r))):
            total += int(np.prod(src.valid_shape(s))) * 4
    return total


def dcp_peak_model(src: ArrayType, t: ArrayType, r: int) -> int:
    """DCP's peak for target block r if its reader holds, while ``torch.load``
    reads the next overlapping source shard whole, the previous one (the
    loop variable still refers to it) and the part of the block filled so
    far: max over shards k of filled(<k) + shard(k-1) + shard(k)."""
    shards, filled, prev, peak = [], 0, 0, 0
    for s in range(8):
        lo = [max(a, b) for a, b in zip(src.block_starts(s), t.block_starts(r))]
        hi = [min(a + la, b + lb) for a, la, b, lb in
              zip(src.block_starts(s), src.valid_shape(s), t.block_starts(r), t.valid_shape(r))]
        if all(x < y for x, y in zip(lo, hi)):
            shards.append((int(np.prod(src.valid_shape(s))) * 4, int(np.prod([y - x for x, y in zip(lo, hi)])) * 4))
    for whole, inter in shards:
        peak = max(peak, filled + prev + whole, filled + inter + whole)
        filled += inter
        prev = whole
    return peak


def notes(summary: list[dict], src: ArrayType, n: int, save_s: float, dcp_save_s: float, load: str) -> list[str]:
    """What the figures say, ours' weak points first (derived from the figures, not written in advance)."""
    out = ["## Reading the figures", ""]
    worse = []

    def on(ranks):
        return "on every rank" if len(ranks) == 6 else f"on rank{'s' if len(ranks) > 1 else ''} " + \
            ", ".join(map(str, ranks))

    for c in summary:
        t, ours, naive, conc, dcp = c["t"], c["ours"], c["naive"], c["conc"], c["dcp"]
        rd = [x["rchar"] / x["target_bytes"] for x in ours]
        if max(rd) > 1.05:
            runs = sorted({t.valid_shape(r)[1] * 4 for r in range(6)})
            worse.append(f"*{c['what']}*: ours reads {min(rd):.2f}-{max(rd):.2f} x its block, not 1: a digest "
                         f"covers a 16 KiB chunk, so a row's run of {'/'.join(map(str, runs))} bytes (of a "
                         f"{n * 4}-byte file row) costs the one or two whole chunks it lies in")
        for k, res in (("DCP", dcp), ("the naive way", naive)):
            for key, name in (("rchar", "reads more"), ("peak_delta", "peaks higher")):
                bad = [r for r in range(6) if ours[r][key] > res[r][key]]
                if bad:
                    worse.append(f"*{c['what']}*: ours {name} than {k} {on(bad)}")
        for k, a, b in (("alone, the naive way", naive, ours), ("6 at once, DCP", dcp, conc)):
            for key, name in (("seconds", "took less time"), ("cpu", "used fewer CPU seconds")):
                slow = [r for r in range(6) if a[r][key] < b[r][key]]
                if slow:
                    worse.append(f"*{c['what']}*: {k} {name} than ours {on(slow)}")
    if save_s > dcp_save_s:
        worse.append(f"saving: ours took {save_s:.2f} s against DCP's {dcp_save_s:.2f} s (ours: 8 ranks one after "
                     "the other in one process, with digests; DCP: 8 processes at once on 2 cores)")
    out += ["Where ours is worse:", ""] + [f"- {w}." for w in worse] + [""] if worse else \
        ["Ours is not worse than DCP or the naive way on any rank in any measure of this run.", ""]
    out += ["Per case:", ""]
    for c in summary:
        t, dcp, conc, ours = c["t"], c["dcp"], c["conc"], c["ours"]
        exp = [whole_shards(src, t, r) / dcp[r]["target_bytes"] for r in range(6)]
        got = [x["rchar"] / x["target_bytes"] for x in dcp]
        pk = [x["peak_delta"] / x["target_bytes"] for x in dcp]
        mod = [dcp_peak_model(src, t, r) / dcp[r]["target_bytes"] for r in range(6)]
        out.append(f"- *{c['what']}*: DCP read {min(got):.2f}-{max(got):.2f} x the block; the source "
                   f"blocks each rank's block overlaps, whole, are {min(exp):.2f}-{max(exp):.2f} x: its "
                   "FileSystemReader `torch.load`s every overlapping saved shard "
                   f"({src.valid_shape(0)[0] * n * 4 / 2 ** 20:.0f} MiB each) whole, then narrows it and copies "
                   f"the piece into the block. Its peak, {min(pk):.2f}-{max(pk):.2f} x, against "
                   f"{min(mod):.2f}-{max(mod):.2f} x for the part of the block filled so far plus two whole "
                   "shards (the previous one is still referenced by the reader's loop variable while the next "
                   "is read). Ours' "
                   "peak above 1 is its 8 MiB read buffer and the parsed manifest (one digest string per 16 KiB "
                   f"chunk: {n * n * 4 // (16 << 10)} here). CPU: ours computes a blake2b digest of every chunk "
                   f"it reads ({sum(x['cpu'] for x in ours) / sum(x['rchar'] for x in ours) * 2 ** 30:.2f} CPU s "
                   f"per GiB read, alone; {sum(x['user'] for x in ours) / sum(x['cpu'] for x in ours):.0%} "
                   "user time); DCP checks nothing on load, and "
                   f"{sum(x['sys'] for x in dcp) / sum(x['cpu'] for x in dcp):.0%} of its CPU seconds are system "
                   f"time ({sum(x['cpu'] for x in dcp) / sum(x['rchar'] for x in dcp) * 2 ** 30:.2f} CPU s per "
                   "GiB read; system time: the kernel copying out of the page cache, faults on fresh pages).")
    def waited(key):
        res = [x for c in summary for x in c[key]]
        return sum(x["waited"] for x in res) / sum(x["seconds"] for x in res)
    out += ["", f"Times: the machine is shared ({load}). Over all the loads timed, the ranks' main threads "
            f"waited for a core {waited('ours'):.0%} of ours' *alone* time, {waited('naive'):.0%} of the naive "
            f"way's, {waited('conc'):.0%} of ours' *6 at once* and {waited('dcp'):.0%} of DCP's "
            "(`/proc/self/schedstat`): the wall times depend on the other jobs as much as on the readers. "
            "The CPU seconds (user + system, every thread of the process, `getrusage`) are the load's own "
            "work and the steadier comparison; the *6 at once* runs are the only comparison with DCP, whose "
            "load needs all its ranks."]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024, help="size of the array in MiB (default 1024: 16384 x 16384)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "checkpoint.md"))
    ap.add_argument("--tmp", default=None, help="directory for the checkpoints (default: a fresh temporary one)")
    ap.add_argument("--worker", nargs=5, metavar=("MODE", "PATH", "CASE", "N", "RANK"))
    ap.add_argument("--reps", type=int, default=3, help="repetitions of every timed load (median reported)")
    ap.add_argument("--concurrent", action="store_true")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--dcp-save", nargs=2, metavar=("PATH", "N"))
    ap.add_argument("--dcp-load", nargs=3, metavar=("PATH", "CASE", "N"))
    args = ap.parse_args()
    if args.worker:
        mode, path, case, n, rank = args.worker
        worker(mode, path, int(case), int(n), int(rank), args.concurrent, args.trace)
        return 0
    if args.dcp_save:
        dcp_save_worker(args.dcp_save[0], int(args.dcp_save[1]))
        return 0
    if args.dcp_load:
        dcp_load_worker(args.dcp_load[0], int(args.dcp_load[1]), int(args.dcp_load[2]))
        return 0

    start = time.perf_counter()
    load_at_start = busy()
    n = int(round((args.mib * 2 ** 20 / 4) ** 0.5))
    n -= n % 8        # 8 even source blocks (the target blocks are uneven)
    if n * n >= 2 ** 31:
        raise SystemExit("at most 8 GiB (the values are the element's index as a float32 bit pattern)")
    tmp = tempfile.mkdtemp(prefix="vs-ckpt-", dir=args.tmp)
    ours_dir, dcp_dir = os.path.join(tmp, "ours"), os.path.join(tmp, "dcp")
    try:
        src = src_type(n)
        checkpoint.save(np.concatenate([value_block(src_type(WARM), r) for r in range(8)]), SRC_MESH,
                        src_type(WARM), ours_dir + "-warm")
        t0 = time.perf_counter()
        for r in range(8):   # the 8 saving ranks, one after the other (each writes only its block)
            checkpoint.save(value_block(src, r), SRC_MESH, src, ours_dir, rank=r, save_id="bench")
        checkpoint.commit(ours_dir, "bench")
        save_s = time.perf_counter() - t0
        dsave, dsave_wall = run_group([["--dcp-save", dcp_dir, str(n)]] * 8, dist_envs(8))
        print(f"saved: ours {save_s:.1f} s, DCP {dsave_wall:.1f} s", flush=True)
        total = n * n * 4
        lines = ["# Checkpoint resharding", "",
                 f"Command: `.venv/bin/python bench/checkpoint.py{'' if args.mib == 1024 else f' --mib {args.mib}'}` "
                 "(`make bench`), one run.", "",
                 f"Machine: {machine()}; {load_at_start}.", "",
                 f"A {n}x{n} float32 array ({total / 2 ** 20:.0f} MiB) saved from 8 ranks as `{src}` on `{{x:8}}`, "
                 f"loaded onto 6 ranks with two other types. Element (i, j) has the bit pattern i*{n}+j, so every "
                 "element is distinct; every block loaded, by every method, was compared bit for bit with the "
                 "expected block (all equal, or the run stops).", "",
                 "Saving (not the subject; for reference): *ours* "
                 f"{save_s:.1f} s, the 8 ranks one after the other in one process (sha256 of each file, a "
                 f"blake2b digest per 16 KiB chunk, fsync), {du(ours_dir) / 2 ** 20:.1f} MiB on disk; *DCP* "
                 f"`dcp.save` of a DTensor `[Shard(0)]` on a DeviceMesh (8,) of 8 gloo processes at once: "
                 f"{max(d['seconds'] for d in dsave):.1f} s (slowest rank), {du(dcp_dir) / 2 ** 20:.1f} MiB "
                 "on disk.", "",
                 "The three loads, onto the same 6-rank target types:", "",
                 "- *ours*: `verishard.checkpoint.load(path, mesh, type, rank)`: reads the 16 KiB chunks of "
                 "the pieces the verified schedule assigns the rank (each chunk's digest checked) through an "
                 "8 MiB read buffer into the target block;",
                 "- *naive*: read every file into the full array, then slice;",
                 "- *DCP*: `torch.distributed.tensor.empty` of the target DTensor (the placements in each "
                 "heading, on a DeviceMesh of the target mesh's shape) and `dcp.load` into it, on 6 gloo "
                 "processes at once (DCP's load is collective: plans are gathered and scattered).", "",
                 "Measures, per rank, each in the rank's own process: *peak / target*: the peak RSS "
                 "during the load (`VmHWM`, reset through `/proc/self/clear_refs` just before) minus the "
                 "RSS just before it (interpreter, imports, process group), over the target block's bytes; "
                 "*read / target*: `rchar` of `/proc/self/io` over the load (every byte passed through "
                 "read()/pread(): the checkpoint's data, manifest or metadata, and anything else read "
                 "through read() such as gloo's sockets), over the target block's bytes. `rchar`, not "
                 "`read_bytes`: the files were just written and sit in the page cache (the machine has "
                 "memory to spare), so `read_bytes` (what reached the block device) is about 0 for every "
                 "method and tells nothing; `rchar` counts what each method asks for, cached or not. *CPU s*: "
                 "user + system seconds of the process over the load (`getrusage`, all its threads). "
                 "*Traced peak*: tracemalloc's peak over a second, identical load (numpy's buffers are "
                 "traced), ours alone. Times: ours and naive *alone*: one process per rank, one at a time, "
                 "the load only (imports excluded); *6 at once*: the 6 ranks' processes started together "
                 "and released at the same moment (ours), or after a barrier (DCP); the job's time is the "
                 "slowest rank's. The 2 cores are shared by the 6 processes in the *6 at once* runs. Every "
                 f"process first loads a {WARM}x{WARM} checkpoint of the same layouts (saved the same way; "
                 "for DCP after a warm-up `dcp.save` too), so that imports, gloo connections and first-call "
                 "setup are not in the figures; that warm-up's time is given below each case. Every load "
                 f"runs {args.reps} times, each time in fresh processes: times (and CPU seconds) are the "
                 "median per rank, peaks and reads the largest, the traced peak the first run's.", ""]
        summary = []
        for case, (mesh, tb, pls, what) in enumerate(CASES):
            t = case_type(case, n)[1]
            runs: dict[str, list[list[dict]]] = {"ours": [], "naive": [], "conc": [], "dcp": []}
            for k in range(args.reps):
                for mode in ("ours", "naive"):
                    runs[mode].append([run_group([["--worker", mode, ours_dir, str(case), str(n), str(r)]
                                                  + (["--trace"] if k == 0 else [])])[0][0] for r in range(6)])
                runs["conc"].append(run_group([["--worker", "ours", ours_dir, str(case), str(n), str(r),
                                                "--concurrent"] for r in range(6)], handshake=True)[0])
                runs["dcp"].append(run_group([["--dcp-load", dcp_dir, str(case), str(n)]] * 6, dist_envs(6))[0])
                print(what, f"repetition {k}:", {m: [round(x["seconds"], 2) for x in v[-1]] for m, v in runs.items()},
                      flush=True)
            for k, res in runs.items():
                bad = sorted({r for rr in res for r, x in enumerate(rr) if not x["ok"]})
                if bad:
                    raise SystemExit(f"{what}: {k} loaded wrong values on ranks {bad}")
            jobs = {k: [max(x["seconds"] for x in rr) for rr in res] for k, res in runs.items()}
            ours, naive, conc, dcp = (merge(runs[k]) for k in ("ours", "naive", "conc", "dcp"))
            placements = ", ".join(f"Shard({p[1:]})" for p in pls.split(","))
            lines += [f"## {what}: `{t}` on `{Mesh.parse(mesh)}` (DCP: `[{placements}]`)", "",
                      "| rank | target MiB | peak / target: ours | naive | DCP | ours traced "
                      "| read / target: ours | naive | DCP |",
                      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for r in range(6):
                tb_ = ours[r]["target_bytes"]
                lines.append(f"| {r} | {tb_ / 2 ** 20:.1f} | {ours[r]['peak_delta'] / tb_:.2f} | "
                             f"{naive[r]['peak_delta'] / tb_:.2f} | {dcp[r]['peak_delta'] / tb_:.2f} | "
                             f"{ours[r]['traced'] / tb_:.2f} | {ours[r]['rchar'] / tb_:.3f} | "
                             f"{naive[r]['rchar'] / tb_:.2f} | {dcp[r]['rchar'] / tb_:.2f} |")
            lines += ["", "| rank | alone: ours s | CPU s | naive s | CPU s | 6 at once: ours s | CPU s | DCP s "
                      "| CPU s |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for r in range(6):
                lines.append(f"| {r} | " + " | ".join(f"{x[r]['seconds']:.2f} | {x[r]['cpu']:.2f}"
                                                      for x in (ours, naive, conc, dcp)) + " |")

            def tot(res, key):
                return sum(x[key] for x in res)

            def each(v):
                return ", ".join(f"{x:.2f}" for x in v)

            def waited(res):
                return tot(res, "waited") / tot(res, "seconds")
            co, cd = median(jobs["conc"]), median(jobs["dcp"])
            so, sv = tot(ours, "seconds"), tot(naive, "seconds")
            lines += ["", f"6-rank job at once (slowest rank, median of {args.reps}): ours {co:.2f} s, DCP {cd:.2f} s "
                      f"(repetitions: ours {each(jobs['conc'])}; DCP {each(jobs['dcp'])}); CPU seconds, all ranks: "
                      f"ours {tot(conc, 'cpu'):.2f}, DCP {tot(dcp, 'cpu'):.2f}. One after the other (sums of the "
                      f"medians): ours {so:.2f} s ({tot(ours, 'cpu'):.2f} CPU s), naive {sv:.2f} s "
                      f"({tot(naive, 'cpu'):.2f} CPU s). Share of the time the ranks' main threads waited for a "
                      f"core: ours {waited(ours):.0%} alone, {waited(conc):.0%} at once; naive {waited(naive):.0%}; "
                      f"DCP {waited(dcp):.0%}. System share of the CPU seconds: ours "
                      f"{tot(ours, 'sys') / tot(ours, 'cpu'):.0%} "
                      f"alone, {tot(conc, 'sys') / tot(conc, 'cpu'):.0%} at once; naive "
                      f"{tot(naive, 'sys') / tot(naive, 'cpu'):.0%}; DCP {tot(dcp, 'sys') / tot(dcp, 'cpu'):.0%}. "
                      f"Ours' own count of bytes read (whole chunks): "
                      f"{tot(ours, 'bytes_read') / tot(ours, 'target_bytes'):.3f} x the targets in all. Warm-up "
                      f"({WARM}x{WARM}, first call in the process): ours up to "
                      f"{max(x['warm_s'] for x in ours + conc):.2f} s, DCP up to "
                      f"{max(x['warm_s'] for x in dcp):.2f} s.",
                      ""]
            summary.append(dict(what=what, t=t, ours=ours, naive=naive, conc=conc, dcp=dcp,
                                naive_ours=sv / so, naive_ours_cpu=tot(naive, "cpu") / tot(ours, "cpu"),
                                dcp_ours=cd / co, dcp_ours_cpu=tot(dcp, "cpu") / tot(conc, "cpu")))
        lines += ["## Summary", "",
                  "Ratios to the target block's bytes (range over the 6 ranks), and times of the other method "
                  "over ours: wall (alone: sum over the ranks; at once: the slowest rank) and CPU seconds (sum "
                  "over the ranks).", "",
                  "| case | peak: ours | naive | DCP | read: ours | naive | DCP "
                  "| naive / ours alone: wall | CPU | DCP / ours at once: wall | CPU |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in summary:
            lines.append(f"| {c['what']} | " + " | ".join(ratio_range(c[k], key) for key in ("peak_delta", "rchar")
                                                          for k in ("ours", "naive", "dcp"))
                         + f" | {c['naive_ours']:.1f} | {c['naive_ours_cpu']:.1f} | {c['dcp_ours']:.1f} "
                         f"| {c['dcp_ours_cpu']:.1f} |")
        lines += ["", *notes(summary, src, n, save_s, max(d["seconds"] for d in dsave), load_at_start)]
        lines += ["", f"Whole run: {time.perf_counter() - start:.0f} s.", ""]
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            f.write("\n".join(lines))
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
