"""The SPMD job of the PyTorch tests: ``python tests/torch_job.py OUTDIR``
spawns 8 gloo processes (``torch.multiprocessing``, MASTER_ADDR=127.0.0.1, a
free port); every rank runs every case and writes its results to
``OUTDIR/rank<r>.json``, which tests/test_torch_redistribute.py reads.

Cases (each rank judges its own local tensors; nothing is skipped: a case
that cannot be judged is recorded with the reason):

- ``sweep``: placement pairs (Shard, Replicate, _StridedShard) on a (2, 4)
  and a (2, 2, 2) DeviceMesh with mesh_dim_names, and on a (2, 4) mesh whose
  ranks are laid out out of order: ``verishard.torch.redistribute`` against
  ``DTensor.redistribute`` (bit for bit, placements, shard order, mesh) and
  against ``distribute_tensor`` of the global tensor to the target (the
  local shard DTensor's own layout gives every rank).
- ``grad``: gradients through ours and through DTensor's.
- ``cache``: calls of the verified planner (``verishard.core.plan``) on a
  first and a second call, forward and backward.
- ``errors``: bad input on every rank or on one rank, ranks that disagree,
  Partial, uneven shapes, another mesh, a mesh over fewer ranks; after each,
  a good call must still work.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from datetime import timedelta

CASES_2D = 121   # every pair of the 11 layouts of a 2-D tensor on the (2, 4) mesh
SAMPLE_3D = 70   # pairs sampled from the 49 x 49 layouts of a 2-D tensor on the (2, 2, 2) mesh
SAMPLE_3T = 20   # pairs of 3-D tensors on the (2, 2, 2) mesh
SAMPLE_ROUNDS = 30  # pairs on the (2, 4) mesh with the backend's buffers forced into rounds
SAMPLE_PERM = 12  # pairs on a (2, 4) mesh with permuted ranks (and as many again in rounds)
NPROCS = 8


def global_tensor(shape, dtype, seed: int):
    import torch
    n = 1
    for s in shape:
        n *= s
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(n, generator=g, dtype=torch.float64) * 1000).to(dtype).reshape(shape)
    return torch.randint(-2**30, 2**30, (n,), generator=g, dtype=torch.int64).to(dtype).reshape(shape)


def bits(t):
    import torch
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same(a, b) -> bool:
    import torch
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def short(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class Job:
    def __init__(self, rank: int):
        self.rank = rank
        self.records: list[dict] = []
        self.t0 = time.time()

    def add(self, **rec):
        self.records.append(rec)


def sweep(job: Job, name: str, dm, shape, pairs, dtypes) -> None:
    import torch
    from torch.distributed.tensor import distribute_tensor
    from verishard.torch import redistribute
    for k, (src, dst) in enumerate(pairs):
        dtype = dtypes[k % len(dtypes)]
        G = global_tensor(shape, dtype, seed=k)
        rec = {"case": "sweep", "mesh": name, "shape": list(shape), "dtype": str(dtype),
               "src": str(src), "dst": str(dst)}
        x = distribute_tensor(G, dm, src, src_data_rank=None)
        oracle = distribute_tensor(G, dm, dst, src_data_rank=None)
        t = time.perf_counter()
        try:
            ref = x.redistribute(dm, dst)
            rec["dtensor_error"] = None
        except Exception as e:  # noqa: BLE001 - recorded and judged by the test
            ref, rec["dtensor_error"] = None, short(e)
        t1 = time.perf_counter()
        try:
            ours = redistribute(x, dst)
            rec["ours_error"] = None
        except Exception as e:  # noqa: BLE001
            ours, rec["ours_error"] = None, short(e) + "\n" + traceback.format_exc()
        rec["seconds"] = {"dtensor": t1 - t, "ours": time.perf_counter() - t1}
        if ours is not None:
            rec["ours_vs_oracle"] = same(ours.to_local(), oracle.to_local())
            rec["placements_vs_oracle"] = ours.placements == oracle.placements
            rec["mesh_is_input_mesh"] = ours.device_mesh is dm
            rec["shape_ok"] = tuple(ours.shape) == tuple(G.shape) and ours.stride() == G.stride()
        if ours is not None and ref is not None:
            rec["ours_vs_dtensor"] = same(ours.to_local(), ref.to_local())
            rec["spec_vs_dtensor"] = (ours.placements == ref.placements
                                      and ours._spec.shard_order == ref._spec.shard_order
                                      and ours.device_mesh is ref.device_mesh
                                      and ours._spec.tensor_meta == ref._spec.tensor_meta)
        if ref is not None:
            rec["dtensor_vs_oracle"] = same(ref.to_local(), oracle.to_local())
        job.add(**rec)


def grad_cases(job: Job, name: str, dm, shape, pairs) -> None:
    import torch
    from torch.distributed.tensor import distribute_tensor
    from verishard.torch import redistribute
    for k, (src, dst) in enumerate(pairs):
        G = global_tensor(shape, torch.float64, seed=1000 + k)
        W = global_tensor(shape, torch.float64, seed=2000 + k)
        w = distribute_tensor(W, dm, dst, src_data_rank=None).to_local()
        grads = {}
        for who in ("ours", "dtensor"):
            x = distribute_tensor(G, dm, src, src_data_rank=None).requires_grad_()
            y = redistribute(x, dst) if who == "ours" else x.redistribute(dm, dst)
            (y.to_local() * w).sum().backward()
            grads[who] = x.grad
        want = distribute_tensor(W, dm, src, src_data_rank=None)
        a, b = grads["ours"], grads["dtensor"]
        job.add(case="grad", mesh=name, src=str(src), dst=str(dst),
                grad_vs_dtensor=same(a.to_local(), b.to_local()),
                grad_spec_vs_dtensor=(a.placements == b.placements and a._spec.shard_order == b._spec.shard_order),
                grad_vs_oracle=same(a.to_local(), want.to_local()))
    # twice differentiable: grad_x sum(y^2) = 2x through our backward, then
    # d/dx sum(2x) = 2 through the backward of our backward
    src, dst = pairs[0]
    G = global_tensor(shape, torch.float64, seed=7)
    x = distribute_tensor(G, dm, src, src_data_rank=None).requires_grad_()
    y = redistribute(x, dst)
    (gx,) = torch.autograd.grad((y.to_local() ** 2).sum(), x, create_graph=True)
    (ggx,) = torch.autograd.grad(gx.to_local().sum(), x)
    job.add(case="grad2", mesh=name, src=str(src), dst=str(dst),
            ok=(same(gx.to_local(), 2 * x.to_local()) and bool(torch.all(ggx.to_local() == 2))
                and gx.placements == x.placements and ggx.placements == x.placements))


def cache_case(job: Job, dm) -> None:
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import verishard.core as core
    import verishard.torch as vt
    # Count calls of the planner verishard.torch uses (verishard.plan) and of
    # the verified core's planning call underneath (a shape planned nowhere
    # else in this job, so verishard.plan's own memo does not answer it).
    real_plan, real_core = vt._verified_plan, core.plan
    calls = {"plan": 0, "core": 0}

    def counting_plan(*a, **k):
        calls["plan"] += 1
        return real_plan(*a, **k)

    def counting_core(*a, **k):
        calls["core"] += 1
        return real_core(*a, **k)

    vt._verified_plan, core.plan = counting_plan, counting_core
    try:
        vt.cache_clear()
        G = global_tensor((40, 24), torch.float32, seed=5)
        src, dst = (Shard(0), Replicate()), (Shard(1), Replicate())
        counts = []
        for _ in range(2):
            x = distribute_tensor(G, dm, src, src_data_rank=None).requires_grad_()
            y = vt.redistribute(x, dst)
            counts.append(dict(calls))
            y.to_local().sum().backward()
            counts.append(dict(calls))
        info = vt.cache_info()
        # another dtype is another cache entry: one more verishard.plan call
        vt.redistribute(distribute_tensor(G.double(), dm, src, src_data_rank=None), dst)
        counts.append(dict(calls))
    finally:
        vt._verified_plan, core.plan = real_plan, real_core
    job.add(case="cache", counts=counts, info=info)


def expect_error(job: Job, label: str, fn, after) -> None:
    """Run ``fn`` (expected to raise), then ``after`` (a good call: the
    process group must still work)."""
    t = time.time()
    try:
        fn()
        err = None
    except Exception as e:  # noqa: BLE001
        err = {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__], "message": str(e)}
    try:
        ok_after = bool(after())
    except Exception as e:  # noqa: BLE001
        ok_after = short(e)
    job.add(case="error", label=label, error=err, ok_after=ok_after, seconds=time.time() - t)


def error_cases(job: Job, dm, dm_other) -> None:
    import torch
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.device_mesh import DeviceMesh
    from verishard.torch import redistribute
    r = job.rank
    G = global_tensor((8, 16), torch.float32, seed=11)
    x = distribute_tensor(G, dm, (Shard(0), Replicate()), src_data_rank=None)
    good_dst = (Replicate(), Shard(1))
    want = distribute_tensor(G, dm, good_dst, src_data_rank=None).to_local()

    def after():
        return same(redistribute(x, good_dst).to_local(), want)

    expect_error(job, "wrong-length", lambda: redistribute(x, [Shard(0)]), after)
    expect_error(job, "dim-out-of-range", lambda: redistribute(x, [Shard(2), Replicate()]), after)
    expect_error(job, "negative-dim-out-of-range", lambda: redistribute(x, [Shard(-3), Replicate()]), after)
    expect_error(job, "not-a-placement", lambda: redistribute(x, [Shard(0), "R"]), after)
    expect_error(job, "not-a-dtensor", lambda: redistribute(G, [Shard(0), Replicate()]), after)
    expect_error(job, "mismatched-mesh",
                 lambda: redistribute(x, [Replicate(), Replicate()], device_mesh=dm_other), after)
    p = DTensor.from_local(torch.ones(8, 16), dm, [Partial(), Replicate()])
    expect_error(job, "partial-source", lambda: redistribute(p, [Replicate(), Replicate()]), after)
    expect_error(job, "partial-target", lambda: redistribute(x, [Partial(), Replicate()]), after)
    u = distribute_tensor(global_tensor((6, 16), torch.float32, 3), dm, (Replicate(), Replicate()),
                          src_data_rank=None)
    expect_error(job, "uneven", lambda: redistribute(u, [Shard(0), Shard(0)]), after)
    expect_error(job, "one-rank-wrong-length",
                 lambda: redistribute(x, [Shard(0)] if r == 5 else [Replicate(), Shard(1)]), after)
    expect_error(job, "ranks-disagree",
                 lambda: redistribute(x, [Shard(1), Replicate()] if r == 3 else [Replicate(), Shard(1)]), after)
    bad_local = DTensor.from_local(torch.ones(3, 16), dm, [Shard(0), Replicate()], run_check=False,
                                   shape=torch.Size((8, 16)), stride=(16, 1))
    expect_error(job, "wrong-local-shape", lambda: redistribute(bad_local, [Replicate(), Shard(1)]), after)
    small = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("a", "b"))
    s = DTensor.from_local(torch.ones(4, 4), small, [Shard(0), Replicate()])
    expect_error(job, "rank-count", lambda: redistribute(s, [Replicate(), Replicate()]), after)
    # a no-op keeps the local tensor, as DTensor does
    keep = (Shard(0), Replicate())
    ours, ref = redistribute(x, keep), x.redistribute(dm, keep)
    job.add(case="identity", ours_keeps=ours._local_tensor is x._local_tensor and ours._spec is x._spec,
            dtensor_keeps=ref._local_tensor is x._local_tensor and ref._spec is x._spec)


def reinit_case(job: Job, outdir: str) -> None:
    """A process group destroyed and initialized again: the caches of the old
    one (process groups, meshes, plans) must not be used."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from verishard.torch import redistribute
    dist.destroy_process_group()
    store = dist.FileStore(os.path.join(outdir, "store"), NPROCS)
    # other rank numbers this time, so that anything kept from the old group would put blocks on wrong ranks
    dist.init_process_group("gloo", store=store, rank=(job.rank + 3) % NPROCS, world_size=NPROCS,
                            timeout=timedelta(seconds=120))
    dm = init_device_mesh("cpu", (2, 4), mesh_dim_names=("x", "y"))
    ok = []
    for src, dst in (((Shard(0), Replicate()), (Replicate(), Shard(1))),   # planned and cached before
                     ((Shard(0), Shard(0)), (Shard(1), Shard(1)))):
        G = global_tensor((8, 16), torch.float32, seed=21)
        x = distribute_tensor(G, dm, src, src_data_rank=None)
        y = redistribute(x, dst)
        ok.append(same(y.to_local(), x.redistribute(dm, dst).to_local()) and y.device_mesh is dm)
    job.add(case="reinit", ok=ok)


def worker(rank: int, port: int, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(NPROCS), OMP_NUM_THREADS="1")
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    for name in ("torch.distributed.tensor._redistribute", "torch.distributed.tensor._collective_utils"):
        logging.getLogger(name).setLevel(logging.ERROR)  # DTensor's advice on its own plans
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    torch.set_num_threads(1)
    job = Job(rank)
    timing = {}
    try:
        dist.init_process_group("gloo", rank=rank, world_size=NPROCS, timeout=timedelta(seconds=120))
        m24 = init_device_mesh("cpu", (2, 4), mesh_dim_names=("x", "y"))
        m222 = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("x", "y", "z"))
        mperm = DeviceMesh("cpu", torch.tensor([[4, 0, 5, 1], [6, 2, 7, 3]]), mesh_dim_names=("x", "y"))
        m42 = init_device_mesh("cpu", (4, 2), mesh_dim_names=("a", "b"))
        rnd = random.Random(12)
        dtypes = [torch.float32, torch.int64, torch.float64, torch.bfloat16, torch.int32, torch.float16]
        from verishard.dtensor import all_placements
        l24 = all_placements(m24, 2)
        l222 = all_placements(m222, 2)
        l222_3 = all_placements(m222, 3)
        pairs24 = [(a, b) for a in l24 for b in l24]
        assert len(pairs24) == CASES_2D, len(pairs24)
        pairs222 = rnd.sample([(a, b) for a in l222 for b in l222], SAMPLE_3D)
        pairs222_3 = rnd.sample([(a, b) for a in l222_3 for b in l222_3], SAMPLE_3T)
        pairs_rounds = rnd.sample(pairs24, SAMPLE_ROUNDS)
        pairs_perm = rnd.sample(pairs24, 2 * SAMPLE_PERM)
        t = time.time()
        sweep(job, "(2,4) x,y", m24, (8, 16), pairs24, dtypes)
        sweep(job, "(2,2,2) x,y,z", m222, (8, 8), pairs222, dtypes)
        sweep(job, "(2,2,2) x,y,z", m222, (8, 8, 8), pairs222_3, dtypes)
        sweep(job, "(2,4) permuted ranks", mperm, (8, 16), pairs_perm[:SAMPLE_PERM], dtypes)
        import verishard.runtime.torch as vrt
        saved, vrt.ROUND_BYTES = vrt.ROUND_BYTES, 1  # every all-to-all and gather in up to 8 rounds
        try:
            sweep(job, "(2,4) x,y in rounds", m24, (16, 16), pairs_rounds, dtypes)
            sweep(job, "(2,4) permuted ranks in rounds", mperm, (16, 16), pairs_perm[SAMPLE_PERM:], dtypes)
        finally:
            vrt.ROUND_BYTES = saved
        timing["sweep"] = time.time() - t
        t = time.time()
        gpairs = (rnd.sample([(a, b) for a, b in pairs24 if a != b], 6)
                  + rnd.sample([(a, b) for a in l222 for b in l222 if a != b], 6))
        grad_cases(job, "(2,4) x,y", m24, (8, 16), gpairs[:6])
        grad_cases(job, "(2,2,2) x,y,z", m222, (8, 8), gpairs[6:])
        timing["grad"] = time.time() - t
        t = time.time()
        cache_case(job, m24)
        timing["cache"] = time.time() - t
        t = time.time()
        error_cases(job, m24, m42)
        timing["errors"] = time.time() - t
        reinit_case(job, outdir)
    except BaseException as e:  # noqa: BLE001 - reported to the test through the file
        job.add(case="crash", error=short(e), traceback=traceback.format_exc())
    finally:
        timing["total"] = time.time() - job.t0
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump({"rank": rank, "records": job.records, "timing": timing}, f)
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def main(outdir: str) -> None:
    # Import everything once here, then fork: 8 processes importing torch on a
    # 2-core machine take ~12 s with the spawn start method, forking ~1 s.
    # Nothing here has started a process group or a thread pool yet.
    import torch.multiprocessing as mp
    import torch.distributed.tensor  # noqa: F401
    import verishard.torch  # noqa: F401
    os.makedirs(outdir, exist_ok=True)
    from verishard.runtime.torch import free_port
    mp.start_processes(worker, args=(free_port(), outdir), nprocs=NPROCS, join=True, start_method="fork")


if __name__ == "__main__":
    main(sys.argv[1])
