"""Structured layers (verishard.butterfly): parameters against dense, accuracy
of the digits MLP, exactness of the FFT / Hadamard inits, forward+backward
time against nn.Linear, and a ShardedMonarch MLP block against a
Megatron-style tensor-parallel dense MLP on gloo processes. Everything is
measured in this run, side by side; nothing is copied from elsewhere.

    python bench/butterfly.py                 # writes bench/results/butterfly.md
    python bench/butterfly.py --out -         # prints it
    python bench/butterfly.py --quick         # fewer seeds and repeats (a smoke run)

Torch runs on one thread (``torch.set_num_threads(1)``): the machine is
shared, and one thread gives steadier ratios; the sharded part runs
``--procs`` gloo processes (default 8) on this machine's cores.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from report import emit_report  # noqa: E402
from verishard.butterfly import Butterfly, Monarch, Pixelfly  # noqa: E402
from verishard.butterfly.demo import HIDDEN, WIDTH, digits, train  # noqa: E402


def monarch_blocks(n: int) -> int:
    """sqrt(n) rounded up to a power of two: Monarch's 2 n sqrt(n) point."""
    return 1 << math.ceil(math.log2(n) / 2)


def pixelfly(n: int) -> Pixelfly:
    return Pixelfly(n, n, bias=False, block=16, factors=3, rank=16)


# ---------------------------------------------------------------------------
# 1. parameters


def parameters_table(sizes: list[int]) -> list[str]:
    rows = ["| n | dense | Butterfly (2n log2 n) | Monarch (nblocks) | Pixelfly (b=16, 3 factors, rank 16) |",
            "|---:|---:|---:|---:|---:|"]

    def cell(p: int, n: int) -> str:
        return f"{p:,} ({100 * (1 - p / n ** 2):.1f}% less, {p * 4 / 2 ** 20:.2f} MiB)"
    for n in sizes:
        b = Butterfly(n, n, bias=False).num_parameters()
        assert b == 2 * n * int(math.log2(n))
        k = monarch_blocks(n)
        m = Monarch(n, n, bias=False, nblocks=k).num_parameters()
        rows.append(f"| {n} | {n * n:,} ({n * n * 4 / 2 ** 20:.2f} MiB) | {cell(b, n)} | {cell(m, n)} "
                    f"(nblocks={k}) | {cell(pixelfly(n).num_parameters(), n)} |")
    return rows


# ---------------------------------------------------------------------------
# 2. digits accuracy


def accuracy_table(seeds: int, epochs: int) -> tuple[list[str], dict]:
    data = digits()
    runs = {kind: [train(kind, s, data, epochs=epochs) for s in range(seeds)] for kind in HIDDEN}
    dense_acc = statistics.mean(r["accuracy"] for r in runs["dense"])
    dense_par = runs["dense"][0]["hidden_parameters"]
    rows = ["| hidden layer | parameters (% fewer than dense) | test accuracy, mean ± sd | vs dense | "
            "train step (ms) |", "|---|---:|---:|---:|---:|"]
    summary = {}
    for kind, rs in runs.items():
        acc = [r["accuracy"] for r in rs]
        par = rs[0]["hidden_parameters"]
        diff = 100 * (statistics.mean(acc) - dense_acc)
        summary[kind] = dict(diff=diff, fewer=100 * (1 - par / dense_par))
        rows.append(f"| {kind} | {par:,} ({100 * (1 - par / dense_par):.1f}%) | "
                    f"{100 * statistics.mean(acc):.2f}% ± {100 * statistics.pstdev(acc):.2f} | {diff:+.2f} pt | "
                    f"{1e3 * statistics.median(r['step_seconds'] for r in rs):.2f} |")
    return rows, summary


# ---------------------------------------------------------------------------
# 3. exact transforms, one device


def exact_transforms(n: int = 1024) -> list[str]:
    f64 = torch.float64
    with torch.no_grad():
        H = Butterfly(n, n, bias=False, init="hadamard", dtype=f64).to_dense()
        D = Butterfly(n, n, bias=False, init="fft", dtype=f64).to_dense()
    eh = float((H - torch.as_tensor(scipy.linalg.hadamard(n), dtype=f64)).abs().max())
    ed = float((D - torch.as_tensor(np.fft.fft(np.eye(n), axis=0))).abs().max())
    return [f"- one device, n = {n}, fp64: max |entry error| DFT {ed:.2e}, Hadamard {eh:.2e}"]


# ---------------------------------------------------------------------------
# 4. speed


def fwd_bwd_seconds(layer: nn.Module, n: int, batch: int, repeats: int) -> float:
    x = torch.randn(batch, n, requires_grad=True)
    layer(x).sum().backward()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        layer(x).sum().backward()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def speed_table(sizes: list[int], batch: int, repeats: int) -> tuple[list[str], dict]:
    rows = ["| n | nn.Linear (ms) | Butterfly (ms, speed-up) | Monarch (ms, speed-up) | Pixelfly (ms, speed-up) |",
            "|---:|---:|---:|---:|---:|"]
    speedups = {}
    for n in sizes:
        base = fwd_bwd_seconds(nn.Linear(n, n), n, batch, repeats)
        cells = []
        for name, layer in (("butterfly", Butterfly(n, n)), ("monarch", Monarch(n, n, nblocks=monarch_blocks(n))),
                            ("pixelfly", pixelfly(n))):
            t = fwd_bwd_seconds(layer, n, batch, repeats)
            speedups[(name, n)] = base / t
            cells.append(f"{1e3 * t:.1f} ({base / t:.2f}x)")
        rows.append(f"| {n} | {1e3 * base:.1f} | " + " | ".join(cells) + " |")
    return rows, speedups


# ---------------------------------------------------------------------------
# 5. sharded, on gloo processes


class _Copy(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group):  # type: ignore[override]
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        import torch.distributed as dist
        g = g.clone()
        _reduced(g)
        dist.all_reduce(g, group=ctx.group)
        return g, None


class _Reduce(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):  # type: ignore[override]
        import torch.distributed as dist
        x = x.clone()
        _reduced(x)
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        return g, None


_ALL_REDUCED = [0]


def _reduced(t: torch.Tensor) -> None:
    _ALL_REDUCED[0] += t.numel() * t.element_size()


def _worker(rank: int, port: int, nprocs: int, out: str, width: int, batch: int, repeats: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from test_butterfly_sharded import install_byte_counter

    from verishard.butterfly.sharded import ShardedButterfly, ShardedMonarch
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=nprocs, timeout=timedelta(seconds=300))
    mesh = init_device_mesh("cpu", (nprocs,), mesh_dim_names=("tp",))
    received = install_byte_counter()
    P, d, h = nprocs, width, width
    rec: dict = {}

    # ShardedMonarch MLP block: features sharded in and out
    nb = monarch_blocks(d)
    m1 = ShardedMonarch(d, h, nblocks=nb, device_mesh=mesh, features="tp", seed=1)
    m2 = ShardedMonarch(h, d, nblocks=nb, device_mesh=mesh, features="tp", seed=2)
    x = torch.randn(batch, d // P, requires_grad=True)

    def monarch_step():
        m2(torch.relu(m1(x))).sum().backward()

    # Megatron: A column-parallel, B row-parallel, one all-reduce forward (and one of the gradient backward)
    A = nn.Parameter(torch.randn(d, h // P) / math.sqrt(d))
    B = nn.Parameter(torch.randn(h // P, d) / math.sqrt(h))
    xr = torch.randn(batch, d, requires_grad=True)
    group = mesh.get_group("tp")

    def megatron_step():
        _Reduce.apply(torch.relu(_Copy.apply(xr, group) @ A) @ B, group).sum().backward()

    for name, step, params in (("monarch", monarch_step, list(m1.parameters()) + list(m2.parameters())),
                               ("megatron", megatron_step, [A, B])):
        step()
        received[0] = _ALL_REDUCED[0] = 0
        dist.barrier()
        times = []
        for _ in range(repeats):
            dist.barrier()
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        rec[name] = dict(received=received[0] // repeats, all_reduced=_ALL_REDUCED[0] // repeats,
                         seconds=statistics.median(times),
                         weight_bytes=sum(p.numel() * p.element_size() for p in params))
    rec["monarch"]["activation_elements"] = batch * max(m1.shape.nblocks * m1.shape.q, h) // P
    rec["megatron"]["activation_elements"] = batch * d          # the replicated input and output
    rec["monarch"]["plan_bytes"] = 4 * 2 * sum(p.traffic for p in m1.plans + m2.plans)  # fwd + reverse
    rec["monarch"]["plans"] = [str(m1.plans[0]).splitlines()[0], str(m1.plans[0]).splitlines()[-1]]

    # sharded over P equals the single-device layer (fp64, forward and input gradient)
    f64 = torch.float64
    errs = []
    for layer, cls in ((Monarch(d, h, nblocks=nb, seed=3, dtype=f64), ShardedMonarch),
                       (Butterfly(d, d, nblocks=2, seed=4, dtype=f64), ShardedButterfly)):
        xs = torch.randn(batch, d, dtype=f64, generator=torch.Generator().manual_seed(5), requires_grad=True)
        layer(xs).sum().backward()
        mine = slice(rank * (d // P), (rank + 1) * (d // P))
        xl = xs.detach()[:, mine].clone().requires_grad_()
        yl = cls.from_module(layer, mesh, features="tp")(xl)
        yl.sum().backward()
        errs += [float((yl.detach() - layer(xs).detach()[:, mine]).abs().max()),
                 float((xl.grad - xs.grad[:, mine]).abs().max())]
    rec["equal"] = max(errs)

    # the exact transforms sharded over P
    n = 1024
    eye = distribute_tensor(torch.eye(n, dtype=torch.float64), mesh, [Shard(1)]).to_local()
    w = n // P
    for init, want in (("fft", np.fft.fft(np.eye(n), axis=0)), ("hadamard", scipy.linalg.hadamard(n))):
        s = ShardedButterfly(n, n, bias=False, init=init, device_mesh=mesh, features="tp", dtype=torch.float64)
        with torch.no_grad():
            got = s(eye)
        rec[init] = float((got - torch.as_tensor(want.T)[:, rank * w:(rank + 1) * w]).abs().max())
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(rec, f)
    dist.destroy_process_group()


def sharded_section(nprocs: int, width: int, batch: int, repeats: int) -> list[str]:
    import torch.multiprocessing as mp

    from verishard.torch.backend import free_port
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_worker, args=(free_port(), nprocs, out, width, batch, repeats), nprocs=nprocs,
                           join=True, start_method="fork")
        recs = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(nprocs)]
    P = nprocs
    mon = max(r["monarch"]["received"] for r in recs)
    meg_tensor = max(r["megatron"]["all_reduced"] for r in recs)
    meg_ring = int(2 * (P - 1) / P * meg_tensor)
    r0 = recs[0]
    lines = [
        f"{P} gloo processes on this machine's {os.cpu_count()} cores, a 1-D mesh `tp={P}`; MLP block "
        f"{width} -> {width} -> {width} (ReLU), batch {batch}, fp32, forward + backward:",
        "",
        "| | bytes received per device | weights per device | largest activation per device (elements) | "
        "time per fwd+bwd (median, ms) |",
        "|---|---:|---:|---:|---:|",
        f"| ShardedMonarch x 2 (nblocks {monarch_blocks(width)}) | {mon:,} (counted; plans' figure "
        f"{r0['monarch']['plan_bytes']:,}) | {r0['monarch']['weight_bytes']:,} | "
        f"{r0['monarch']['activation_elements']:,} | {1e3 * max(r['monarch']['seconds'] for r in recs):.2f} |",
        f"| Megatron TP dense (column- then row-parallel) | {meg_ring:,} (ring all-reduce, 2(P-1)/P of the "
        f"{meg_tensor:,} bytes all-reduced) | {r0['megatron']['weight_bytes']:,} | "
        f"{r0['megatron']['activation_elements']:,} | {1e3 * max(r['megatron']['seconds'] for r in recs):.2f} |",
        "",
        f"Megatron moves {meg_ring / mon:.1f}x the bytes of the all-to-all form (P = {P}). The Monarch bytes are "
        f"counted on every `all_to_all_single` (less a rank's own slot) and equal the verified plans' traffic "
        f"figure; gloo's all-reduce bytes cannot be counted from outside, so Megatron's column is the ring "
        f"algorithm's figure for the bytes it all-reduces (counted). Activation sizes are computed from the "
        f"local shapes, not measured. Each middle permutation: `{r0['monarch']['plans'][0]}`, "
        f"{r0['monarch']['plans'][1]}.",
        "",
        f"- sharded over {P}, n = 1024, fp64: max |entry error| DFT {max(r['fft'] for r in recs):.2e}, "
        f"Hadamard {max(r['hadamard'] for r in recs):.2e}; a {width} x {width} Monarch and a butterfly "
        f"(nblocks 2) sharded over {P} against the single-device layer (fp64, batch {batch}): max error of the "
        f"output and the input gradient {max(r['equal'] for r in recs):.1e}",
    ]
    return lines


# ---------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "butterfly.md"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--procs", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    quick = args.quick
    seeds, epochs, repeats = (2, 10, 2) if quick else (5, 40, 5)
    t0 = time.perf_counter()
    par = parameters_table([256, 1024, 2048, 4096])
    acc, summary = accuracy_table(seeds, epochs)
    exact = exact_transforms()
    speed, speedups = speed_table([1024] if quick else [1024, 4096], 256 if quick else 1024, repeats)
    shard = sharded_section(args.procs, 1024, 64, 3 if quick else 10)
    cmd = "python bench/butterfly.py" + (" --quick" if quick else "") + \
        (f" --procs {args.procs}" if args.procs != 8 else "")
    ok = {k: v for k, v in summary.items() if k != "dense"}
    within = [k for k, v in ok.items() if abs(v["diff"]) <= 1 and v["fewer"] >= 75]
    lines = [
        "# Structured layers: butterfly, Monarch, Pixelfly",
        "",
        f"`{cmd}` ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, one torch thread; {time.perf_counter() - t0:.0f} s in all). CPU only: no GPU was "
        f"lent to this run.",
        "",
        "## Parameters (and fp32 memory) against a dense n x n weight",
        "",
        *par,
        "",
        f"## Digits MLP (scikit-learn `load_digits`, 64 -> {WIDTH} -> {WIDTH} -> 10)",
        "",
        f"The hidden-to-hidden layer is dense or structured; the same budget for every kind: Adam (lr 3e-3), "
        f"minibatches of 64, {epochs} epochs, {seeds} seeds (0..{seeds - 1}), a stratified 75/25 split. "
        f"Butterfly: nblocks 2; Monarch: nblocks 16; Pixelfly: block 8, 3 factors, rank 8.",
        "",
        *acc,
        "",
        f"Within 1 point of dense with at least 75% fewer parameters in that layer: "
        f"{', '.join(within) if within else 'none'}"
        f"{'; not: ' + ', '.join(k for k in ok if k not in within) if len(within) < len(ok) else ''}.",
        "",
        "## Exact transforms from the `fft` and `hadamard` inits",
        "",
        *exact,
        shard[-1],
        "",
        f"## Forward + backward time against nn.Linear (batch {256 if quick else 1024}, fp32, median of "
        f"{repeats})",
        "",
        *speed,
        "",
        "Speed-up = nn.Linear's time / the layer's time (above 1: faster than dense). Monarch at nblocks = "
        "sqrt(n) rounded up to a power of two.",
        "",
        "## Sharded: ShardedMonarch against Megatron-style tensor parallelism",
        "",
        *shard[:-2],
        "",
    ]
    emit_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
