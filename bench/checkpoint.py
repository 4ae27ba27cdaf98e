"""Checkpoint resharding benchmark: save a 256 MiB float32 array from 8
ranks, load it onto 6 ranks with another mesh and type; per-rank peak memory
and bytes read against the target block, time against loading everything
and slicing (the naive way).

    .venv/bin/python bench/checkpoint.py            # writes bench/results/checkpoint.md

Every load runs in a fresh process (one per target rank, one at a time) so
that its peak RSS (``ru_maxrss``) is its own; the figure reported is the
peak minus the RSS the process had just before loading (interpreter and
imports). The issue asks for 1 GiB; this machine has 2 cores and 24 GiB
shared with other jobs, so the array is 256 MiB (``--mib`` changes it).
"""

from __future__ import annotations

import argparse
import json
import os
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
CASES = [  # (target mesh, target type builder, what)
    ("u=3,v=2", lambda n: f"[{-(-n // 3)}{{u}}{n}, {n // 2}{{v}}{n}]",
     "rows 8-way to a 3x2 grid (uneven rows)"),
    ("u=6", lambda n: f"[{n}, {-(-n // 6)}{{u}}{n}]", "rows 8-way to columns 6-way (uneven, narrow runs)"),
]


def value_block(t: ArrayType, r: int) -> np.ndarray:
    """Rank r's block of the array A[i, j] = i * n + j (float32), computed without A."""
    n = t.global_shape[1]
    (s0, s1), (l0, l1) = t.block_starts(r), t.valid_shape(r)
    i = np.arange(s0, s0 + l0, dtype=np.float64)[:, None]
    j = np.arange(s1, s1 + l1, dtype=np.float64)[None, :]
    return (i * n + j).astype(np.float32)


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


def worker(mode: str, path: str, mesh: str, ttext: str, rank: int) -> None:
    """One load, timed, its peak RSS over the RSS (and any earlier peak)
    before it; then the same load again under tracemalloc (numpy's
    allocations are traced) for its peak allocation."""
    import tracemalloc
    t = ArrayType.parse(ttext, mesh)
    if not reset_hwm():
        raise SystemExit("cannot reset the peak RSS (/proc/self/clear_refs)")
    before = rss_kib() * 1024
    stats: dict = {}
    t0 = time.perf_counter()
    out = _load(mode, path, mesh, t, rank, stats)
    secs = time.perf_counter() - t0
    peak = rss_kib("VmHWM") * 1024
    ok = bool(np.array_equal(out, value_block(t, rank)))
    nbytes = out.nbytes
    del out
    tracemalloc.start()
    again = _load(mode, path, mesh, t, rank, {})
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del again
    print(json.dumps({"seconds": secs, "peak_delta": max(0, peak - before), "traced": traced,
                      "bytes_read": stats["bytes_read"], "target_bytes": nbytes, "ok": ok}))


def run_worker(*args) -> dict:
    p = subprocess.run([sys.executable, __file__, "--worker", *map(str, args)], capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "checkpoint.md"))
    ap.add_argument("--worker", nargs=5, metavar=("MODE", "PATH", "MESH", "TYPE", "RANK"))
    args = ap.parse_args()
    if args.worker:
        mode, path, mesh, ttext, rank = args.worker
        worker(mode, path, mesh, ttext, int(rank))
        return 0
    n = int(round((args.mib * 2 ** 20 / 4) ** 0.5))
    n -= n % 8
    tmp = tempfile.mkdtemp(prefix="vs-ckpt-")
    try:
        src = ArrayType.parse(f"[{n // 8}{{x}}{n}, {n}]", SRC_MESH)
        t0 = time.perf_counter()
        for r in range(8):   # the 8 saving ranks, one after the other (each writes only its block)
            checkpoint.save(value_block(src, r), SRC_MESH, src, tmp, rank=r, save_id="bench")
        checkpoint.commit(tmp, "bench")
        save_s = time.perf_counter() - t0
        total = n * n * 4
        lines = ["# Checkpoint resharding", "",
                 "Command: `.venv/bin/python bench/checkpoint.py` (`make bench`).", "",
                 f"A {n}x{n} float32 array ({total / 2 ** 20:.0f} MiB; the issue asks for 1 GiB, too large for "
                 f"this 2-core, 24 GiB machine shared with other jobs) saved from 8 ranks as `{src}` on "
                 f"`{{x:8}}` ({save_s:.2f} s for the 8 files and the manifest), loaded onto 6 ranks. "
                 "Every load runs in its own process, one at a time; *RSS peak* is the peak RSS of the "
                 "load (`VmHWM`, reset through `/proc/self/clear_refs` just before it) minus the RSS just "
                 "before it (interpreter and imports); "
                 "*traced peak* is tracemalloc's peak over a second, identical load (numpy's buffers are "
                 "traced). *Ours*: `checkpoint.load`, reading the 16 KiB chunks of the pieces the "
                 "verified schedule assigns (each chunk's digest checked) through an 8 MiB read buffer. "
                 "*Naive*: read every file into the full array, then slice. Every loaded block was "
                 "compared with the expected values.", ""]
        for mesh, tb, what in CASES:
            t = ArrayType.parse(tb(n), mesh)
            lines += [f"## {what}: `{t}` on `{Mesh.parse(mesh)}`", "",
                      "| rank | target MiB | ours: RSS peak / target | ours: traced peak / target "
                      "| ours: read / target | ours s | naive: RSS peak / target | naive: read / target "
                      "| naive s | naive / ours time |",
                      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for r in range(6):
                ours = run_worker("ours", tmp, mesh, str(t), r)
                naive = run_worker("naive", tmp, mesh, str(t), r)
                assert ours["ok"] and naive["ok"], (what, r)
                tb_ = ours["target_bytes"]
                lines.append(f"| {r} | {tb_ / 2 ** 20:.1f} | {ours['peak_delta'] / tb_:.2f} | "
                             f"{ours['traced'] / tb_:.2f} | "
                             f"{ours['bytes_read'] / tb_:.3f} | {ours['seconds']:.3f} | "
                             f"{naive['peak_delta'] / tb_:.2f} | {naive['bytes_read'] / tb_:.2f} | "
                             f"{naive['seconds']:.3f} | {naive['seconds'] / ours['seconds']:.1f} |")
                print(lines[-1], flush=True)
            lines.append("")
        lines += ["Reads are whole 16 KiB chunks (the unit a digest covers): when a piece's contiguous runs "
                  "in a source file are shorter than a chunk (the column case: one run per row of "
                  f"{-(-n // 6) * 4} bytes), whole chunks are read and the read ratio grows accordingly; "
                  "the peak stays the target block plus the read buffer. Peak ratios above 1 include the "
                  "8 MiB read buffer and allocator slack, which matter for small blocks.", "",
                  "`torch.distributed.checkpoint` was not run: resharding with it needs 8 saving and 6 "
                  "loading gloo processes on this 2-core machine; not done in this round.", ""]
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            f.write("\n".join(lines))
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
