"""The 4-process gloo job of tests/test_dtypes.py: ``python
tests/dtypes_torch_job.py OUTDIR`` forks 4 processes; every rank moves a
tensor of every dtype of ``verishard.dtypes.NAMES`` and writes
``OUTDIR/rank<r>.json``.

Per dtype, a global tensor of random bytes (every bit pattern: NaNs, and
values that are not numbers of the dtype, compare as bytes):

- ``redistribute``: ``verishard.torch.redistribute`` between placement pairs
  on a (2, 2) DeviceMesh, even (4, 6) and uneven (5, 7) shapes (collectives,
  the exchange and the box schedule), the result's local tensor against the
  shard of the global tensor that DTensor's placements give this rank
  (``torch.chunk`` per mesh dimension), byte for byte, and its dtype;
- ``transfer``: ``verishard.torch.transfer`` of the tensor from the (2, 2)
  mesh to a 1-D mesh of the ranks in another order, compared the same way;
- ``checkpoint``: ``verishard.checkpoint.save`` of a DTensor of every dtype
  from all ranks, loaded onto the 1-D mesh as DTensors, compared the same way;
- ``partial``: a ``Partial("sum")`` source reduced to ``Replicate()``: where
  gloo reduces the dtype, byte for byte DTensor's own result (a float sum
  may quiet a NaN or turn -0 into 0: DTensor is the reference, not the
  global tensor); otherwise the error, which must name the dtype, and
  DTensor fails too.
"""

from __future__ import annotations

import functools
import os
import sys

from torch_job import run_cases

NPROCS = 4
PAIRS = (("S0,S1", "R,R"), ("S0,R", "S1,S0"), ("R,S1", "S0,S0"), ("S1,S0", "S0,R"))
SHAPES = ((4, 6), (5, 7))


def placements(text):
    from torch.distributed.tensor import Replicate, Shard
    return [Replicate() if p == "R" else Shard(int(p[1:])) for p in text.split(",")]


def shard_of(g, pls, coords):
    """The local shard DTensor's placements give the mesh coordinates ``coords``
    (``torch.chunk`` per mesh dimension in order; empty past the chunks)."""
    import torch
    x = g
    for p, c, n in zip(pls, coords, (2, 2)):
        if p.is_shard():
            pieces = torch.chunk(x, n, p.dim)
            if c < len(pieces):
                x = pieces[c]
            else:
                shape = list(x.shape)
                shape[p.dim] = 0
                x = x.new_empty(shape)
    return x.contiguous()


def as_bytes(x) -> bytes:
    import torch
    return x.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b""


def random_tensor(name, shape, seed):
    import torch
    from verishard import dtypes
    dt = dtypes.torch_dtype(name)
    n = int(torch.Size(shape).numel())
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (n * dt.itemsize,), dtype=torch.uint8, generator=g)
    if name == "bool":
        raw = raw % 2
    return raw.view(dt).reshape(shape)


def dtypes_case(add, rank, outdir) -> None:
    """Every dtype through redistribute, transfer, checkpoint (saved under ``outdir``) and a Partial
    (module docstring)."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    from verishard import dtypes
    from verishard.torch import redistribute, transfer
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("x", "y"))
    line = DeviceMesh("cpu", [3, 2, 1, 0])
    coords = mesh.get_coordinate()
    for k, name in enumerate(dtypes.NAMES):
        for shape in SHAPES:
            g = random_tensor(name, shape, 1000 + k)
            for src, dst in PAIRS:
                sp, dp = placements(src), placements(dst)
                x = DTensor.from_local(shard_of(g, sp, coords), mesh, sp, run_check=False, shape=g.shape,
                                       stride=g.stride())
                rec = {"case": "redistribute", "dtype": name, "shape": list(shape), "src": src, "dst": dst}
                try:
                    y = redistribute(x, dp)
                    rec.update(ok=as_bytes(y.to_local()) == as_bytes(shard_of(g, dp, coords)),
                               dtype_kept=y.to_local().dtype == g.dtype and y.dtype == g.dtype,
                               placements=str(tuple(y.placements)) == str(tuple(dp)))
                except Exception as e:  # noqa: BLE001 - reported
                    rec["error"] = f"{type(e).__name__}: {e}"
                add(rec)
            # transfer to a 1-D mesh of the ranks in reverse order, split along the last dimension
            sp = placements("S0,S1")
            x = DTensor.from_local(shard_of(g, sp, coords), mesh, sp, run_check=False, shape=g.shape,
                                   stride=g.stride())
            rec = {"case": "transfer", "dtype": name, "shape": list(shape)}
            try:
                out = transfer({"w": x}, {"w": (line, [Shard(1)])})["w"]
                pos = [3, 2, 1, 0].index(rank)
                want = torch.chunk(g, 4, 1)[pos] if pos < len(torch.chunk(g, 4, 1)) else g[:, :0]
                rec.update(ok=as_bytes(out.to_local()) == as_bytes(want),
                           dtype_kept=out.to_local().dtype == g.dtype)
            except Exception as e:  # noqa: BLE001 - reported
                rec["error"] = f"{type(e).__name__}: {e}"
            add(rec)
        # a pending sum reduced: each rank's term is the global tensor's values where it is the rank
        # (zeros elsewhere, so that the sum is exact in every dtype that has a zero)
        g = random_tensor(name, (4, 6), 2000 + k)
        mask = (torch.arange(24).reshape(4, 6) % NPROCS) == rank
        term = torch.where(mask, g, torch.zeros((), dtype=g.dtype)) if name != "float8_e8m0fnu" else g
        x = DTensor.from_local(term, mesh, [Partial("sum"), Partial("sum")], run_check=False)
        rec = {"case": "partial", "dtype": name}
        theirs = None
        try:
            theirs = x.redistribute(mesh, [Replicate(), Replicate()]).to_local()
        except Exception as e:  # noqa: BLE001 - DTensor's own limits
            rec["dtensor_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        try:
            y = redistribute(x, [Replicate(), Replicate()])
            rec["dtype_kept"] = y.to_local().dtype == g.dtype
            if theirs is not None:
                rec["dtensor"] = as_bytes(theirs) == as_bytes(y.to_local())
        except Exception as e:  # noqa: BLE001 - reported
            rec["error"] = f"{type(e).__name__}: {e}"
        add(rec)
    # a checkpoint of DTensors of every dtype, saved by all ranks, loaded onto the 1-D mesh as DTensors
    from verishard import checkpoint
    sp = placements("S0,S1")
    state = {name: DTensor.from_local(shard_of(random_tensor(name, (4, 6), 3000 + k), sp, coords), mesh, sp,
                                      run_check=False, shape=(4, 6), stride=(6, 1))
             for k, name in enumerate(dtypes.NAMES)}
    path = os.path.join(outdir, "checkpoint")
    checkpoint.save(state, path)
    back = checkpoint.load(path, {name: (line, [Shard(1)]) for name in dtypes.NAMES})
    pos = [3, 2, 1, 0].index(rank)
    for k, name in enumerate(dtypes.NAMES):
        g = random_tensor(name, (4, 6), 3000 + k)
        want = torch.chunk(g, 4, 1)[pos] if pos < len(torch.chunk(g, 4, 1)) else g[:, :0]
        y = back[name]
        add({"case": "checkpoint", "dtype": name, "ok": isinstance(y, DTensor) and
                        as_bytes(y.to_local()) == as_bytes(want), "dtype_kept": y.to_local().dtype == g.dtype})


def main(outdir: str) -> None:
    import torch.distributed.tensor  # noqa: F401  (import once, then fork)
    import verishard.torch  # noqa: F401
    run_cases(outdir, NPROCS, {"dtypes": functools.partial(dtypes_case, outdir=outdir)})


if __name__ == "__main__":
    main(sys.argv[1])
