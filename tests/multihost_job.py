"""The job of tests/test_multihost.py, run by ``torchrun --nnodes 2
--nproc-per-node 2`` once per host (network namespace): ``multihost_job.py
OUTDIR``. Ranks 0 and 1 are on the first host, 2 and 3 on the second (their
``LOCAL_RANK`` is 0 and 1 on each); the rendezvous address is the first
host's, which the second reaches only over the link between them (each
namespace has its own loopback). Every rank writes ``OUTDIR/rank<r>.json``.

Cases:

- ``redistribute``: ``verishard.torch.redistribute`` on a (2, 2) mesh whose
  rows are the hosts and on a sub-mesh of one rank per host, against
  ``DTensor.redistribute``.

- ``transfer``: a weight sync from the first host's ranks (FSDP ``Shard(0)``)
  to the second's (tensor parallel: ``Shard(0)``, ``Shard(1)``,
  ``Replicate``; bf16 and float32; uneven), and one tensor onto a (2, 2) mesh
  whose rows are the two hosts: every tensor bit for bit with
  ``distribute_tensor``'s shard; bytes received counted where they are
  handed to the point-to-point ops (``counting_rounds``) against the lower
  bound.
- ``checkpoint``: a state saved from a mesh over all four ranks of both
  hosts into OUTDIR/ckpt (one directory both hosts see, as any multi-host
  checkpoint needs a shared file system), then loaded in place onto a
  (2, 2) mesh with other placements: bit for bit, the step read back.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta

NPROCS = 4
BUDGET = 256


def same(a, b) -> bool:
    import torch
    return (tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype
            and torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8)))


def full(shape, dtype, seed):
    import torch
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def transfer_case(rank: int) -> dict:
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from verishard.torch.backend import counting_rounds
    from verishard.torch import plan_transfer, transfer
    train = DeviceMesh("cpu", [0, 1], mesh_dim_names=("fsdp",))          # the first host
    infer = DeviceMesh("cpu", [2, 3], mesh_dim_names=("tp",))            # the second host
    hosts = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("host", "tp"))
    layouts = {"embed": ((37, 16), torch.bfloat16, infer, (Shard(0),)),
               "qkv": ((48, 16), torch.bfloat16, infer, (Shard(0),)),
               "out": ((16, 24), torch.float32, infer, (Shard(1),)),
               "norm": ((16,), torch.float32, infer, (Replicate(),)),
               "w2": ((10, 7), torch.float32, hosts, (Shard(1), Shard(0)))}
    tensors, targets, want = {}, {}, {}
    for k, (name, (shape, dtype, mesh, pl)) in enumerate(layouts.items()):
        g = full(shape, dtype, seed=k)
        tensors[name] = distribute_tensor(g, train, (Shard(0),), src_data_rank=None)
        targets[name] = (mesh, pl)
        want[name] = distribute_tensor(g, mesh, pl, src_data_rank=None).to_local()
    sched = plan_transfer(tensors, targets, budget_bytes=BUDGET)
    with counting_rounds() as traffic:
        got = transfer(tensors, targets, budget_bytes=BUDGET)
    return {"names": sorted(got), "same": {n: same(t.to_local(), want[n]) for n, t in got.items()},
            "received": traffic.received, "sent": traffic.sent, "lower_bound": sched.lower_bound(rank),
            "schedule_sent": sched.sent(rank), "rounds": len(sched.rounds)}


def redistribute_case(rank: int) -> dict:
    """verishard.torch.redistribute on a (2, 2) mesh whose rows are the
    hosts (its groups span them) and on a sub-mesh of one rank of each host
    (groups made among its members only), against DTensor's own."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from verishard.torch import redistribute
    out = {}
    for label, ranks, src, dst in (("(2, 2) over both hosts", [[0, 1], [2, 3]], (Shard(0), Replicate()),
                                    (Replicate(), Shard(1))),
                                   ("ranks 1 and 2, one per host", [1, 2], (Shard(1),), (Shard(0),))):
        mesh = DeviceMesh("cpu", ranks)   # made on every rank; run by its members (the others skip, as in training)
        if mesh.get_coordinate() is None:
            continue
        x = distribute_tensor(full((12, 10), torch.float32, seed=21), mesh, src, src_data_rank=None)
        ours, theirs = redistribute(x, dst), x.redistribute(mesh, dst)
        out[label] = same(ours.to_local(), theirs.to_local()) and ours.placements == theirs.placements
    return {"same": out}


def checkpoint_case(rank: int, outdir: str) -> dict:
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from verishard import checkpoint
    line = DeviceMesh("cpu", [0, 1, 2, 3], mesh_dim_names=("fsdp",))
    grid = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
    w, b = full((10, 12), torch.float32, seed=11), full((9,), torch.bfloat16, seed=12)
    state = {"model": {"w": distribute_tensor(w, line, (Shard(0),), src_data_rank=None),
                       "b": distribute_tensor(b, line, (Shard(0),), src_data_rank=None)}, "step": 7}
    path = os.path.join(outdir, "ckpt")
    checkpoint.save(state, path)
    mine = {"model": {"w": distribute_tensor(torch.zeros(10, 12), grid, (Replicate(), Shard(1))),
                      "b": distribute_tensor(torch.zeros(9, dtype=torch.bfloat16), grid, (Shard(0), Replicate()))},
            "step": None}
    out = checkpoint.load(path, mine)
    return {"in_place": out["model"]["w"] is mine["model"]["w"], "step": out["step"],
            "same": {"w": same(mine["model"]["w"].to_local(),
                               distribute_tensor(w, grid, (Replicate(), Shard(1)), src_data_rank=None).to_local()),
                     "b": same(mine["model"]["b"].to_local(),
                               distribute_tensor(b, grid, (Shard(0), Replicate()), src_data_rank=None).to_local())}}


def main(outdir: str) -> None:
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    rec = {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "node": int(os.environ["GROUP_RANK"]),
           "master_addr": os.environ["MASTER_ADDR"], "records": []}
    try:
        dist.init_process_group("gloo", timeout=timedelta(seconds=60))
        rec["world"] = dist.get_world_size()
        for case, fn in (("transfer", lambda: transfer_case(rank)), ("redistribute", lambda: redistribute_case(rank)),
                         ("checkpoint", lambda: checkpoint_case(rank, outdir))):
            try:
                rec["records"].append({"case": case, **fn()})
            except Exception as e:  # noqa: BLE001 - reported through the file
                rec["records"].append({"case": case, "error": f"{type(e).__name__}: {e}",
                                       "traceback": traceback.format_exc()})
        dist.barrier()   # every rank done before gloo's sockets close
    except BaseException as e:  # noqa: BLE001
        rec["records"].append({"case": "crash", "error": f"{type(e).__name__}: {e}",
                               "traceback": traceback.format_exc()})
    finally:
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(rec, f)
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
