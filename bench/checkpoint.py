"""Checkpoint benchmark: the state dict of a small transformer with Adam
state and a step counter (``--state bf16``, the default: the weights in
bfloat16, Adam's two moments in float32 and one float8 tensor set, the
weights again in float8_e4m3fn: 168 tensors; ``--state float32``: the 126
tensors of weights and moments in float32, about ``--mib`` MiB, default 512,
which sets the model's width for both states), saved
from 8 gloo ranks as DTensors ``[Shard(0)]`` (FSDP-like), loaded onto 1, 3, 6
and 8 ranks with other layouts (whole; columns; a 3x2 grid; columns), four
ways in one run:

* *ours*: ``verishard.checkpoint.load`` of our checkpoint (``checkpoint.save``
  of the same DTensors): each rank reads the pieces of its blocks the
  verified cross-mesh schedule assigns it, checking each tile's digest;
* *naive*: load everything (``checkpoint.load(path)``), then slice;
* *DCP*: ``torch.distributed.checkpoint.load`` of DCP's checkpoint (``dcp.save``
  of the same DTensors) into DTensors with the target placements, on N gloo
  processes at once (DCP's load is collective);
* *ours on DCP's files*: ``verishard.checkpoint.load`` of DCP's directory,
  read as it is.

    .venv/bin/python bench/checkpoint.py                     # bf16 state; writes bench/results/checkpoint.md
    .venv/bin/python bench/checkpoint.py --state float32 --out bench/results/checkpoint_float32.md
    .venv/bin/python bench/checkpoint.py --mib 64 --out /tmp/ck.md   # a quick run

Per rank: the peak RSS of the load above the RSS just before it (``VmHWM``
reset through ``/proc/self/clear_refs``) over the rank's target state
(the bytes of its blocks of every tensor), the bytes read (``rchar`` of
``/proc/self/io``: every byte passed through read()/pread(), page cache or
not; and ours' own count) over the target state, wall and CPU seconds.
Ours, naive and ours-on-DCP run one process per rank, one rank at a time
(*alone*), and ours once more with all N ranks at once (*at once*, the
comparison with DCP). Every loaded block is compared with the expected one
(values computed from the element's index, then rounded to the tensor's dtype).
"""

from __future__ import annotations

import argparse
import json
import math
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

from verishard import ArrayType, checkpoint, dtypes  # noqa: E402
from verishard.checkpoint import nest  # noqa: E402
from procmem import reset_hwm, rss_kib  # noqa: E402  (bench/: this script's directory)

LAYERS, VOCAB = 4, 8192
SAVERS = 8
LOADERS = (1, 3, 6, 8)
TIMEOUT = 1800


# --- the state ---------------------------------------------------------------------

def width(mib: int) -> int:
    """The model width D whose state (parameters and two Adam moments, float32) has about ``mib`` MiB."""
    a, b = 3 * 4 * LAYERS * 12, 3 * 4 * (LAYERS * 6 + VOCAB + 1)
    d = (-b + math.sqrt(b * b + 4 * a * mib * 2 ** 20)) / (2 * a)
    return max(64, int(round(d / 64)) * 64)


def params(d: int) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    out = [(("embed",), (VOCAB, d))]
    for i in range(LAYERS):
        layer = ("layers", str(i))
        out += [(layer + ("attn", w), (d, d)) for w in ("q", "k", "v", "o")]
        out += [(layer + ("mlp", "up"), (d, 4 * d)), (layer + ("mlp", "down"), (4 * d, d)),
                (layer + ("mlp", "up_bias"), (4 * d,)), (layer + ("mlp", "down_bias"), (d,)),
                (layer + ("ln1",), (d,)), (layer + ("ln2",), (d,))]
    return out + [(("norm",), (d,))]


# the dtypes of a state: (weights, Adam's moments, the float8 set or None)
STATES = {"bf16": ("bfloat16", "float32", "float8_e4m3fn"), "float32": ("float32", "float32", None)}


def tensors(d: int, state: str) -> list[tuple[tuple[str, ...], tuple[int, ...], str]]:
    """Every tensor of the state with its dtype name: the parameters, their
    two Adam moments and, in a mixed state, the parameters in float8."""
    ps = params(d)
    w, m, f8 = STATES[state]
    return ([(("model",) + k, s, w) for k, s in ps] + [(("optim", "exp_avg") + k, s, m) for k, s in ps]
            + [(("optim", "exp_avg_sq") + k, s, m) for k, s in ps]
            + ([(("float8",) + k, s, f8) for k, s in ps] if f8 else []))


def values(k: int, shape: tuple[int, ...], box: tuple[tuple[int, int], ...], dtype: str) -> np.ndarray:
    """The block ``box`` ((start, length) per dimension) of tensor number k:
    element at flat index i is ((i * 40503 + k * 7919) mod 8388593), exact in
    float32, rounded to ``dtype`` (float8: first taken mod 897, minus 448, inside
    float8_e4m3fn's finite range); rounding is per element, so a block of the
    rounded tensor is the rounded block."""
    idx = np.zeros((1,) * len(shape), dtype=np.int64)
    for dd, (s, n) in enumerate(box):
        ax = np.arange(s, s + n, dtype=np.int64) * math.prod(shape[dd + 1:])
        idx = idx + ax.reshape((1,) * dd + (-1,) + (1,) * (len(shape) - dd - 1))
    v = (idx * 40503 + k * 7919) % 8388593
    if dtype.startswith("float8"):
        v = v % 897 - 448
    return v.astype(np.float32).astype(dtypes.numpy_dtype(dtype))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    uint = dtypes.same_size_uint(b.dtype.itemsize)
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a.view(uint), b.view(uint)))


def as_numpy(x) -> np.ndarray:
    """A loaded value (numpy array, torch tensor or DTensor) as numpy, bytes unchanged."""
    x = x.to_local() if hasattr(x, "to_local") else x
    return x if isinstance(x, np.ndarray) else dtypes.torch_to_numpy(x)


def src_type(shape: tuple[int, ...]) -> ArrayType:
    dims = [f"{-(-shape[0] // SAVERS)}{{x}}{shape[0]}"] + [str(g) for g in shape[1:]]
    return ArrayType.parse(f"[{', '.join(dims)}]", f"x={SAVERS}")


def target(n: int, shape: tuple[int, ...]) -> tuple[str, str, tuple[int, ...], list]:
    """(mesh, our type, DCP mesh shape, DCP placements (tuples)) of a tensor on n loading ranks."""
    g = shape
    c = lambda x, k: -(-x // k)  # noqa: E731
    if n == 1:
        return "u=1", f"[{', '.join(map(str, g))}]", (1,), [("R",)]
    if n == 6:
        if len(g) == 1:
            return "u=3,v=2", f"[{c(g[0], 3)}{{u}}{g[0]}]", (3, 2), [("S", 0), ("R",)]
        return "u=3,v=2", f"[{c(g[0], 3)}{{u}}{g[0]}, {c(g[1], 2)}{{v}}{g[1]}]", (3, 2), [("S", 0), ("S", 1)]
    if len(g) == 1:
        return (f"u={n}", f"[{c(g[0], n)}{{u}}{g[0]}]", (n,), [("S", 0)]) if n == 3 else \
            (f"u={n}", f"[{g[0]}]", (n,), [("R",)])
    return f"u={n}", f"[{g[0]}, {c(g[1], n)}{{u}}{g[1]}]", (n,), [("S", 1)]


def get(tree: dict, key: tuple[str, ...]):
    for k in key:
        tree = tree[k]
    return tree


# --- measuring ---------------------------------------------------------------------

def rchar() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


class Probe:
    """Peak RSS above the RSS at the start, bytes read, seconds and CPU seconds around one load."""

    def __enter__(self):
        if not reset_hwm():
            raise SystemExit("cannot reset the peak RSS (/proc/self/clear_refs)")
        self.before = rss_kib() * 1024
        self.r0, self.u0, self.t0 = rchar(), resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu = u1.ru_utime - self.u0.ru_utime + u1.ru_stime - self.u0.ru_stime
        self.read = rchar() - self.r0
        self.peak = max(0, rss_kib("VmHWM") * 1024 - self.before)

    def result(self, **kw) -> dict:
        return {"seconds": self.seconds, "cpu": self.cpu, "peak": self.peak, "rchar": self.read, **kw}


def wait_for_go() -> None:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")


# --- workers ----------------------------------------------------------------------

def _dist(world_shape, names):
    import torch.distributed as dist
    from datetime import timedelta
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    return dist, init_device_mesh("cpu", tuple(world_shape), mesh_dim_names=tuple(names))


def _placements(pl):
    from torch.distributed.tensor import Replicate, Shard
    return [Shard(p[1]) if p[0] == "S" else Replicate() for p in pl]


def save_worker(ours: str, dcp_dir: str, d: int, state_kind: str) -> None:
    """One of the 8 saving ranks: the same DTensor state saved by dcp.save and by ours."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor, Shard
    dist, dm = _dist((SAVERS,), ("x",))
    r = dist.get_rank()
    flat = {}
    for k, (key, shape, dt) in enumerate(tensors(d, state_kind)):
        t = src_type(shape)
        box = tuple(zip(t.block_starts(r), t.valid_shape(r)))
        stride = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
        local = dtypes.numpy_to_torch(values(k, shape, box, dt))
        flat[key] = DTensor.from_local(local, dm, [Shard(0)], run_check=False,
                                       shape=torch.Size(shape), stride=stride)
    state = nest(flat)
    state["optim"]["step"] = 1000
    out = {}
    for name, fn in (("dcp", lambda: dcp.save(state, checkpoint_id=dcp_dir)),
                     ("ours", lambda: checkpoint.save(state, ours))):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        out[name] = time.perf_counter() - t0
    dist.destroy_process_group()
    print(json.dumps(out))


def _check(n: int, r: int, d: int, state_kind: str, got: dict) -> tuple[bool, int]:
    ok, nbytes = got["optim"]["step"] == 1000, 0
    for k, (key, shape, dt) in enumerate(tensors(d, state_kind)):
        mesh, typ, *_ = target(n, shape)
        t = ArrayType.parse(typ, mesh)
        want = values(k, shape, tuple(zip(t.block_starts(r), t.valid_shape(r))), dt)
        ok = ok and same_bits(as_numpy(get(got, key)), want)
        nbytes += want.nbytes
    return ok, nbytes


def load_worker(mode: str, path: str, n: int, r: int, d: int, state_kind: str, at_once: bool) -> None:
    """One loading rank, ours / naive / ours on DCP's files; a warm-up first
    (imports and first calls: a load of the step counter)."""
    if mode == "dcp-files":
        import torch.distributed.checkpoint  # noqa: F401  (imported before the probe, as DCP's own load has it)
    checkpoint.load(path, {"optim": {"step": None}})
    targets = nest({key: target(n, shape)[:2] for key, shape, _ in tensors(d, state_kind)})
    targets["optim"]["step"] = None
    if at_once:
        wait_for_go()
    stats: dict = {}
    with Probe() as pr:
        if mode == "naive":
            whole = checkpoint.load(path, stats=stats)
            got = {"optim": {"step": whole["optim"]["step"]}}
            for key, shape, _ in tensors(d, state_kind):
                t = ArrayType.parse(*reversed(target(n, shape)[:2]))
                box = tuple(slice(s, s + m) for s, m in zip(t.block_starts(r), t.valid_shape(r)))
                sub = got
                for k in key[:-1]:
                    sub = sub.setdefault(k, {})
                sub[key[-1]] = as_numpy(get(whole, key)[box]).copy()   # (torch tensors: saved from DTensors)
            del whole
        else:
            got = checkpoint.load(path, targets, rank=r, stats=stats)
    ok, nbytes = _check(n, r, d, state_kind, got)
    print(json.dumps(pr.result(ok=ok, target=nbytes, own_read=stats.get("bytes_read", 0))))


def dcp_load_worker(path: str, n: int, d: int, state_kind: str) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import empty as dt_empty
    shape0 = target(n, (6, 6))[2]
    dist, dm = _dist(shape0, ("u", "v")[:len(shape0)])
    r = dist.get_rank()
    warm = {"optim": {"step": 0}}
    dcp.load(warm, checkpoint_id=path)   # warm-up: imports, connections, first calls
    dist.barrier()
    with Probe() as pr:
        flat = {key: dt_empty(*shape, dtype=dtypes.torch_dtype(dt), device_mesh=dm,
                              placements=_placements(target(n, shape)[3])) for key, shape, dt in tensors(d, state_kind)}
        state = nest(flat)
        state["optim"]["step"] = 0
        dcp.load(state, checkpoint_id=path)
    ok, nbytes = _check(n, r, d, state_kind, state)
    dist.destroy_process_group()
    print(json.dumps(pr.result(ok=ok, target=nbytes, own_read=0)))


# --- the parent --------------------------------------------------------------------

def run_group(argvs, envs=None, handshake=False):
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
    res = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    if any(x.get("ok") is False for x in res):
        raise RuntimeError(f"worker {argvs[0]}: wrong values loaded")
    return res, wall


def dist_envs(world: int) -> list[dict]:
    from verishard.torch.backend import free_port
    port = str(free_port())
    return [{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r), "WORLD_SIZE": str(world),
             "LOCAL_RANK": str(r)} for r in range(world)]


def machine() -> str:
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 2 ** 20
    import torch
    with open("/proc/loadavg") as f:
        la = ", ".join(f.read().split()[:3])
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB memory, shared with other jobs (load average {la} "
            f"at the start), Linux {platform.release()}, Python {platform.python_version()}, numpy "
            f"{np.__version__}, torch {torch.__version__} (CPU, gloo)")


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512, help="size of the float32 state in MiB, which sets the model's "
                    "width for both states (default 512)")
    ap.add_argument("--state", choices=tuple(STATES), default="bf16", help="bf16 (default): weights bfloat16, "
                    "Adam's moments float32, the weights again in float8_e4m3fn; float32: every tensor float32")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "checkpoint.md"))
    ap.add_argument("--tmp", default=None, help="directory for the checkpoints (default: a fresh temporary one)")
    ap.add_argument("--worker", nargs="+")
    args = ap.parse_args()
    if args.worker:
        w = args.worker
        if w[0] == "save":
            save_worker(w[1], w[2], int(w[3]), w[4])
        elif w[0] == "dcp":
            dcp_load_worker(w[1], int(w[2]), int(w[3]), w[4])
        else:
            load_worker(w[0], w[1], int(w[2]), int(w[3]), int(w[4]), w[5], w[6] == "1")
        return 0

    start = time.perf_counter()
    d = width(args.mib)
    spec = tensors(d, args.state)
    total = sum(dtypes.numpy_dtype(dt).itemsize * math.prod(s) for _, s, dt in spec)
    by_dtype = {}
    for _, s, dt in spec:
        by_dtype[dt] = by_dtype.get(dt, 0) + 1
    w, m, f8 = STATES[args.state]
    flags = "".join(f" {f}" for f, on in ((f"--mib {args.mib}", args.mib != 512), (f"--state {args.state}",
                    args.state != "bf16"), (f"--out {args.out}", args.out != ap.get_default("out"))) if on)
    tmp = tempfile.mkdtemp(prefix="vs-ckpt-", dir=args.tmp)
    ours, dcp_dir = os.path.join(tmp, "ours"), os.path.join(tmp, "dcp")
    lines = ["# Checkpoint of a training state: save from 8 ranks, load onto 1, 3, 6 and 8", "",
             f"Command: `.venv/bin/python bench/checkpoint.py{flags}`"
             f"{' (`make bench`)' if not flags else ''}, one run.", "", f"Machine: {machine()}.", "",
             f"State: a transformer of {LAYERS} layers, width {d}, vocabulary {VOCAB}, with Adam's two moments: "
             f"weights {w}, moments {m}" + (f", and the weights again in {f8} (a float8 set)" if f8 else "") +
             f": {len(spec)} tensors ("
             + ", ".join(f"{c} {dt}" for dt, c in by_dtype.items()) + f") and a step counter, "
             f"{total / 2 ** 20:.0f} MiB. Saved from "
             f"{SAVERS} gloo processes as DTensors `[Shard(0)]` on a DeviceMesh ({SAVERS},), by `dcp.save` and "
             "by `verishard.checkpoint.save` (the same DTensors). Loaded with, per tensor: 1 rank: whole; "
             "3 ranks: columns (`[Shard(1)]`; vectors `[Shard(0)]`); 6 ranks: a 3x2 grid (`[Shard(0), "
             "Shard(1)]`; vectors `[Shard(0), Replicate()]`); 8 ranks: columns (vectors replicated). Most "
             "dimensions do not divide (uneven blocks). Every loaded block was compared bit for bit with the "
             "expected one.", ""]
    try:
        res, _ = run_group([["--worker", "save", ours, dcp_dir, str(d), args.state]] * SAVERS, dist_envs(SAVERS))
        save = {k: max(x[k] for x in res) for k in ("dcp", "ours")}
        lines += [f"Saving (slowest rank): DCP {save['dcp']:.2f} s, {du(dcp_dir) / 2 ** 20:.1f} MiB on disk; ours "
                  f"{save['ours']:.2f} s (a header, a digest table and the data per block; fsync; commit), "
                  f"{du(ours) / 2 ** 20:.1f} MiB on disk.", ""]
        rows = []
        for n in LOADERS:
            alone = {m: [run_group([["--worker", m, p, str(n), str(r), str(d), args.state, "0"]])[0][0]
                         for r in range(n)]
                     for m, p in (("ours", ours), ("naive", ours), ("dcp-files", dcp_dir))}
            conc, conc_wall = run_group([["--worker", "ours", ours, str(n), str(r), str(d), args.state, "1"]
                                         for r in range(n)], handshake=True)
            dres, dwall = run_group([["--worker", "dcp", dcp_dir, str(n), str(d), args.state]] * n, dist_envs(n))
            rows.append((n, alone, conc, conc_wall, dres, dwall))
        lines += ["Per rank, over the rank's target state (its blocks of every tensor): *peak*: the peak RSS "
                  "during the load (`VmHWM`, reset just before) minus the RSS just before; *read*: `rchar` of "
                  "`/proc/self/io` over the load (every byte through read()/pread(): data, digests, headers, "
                  "manifest or metadata, and gloo's sockets for DCP), and, for ours, its own count of the "
                  "checkpoint bytes it read. Ranges over the ranks. *alone*: one process per rank, one after "
                  "the other (the sum of their times); *at once*: all ranks started together (the slowest "
                  "rank). DCP's load is collective: at once only.", "",
                  "| ranks | target MiB / rank | peak: ours | naive | DCP | ours on DCP files | read: ours "
                  "(own count) | naive | DCP | ours on DCP files | at once: ours s | DCP s | alone: ours s | "
                  "naive s | ours on DCP files s |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

        def rng(res, key):
            v = [x[key] / x["target"] for x in res]
            return f"{min(v):.3f}-{max(v):.3f}" if max(v) - min(v) > 0.0005 else f"{v[0]:.3f}"
        for n, alone, conc, cwall, dres, dwall in rows:
            tmib = max(x["target"] for x in alone["ours"]) / 2 ** 20
            lines.append(
                f"| {n} | {tmib:.1f} | {rng(alone['ours'], 'peak')} | {rng(alone['naive'], 'peak')} | "
                f"{rng(dres, 'peak')} | {rng(alone['dcp-files'], 'peak')} | {rng(alone['ours'], 'rchar')} "
                f"({rng(alone['ours'], 'own_read')}) | {rng(alone['naive'], 'rchar')} | {rng(dres, 'rchar')} | "
                f"{rng(alone['dcp-files'], 'rchar')} | {cwall:.2f} | {dwall:.2f} | "
                f"{sum(x['seconds'] for x in alone['ours']):.2f} | {sum(x['seconds'] for x in alone['naive']):.2f}"
                f" | {sum(x['seconds'] for x in alone['dcp-files']):.2f} |")
        cpu = [(n, sum(x["cpu"] for x in conc), sum(x["cpu"] for x in dres)) for n, _, conc, _, dres, _ in rows]
        worst_peak = max(x["peak"] / x["target"] for row in rows for x in row[1]["ours"])
        worst_read = max(x["own_read"] / x["target"] for row in rows for x in row[1]["ours"])
        lines += ["", f"CPU seconds of the whole job at once (all ranks): "
                  + "; ".join(f"{n} ranks: ours {a:.2f}, DCP {b:.2f}" for n, a, b in cpu) + ".", "",
                  f"Targets (issue 31): peak over the target state at most 1.1: ours' worst rank "
                  f"{worst_peak:.3f}; bytes read over bytes needed at most 1.01: ours' worst rank "
                  f"{worst_read:.4f} by its own count (the `rchar` column adds the manifest, read whole by every "
                  "rank). Ours checks a digest over every byte it reads; DCP checks nothing on load. The "
                  "machine is shared: wall times depend on the other jobs; the CPU seconds are the steadier "
                  "comparison.", "", f"Whole run: {time.perf_counter() - start:.0f} s.", ""]
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write("\n".join(lines))
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
