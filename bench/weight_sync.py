"""Benchmark: weight sync from training ranks to inference ranks, side by
side in one run of gloo processes.

    python bench/weight_sync.py                  # 4+4, 2+6 and 6+2 ranks, writes bench/results/weight_sync.md
    python bench/weight_sync.py --splits 2+2 --hidden 256 --layers 4 --out -

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
that freed buffers go back to the OS) against target size + budget, and
time (slowest rank, median over runs). Every received tensor is compared
bit for bit with ``distribute_tensor`` of the global weight.
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
    L += ["", f"Target size per inference rank (max): {tb / MiB:.1f} MiB; target + budget: "
          f"{(tb + args.budget_mib * MiB) / MiB:.1f} MiB. verishard's peak on an inference rank is its target "
          "blocks (allocated once, written in place) plus at most one round's receive buffers; on a training rank "
          "one round's send buffers (its sources are resident before the call and not counted).", ""]
    return L


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
    emit_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
