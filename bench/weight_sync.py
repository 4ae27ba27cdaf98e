"""Benchmark: weight sync from training ranks to inference ranks, side by
side in one run of gloo processes.

    python bench/weight_sync.py                  # 4+4, 2+6 and 6+2 ranks, writes bench/results/weight_sync.md
    python bench/weight_sync.py --splits 2+2 --hidden 256 --layers 4 --out -
    python bench/weight_sync.py --section engines   # fused / FP8 targets against a vLLM-style reference, 8 ranks
    python bench/weight_sync.py --section m2n       # layouts NCCL M2N refuses, 8 ranks, bytes against the bound

A transformer-like state dict (per layer: qkv, out, up, down projections and
two norms; an embedding and a final norm) lives on the training ranks as
FSDP-style ``Shard(0)`` DTensors; each weight goes to the inference ranks
with a tensor-parallel placement (qkv, up, embedding: ``Shard(0)``; out,
down: ``Shard(1)``; norms: ``Replicate()``). Three methods, each run once
for warm-up and memory, then ``--reps`` timed runs:

- **verishard**: ``verishard.torch.transfer`` (one verified schedule, rounds
  within ``--budget-mib``);
- **gather + broadcast**: per bucket of ``--budget-mib``, each weight
  gathered to training rank 0 (``dist.gather``), the bucket packed with
  ``torch.cat`` and broadcast whole to every inference rank, which keeps its
  part (checkpoint-engine's scheme);
- **full_tensor + distribute_tensor**: per weight, ``full_tensor()`` on the
  training mesh, the whole tensor sent from training rank 0 to inference
  rank 0, then ``distribute_tensor`` on the inference mesh (a scatter from
  its rank 0).

Per rank: bytes received (counted at the API: a collective's logical
messages, e.g. a broadcast counts the whole bucket at every receiver; gloo's
own algorithm may move more) against the lower bound (the target blocks, as
nothing is held there before), peak memory during the call (RSS high-water
mark reset before it, minus RSS before; ``MALLOC_MMAP_THRESHOLD_`` set so
that freed buffers go back to the OS) against target size + two rounds, and
time (slowest rank, median over runs). Every received tensor is compared
bit for bit with ``distribute_tensor`` of the global weight.

``--section engines`` (8 processes: training ranks 0-3 FSDP ``Shard(0)``,
inference ranks 4-7 TP 4, bf16): per row one ``transfer`` into a
``fused(...)`` (vLLM's QKV with kv heads replicated, gate-up, a block-FP8
fused QKV) or ``block_fp8(...)`` target, against a vLLM-style reference
(every full tensor gathered on training rank 0 and broadcast whole to the
inference ranks, then the engine's own split or quantization): identical
bits, bytes received against the lower bound and the reference's.
``--section m2n``: layouts NCCL M2N refuses (rank 4 and 5 tensors, 3-axis
meshes, uneven shards, two shard axes on a side, replicated on both sides),
one ``transfer`` each: identical with ``distribute_tensor``, bytes received
against the lower bound. There verishard's bytes are counted where they
are moved (``verishard.torch.backend.counting_rounds``), not read off the
schedule. Each section rewrites its own part of the report file and keeps
the others.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20
sys.path.insert(0, HERE)
from procmem import reset_hwm, return_freed_memory, rss_kib  # noqa: E402
from report import emit_report  # noqa: E402

METHODS = ("verishard", "gather+broadcast", "full_tensor+distribute_tensor")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--splits", default="4+4,2+6,6+2", help="training+inference ranks, one run each (default "
                   "4+4,2+6,6+2)")
    p.add_argument("--hidden", type=int, default=512, help="hidden size (default 512)")
    p.add_argument("--layers", type=int, default=20, help="layers (default 20: 256 MiB in 122 tensors)")
    p.add_argument("--vocab", type=int, default=8192, help="embedding rows (default 8192)")
    p.add_argument("--budget-mib", type=float, default=8, help="round / bucket size in MiB (default 8)")
    p.add_argument("--reps", type=int, default=3, help="timed runs per method (default 3)")
    p.add_argument("--dtype", default="float32", help="dtype of the weights, or several comma-separated, each "
                   "run on every split, float32 first when given (default float32; e.g. float32,bfloat16)")
    p.add_argument("--section", choices=SECTIONS, default="splits", help="splits (default): the state dict over "
                   "--splits against the two baselines; engines: fused QKV, gate-up and block-FP8 targets against a "
                   "vLLM-style reference; m2n: layouts NCCL M2N refuses (both on 8 processes, bf16). The report's "
                   "other sections are kept")
    p.add_argument("--budget-kib", type=float, default=4, help="round size of --section engines / m2n, KiB "
                   "(default 4: several rounds)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "weight_sync.md"), help="markdown file, or -")
    return p.parse_args(argv)


def state_dict_layout(hidden: int, layers: int, vocab: int):
    """``{name: (shape, target placement)}`` of the transformer-like state dict."""
    from torch.distributed.tensor import Replicate, Shard
    h = hidden
    out = {"embed.weight": ((vocab, h), Shard(0))}
    for i in range(layers):
        out.update({f"layers.{i}.attn.qkv.weight": ((3 * h, h), Shard(0)),
                    f"layers.{i}.attn.out.weight": ((h, h), Shard(1)),
                    f"layers.{i}.mlp.up.weight": ((4 * h, h), Shard(0)),
                    f"layers.{i}.mlp.down.weight": ((h, 4 * h), Shard(1)),
                    f"layers.{i}.norm1.weight": ((h,), Replicate()),
                    f"layers.{i}.norm2.weight": ((h,), Replicate())})
    out["norm.weight"] = ((h,), Replicate())
    return out


def global_weight(shape, seed, dtype):
    import torch
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


class Counter:
    """Bytes received by this rank at the API level."""

    def __init__(self):
        self.received = 0


def gather_broadcast(weights, layout, train_ranks, infer_mesh, bcast_group, budget, counter, dtype):
    """Checkpoint-engine's scheme: gather each weight to training rank 0,
    broadcast buckets whole, every inference rank keeps its part."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import distribute_tensor
    me = dist.get_rank()
    root = train_ranks[0]
    isz = dtype.itemsize
    out = {}
    names = list(layout)
    k = 0
    while k < len(names):
        bucket, size = [], 0
        while k < len(names) and (not bucket or size + _numel(layout[names[k]][0]) * isz <= budget):
            bucket.append(names[k])
            size += _numel(layout[names[k]][0]) * isz
            k += 1
        fulls = []
        for name in bucket:
            shape = layout[name][0]
            if me in train_ranks:  # a gather (point to point: torch.chunk's shards differ in size when uneven)
                local = weights[name]._local_tensor
                if me == root:
                    rows = [len(c) for c in torch.empty(shape[0]).chunk(len(train_ranks))]
                    rows += [0] * (len(train_ranks) - len(rows))
                    parts = [local] + [torch.empty((n,) + tuple(shape[1:]), dtype=dtype) for n in rows[1:]]
                    for r, part in zip(train_ranks[1:], parts[1:]):
                        if part.numel():
                            dist.recv(part, src=r)
                    counter.received += sum(p.nbytes for p in parts[1:])
                    fulls.append(torch.cat(parts))
                elif local.numel():
                    dist.send(local.contiguous(), dst=root)
        if me == root or me in infer_mesh.mesh.flatten().tolist():
            flat = torch.cat([f.reshape(-1) for f in fulls]) if me == root else torch.empty(size // isz, dtype=dtype)
            dist.broadcast(flat, src=root, group=bcast_group)
            if me != root:
                counter.received += flat.nbytes
                pos = 0
                for name in bucket:
                    shape, pl = layout[name]
                    n = _numel(shape)
                    full = flat[pos:pos + n].reshape(shape)
                    pos += n
                    out[name] = distribute_tensor(full, infer_mesh, (pl,), src_data_rank=None).to_local().clone()
            del flat
        del fulls
    return out


def full_then_distribute(weights, layout, train_ranks, infer_mesh, counter, dtype):
    """Per weight: full_tensor() on the training mesh, the whole tensor sent
    to inference rank 0, distribute_tensor on the inference mesh."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import distribute_tensor
    me = dist.get_rank()
    infer_ranks = infer_mesh.mesh.flatten().tolist()
    n_train = len(train_ranks)
    out = {}
    for name, (shape, pl) in layout.items():
        full = None
        if me in train_ranks:
            full = weights[name].full_tensor()
            counter.received += full.nbytes * (n_train - 1) // n_train
            if me == train_ranks[0]:
                dist.send(full, dst=infer_ranks[0])
        elif me == infer_ranks[0]:
            full = torch.empty(shape, dtype=dtype)
            dist.recv(full, src=train_ranks[0])
            counter.received += full.nbytes
        if me in infer_ranks:
            if me != infer_ranks[0]:
                full = torch.empty(shape, dtype=dtype)
            d = distribute_tensor(full, infer_mesh, (pl,), src_data_rank=0)
            if me != infer_ranks[0]:
                counter.received += d.to_local().nbytes
            out[name] = d.to_local()
        del full
    return out


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def worker(rank: int, port: int, args: dict, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from verishard.torch import plan_transfer, transfer
    torch.set_num_threads(1)
    dtype = getattr(torch, args["dtype"])
    world = args["train"] + args["infer"]
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=1200))
    train_ranks = list(range(args["train"]))
    infer_ranks = list(range(args["train"], world))
    train = DeviceMesh("cpu", torch.tensor(train_ranks), mesh_dim_names=("fsdp",))
    infer = DeviceMesh("cpu", torch.tensor(infer_ranks), mesh_dim_names=("tp",))
    bcast_group = dist.new_group([train_ranks[0]] + infer_ranks)
    layout = state_dict_layout(args["hidden"], args["layers"], args["vocab"])
    weights = {}
    for k, (name, (shape, _)) in enumerate(layout.items()):
        weights[name] = distribute_tensor(global_weight(shape, k, dtype), train, (Shard(0),), src_data_rank=None)
    budget = int(args["budget_mib"] * MiB)
    targets = {name: (infer, (pl,)) for name, (_, pl) in layout.items()}
    sched = plan_transfer(weights, targets, budget_bytes=budget)
    methods = {
        "verishard": lambda c: {n: t.to_local() for n, t in transfer(weights, targets, budget_bytes=budget).items()},
        "gather+broadcast": lambda c: gather_broadcast(weights, layout, train_ranks, infer, bcast_group, budget, c,
                                                       dtype),
        "full_tensor+distribute_tensor": lambda c: full_then_distribute(weights, layout, train_ranks, infer, c, dtype),
    }
    rec = {"rank": rank, "role": "train" if rank in train_ranks else "infer",
           "lower_bound": sched.lower_bound(rank), "target_bytes": sched.target_bytes(rank),
           "source_bytes": sum(w._local_tensor.nbytes for w in weights.values()), "rounds": len(sched.rounds),
           "tensors": len(layout), "global_bytes": sum(_numel(s) * dtype.itemsize for s, _ in layout.values()),
           "dtype": args["dtype"]}
    for label, fn in methods.items():
        dist.barrier()
        counter = Counter()
        got = fn(counter)  # warm-up, and the bytes and the check
        rec[f"{label} received"] = sched.received(rank) if label == "verishard" else counter.received
        ok = True
        if rank in infer_ranks:
            for k, (name, (shape, pl)) in enumerate(layout.items()):
                want = distribute_tensor(global_weight(shape, k, dtype), infer, (pl,), src_data_rank=None).to_local()
                a = got.get(name)
                ok = ok and a is not None and a.shape == want.shape and torch.equal(
                    a.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8))
        rec[f"{label} same"] = ok
        del got
        dist.barrier()
        reset_hwm()
        base = rss_kib("VmRSS")
        got = fn(Counter())
        rec[f"{label} peak"] = (rss_kib("VmHWM") - base) * 1024
        del got
        times = []
        for _ in range(args["reps"]):
            dist.barrier()
            t = time.perf_counter()
            got = fn(Counter())
            times.append(time.perf_counter() - t)
            del got
        rec[f"{label} times"] = times
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(rec, f)
    dist.barrier()
    dist.destroy_process_group()


def report(runs, args, seconds, command) -> str:
    import torch
    recs = runs[0][1]
    sizes = {r[0]["dtype"]: r[0]["global_bytes"] for _, r in runs}
    L = ["# Weight sync: training ranks to inference ranks", "",
         f"`{command}` (gloo processes, {os.cpu_count()} CPU cores, {platform.machine()}, torch "
         f"{torch.__version__}); {seconds:.0f} s in all. The machine is shared with other work: times vary "
         "between runs; byte counts are exact.", "",
         f"State dict: {recs[0]['tensors']} tensors, "
         + ", ".join(f"{g / MiB:.1f} MiB in {dt}" for dt, g in sizes.items())
         + f" (hidden {args.hidden}, "
         f"{args.layers} layers, vocabulary {args.vocab}), `Shard(0)` over the training ranks, tensor-parallel "
         f"placements over the inference ranks. Budget (verishard's round, the baselines' bucket): "
         f"{args.budget_mib:g} MiB.", "",
         "Method: `bench/weight_sync.py`'s docstring. *received / bound*: bytes a rank received (counted at the "
         "API) over the least it must receive (its target blocks: nothing of them is there before); *peak*: RSS "
         "high-water during one call minus RSS before it; *time*: slowest rank, median over runs.", ""]
    for split, recs in runs:
        L += _split_table(split, recs, args)
    L += _dtype_ratios(runs)
    return "\n".join(L) + "\n"


def _dtype_ratios(runs) -> list[str]:
    """Each later dtype's bytes and peaks over the first dtype's, split by split (measured in this run)."""
    by = {}
    for label, recs in runs:
        split, dtype = label.split()
        by.setdefault(dtype, {})[split] = recs
    first, *others = list(by)
    L = []
    for other in others:
        L += [f"## {other} over {first}, same splits, this run", "",
              "Per method, the largest ratio over the ranks of each split (inference ranks' bytes received, training "
              "ranks' bytes received where non-zero, inference ranks' peak).", "",
              "| split | method | received, inference ranks | received, training ranks | peak, inference ranks |",
              "|---|---|---:|---:|---:|"]
        for split, recs in by[other].items():
            base = by[first][split]

            def ratio(key, role):
                v = [a[key] / b[key] for a, b in zip(recs, base) if a["role"] == role and b[key]]
                return f"{max(v):.3f}" if v else "-"
            for m in METHODS:
                L.append(f"| {split} | {m} | {ratio(m + ' received', 'infer')} | {ratio(m + ' received', 'train')} | "
                         f"{ratio(m + ' peak', 'infer')} |")
        L.append("")
    return L


def _split_table(split, recs, args) -> list[str]:
    L = [f"## {split.split()[0]} ranks (training + inference), {recs[0]['dtype']}; verishard's schedule: "
         f"{recs[0]['rounds']} rounds", "",
         "| method | identical on every inference rank | time s | received / bound, inference ranks (max) | "
         "received MiB, training ranks (max) | peak MiB, inference ranks (max) | peak MiB, training ranks (max) |",
         "|---|---|---:|---:|---:|---:|---:|"]
    infer = [r for r in recs if r["role"] == "infer"]
    train = [r for r in recs if r["role"] == "train"]
    for m in METHODS:
        per_run = [max(ts) for ts in zip(*(r[f"{m} times"] for r in recs))]
        amp = max(r[f"{m} received"] / r["lower_bound"] for r in infer)
        L.append(f"| {m} | {'yes' if all(r[f'{m} same'] for r in recs) else 'NO'} | "
                 f"{statistics.median(per_run):.2f} | {amp:.2f} | "
                 f"{max(r[f'{m} received'] for r in train) / MiB:.1f} | "
                 f"{max(r[f'{m} peak'] for r in infer) / MiB:.1f} | {max(r[f'{m} peak'] for r in train) / MiB:.1f} |")
    tb = max(r["target_bytes"] for r in infer)
    L += ["", f"Target size per inference rank (max): {tb / MiB:.1f} MiB; target + two rounds: "
          f"{(tb + 2 * args.budget_mib * MiB) / MiB:.1f} MiB. verishard's peak on an inference rank is its target "
          "blocks (allocated once, written in place) plus at most two consecutive rounds' receive buffers (round "
          "k+1 is posted before round k is waited for); on a training rank two rounds' send buffers (its sources "
          "are resident before the call and not counted).", ""]
    return L


# ---------------------------------------------------------------------------
# --section engines / m2n: 8 gloo processes, one transfer per row, bytes counted where they are moved

SECTIONS = ("splits", "engines", "m2n")
TRAIN, INFER = list(range(4)), list(range(4, 8))   # the sections' 8 ranks: 4 training, 4 inference
HEADS, KV_HEADS, HEAD_DIM = 8, 2, 32                # kv heads fewer than TP 4: each on 2 ranks, as vLLM holds them


def engine_shapes(hidden: int) -> dict:
    """The engines section's source tensors (bf16)."""
    return {"q": (HEADS * HEAD_DIM, hidden), "k": (KV_HEADS * HEAD_DIM, hidden), "v": (KV_HEADS * HEAD_DIM, hidden),
            "gate": (2 * hidden, hidden), "up": (2 * hidden, hidden),
            "w_rows": (5 * 128, 3 * 128),   # TP shards of 160 rows: every shard cuts a 128-row block
            "w_cols": (2 * 128, 5 * 128),   # Shard(1): shards of 160 columns cut 128-column blocks
            "fq": (HEADS * HEAD_DIM, hidden), "fk": (KV_HEADS * HEAD_DIM, hidden), "fv": (KV_HEADS * HEAD_DIM, hidden)}


def engine_rows():
    """(label, source names, the target given to transfer(mesh), the engine's own split of the full tensors
    (tp index, {name: full}) -> this rank's result, as bytes to compare)."""
    import torch
    from torch.distributed.tensor import Shard
    from verishard.torch import block_fp8, fused, quantize_block_fp8
    tp = len(INFER)

    def kv_rows(x, t):      # vLLM's QKVParallelLinear: kv head t // (tp / kv heads), whole
        per = x.shape[0] // KV_HEADS
        h = t // (tp // KV_HEADS)
        return x[h * per:(h + 1) * per]

    def qkv(t, G):
        return torch.cat([G["q"].chunk(tp)[t], kv_rows(G["k"], t), kv_rows(G["v"], t)])

    def gate_up(t, G):      # MergedColumnParallelLinear
        return torch.cat([G["gate"].chunk(tp)[t], G["up"].chunk(tp)[t]])

    def fp8(dim):
        def split(t, G):    # quantize the full tensor, then keep this rank's shard and the scales of its blocks
            x = G["w_rows" if dim == 0 else "w_cols"]
            q, scale = quantize_block_fp8(x, (128, 128))
            idx = torch.arange(x.shape[dim]).chunk(tp)[t]
            lo, hi = int(idx[0]), int(idx[-1]) + 1
            cut = q[lo:hi] if dim == 0 else q[:, lo:hi]
            s = scale[lo // 128:(hi - 1) // 128 + 1] if dim == 0 else scale[:, lo // 128:(hi - 1) // 128 + 1]
            return cut, s
        return split

    def fp8_qkv(t, G):      # vLLM's block-FP8 QKVParallelLinear: every part quantized whole, then split
        qs, ss = [], []
        for name in ("fq", "fk", "fv"):
            q, scale = quantize_block_fp8(G[name], (128, 128))
            per = G[name].shape[0] // (tp if name == "fq" else KV_HEADS)
            lo = t * per if name == "fq" else t // (tp // KV_HEADS) * per
            qs.append(q[lo:lo + per])
            ss.append(scale[lo // 128:(lo + per - 1) // 128 + 1])
        return torch.cat(qs), torch.cat(ss)

    return [
        ("fused QKV (vLLM QKVParallelLinear, kv heads replicated)", ("q", "k", "v"),
         lambda m: fused(m, [Shard(0)], [("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)]), qkv),
        ("gate-up (MergedColumnParallelLinear)", ("gate", "up"), lambda m: fused(m, [Shard(0)], ["gate", "up"]),
         gate_up),
        ("block FP8 128x128, Shard(0): shards cut blocks", ("w_rows",),
         lambda m: (m, [Shard(0)], block_fp8((128, 128))), fp8(0)),
        ("block FP8 128x128, Shard(1): shards cut blocks", ("w_cols",),
         lambda m: (m, [Shard(1)], block_fp8((128, 128))), fp8(1)),
        ("fused QKV, block FP8 128x128 per part", ("fq", "fk", "fv"),
         lambda m: fused(m, [Shard(0)], [("fq", HEADS), ("fk", KV_HEADS), ("fv", KV_HEADS)],
                         convert=block_fp8((128, 128))), fp8_qkv),
    ]


def _as_bytes(x):
    """A result (a tensor, a DTensor, a BlockFP8Shard or an engine's (weight, scale)) as (weight bytes, scale)."""
    import torch
    w, s = ((x.weight, x.weight_scale_inv) if hasattr(x, "weight_scale_inv") else
            x if isinstance(x, tuple) else (x, None))
    w = w.to_local() if hasattr(w, "to_local") else w
    return w.contiguous().view(-1).view(torch.uint8), s


def _identical(a, b) -> bool:
    import torch
    (wa, sa), (wb, sb) = _as_bytes(a), _as_bytes(b)
    return torch.equal(wa, wb) and ((sa is None and sb is None) or (sa is not None and sb is not None
                                                                       and torch.equal(sa, sb)))


def gather_then_broadcast_full(x, name, shape, dtype, group, counter):
    """The vLLM-style reference's traffic: training rank 0 gathers the full
    tensor (point to point from the other training ranks) and broadcasts it
    whole to the inference ranks; returns the full tensor on inference ranks."""
    import torch
    import torch.distributed as dist
    me = dist.get_rank()
    full = None
    if me in TRAIN:
        local = x._local_tensor.contiguous()
        if me == TRAIN[0]:
            parts = [local] + [torch.empty((len(c),) + tuple(shape[1:]), dtype=dtype)
                               for c in torch.empty(shape[0]).chunk(len(TRAIN))[1:]]
            for r, part in zip(TRAIN[1:], parts[1:]):
                if part.numel():
                    dist.recv(part, src=r)
                    counter.received += part.nbytes
            full = torch.cat(parts)
        elif local.numel():
            dist.send(local, dst=TRAIN[0])
    if me == TRAIN[0] or me in INFER:
        if me != TRAIN[0]:
            full = torch.empty(shape, dtype=dtype)
        dist.broadcast(full, src=TRAIN[0], group=group)
        if me != TRAIN[0]:
            counter.received += full.nbytes
    return full if me in INFER else None


def m2n_cases():
    """(label, why NCCL M2N refuses it, global shape, source (mesh ranks, mesh shape, placements), target (...))."""
    from torch.distributed.tensor import Replicate as R, Shard as S
    line_t, line_i = (TRAIN, (4,)), (INFER, (4,))
    return [
        ("rank-4 tensor", "tensors of rank 3 at most", (16, 12, 8, 24), (*line_t, (S(2),)), (*line_i, (S(3),))),
        ("rank-5 tensor", "tensors of rank 3 at most", (8, 6, 4, 4, 16), (*line_t, (S(0),)), (*line_i, (S(4),))),
        ("3-axis meshes, ranks reversed", "2-axis meshes only", (64, 96),
         (list(range(8)), (2, 2, 2), (S(0), S(1), R())), (list(range(7, -1, -1)), (2, 2, 2), (R(), S(1), S(0)))),
        ("uneven shards", "even shards only", (301, 77), (*line_t, (S(0),)), (*line_i, (S(1),))),
        ("two shard axes on the target", "exactly one shard axis per side", (64, 96), (*line_t, (S(0),)),
         (INFER, (2, 2), (S(0), S(1)))),
        ("one dimension sharded by two axes", "exactly one shard axis per side", (64, 96), (*line_t, (S(1),)),
         (INFER, (2, 2), (S(0), S(0)))),
        ("replicated on both sides (dp replicas -> TP groups)", "exactly one shard axis per side", (64, 96),
         (TRAIN, (2, 2), (R(), S(0))), (INFER, (2, 2), (R(), S(1)))),
    ]


def section_worker(rank: int, port: int, args: dict, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from verishard.torch.backend import counting_rounds
    from verishard.torch import plan_transfer, transfer
    torch.set_num_threads(1)
    dtype = torch.bfloat16
    dist.init_process_group("gloo", rank=rank, world_size=len(TRAIN) + len(INFER), timeout=timedelta(seconds=600))
    train = DeviceMesh("cpu", torch.tensor(TRAIN), mesh_dim_names=("fsdp",))
    infer = DeviceMesh("cpu", torch.tensor(INFER), mesh_dim_names=("tp",))
    group = dist.new_group([TRAIN[0]] + INFER)
    budget = int(args["budget_kib"] * 1024)
    rows = []
    if args["section"] == "engines":
        G = {n: global_weight(s, k, dtype) for k, (n, s) in enumerate(sorted(engine_shapes(args["hidden"]).items()))}
        for label, names, target, split in engine_rows():
            tensors = {n: distribute_tensor(G[n], train, (Shard(0),), src_data_rank=None) for n in names}
            targets = {"t": target(infer)} if not isinstance(target(infer), tuple) else {names[0]: target(infer)}
            key = next(iter(targets))
            sched = plan_transfer(tensors, targets, budget_bytes=budget)
            dist.barrier()
            with counting_rounds() as traffic:
                got = transfer(tensors, targets, budget_bytes=budget)
            counter = Counter()
            fulls = {n: gather_then_broadcast_full(tensors[n], n, G[n].shape, dtype, group, counter) for n in names}
            rec = {"label": label, "received": traffic.received, "lower_bound": sched.lower_bound(rank),
                   "reference_received": counter.received, "target_bytes": sched.target_bytes(rank),
                   "rounds": len(sched.rounds)}
            if rank in INFER:
                ref = split(INFER.index(rank), fulls)
                rec["same"] = _identical(got[key], ref) and all(torch.equal(fulls[n], G[n]) for n in names)
            rows.append(rec)
    else:
        for k, (label, why, shape, src, dst) in enumerate(m2n_cases()):
            g = global_weight(shape, 100 + k, dtype)
            smesh = DeviceMesh("cpu", torch.tensor(src[0]).reshape(src[1]))
            dmesh = DeviceMesh("cpu", torch.tensor(dst[0]).reshape(dst[1]))
            x = distribute_tensor(g, smesh, src[2], src_data_rank=None)
            targets = {"x": (dmesh, dst[2])}
            sched = plan_transfer({"x": x}, targets, budget_bytes=budget)
            dist.barrier()
            with counting_rounds() as traffic:
                got = transfer({"x": x}, targets, budget_bytes=budget)
            want = distribute_tensor(g, dmesh, dst[2], src_data_rank=None).to_local()
            rec = {"label": label, "received": traffic.received, "sent": traffic.sent,
                   "lower_bound": sched.lower_bound(rank), "rounds": len(sched.rounds),
                   "same": ("x" not in got) == (rank not in dst[0]) and ("x" not in got
                                                                       or _identical(got["x"], want))}
            rows.append(rec)
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "rows": rows}, f)
    dist.barrier()
    dist.destroy_process_group()


def section_report(name: str, recs: list, args, seconds: float, command: str) -> str:
    """The markdown of one section, framed by the markers :func:`splice` keeps it by."""
    import torch
    who = ("training ranks 0-3, `Shard(0)` FSDP-style; inference ranks 4-7" if name == "engines" else
           "each row's layouts")
    head = (f"`{command}` (8 gloo processes: {who}; "
            f"bf16; {os.cpu_count()} CPU cores, torch {torch.__version__}); {seconds:.0f} s in all. Budget "
            f"{args.budget_kib:g} KiB per round. Bytes are counted where they are moved "
            "(`verishard.torch.backend.counting_rounds`: the bytes of the tensors handed to `isend` / `irecv`"
            + ("; the reference's at its `recv` and `broadcast` calls, a broadcast counting the whole tensor at "
               "every receiver" if name == "engines" else "") + "), not read off the schedule.")
    per_row = list(zip(*(r["rows"] for r in recs)))
    infer = [r for r in range(len(recs)) if r in INFER]
    if name == "engines":
        L = ["## Inference engines' layouts on 8 processes, against a vLLM-style reference", "", head, "",
             "The reference: every full tensor gathered on training rank 0 and broadcast whole to the inference "
             "ranks, then the engine's own split (vLLM's `QKVParallelLinear` and `MergedColumnParallelLinear` weight "
             "loaders; for FP8, `quantize_block_fp8` of the full tensor, which tests/test_torch_targets.py checks "
             "against DeepSeek-V3's block-by-block recipe, then the rank's shard and the scales of the blocks it "
             "touches). verishard: one `transfer` per row into `fused(...)` / `block_fp8(...)` targets. *identical*: "
             f"every inference rank's result (weights and scales) bit for bit with the reference's. Source hidden "
             f"size {args.hidden}.", "",
             "| target | identical on every inference rank | verishard received, bytes (inference ranks, total) | "
             "lower bound, bytes (total) | received / bound (max over ranks) | reference received, bytes "
             "(inference ranks, total) | reference / verishard |",
             "|---|---|---:|---:|---:|---:|---:|"]
        for row in per_row:
            ours = sum(row[r]["received"] for r in infer)
            bound = sum(row[r]["lower_bound"] for r in infer)
            ref = sum(row[r]["reference_received"] for r in infer)
            worst = max(row[r]["received"] / row[r]["lower_bound"] for r in infer)
            L.append(f"| {row[0]['label']} | {'yes' if all(row[r]['same'] for r in infer) else 'NO'} | {ours:,} | "
                     f"{bound:,} | {worst:.2f} | {ref:,} | {ref / ours:.2f} |")
        L += ["", "Training ranks receive nothing under verishard; the reference's training rank 0 also receives "
              "three quarters of every full tensor in its gather (not in the table). For block FP8 the lower bound "
              "is the rank's shard widened to the 128 x 128 blocks it touches (what it must see to compute those "
              "blocks' scales)."]
    else:
        L = ["## Layouts NCCL M2N refuses, on 8 processes", "", head, "",
             "NCCL M2N (as published) moves tensors of rank 3 at most between 2-axis meshes with exactly one shard "
             "axis per side and even shards. Each row is one `transfer` of one bf16 tensor from the source layout "
             "to the target layout; *identical*: every target rank's local tensor bit for bit with "
             "`distribute_tensor`'s shard (and ranks outside the target mesh get nothing); received and the lower "
             "bound (the rank's target block less what its source block holds) summed over all 8 ranks; *busiest "
             "sender / mean*: bytes sent by the rank that sends most over the mean of the ranks that send (1.00: "
             "senders evenly loaded; replicas share the sending).", "",
             "| layout | why M2N refuses it | shape | source | target | identical | rounds | received, bytes | "
             "lower bound, bytes | ranks with received = bound | busiest sender / mean |",
             "|---|---|---|---|---|---|---:|---:|---:|---:|---:|"]
        for row, (label, why, shape, src, dst) in zip(per_row, m2n_cases()):
            def lay(side):
                return f"{tuple(side[1])} mesh on ranks {side[0]}, {tuple(str(p) for p in side[2])}".replace("'", "")
            got, bound = sum(r["received"] for r in row), sum(r["lower_bound"] for r in row)
            exact = sum(r["received"] == r["lower_bound"] for r in row)
            sent = [r["sent"] for r in row if r["sent"]]
            assert sum(sent) == got, (label, sum(sent), got)   # every byte handed to isend reached an irecv
            L.append(f"| {label} | {why} | {shape} | {lay(src)} | {lay(dst)} | "
                     f"{'yes' if all(r['same'] for r in row) else 'NO'} | {row[0]['rounds']} | {got:,} | {bound:,} | "
                     f"{exact} of {len(row)} | {max(sent) / (sum(sent) / len(sent)):.2f} |")
    return "\n".join([MARK.format(name), *L, END.format(name)]) + "\n"


MARK, END = "<!-- bench/weight_sync.py --section {} -->", "<!-- end of section {} -->"


def splice(old: str, name: str, text: str) -> str:
    """``old`` (the report file) with section ``name``'s framed text replaced by
    ``text`` (appended where it has none); the splits section is everything
    outside the other sections' frames."""
    blocks = {}
    rest = old
    for other in SECTIONS[1:]:
        a, b = MARK.format(other), END.format(other)
        if a in rest and b in rest:
            i, j = rest.index(a), rest.index(b) + len(b)
            blocks[other] = rest[i:j].strip("\n") + "\n"
            rest = rest[:i].rstrip("\n") + "\n" + rest[j:].lstrip("\n")
    if name == "splits":
        rest = text
    else:
        blocks[name] = text
    return rest.rstrip("\n") + "\n" + "".join("\n" + blocks[s] for s in SECTIONS[1:] if s in blocks)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return_freed_memory()
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch.multiprocessing as mp
    import torch.distributed.tensor  # noqa: F401  (import once, then fork)
    import verishard.torch  # noqa: F401
    from verishard.torch.backend import free_port
    command = "python bench/weight_sync.py" + ("" if len(sys.argv) == 1 else " " + " ".join(sys.argv[1:]))
    start = time.time()
    if args.section != "splits":
        nprocs = len(TRAIN) + len(INFER)
        wargs = {"section": args.section, "hidden": args.hidden, "budget_kib": args.budget_kib}
        with tempfile.TemporaryDirectory() as outdir:
            mp.start_processes(section_worker, args=(free_port(), wargs, outdir), nprocs=nprocs, join=True,
                               start_method="fork")
            recs = [json.load(open(os.path.join(outdir, f"rank{r}.json"))) for r in range(nprocs)]
        text = section_report(args.section, recs, args, time.time() - start, command)
        return _write(text, args.section, args.out)
    runs = []
    for dtype, split in [(d, s) for d in args.dtype.split(",") for s in args.splits.split(",")]:
        train, infer = (int(v) for v in split.split("+"))
        wargs = {"train": train, "infer": infer, "hidden": args.hidden, "layers": args.layers,
                 "vocab": args.vocab, "budget_mib": args.budget_mib, "reps": args.reps, "dtype": dtype}
        with tempfile.TemporaryDirectory() as outdir:
            mp.start_processes(worker, args=(free_port(), wargs, outdir), nprocs=train + infer, join=True,
                               start_method="fork")
            runs.append((f"{split} {dtype}", [json.load(open(os.path.join(outdir, f"rank{r}.json")))
                                 for r in range(train + infer)]))
    text = report(runs, args, time.time() - start, command)
    return _write(text, "splits", args.out)


def _write(text: str, section: str, out: str) -> int:
    """The report file with this section's part rewritten (the others kept), or the section alone on stdout."""
    if out != "-" and os.path.exists(out):
        with open(out) as f:
            text = splice(f.read(), section, text)
    emit_report(text, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
