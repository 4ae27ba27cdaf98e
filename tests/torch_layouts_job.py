"""The SPMD job of tests/test_torch_layouts.py: ``python tests/torch_layouts_job.py
OUTDIR`` forks 4 gloo processes; every rank runs every case and writes
``OUTDIR/rank<r>.json``.

Cases: every pair of placements (Shard, Replicate, _StridedShard: DTensor's
non-default orders) of rank-3 tensors with uneven dimensions on a (2, 2)
DeviceMesh in which our types cannot describe the source or the target
(``verishard.torch.dtensor.from_spec`` raises ``UnsupportedLayout``: a dimension
split unevenly by both mesh dimensions, nested ``torch.chunk`` or
``_StridedShard``), run by ``verishard.torch.redistribute`` (the verified
box schedule) against ``DTensor.redistribute`` and against
``distribute_tensor`` of the global tensor onto the target (tests/torch_job.py's
``uneven`` records); a Partial source
with such a layout (refused, with a short message); and the backward.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_job import (Job, error_record, fork_job, global_tensor, partial_global, partial_local,  # noqa: E402
                       plain, same, short, uneven_sweep)

NPROCS = 4
SHAPES = ((5, 3, 7), (3, 6, 5))


def formerly_refused(dm, shape, placements) -> bool:
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    import torch
    from verishard.torch.dtensor import UnsupportedLayout, from_spec
    from verishard.torch import planning_mesh
    spec = DTensorSpec(dm, tuple(placements), tensor_meta=TensorMeta(torch.Size(shape), (1,) * len(shape),
                                                                      torch.float32))
    try:
        from_spec(planning_mesh(dm), spec)
    except UnsupportedLayout:
        return True
    except Exception:  # noqa: BLE001 - other refusals are not this corpus's
        return False
    return False


def worker(rank: int, port: int, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(NPROCS),
                      OMP_NUM_THREADS="1")
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    for name in ("torch.distributed.tensor._redistribute", "torch.distributed.tensor._collective_utils"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from verishard.torch.dtensor import all_placements
    from verishard.torch import plan_for, redistribute
    from verishard.torch.backend import BoxPlan
    from torch.distributed.tensor.placement_types import _StridedShard
    torch.set_num_threads(1)
    job = Job(rank)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=NPROCS, timeout=timedelta(seconds=120))
        dm = init_device_mesh("cpu", (2, 2), mesh_dim_names=("x", "y"))
        dtypes = [torch.float32, torch.int64, torch.bfloat16, torch.float64]
        layouts = all_placements(dm, 3)
        for shape in SHAPES:
            refused = {pl: formerly_refused(dm, shape, pl) for pl in layouts}
            uneven_sweep(job, "(2,2) x,y", dm, shape,
                         [(a, b) for a in layouts for b in layouts if a != b and (refused[a] or refused[b])], dtypes)
        # the backward of a box redistribution: the gradient back in the input's layout
        S, R = Shard, Replicate
        G = global_tensor((5, 3, 7), torch.float64, seed=7)
        for src, dst in (((S(0), S(0)), (S(2), R())), ((S(2), S(2)), (S(0), S(0)))):
            xs = [distribute_tensor(G, dm, src, src_data_rank=None).requires_grad_() for _ in range(2)]
            W = global_tensor((5, 3, 7), torch.float64, seed=8)
            outs = [redistribute(xs[0], dst), xs[1].redistribute(dm, dst)]
            for o in outs:
                (o * distribute_tensor(W, dm, dst, src_data_rank=None)).sum().backward()
            job.add(case="grad", src=str(src), dst=str(dst),
                    grad_equal=same(xs[0].grad.to_local(), xs[1].grad.to_local()),
                    grad_spec=xs[0].grad.placements == xs[1].grad.placements)
        # what is still refused: Partial with such a layout
        x = distribute_tensor(global_tensor((5, 3, 7), torch.float32, seed=9), dm, (Replicate(), S(0)),
                              src_data_rank=None)
        job.add(case="boxplan", is_box=isinstance(plan_for(x, (S(0), S(0))), BoxPlan))
        # Partial next to such a layout: reduced first / made pending after; full_tensor() is the global tensor
        prnd = random.Random(5)
        for op in ("sum", "max", "min"):
            lp = all_placements(dm, 3, partial=op)
            cands = [(a, b) for a in lp for b in lp if a != b and any(q.is_partial() for q in a + b)
                     and (formerly_refused(dm, (5, 3, 7), plain(a)) or formerly_refused(dm, (5, 3, 7), plain(b)))]
            for k, (src, dst) in enumerate(prnd.sample(cands, 8)):
                G = partial_global((5, 3, 7), torch.int64, seed=70 + k)
                rec = {"case": "partial", "op": op, "src": str(src), "dst": str(dst), "error": None}
                try:
                    x = DTensor.from_local(partial_local(G, dm, src, torch.int64, seed=80 + k), dm, src,
                                           shape=G.shape, stride=G.stride())
                    rec["plan"] = type(plan_for(x, dst)).__name__
                    y = redistribute(x, dst)
                    rec["ok"] = bool(torch.equal(y.full_tensor(), G)) and y.placements == tuple(dst)
                except Exception as e:  # noqa: BLE001
                    rec["error"] = error_record(e)
                    rec["traceback"] = traceback.format_exc()
                job.add(**rec)
        # across meshes (different, overlapping rank sets): the box schedule over world ranks
        from torch.distributed.device_mesh import DeviceMesh
        SS = _StridedShard
        other = DeviceMesh("cpu", torch.tensor([[3, 1], [0, 2]]), mesh_dim_names=("p", "q"))
        right = DeviceMesh("cpu", torch.tensor([2, 3]), mesh_dim_names=("b",))
        three = DeviceMesh("cpu", torch.tensor([3, 1, 2]), mesh_dim_names=("c",))
        cases = [("(2,2) nested -> 3,1,2", dm, (S(0), S(0)), three, (S(2),)),
                 ("2,3 -> permuted (2,2) nested", right, (S(1),), other, (S(2), S(2))),
                 ("(2,2) strided -> permuted (2,2) nested", dm, (SS(0, split_factor=2), S(0)), other, (S(0), S(0))),
                 ("(2,2) nested -> 2,3 replicated", dm, (S(2), S(2)), right, (R(),))]
        for k, (label, m1, src, m2, dst) in enumerate(cases):
            G = global_tensor((5, 3, 7), torch.float32, seed=40 + k)
            x = distribute_tensor(G, m1, src, src_data_rank=None)
            rec = {"case": "crossmesh", "label": label}
            try:
                y = redistribute(x, dst, device_mesh=m2)
                member = rank in m2.mesh.flatten().tolist()
                want = distribute_tensor(G, m2, dst, src_data_rank=None).to_local()
                rec["ok"] = (same(y.to_local(), want) if member else y.to_local().numel() == 0) and \
                    y.placements == tuple(dst) and y.device_mesh == m2
            except Exception as e:  # noqa: BLE001
                rec["error"] = error_record(e)
                rec["traceback"] = traceback.format_exc()
            job.add(**rec)
        # a whole state dict in one transfer, nested layouts on either side next to a plain one, small rounds
        from verishard.torch import plan_transfer, transfer
        tensors = {"nested": (S(0), S(0)), "strided": (SS(2, split_factor=2), S(2)), "plain": (S(1), R())}
        wanted = {"nested": (right, (S(2),)), "strided": (other, (S(0), S(0))), "plain": (three, (S(0),))}
        G = {k: global_tensor((5, 3, 7), torch.float32, seed=60 + i) for i, k in enumerate(tensors)}
        xs = {k: distribute_tensor(G[k], dm, pl, src_data_rank=None) for k, pl in tensors.items()}
        rec = {"case": "transfer_boxes"}
        try:
            sched = plan_transfer(xs, wanted, budget_bytes=64)
            got = transfer(xs, wanted, budget_bytes=64)
            rec["ok"] = all((same(got[k].to_local(), distribute_tensor(G[k], m, pl, src_data_rank=None).to_local())
                             and got[k].placements == tuple(pl)) if rank in m.mesh.flatten().tolist() else k not in got
                            for k, (m, pl) in wanted.items())
            rec["received"], rec["lower_bound"] = sched.received(rank), sched.lower_bound(rank)
            rec["rounds"] = len(sched.rounds)
            rec["kinds"] = sorted(type(m.plan).__name__ for m in sched.moves)
        except Exception as e:  # noqa: BLE001
            rec["error"] = error_record(e)
            rec["traceback"] = traceback.format_exc()
        job.add(**rec)
        # DTensor's own redistributions under enable(): nested layouts routed through the box schedule
        from verishard.torch import enabled, routing_info
        G = global_tensor((5, 3, 7), torch.float64, seed=90)
        x = distribute_tensor(G, dm, (S(2), R()), src_data_rank=None)
        ref = x.redistribute(dm, (S(0), S(0))).to_local()
        routing_info(reset=True)
        with enabled():
            got = x.redistribute(dm, (S(0), S(0))).to_local()
        job.add(case="enabled", same=same(got, ref), info=routing_info(reset=True))
    except BaseException as e:  # noqa: BLE001 - reported to the test through the file
        job.add(case="crash", error=short(e), traceback=traceback.format_exc())
    finally:
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump({"rank": rank, "records": job.records}, f)
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def main(outdir: str) -> None:
    fork_job(worker, outdir, NPROCS)


if __name__ == "__main__":
    main(sys.argv[1])
