"""The 2-process gloo job of tests/test_agreement.py: ``python
tests/agreement_job.py OUTDIR CASE`` forks 2 processes that run CASE and
write ``OUTDIR/rank<r>.json`` (every wait bounded: the deadline is
``DEADLINE_S``, the process group's own timeout ``PG_TIMEOUT_S``).

Cases:

- ``mesh_order``: rank 0 builds ``DeviceMesh("cpu", [0, 1])``, rank 1
  ``DeviceMesh("cpu", [1, 0])``; ``redistribute`` with
  ``check_agreement="first"`` and ``"always"``: every rank must refuse.
- ``src_ranks``: ``transfer`` of a plain tensor with ``src_ranks=[0]`` on
  rank 0 and ``[1]`` on rank 1, to a mesh over both ranks and to one over
  rank 1 only: every rank must refuse.
- ``refuse_and_leave``: the ranks ask for different targets; every rank
  records its error and leaves at once (rank 0 hosts the store).
- ``cache_clear``: a plan agreed on, then ``cache_clear()`` on rank 0 only
  and the same call again (``check_agreement="first"``): both ranks must
  fail within the deadline, naming rank 1, rather than wait in a collective.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta

NPROCS = 2
DEADLINE_S = 3.0
PG_TIMEOUT_S = 60


def error_record(e: BaseException) -> dict:
    return {"type": type(e).__name__, "message": str(e), "mro": [c.__name__ for c in type(e).__mro__],
            "missing": list(getattr(e, "missing", ()))}


def attempt(fn) -> dict:
    t = time.monotonic()
    rec: dict = {"error": None}
    try:
        rec["result"] = fn()
    except Exception as e:  # noqa: BLE001 - judged by the test
        rec["error"] = error_record(e)
    rec["seconds"] = time.monotonic() - t
    return rec


def mesh_order(rank: int) -> list[dict]:
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from verishard.torch import redistribute
    mesh = DeviceMesh("cpu", torch.tensor([0, 1] if rank == 0 else [1, 0]))
    G = torch.arange(8.0).reshape(4, 2)
    x = DTensor.from_local(G[2 * rank:2 * rank + 2].clone(), mesh, (Shard(0),), run_check=False)
    out = []
    for mode in ("first", "always"):
        rec = attempt(lambda: redistribute(x, (Replicate(),), check_agreement=mode,
                                           deadline_s=DEADLINE_S).to_local().tolist())
        out.append({"label": mode, **rec})
    return out


def src_ranks(rank: int) -> list[dict]:
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard
    from verishard.torch import transfer
    both = DeviceMesh("cpu", torch.tensor([0, 1]))
    one = DeviceMesh("cpu", torch.tensor([1]))
    G = torch.arange(8.0).reshape(4, 2)
    mine = G if rank == 0 else torch.zeros(4, 2)   # only rank 0 holds the tensor
    out = []
    for label, mesh in (("to both ranks", both), ("to rank 1 only", one)):
        rec = attempt(lambda: {k: v.to_local().tolist() for k, v in
                               transfer({"w": mine}, {"w": (mesh, (Shard(0),))}, src_ranks=[rank],
                                        deadline_s=DEADLINE_S).items()})
        out.append({"label": label, **rec})
    return out


def refuse_and_leave(rank: int) -> list[dict]:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from verishard.torch import redistribute
    mesh = init_device_mesh("cpu", (NPROCS,))
    x = distribute_tensor(torch.arange(8.0).reshape(4, 2), mesh, (Shard(0),), src_data_rank=None)
    target = (Replicate(),) if rank == 0 else (Shard(1),)
    return [{"label": "different targets", **attempt(lambda: redistribute(x, target, deadline_s=DEADLINE_S))}]


def cache_clear(rank: int) -> list[dict]:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import verishard.torch as vt
    mesh = init_device_mesh("cpu", (NPROCS,))
    x = distribute_tensor(torch.arange(8.0).reshape(4, 2), mesh, (Shard(0),), src_data_rank=None)
    out = [{"label": "agreed", **attempt(lambda: vt.redistribute(x, (Replicate(),), deadline_s=DEADLINE_S)
                                         .to_local().tolist())}]
    if rank == 0:
        vt.cache_clear()
    out.append({"label": "cache cleared on rank 0",
                **attempt(lambda: vt.redistribute(x, (Replicate(),), deadline_s=DEADLINE_S).to_local().tolist())})
    out.append({"label": "after", **attempt(lambda: vt.redistribute(x, (Replicate(),), deadline_s=DEADLINE_S))})
    return out


def slow_peer(rank: int) -> list[dict]:
    """Rank 1 enters the data movement 2.5 s after rank 0 (no agreement), so
    that rank 0 waits in its collectives and point-to-point rounds over
    several slices of POLL_S: the results must be exact."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from verishard.torch import redistribute, transfer
    mesh = init_device_mesh("cpu", (NPROCS,))
    G = torch.arange(24.0).reshape(4, 6)
    x = distribute_tensor(G, mesh, (Shard(0),), src_data_rank=None)
    out = []
    for label, fn in (("all_gather", lambda: redistribute(x, (Replicate(),), check_agreement=False).to_local()),
                      ("all_to_all", lambda: redistribute(x, (Shard(1),), check_agreement=False).to_local()),
                      ("transfer", lambda: transfer({"w": x}, {"w": (DeviceMesh("cpu", torch.tensor([1, 0])),
                                                                     (Shard(1),))},
                                                    check_agreement=False)["w"].to_local())):
        if rank == 1:
            time.sleep(2.5)
        rec = attempt(lambda: fn().tolist())
        if rec["error"] is None:
            want = {"all_gather": G, "all_to_all": G[:, 3 * rank:3 * rank + 3],
                    "transfer": G[:, 3 * (1 - rank):3 * (1 - rank) + 3]}[label]
            rec["exact"] = rec["result"] == want.tolist()
        out.append({"label": label, **rec})
    return out


CASES = {"slow_peer": slow_peer, "mesh_order": mesh_order, "src_ranks": src_ranks, "refuse_and_leave": refuse_and_leave,
         "cache_clear": cache_clear}


def worker(rank: int, port: int, outdir: str, case: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    records: list[dict] = []
    try:
        dist.init_process_group("gloo", rank=rank, world_size=NPROCS, timeout=timedelta(seconds=PG_TIMEOUT_S))
        records = [{"case": case, **rec} for rec in CASES[case](rank)]
    except BaseException as e:  # noqa: BLE001 - reported through the file
        records.append({"case": "crash", "label": "crash", "error": error_record(e),
                        "traceback": traceback.format_exc()})
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "records": records}, f)
    os._exit(0)   # at once, as a script ending after the error would (no barrier, no destroy)


def main(outdir: str, case: str) -> None:
    import torch.distributed.tensor  # noqa: F401  (import once, then fork)
    import verishard.torch  # noqa: F401
    from torch_job import fork_workers
    fork_workers(worker, outdir, NPROCS, case)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1], sys.argv[2])
