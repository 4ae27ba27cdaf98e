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
- ``partial``: placement pairs with ``Partial("sum")`` in the source or the
  target (and some with ``"max"``/``"min"``) on the (2, 2, 2) mesh, float32,
  int32 and int64: the source is ``DTensor.from_local`` of per-rank local
  tensors whose reduction over each pending group is the block of a known
  global tensor; every rank checks its result against that tensor (for a
  Partial target: the reduction of the pending group's results) and
  against DTensor's own redistribution (``full_tensor()`` of both).
- ``uneven``: placement pairs of global shapes that do not divide ((5, 7)
  and (7,) on the (2, 4) mesh, (3, 6) on the (2, 2, 2) mesh), against
  ``DTensor.redistribute`` and ``distribute_tensor`` as in ``sweep`` (and
  DTensor's result against ``distribute_tensor``: from some uneven
  ``_StridedShard`` sources it is not the target layout), with the kind of
  plan that ran (a box schedule where our types differ). Each placement
  tuple's ``layouts_agree``: whether DTensor's own shards (``distribute_tensor``
  on every rank) are verishard's uneven blocks, built here from ``ArrayType``
  in DTensor's shard order, so that the test can check that the box
  schedule runs exactly the layouts that differ.
- ``grad``: gradients through ours and through DTensor's (``pgrad``: through
  Partial -> Shard and Replicate -> Partial; ``ugrad``: uneven shapes).
- ``cache``: calls of the verified planner (``verishard.core.plan_checked``) on a
  first and a second call, forward and backward.
- ``errors``: bad input on every rank or on one rank, ranks that disagree,
  Partial("avg"), mixed or changed reductions, Partial with an uneven
  shape, another mesh; after each, a good call must still work (and an uneven layout DTensor splits otherwise than our
  blocks, which runs).
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
SAMPLE_UNEVEN_3D = 80  # pairs of a (3, 6) tensor sampled from the 49 x 49 layouts on the (2, 2, 2) mesh
SAMPLE_PARTIAL = 96  # pairs with Partial("sum") in the source or the target (of 6063) on the (2, 2, 2) mesh
SAMPLE_PARTIAL_OTHER = 8  # as many again with Partial("max"), and with Partial("min")
PARTIAL_RTOL = PARTIAL_ATOL = 1e-5  # float32 results of partial sums; integers and max/min are exact
NPROCS = 8


def launch(script: str, outdir, nprocs: int, timeout: int, args=()) -> dict:
    """Run a job script (``python SCRIPT OUTDIR [ARGS]``) and return every rank's
    JSON report, asserting that it exited cleanly, every rank reported and
    none crashed (the tests' fixture)."""
    import subprocess
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, os.path.join(here, script), str(outdir), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    ranks = {}
    for r in range(nprocs):
        path = os.path.join(str(outdir), f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                ranks[r] = json.load(f)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}:\n{tail}"
    assert sorted(ranks) == list(range(nprocs)), f"ranks that reported: {sorted(ranks)}\n{tail}"
    crashes = [(r, rec["traceback"]) for r, d in ranks.items() for rec in d["records"] if rec["case"] == "crash"]
    assert not crashes, crashes[0]
    return ranks


def fork_workers(worker, outdir, nprocs: int, *args) -> None:
    """Run ``worker(rank, port, outdir, *args)`` in ``nprocs`` forked
    processes (import torch and verishard before: forking is ~1 s where 8
    spawned torch imports take ~12 s on 2 cores)."""
    import torch.multiprocessing as mp

    from verishard.torch.backend import free_port
    os.makedirs(outdir, exist_ok=True)
    mp.start_processes(worker, args=(free_port(), outdir, *args), nprocs=nprocs, join=True, start_method="fork")


def finish_worker(outdir, rank: int, record: dict) -> None:
    """Write a worker's report to ``OUTDIR/rank<r>.json`` and leave the process group."""
    import torch.distributed as dist
    with open(os.path.join(str(outdir), f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - already gone
        pass


def run_cases(outdir, nprocs: int, cases: dict, only: str = "", quiet: bool = True, barrier: bool = False) -> None:
    """The worker harness of the multi-process jobs: fork ``nprocs`` gloo
    processes; each runs every case of ``cases`` (name -> ``fn(add, rank)``)
    named in ``only`` (comma-separated; all when empty), in order, then
    writes ``OUTDIR/rank<r>.json`` = ``{"rank", "records"}``: what the cases
    passed to ``add`` (a dict, or keywords), and a ``crash`` record with the
    traceback if one raised. ``quiet``: warnings ignored; ``barrier``: the
    ranks meet before leaving the group. Every collective waits at most 60 s
    (the group's timeout), so a lost rank fails the job instead of hanging it."""
    fork_workers(_case_worker, outdir, nprocs, nprocs, cases, only, quiet, barrier)


def _case_worker(rank: int, port: int, outdir, nprocs: int, cases: dict, only: str, quiet: bool,
                 barrier: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    if quiet:
        import warnings
        warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    records = []

    def add(rec: dict | None = None, **fields) -> None:
        records.append(fields if rec is None else rec)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=nprocs, timeout=timedelta(seconds=60))
        for name, fn in cases.items():
            if not only or name in only.split(","):
                fn(add, rank)
    except BaseException as e:  # noqa: BLE001 - reported through the file
        add(case="crash", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
    finally:
        if barrier:
            try:
                dist.barrier()
            except Exception:  # noqa: BLE001 - a rank already gone: its crash record says why
                pass
        finish_worker(outdir, rank, {"rank": rank, "records": records})


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


def against_dtensor(ours, ref, oracle) -> dict:
    """Our result against DTensor's (local shard, placements, shard order, mesh,
    tensor meta) and DTensor's against the oracle; keys only for what exists."""
    out = {}
    if ours is not None and ref is not None:
        out["ours_vs_dtensor"] = same(ours.to_local(), ref.to_local())
        out["spec_vs_dtensor"] = (ours.placements == ref.placements
                                  and ours._spec.shard_order == ref._spec.shard_order
                                  and ours.device_mesh is ref.device_mesh
                                  and ours._spec.tensor_meta == ref._spec.tensor_meta)
    if ref is not None:
        out["dtensor_vs_oracle"] = same(ref.to_local(), oracle.to_local())
    return out


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
        rec.update(against_dtensor(ours, ref, oracle))
        job.add(**rec)


def flat_blocks_agree(dm, shape, placements) -> bool:
    """Whether DTensor's own layout of ``placements`` (every rank's
    ``distribute_tensor`` shard) is verishard's uneven type for them: blocks
    of ``ceil(g / n)`` over each dimension's mesh dimensions in DTensor's
    shard order (decoded by DTensor's own rule), built here from
    ``ArrayType`` without ``verishard.torch.dtensor``. Collective (one
    ``all_gather_object``): the answer is every rank's."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from verishard import ArrayType, Mesh
    names = dm.mesh_dim_names
    mesh = Mesh(tuple(zip(names, (int(n) for n in dm.mesh.shape))))
    axes = [()] * len(shape)
    for e in DTensorSpec._maybe_convert_StridedShard_to_shard_order(tuple(placements), dm):
        axes[e.tensor_dim] = tuple(names[i] for i in e.mesh_dims)
    t = ArrayType.from_axes(mesh, shape, axes)
    n = 1
    for g in shape:
        n *= g
    G = torch.arange(n, dtype=torch.float64).reshape(shape)
    mine = distribute_tensor(G, dm, placements, src_data_rank=None).to_local()
    r = [int(q) for q in dm.mesh.flatten()].index(dist.get_rank())
    box = tuple(slice(a, a + v) for a, v in zip(t.block_starts(r), t.valid_shape(r)))
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, same(mine, G[box].contiguous()))
    return all(every)


def error_record(e: BaseException) -> dict:
    return {"type": type(e).__name__, "mro": [c.__name__ for c in type(e).__mro__], "message": str(e)}


def uneven_sweep(job: Job, name: str, dm, shape, pairs, dtypes) -> None:
    """``uneven`` records (module docstring); collective: every rank runs the
    same pairs in the same order, refused ones included."""
    from torch.distributed.tensor import distribute_tensor
    from verishard.torch import plan_for, redistribute
    agree: dict = {}
    for k, (src, dst) in enumerate(pairs):
        for pl in (src, dst):
            if pl not in agree:
                agree[pl] = flat_blocks_agree(dm, shape, pl)
        dtype = dtypes[k % len(dtypes)]
        G = global_tensor(shape, dtype, seed=500 + k)
        rec = {"case": "uneven", "mesh": name, "shape": list(shape), "dtype": str(dtype), "src": str(src),
               "dst": str(dst), "layouts_agree": agree[src] and agree[dst]}
        x = distribute_tensor(G, dm, src, src_data_rank=None)
        oracle = distribute_tensor(G, dm, dst, src_data_rank=None)
        try:
            ref = x.redistribute(dm, dst)
            rec["dtensor_error"] = None
        except Exception as e:  # noqa: BLE001 - recorded and judged by the test
            ref, rec["dtensor_error"] = None, short(e)
        try:
            rec["plan"] = type(plan_for(x, dst)).__name__
            ours = redistribute(x, dst)
            rec["ours_error"] = None
        except Exception as e:  # noqa: BLE001
            ours, rec["ours_error"] = None, error_record(e)
            rec["traceback"] = traceback.format_exc()
        if ours is not None:
            local = ours.to_local()
            rec["local_shape"] = list(local.shape)
            rec["ours_vs_oracle"] = same(local, oracle.to_local())
            rec["placements_vs_oracle"] = ours.placements == oracle.placements and ours.device_mesh is dm
            rec["shape_ok"] = tuple(ours.shape) == tuple(G.shape) and ours.stride() == G.stride()
        rec.update(against_dtensor(ours, ref, oracle))
        job.add(**rec)


def plain(placements):
    """The placements with Partial as Replicate (the layout of the value)."""
    from torch.distributed.tensor import Replicate
    return tuple(Replicate() if p.is_partial() else p for p in placements)


def partial_op(placements) -> str | None:
    ops = {p.reduce_op for p in placements if p.is_partial()}
    assert len(ops) <= 1, placements
    return ops.pop() if ops else None


def coords_of(dm, rank: int) -> tuple[int, ...]:
    return tuple(int(c) for c in (dm.mesh == rank).nonzero()[0])


def pending_group(dm, rank: int, placements) -> tuple[list[int], int]:
    """The global ranks of ``rank``'s pending group (mesh coordinates equal
    off the Partial mesh dimensions, in row-major order over those) and
    ``rank``'s index in it."""
    c = coords_of(dm, rank)
    idx = tuple(slice(None) if p.is_partial() else c[i] for i, p in enumerate(placements))
    group = [int(r) for r in dm.mesh[idx].flatten()]
    return group, group.index(rank)


def block(G, dm, placements):
    """This rank's block of ``G`` under ``placements`` (Partial as
    Replicate), by DTensor's own offset computation (what distribute_tensor
    with src_data_rank=None gives, without its overhead)."""
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
    local, offset = _compute_local_shape_and_global_offset(
        tuple(G.shape), tuple(dm.mesh.shape), list(coords_of(dm, dist_rank())), list(plain(placements)))
    return G[tuple(slice(o, o + n) for o, n in zip(offset, local))].clone()


def partial_global(shape, dtype, seed: int):
    """A global tensor in float64 (values representable in ``dtype``) or int64."""
    import torch
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).double()
    return torch.randint(-2**20, 2**20, shape, generator=g, dtype=torch.int64)


def partial_local(G, dm, placements, dtype, seed: int):
    """This rank's local tensor for ``placements`` (Partial on some mesh
    dimensions) of the global ``G``: its block of ``G``, split over its
    pending group so that the group's reduction is the block (sum: terms
    that add up to it; max/min: the block on one member per element, below
    or above it on the others)."""
    import torch
    B = block(G, dm, placements)
    op = partial_op(placements)
    if op is None:
        return B.to(dtype)
    group, k = pending_group(dm, dist_rank(), placements)
    n = len(group)
    g = torch.Generator().manual_seed(seed)  # the same draws on every member of the group

    def noise():
        if B.dtype.is_floating_point:
            return torch.randn(B.shape, generator=g, dtype=torch.float64)
        return torch.randint(-2**20, 2**20, B.shape, generator=g, dtype=torch.int64)

    if op == "sum":
        terms = [noise() for _ in range(n - 1)]
        terms.append(-sum(terms))  # adding up to 0; the member with index 0 adds the block
        return (terms[k] + B if k == 0 else terms[k]).to(dtype)
    winner = torch.randint(0, n, B.shape, generator=g)
    gaps = [noise().abs() + 1 for _ in range(n)]
    off = gaps[k] if op == "min" else -gaps[k]
    return torch.where(winner == k, B, B + off).to(dtype)


def dist_rank() -> int:
    import torch.distributed as dist
    return dist.get_rank()


def dtensor_redistribute(x, dm, dst):
    """DTensor's redistribution, also to Partial placements: DTensor.redistribute
    refuses a Partial target that the source does not have ("for internal use
    only"); its autograd Function (what DTensor.redistribute calls) does it."""
    if all(not p.is_partial() or p == q for p, q in zip(dst, x.placements)):
        return x.redistribute(dm, dst)
    from torch.distributed.tensor._redistribute import Redistribute
    dt = x._local_tensor.dtype
    return Redistribute.apply(x, dm, tuple(dst), False,
                              {"op_dtype": dt, "out_dtype": dt,
                               "backward_options": {"op_dtype": dt, "out_dtype": dt}})


def close(a, b, exact: bool) -> bool:
    import torch
    if tuple(a.shape) != tuple(b.shape):
        return False
    if exact:
        return torch.equal(a.to(torch.int64), b.to(torch.int64)) if not a.dtype.is_floating_point \
            and not b.dtype.is_floating_point else torch.equal(a.double(), b.double())
    return torch.allclose(a.double(), b.double(), rtol=PARTIAL_RTOL, atol=PARTIAL_ATOL)


def reduce_group(locals_, op):
    import torch
    st = torch.stack([t.double() if t.dtype.is_floating_point else t.to(torch.int64) for t in locals_])
    return st.sum(0) if op == "sum" else st.amax(0) if op == "max" else st.amin(0)


def dtensor_program(x, dm, dst) -> list[str]:
    """DTensor's transforms (after its merging pass) for x -> dst."""
    from torch.distributed.tensor import _redistribute as R
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    d = DTensorSpec(dm, tuple(dst), tensor_meta=x._spec.tensor_meta)
    infos = R._optimize_transform_infos(R._gen_transform_infos(x._spec, d), dm, x._spec.placements, d.placements)
    out = []
    for info in infos:
        a, b = info.src_dst_placements
        dims = getattr(info, "original_mesh_dims", None) or (info.mesh_dim,)
        if a != b and all(dm.size(i) > 1 for i in dims):
            out.append(f"{','.join(map(str, dims))}: {a} -> {b}")
    return out


def partial_sweep(job: Job, name: str, dm, shape, pairs, dtypes) -> None:
    """``partial`` records (see the module docstring); collective: every rank
    runs the same pairs in the same order."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from verishard.torch import plan_for, redistribute
    rank = dist.get_rank()
    for k, (src, dst) in enumerate(pairs):
        dtype = dtypes[k % len(dtypes)]
        exact = not dtype.is_floating_point or partial_op(src + dst) in ("max", "min")
        G = partial_global(shape, dtype, seed=300 + k)
        x = DTensor.from_local(partial_local(G, dm, src, dtype, seed=600 + k), dm, src,
                               shape=torch.Size(shape), stride=G.stride())
        rec = {"case": "partial", "mesh": name, "shape": list(shape), "dtype": str(dtype), "src": str(src),
               "dst": str(dst), "op": partial_op(src + dst), "exact": exact,
               # DTensor makes Partial("sum") from a non-Partial mesh dimension by dividing by the group size
               # (Partial._partition_value), which floors integers
               "int_partition": not dtype.is_floating_point and any(
                   q.is_partial() and q.reduce_op == "sum" and not p.is_partial() for p, q in zip(src, dst))}
        t = time.perf_counter()
        try:
            ours = redistribute(x, dst)
            rec["ours_error"] = None
        except Exception as e:  # noqa: BLE001 - recorded and judged by the test
            ours, rec["ours_error"] = None, short(e) + "\n" + traceback.format_exc()
        t1 = time.perf_counter()
        try:
            ref = dtensor_redistribute(x, dm, dst)
            rec["dtensor_error"] = None
        except Exception as e:  # noqa: BLE001
            ref, rec["dtensor_error"] = None, short(e)
        rec["seconds"] = {"ours": t1 - t, "dtensor": time.perf_counter() - t1}
        want = block(G, dm, dst)
        if ours is not None:
            local = ours.to_local()
            rec["placements_ok"] = ours.placements == tuple(dst) and ours.device_mesh is dm
            rec["shape_ok"] = tuple(ours.shape) == tuple(shape) and local.dtype == dtype
            # every rank's result, to reduce over this rank's pending group of the target
            everyone = [torch.empty_like(local) for _ in range(dist.get_world_size())]
            dist.all_gather(everyone, local.contiguous())
            group, _ = pending_group(dm, rank, dst)
            op = partial_op(dst)
            got = reduce_group([everyone[r] for r in group], op) if op else local
            rec["ours_vs_global"] = close(got, want, exact)
            p = plan_for(x, dst)
            rec["plan"] = [str(c) for c in p.collectives] if p is not None else []
            rec["traffic"], rec["peak"] = (p.traffic, p.peak) if p is not None else (0, local.numel())
        if ref is not None:
            rec["dtensor_local_dtype"] = str(ref._local_tensor.dtype)
            if rank == 0 and k % 4 == 0:  # DTensor's planner on rank 0, for a quarter of the pairs
                try:
                    rec["dtensor_program"] = dtensor_program(x, dm, dst)
                except Exception as e:  # noqa: BLE001
                    rec["dtensor_program"] = [short(e)]
        if ours is not None and ref is not None:
            rec["locals_bit_identical"] = same(ours.to_local(), ref.to_local())
            a, b = ours.full_tensor(), ref.full_tensor()
            rec["full_vs_dtensor"] = close(a, b, exact)
            rec["dtensor_full_vs_global"] = close(b, G, exact)
            rec["ours_full_vs_global"] = close(a, G, exact)
        job.add(**rec)


def partial_grad_cases(job: Job, dm) -> None:
    """Gradients through Partial -> Shard and Replicate -> Partial (the
    gradient arriving as DTensor's default Replicate, or as Partial), ours
    against DTensor's (bit for bit, or within the tolerance where the
    gradient is reduced over two mesh dimensions: DTensor all-reduces one at
    a time, our plan once over both) and against the layout of the global
    gradient."""
    import torch
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    from verishard.torch import redistribute
    shape = (8, 8)
    cases = [((Partial(), Shard(0), Replicate()), (Shard(1), Shard(0), Replicate()), False),
             ((Partial(), Partial(), Replicate()), (Shard(0), Replicate(), Shard(1)), False),
             ((Replicate(), Shard(0), Replicate()), (Partial(), Shard(0), Replicate()), False),
             ((Replicate(), Shard(0), Replicate()), (Partial(), Shard(0), Partial()), True)]
    for k, (src, dst, partial_grad) in enumerate(cases):
        G = partial_global(shape, torch.float64, seed=900 + k)
        W = partial_global(shape, torch.float64, seed=950 + k)
        # the gradient arriving at y: the layout of W, split over y's pending groups when it arrives as Partial
        w = partial_local(W, dm, dst if partial_grad else plain(dst), torch.float64, seed=970 + k)
        grads, specs = {}, {}
        for who in ("ours", "dtensor"):
            x = DTensor.from_local(partial_local(G, dm, src, torch.float64, seed=920 + k), dm, src,
                                   shape=torch.Size(shape), stride=G.stride()).requires_grad_()
            y = redistribute(x, dst) if who == "ours" else dtensor_redistribute(x, dm, dst)
            out = y.to_local(grad_placements=dst if partial_grad else None)
            (out * w).sum().backward()
            grads[who], specs[who] = x.grad, x.grad._spec
        a, b = grads["ours"], grads["dtensor"]
        # DTensor's rule: the gradient's layout is the input's with Partial as Replicate where the
        # incoming gradient is not Partial; its value is the global gradient W
        expect = tuple(Replicate() if p.is_partial() and not (partial_grad and dst[i].is_partial()) else p
                       for i, p in enumerate(src))
        wa = partial_local(W, dm, expect, torch.float64, seed=0) if partial_op(expect) is None else None
        job.add(case="pgrad", src=str(src), dst=str(dst), partial_grad=partial_grad,
                grad_vs_dtensor=same(a.to_local(), b.to_local()),
                grad_close_to_dtensor=close(a.to_local(), b.to_local(), False),
                grad_placements=str(a.placements), dtensor_grad_placements=str(b.placements),
                grad_spec_vs_dtensor=a.placements == b.placements and a._spec.shard_order == b._spec.shard_order,
                grad_vs_global=(close(a.to_local(), wa, False) if wa is not None
                                else close(a.full_tensor(), W, False)))


def partial_uneven_cases(job: Job, dm) -> None:
    """Partial placements on a 5 x 7 tensor (dimensions that do not divide):
    verishard.torch.redistribute plans them as all-reduce, exchange,
    make-pending (Puexchange.v); full_tensor() of the result is the global
    tensor (where DTensor's nested shards are not our blocks: reduce, box
    schedule, make pending)."""
    import torch
    from torch.distributed.tensor import DTensor
    from verishard.torch.dtensor import all_placements
    from verishard.torch import NotSupportedYet, redistribute
    lp = all_placements(dm, 2, partial="sum")
    pairs = random.Random(78).sample([(a, b) for a in lp for b in lp if any(p.is_partial() for p in a + b)], 40)
    shape = (5, 7)
    for k, (src, dst) in enumerate(pairs):
        G = partial_global(shape, torch.int64, seed=900 + k)
        rec = {"case": "partial_uneven", "src": str(src), "dst": str(dst), "error": None}
        try:
            x = DTensor.from_local(partial_local(G, dm, src, torch.int64, seed=950 + k), dm, src,
                                   shape=torch.Size(shape), stride=G.stride())
            y = redistribute(x, dst)
            rec["ok"] = bool(torch.equal(y.full_tensor(), G)) and y.placements == tuple(dst)
        except NotSupportedYet as e:
            rec["error"] = short(e)
        job.add(**rec)


def exchange_cases(job: Job, dm) -> None:
    """Exchange plans (plan(..., exchange=True)) run by the torch backend
    (runtime.torch.run_plan: one all_to_all_single over the mesh), even and
    uneven, compared with the expected block on every rank."""
    import numpy as np
    import torch
    from mpi_cases import all_types
    import verishard
    from verishard.torch.backend import mesh_groups, run_plan
    from verishard.runtime.uneven import distribute_padded
    mesh = verishard.Mesh.parse("x=2,y=2,z=2")
    rank = dist_rank()
    groups = mesh_groups(dm)
    for shape in ((4, 8, 2), (3, 5, 2)):
        types = [verishard.ArrayType(mesh, [(g, t.dim_parts(d)) for d, g in enumerate(shape)])
                 for t in all_types(mesh, (8, 8, 2))]
        A = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        n = 0
        for a in types:
            for b in types:
                p = verishard.plan(mesh, a, b, exchange=True)
                if not p.exchange or n >= 40:
                    continue
                n += 1
                x = torch.from_numpy(distribute_padded(A, mesh, a, np.float32(0))[rank])
                y = run_plan(p, x, groups)
                want = distribute_padded(A, mesh, b, np.float32(0))[rank]
                box = tuple(slice(0, v) for v in b.valid_shape(rank))
                job.add(case="exchange", src=str(a), dst=str(b),
                        ok=tuple(y.shape) == b.local_shape and bool(np.array_equal(y.numpy()[box], want[box])))


def grad_cases(job: Job, name: str, dm, shape, pairs, case: str = "grad") -> None:
    """Gradients through ours and DTensor's (records ``case``), and a second
    derivative through the first pair (``case`` + "2")."""
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
        job.add(case=case, mesh=name, src=str(src), dst=str(dst),
                grad_vs_dtensor=same(a.to_local(), b.to_local()),
                grad_close_to_dtensor=close(a.to_local(), b.to_local(), False),
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
    job.add(case=case + "2", mesh=name, src=str(src), dst=str(dst),
            ok=(same(gx.to_local(), 2 * x.to_local()) and bool(torch.all(ggx.to_local() == 2))
                and gx.placements == x.placements and ggx.placements == x.placements))


def cache_case(job: Job, dm) -> None:
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import verishard.core as core
    import verishard.torch as vt
    # Count the verified core's planning calls verishard.torch makes: the one
    # call that chooses and plans (core.lplan), and any second planning call
    # (core.plan_checked, under verishard.plan; none for a pair with nothing
    # pending). A shape planned nowhere else in this job.
    real_lplan, real_core = core.lplan, core.plan_checked
    calls = {"plan": 0, "core": 0}

    def counting_lplan(*a, **k):
        calls["plan"] += 1
        return real_lplan(*a, **k)

    def counting_core(*a, **k):
        calls["core"] += 1
        return real_core(*a, **k)

    core.lplan, core.plan_checked = counting_lplan, counting_core
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
        core.lplan, core.plan_checked = real_lplan, real_core
    job.add(case="cache", counts=counts, info=info)


def expect_error(job: Job, label: str, fn, after) -> None:
    """Run ``fn`` (expected to raise), then ``after`` (a good call: the
    process group must still work)."""
    t = time.time()
    try:
        fn()
        err = None
    except Exception as e:  # noqa: BLE001
        err = error_record(e)
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
    # another DeviceMesh over the same ranks: the cross-mesh schedule, point to point
    other = redistribute(x, [Replicate(), Shard(0)], device_mesh=dm_other)
    job.add(case="other-mesh", ok=same(other.to_local(), distribute_tensor(G, dm_other, (Replicate(), Shard(0)),
                                                                           src_data_rank=None).to_local())
            and other.device_mesh is dm_other)
    avg = DTensor.from_local(torch.ones(8, 16), dm, [Partial("avg"), Replicate()])
    expect_error(job, "partial-avg", lambda: redistribute(avg, [Replicate(), Replicate()]), after)
    expect_error(job, "partial-mixed", lambda: redistribute(x, [Partial("sum"), Partial("max")]), after)
    p = DTensor.from_local(torch.ones(8, 16), dm, [Partial(), Replicate()])
    expect_error(job, "partial-change-reduction", lambda: redistribute(p, [Replicate(), Partial("max")]), after)
    u = distribute_tensor(global_tensor((6, 16), torch.float32, 3), dm, (Replicate(), Replicate()),
                          src_data_rank=None)
    # 6 over 2 x 4: DTensor chunks each half of 3 into 1, 1, 1, 0 (our blocks would be 1 x 6, 0, 0): the box schedule
    nested = redistribute(u, [Shard(0), Shard(0)])
    job.add(case="uneven-nested", ok=same(nested.to_local(), distribute_tensor(
        global_tensor((6, 16), torch.float32, 3), dm, (Shard(0), Shard(0)), src_data_rank=None).to_local()))
    # the good placements are cached and agreed on by now: ranks that disagree on a later call are
    # caught by check_agreement="always" (the default agrees on a plan's first use only) ...
    expect_error(job, "one-rank-wrong-length",
                 lambda: redistribute(x, [Shard(0)] if r == 5 else [Replicate(), Shard(1)],
                                      check_agreement="always"), after)
    expect_error(job, "ranks-disagree",
                 lambda: redistribute(x, [Shard(1), Replicate()] if r == 3 else [Replicate(), Shard(1)],
                                      check_agreement="always"), after)
    # ... and by the default where the plan is new on every rank
    expect_error(job, "ranks-disagree-first-use",
                 lambda: redistribute(x, [Shard(1), Shard(0)] if r == 3 else [Shard(0), Shard(1)]), after)
    bad_local = DTensor.from_local(torch.ones(3, 16), dm, [Shard(0), Replicate()], run_check=False,
                                   shape=torch.Size((8, 16)), stride=(16, 1))
    expect_error(job, "wrong-local-shape", lambda: redistribute(bad_local, [Replicate(), Shard(1)]), after)
    small = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("a", "b"))
    s = DTensor.from_local(torch.full((4, 4), float(r // 2)), small, [Shard(0), Replicate()], run_check=False)
    # a mesh over ranks 0-3 of 8: they run it point to point among themselves; ranks 4-7 get DTensor's
    # empty local tensor (they are not in the mesh)
    y = redistribute(s, [Replicate(), Replicate()])
    want = torch.tensor([0.0] * 4 + [1.0] * 4).reshape(8, 1).expand(8, 4) if r < 4 else torch.empty(0)
    job.add(case="submesh", ok=same(y.to_local(), want) and y.placements == (Replicate(), Replicate()))
    # one gather over both of its dimensions: a process group the sub-mesh does not have, made by
    # ranks 0-3 only (ranks 4-7 do not call)
    from verishard.torch import backend as runtime
    t = DTensor.from_local(torch.full((2, 4), float(r)), small, [Shard(0), Shard(0)], run_check=False)
    y = redistribute(t, [Replicate(), Replicate()])
    want = torch.arange(4.0).repeat_interleave(2).reshape(8, 1).expand(8, 4) if r < 4 else torch.empty(0)
    job.add(case="submesh", ok=same(y.to_local(), want) and y.placements == (Replicate(), Replicate()),
            local_groups=len(runtime._LOCAL_GROUPS))
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
    from torch.distributed.tensor import Replicate, Shard
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
        from verishard.torch.dtensor import all_placements
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
        import verishard.torch.backend as vrt
        saved, vrt.ROUND_BYTES = vrt.ROUND_BYTES, 1  # every all-to-all and gather in up to 8 rounds
        try:
            sweep(job, "(2,4) x,y in rounds", m24, (16, 16), pairs_rounds, dtypes)
            sweep(job, "(2,4) permuted ranks in rounds", mperm, (16, 16), pairs_perm[SAMPLE_PERM:], dtypes)
        finally:
            vrt.ROUND_BYTES = saved
        timing["sweep"] = time.time() - t
        t = time.time()
        l24_1 = all_placements(m24, 1)
        uneven_sweep(job, "(2,4) x,y", m24, (5, 7), pairs24, dtypes)
        uneven_sweep(job, "(2,4) x,y", m24, (7,), [(a, b) for a in l24_1 for b in l24_1], dtypes)
        uneven_sweep(job, "(2,2,2) x,y,z", m222, (3, 6),
                     random.Random(56).sample([(a, b) for a in l222 for b in l222], SAMPLE_UNEVEN_3D), dtypes)
        S, R = Shard, Replicate
        grad_cases(job, "(2,4) x,y", m24, (5, 7), [((S(0), S(1)), (S(1), R())), ((R(), S(0)), (S(1), S(0)))],
                   case="ugrad")
        grad_cases(job, "(2,2,2) x,y,z", m222, (3, 6), [((S(0), R(), S(1)), (R(), S(1), S(0)))], case="ugrad")
        timing["uneven"] = time.time() - t
        t = time.time()
        gpairs = (rnd.sample([(a, b) for a, b in pairs24 if a != b], 6)
                  + rnd.sample([(a, b) for a in l222 for b in l222 if a != b], 6))
        grad_cases(job, "(2,4) x,y", m24, (8, 16), gpairs[:6])
        grad_cases(job, "(2,2,2) x,y,z", m222, (8, 8), gpairs[6:])
        timing["grad"] = time.time() - t
        # pairs with Partial: every placement tuple of a 2-D tensor on the (2, 2, 2) mesh with
        # Partial(op) allowed on each mesh dimension (92 for each op); pairs whose source or target has one
        t = time.time()
        prnd, ppairs = random.Random(34), []
        for op, n in (("sum", SAMPLE_PARTIAL), ("max", SAMPLE_PARTIAL_OTHER), ("min", SAMPLE_PARTIAL_OTHER)):
            lp = all_placements(m222, 2, partial=op)
            ppairs += prnd.sample([(a, b) for a in lp for b in lp if any(p.is_partial() for p in a + b)], n)
        partial_sweep(job, "(2,2,2) x,y,z", m222, (8, 8), ppairs, [torch.float32, torch.int32, torch.int64])
        partial_grad_cases(job, m222)
        timing["partial"] = time.time() - t
        t = time.time()
        exchange_cases(job, m222)
        partial_uneven_cases(job, m222)
        timing["exchange"] = time.time() - t
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


def fork_job(worker, outdir: str, nprocs: int) -> None:
    """Run ``worker(rank, port, outdir)`` on ``nprocs`` forked processes.
    Import everything once here, then fork: 8 processes importing torch on a
    2-core machine take ~12 s with the spawn start method, forking ~1 s.
    Nothing here has started a process group or a thread pool yet."""
    import torch.multiprocessing as mp
    import torch.distributed.tensor  # noqa: F401
    import torch._dynamo  # noqa: F401 - DTensor.from_local imports it on first use (~2 s per process)
    import verishard.torch  # noqa: F401
    os.makedirs(outdir, exist_ok=True)
    from verishard.torch.backend import free_port
    mp.start_processes(worker, args=(free_port(), outdir), nprocs=nprocs, join=True, start_method="fork")


def main(outdir: str) -> None:
    fork_job(worker, outdir, NPROCS)


if __name__ == "__main__":
    main(sys.argv[1])
