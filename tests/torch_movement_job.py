"""The 4-process gloo job of tests/test_backend_movement.py: ``python
tests/torch_movement_job.py OUTDIR`` forks 4 processes on a (2, 2)
DeviceMesh (``x``, ``y``); every rank runs the one-step plans of
``CASES`` (tests/movement_cases.py) with the torch backend
(``runtime.torch.run_plan``) on its own source buffer and writes every
result to ``OUTDIR/rank<r>.json``; the test compares them with the
extracted movement.
"""

from __future__ import annotations

import os
import sys
import traceback
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import movement_cases as mvc  # noqa: E402
from torch_job import finish_worker, fork_workers  # noqa: E402

NPROCS = 4
MESH = "x=2,y=2"


def cases():
    return (mvc.even_cases(MESH, (4, 4), 2) + mvc.uneven_cases(MESH, (3, 5), 3) + mvc.partial_cases(MESH))


def worker(rank: int, port: int, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from verishard.torch.backend import mesh_groups, run_plan
    torch.set_num_threads(1)
    rec: dict = {"rank": rank, "results": [], "error": None}
    try:
        dist.init_process_group("gloo", rank=rank, world_size=NPROCS, timeout=timedelta(seconds=60))
        groups = mesh_groups(init_device_mesh("cpu", (2, 2), mesh_dim_names=("x", "y")))
        for _, plan in cases():
            x = torch.from_numpy(mvc.inputs(plan)[groups.rank])
            rec["results"].append(run_plan(plan, x, groups).tolist())
    except BaseException as e:  # noqa: BLE001 - reported through the file
        rec["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    finally:
        finish_worker(outdir, rank, rec)


if __name__ == "__main__":
    import verishard.torch.backend  # noqa: F401 - imported once, then forked
    fork_workers(worker, sys.argv[1], NPROCS)
