"""In-place loads into DTensor state dicts on 2 gloo processes, for
tests/test_checkpoint_load_state.py.

``python tests/load_state_job.py DIR``: 2 gloo processes save a state dict
of DTensors (``Shard(0)``, ``Replicate()``), a plain tensor and a value with
``checkpoint.save`` and the same state with ``dcp.save``; then each loads
both into a state dict of zeroed DTensors with other placements (``Shard(1)``,
an uneven ``Shard(0)``) and a zeroed tensor, and checks that the result holds
the very objects passed, each local tensor at the same address, equal bit
for bit to ``distribute_tensor``'s shard. Each rank prints ``OK`` or what
was wrong.
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from verishard import checkpoint  # noqa: E402

W = np.arange(6 * 10, dtype=np.float32).reshape(6, 10) - 17.5
U = (np.arange(5 * 3, dtype=np.int64).reshape(5, 3) * 7) % 11   # 5 rows over 2 ranks: 3 and 2
B = np.arange(4, dtype=np.float64) / 3


def rank_main(rank: int, world: int, path: str, port: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        m = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        state = {"model": {"w": distribute_tensor(torch.from_numpy(W), m, [Shard(0)]),
                           "u": distribute_tensor(torch.from_numpy(U), m, [Replicate()])},
                 "b": torch.from_numpy(B), "step": 9}
        checkpoint.save(state, path)
        dcp.save(state, checkpoint_id=path + "-dcp")
        placements = {"w": [Shard(1)], "u": [Shard(0)]}
        full = {"w": W, "u": U}
        for where in (path, path + "-dcp"):
            target = {"model": {k: distribute_tensor(torch.zeros(full[k].shape, dtype=torch.from_numpy(full[k]).dtype),
                                                     m, placements[k]) for k in ("w", "u")},
                      "b": torch.zeros(4, dtype=torch.float64), "step": None}
            ptrs = {k: v.to_local().data_ptr() for k, v in target["model"].items()}
            got = checkpoint.load(where, target)
            bad = []
            for k in ("w", "u"):
                x, ref = got["model"][k], distribute_tensor(torch.from_numpy(full[k]), m, placements[k]).to_local()
                if x is not target["model"][k] or not isinstance(x, DTensor):
                    bad.append(f"{k}: not the target object")
                elif x.to_local().data_ptr() != ptrs[k] or x.to_local().numpy().tobytes() != ref.numpy().tobytes():
                    bad.append(f"{k}: local {x.to_local().tolist()} at a new address or not {ref.tolist()}")
            if got["b"] is not target["b"] or not torch.equal(got["b"], torch.from_numpy(B)) or got["step"] != 9:
                bad.append(f"b/step: {got['b']} {got['step']}")
            print(f"[rank {rank}] {'dcp' if where.endswith('-dcp') else 'ours'} "
                  f"{'OK' if not bad else 'WRONG ' + '; '.join(bad)}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp
    from verishard.torch.backend import free_port
    mp.start_processes(rank_main, args=(2, sys.argv[1], str(free_port())), nprocs=2, join=True, start_method="fork")
