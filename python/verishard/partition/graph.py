"""Operator graphs: nodes with work per op class and an output tensor, edges carrying it.

An :class:`OpGraph` wraps a :class:`networkx.DiGraph`. Each node has

* ``work``: amount of work per op class (``conv``/``matmul`` in FLOPs,
  ``elementwise``/``other`` in bytes touched), turned into seconds by a
  device's speed for that class (:mod:`verishard.partition.platform`);
* ``kernels``: how many kernels it launches (each pays the device's launch cost);
* ``shape``: its output tensor's shape (float32), carried by every out-edge;
* ``params``: bytes of weights it needs resident;
* ``dp`` / ``mp``: whether it admits data parallelism (split on the batch
  dimension 0, input split the same way) and model parallelism (output split
  on dimension ``mp``, input replicated), or ``None``;
* ``pin``: a device name it must run on (the input and output live on the host), or None;
* ``time``: optional measured seconds per device kind (the profiler's), used instead of ``work``;
* ``fx``: the torch.fx node names it stands for.

>>> g = OpGraph.from_spec({"a": {"work": {"matmul": 2e9}, "shape": [8, 64]},
...                        "b": {"work": {"matmul": 1e9}, "shape": [8, 64]}}, [("a", "b")])
>>> g.topo(), g.bytes("a")
(['a', 'b'], 2048)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx

from ..errors import VerishardError

OP_CLASSES = ("conv", "matmul", "elementwise", "other")
ELEMENT_BYTES = 4


class PartitionError(VerishardError):
    """Bad input to the partitioner (graph, platform, options): one clear line."""


@dataclass
class OpGraph:
    g: nx.DiGraph
    name: str = "graph"
    meta: dict = field(default_factory=dict)

    # -- construction -------------------------------------------------------
    @staticmethod
    def from_spec(nodes: Mapping[str, Mapping], edges: Iterable[tuple[str, str]], name: str = "graph") -> "OpGraph":
        """A graph from plain data (``nodes``: name -> attributes; ``edges``: pairs); validated."""
        g = nx.DiGraph()
        for n, a in nodes.items():
            g.add_node(n, **_node_attrs(n, a))
        for u, v in edges:
            for x in (u, v):
                if x not in g:
                    raise PartitionError(f"edge ({u!r}, {v!r}) names unknown node {x!r}")
            g.add_edge(u, v)
        out = OpGraph(g, name)
        out.validate()
        return out

    def validate(self) -> None:
        """Raise :class:`PartitionError` on a cycle, a negative or non-finite cost, or a bad shape.

        >>> OpGraph.from_spec({"a": {}, "b": {}}, [("a", "b"), ("b", "a")])
        Traceback (most recent call last):
        ...
        verishard.partition.graph.PartitionError: the graph has a cycle: a -> b -> a
        """
        if not nx.is_directed_acyclic_graph(self.g):
            cyc = [u for u, _ in nx.find_cycle(self.g)]
            raise PartitionError("the graph has a cycle: " + " -> ".join(map(str, cyc + cyc[:1])))
        for n, a in self.g.nodes(data=True):
            for c, w in a["work"].items():
                if c not in OP_CLASSES:
                    raise PartitionError(f"node {n!r}: unknown op class {c!r} (known: {', '.join(OP_CLASSES)})")
                if not (isinstance(w, (int, float)) and math.isfinite(w) and w >= 0):
                    raise PartitionError(f"node {n!r}: work for {c!r} must be a finite number >= 0, not {w!r}")
            for k, t in a.get("time", {}).items():
                if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
                    raise PartitionError(f"node {n!r}: time on {k!r} must be a finite number >= 0, not {t!r}")
            if a["params"] < 0 or a["kernels"] < 0:
                raise PartitionError(f"node {n!r}: params and kernels must be >= 0")
            if any((not isinstance(s, int)) or s < 1 for s in a["shape"]):
                raise PartitionError(f"node {n!r}: shape must be positive integers, not {a['shape']!r}")

    # -- queries ------------------------------------------------------------
    def topo(self) -> list:
        return list(nx.lexicographical_topological_sort(self.g, key=str))

    def bytes(self, n) -> int:
        return math.prod(self.g.nodes[n]["shape"]) * ELEMENT_BYTES

    def __len__(self) -> int:
        return self.g.number_of_nodes()

    @property
    def nodes(self):
        return self.g.nodes

    def total_params(self) -> int:
        return sum(a["params"] for _, a in self.g.nodes(data=True))

    def coarsened(self) -> "OpGraph":
        """Contract cheap operators into a neighbour (``u -> v`` where u has one consumer,
        v one producer, neither is pinned and at most one of them does conv/matmul work):
        work and kernels add, the output is v's.
        Model parallelism survives only if v's part is channel-wise (keeps u's split dimension).

        >>> g = OpGraph.from_spec({"a": {"work": {"conv": 9}}, "b": {"work": {"elementwise": 1}},
        ...                        "c": {"work": {"conv": 9}}, "d": {"work": {"conv": 9}}},
        ...                       [("a", "b"), ("b", "c"), ("c", "d")])
        >>> g.coarsened().topo()
        ['a..b', 'c', 'd']
        """
        g = self.g.copy()
        changed = True
        while changed:
            changed = False
            for u in list(nx.topological_sort(g)):
                if u not in g or g.nodes[u]["pin"] is not None or g.out_degree(u) != 1:
                    continue
                (v,) = g.successors(u)
                if g.in_degree(v) != 1 or g.nodes[v]["pin"] is not None or (_heavy(g.nodes[u]) and _heavy(g.nodes[v])):
                    continue
                _merge(g, u, v)
                changed = True
                break
        return OpGraph(g, self.name, dict(self.meta))


def _heavy(a) -> bool:
    return a["work"].get("conv", 0) > 0 or a["work"].get("matmul", 0) > 0


def _merge(g: nx.DiGraph, u, v) -> None:
    a, b = g.nodes[u], g.nodes[v]
    work = dict(a["work"])
    for c, w in b["work"].items():
        work[c] = work.get(c, 0) + w
    time = {}
    for k in set(a.get("time", {})) & set(b.get("time", {})):
        time[k] = a["time"][k] + b["time"][k]
    if _heavy(b):  # a cheap producer (elementwise on the replicated input) absorbed by v
        mp = b["mp"] if a.get("channelwise") or not _heavy(a) else None
    else:
        mp = a["mp"] if (a["mp"] is not None and b.get("channelwise") and b["shape"] == a["shape"]) else None
    dp = 0 if (a["dp"] == 0 and b["dp"] == 0) else None
    fx = a["fx"] + b["fx"]
    name = f"{fx[0]}..{fx[-1]}" if len(fx) > 1 else f"{u}+{v}"
    attrs = dict(work=work, kernels=a["kernels"] + b["kernels"], shape=b["shape"], params=a["params"] + b["params"],
                 dp=dp, mp=mp, pin=None, fx=a["fx"] + b["fx"], op=b["op"] if _heavy(b) else a["op"], channelwise=False)
    if time:
        attrs["time"] = time
    preds, succs = list(g.predecessors(u)), list(g.successors(v))
    g.remove_nodes_from([u, v])
    g.add_node(name, **attrs)
    g.add_edges_from((p, name) for p in preds)
    g.add_edges_from((name, s) for s in succs)


def _node_attrs(n, a: Mapping) -> dict:
    known = {"work", "kernels", "shape", "params", "dp", "mp", "pin", "time", "fx", "op", "channelwise"}
    extra = set(a) - known
    if extra:
        raise PartitionError(f"node {n!r}: unknown key {sorted(extra)[0]!r} (known: {', '.join(sorted(known))})")
    work = dict(a.get("work", {}))
    shape = tuple(a.get("shape", (1,)))
    out = dict(work=work, kernels=a.get("kernels", 1 if work else 0), shape=shape, params=a.get("params", 0),
               dp=a.get("dp"), mp=a.get("mp"), pin=a.get("pin"), fx=list(a.get("fx", [str(n)])),
               op=a.get("op", max(work, key=work.get) if work else "io"), channelwise=a.get("channelwise", False))
    if "time" in a:
        out["time"] = dict(a["time"])
    return out


# ---------------------------------------------------------------------------
# torch.fx


def _flops_and_class(name: str, mod, in_shapes, out_shape) -> tuple[dict, int, int | None, bool, int]:
    """(work per class, param bytes, mp dimension or None, channel-wise?, kernels) for one fx node."""
    import torch.nn as nn

    numel = math.prod(out_shape) if out_shape else 1
    in_numel = sum(math.prod(s) for s in in_shapes if s is not None)
    touched = (numel + in_numel) * ELEMENT_BYTES
    if mod is not None:
        params = sum(p.numel() for p in mod.parameters(recurse=True)) * ELEMENT_BYTES
        if isinstance(mod, nn.Conv2d):
            k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
            return {"conv": 2.0 * k * numel}, params, 1, False, 1
        if isinstance(mod, nn.Linear):
            return {"matmul": 2.0 * mod.in_features * numel}, params, len(out_shape) - 1, False, 1
        channelwise = isinstance(mod, (nn.BatchNorm2d, nn.ReLU, nn.GELU, nn.Dropout, nn.Identity, nn.SiLU))
        return {"elementwise": float(touched)}, params, None, channelwise, 1
    if name in ("matmul", "bmm", "mm", "__matmul__"):
        k = in_shapes[0][-1]
        return {"matmul": 2.0 * k * numel}, 0, None, False, 1
    if name in ("view", "reshape", "flatten", "transpose", "permute", "contiguous", "size", "getitem", "chunk",
                "split", "unsqueeze", "squeeze", "unflatten"):
        return {"other": float(numel * ELEMENT_BYTES) * 0.0}, 0, None, name in ("contiguous",), 0
    channelwise = name in ("relu", "add", "mul", "gelu", "iadd", "sigmoid")
    return {"elementwise": float(touched)}, 0, None, channelwise, 1


def from_fx(model, example, name: str | None = None, host: str = "host") -> OpGraph:
    """Trace ``model`` with :func:`torch.fx.symbolic_trace`, propagate shapes with
    :class:`torch.fx.passes.shape_prop.ShapeProp` on ``example`` and build the graph:
    one node per fx node that computes (placeholders and the output are pinned to ``host``;
    ``get_attr`` and non-tensor nodes are rejected).

    >>> import torch
    >>> g = from_fx(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), torch.zeros(2, 4))
    >>> g.topo(), g.nodes["_0"]["work"], g.nodes["_0"]["mp"]
    (['input_1', '_0', '_1', 'output'], {'matmul': 128.0}, 1)
    """
    import torch
    import torch.fx as fx
    from torch.fx.passes.shape_prop import ShapeProp

    gm = fx.symbolic_trace(model)
    with torch.no_grad():
        ShapeProp(gm).propagate(example)
    modules = dict(gm.named_modules())
    g = nx.DiGraph()
    shapes = {}
    for node in gm.graph.nodes:
        tm = node.meta.get("tensor_meta")
        if node.op == "output":
            arg = node.args[0]
            src = arg if isinstance(arg, fx.Node) else None
            if src is None:
                raise PartitionError("only models returning one tensor are supported")
            g.add_node("output", **_node_attrs("output", {"shape": shapes[src.name], "pin": host, "fx": []}))
            g.add_edge(src.name, "output")
            continue
        if tm is None or not hasattr(tm, "shape"):
            raise PartitionError(f"fx node {node.name!r} ({node.op} {node.target}) does not produce one tensor")
        shape = tuple(int(s) for s in tm.shape) or (1,)
        shapes[node.name] = shape
        if node.op == "placeholder":
            g.add_node(node.name, **_node_attrs(node.name, {"shape": shape, "pin": host}))
            continue
        if node.op == "get_attr":
            raise PartitionError(f"fx node {node.name!r} reads an attribute; write the model with modules")
        preds = [a for a in node.all_input_nodes]
        mod = modules[node.target] if node.op == "call_module" else None
        target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
        work, params, mp, channelwise, kernels = _flops_and_class(target, mod, [shapes[p.name] for p in preds], shape)
        if mp is not None and shape[mp] < 2:
            mp = None
        g.add_node(node.name, **_node_attrs(node.name, {
            "work": work, "kernels": kernels, "shape": shape, "params": params, "dp": 0, "mp": mp,
            "channelwise": channelwise, "fx": [node.name]}))
        for p in preds:
            g.add_edge(p.name, node.name)
    out = OpGraph(g, name or type(model).__name__, {"gm": gm, "example": example})
    out.validate()
    return out


# ---------------------------------------------------------------------------
# Randomly wired DAGs (RandWire: Xie et al. 2019)


def random_dag(kind: str, n: int, seed: int, k: int = 4, p: float = 0.75) -> nx.DiGraph:
    """A RandWire DAG: an undirected Watts-Strogatz (``ws``, k neighbours, rewiring p)
    or Erdos-Renyi (``er``, edge probability p) graph from networkx, edges oriented
    from lower to higher node index; one input node and one output node added.

    >>> d = random_dag("ws", 8, seed=1)
    >>> nx.is_directed_acyclic_graph(d), d.number_of_nodes()
    (True, 10)
    """
    if kind == "ws":
        u = nx.connected_watts_strogatz_graph(n, k, p, seed=seed)
    elif kind == "er":
        u = nx.gnp_random_graph(n, p, seed=seed)
    else:
        raise PartitionError(f"unknown random graph kind {kind!r} (ws or er)")
    d = nx.DiGraph()
    d.add_nodes_from(range(n))
    d.add_edges_from((min(a, b), max(a, b)) for a, b in u.edges())
    srcs = [v for v in range(n) if d.in_degree(v) == 0]
    sinks = [v for v in range(n) if d.out_degree(v) == 0]
    d.add_edges_from(("in", v) for v in srcs)
    d.add_edges_from((v, "out") for v in sinks)
    return d


__all__ = ["OP_CLASSES", "ELEMENT_BYTES", "PartitionError", "OpGraph", "from_fx", "random_dag"]
