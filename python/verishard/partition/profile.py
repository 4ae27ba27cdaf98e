"""Profile this machine's CPU: seconds per fx node, measured by running the traced model
node by node (a :class:`torch.fx.Interpreter`, one thread), and attach them to a graph.

>>> from verishard.partition.models import model_graph
>>> g = model_graph("tiny-transformer", batch=1)
>>> g = attach_times(g, profile_fx(g, repeats=2))
>>> all(a["time"]["local-cpu"] >= 0 for _, a in g.nodes(data=True))
True
"""

from __future__ import annotations

import statistics
import time

from .graph import OpGraph, PartitionError


def profile_fx(graph: OpGraph, repeats: int = 20, threads: int = 1, device: str = "cpu") -> dict[str, float]:
    """Median seconds of each fx node over ``repeats`` runs (after one warm-up run),
    with ``torch.set_num_threads(threads)``; includes the interpreter's per-node overhead,
    which the partitioned execution pays too. On a CUDA ``device`` the model and input
    are copied there and every node is timed between two synchronizations (its
    kernels and their launches, nothing queued before it)."""
    import copy

    import torch
    import torch.fx as fx

    gm, example = graph.meta.get("gm"), graph.meta.get("example")
    if gm is None:
        raise PartitionError("the graph has no traced model to profile (build it with from_fx or model_graph)")
    cuda = torch.device(device).type == "cuda"
    if cuda:
        gm, example = copy.deepcopy(gm).to(device), example.to(device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    samples: dict[str, list[float]] = {n.name: [] for n in gm.graph.nodes}

    class Timed(fx.Interpreter):
        def run_node(self, n):
            sync()
            t0 = time.perf_counter()
            out = super().run_node(n)
            sync()
            samples[n.name].append(time.perf_counter() - t0)
            return out

    try:
        with torch.no_grad():
            for _ in range(repeats + 1):
                Timed(gm).run(example)
    finally:
        torch.set_num_threads(old)
    return {k: statistics.median(v[1:]) if len(v) > 1 else v[0] for k, v in samples.items()}


def attach_times(graph: OpGraph, times: dict[str, float], kind: str = "local-cpu") -> OpGraph:
    """Set each node's measured time on ``kind`` to the sum over the fx nodes it stands for."""
    for n, a in graph.g.nodes(data=True):
        a.setdefault("time", {})[kind] = float(sum(times.get(f, 0.0) for f in a["fx"]))
    return graph


__all__ = ["profile_fx", "attach_times"]
