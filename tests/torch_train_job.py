"""The job of tests/test_torch_train.py: ``python tests/torch_train_job.py
OUTDIR NPROCS [CASES]`` forks NPROCS gloo processes (2 or 4); every rank
runs the cases and writes ``OUTDIR/rank<r>.json``.

Cases:

- ``train`` (4 ranks): PyTorch's own test ``Transformer``
  (``torch.testing._internal.distributed._tensor.common_dtensor``, tiny
  ``ModelArgs``) trained 2 steps (Adam, ``clip_grad_norm_``) with
  ``Transformer.parallelize`` under tensor + sequence parallelism on a
  1-D mesh of 4, and under TP on the ``tp`` sub-mesh then FSDP2
  ``fully_shard`` over ``dp`` on a (2, 2) mesh; once with DTensor's own
  redistributions and once under ``verishard.torch.enabled()``: losses and
  every parameter after the steps, bit for bit; ``routing_info()``.
- ``submesh`` (4 ranks): ``verishard.torch.redistribute`` on the ``tp``
  sub-mesh of a (2, 2) mesh, called by its two ranks only (each pair its
  own), against ``DTensor.redistribute``; the first pair's bad call refused
  on its two ranks while the second pair's good one runs.
- ``signature``: ``forward_dtype``, ``backward_dtype`` and ``async_op``
  against ``DTensor.redistribute`` with the same keywords: local values,
  dtypes and placements of the result and of the gradient.
- ``compile``: a function calling ``verishard.torch.redistribute`` compiled
  with ``backend="eager"`` and ``"aot_eager"``, with and without
  ``fullgraph=True``, against the same function calling
  ``DTensor.redistribute``: outputs and gradients bit for bit, the graph
  breaks Dynamo reports, the warnings raised while compiling; the
  functional collectives in the AOT forward and backward graphs; a layout
  only explicit boxes describe, compiled (4 ranks: refused).
- ``compile-pairs`` (4 ranks): plans with every kind of step compiled with
  ``aot_eager`` and ``fullgraph=True``: ours against DTensor's compiled and
  our eager result; the functional collectives of the forward graph.
- ``compile-enable``: a tensor-parallel MLP compiled with DTensor's own
  redistributions and under ``verishard.torch.enabled()``.
"""

from __future__ import annotations

import functools
import sys
import warnings

from torch_job import run_cases, same


def train(mesh, fsdp: bool, enable: bool, steps: int = 2):
    """Losses and full parameters after ``steps`` steps of the test Transformer."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.testing._internal.distributed._tensor.common_dtensor import ModelArgs, Transformer
    import verishard.torch as vt
    torch.manual_seed(0)
    # no attention mask: the CPU flash kernel has no DTensor sharding rule and the math one adds a plain mask
    args = ModelArgs(n_layers=1, vocab_size=8, max_seq_len=8, dim=16, n_heads=4, dropout_p=0.0,
                     use_attn_mask=False, weight_tying=False)
    model = Transformer.parallelize(Transformer(args), mesh["tp"] if fsdp else mesh, use_seq_parallel=True)
    if fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.Adam(model.parameters(), lr=0.01, foreach=False)
    g = torch.Generator().manual_seed(1 + (mesh.get_coordinate()[0] if fsdp else 0))
    losses = []
    with sdpa_kernel(SDPBackend.MATH), (vt.enabled() if enable else _nothing()):
        for _ in range(steps):
            out = model(torch.randint(0, args.vocab_size, (2, 8), generator=g))
            loss = out.full_tensor().sum() if hasattr(out, "full_tensor") else out.sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
    return losses, [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in model.parameters()]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def train_case(add, rank, nprocs) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    import verishard.torch as vt
    for label, shape, names, fsdp in (("TP+SP", (nprocs,), ("tp",), False),
                                      ("TP then FSDP2 over dp", (2, nprocs // 2), ("dp", "tp"), True)):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        ref = train(mesh, fsdp, enable=False)
        vt.routing_info(reset=True)
        got = train(mesh, fsdp, enable=True)
        info = vt.routing_info(reset=True)
        add(case="train", label=label, losses_same=all(same(a, b) for a, b in zip(ref[0], got[0])),
            params_same=[same(a, b) for a, b in zip(ref[1], got[1])], nparams=len(ref[1]), info=info,
            restored=vt._ROUTING["depth"] == 0)


def submesh_case(add, rank, nprocs) -> None:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import verishard.torch as vt
    mesh = init_device_mesh("cpu", (2, nprocs // 2), mesh_dim_names=("dp", "tp"))
    tp = mesh["tp"]
    full = torch.randn(8, 6, generator=torch.Generator().manual_seed(7 + mesh.get_coordinate()[0]))
    x = distribute_tensor(full, tp, [Shard(0)], src_data_rank=None)
    for dst in ([Shard(1)], [Replicate()]):
        ours = vt.redistribute(x, dst)
        ref = x.redistribute(tp, dst)
        add(case="submesh", dst=str(dst), same=same(ours.to_local(), ref.to_local()),
            placements=ours.placements == ref.placements)
    # each tp pair agrees among itself: the first pair's bad call is refused on its two ranks while the
    # second pair's good one runs
    row = mesh.get_coordinate()[0]
    rec = {"case": "submesh-refusal", "row": row, "error": None}
    try:
        y = vt.redistribute(x, [Shard(2)] if row == 0 else [Shard(1)], check_agreement="always")
        rec["same"] = same(y.to_local(), x.redistribute(tp, [Shard(1)]).to_local())
    except Exception as e:  # noqa: BLE001 - recorded
        rec["error"] = {"type": type(e).__name__, "message": str(e)}
    rec["after"] = same(vt.redistribute(x, [Replicate()]).to_local(), x.redistribute(tp, [Replicate()]).to_local())
    add(**rec)


def signature_case(add, rank, nprocs) -> None:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import verishard.torch as vt
    mesh = init_device_mesh("cpu", (nprocs,), mesh_dim_names=("x",))
    full = torch.randn(8, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float32) * 3
    cases = (("forward_dtype=bfloat16", dict(forward_dtype=torch.bfloat16)),
             ("backward_dtype=bfloat16", dict(backward_dtype=torch.bfloat16)),
             ("forward float16, backward float64", dict(forward_dtype=torch.float16, backward_dtype=torch.float64)),
             ("async_op=True", dict(async_op=True)))
    for label, kw in cases:
        got = []
        for fn in (lambda x: vt.redistribute(x, [Replicate()], **kw),
                   lambda x: x.redistribute(mesh, [Replicate()], **kw)):
            x = distribute_tensor(full, mesh, [Shard(0)]).requires_grad_()
            y = fn(x)
            w = torch.arange(y.to_local().numel(), dtype=y.dtype).reshape(y.to_local().shape) / 7
            (y.to_local() * w).sum().backward()
            local = y.to_local()
            if hasattr(local, "wait"):   # DTensor's AsyncCollectiveTensor
                local = local.wait()
            got.append((local, y.placements, x.grad.to_local(), x.grad.placements))
        (a, pa, ga, gpa), (b, pb, gb, gpb) = got
        add(case="signature", label=label, out=same(a, b), placements=pa == pb, grad=same(ga, gb),
            grad_placements=gpa == gpb, dtypes=[str(a.dtype), str(ga.dtype)])


def compile_case(add, rank, nprocs) -> None:
    import torch
    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    import verishard.torch as vt
    mesh = init_device_mesh("cpu", (nprocs,), mesh_dim_names=("x",))
    full = torch.randn(8, 4, generator=torch.Generator().manual_seed(5))

    def ours(x):
        y = vt.redistribute(x * 2, [Shard(1)])
        return vt.redistribute(y.sin(), [Replicate()]).to_local() + 1

    def dtensors(x):
        y = (x * 2).redistribute(mesh, [Shard(1)])
        return y.sin().redistribute(mesh, [Replicate()]).to_local() + 1

    for backend in ("eager", "aot_eager"):
        for fullgraph in (False, True):
            torch._dynamo.reset()
            results = []
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for fn in (ours, dtensors):
                    x = distribute_tensor(full, mesh, [Shard(0)]).requires_grad_()
                    y = torch.compile(fn, backend=backend, fullgraph=fullgraph)(x)
                    (y * y).sum().backward()
                    results.append((y.detach(), x.grad.to_local()))
                explained = torch._dynamo.explain(ours)(distribute_tensor(full, mesh, [Shard(0)]))
            (a, ga), (b, gb) = results
            add(case="compile", backend=backend, fullgraph=fullgraph, out=same(a, b), grad=same(ga, gb),
                breaks=explained.graph_break_count, warnings=sorted({str(w.message)[:300] for w in caught}))
    # what the AOT graphs hold: the plan's collectives as functional collectives, forward and backward
    graphs = []

    def keep(gm, inputs):
        graphs.append(gm.code)
        return gm
    torch._dynamo.reset()
    x = distribute_tensor(full, mesh, [Shard(0)]).requires_grad_()
    torch.compile(ours, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True)(x).sum().backward()
    ops = [sorted({w.split("(")[0] for w in g.split() if w.startswith("torch.ops._c10d_functional.")}) for g in graphs]
    add(case="compile-graphs", ops=ops)
    # a layout only explicit boxes describe moves point to point, which cannot be traced: without
    # fullgraph, Dynamo breaks the graph there and it runs eagerly; with fullgraph, refused with the reason
    if nprocs == 4:
        m22 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
        u = distribute_tensor(torch.arange(10.0).reshape(5, 2), m22, [Shard(0), Shard(0)])
        want = u.redistribute(m22, [Shard(1), Shard(0)]).to_local()
        for fullgraph in (False, True):
            torch._dynamo.reset()
            rec = {"case": "compile-boxes", "fullgraph": fullgraph, "error": None}
            try:
                got = torch.compile(lambda t: vt.redistribute(t, [Shard(1), Shard(0)]).to_local(),
                                    backend="aot_eager", fullgraph=fullgraph)(u)
                rec["same"] = same(got, want)
            except Exception as e:  # noqa: BLE001 - recorded, with its causes
                chain = []
                while e is not None and len(chain) < 5:
                    chain.append(f"{type(e).__name__}: {e}"[:600])
                    e = e.__cause__ or e.__context__
                rec["error"] = chain
            add(**rec)


def compile_pairs_case(add, rank, nprocs) -> None:
    """Plans with every kind of step, compiled (aot_eager, fullgraph) on a
    (2, nprocs // 2) mesh: ours against DTensor's compiled and against our
    eager result, with the functional collectives the forward graph holds."""
    import torch
    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard
    import verishard.torch as vt
    mesh = init_device_mesh("cpu", (2, nprocs // 2), mesh_dim_names=("a", "b"))
    S, R, P = Shard, Replicate, Partial

    def source(shape, placements, seed):
        full = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        if any(p.is_partial() for p in placements):   # a different local value per rank, DTensor's layout
            spec = distribute_tensor(full, mesh, [R() if p.is_partial() else p for p in placements]).to_local()
            return DTensor.from_local(spec * (rank + 1), mesh, placements, run_check=False)
        return distribute_tensor(full, mesh, placements)

    pairs = (((8, 4), (P(), R()), (S(0), R())), ((8, 4), (P(), S(1)), (R(), S(1))),
             ((8, 4), (S(0), S(1)), (S(1), S(0))), ((8, 4), (R(), S(0)), (S(0), R())),
             ((7, 6), (S(0), R()), (R(), S(1))), ((8, 4), (S(0), S(0)), (R(), R())),
             ((8, 4), (S(0), S(0)), (_StridedShard(0, split_factor=2), S(0))))
    for i, (shape, src, dst) in enumerate(pairs):
        x = source(shape, src, 11 + i)
        graphs = []

        def keep(gm, inputs):
            graphs.append(gm.code)
            return gm
        results = []
        for fn, backend in ((lambda t: vt.redistribute(t, dst).to_local() * 1, aot_autograd(fw_compiler=keep)),
                            (lambda t: t.redistribute(mesh, dst).to_local() * 1, "aot_eager")):
            torch._dynamo.reset()
            results.append(torch.compile(fn, backend=backend, fullgraph=True)(x))
        eager = vt.redistribute(x, dst).to_local()
        ops = sorted({w.split("(")[0].split(".")[3] for g in graphs for w in g.split()
                      if w.startswith("torch.ops._c10d_functional.")} - {"wait_tensor"})
        add(case="compile-pairs", pair=f"{shape} {src} -> {dst}", dtensor=same(results[0], results[1]),
            eager=same(results[0], eager), ops=ops)


def compile_enable_case(add, rank, nprocs) -> None:
    """A tensor-parallel MLP compiled (eager, aot_eager; fullgraph) with
    DTensor's own redistributions and under verishard.torch.enabled():
    output and every gradient bit for bit; routing_info()."""
    import torch
    import torch._dynamo
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    import verishard.torch as vt
    mesh = init_device_mesh("cpu", (nprocs,), mesh_dim_names=("tp",))

    def run(enable, backend, row):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
        m = parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": row})
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
        torch._dynamo.reset()
        with (vt.enabled() if enable else _nothing()):
            y = torch.compile(m, backend=backend, fullgraph=True)(x)
            y = y.full_tensor() if hasattr(y, "full_tensor") else y
            (y * y).sum().backward()
        return [y.detach()] + [p.grad.full_tensor() for p in m.parameters()]

    for backend in ("eager", "aot_eager"):
        for label, row in (("replicated output", RowwiseParallel()),
                           ("sequence-sharded output", RowwiseParallel(output_layouts=Shard(0)))):
            ref = run(False, backend, row)
            vt.routing_info(reset=True)
            got = run(True, backend, row)
            add(case="compile-enable", backend=backend, label=label, same=[same(a, b) for a, b in zip(ref, got)],
                info=vt.routing_info(reset=True))


CASES = {"train": train_case, "submesh": submesh_case, "signature": signature_case, "compile": compile_case,
         "compile-pairs": compile_pairs_case, "compile-enable": compile_enable_case}


def main(outdir: str, nprocs: int, only: str = "") -> None:
    import torch.distributed.tensor  # noqa: F401  (import once, then fork)
    import torch._dynamo  # noqa: F401
    import verishard.torch  # noqa: F401
    cases = {name: functools.partial(fn, nprocs=nprocs) for name, fn in CASES.items()}
    run_cases(outdir, nprocs, cases, only, quiet=False, barrier=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
