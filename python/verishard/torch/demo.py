"""The PyTorch part of ``make demo``: ``python -m verishard.torch.demo``.

Starts 8 gloo processes (``torch.multiprocessing``, forked, MASTER_ADDR
127.0.0.1 and a free port), redistributes a few DTensors on a (2, 4) and a
(2, 2, 2) ``DeviceMesh`` with :func:`verishard.torch.redistribute` and with
``DTensor.redistribute``, and checks on every rank that the local shards are
bit-identical (and, for one case, the gradients). Rank 0 prints, per
redistribution, both plans with their steps, the elements a rank holds at
most along the plan (type level) and receives, and the median time of 5
calls. Exit status 0 when every result matched.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

NPROCS = 8


@dataclass(frozen=True)
class Case:
    title: str
    mesh: tuple[int, ...]
    shape: tuple[int, ...]
    src: str
    dst: str


CASES = [
    Case("rows to columns: one all-to-all (DTensor on gloo: all-gather + chunk)", (2, 4), (256, 256),
         "S(0),R", "S(1),R"),
    Case("swap the mesh axes of two dimensions", (2, 4), (256, 256), "S(0),S(1)", "S(1),S(0)"),
    Case("reorder the mesh axes of one dimension (_StridedShard): one permute", (2, 4), (256, 256),
         "S(0),S(0)", "_S(0,4),S(0)"),
    Case("three mesh axes move together: one all-to-all over 8 ranks", (2, 2, 2), (256, 256),
         "S(0),S(0),S(0)", "S(1),S(1),S(1)"),
    Case("replicated to sharded: no communication", (2, 2, 2), (256, 256), "R,R,R", "S(0),S(1),S(0)"),
    Case("sharded to replicated: the gather is unavoidable", (2, 2, 2), (256, 256), "S(0),S(1),R", "R,R,R"),
]


def parse(text: str):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard
    out = []
    for tok in re.findall(r"_S\(\d+,\d+\)|S\(\d+\)|R", text):
        if tok == "R":
            out.append(Replicate())
        elif tok.startswith("_S("):
            d, sf = tok[3:-1].split(",")
            out.append(_StridedShard(int(d), split_factor=int(sf)))
        else:
            out.append(Shard(int(tok[2:-1])))
    return tuple(out)


def short(p) -> str:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.placement_types import _StridedShard
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, _StridedShard):
        return f"_S({p.dim},{p.split_factor})"
    return f"S({p.dim})"


def dtensor_steps(x, dm, dst):
    """DTensor's (optimized) transforms for this redistribution, and their
    per-rank type-level peak and received elements (its plan, as modelled by
    the cross-check: gather multiplies the local size, slice divides it, an
    all-to-all keeps it)."""
    from torch.distributed.tensor import _redistribute as R
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from .dtensor import describe_transform, transform_costs
    target = DTensorSpec(dm, dst, tensor_meta=x._spec.tensor_meta)
    infos = R._optimize_transform_infos(R._gen_transform_infos(x._spec, target), dm, x.placements, dst)
    moving, peak, recv = transform_costs(infos, dm, x.to_local().numel())
    return [describe_transform(info) for info in moving], peak, recv


def worker(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    logging.getLogger("torch.distributed.tensor._collective_utils").setLevel(logging.ERROR)
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor
    from verishard.torch import plan_for, redistribute
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=NPROCS, timeout=timedelta(seconds=120))
    out = print if rank == 0 else (lambda *a, **k: None)
    names = {2: ("x", "y"), 3: ("x", "y", "z")}
    meshes = {}
    bad = 0
    out(f"verishard.torch demo: {len(CASES)} DTensor redistributions, {NPROCS} gloo processes; each result is "
        "compared bit for bit\nwith DTensor.redistribute on every rank. Figures per rank: peak = most elements "
        "held along the plan\n(type level), recv = elements received; time = median of 5 calls on rank 0 "
        "(8 processes share this machine's cores)\n")

    def same_everywhere(a, b) -> bool:
        ok = torch.tensor([int(torch.equal(a.contiguous().view(-1).view(torch.uint8),
                                           b.contiguous().view(-1).view(torch.uint8)))])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        return bool(ok.item())

    def timed(fn) -> float:
        ts = []
        for _ in range(5):
            dist.barrier()
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1e3

    for i, case in enumerate(CASES, 1):
        if case.mesh not in meshes:
            meshes[case.mesh] = init_device_mesh("cpu", case.mesh, mesh_dim_names=names[len(case.mesh)])
        dm = meshes[case.mesh]
        src, dst = parse(case.src), parse(case.dst)
        G = torch.arange(case.shape[0] * case.shape[1], dtype=torch.float32).reshape(case.shape) / 7
        x = distribute_tensor(G, dm, src, src_data_rank=None)
        ours, ref = redistribute(x, dst), x.redistribute(dm, dst)
        ok = same_everywhere(ours.to_local(), ref.to_local()) and ours.placements == ref.placements
        bad += not ok
        p = plan_for(x, dst)
        t_ours, t_ref = timed(lambda: redistribute(x, dst)), timed(lambda: x.redistribute(dm, dst))
        labels, d_peak, d_recv = dtensor_steps(x, dm, dst)
        out(f"[{i}] {case.title}")
        out(f"    DeviceMesh {case.mesh} {names[len(case.mesh)]}, tensor {case.shape} float32: "
            f"({', '.join(map(short, src))}) -> ({', '.join(map(short, dst))})")
        steps = ", ".join(map(str, p.collectives)) if p is not None and p.collectives else "(none)"
        out(f"    ours ({'verified plan on ' + str(p.mesh) if p is not None else 'kept as is'}): {steps}")
        out(f"    DTensor: {'; '.join(labels) or '(none)'}")
        rows = [("", "steps", "peak", "recv", "time ms", "result")]
        rows.append(("ours", str(len(p.collectives) if p is not None else 0), str(p.peak if p else 0),
                     str(p.traffic if p else 0), f"{t_ours:.2f}",
                     "identical on all 8 ranks" if ok else "DIFFERS from DTensor on some rank"))
        rows.append(("DTensor", str(len(labels)), str(d_peak), str(d_recv), f"{t_ref:.2f}", "(reference)"))
        w = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
        for r in rows:
            out("      " + "  ".join(c.ljust(w[k]) if k in (0, 5) else c.rjust(w[k]) for k, c in enumerate(r)))
        out("")
    # gradients: the backward of case 1 runs the reverse verified plan
    dm = meshes[(2, 4)]
    src, dst = parse(CASES[0].src), parse(CASES[0].dst)
    G = torch.arange(256 * 256, dtype=torch.float64).reshape(256, 256)
    w = distribute_tensor(G.flip(0), dm, dst, src_data_rank=None).to_local()
    grads = []
    for f in (lambda v: redistribute(v, dst), lambda v: v.redistribute(dm, dst)):
        v = distribute_tensor(G, dm, src, src_data_rank=None).requires_grad_()
        (f(v).to_local() * w).sum().backward()
        grads.append(v.grad)
    gok = same_everywhere(grads[0].to_local(), grads[1].to_local()) and grads[0].placements == grads[1].placements
    bad += not gok
    out(f"gradient of case 1 (backward = the reverse verified plan): "
        f"{'identical to DTensor' if gok else 'DIFFERS from DTensor'}'s on all 8 ranks")
    out(f"all {len(CASES)} redistributions and the gradient matched DTensor on every rank" if not bad
        else f"FAILED: {bad} result(s) differ from DTensor")
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank whose peer closed first)
    dist.destroy_process_group()
    if bad:
        sys.exit(1)


def main() -> int:
    """Fork 8 workers (after importing torch and verishard once, here) and
    wait; 0 when every rank's results matched, else 1."""
    import torch.multiprocessing as mp
    import torch.distributed.tensor  # noqa: F401
    import verishard.torch  # noqa: F401
    sys.stdout.flush()
    try:
        from .backend import free_port
        mp.start_processes(worker, args=(free_port(),), nprocs=NPROCS, join=True, start_method="fork")
    except mp.ProcessExitedException as e:
        print(f"verishard.torch demo FAILED: {e}", file=sys.stderr)
        return 1
    except mp.ProcessRaisedException as e:
        print(f"verishard.torch demo FAILED:\n{e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Case", "CASES", "worker", "main"]
