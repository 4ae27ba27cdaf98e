"""The 4-process job of tests/test_torch_world.py: ``python
tests/torch_world_job.py OUTDIR`` forks 4 gloo processes; every rank runs
every case and writes ``OUTDIR/rank<r>.json``.

Cases:

- ``crossmesh``: ``verishard.torch.redistribute(x, placements,
  device_mesh=other)`` between DeviceMeshes of disjoint, overlapping and
  equal rank sets (a sub-mesh ``mesh["y"]`` among them), compared on every
  target rank with ``distribute_tensor`` of the global tensor; ranks outside
  the target get an empty local tensor; refusals on every rank.
- ``transfer``: a state dict moved from 2 ranks (``Shard(0)``, FSDP-style,
  and a plain tensor on rank 0) to 2 others (tensor-parallel placements,
  uneven and rank-4 tensors among them) in rounds of a small budget: every
  received tensor bit for bit, bytes received against the lower bound, each
  round's loads against the budget.
- ``enable``: a tensor-parallel MLP forward and backward under
  ``verishard.torch.enabled()`` against DTensor's own.
- ``overhead``: agreements made by a first call, cached calls (ours and
  DTensor's argument order), ``check_agreement="always"`` and ``False``.
- ``deadline`` (last: the agreement numbers are off by one afterwards):
  rank 3 does not call; ranks 0-2 must fail within the deadline naming it.
"""

from __future__ import annotations

import sys
import time
import traceback

from torch_job import error_record, run_cases, same

NPROCS = 4
DEADLINE_S = 3.0


def global_tensor(shape, dtype, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)


def crossmesh_cases(add, rank) -> None:
    import torch
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    from verishard.torch import redistribute
    S, R = Shard, Replicate
    m22 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("x", "y"))
    left = DeviceMesh("cpu", torch.tensor([0, 1]), mesh_dim_names=("a",))
    right = DeviceMesh("cpu", torch.tensor([2, 3]), mesh_dim_names=("b",))
    three = DeviceMesh("cpu", torch.tensor([3, 1, 2]), mesh_dim_names=("c",))
    cases = [
        ("disjoint 0,1 -> 2,3", left, (S(0),), right, (S(1),), (6, 5), torch.float32),
        ("disjoint, uneven, to Replicate", left, (S(1),), right, (R(),), (3, 7), torch.int64),
        ("overlapping (2,2) -> 3,1,2", m22, (S(0), S(1)), three, (S(0),), (7, 6), torch.bfloat16),
        ("overlapping 2,3 -> (2,2)", right, (S(0),), m22, (S(1), S(0)), (4, 8, 3), torch.float64),
        ("sub-mesh mesh['y'], same mesh", m22["y"], (S(0),), None, (R(),), (5, 4), torch.float32),
        ("sub-mesh mesh['x'], device_mesh= itself", m22["x"], (S(1),), m22["x"], (S(0),), (4, 6), torch.float32),
    ]
    for k, (label, src_mesh, src, dst_mesh, dst, shape, dtype) in enumerate(cases):
        G = global_tensor(shape, dtype, seed=k)
        x = distribute_tensor(G, src_mesh, src, src_data_rank=None)
        rec = {"case": "crossmesh", "label": label}
        try:
            y = redistribute(x, dst, device_mesh=dst_mesh)
            target = dst_mesh or src_mesh
            member = rank in target.mesh.flatten().tolist()
            rec["member"] = member
            rec["placements_ok"] = y.placements == tuple(dst) and y.device_mesh == target and y.shape == G.shape
            if member:
                want = distribute_tensor(G, target, dst, src_data_rank=None).to_local()
                rec["ok"] = same(y.to_local(), want)
            else:
                rec["ok"] = y.to_local().numel() == 0
        except Exception as e:  # noqa: BLE001 - judged by the test
            rec["error"] = error_record(e)
            rec["traceback"] = traceback.format_exc()
        add(**rec)
    # Partial sources: reduced on their own mesh, then moved; exact (integers)
    from torch.distributed.tensor import DTensor
    for label, src_mesh, src, dst_mesh, dst, op in (
            ("partial sum 0,1 -> 2,3", left, (Partial("sum"),), right, (S(1),), "sum"),
            ("partial max (2,2) -> 3,1,2", m22, (Partial("max"), S(0)), three, (S(0),), "max")):
        G = torch.randint(-50, 50, (6, 5), generator=torch.Generator().manual_seed(7), dtype=torch.int64)
        coords = src_mesh.get_coordinate()
        rec = {"case": "crossmesh_partial", "label": label}
        try:
            local = torch.empty(0, dtype=G.dtype)
            if coords is not None:
                shard = distribute_tensor(G, src_mesh, [R() if p.is_partial() else p for p in src],
                                          src_data_rank=None).to_local()
                c = coords[0]   # mesh dim 0 is the pending one: its members' terms reduce to the shard
                if op == "sum":   # two terms adding up to the shard
                    local = shard - 3 if c == 0 else torch.full_like(shard, 3)
                else:             # the shard and a smaller term
                    local = shard - 7 * c
            x = DTensor.from_local(local, src_mesh, src, run_check=False, shape=G.shape,
                                   stride=G.stride())
            y = redistribute(x, dst, device_mesh=dst_mesh)
            member = rank in dst_mesh.mesh.flatten().tolist()
            want = distribute_tensor(G, dst_mesh, dst, src_data_rank=None).to_local() if member else None
            rec["ok"] = same(y.to_local(), want) if member else y.to_local().numel() == 0
            rec["placements_ok"] = y.placements == tuple(dst) and y.device_mesh == dst_mesh
        except Exception as e:  # noqa: BLE001 - judged by the test
            rec["error"] = error_record(e)
            rec["traceback"] = traceback.format_exc()
        add(**rec)
    # refusals, on every rank alike, before any data moves; then a good call still runs
    G = global_tensor((4, 4), torch.float32, seed=9)
    x = distribute_tensor(G, left, (S(0),), src_data_rank=None)
    for label, fn in (
            ("partial target", lambda: redistribute(x, (Partial(),), device_mesh=right)),
            ("ranks disagree", lambda: redistribute(x, (S(1),) if rank == 3 else (S(0),), device_mesh=right)),
            ("dim out of range", lambda: redistribute(x, (S(2),), device_mesh=right))):
        rec = {"case": "crossmesh_error", "label": label, "error": None}
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            rec["error"] = error_record(e)
        y = redistribute(x, (R(),), device_mesh=right)
        rec["ok_after"] = same(y.to_local(), G) if rank in (2, 3) else y.to_local().numel() == 0
        add(**rec)


def transfer_case(add, rank) -> None:
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from verishard.torch.backend import counting_rounds
    from verishard.torch import plan_transfer, transfer
    S, R = Shard, Replicate
    train = DeviceMesh("cpu", torch.tensor([0, 1]), mesh_dim_names=("fsdp",))
    infer = DeviceMesh("cpu", torch.tensor([2, 3]), mesh_dim_names=("tp",))
    infer2 = DeviceMesh("cpu", torch.tensor([[3], [2]]), mesh_dim_names=("dp", "tp"))
    both = DeviceMesh("cpu", torch.tensor([[0, 1], [2, 3]]), mesh_dim_names=("dp", "tp"))
    layouts = {  # name: (shape, dtype, target mesh, target placements)
        "embed.weight": ((33, 16), torch.bfloat16, infer, (S(0),)),
        "layers.0.attn.qkv.weight": ((48, 16), torch.float32, infer, (S(0),)),
        "layers.0.attn.out.weight": ((16, 16), torch.float32, infer, (S(1),)),
        "layers.0.mlp.up.weight": ((40, 16), torch.float16, infer2, (S(0), S(1))),
        "layers.0.norm.weight": ((16,), torch.float32, infer, (R(),)),
        "conv.kernel": ((5, 3, 3, 4), torch.float32, infer, (S(3),)),
        "experts.w": ((3, 7, 6), torch.float64, infer2, (S(1), R())),
        # two shard axes, uneven, onto a mesh over every rank (ranks 0 and 1 are source and target)
        "moe.w2": ((7, 10), torch.float32, both, (S(0), S(1))),
    }
    tensors, targets, want = {}, {}, {}
    for k, (name, (shape, dtype, mesh, pl)) in enumerate(layouts.items()):
        G = global_tensor(shape, dtype, seed=100 + k)
        tensors[name] = distribute_tensor(G, train, (S(0),), src_data_rank=None)
        targets[name] = (mesh, pl)
        want[name] = distribute_tensor(G, mesh, pl, src_data_rank=None).to_local()
    G = global_tensor((9, 5), torch.float32, seed=7)  # a plain tensor held whole by rank 0
    tensors["lm_head.bias"] = G if rank == 0 else torch.empty(9, 5, device="meta")
    targets["lm_head.bias"] = (infer, (S(0),))
    want["lm_head.bias"] = distribute_tensor(G, infer, (S(0),), src_data_rank=None).to_local()
    budget = 512
    rec = {"case": "transfer", "budget": budget}
    try:
        sched = plan_transfer(tensors, targets, src_ranks=[0], budget_bytes=budget)
        with counting_rounds() as traffic:   # what run_rounds handed to isend / irecv, and its buffers' peak
            got = transfer(tensors, targets, src_ranks=[0], budget_bytes=budget)
        rec["counted"] = {"sent": traffic.sent, "received": traffic.received, "rounds": traffic.rounds,
                          "peak_buffer_bytes": traffic.peak_buffer_bytes}
        rec["names"] = sorted(got)
        rec["same"] = {n: same(t.to_local(), want[n]) for n, t in got.items()}
        rec["specs"] = {n: t.placements == tuple(targets[n][1]) and t.device_mesh is targets[n][0]
                        for n, t in got.items()}
        rec["received"], rec["lower_bound"] = sched.received(rank), sched.lower_bound(rank)
        rec["sent"], rec["target_bytes"] = sched.sent(rank), sched.target_bytes(rank)
        rec["rounds"] = len(sched.rounds)
        rec["loads"] = sched.round_loads(rank)
        rec["single_cut_rounds"] = [len(rd) == 1 for rd in sched.rounds]
        rec["tensors"] = len(sched.moves)
    except Exception as e:  # noqa: BLE001
        rec["error"] = error_record(e)
        rec["traceback"] = traceback.format_exc()
    add(**rec)


def enable_case(add, rank) -> None:
    """A tensor-parallel MLP (column-wise then row-wise Linear; once with a
    replicated output, once with a sequence-sharded one), forward and
    backward, with DTensor's own redistributions and under
    verishard.torch.enabled(): output and every gradient bit for bit."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    import verishard.torch as vt
    mesh = init_device_mesh("cpu", (NPROCS,), mesh_dim_names=("tp",))

    def run(row):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
        m = parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": row})
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
        y = m(x)
        (y * y).sum().backward()
        return [y.detach()] + [p.grad.to_local() for p in m.parameters()]

    for label, row in (("replicated output", RowwiseParallel()),
                       ("sequence-sharded output", RowwiseParallel(output_layouts=Shard(0)))):
        ref = run(row)
        vt.routing_info(reset=True)
        with vt.enabled():
            got = run(row)
        add(case="enable", label=label, same=[same(a, b) for a, b in zip(ref, got)], info=vt.routing_info(),
            restored=vt._ROUTING["depth"] == 0)


def overhead_case(add, rank) -> None:
    """What a cached call costs beyond its collectives: agreements counted
    (verishard.torch's calls of agree) over repeated calls with each
    check_agreement, and DTensor's argument order giving the same result."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import verishard.torch as vt
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("x", "y"))
    x = distribute_tensor(global_tensor((16, 16), torch.float32, 4), mesh, (Shard(0), Replicate()),
                          src_data_rank=None)
    dst = (Shard(1), Replicate())
    real, count = vt.agree, [0]

    def counting(*a, **k):
        count[0] += 1
        return real(*a, **k)
    vt.agree = counting
    try:
        vt.cache_clear()
        counts = {}
        for label, fn in (("first call", lambda: vt.redistribute(x, dst)),
                          ("5 cached calls", lambda: [vt.redistribute(x, dst) for _ in range(5)]),
                          ("5 cached calls, DTensor's order", lambda: [vt.redistribute(x, mesh, dst) for _ in range(5)]),
                          ("5 calls, always", lambda: [vt.redistribute(x, dst, check_agreement="always")
                                                       for _ in range(5)]),
                          ("5 calls, False", lambda: [vt.redistribute(x, dst, check_agreement=False)
                                                      for _ in range(5)])):
            before = count[0]
            fn()
            counts[label] = count[0] - before
        info = vt.cache_info()
    finally:
        vt.agree = real
    same_order = same(vt.redistribute(x, mesh, dst).to_local(), x.redistribute(mesh, dst).to_local())
    add(case="overhead", counts=counts, plans=info["plans"], same_order=same_order)


def deadline_case(add, rank) -> None:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from verishard.torch import redistribute
    mesh = init_device_mesh("cpu", (NPROCS,), mesh_dim_names=("w",))
    x = distribute_tensor(global_tensor((8, 4), torch.float32, 3), mesh, (Shard(0),), src_data_rank=None)
    rec = {"case": "deadline", "error": None, "deadline": DEADLINE_S}
    if rank != 3:  # rank 3 does not arrive
        t = time.monotonic()
        try:
            redistribute(x, (Replicate(),), deadline_s=DEADLINE_S)
        except Exception as e:  # noqa: BLE001
            rec["error"] = error_record(e)
            rec["missing"] = list(getattr(e, "missing", ()))
        rec["seconds"] = time.monotonic() - t
    add(**rec)
    if rank == 0:  # rank 0 hosts the store: the others' reading of who is missing needs it a moment longer
        time.sleep(2)


CASES = {"crossmesh": crossmesh_cases, "transfer": transfer_case, "enable": enable_case, "overhead": overhead_case,
         "deadline": deadline_case}


def main(outdir: str, only: str = "") -> None:
    import torch.distributed.tensor  # noqa: F401  (import once, then fork)
    import torch._dynamo  # noqa: F401
    import verishard.torch  # noqa: F401
    run_cases(outdir, NPROCS, CASES, only)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
