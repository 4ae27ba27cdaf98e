"""Multi-process state-dict checkpoints for tests/test_checkpoint_state.py.

``mpirun -n 4 python tests/checkpoint_job.py mpi DIR``: 4 MPI ranks save a
state dict of numpy local blocks (two layouts, a 3-D array, values) with the
communicator, then 3 of them load it onto other layouts and check every
block; a second save replaces the first.

``python tests/checkpoint_job.py torch DIR SAVERS LOADERS``: SAVERS gloo
processes save a state dict of DTensors (``Shard(0)`` on a 1-D mesh, an
uneven ``[Shard(1), Shard(0)]`` on a 2-D one), a plain tensor and values,
with no commit call, and the same state with ``dcp.save`` into ``DIR-dcp``;
then LOADERS gloo processes load both as DTensors with other placements. Each rank prints ``OK`` or what was wrong.

``python tests/checkpoint_job.py layouts DIR``: 4 gloo processes save
DTensors (``Shard(0)`` on a 1-D mesh, ``[Shard(1), Shard(0)]`` on a 2 x 2
one) with ``checkpoint.save`` and with ``dcp.save``, then load both onto
the 2 x 2 layouts our types cannot express (:data:`NESTED`) and compare
every rank's local tensor with ``distribute_tensor``'s, bit for bit.
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from verishard import ArrayType, checkpoint  # noqa: E402

W = np.arange(12 * 10, dtype=np.float32).reshape(12, 10) - 50
V = (np.arange(6 * 5 * 4, dtype=np.int64).reshape(6, 5, 4) * 7) % 31
E = np.arange(7 * 9, dtype=np.float64).reshape(7, 9) / 3


def block(t: ArrayType, a: np.ndarray, r: int) -> np.ndarray:
    return a[tuple(slice(s, s + n) for s, n in zip(t.block_starts(r), t.valid_shape(r)))]


def mpi_main(path: str) -> int:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    me = comm.Get_rank()
    tw = ArrayType.parse("[3{x}12, 10]", "x=4")
    tv = ArrayType.parse("[3{a}6, 5, 2{b}4]", "a=2,b=2")
    bad = 0
    for k, scale in enumerate((1, 2)):
        state = {"model": {"w": block(tw, W * scale, me), "v": block(tv, V * scale, me)}, "step": k,
                 "note": f"save {k}"}
        checkpoint.save(state, path, {"model": {"w": tw, "v": tv}}, rank=me, comm=comm)
        if me < 3:
            got = checkpoint.load(path, {"model": {"w": ("u=3", "[12, 4{u}10]"), "v": ("u=3", "[6, 2{u}5, 4]")},
                                         "step": None, "note": None}, rank=me)
            ok = (np.array_equal(got["model"]["w"], (W * scale)[:, 4 * me:4 * me + 4])
                  and np.array_equal(got["model"]["v"], (V * scale)[:, 2 * me:2 * me + 2])
                  and got["step"] == k and got["note"] == f"save {k}")
            if not ok:
                print(f"[rank {me}] save {k}: wrong load", flush=True)
                bad += 1
        comm.Barrier()
    left = sorted(n for n in os.listdir(path) if n not in ("manifest.json", ".lock"))
    if me == 0 and len(left) != 4:
        print(f"[rank 0] files left after the second save: {left}", flush=True)
        bad += 1
    bad = comm.allreduce(bad)
    if me == 0:
        print("CHECKPOINT MPI OK" if bad == 0 else f"CHECKPOINT MPI FAILED ({bad})", flush=True)
    return 0 if bad == 0 else 1


def torch_rank(rank: int, world: int, phase: str, path: str, port: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        if phase == "save":
            m1 = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
            m2 = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("a", "b"))
            state = {"model": {"w": distribute_tensor(torch.from_numpy(W), m1, [Shard(0)]),
                               "e": distribute_tensor(torch.from_numpy(E), m2, [Shard(1), Shard(0)])},
                     "bias": torch.arange(5, dtype=torch.float32), "step": 11, "lr": 0.5}
            out = checkpoint.save(state, path)
            print(f"[rank {rank}] saved {out is not None}", flush=True)
            import torch.distributed.checkpoint as dcp
            dcp.save(state, checkpoint_id=path + "-dcp")   # the same state in PyTorch's own format
        else:
            m = init_device_mesh("cpu", (world,), mesh_dim_names=("u",))
            ref_w = distribute_tensor(torch.from_numpy(W), m, [Shard(1)]).to_local()
            ref_e = distribute_tensor(torch.from_numpy(E), m, [Shard(0)]).to_local()
            for where in (path, path + "-dcp"):   # ours, then DCP's directory of the same state
                got = checkpoint.load(where, {"model": {"w": (m, [Shard(1)]), "e": (m, [Shard(0)])},
                                              "bias": (m, [Replicate()]), "step": None, "lr": None})
                w, e = got["model"]["w"], got["model"]["e"]
                ok = (type(w).__name__ == "DTensor" and tuple(w.placements) == (Shard(1),)
                      and torch.equal(w.to_local(), ref_w) and torch.equal(e.to_local(), ref_e)
                      and torch.equal(got["bias"].to_local(), torch.arange(5, dtype=torch.float32))
                      and got["step"] == 11 and got["lr"] == 0.5)
                print(f"[rank {rank}] {'dcp' if where.endswith('-dcp') else 'ours'} {'OK' if ok else 'WRONG'}",
                      flush=True)
    finally:
        dist.destroy_process_group()


def nested_targets():
    """(name, global array, placements) on a 2 x 2 mesh: nested uneven
    ``torch.chunk`` shards, ``_StridedShard`` (one box per rank, and
    interleaved: two), empty shards."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.placement_types import _StridedShard as S
    A = np.arange(5 * 6, dtype=np.float32).reshape(5, 6) - 7.25   # rows 2,1 | 1,1 by torch.chunk of chunks
    B = (np.arange(6 * 5, dtype=np.int64).reshape(6, 5) * 13) % 29
    C = np.arange(2 * 6, dtype=np.float64).reshape(2, 6) / 7       # rows 1,0 | 1,0: two empty shards
    return [("a", A, [Shard(0), Shard(0)]), ("a", A, [S(0, split_factor=2), Shard(0)]),
            ("a", A, [Shard(0), S(0, split_factor=2)]), ("b", B, [Shard(1), Shard(1)]),
            ("b", B, [Shard(0), S(0, split_factor=2)]), ("c", C, [Shard(0), Shard(0)])]


def layouts_rank(rank: int, world: int, path: str, port: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        arrays = {name: a for name, a, _ in nested_targets()}
        m1 = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        m2 = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("a", "b"))
        state = {"a": distribute_tensor(torch.from_numpy(arrays["a"]), m1, [Shard(0)]),
                 "b": distribute_tensor(torch.from_numpy(arrays["b"]), m2, [Shard(1), Shard(0)]),
                 "c": distribute_tensor(torch.from_numpy(arrays["c"]), m1, [Shard(1)]), "step": 4}
        checkpoint.save(state, path)
        dcp.save(state, checkpoint_id=path + "-dcp")
        for where in (path, path + "-dcp"):
            for name, full, placements in nested_targets():
                got = checkpoint.load(where, {name: (m2, placements), "step": None})
                # every rank holds the whole array: DTensor splits it locally (its scatter refuses uneven _StridedShard)
                x, ref = got[name], distribute_tensor(torch.from_numpy(full), m2, placements, src_data_rank=None)
                ok = (isinstance(x, DTensor) and tuple(x.placements) == tuple(placements)
                      and tuple(x.shape) == full.shape and x.to_local().dtype == ref.to_local().dtype
                      and x.to_local().shape == ref.to_local().shape
                      and x.to_local().numpy().tobytes() == ref.to_local().numpy().tobytes()
                      and torch.equal(x.full_tensor(), torch.from_numpy(full)) and got["step"] == 4)
                print(f"[rank {rank}] {'dcp' if where.endswith('-dcp') else 'ours'} {name} {placements} "
                      f"{'OK' if ok else 'WRONG'} local {tuple(x.to_local().shape)}", flush=True)
    finally:
        dist.destroy_process_group()


def torch_main(path: str, savers: int, loaders: int) -> int:
    import torch.multiprocessing as mp
    from verishard.torch.backend import free_port
    for phase, world in (("save", savers), ("load", loaders)):
        mp.start_processes(torch_rank, args=(world, phase, path, str(free_port())), nprocs=world, join=True,
                           start_method="fork")
    return 0


def layouts_main(path: str) -> int:
    import torch.multiprocessing as mp
    from verishard.torch.backend import free_port
    mp.start_processes(layouts_rank, args=(4, path, str(free_port())), nprocs=4, join=True, start_method="fork")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "mpi":
        sys.exit(mpi_main(sys.argv[2]))
    if sys.argv[1] == "layouts":
        sys.exit(layouts_main(sys.argv[2]))
    sys.exit(torch_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
