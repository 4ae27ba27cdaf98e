"""Benchmark: verishard.torch.redistribute against DTensor.redistribute
(greedy planner and ``use_min_cost_redistribution_plan``), side by side in
one run of 8 processes.

    python bench/torch_redistribute.py                 # writes bench/results/torch.md (and torch_pairs.csv)
    python bench/torch_redistribute.py --quick --out - # small sizes, markdown to stdout
    python bench/torch_redistribute.py --overhead-only --nprocs 4   # the per-call overhead only (torch_overhead.md)
    python bench/torch_redistribute.py --layouts 300   # general layouts: correctness sweep (torch_layouts.md)

On CPU the processes use gloo (8 forked processes, MASTER_ADDR=127.0.0.1);
with 8 or more CUDA devices they use NCCL, one device each, and memory is
also read with ``torch.cuda.max_memory_allocated`` (that path has not been
run on this project's machine, which has no GPU).

Per redistribution and method, on every rank:

- one warm-up call (plans made and cached, process groups created; the
  result is compared with DTensor's, bit for bit);
- one call for memory: ``VmHWM`` reset via ``/proc/self/clear_refs`` just
  before it; *peak* = high-water RSS during the call minus RSS just before
  it, plus the input's bytes (the input is resident throughout: the caller
  holds it), i.e. the most array memory the rank held at once, input and
  output included. The launcher sets ``MALLOC_MMAP_THRESHOLD_=65536`` so
  that freed tensors go back to the OS and the high-water mark means
  something;
- ``--reps`` timed calls, each started together after a barrier; a call's
  time is the slowest rank's, the figure the median over calls.

Reported: per-pair ratios DTensor / ours of time and peak (geometric mean,
best and worst), the fraction of pairs where DTensor's plan holds more than
``max(size(src), size(dst))`` elements on a rank (type level: the largest
local tensor along its transforms, the cross-check's measure; ours is
proved never to), the large ``S(0)R -> S(1)R`` case, and the per-call
overhead on a small tensor with the plan cached.

On gloo, DTensor runs every ``Shard(a) -> Shard(b)`` transform as an
all-gather followed by a chunk (``_collective_utils.shard_dim_alltoall``:
"CPU process group does not support alltoall yet"), so its measured peak
on CPU includes that gather; its type-level peak models a real all-to-all,
as on NCCL.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20
from procmem import reset_hwm, return_freed_memory, rss_kib  # noqa: E402
from report import emit_report  # noqa: E402  (bench/: this script's directory)
NPROCS = 8
METHODS = ("ours", "greedy", "mincost")
OVERHEAD_ROUNDS = 5  # per-call overhead: median over rounds of --calls back-to-back calls
LABEL = {"ours": "verishard", "greedy": "DTensor greedy", "mincost": "DTensor min-cost"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep-mib", type=float, default=8, help="global size of the sweep's tensors (default 8)")
    p.add_argument("--pairs-2d", type=int, default=0, help="pairs sampled on the (2,4) mesh (default 0: all 110)")
    p.add_argument("--pairs-3d", type=int, default=90, help="pairs sampled on the (2,2,2) mesh (default 90)")
    p.add_argument("--big-mib", default="256", help="global sizes of the S(0)R -> S(1)R case (default 256)")
    p.add_argument("--reps", type=int, default=3, help="timed calls per method and pair (default 3)")
    p.add_argument("--calls", type=int, default=100, help="calls per overhead measurement (default 100)")
    p.add_argument("--nprocs", type=int, default=NPROCS, help="processes (default 8; the overhead mesh is (2, n/2))")
    p.add_argument("--overhead-only", action="store_true",
                   help="only the per-call overhead table, written to results/torch_overhead.md")
    p.add_argument("--layouts", type=int, default=0,
                   help="instead: N random placement pairs (Shard, Replicate, Partial, _StridedShard) of uneven "
                        "rank-3 tensors on (2,2,2) and (2,4), each compared with DTensor (torch_layouts.md)")
    p.add_argument("--dtype", default="float32", help="dtype of the big case and the sweep, or several "
                   "comma-separated, each run on every pair one after the other; the first is the baseline of the "
                   "others' ratios (default float32; e.g. float32,bfloat16)")
    p.add_argument("--quick", action="store_true", help="a small run: 1 MiB sweep of 30 pairs, 16 MiB big case")
    p.add_argument("--out", default=os.path.join(HERE, "results", "torch.md"), help="markdown file, or -")
    p.add_argument("--keep", default="", help="directory for the ranks' raw JSON results (default: a temporary one)")
    p.add_argument("--from", dest="from_dir", default="",
                   help="render the report again from a --keep directory (no new measurements)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------
# worker side


def short(pl) -> str:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.placement_types import _StridedShard
    parts = []
    for p in pl:
        if isinstance(p, Replicate):
            parts.append("R")
        elif isinstance(p, _StridedShard):
            parts.append(f"_S({p.dim},{p.split_factor})")
        else:
            parts.append(f"S({p.dim})")
    return "".join(parts) if all(len(q) <= 4 for q in parts) else ",".join(parts)


def dtensor_type_level(x, dm, dst, min_cost: bool) -> tuple[int, int, int]:
    """(steps, largest local tensor, elements received) per rank along
    DTensor's optimized transforms (a gather multiplies the local size, a
    chunk divides it, an all-to-all keeps it)."""
    from torch.distributed.tensor import _redistribute as R
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from verishard.torch.dtensor import transform_costs
    target = DTensorSpec(dm, dst, tensor_meta=x._spec.tensor_meta)
    with R.use_min_cost_redistribution_plan(min_cost):
        infos = R._gen_transform_infos_non_cached(x._spec, target)
    infos = R._optimize_transform_infos(infos, dm, x.placements, dst)
    moving, peak, recv = transform_costs(infos, dm, x._local_tensor.numel())
    return len(moving), peak, recv


class Worker:
    def __init__(self, rank: int, args: dict, outdir: str):
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self.rank, self.args, self.outdir = rank, args, outdir
        self.cuda = args["device"] == "cuda"
        self.records: list[dict] = []
        self.t0 = time.time()

    def bytes_of(self, t) -> int:
        return t.numel() * t.element_size()

    def methods(self, x, dm, dst):
        from torch.distributed.tensor import _redistribute as R
        from verishard.torch import redistribute

        def ours():
            return redistribute(x, dst)

        def greedy():
            with R.use_min_cost_redistribution_plan(False):
                return x.redistribute(dm, dst)

        def mincost():
            with R.use_min_cost_redistribution_plan(True):
                return x.redistribute(dm, dst)

        return {"ours": ours, "greedy": greedy, "mincost": mincost}

    def measure(self, fn, reps: int, ref=None) -> dict:
        torch, dist = self.torch, self.dist
        dist.barrier()
        y = fn()  # warm-up: plans, caches, process groups
        same = None
        if ref is not None:
            a, b = y.to_local(), ref
            same = bool(a.shape == b.shape and torch.equal(a.contiguous().view(-1).view(torch.uint8),
                                                           b.contiguous().view(-1).view(torch.uint8)))
        out_bytes = self.bytes_of(y.to_local())
        del y
        dist.barrier()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            cuda_base = torch.cuda.memory_allocated()
        reset_hwm()
        base = rss_kib("VmRSS")
        y = fn()
        if self.cuda:
            torch.cuda.synchronize()
        extra = (rss_kib("VmHWM") - base) * 1024
        cuda_extra = (torch.cuda.max_memory_allocated() - cuda_base) if self.cuda else None
        del y
        times = []
        for _ in range(reps):
            dist.barrier()
            t = time.perf_counter()
            y = fn()
            if self.cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            del y
        return {"extra": extra, "cuda_extra": cuda_extra, "times": times, "same": same, "out_bytes": out_bytes}

    def case(self, kind: str, name: str, dm, shape, src, dst, reps: int, dtype: str = "float32") -> None:
        torch = self.torch
        gc.collect()  # once per case (tensors are freed by reference counting; this catches cycles)
        from torch.distributed.tensor import DTensor, _redistribute as R
        from verishard.torch.dtensor import from_placements
        from verishard.torch import plan_for, planning_mesh
        t_src = from_placements(planning_mesh(dm), shape, src)
        t_dst = from_placements(planning_mesh(dm), shape, dst)
        local = torch.randn(t_src.local_shape, dtype=getattr(torch, dtype), device=self.args["device_str"],
                            generator=None)
        isz = local.element_size()
        stride = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            stride[i] = stride[i + 1] * shape[i + 1]
        x = DTensor.from_local(local, dm, src, run_check=False, shape=torch.Size(shape), stride=tuple(stride))
        del local
        fns = self.methods(x, dm, dst)
        rec = {"kind": kind, "mesh": name, "shape": list(shape), "src": short(src), "dst": short(dst), "dtype": dtype,
               "src_bytes": t_src.size * isz, "dst_bytes": t_dst.size * isz,
               "bound_bytes": max(t_src.size, t_dst.size) * isz}
        p = plan_for(x, dst)
        rec["ours_plan"] = [str(c) for c in p.collectives] if p is not None else []
        rec["ours_type_peak"] = (p.peak if p is not None else t_src.size) * isz
        rec["ours_type_recv"] = (p.traffic if p is not None else 0) * isz
        ref = None
        res = {}
        R._gen_transform_infos.cache_clear()
        res["greedy"] = self.measure(fns["greedy"], reps)
        with R.use_min_cost_redistribution_plan(False):
            ref = x.redistribute(dm, dst).to_local()
        R._gen_transform_infos.cache_clear()
        res["mincost"] = self.measure(fns["mincost"], reps, ref)
        R._gen_transform_infos.cache_clear()
        res["ours"] = self.measure(fns["ours"], reps, ref)
        del ref
        for m in ("greedy", "mincost"):
            steps, peak, recv = dtensor_type_level(x, dm, dst, m == "mincost")
            rec[f"{m}_type_steps"], rec[f"{m}_type_peak"], rec[f"{m}_type_recv"] = steps, peak * isz, recv * isz
        in_bytes = self.bytes_of(x._local_tensor)
        for m, r in res.items():
            rec[f"{m}_peak"] = in_bytes + r["extra"]
            rec[f"{m}_cuda_peak"] = None if r["cuda_extra"] is None else in_bytes + r["cuda_extra"]
            rec[f"{m}_times"] = r["times"]
            rec[f"{m}_same"] = r["same"]
        rec["wall"] = time.time() - self.t0
        self.records.append(rec)
        del x, fns

    def overhead(self, name: str, dm, shape, src, dst, calls: int) -> None:
        torch, dist = self.torch, self.dist
        from torch.distributed.tensor import distribute_tensor, _redistribute as R
        from verishard.torch import redistribute
        from verishard.torch.backend import agree
        G = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(self.args["device_str"])
        x = distribute_tensor(G, dm, src, src_data_rank=None)
        fns = {"ours (default: agree on a plan's first use)": lambda: redistribute(x, dst),
               "ours, DTensor's argument order (x, mesh, placements)": lambda: redistribute(x, dm, dst),
               "ours, check_agreement='always'": lambda: redistribute(x, dst, check_agreement="always"),
               "ours, check_agreement=False": lambda: redistribute(x, dst, check_agreement=False),
               "DTensor greedy": lambda: x.redistribute(dm, dst)}
        if name == "agreement":
            fns = {"verishard's agreement alone (one round trip through the store per rank)":
                   lambda: agree(1, {"errors": []})}
        rec = {"kind": "overhead", "case": name, "src": short(src), "dst": short(dst), "shape": list(shape)}
        for fn in fns.values():  # warm-up: plans made and agreed on
            fn()
            fn()
        per_round: dict[str, list[float]] = {label: [] for label in fns}
        for _ in range(OVERHEAD_ROUNDS):  # the methods interleaved, so that a slow spell hits them alike
            for label, fn in fns.items():
                dist.barrier()
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                if self.cuda:
                    torch.cuda.synchronize()
                per_round[label].append((time.perf_counter() - t) / calls)
        for label, ts in per_round.items():
            rec[label] = statistics.median(ts)
        rec["wall"] = time.time() - self.t0
        self.records.append(rec)

    def save(self) -> None:
        with open(os.path.join(self.outdir, f"rank{self.rank}.json"), "w") as f:
            json.dump(self.records, f)


def worker(rank: int, port: int, args: dict, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    for name in ("torch.distributed.tensor._redistribute", "torch.distributed.tensor._collective_utils"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    torch.set_num_threads(1)
    if args["device"] == "cuda":
        torch.cuda.set_device(rank)
        args["device_str"] = f"cuda:{rank}"
    else:
        args["device_str"] = "cpu"
    dist.init_process_group("nccl" if args["device"] == "cuda" else "gloo", rank=rank, world_size=args["nprocs"],
                            timeout=timedelta(seconds=600))
    if args["layouts"]:
        try:
            layouts_sweep(rank, args, outdir)
        finally:
            dist.destroy_process_group()
        return
    w = Worker(rank, args, outdir)
    small = init_device_mesh(args["device"], (2, args["nprocs"] // 2), mesh_dim_names=("x", "y"))
    if not args["overhead_only"]:
        m24 = init_device_mesh(args["device"], (2, 4), mesh_dim_names=("x", "y"))
        m42 = init_device_mesh(args["device"], (4, 2), mesh_dim_names=("x", "y"))
        m222 = init_device_mesh(args["device"], (2, 2, 2), mesh_dim_names=("x", "y", "z"))
    gc.collect()
    gc.freeze()  # everything so far is permanent: later collections only look at new objects
    try:
        # per-call overhead, small tensor, plans cached
        for name, src, dst in (("no data moves for DTensor (a local chunk)", (Replicate(), Replicate()),
                                (Shard(0), Shard(1))),
                               ("S(0)R -> S(1)R (one collective)", (Shard(0), Replicate()), (Shard(1), Replicate())),
                               ("agreement", (Shard(0), Replicate()), (Shard(1), Replicate()))):
            w.overhead(name, small, (16, 16), src, dst, args["calls"])
        if args["overhead_only"]:
            return
        # the large S(0)R -> S(1)R case
        for mib in args["big_mib"]:
            side = int(math.sqrt(mib * MiB / 4))
            for name, dm in (("(2,4) x,y", m24), ("(4,2) x,y", m42)):
                for dt in args["dtypes"]:   # the same global shape in each dtype
                    w.case("big", name, dm, (side, side), (Shard(0), Replicate()), (Shard(1), Replicate()),
                           max(2, args["reps"] - 1), dt)
        # the sweep
        side = int(math.sqrt(args["sweep_mib"] * MiB / 4))
        side -= side % 8
        rnd = random.Random(3)
        from verishard.torch.dtensor import all_placements
        p24 = [(a, b) for a in all_placements(m24, 2) for b in all_placements(m24, 2) if a != b]
        p222 = rnd.sample([(a, b) for a in all_placements(m222, 2) for b in all_placements(m222, 2) if a != b], args["pairs_3d"])
        if args["pairs_2d"]:
            p24 = rnd.sample(p24, args["pairs_2d"])
        for src, dst in p24:
            for dt in args["dtypes"]:   # each pair in every dtype back to back, so a slow spell hits them alike
                w.case("sweep", "(2,4) x,y", m24, (side, side), src, dst, args["reps"], dt)
        for src, dst in p222:
            for dt in args["dtypes"]:
                w.case("sweep", "(2,2,2) x,y,z", m222, (side, side), src, dst, args["reps"], dt)
    finally:
        w.save()
        dist.destroy_process_group()


def layouts_sweep(rank: int, args: dict, outdir: str) -> None:
    """``--layouts N``: N random pairs, half on (2,2,2), half on (2,4), of
    rank-3 tensors whose every dimension is drawn from 3..13 (most do not
    divide); placements drawn from DTensor's (``all_placements`` with
    Partial("sum"): every Shard/Replicate/Partial tuple and the
    ``_StridedShard`` form of every non-default order). A Partial source is
    the global tensor on the pending group's first rank and zeros on the
    others (int64: sums are exact). Every rank records whether ours ran, the
    plan kind, and whether its local result is DTensor.redistribute's (bit
    for bit), distribute_tensor's of the global tensor onto the target (the
    oracle; for a Partial target: full_tensor() equals the global tensor),
    and, where both ran, the time of a second call of each (plans cached)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
    from verishard.torch.dtensor import all_placements
    from verishard.torch import plan_for, redistribute
    rnd = random.Random(7)
    out = []
    for dims, names in (((2, 2, 2), ("x", "y", "z")), ((2, 4), ("x", "y"))):
        dm = init_device_mesh(args["device"], dims, mesh_dim_names=names)
        layouts = all_placements(dm, 3, partial="sum")
        coords = [int(c) for c in (dm.mesh == rank).nonzero()[0]]
        n = args["layouts"] // 2 + (args["layouts"] % 2 if dims == (2, 4) else 0)
        for k in range(n):
            src, dst = rnd.sample(layouts, 2)
            shape = tuple(rnd.randint(3, 13) for _ in range(3))
            partial = any(p.is_partial() for p in src + dst)
            dtype = torch.int64 if partial else torch.float32
            g = torch.Generator().manual_seed(k)
            G = (torch.randint(-1000, 1000, shape, generator=g) if partial
                 else torch.randn(shape, generator=g)).to(dtype)
            value = distribute_tensor(G, dm, tuple(Replicate() if p.is_partial() else p for p in src),
                                      src_data_rank=None)
            local = value.to_local()
            if any(p.is_partial() for p in src):
                first = all(c == 0 for c, p in zip(coords, src) if p.is_partial())
                local = local if first else torch.zeros_like(local)
            x = DTensor.from_local(local, dm, src, shape=G.shape, stride=G.stride())
            rec = {"mesh": str(dims), "shape": list(shape), "src": str(src), "dst": str(dst), "partial": partial}
            ref, rec["dtensor_error"] = None, None
            if _strided_uneven(src, shape, dims) or _strided_uneven(dst, shape, dims):
                # DTensor aborts the process on some of these (gloo: "Received data size doesn't match expected
                # size", e.g. (_StridedShard(1, sf=4), Shard(1), Shard(1)) -> (Shard(1), Shard(1), Shard(0)) of a
                # (10, 10, 7) tensor): not run; ours is judged against the oracle
                rec["dtensor_skipped"] = True
            else:
                try:
                    ref = x.redistribute(dm, dst)
                except Exception as e:  # noqa: BLE001 - counted in the report
                    rec["dtensor_error"] = f"{type(e).__name__}: {e}"[:200]
            try:
                plan = plan_for(x, dst)
                ours = redistribute(x, dst)
                rec["ours_error"], rec["plan"] = None, type(plan).__name__
            except Exception as e:  # noqa: BLE001
                ours, rec["ours_error"] = None, f"{type(e).__name__}: {e}"[:300]
            if ours is not None and ref is not None:  # a second call of each, plans cached, started together
                rec["seconds"] = {"dtensor": _timed(lambda: x.redistribute(dm, dst)),
                                  "ours": _timed(lambda: redistribute(x, dst))}
            if ours is not None:
                if any(p.is_partial() for p in dst):
                    rec["ours_vs_oracle"] = bool(torch.equal(ours.full_tensor(), G))
                else:
                    oracle = distribute_tensor(G, dm, dst, src_data_rank=None).to_local()
                    rec["ours_vs_oracle"] = _same(ours.to_local(), oracle)
                if ref is not None:
                    rec["ours_vs_dtensor"] = _same(ours.to_local(), ref.to_local())
                    rec["dtensor_vs_oracle"] = (bool(torch.equal(ref.full_tensor(), G))
                                                if any(p.is_partial() for p in dst) else
                                                _same(ref.to_local(), distribute_tensor(G, dm, dst,
                                                                                        src_data_rank=None).to_local()))
            out.append(rec)
            dist.barrier()
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


def _timed(fn) -> float:
    import torch.distributed as dist
    dist.barrier()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _strided_uneven(placements, shape, dims) -> bool:
    """Whether a _StridedShard shards a dimension that its mesh dimensions' sizes do not divide."""
    from torch.distributed.tensor.placement_types import _StridedShard
    for p in placements:
        if isinstance(p, _StridedShard):
            n = math.prod(dims[i] for i, q in enumerate(placements)
                          if getattr(q, "dim", None) == p.dim and not q.is_partial() and not q.is_replicate())
            if shape[p.dim] % max(n, 1):
                return True
    return False


def _same(a, b) -> bool:
    import torch
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def layouts_report(outdir: str, nprocs: int, seconds: float, command: str) -> str:
    per_rank = [json.load(open(os.path.join(outdir, f"rank{r}.json"))) for r in range(nprocs)]
    lines = ["# verishard.torch.redistribute on general layouts (measured)", "",
             f"Command: `{command}` ({nprocs} gloo processes on {platform.node() or 'this machine'}, "
             f"{os.cpu_count()} cores; {seconds:.0f} s). Random placement pairs (Shard, Replicate, Partial(\"sum\"), "
             "_StridedShard) of rank-3 tensors with dimensions drawn from 3..13 on a (2,2,2) and a (2,4) mesh; "
             "every rank compares its own local result. *Bit-identical*: on every rank the local tensor equals "
             "DTensor.redistribute's bit for bit (for a Partial target: full_tensor() of both equals the global "
             "tensor); *oracle*: equals distribute_tensor of the global tensor onto the target.", "",
             "| mesh | pairs | refused by ours | ours = oracle | DTensor ran | bit-identical to DTensor "
             "| DTensor != oracle | refused by DTensor | DTensor not run | box schedule | plan of collectives |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    refusals, off = [], []
    for mesh in ("(2, 2, 2)", "(2, 4)"):
        recs = [list(rs) for rs in zip(*per_rank) if rs[0]["mesh"] == mesh]
        n = len(recs)
        ref_ours = sum(any(r["ours_error"] for r in rs) for rs in recs)
        ref_dt = sum(any(r["dtensor_error"] for r in rs) for rs in recs)
        oracle = sum(all(r.get("ours_vs_oracle") for r in rs) for rs in recs)
        ran = [rs for rs in recs if not rs[0].get("dtensor_skipped") and not any(r["dtensor_error"] for r in rs)]
        skipped = sum(bool(rs[0].get("dtensor_skipped")) for rs in recs)
        # a Partial target: both full_tensor()s are the global tensor (DTensor's local terms are its own)
        bits = sum(all(r.get("ours_vs_dtensor") or ("Partial" in r["dst"] and r.get("dtensor_vs_oracle")
                                                   and r.get("ours_vs_oracle")) for r in rs) for rs in ran)
        dt_off = sum(any(r.get("dtensor_vs_oracle") is False for r in rs) for rs in recs)
        boxes = sum(rs[0].get("plan") == "BoxPlan" for rs in recs)
        colls = sum(rs[0].get("plan") == "Plan" for rs in recs)
        lines.append(f"| {mesh} | {n} | {ref_ours} | {oracle} | {len(ran)} | {bits} | {dt_off} | {ref_dt} | {skipped} "
                     f"| {boxes} | {colls} |")
        refusals += [(rs[0]["src"], rs[0]["dst"], rs[0]["ours_error"]) for rs in recs if rs[0]["ours_error"]]
        off += [(rs[0]["src"], rs[0]["dst"]) for rs in recs
                if any(r.get("dtensor_vs_oracle") is False for r in rs) and not any(r["ours_error"] for r in rs)]
    lines += ["", "Time per call where both ran (a second call of each, plans cached, started together after a "
              "barrier; the slowest rank's; tensors of at most 13^3 elements, so this is per-call cost): "
              "geometric mean of DTensor's time / ours, by the plan ours ran:", ""]
    for kind, label in (("BoxPlan", "box schedule"), ("Plan", "plan of collectives")):
        ratios = [max(r["seconds"]["dtensor"] for r in rs) / max(r["seconds"]["ours"] for r in rs)
                  for rs in zip(*per_rank) if rs[0].get("plan") == kind and "seconds" in rs[0]]
        lines.append(f"- {label}: {geomean(ratios):.2f}x over {len(ratios)} pairs"
                     + (f" (worst {min(ratios):.2f}x, best {max(ratios):.2f}x)" if ratios else ""))
    lines += ["", "A pair where DTensor's own result is not the oracle (column *DTensor != oracle*) cannot be "
              "bit-identical to it and is judged against the oracle. *DTensor not run*: a `_StridedShard` on a "
              "dimension its mesh dimensions do not divide, where DTensor.redistribute aborts the process on some "
              "pairs (gloo: \"Received data size doesn't match expected size\", e.g. (_StridedShard(1, sf=4), "
              "Shard(1), Shard(1)) -> (Shard(1), Shard(1), Shard(0)) of a (10, 10, 7) tensor); ours is judged "
              "against the oracle there. Refusals below verbatim (rank 0)."]
    for src, dst, err in refusals[:10]:
        lines.append(f"- ours refused {src} -> {dst}: `{err.splitlines()[0]}` ...")
    for src, dst in off[:5]:
        lines.append(f"- DTensor's result is not its target layout: {src} -> {dst}")
    dt_errors: dict = {}
    for rs in zip(*per_rank):
        if rs[0]["dtensor_error"]:
            key = re.sub(r"from .+? to ", "from * to ", rs[0]["dtensor_error"])[:110]
            dt_errors.setdefault(key, []).append(f"{rs[0]['src']} -> {rs[0]['dst']}")
    for err, pairs in sorted(dt_errors.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- DTensor refused {len(pairs)} pairs with `{err}` (e.g. {pairs[0]})")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# launcher side


def merge(outdir: str, nprocs: int = NPROCS) -> list[dict]:
    per_rank = [json.load(open(os.path.join(outdir, f"rank{r}.json"))) for r in range(nprocs)]
    merged = []
    for recs in zip(*per_rank):
        m = dict(recs[0])
        for meth in METHODS:
            if f"{meth}_peak" in m:
                m[f"{meth}_peak"] = max(r[f"{meth}_peak"] for r in recs)
            if f"{meth}_times" in m:
                per_call = [max(ts) for ts in zip(*(r[f"{meth}_times"] for r in recs))]
                m[f"{meth}_time"] = statistics.median(per_call)
            if f"{meth}_same" in m and m[f"{meth}_same"] is not None:
                m[f"{meth}_same"] = all(r[f"{meth}_same"] for r in recs)
            if m.get(f"{meth}_cuda_peak") is not None:
                m[f"{meth}_cuda_peak"] = max(r[f"{meth}_cuda_peak"] for r in recs)
        if m["kind"] == "overhead":
            for k in list(m):
                if k not in ("kind", "case", "src", "dst", "shape", "wall"):
                    m[k] = {"rank0": recs[0][k], "max": max(r[k] for r in recs)}
        for k in ("src_bytes", "dst_bytes", "bound_bytes", "ours_type_peak", "greedy_type_peak",
                  "mincost_type_peak"):
            if k in m:
                m[k] = max(r[k] for r in recs)
        merged.append(m)
    return merged


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def mib(b) -> str:
    return f"{b / MiB:.1f}"


def report(results: list[dict], args, seconds: float, command: str, note: str = "") -> str:
    import torch
    dts = list(dict.fromkeys(r.get("dtype", "float32") for r in results if r["kind"] in ("big", "sweep")))
    base_dt = dts[0] if dts else "float32"
    everything = [r for r in results if r["kind"] in ("big", "sweep")]
    big = [r for r in everything if r["kind"] == "big" and r.get("dtype", "float32") == base_dt]
    sweep = [r for r in everything if r["kind"] == "sweep" and r.get("dtype", "float32") == base_dt]
    over = [r for r in results if r["kind"] == "overhead"]
    L = [f"# verishard.torch.redistribute against DTensor.redistribute", "",
         f"`{command}`{' ' + note if note else ''} ({args.nprocs} {'NCCL processes, one GPU each' if args.device == 'cuda' else 'gloo processes'}, "
         f"{os.cpu_count()} CPU cores, {platform.machine()}, torch {torch.__version__}, Python "
         f"{platform.python_version()}); {seconds:.0f} s in all. The machine is shared with other work: "
         "times vary between runs, memory figures are stable." + (
             " This page was rendered again from that run's raw results (`--from`), without new measurements."
             if getattr(args, "from_dir", "") else ""), "",
         "Method (`bench/torch_redistribute.py`'s docstring has the details): per redistribution and method, one warm-up call "
         "(plans cached; the result compared bit for bit with DTensor's on every rank), one call with the RSS "
         "high-water mark reset just before it, then timed calls started together after a barrier. *time* is the "
         "median over calls of the slowest rank; *peak* is the most memory a rank held during the call, input "
         "included (high-water RSS minus RSS before the call, plus the input's bytes), the largest over ranks; "
         "*type-level peak* is the largest local tensor along the plan (for DTensor: along its transforms, an "
         "all-to-all counted as one); *bound* is max(size(src), size(dst)) per rank.", "",
         "On gloo DTensor runs each `Shard(a) -> Shard(b)` transform as an all-gather and a chunk "
         "(\"CPU process group does not support alltoall yet\"), so its measured CPU peaks include that gather; "
         "its type-level peak assumes a real all-to-all, as on NCCL.", ""]
    L += [] if not big else [f"## S(0)R -> S(1)R ({base_dt})", "",
          "| mesh | global MiB | ours plan | time ms: ours / greedy / min-cost | DTensor / ours time | "
          "peak MiB: ours / greedy / min-cost | DTensor / ours peak | type-level peak MiB: ours / DTensor | "
          "bound MiB | src + dst MiB |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in big:
        gm = r["shape"][0] * r["shape"][1] * getattr(torch, base_dt).itemsize
        L.append(f"| {r['mesh']} | {mib(gm)} | {', '.join(r['ours_plan'])} | "
                 f"{r['ours_time'] * 1e3:.0f} / {r['greedy_time'] * 1e3:.0f} / {r['mincost_time'] * 1e3:.0f} | "
                 f"{r['greedy_time'] / r['ours_time']:.2f} / {r['mincost_time'] / r['ours_time']:.2f} | "
                 f"{mib(r['ours_peak'])} / {mib(r['greedy_peak'])} / {mib(r['mincost_peak'])} | "
                 f"{r['greedy_peak'] / r['ours_peak']:.2f} / {r['mincost_peak'] / r['ours_peak']:.2f} | "
                 f"{mib(r['ours_type_peak'])} / {mib(r['greedy_type_peak'])} | {mib(r['bound_bytes'])} | "
                 f"{mib(r['src_bytes'] + r['dst_bytes'])} |")
    ok_big = all(r["ours_same"] and r["mincost_same"] for r in big)
    L += ["", f"Results identical to DTensor greedy on every rank: {'yes' if ok_big else 'NO'}.", ""] if big else []
    if sweep:
        n = len(sweep)
        meshes = sorted({r["mesh"] for r in sweep})
        L += [f"## Sweep: {n} placement pairs at {args.sweep_mib:g} MiB global in float32 "
              f"(the same shapes in every dtype; here {base_dt})", "",
              f"Pairs: every pair of distinct layouts of a 2-D tensor on the (2,4) mesh "
              f"({sum(r['mesh'] == '(2,4) x,y' for r in sweep)}; Shard, Replicate and _StridedShard) and a "
              f"sample on the (2,2,2) mesh ({sum(r['mesh'] == '(2,2,2) x,y,z' for r in sweep)}). "
              f"Ratios are DTensor / ours per pair (above 1: ours is faster or smaller).", "",
              "| | vs DTensor greedy | vs DTensor min-cost |", "|---|---:|---:|"]
        rows = {}
        for m in ("greedy", "mincost"):
            tr = [r[f"{m}_time"] / r["ours_time"] for r in sweep]
            pr = [r[f"{m}_peak"] / r["ours_peak"] for r in sweep]
            rows.setdefault("time ratio, geometric mean", []).append(f"{geomean(tr):.2f}")
            rows.setdefault("time ratio, worst for ours (min)", []).append(
                f"{min(tr):.2f} ({_pair(min(sweep, key=lambda r: r[f'{m}_time'] / r['ours_time']))})")
            rows.setdefault("time ratio, best for ours (max)", []).append(
                f"{max(tr):.2f} ({_pair(max(sweep, key=lambda r: r[f'{m}_time'] / r['ours_time']))})")
            rows.setdefault("peak ratio, geometric mean", []).append(f"{geomean(pr):.2f}")
            rows.setdefault("peak ratio, worst for ours (min)", []).append(
                f"{min(pr):.2f} ({_pair(min(sweep, key=lambda r: r[f'{m}_peak'] / r['ours_peak']))})")
            rows.setdefault("peak ratio, best for ours (max)", []).append(
                f"{max(pr):.2f} ({_pair(max(sweep, key=lambda r: r[f'{m}_peak'] / r['ours_peak']))})")
            comm = [r for r in sweep if r[f"{m}_type_recv"] > 0]
            local = [r for r in sweep if r[f"{m}_type_recv"] == 0]
            rows.setdefault("time ratio, geometric mean where DTensor communicates / where it does not "
                            "(its plan only chunks locally)", []).append(
                f"{geomean([r[f'{m}_time'] / r['ours_time'] for r in comm]):.2f} ({len(comm)} pairs) / "
                f"{geomean([r[f'{m}_time'] / r['ours_time'] for r in local]):.2f} ({len(local)})")
            rows.setdefault("pairs where ours is faster", []).append(
                f"{sum(t > 1 for t in tr)} / {n}")
            rows.setdefault("pairs where ours peaks lower / equal (within 1%) / higher", []).append(
                f"{sum(p > 1.01 for p in pr)} / {sum(0.99 <= p <= 1.01 for p in pr)} / {sum(p < 0.99 for p in pr)}")
            above = sum(r[f"{m}_type_peak"] > r["bound_bytes"] for r in sweep)
            rows.setdefault("DTensor's plan holds more than max(size(src), size(dst)) (type level)", []).append(
                f"{above} / {n} ({100 * above / n:.1f}%)")
        for k, v in rows.items():
            L.append(f"| {k} | " + " | ".join(v) + " |")
        ours_above = sum(r["ours_type_peak"] > r["bound_bytes"] for r in sweep)
        same = sum(bool(r["ours_same"]) for r in sweep)
        L += ["", f"Ours: type-level peak above the bound in {ours_above} of {n} pairs (Pipelineproof.plan_spec "
              f"says never); results bit-identical to DTensor greedy on every rank in {same} of {n} pairs "
              f"(min-cost: {sum(bool(r['mincost_same']) for r in sweep)}).", ""]
        for m in METHODS:
            ratio = [r[f"{m}_peak"] / (r["src_bytes"] + r["dst_bytes"]) for r in sweep]
            L.append(f"- {LABEL[m]}: measured peak / (size(src) + size(dst)): geometric mean {geomean(ratio):.2f}, "
                     f"max {max(ratio):.2f}" + ("" if m != "ours" else
                     " (src + dst is the least an out-of-place redistribution can hold when the caller keeps "
                     "its input; the rest is send and receive buffers)"))
        stem = os.path.splitext(os.path.basename(args.out))[0] if args.out != "-" else "torch"
        L += ["", f"Per-pair figures: `bench/results/{'torch' if stem == 'torch' else stem}_pairs.csv`.", ""]
    for dt in dts[1:]:
        L += dtype_section(everything, base_dt, dt)
    if over:
        L += [f"## Per-call overhead on a small tensor (16 x 16 float32, (2,{args.nprocs // 2}) mesh, plans cached)", "",
              f"Per method: the mean over {args.calls} back-to-back calls, median over {OVERHEAD_ROUNDS} rounds (the "
              "methods interleaved); rank 0 and the slowest rank.", "",
              "| case | method | us/call (rank 0) | us/call (slowest rank) | / DTensor |", "|---|---|---:|---:|---:|"]
        for r in over:
            base = r.get("DTensor greedy")
            for k, v in r.items():
                if isinstance(v, dict):
                    rel = f"{v['rank0'] / base['rank0']:.2f}" if base else ""
                    L.append(f"| {r['case'] if r['case'] != 'agreement' else '(no redistribution)'} | {k} | "
                             f"{v['rank0'] * 1e6:.0f} | {v['max'] * 1e6:.0f} | {rel} |")
        L += ["", "The default agrees once per cached plan (its first use on this rank), so a cached call costs "
              "no communication beyond the plan's own; `check_agreement='always'` agrees on every call (one "
              "round trip through the default group's store, which DTensor does not do), as every call did before "
              "plans were agreed once.", ""]
    return "\n".join(L) + "\n"


def dtype_section(results: list[dict], base_dt: str, dt: str) -> list[str]:
    """The pairs (and big cases) run in ``dt`` against the same ones in ``base_dt``, this run:
    bytes and peaks as ratios, and ``dt``'s identity to DTensor."""
    key = lambda r: (r["kind"], r["mesh"], tuple(r["shape"]), r["src"], r["dst"])  # noqa: E731
    base = {key(r): r for r in results if r.get("dtype", "float32") == base_dt}
    pairs = [(r, base[key(r)]) for r in results if r.get("dtype") == dt and key(r) in base]
    sweep = [(a, b) for a, b in pairs if a["kind"] == "sweep"]
    L = [f"## {dt} against {base_dt}: the same {len(sweep)} sweep pairs"
         + (f" and {len(pairs) - len(sweep)} big cases" if len(pairs) > len(sweep) else "") + ", this run", "",
         f"Per pair, {dt}'s figure over {base_dt}'s (same global shape, placements and meshes; each pair run in "
         f"both dtypes back to back). Geometric mean, min and max over the pairs.", "",
         "| figure | ours | DTensor greedy | DTensor min-cost |", "|---|---:|---:|---:|"]

    def stats(vals):
        return f"{geomean(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})" if vals else "-"
    L.append("| bytes of the input per rank (size(src)) | " + stats([a["src_bytes"] / b["src_bytes"] for a, b in sweep])
             + " | (same) | (same) |")
    L.append("| type-level peak | " + " | ".join(stats([a[f"{m}_type_peak"] / b[f"{m}_type_peak"] for a, b in sweep])
                                                for m in METHODS) + " |")
    L.append("| type-level bytes received | " + " | ".join(
        stats([a[f"{m}_type_recv"] / b[f"{m}_type_recv"] for a, b in sweep if b[f"{m}_type_recv"]])
        for m in METHODS) + " |")
    L.append("| measured peak | " + " | ".join(stats([a[f"{m}_peak"] / b[f"{m}_peak"] for a, b in sweep])
                                              for m in METHODS) + " |")
    L.append("| measured peak, big cases | " + " | ".join(
        stats([a[f"{m}_peak"] / b[f"{m}_peak"] for a, b in pairs if a["kind"] == "big"]) for m in METHODS) + " |")
    L.append("| time (noisy: a shared machine) | " + " | ".join(
        stats([a[f"{m}_time"] / b[f"{m}_time"] for a, b in sweep]) for m in METHODS) + " |")
    same = sum(bool(a["ours_same"]) for a, _ in pairs)
    L += ["", f"In {dt}: ours bit-identical to DTensor greedy on every rank in {same} of {len(pairs)} cases "
          f"(min-cost: {sum(bool(a['mincost_same']) for a, _ in pairs)}); DTensor / ours, geometric mean over the "
          f"sweep pairs: peak {geomean([a['greedy_peak'] / a['ours_peak'] for a, _ in sweep]):.2f} (greedy), "
          f"{geomean([a['mincost_peak'] / a['ours_peak'] for a, _ in sweep]):.2f} (min-cost); time "
          f"{geomean([a['greedy_time'] / a['ours_time'] for a, _ in sweep]):.2f} (greedy), "
          f"{geomean([a['mincost_time'] / a['ours_time'] for a, _ in sweep]):.2f} (min-cost). Measured peaks "
          "include the process's allocator granularity, so small tensors halve less than their bytes.", ""]
    return L


def _pair(r) -> str:
    return f"{r['mesh'].split()[0]} {r['src']} -> {r['dst']}"


def write_csv(results: list[dict], path: str) -> None:
    keys = ["mesh", "shape", "src", "dst", "dtype", "ours_plan", "bound_bytes", "src_bytes", "dst_bytes"]
    for m in METHODS:
        keys += [f"{m}_time", f"{m}_peak", f"{m}_type_peak"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for r in results:
            if r["kind"] == "sweep":
                w.writerow([" ".join(r[k]) if k == "ours_plan" else
                            ("x".join(map(str, r[k])) if k == "shape" else
                             r.get(k, "float32") if k == "dtype" else r[k]) for k in keys])


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return_freed_memory()
    if args.overhead_only:
        args.big_mib, args.pairs_2d, args.pairs_3d = "", 0, 0
        if args.out == os.path.join(HERE, "results", "torch.md"):
            args.out = os.path.join(HERE, "results", "torch_overhead.md")
    if args.quick:
        args.sweep_mib, args.pairs_2d, args.pairs_3d, args.big_mib, args.reps, args.calls = 1, 20, 10, "16", 2, 30
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch
    import torch.multiprocessing as mp
    import torch.distributed.tensor  # noqa: F401  (import once, then fork)
    import verishard.torch  # noqa: F401
    args.device = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= NPROCS else "cpu"
    wargs = {"sweep_mib": args.sweep_mib, "pairs_2d": args.pairs_2d, "pairs_3d": args.pairs_3d, "reps": args.reps, "calls": args.calls,
             "big_mib": [float(s) for s in str(args.big_mib).split(",") if s], "quick": args.quick,
             "device": args.device, "nprocs": args.nprocs, "overhead_only": args.overhead_only,
             "layouts": args.layouts, "dtypes": args.dtype.split(",")}
    command = "python bench/torch_redistribute.py" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:]))
    start = time.time()
    if args.layouts:
        if args.out == os.path.join(HERE, "results", "torch.md"):
            args.out = os.path.join(HERE, "results", "torch_layouts.md")
        with tempfile.TemporaryDirectory() as outdir:
            from verishard.torch.backend import free_port
            mp.start_processes(worker, args=(free_port(), wargs, outdir), nprocs=args.nprocs, join=True,
                               start_method="spawn" if args.device == "cuda" else "fork")
            text = layouts_report(outdir, args.nprocs, time.time() - start, command)
        emit_report(text, args.out)
        return 0
    if args.from_dir:
        with open(os.path.join(args.from_dir, "meta.json")) as f:
            meta = json.load(f)
        for k in ("sweep_mib", "calls", "device"):
            setattr(args, k, meta[k])
        args.nprocs = meta.get("nprocs", NPROCS)
        results = merge(args.from_dir, args.nprocs)
        text = report(results, args, meta["seconds"], meta["command"], meta.get("note", ""))
    else:
        with tempfile.TemporaryDirectory() as outdir:
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                outdir = args.keep
            method = "spawn" if args.device == "cuda" else "fork"  # CUDA cannot be forked into
            from verishard.torch.backend import free_port
            mp.start_processes(worker, args=(free_port(), wargs, outdir), nprocs=args.nprocs, join=True,
                               start_method=method)
            results = merge(outdir, args.nprocs)
            with open(os.path.join(outdir, "meta.json"), "w") as f:
                json.dump({"command": command, "seconds": time.time() - start, "sweep_mib": args.sweep_mib,
                           "calls": args.calls, "device": args.device, "nprocs": args.nprocs}, f)
        text = report(results, args, time.time() - start, command)
    emit_report(text, args.out)
    if args.out != "-" and not args.overhead_only:   # (the per-pair figures are the sweep's)
        # torch.md: torch_pairs.csv; torch_X.md: torch_X_pairs.csv
        stem = os.path.splitext(os.path.basename(args.out))[0]
        write_csv(results, os.path.join(os.path.dirname(args.out), "torch_pairs.csv" if stem == "torch" else
                                        f"{stem}_pairs.csv"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
