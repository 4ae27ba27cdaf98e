"""Run a partitioned forward pass as torch.distributed gloo processes, one per device.

Each process rebuilds the model (same seed), walks the fx nodes in the schedule's
order, runs the nodes placed on its device and sends each result once to every
other process that consumes it (``isend``; consumers ``recv``), so the processes
exchange exactly the placement's cross-device tensors. Only single-device
placements run (sharded options are priced but not executed). Rank 0 is the
host: it holds the input and must end with the output; its wall time from a
barrier to the output is the measured latency, and the output is compared with
the unpartitioned model's.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

from ..torch.backend import free_port
from .graph import PartitionError

# Spawned, not forked: the caller may be a process that already holds a default
# process group (forked children would inherit it) or runs JAX's threads.
_START = "spawn"


def _init(rank: int, world: int, port: int):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return dist


def _pingpong_worker(rank: int, world: int, port: int, sizes: list[int], reps: int, out: str):
    import torch

    dist = _init(rank, world, port)
    res = {}
    for n in sizes:
        buf = torch.zeros(n)
        ts = []
        for _ in range(reps + 5):
            dist.barrier()
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
            ts.append((time.perf_counter() - t0) / 2)
        res[n] = statistics.median(ts[5:])
    if rank == 0:
        with open(out, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


def measure_link(sizes=(1, 65536, 262144), reps: int = 50) -> tuple[float, float, dict]:
    """(alpha seconds, beta bytes/s, one-way time per element count) of gloo between two
    local processes, by ping-pong (median of ``reps``): alpha is the one-element time,
    beta the slope to the largest message."""
    import torch.multiprocessing as mp

    out = os.path.join(tempfile.mkdtemp(), "pingpong.json")
    mp.start_processes(_pingpong_worker, args=(2, free_port(), list(sizes), reps, out), nprocs=2, join=True,
                       start_method=_START)
    with open(out) as f:
        res = {int(k): v for k, v in json.load(f).items()}
    small, large = min(res), max(res)
    alpha = res[small]
    beta = 4.0 * (large - small) / max(res[large] - alpha, 1e-9)
    return alpha, beta, res


def _exec_worker(rank: int, world: int, port: int, model: str, batch: int, owner: dict, order: list,
                 iters: int, out: str):
    import torch
    import torch.fx as fx

    from .models import MODELS

    dist = _init(rank, world, port)
    build, example = MODELS[model]
    torch.manual_seed(0)
    m = build()
    x = example(batch)
    gm = fx.symbolic_trace(m)
    nodes = {n.name: n for n in gm.graph.nodes}
    from torch.fx.passes.shape_prop import ShapeProp

    with torch.no_grad():
        ShapeProp(gm).propagate(x)
        ref = gm(x) if rank == 0 else None
    users = {n: {owner[u.name] for u in nodes[n].users} - {owner[n]} for n in order}
    times = []
    result = None
    with torch.no_grad():
        for it in range(iters + 2):
            interp = fx.Interpreter(gm)
            interp.args_iter = iter([x])
            env = interp.env
            reqs = []
            dist.barrier()
            t0 = time.perf_counter()
            for name in order:
                node = nodes[name]
                if owner[name] == rank:
                    if node.op == "output":
                        result = env[node.args[0]]
                        continue
                    val = interp.run_node(node)
                    env[node] = val
                    if users[name]:
                        send = val.contiguous()
                        for r in sorted(users[name]):
                            reqs.append(dist.isend(send, r))
                elif rank in users[name]:
                    tm = node.meta["tensor_meta"]
                    buf = torch.empty(tuple(tm.shape), dtype=tm.dtype)
                    dist.recv(buf, owner[name])
                    env[node] = buf
            t1 = time.perf_counter()
            for q in reqs:
                q.wait()
            if it >= 2:
                times.append(t1 - t0)
    if rank == 0:
        ok = bool(torch.allclose(result, ref, atol=1e-4, rtol=1e-4))
        with open(out, "w") as f:
            json.dump({"times": times, "correct": ok}, f)
    dist.barrier()
    dist.destroy_process_group()


def execute(pb, assign: dict, order: list, model: str, batch: int, iters: int = 20) -> dict:
    """Run ``assign`` (single-device options only) of the graph of named ``model`` with one gloo
    process per device of the platform (host = rank 0); returns measured latencies."""
    import torch.multiprocessing as mp

    devs = list(pb.pf.devices)
    if devs[0] != pb.pf.host:
        devs.remove(pb.pf.host)
        devs.insert(0, pb.pf.host)
    if len(devs) > 4:
        raise PartitionError(f"execution runs one process per device; {len(devs)} is more than 4")
    rank_of = {d: r for r, d in enumerate(devs)}
    owner, fx_order = {}, []
    for v in order:
        o = pb.opts[v][assign[v]]
        if o.kind != "dev":
            raise PartitionError(f"node {v!r} is sharded ({o}); only single-device placements are executed")
        for f in pb.g.nodes[v]["fx"]:
            owner[f] = rank_of[o.devs[0]]
            fx_order.append(f)
    for v in pb.order:  # the output node stands for the fx output
        if v == "output":
            owner["output"] = rank_of[pb.pf.host]
            if "output" not in fx_order:
                fx_order.append("output")
    out = os.path.join(tempfile.mkdtemp(), "exec.json")
    mp.start_processes(_exec_worker, args=(len(devs), free_port(), model, batch, owner, fx_order, iters, out),
                       nprocs=len(devs), join=True, start_method=_START)
    with open(out) as f:
        res = json.load(f)
    res["median"] = statistics.median(res["times"])
    return res


__all__ = ["measure_link", "execute"]
