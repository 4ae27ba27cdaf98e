"""ShardedMonarch / ShardedButterfly on 4 gloo processes (one launch of this
file as a script; every rank writes its results to a JSON file): forward and
backward equal the single-device layer in fp64 to 1e-12 (fp32: 1e-5), on a 1-D mesh of 4
and on a 2 x 2 (batch x features) and 4 x 1 mesh; the DFT and Hadamard
matrices from the sharded fft / hadamard inits; bytes counted on the wire
(every all_to_all_single, less what a rank sends itself) equal to the plans'
traffic figures, which equal their lower bounds."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from datetime import timedelta

import pytest

NPROCS = 4
TOL = {"torch.float64": 1e-12, "torch.float32": 1e-5}   # fp32: the sums run in another order on each rank


# ---------------------------------------------------------------------------
# the job (runs in each of the 4 processes)


def install_byte_counter() -> list[int]:
    """Count, in the returned cell, the bytes this rank receives from other
    ranks in every ``all_to_all_single`` (what the torch runtime's all-to-all
    and exchange steps call): the output less this rank's own slot."""
    import torch.distributed as dist
    received = [0]
    real = dist.all_to_all_single

    def counting(output, input, output_split_sizes=None, input_split_sizes=None, group=None, **kw):
        n, me = dist.get_world_size(group), dist.get_rank(group)
        row = output.numel() // max(output.shape[0], 1) if output.ndim else 1
        own = output.numel() // n if output_split_sizes is None else output_split_sizes[me] * row
        received[0] += (output.numel() - own) * output.element_size()
        return real(output, input, output_split_sizes, input_split_sizes, group=group, **kw)
    dist.all_to_all_single = counting
    return received


def _cases(rank: int) -> list[dict]:
    import numpy as np
    import scipy.linalg
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from verishard.butterfly import BlockButterfly, Butterfly, Monarch
    from verishard.butterfly.sharded import ShardedButterfly, ShardedMonarch

    received = install_byte_counter()

    meshes = {"tp=4": init_device_mesh("cpu", (4,), mesh_dim_names=("tp",)),
              "dp=2,tp=2": init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")),
              "dp=4,tp=1": init_device_mesh("cpu", (4, 1), mesh_dim_names=("dp", "tp"))}
    out = []

    def compare(name, mesh_name, layer, sharded_cls, batch=8):
        mesh = meshes[mesh_name]
        two_d = mesh.ndim == 2
        sharded = sharded_cls.from_module(layer, mesh, features="tp", batch="dp" if two_d else None)
        torch.manual_seed(7)
        dtype = next(layer.parameters()).dtype
        dtype = {torch.complex128: torch.float64, torch.complex64: torch.float32}.get(dtype, dtype)
        x = torch.randn(batch, layer.in_features, dtype=dtype)
        grad_out = torch.randn(batch, layer.out_features, dtype=dtype)
        if layer.twiddle.is_complex() if hasattr(layer, "twiddle") else False:
            grad_out = torch.complex(grad_out, grad_out.flip(0))
        x.requires_grad_()
        y = layer(x)
        (y * grad_out.conj()).real.sum().backward() if y.is_complex() else (y * grad_out).sum().backward()
        place = [Shard(0), Shard(1)] if two_d else [Shard(1)]
        xl = distribute_tensor(x.detach(), mesh, place).to_local().requires_grad_()
        gl = distribute_tensor(grad_out, mesh, place).to_local()
        received[0] = 0
        yl = sharded(xl)
        fwd_bytes = received[0]
        received[0] = 0
        (yl * gl.conj()).real.sum().backward() if yl.is_complex() else (yl * gl).sum().backward()
        bwd_bytes = received[0]
        want_y = distribute_tensor(y.detach(), mesh, place).to_local()
        want_gx = distribute_tensor(x.grad, mesh, place).to_local()
        errs = {"forward": float((yl.detach() - want_y).abs().max()), "input grad": float((xl.grad - want_gx).abs().max())}
        # weight gradients: this rank's share of the full gradient (summed over the batch mesh dimension)
        for pname, p in sharded.named_parameters():
            g = p.grad.clone()
            if two_d:
                dist.all_reduce(g, group=mesh.get_group("dp"))
            full = dict(layer.named_parameters())[pname].grad
            want = _share(sharded, pname, full)
            errs[f"grad {pname}"] = float((g - want).abs().max())
        itemsize = yl.element_size()
        plans = sharded.plans
        out.append(dict(case=name, mesh=mesh_name, dtype=str(dtype), errors=errs, fwd_bytes=fwd_bytes, bwd_bytes=bwd_bytes,
                        plan_bytes=sum(p.traffic for p in plans) * itemsize,
                        lower_bytes=sum(p.lower_bound for p in plans) * itemsize,
                        plans=[str(c) for p in plans for c in p.collectives]))

    def _share(sharded, pname, full):
        if isinstance(sharded, ShardedMonarch):
            kb = sharded.shape.nblocks // sharded.P
            if pname == "bias":
                w = kb * sharded.shape.s
                return full[sharded.index * w:(sharded.index + 1) * w]
            return full[sharded.index * kb:(sharded.index + 1) * kb]
        if pname == "bias":
            w = sharded.shape.n // sharded.P
            return full[sharded.index * w:(sharded.index + 1) * w]
        maps = [torch.as_tensor(sharded._pair_map(e, lay)) for (_, _, e, lay) in sharded.steps]
        return torch.stack([full[:, c, j][:, mp] for (c, j, _, _), mp in zip(sharded.steps, maps)], 1)

    f64 = dict(dtype=torch.float64)
    for mesh_name in meshes:
        compare("monarch 64x64 nblocks 8", mesh_name, Monarch(64, 64, nblocks=8, seed=1, **f64), ShardedMonarch)
        compare("butterfly 64 nblocks 2", mesh_name,
                Butterfly(64, 64, nblocks=2, init="orthogonal", seed=3, **f64), ShardedButterfly)
    compare("monarch 96->32 nblocks 4", "tp=4", Monarch(96, 32, nblocks=4, seed=2, **f64), ShardedMonarch)
    compare("block butterfly 128 block 2", "dp=2,tp=2", BlockButterfly(128, 128, block=2, seed=4, **f64),
            ShardedButterfly)
    compare("monarch fp32", "dp=2,tp=2", Monarch(64, 128, nblocks=8, seed=5), ShardedMonarch)
    compare("butterfly fp32", "tp=4", Butterfly(64, 64, nblocks=2, seed=6), ShardedButterfly)
    compare("fft 64", "tp=4", Butterfly(64, 64, bias=False, init="fft", **f64), ShardedButterfly)

    # bad input: one LayerError naming the problem, on every rank, before any data moves
    from verishard.butterfly import LayerError
    for make in (lambda: ShardedMonarch(64, 64, nblocks=2, device_mesh=meshes["tp=4"], features="tp"),
                 lambda: ShardedButterfly(8, 8, device_mesh=meshes["tp=4"], features="tp"),
                 lambda: ShardedMonarch(64, 64, nblocks=8, device_mesh=meshes["tp=4"], features="model")):
        try:
            make()
            out.append(dict(case="refused", message=None))
        except LayerError as e:
            out.append(dict(case="refused", message=str(e)))

    # the exact transforms at n = 1024, sharded over 4: the sharded layer applied to the identity
    mesh = meshes["tp=4"]
    eye = distribute_tensor(torch.eye(1024, dtype=torch.float64), mesh, [Shard(1)]).to_local()
    for init, want in (("fft", np.fft.fft(np.eye(1024), axis=0)), ("hadamard", scipy.linalg.hadamard(1024))):
        s = ShardedButterfly(1024, 1024, bias=False, init=init, device_mesh=mesh, features="tp", dtype=torch.float64)
        with torch.no_grad():
            got = s(eye)                                  # rows: e_k; columns: this rank's outputs
        block = torch.as_tensor(want.T)[:, rank * 256:(rank + 1) * 256]
        out.append(dict(case=f"{init} 1024", error=float((got - block).abs().max())))
    return out


def _worker(rank: int, port: int, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=NPROCS, timeout=timedelta(seconds=120))
    try:
        records = _cases(rank)
    except Exception:
        records = [dict(case="crash", traceback=traceback.format_exc())]
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(records, f)
    dist.destroy_process_group()


def _main(outdir: str) -> None:
    import torch.multiprocessing as mp
    import torch.distributed.tensor  # noqa: F401  (imported before the fork)

    import verishard.butterfly.sharded  # noqa: F401
    from verishard.torch.backend import free_port
    mp.start_processes(_worker, args=(free_port(), outdir), nprocs=NPROCS, join=True, start_method="fork")


# ---------------------------------------------------------------------------
# the tests (read the job's reports)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("butterfly_job")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(out)], env=env,
                          capture_output=True, text=True, timeout=400)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    ranks = {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(NPROCS)}
    crashes = [rec["traceback"] for recs in ranks.values() for rec in recs if rec["case"] == "crash"]
    assert not crashes, crashes[0]
    return ranks


def _layer_records(job):
    return [(r, rec) for r, recs in job.items() for rec in recs if "errors" in rec]


def test_sharded_equals_single_device(job):
    recs = _layer_records(job)
    assert len(recs) == NPROCS * 11     # 3 meshes x 2 layers, and 5 more
    for r, rec in recs:
        for what, err in rec["errors"].items():
            assert err <= TOL[rec["dtype"]], (r, rec["case"], rec["mesh"], what, err)


def test_counted_bytes_are_the_plans_traffic_at_the_lower_bound(job):
    moved = 0
    for r, rec in _layer_records(job):
        assert rec["fwd_bytes"] == rec["plan_bytes"] == rec["lower_bytes"], (r, rec)
        assert rec["bwd_bytes"] == rec["plan_bytes"], (r, rec)      # the reverse plans move as much
        moved += rec["fwd_bytes"]
        if rec["case"].startswith("monarch") and rec["mesh"] != "dp=4,tp=1":
            assert rec["plans"] == ["AllToAll(1->2, tp)"], rec      # one all-to-all
    assert moved > 0


def test_bad_input_refused(job):
    for r, recs in job.items():
        got = [rec["message"] for rec in recs if rec["case"] == "refused"]
        assert len(got) == 3 and all(got), (r, got)
        assert "nblocks (2) and q (32) divisible by 4" in got[0]
        assert "P * P <= n / block (8)" in got[1]
        assert "features='model' is not a dimension" in got[2]


def test_exact_transforms_sharded(job):
    for r, recs in job.items():
        got = {rec["case"]: rec["error"] for rec in recs if "error" in rec}
        assert got.keys() == {"fft 1024", "hadamard 1024"} and max(got.values()) < 1e-6, (r, got)


def test_docs_mesh_example_runs(tmp_path):
    """docs/butterfly.md's mesh example, run as the page says, prints what the page shows."""
    page = open(os.path.join(os.path.dirname(__file__), "..", "docs", "butterfly.md")).read()
    blocks = page.split("```")
    code = next(b for b in blocks if b.startswith("python\n") and "ShardedMonarch.from_module" in b)
    shown = blocks[blocks.index(code) + 2]
    script = tmp_path / "sharded_monarch.py"
    script.write_text(code[len("python\n"):])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert proc.stdout.strip() == shown.strip(), proc.stdout


if __name__ == "__main__":
    _main(sys.argv[1])
